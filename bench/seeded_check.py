"""Does a change leave pre-training's numbers alone? The same seeded CPU run at two commits, compared.

    python -m bench.seeded_check --before=8ec2765 --after=HEAD --name=layout_change
    python -m bench.seeded_check --before=7d0cb17 --after=HEAD --objective=electric --name=objectives_electric

Runs `run_pretraining.py --model_size=mini` with 2 layers, batch 16, 12 steps, `--seed=7` (one log
line per step) in a checkout of each commit (a temporary `git worktree`), on the same shards (built
once by this checkout's `data_prep` from `../shared/data/pretrain/enwiki`, 128 tokens), and
compares (`--dropout_rate` sets the model's, `--objective` the pre-training objective) every scalar of every step of the two `train_log.jsonl` files that is a loss or a metric of
the model (not timings). The result, `bench/results/seeded_check-<name>.json`, holds both commits,
the command, each run's values and the largest absolute difference; the check passes when it is at
most `--tolerance` (1e-6).

Not a test: two short pre-training runs and a data build take a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from electra_tf.text.manifest import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
ENWIKI_FILE = ROOT.parent / "shared" / "data" / "pretrain" / "enwiki" / "AA" / "wiki_00"
EN_VOCAB = ROOT.parent / "shared" / "data" / "vocab" / "en_uncased" / "vocab.txt"
RECIPE = ["--model_size=mini", '--hparams={"num_layers": 2}', "--train_batch_size=16", "--num_train_steps=12",
          "--num_warmup_steps=2", "--seed=7", "--log_steps=1", "--steps_per_loop=1", "--save_checkpoints_steps=12"]
# Scalars that depend on time or the machine, not on the function computed.
TIMING_KEYS = {"step", "examples_per_second", "steps_per_second", "seconds", "wall_time", "elapsed_seconds"}


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def build_shards(checkout: Path, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "data_prep.build_pretraining_dataset", f"--input={ENWIKI_FILE}",
                    f"--vocab_file={EN_VOCAB}", f"--output_dir={out}", "--max_seq_length=128", "--num_shards=2"],
                   cwd=checkout, check=True, stdout=subprocess.DEVNULL)
    return out


def recipe(dropout_rate: float | None = None, objective: str | None = None) -> list[str]:
    """The run's flags; `dropout_rate` (None: the model size's) goes into its hparams, `objective` (None: the
    default, rtd) into `--objective`.

    >>> recipe(0.0, "mlm")[1:2], recipe(objective="mlm")[-1]
    (['--hparams={"num_layers": 2, "dropout_rate": 0.0}'], '--objective=mlm')
    """
    flags = RECIPE if objective is None else [*RECIPE, f"--objective={objective}"]
    if dropout_rate is None:
        return flags
    hparams = {"num_layers": 2, "dropout_rate": dropout_rate}
    return [f"--hparams={json.dumps(hparams)}" if flag.startswith("--hparams=") else flag for flag in flags]


def train_log(checkout: Path, data_dir: Path, model_dir: Path, flags: list[str]) -> list[dict]:
    """The per-step log lines of a run with `flags` (`recipe(...)`), run in `checkout`."""
    command = [sys.executable, "run_pretraining.py", f"--data_dir={data_dir}", f"--model_dir={model_dir}", *flags]
    with open(model_dir.parent / f"{model_dir.name}.log", "w") as out:
        subprocess.run(command, cwd=checkout, check=True, stdout=out, stderr=subprocess.STDOUT)
    return [json.loads(line) for line in (model_dir / "train_log.jsonl").read_text().splitlines()]


def model_scalars(rows: list[dict]) -> dict[str, list[float]]:
    """Per key, the values of every step: the losses and metrics, not the timings."""
    keys = sorted({k for row in rows for k, v in row.items() if isinstance(v, (int, float)) and k not in TIMING_KEYS})
    return {key: [row.get(key) for row in rows] for key in keys}


def max_difference(before: dict[str, list], after: dict[str, list]) -> float:
    """The largest absolute difference over the keys both runs log (inf where one lacks a step)."""
    worst = 0.0
    for key in sorted(set(before) & set(after)):
        if len(before[key]) != len(after[key]):
            return float("inf")
        for a, b in zip(before[key], after[key]):
            if a is not None and b is not None:
                worst = max(worst, abs(float(a) - float(b)))
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit before the change")
    parser.add_argument("--after", default="HEAD", help="the commit after it (default HEAD)")
    parser.add_argument("--name", required=True, help="the result: bench/results/seeded_check-<name>.json")
    parser.add_argument("--tolerance", type=float, default=1e-6)
    parser.add_argument("--dropout_rate", type=float, default=None,
                        help="the runs' dropout_rate (default: the mini size's, 0.1)")
    parser.add_argument("--objective", default=None,
                        help="the runs' --objective (default: run_pretraining.py's, rtd)")
    args = parser.parse_args(argv)
    if not ENWIKI_FILE.is_file():
        sys.exit(f"seeded_check: error: {ENWIKI_FILE} is absent (the shared data folder)")
    work = Path(tempfile.mkdtemp(prefix="seeded_check_"))
    runs, commits, flags = {}, {}, recipe(args.dropout_rate, args.objective)
    try:
        data_dir = build_shards(ROOT, work / "data")
        for label in ("before", "after"):
            commit = git("rev-parse", "--short", getattr(args, label))
            checkout = work / label
            git("worktree", "add", "--detach", str(checkout), commit)
            commits[label] = commit
            runs[label] = model_scalars(train_log(checkout, data_dir, work / f"model_{label}", flags))
            print(f"{label} ({commit}): {len(runs[label])} scalars × {len(next(iter(runs[label].values())))} steps")
    finally:
        for label in ("before", "after"):
            if (work / label).exists():
                git("worktree", "remove", "--force", str(work / label))
        shutil.rmtree(work, ignore_errors=True)
    shared = sorted(set(runs["before"]) & set(runs["after"]))
    difference = max_difference(runs["before"], runs["after"])
    result = {"before": commits["before"], "after": commits["after"],
              "command": "python run_pretraining.py --data_dir=<enwiki wiki_00, 128 tokens> --model_dir=DIR "
                         + " ".join(flags),
              "compared": shared, "values_compared": sum(len(runs["before"][k]) for k in shared),
              "max_abs_difference": difference, "tolerance": args.tolerance, "passed": difference <= args.tolerance,
              "only_before": sorted(set(runs["before"]) - set(shared)),
              "only_after": sorted(set(runs["after"]) - set(shared)), "runs": runs}
    out = ROOT / "bench" / "results" / f"seeded_check-{args.name}.json"
    write_text_atomic(out, json.dumps(result, indent=1) + "\n")
    print(f"{result['values_compared']} values of {len(shared)} scalars: max |difference| {difference:.3g} "
          f"({'passed' if result['passed'] else 'FAILED'}, tolerance {args.tolerance:g}); wrote {out}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
