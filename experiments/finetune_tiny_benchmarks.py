"""Fine-tuning sanity benchmarks: a tiny, randomly initialised ELECTRA on real data (CPU, minutes).

Runs `run_finetuning.py` on SST-2, STS-B, ChnSentiCorp and SQuAD 1.1 (train on the
first 40 articles of dev-v1.1, evaluate on the other 8) and prints a results table.
No pre-training is involved, so the numbers only show that the pipeline learns:
the targets are SST-2 accuracy >= 75, STS-B Spearman > 0, ChnSentiCorp accuracy >= 80
and SQuAD exact match >= 2.0, each one a model that was not fine-tuned fails.

SQuAD's target is exact match, not F1: on articles 40-47 (1589 questions) token F1
rewards any long span that overlaps the answer by chance, so guesses score about
what this run does (F1 6.6-7.1 for the untrained model, `--do_train=false`, seeds
0-3; up to 10.3 for the paragraph's first 30 words; the trained run about 7). Exact
match tells them apart: the untrained model scores 0.1-0.6, the best degenerate
guess (the paragraph's first word) 0.9, the trained run about 3.5.
tests/test_finetuning_benchmark_targets.py checks that degenerate answers fail.

    python experiments/finetune_tiny_benchmarks.py [--only sst2,stsb] [--output_root /tmp/ft_bench]

The same commands back the opt-in `slow` tests in tests/test_finetuning_slow.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
EN_VOCAB = DATA / "vocab" / "en_uncased" / "vocab.txt"
ZH_VOCAB = DATA / "vocab" / "zh" / "vocab.txt"
SQUAD_DEV = DATA / "squad" / "dev-v1.1.json"

EXPERIMENTS = {
    # name: (run_finetuning flags, metric, threshold as (op, value))
    "sst2": (["--task=SST-2", f"--data_dir={DATA / 'glue'}", f"--vocab_file={EN_VOCAB}",
              "--max_seq_length=64", "--max_train_steps=600"], "accuracy", (">=", 75.0)),
    "stsb": (["--task=STS-B", f"--data_dir={DATA / 'glue'}", f"--vocab_file={EN_VOCAB}",
              "--max_seq_length=64", "--max_train_steps=1000"], "spearman", (">", 0.0)),
    "chnsenticorp": (["--task=text_classification", f"--data_dir={DATA / 'chinese' / 'ChnSentiCorp'}",
                      "--text_column=text_a", "--label_column=label", f"--vocab_file={ZH_VOCAB}",
                      "--max_seq_length=128"], "accuracy", (">=", 80.0)),
    "squad": (["--task=squad", f"--train_file={SQUAD_DEV}", f"--dev_file={SQUAD_DEV}",
               "--squad_train_articles=0:40", "--squad_dev_articles=40:48", f"--vocab_file={EN_VOCAB}",
               "--do_predict"], "exact_match", (">=", 2.0)),
}
COMMON = ["--model_size=tiny", "--log_steps=100", "--seed=0"]


def flags_for(name: str, output_dir: str) -> list[str]:
    """The run_finetuning flags of experiment `name` writing to `output_dir`."""
    return EXPERIMENTS[name][0] + COMMON + [f"--output_dir={output_dir}"]


def passes(value: float, threshold) -> bool:
    op, bound = threshold
    return value >= bound if op == ">=" else value > bound


def meets_target(name: str, metrics: dict) -> bool:
    """Whether `metrics` (a metrics.json "median") reach experiment `name`'s target."""
    _, metric, threshold = EXPERIMENTS[name]
    return passes(metrics[metric], threshold)


def run(name: str, output_root: str) -> dict:
    output_dir = os.path.join(output_root, name)
    command = [sys.executable, str(ROOT / "run_finetuning.py")] + flags_for(name, output_dir)
    print("$", " ".join(command), flush=True)
    start = time.time()
    subprocess.run(command, check=True, cwd=ROOT)
    with open(os.path.join(output_dir, "metrics.json")) as f:
        summary = json.load(f)
    _, metric, threshold = EXPERIMENTS[name]
    value = summary["median"][metric]
    return {"name": name, "metric": metric, "value": value, "target": f"{threshold[0]} {threshold[1]}",
            "ok": meets_target(name, summary["median"]), "minutes": (time.time() - start) / 60, "all": summary["median"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(EXPERIMENTS), help="comma-separated subset")
    parser.add_argument("--output_root", default="/tmp/electra_finetune_benchmarks")
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"shared data folder {DATA} is absent")
    results = [run(name, args.output_root) for name in args.only.split(",")]
    print("\n| task | metric | value | target | ok | minutes | all metrics |\n|---|---|---|---|---|---|---|")
    for r in results:
        others = ", ".join(f"{k} {v:.2f}" for k, v in r["all"].items())
        print(f"| {r['name']} | {r['metric']} | {r['value']:.2f} | {r['target']} | {r['ok']} | "
              f"{r['minutes']:.1f} | {others} |")
    with open(os.path.join(args.output_root, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
