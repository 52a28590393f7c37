"""The offline demo's curve: run `python run_pretraining.py` as a user would, record train and held-out metrics.

Runs the demo command with no flags in a fresh, empty work directory (the demo builds its corpus in
`electra_demo/tiny/data/` and trains `tiny` in `electra_demo/tiny/model/` under the current directory), then reads
the run's `train_log.jsonl` (every `--log_steps`: the window's discriminator AUC, generator accuracy and loss) and
`eval_log.jsonl` (every 100 steps: the same measured on the held-out 10 % of the documents, with fixed masks and
samples) and writes `docs/results/demo_curve.json` (temporary file, then rename): the command, commit, date,
machine, wall time, the seconds spent building the data and training, the final examples/s and both curves.
`python -m tools.render_docs` turns it into the table of docs/pretraining.md.

    python -m experiments.demo_curve                      # about 10-30 minutes on 2 CPU cores
    python -m experiments.demo_curve --work_dir=/tmp/demo # keep the run somewhere known (must be empty or new)

Other run_pretraining flags go after `--`, e.g. `-- --num_train_steps=200` for a quick check (the record's
command shows them; do not commit such a record as the demo's curve).

Timing: the script timestamps the demo's output lines as they arrive. `data_build_seconds` runs from the start to
the demo's first training log line (`No --data_dir: training ...`), so it includes starting Python and importing
TensorFlow; `train_seconds` is the rest of the run (tracing, training, the evaluations, checkpoints and export).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from electra_tf.text.manifest import write_text_atomic
from experiments.provenance import git_commit, machine_line

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "results" / "demo_curve.json"
MODEL_DIR = os.path.join("electra_demo", "tiny", "model")  # run_pretraining.DEMO_DIR / <size> / model
TRAIN_DONE = "No --data_dir: training"  # run_pretraining.demo_lines: the data is built
TRAIN_KEYS = ("disc_auc", "gen_accuracy", "loss", "gen_loss", "disc_loss", "disc_accuracy", "examples_per_second")
EVAL_KEYS = ("disc_auc", "gen_accuracy", "loss", "gen_loss", "disc_loss", "disc_accuracy", "disc_precision",
             "disc_recall", "gen_sampled_accuracy", "replaced_fraction")
HELD_OUT = re.compile(r"eval at step \d+ \((\d+) held-out examples")


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def columns(lines: list[dict], keys: tuple[str, ...], digits: int = 4) -> dict:
    """`{"steps": [...], key: [...]}` for each key every line has (the last line per step wins)."""
    by_step = {line["step"]: line for line in lines}
    steps = sorted(by_step)
    out = {"steps": steps}
    for key in keys:
        if steps and all(key in by_step[s] for s in steps):
            out[key] = [round(float(by_step[s][key]), digits) for s in steps]
    return out


def run_demo(command: list[str], work_dir: Path, log_path: Path) -> tuple[int, float, float | None, list[str]]:
    """Runs the demo in `work_dir`, echoing and saving its output; `(returncode, wall seconds, seconds until the
    data was built or None, output lines)`."""
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    start, data_built, lines = time.time(), None, []
    script = str(ROOT / command[1])  # run_pretraining.py of this checkout, run from the work directory
    with open(log_path, "w", encoding="utf-8") as log, subprocess.Popen(
            [sys.executable, script] + command[2:], cwd=work_dir, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1) as process:
        for line in process.stdout:
            if data_built is None and TRAIN_DONE in line:
                data_built = time.time() - start
            lines.append(line)
            log.write(line)
            log.flush()
            sys.stdout.write(line)
            sys.stdout.flush()
        returncode = process.wait()
    return returncode, time.time() - start, data_built, lines


def record(command: list[str], model_dir: Path, wall_seconds: float, data_build_seconds: float | None,
           output_lines: list[str], commit: str) -> dict:
    """The JSON record of one demo run whose logs are in `model_dir`."""
    train = columns(read_jsonl(model_dir / "train_log.jsonl"), TRAIN_KEYS)
    held_out = columns(read_jsonl(model_dir / "eval_log.jsonl"), EVAL_KEYS)
    if not train["steps"]:
        raise ValueError(f"{model_dir / 'train_log.jsonl'}: no training log lines")
    config_path = model_dir / "run_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    counts = [int(m.group(1)) for m in map(HELD_OUT.search, output_lines) if m]
    data_build = None if data_build_seconds is None else round(data_build_seconds)
    return {
        "description": ("The offline demo's pre-training curve, train and held-out: per logged step the window's "
                        "discriminator AUC (replaced vs original, real tokens), generator accuracy at the masked "
                        "positions and loss from train_log.jsonl; per evaluation the same on the held-out 10 % of "
                        "the documents (fixed batches, masks and samples; exact AUC) from eval_log.jsonl. Written "
                        "by `python -m experiments.demo_curve`."),
        "command": " ".join(shlex.quote(c) for c in command),
        "working_directory": "a fresh, empty directory",
        "model_dir": MODEL_DIR,
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine_line(),
        "load_average": round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None,
        "model_size": "tiny",
        "num_train_steps": config.get("num_train_steps", train["steps"][-1]),
        "train_batch_size": config.get("train_batch_size"),
        "max_seq_length": config.get("max_seq_length"),
        "disc_weight": config.get("disc_weight"),
        "held_out_examples": counts[-1] if counts else None,
        "wall_seconds": round(wall_seconds),
        "data_build_seconds": data_build,
        "train_seconds": round(wall_seconds - (data_build_seconds or 0.0)),
        "final_examples_per_second": round(train["examples_per_second"][-1], 1)
        if "examples_per_second" in train else None,
        "train": train,
        "eval": held_out,
    }


def fresh_work_dir(requested: str | None) -> Path:
    if requested is None:
        return Path(tempfile.mkdtemp(prefix="electra_demo_curve_"))
    path = Path(requested).resolve()
    if path.exists() and any(path.iterdir()):
        raise SystemExit(f"--work_dir {path} is not empty: the demo must start from nothing (give a new folder)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_record(path: Path, entry: dict) -> None:
    """`entry` as JSON in `path`, replaced whole (indent 1: the committed record's format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(entry, indent=1) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.demo_curve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", default=None, help="an empty or new folder to run the demo in "
                        "(default: a new temporary folder); it is kept")
    parser.add_argument("--output", default=str(OUTPUT), help="the record (default docs/results/demo_curve.json)")
    parser.add_argument("extra", nargs="*", help="more run_pretraining flags (after --)")
    args = parser.parse_args(argv)
    work_dir = fresh_work_dir(args.work_dir)
    command = ["python", "run_pretraining.py", *args.extra]
    print(f"+ cd {shlex.quote(str(work_dir))} && " + " ".join(shlex.quote(c) for c in command), flush=True)
    commit = git_commit()  # the code that ran
    returncode, wall, data_built, lines = run_demo(command, work_dir, work_dir / "demo_output.log")
    if returncode:
        print(f"the demo exited with status {returncode}; output in {work_dir / 'demo_output.log'}", file=sys.stderr)
        return returncode
    entry = record(command, work_dir / MODEL_DIR, wall, data_built, lines, commit)
    save_record(Path(args.output), entry)
    train, held_out = entry["train"], entry["eval"]
    print(f"train at step {train['steps'][-1]}: disc_auc {train.get('disc_auc', ['–'])[-1]}, gen_accuracy "
          f"{train.get('gen_accuracy', ['–'])[-1]}, loss {train.get('loss', ['–'])[-1]}")
    if held_out["steps"]:
        print(f"held-out at step {held_out['steps'][-1]}: disc_auc {held_out.get('disc_auc', ['–'])[-1]}, "
              f"gen_accuracy {held_out.get('gen_accuracy', ['–'])[-1]}, loss {held_out.get('loss', ['–'])[-1]}")
    print(f"wrote {args.output}; the run is in {work_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
