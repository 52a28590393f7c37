r"""Score against pre-training compute for rtd and mlm: the paper's Figure 1 in miniature.

    python -m experiments.efficiency_curve --arms=rtd,mlm        # hours per arm; stops and resumes
    python -m experiments.efficiency_curve --stage=report        # the curve, table and ratio from committed JSON

Each arm (`rtd`, `mlm`) pre-trains the objectives experiment's `mini` shape once, for 4× that
experiment's budget in FLOPs (rtd: 6000 steps × 128 = 768k examples; mlm: the steps that spend the
same FLOPs), with the same data, seed, warm-up (150 steps) and peak learning rate, the learning rate
decaying linearly over the whole run. The run stops at five milestones, 1/4, 1/2, 1, 2 and 4 × the
objectives budget (48k, 96k, 192k, 384k and 768k rtd-equivalent examples); each milestone's
weights are kept (its export and checkpoint, outside the checkout) and fine-tuned with the
objectives protocol: STS-B and MRPC, 3 fine-tuning seeds at each learning rate of the 1e-4/3e-4
grid, each milestone reported at its own chosen learning rate (the better STS-B median).
`none` (no pre-training) is the objectives experiment's committed record: the floor.

The held-out curve along the run: WikiText-2's validation text (`../shared/data/pretrain/
wikitext-2`), Wikipedia the training shards do not hold, evaluated every 125 steps; the training
shards are the objectives experiment's (same build), so a milestone at 192k examples differs from
the objectives' decayed 192k run in the learning rate schedule alone.

Results survive the machine: each arm writes `docs/results/efficiency_curve/<arm>-pseed0.json`
(commits, compute, the pre-training and held-out curves, every milestone's fine-tuning results)
after every stage, small JSON meant to be committed as it arrives. SIGTERM (a sitting's end:
`timeout -s TERM 170m python -m experiments.efficiency_curve ...`) stops a pre-training at a
checkpoint of the step reached and writes the record; the next run resumes there. A run whose work
folder was lost (a new machine) restarts from step 0 with the same seed, and does not redo the
milestones its record already holds; the record's `pretrain_invocations` say which happened, and its
`restart_replays` how closely the restarted run replays the one before (their training and held-out
losses at the steps both logged). The report (`--stage=report`) is built from the committed records
alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from electra_tf.runtime import use_onednn_kernels
from electra_tf.text.manifest import write_text_atomic
from experiments import efficiency_report
from experiments.efficiency_milestones import (ARMS, MULTIPLES, PRETRAIN_SEED, TUNING_TASKS, Curve, Milestone,
                                               finetune_complete, milestone_budget, milestone_compute, milestone_steps,
                                               total_steps)
from experiments.lib import protocol, runner, workdir
from experiments.lib.records import collect_finetune, committed_curve, finished_results
from experiments.lib.runner import checkpoint_step
from experiments.provenance import git_commit, machine_line

ROOT = protocol.ROOT
RESULTS_DIR = protocol.RESULTS_DIR
WIKITEXT_VALID = protocol.DATA / "pretrain" / "wikitext-2" / "wiki.valid.tokens"
EVAL_EVERY_STEPS = 125
EVAL_CURVE_KEYS = ("step", "loss", "gen_loss", "disc_loss", "gen_accuracy", "disc_auc", "disc_accuracy")


# --------------------------------------------------------------------------- work folder

def build_eval_data(work_dir: Path) -> Path:
    """WikiText-2's validation text as a data_prep directory: the held-out set of the curve."""
    eval_dir = work_dir / "eval_data"
    if (eval_dir / "manifest.json").exists():
        return eval_dir
    runner.log(f"building the held-out shards in {eval_dir}")
    subprocess.run([sys.executable, "-m", "data_prep.build_pretraining_dataset", f"--input={WIKITEXT_VALID}",
                    "--input_format=text", f"--vocab_file={protocol.EN_VOCAB}", f"--output_dir={eval_dir}",
                    "--max_seq_length=128", "--num_processes=1", "--num_shards=1"], check=True, cwd=ROOT)
    return eval_dir


def pretrain_command(curve: Curve, arm: str, data_dir: Path, eval_dir: Path, stop_after: int) -> list[str]:
    """The objectives' pre-training command at 4× the budget, stopping at `stop_after`, with the held-out curve."""
    budget = milestone_budget(curve.budget, MULTIPLES[-1])
    command = runner.pretrain_command(budget, protocol.Run(arm, PRETRAIN_SEED), data_dir, curve.model_dir(arm))
    return command + [f"--stop_after_steps={stop_after}", f"--eval_data_dir={eval_dir}",
                      f"--eval_every_steps={EVAL_EVERY_STEPS}"]


def pretrain_to(curve: Curve, arm: str, steps: int, data_dir: Path, eval_dir: Path) -> bool:
    """Runs (or resumes) the arm's pre-training up to `steps` and logs the piece; returns whether it got there.

    SIGTERM (a sitting's end, a scheduler, `timeout -s TERM`) stops it cleanly: the pre-training checkpoints the
    step it reached and exits, and the piece is logged as stopped there (`"stopped": "signal"`), so the record
    tells where the next run resumes. A piece killed outright is logged by the next run, which finds its
    checkpoint past the last logged piece (`log_unlogged_piece`)."""
    model_dir = curve.model_dir(arm)
    model_dir.mkdir(parents=True, exist_ok=True)
    command = pretrain_command(curve, arm, data_dir, eval_dir, steps)
    start = checkpoint_step(model_dir)
    run_id(curve, arm)
    log_unlogged_piece(curve, arm, start)
    runner.log(f"[{arm}] pre-training from step {start} to {steps} of {total_steps(curve.budget, arm)}: "
                   f"{' '.join(command[1:])}")
    started = time.time()
    with StopSignal() as stop, open(model_dir / "stdout.log", "a") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        runner.watch_pretraining(process, model_dir, arm, steps, start, stop_reason=stop.reason, poll_seconds=1)
    if process.returncode != 0 and not stop.received:
        raise RuntimeError(f"[{arm}] pre-training failed (exit {process.returncode}); see {model_dir / 'stdout.log'}")
    piece = {"from_step": start, "to_step": checkpoint_step(model_dir), "commit": git_commit(protocol.CODE_PATHS),
             "seconds": round(time.time() - started, 1), "date": time.strftime("%Y-%m-%d"), "machine": machine_line()}
    if stop.received:
        piece["stopped"] = "signal"
    append_piece(curve, arm, piece)
    return piece["to_step"] == steps and not stop.received


class StopSignal:
    """Within the block, SIGTERM sets `received` instead of ending the process (main thread only)."""

    def __init__(self):
        self.received: Optional[str] = None
        self._previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc_info):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _handle(self, signum, frame):
        self.received = signal.Signals(signum).name

    def reason(self) -> Optional[str]:
        return self.received and f"{self.received} received"


def pieces_path(curve: Curve, arm: str) -> Path:
    return curve.arm_dir(arm) / "invocations.jsonl"


def append_piece(curve: Curve, arm: str, piece: dict) -> None:
    with open(pieces_path(curve, arm), "a") as f:
        f.write(json.dumps(piece) + "\n")


def log_unlogged_piece(curve: Curve, arm: str, start: int) -> None:
    """A piece killed before it could log itself (SIGKILL, a crash, a machine stopped) left a checkpoint past the
    last logged piece of this work folder (or past step 0 in a new one): log it as stopped there, its commit and
    duration unknown."""
    pieces = workdir.read_jsonl(pieces_path(curve, arm))
    end = pieces[-1]["to_step"] if pieces else 0
    if start > end:
        checkpoint = curve.model_dir(arm) / "checkpoints" / "checkpoint"
        append_piece(curve, arm, {"from_step": end, "to_step": start, "stopped": "unlogged",
                                  "date": time.strftime("%Y-%m-%d", time.localtime(checkpoint.stat().st_mtime))})


def run_id_path(curve: Curve, arm: str) -> Path:
    return curve.arm_dir(arm) / "run_id"


def run_id(curve: Curve, arm: str) -> str:
    """The identity of the work folder's run (when its first logged piece started): a record's curves come from
    one run, and a restarted run (a new work folder, step 0, the same seed) is told apart from the one before."""
    path = run_id_path(curve, arm)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(str(path), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return path.read_text().strip()


def keep_milestone(curve: Curve, milestone: Milestone, steps: int) -> Path:
    """Moves the export written at `steps` and copies that step's checkpoint into the milestone's folder
    (the run keeps only its newest checkpoints). Returns the milestone's export."""
    model_dir, target = curve.model_dir(milestone.arm), curve.milestone_dir(milestone)
    export = model_dir / "export"
    written = json.loads((export / "electra_config.json").read_text()).get("step") if export.exists() else None
    if written != steps or checkpoint_step(model_dir) != steps:
        raise RuntimeError(f"[{milestone.name}] {model_dir} holds no export and checkpoint at step {steps} "
                           f"(export at {written}, checkpoint at {checkpoint_step(model_dir)})")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "checkpoint").mkdir(parents=True)
    for path in (model_dir / "checkpoints").glob(f"ckpt-{steps}.*"):
        shutil.copy2(path, partial / "checkpoint" / path.name)
    (partial / "checkpoint" / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{steps}"\n')
    shutil.move(str(export), partial / "export")
    (partial / "milestone.json").write_text(json.dumps({"steps": steps, "export_step": written}))
    partial.rename(target)
    return target / "export"


# --------------------------------------------------------------------------- the committed record

def milestone_record(curve: Curve, milestone: Milestone, committed: dict) -> dict:
    """The milestone's compute and fine-tuning results; results the work folder lacks come from `committed`."""
    entry = {**committed, **milestone_compute(curve.budget, milestone.arm, milestone.multiple)}
    finetune = collect_finetune(curve.budget, milestone, curve.work_dir)
    entry["finetune"] = {task: {**committed.get("finetune", {}).get(task, {}), **finetune.get(task, {})}
                         for task in sorted(set(finetune) | set(committed.get("finetune", {})))}
    results = finished_results(curve.work_dir, milestone)
    if results:
        entry["finetune_commits"] = sorted({r.get("commit", "unknown") for r in results}
                                           | set(committed.get("finetune_commits", [])))
        entry["finetune_seconds"] = max(committed.get("finetune_seconds", 0.0),
                                        sum(r.get("seconds", 0.0) for r in results))
    kept = curve.milestone_dir(milestone) / "milestone.json"
    if kept.exists():
        entry["export_step"] = json.loads(kept.read_text())["export_step"]
    return entry


def write_record(curve: Curve, arm: str) -> Path:
    """The arm's record from its work folder, keeping what only the committed record still holds."""
    committed = curve.read_record(arm)
    model_dir = curve.model_dir(arm)
    committed_milestones = committed.get("milestones", {})
    milestones = {f"{m:g}": milestone_record(curve, Milestone(arm, m), committed_milestones.get(f"{m:g}", {}))
                  for m in MULTIPLES}
    invocations = _merge(committed.get("pretrain_invocations", []), workdir.read_jsonl(pieces_path(curve, arm)))
    record = {
        "arm": arm, "pretrain_seed": PRETRAIN_SEED, "budget": curve.budget.name, "hparams": protocol.ARMS[arm],
        "total_steps": total_steps(curve.budget, arm), "warmup_steps": curve.budget.warmup_steps,
        "train_batch_size": curve.budget.train_batch_size, "updated": time.strftime("%Y-%m-%d"),
        "machine": machine_line(), "milestones": milestones, "pretrain_invocations": invocations,
        "pretrain_commits": sorted({i["commit"] for i in invocations if "commit" in i}),
        **run_curves(committed, work_run(curve, arm), piece_bounds(invocations), curve.budget.save_checkpoints_steps),
    }
    workdir.write_json_atomic(curve.record_path(arm), record)
    return curve.record_path(arm)


def work_run(curve: Curve, arm: str) -> dict:
    """The work folder's run: its id (None before its first piece) and its training and held-out curves."""
    model_dir = curve.model_dir(arm)
    evals = workdir.read_jsonl(model_dir / "eval_log.jsonl")
    run = run_id_path(curve, arm)
    return {"id": run.read_text().strip() if run.exists() else None,
            "pretrain_curve": committed_curve(workdir.read_train_log(model_dir)),
            "eval_curve": [{k: round(r[k], 6) if isinstance(r[k], float) else r[k] for k in EVAL_CURVE_KEYS
                            if k in r} for r in evals]}


def run_curves(committed: dict, work: dict, bounds: set = frozenset(), log_steps: int = 1) -> dict:
    """The record's curves and whose run they are, and how a restarted run replays the one before.

    A new work folder restarts the run from step 0 with the same seed; the committed curves (the run before)
    stay until the new run's training curve is as long, and both curves then switch to it together. Until
    then each write compares the two runs at the steps both logged (`restart_replays`, one entry per
    restarted run, kept at its furthest comparison): a replay that matches says the milestones of both runs
    belong to one trajectory. The held-out losses compare at every shared evaluation (the model at that step);
    a training-curve point is the mean over its `log_steps` window, which a piece starting or stopping inside
    it (`bounds`) cuts short, so such windows are left out."""
    committed_run = committed.get("pretrain_run")  # None in records written before runs had ids
    replays = list(committed.get("restart_replays", []))
    old_curve, old_evals = committed.get("pretrain_curve", []), committed.get("eval_curve", [])
    if work["id"] and work["id"] != committed_run and work["pretrain_curve"] and old_curve:
        whole = [row for row in work["pretrain_curve"]
                 if not any(row["step"] - log_steps < b < row["step"] for b in bounds)]
        check = {"run": work["id"], "against": committed_run or "the first run",
                 **compare_runs(whole, old_curve, "loss"),
                 "windows_cut_by_a_piece": len(work["pretrain_curve"]) - len(whole),
                 **{f"eval_{k}": v for k, v in compare_runs(work["eval_curve"], old_evals, "loss").items()}}
        earlier = next((r for r in replays if r["run"] == work["id"]), None)
        if earlier is None or check["through_step"] >= earlier["through_step"]:
            replays = [r for r in replays if r is not earlier] + [check]
    use_work = bool(work["pretrain_curve"]) and len(work["pretrain_curve"]) >= len(old_curve)
    curves = ({"pretrain_curve": work["pretrain_curve"], "eval_curve": work["eval_curve"], "pretrain_run": work["id"]}
              if use_work else {"pretrain_curve": old_curve, "eval_curve": old_evals, "pretrain_run": committed_run})
    return {**curves, **({"restart_replays": replays} if replays else {})}


def piece_bounds(pieces: list[dict]) -> set:
    """The steps where a piece of either run started or stopped (a process began or ended its curve window)."""
    return {piece[key] for piece in pieces for key in ("from_step", "to_step")}


def compare_runs(new: list[dict], old: list[dict], key: str) -> dict:
    """`key` of two runs' curves at the steps both logged: how many, up to which, and the largest difference."""
    old_by_step = {row["step"]: row[key] for row in old if key in row}
    shared = [(row["step"], abs(row[key] - old_by_step[row["step"]])) for row in new
              if key in row and row["step"] in old_by_step]
    return {"steps_compared": len(shared), "through_step": max((s for s, _ in shared), default=0),
            f"max_abs_{key}_difference": round(max((d for _, d in shared), default=0.0), 6)}


def _merge(committed: list, work: list) -> list:
    seen = {json.dumps(i, sort_keys=True) for i in committed}
    return committed + [i for i in work if json.dumps(i, sort_keys=True) not in seen]


# --------------------------------------------------------------------------- running an arm

def run_arm(curve: Curve, arm: str, data_dir: Path, eval_dir: Path, stage: str, jobs: int) -> None:
    """Each milestone in turn: pre-train to it, keep it, fine-tune it. A milestone the record holds in
    full is skipped (the pre-training passes through it on the way to the next)."""
    budget = curve.budget
    progress = runner.Progress(len(MULTIPLES) * len(TUNING_TASKS) * len(budget.learning_rates) * len(budget.seeds),
                                   jobs)
    recorder = _Recorder(curve, arm)
    for multiple in MULTIPLES:
        milestone = Milestone(arm, multiple)
        if finetune_complete(budget, curve.read_record(arm).get("milestones", {}).get(f"{multiple:g}", {})):
            continue
        export = curve.milestone_dir(milestone) / "export"
        if not (export / "electra_config.json").exists():
            steps = milestone_steps(budget, arm, multiple)
            if checkpoint_step(curve.model_dir(arm)) > steps:
                raise RuntimeError(f"[{milestone.name}] the run is past step {steps} but the milestone was not "
                                   f"kept; move {curve.arm_dir(arm)} aside to start the arm again")
            if not pretrain_to(curve, arm, steps, data_dir, eval_dir):
                write_record(curve, arm)
                runner.log(f"[{arm}] stopped at step {checkpoint_step(curve.model_dir(arm))}; the record "
                               f"{curve.record_path(arm)} says so. Rerun the same command to resume there.")
                raise SystemExit(128 + signal.SIGTERM)
            keep_milestone(curve, milestone, steps)
            write_record(curve, arm)
            runner.log(f"[{milestone.name}] kept at step {steps}; record {curve.record_path(arm)}")
        if stage == "pretrain":
            continue
        runs = [(milestone.name, task, lr, seed, recorder.finetune_fn(milestone, export, task, lr, seed))
                for task in TUNING_TASKS for lr in budget.learning_rates for seed in budget.seeds]
        runner.run_all(runs, progress, jobs)


class _Recorder:
    """Rewrites the arm's record after each fine-tuning run (the runs of `--jobs` share it)."""

    def __init__(self, curve: Curve, arm: str):
        import threading

        self.curve, self.arm = curve, arm
        self.lock = threading.Lock()

    def finetune_fn(self, milestone: Milestone, export: Path, task: str, lr: float, seed: int):
        def fn(threads):
            value = runner.finetune(self.curve.budget, milestone, export, task, lr, seed, self.curve.work_dir,
                                        threads)
            with self.lock:
                write_record(self.curve, self.arm)
            return value
        return fn


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=("cpu", "smoke"), default="cpu",
                        help="cpu: the objectives budget (the curve of the report); smoke: its minutes-long "
                             "stand-in, to check the pipeline")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {', '.join(ARMS)}")
    parser.add_argument("--stage", choices=("all", "pretrain", "report"), default="all",
                        help="all: pre-train and fine-tune each milestone as it is reached; pretrain: only keep "
                             "the milestones; report: the curve from the committed records")
    parser.add_argument("--jobs", type=int, default=2, help="fine-tuning runs at once (the cores shared out)")
    parser.add_argument("--work_dir", default=None,
                        help="default: ~/.cache/electra_tf/efficiency_curve/<budget> (outside the checkout)")
    parser.add_argument("--results_dir", default=str(RESULTS_DIR),
                        help="where the records (efficiency_curve/<budget>/), the table, JSON and plot go")
    args = parser.parse_args(argv)
    runner.check_common_flags(parser, args, ARMS)
    return args


def main(argv=None):
    args = parse_args(argv)
    budget = protocol.BUDGETS[args.budget]
    work_dir = Path(args.work_dir or Path.home() / ".cache" / "electra_tf" / "efficiency_curve" / budget.name)
    curve = Curve(budget, work_dir, Path(args.results_dir))
    if args.stage != "report":
        if not protocol.GLUE.is_dir() or not protocol.ENWIKI.is_dir() or not WIKITEXT_VALID.exists():
            sys.exit(f"efficiency_curve: error: the shared data folder {protocol.DATA} (glue/, pretrain/enwiki/, "
                     "pretrain/wikitext-2/) is absent")
        data_dir, eval_dir = runner.build_data(work_dir), build_eval_data(work_dir)
        for arm in args.arms.split(","):
            run_arm(curve, arm, data_dir, eval_dir, args.stage, args.jobs)
    efficiency_report.report(curve)


if __name__ == "__main__":
    use_onednn_kernels()  # before TensorFlow is imported (electra_tf.model.flops imports it)
    main()
