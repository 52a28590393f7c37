"""Soak test of a long pre-training run: does anything grow that should not?

Not a test. Trains `tiny` on the offline demo corpus (what `run_pretraining.py` does without
--data_dir) for `--steps` steps, as one or more `run_pretraining.py` invocations that continue the
same --model_dir, so a long soak can be split over sessions: re-running the same command resumes
the run and appends to the same result file. Every `--sample_every` steps it records, for the
training process: resident memory (RSS), open file descriptors, the seconds per step over the last
log window, and the sizes of the TensorBoard event files, the checkpoint folder and
train_log.jsonl. `--max_minutes` ends this invocation's piece with SIGTERM (the run checkpoints the
step reached and exits 0), so a session can stop in time.

    python -m bench.soak --steps=20000 --sample_every=500 --work_dir=bench/results/scratch/soak
    python -m bench.soak --steps=2000 --sample_every=250 --work_dir=/tmp/soak --max_minutes=20

The result (bench/results/soak-<name>.json) holds the samples and a summary: RSS at step 1000 and at
the end (the acceptance: within 10 %), the spread of the fd count, and each file's growth per 1000
steps. The logs and event files grow linearly by design (one record per log step); RSS and fds
should stay flat once the run is warm.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RSS_REFERENCE_STEP = 1000  # well past tracing and the first checkpoints: the run's warm footprint
RSS_TOLERANCE = 0.10
STOP = {"requested": False}  # set by SIGTERM/Ctrl-C: no further piece starts


def rss_bytes(pid: int) -> int | None:
    """Resident memory of `pid` (psutil if installed, else /proc/<pid>/status VmRSS)."""
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 -- the process ended between two samples
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def folder_bytes(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:  # a checkpoint file replaced while walking
                pass
    return total


def file_bytes(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


class LogTail:
    """New complete lines of train_log.jsonl since the last call."""

    def __init__(self, path: str):
        self.path, self.offset = path, file_bytes(path)

    def records(self) -> list[dict]:
        if not os.path.exists(self.path):
            return []
        with open(self.path) as f:
            f.seek(self.offset)
            text = f.read()
        complete = text[:text.rfind("\n") + 1]
        self.offset += len(complete.encode())
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


def logged_step(model_dir: str) -> int:
    """The last step train_log.jsonl records (0 for a new run)."""
    path = os.path.join(model_dir, "train_log.jsonl")
    step = 0
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    step = json.loads(line)["step"]
    return step


def sample(pid: int, record: dict, model_dir: str, batch_size: int, piece: int) -> dict:
    eps = record.get("examples_per_second")
    return {
        "step": record["step"], "time": round(time.time(), 1), "piece": piece,
        "rss_bytes": rss_bytes(pid), "open_fds": open_fds(pid),
        "step_seconds": round(batch_size / eps, 5) if eps else None,
        "event_bytes": folder_bytes(os.path.join(model_dir, "train")),
        "checkpoint_bytes": folder_bytes(os.path.join(model_dir, "checkpoints")),
        "train_log_bytes": file_bytes(os.path.join(model_dir, "train_log.jsonl")),
    }


def load_result(path: str, settings: dict) -> dict:
    if os.path.exists(path):
        with open(path) as f:
            result = json.load(f)
        if result["settings"]["model_dir"] != settings["model_dir"]:
            sys.exit(f"soak: {path} belongs to --work_dir {result['settings']['model_dir']}; use another --name")
        return result
    return {"settings": settings, "pieces": [], "samples": []}


def save_result(path: str, result: dict) -> None:
    result["summary"] = summarize(result["samples"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def summarize(samples: list[dict]) -> dict:
    """RSS at the reference step vs the last sample, fd spread, and growth per 1000 steps."""
    if len(samples) < 2:
        return {}
    last = samples[-1]
    reference = next((s for s in samples if s["step"] >= RSS_REFERENCE_STEP and s["rss_bytes"]), None)
    summary = {"first_step": samples[0]["step"], "last_step": last["step"], "pieces": len({s["piece"] for s in samples})}
    if reference and last["rss_bytes"] and last["step"] > reference["step"]:
        change = last["rss_bytes"] / reference["rss_bytes"] - 1
        summary.update(rss_reference_step=reference["step"], rss_reference_mib=round(reference["rss_bytes"] / 2**20, 1),
                       rss_last_mib=round(last["rss_bytes"] / 2**20, 1), rss_change=round(change, 4),
                       rss_within_tolerance=abs(change) <= RSS_TOLERANCE)
    summary["rss_by_piece"] = rss_by_piece(samples)
    fds = [s["open_fds"] for s in samples if s["open_fds"] is not None and s["step"] >= RSS_REFERENCE_STEP]
    if fds:
        summary.update(fds_min=min(fds), fds_max=max(fds))
    times = [s["step_seconds"] for s in samples if s["step_seconds"]]
    if times:
        summary.update(step_seconds_first=times[0], step_seconds_last=times[-1])
    span = (last["step"] - samples[0]["step"]) / 1000
    for key in ("event_bytes", "checkpoint_bytes", "train_log_bytes"):
        summary[f"{key}_last"] = last[key]
        summary[f"{key}_per_1000_steps"] = round((last[key] - samples[0][key]) / span) if span else None
    return summary


def rss_by_piece(samples: list[dict]) -> list[dict]:
    """Each piece's (process's) RSS at its first and last sample: growth within one process, which a
    comparison across pieces (each a new process) could hide."""
    pieces = []
    for piece in sorted({s["piece"] for s in samples}):
        own = [s for s in samples if s["piece"] == piece and s["rss_bytes"]]
        if len(own) >= 2:
            first, last = own[0], own[-1]
            pieces.append({"piece": piece, "first_step": first["step"], "last_step": last["step"],
                           "first_mib": round(first["rss_bytes"] / 2**20, 1),
                           "last_mib": round(last["rss_bytes"] / 2**20, 1),
                           "change": round(last["rss_bytes"] / first["rss_bytes"] - 1, 4)})
    return pieces


def summary_lines(summary: dict) -> list[str]:
    if not summary:
        return ["soak: fewer than two samples so far"]
    lines = [f"soak: steps {summary.get('first_step')}-{summary.get('last_step')} in {summary.get('pieces')} piece(s)"]
    if "rss_change" in summary:
        verdict = "OK" if summary["rss_within_tolerance"] else f"GREW beyond {RSS_TOLERANCE:.0%}"
        lines.append(f"RSS: {summary['rss_reference_mib']} MiB at step {summary['rss_reference_step']}, "
                     f"{summary['rss_last_mib']} MiB at step {summary['last_step']} ({summary['rss_change']:+.1%}): "
                     f"{verdict}")
    for piece in summary.get("rss_by_piece", []):
        lines.append(f"  piece {piece['piece']} (one process): {piece['first_mib']} MiB at step {piece['first_step']}, "
                     f"{piece['last_mib']} MiB at step {piece['last_step']} ({piece['change']:+.1%})")
    if "fds_min" in summary:
        lines.append(f"open fds from step {RSS_REFERENCE_STEP}: {summary['fds_min']}-{summary['fds_max']}"
                     f" ({'flat' if summary['fds_max'] == summary['fds_min'] else 'varies'})")
    if "step_seconds_first" in summary:
        lines.append(f"seconds per step: {summary['step_seconds_first']} first window, "
                     f"{summary['step_seconds_last']} last window")
    for key, what in (("event_bytes", "TensorBoard events"), ("checkpoint_bytes", "checkpoints"),
                      ("train_log_bytes", "train_log.jsonl")):
        lines.append(f"{what}: {summary[f'{key}_last']:,} bytes, {summary[f'{key}_per_1000_steps']:+,} per 1000 steps")
    return lines


def training_command(args, stop_at: int) -> list[str]:
    command = [sys.executable, os.path.join(ROOT, "run_pretraining.py"), "--model_size=tiny",
               f"--model_dir={os.path.abspath(args.work_dir)}/model", f"--num_train_steps={args.steps}",
               f"--stop_after_steps={stop_at}", f"--log_steps={args.log_steps}",
               f"--save_checkpoints_steps={args.save_checkpoints_steps}"]
    return command + args.extra


def run_piece(args, result: dict, result_path: str, deadline: float) -> int:
    """One run_pretraining.py invocation up to the next piece boundary; returns its exit status."""
    model_dir = os.path.join(args.work_dir, "model")
    start = logged_step(model_dir)
    stop_at = min(args.steps, start + args.piece_steps)
    piece = len(result["pieces"])
    os.makedirs(args.work_dir, exist_ok=True)
    log_path = os.path.join(args.work_dir, f"piece-{piece}.log")
    tail = LogTail(os.path.join(model_dir, "train_log.jsonl"))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
    print(f"soak: piece {piece}: steps {start}-{stop_at} (log {log_path})", flush=True)
    with open(log_path, "w") as log:
        # cwd: the demo corpus is built (once) under the work dir, as run_pretraining.py does in its cwd.
        process = subprocess.Popen(training_command(args, stop_at), cwd=args.work_dir, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
    result["pieces"].append({"piece": piece, "from_step": start, "to_step": stop_at, "started": time.time()})
    forward_stop_signals(process)
    batch_size, stopping = None, False
    while process.poll() is None:
        time.sleep(1.0)
        for record in tail.records():
            if record["step"] % args.sample_every == 0:
                batch_size = batch_size or run_batch_size(model_dir)
                result["samples"].append(sample(process.pid, record, model_dir, batch_size, piece))
                save_result(result_path, result)
        if not stopping and time.time() > deadline:
            print("soak: --max_minutes reached: stopping the piece (it checkpoints and exits)", flush=True)
            process.send_signal(signal.SIGTERM)
            stopping = True
    result["pieces"][-1].update(ended=time.time(), exit_status=process.returncode, reached=logged_step(model_dir))
    save_result(result_path, result)
    return process.returncode


def forward_stop_signals(process) -> None:
    """SIGTERM or Ctrl-C to the soak stops the training piece the same way (a checkpoint, exit 0), so no
    orphaned run keeps writing to the model dir."""

    def forward(signum, frame):
        STOP["requested"] = True
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)


def run_batch_size(model_dir: str) -> int:
    with open(os.path.join(model_dir, "run_config.json")) as f:
        return json.load(f)["train_batch_size"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Arguments after -- go to run_pretraining.py.")
    parser.add_argument("--steps", type=int, default=20000, help="Total training steps of the soak.")
    parser.add_argument("--sample_every", type=int, default=500, help="Sample every this many steps.")
    parser.add_argument("--piece_steps", type=int, default=5000,
                        help="Steps per run_pretraining.py invocation (each resumes the last).")
    parser.add_argument("--log_steps", type=int, default=100, help="run_pretraining.py --log_steps.")
    parser.add_argument("--save_checkpoints_steps", type=int, default=1000)
    parser.add_argument("--work_dir", default=os.path.join(ROOT, "bench", "results", "scratch", "soak"),
                        help="The demo corpus, the run's --model_dir and the pieces' logs.")
    parser.add_argument("--name", default="tiny", help="The result is bench/results/soak-<name>.json.")
    parser.add_argument("--max_minutes", type=float, default=None,
                        help="Stop this invocation after this long (resume later with the same command).")
    args, extra = parser.parse_known_args(argv)
    args.extra = [a for a in extra if a != "--"]
    if args.sample_every % args.log_steps:
        parser.error("--sample_every must be a multiple of --log_steps (samples are taken at logged steps)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    args.work_dir = os.path.abspath(args.work_dir)
    result_path = os.path.join(ROOT, "bench", "results", f"soak-{args.name}.json")
    settings = {"steps": args.steps, "sample_every": args.sample_every, "piece_steps": args.piece_steps,
                "log_steps": args.log_steps, "model_dir": os.path.join(args.work_dir, "model"),
                "extra_flags": args.extra, "cpu_count": os.cpu_count()}
    result = load_result(result_path, settings)
    deadline = time.time() + 60 * args.max_minutes if args.max_minutes else float("inf")
    model_dir = os.path.join(args.work_dir, "model")
    while logged_step(model_dir) < args.steps and time.time() < deadline and not STOP["requested"]:
        status = run_piece(args, result, result_path, deadline)
        if status != 0:
            print(f"soak: run_pretraining.py exited {status}; see {args.work_dir}/piece-*.log", file=sys.stderr)
            return status
    for line in summary_lines(result.get("summary") or summarize(result["samples"])):
        print(line)
    print(f"soak: result in {result_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
