"""CoNLL-2003 English NER (or chunking): fine-tune, score dev entity F1, record the result.

Runs `run_finetuning.py --task=ner` on `../shared/data/conll2003` (train → dev, `conlleval` entity
precision/recall/F1 overall and per type, token accuracy) with the official recipe of the model size
(3 epochs, the size's learning rate and layer-wise decay, max_seq_length 128) and writes a record of
the run to `docs/results/conll/<name>.json`: the command, commit, machine, wall time, the segment id
the run fed (`--tagging_segment_id`, default 1 as the official code), the dev scores (median over
seeds) and the data counts (sentences split into windows). `python -m tools.render_docs`
turns the records into the table of docs/finetuning.md.

    # (a) random init, tiny, 3 seeds (about 5 minutes on 2 CPU cores):
    python -m experiments.conll_ner --name=tiny_random --model_size=tiny --num_seeds=3

    # (b) a pre-trained mini export (its size, vocabulary and fine-tuning defaults come from it):
    python -m experiments.conll_ner --name=mini_pretrained --init_checkpoint=PATH/TO/mini/export --num_seeds=3

Other run_finetuning flags go after `--`, e.g. `-- --num_train_epochs=1 --max_train_steps=300`
(a shortened run says so in its record). `--task=chunk` scores the chunk column instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from electra_tf.text.manifest import write_json_atomic
from experiments.provenance import git_commit, machine_line

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CONLL = DATA / "conll2003"
EN_VOCAB = DATA / "vocab" / "en_uncased" / "vocab.txt"
RESULTS = ROOT / "docs" / "results" / "conll"
REPORTED = ("f1", "precision", "recall", "accuracy", "PER_f1", "LOC_f1", "ORG_f1", "MISC_f1")


def command_for(args, extra: list[str]) -> list[str]:
    """The run_finetuning command line (paths as given, relative to the repository root)."""
    command = ["python", "run_finetuning.py", f"--task={args.task}", f"--data_dir={args.data_dir}",
               f"--output_dir={args.output_dir}", f"--num_seeds={args.num_seeds}", "--do_predict", "--log_steps=100"]
    if args.init_checkpoint:
        command.append(f"--init_checkpoint={args.init_checkpoint}")
    else:
        command += [f"--model_size={args.model_size}", f"--vocab_file={args.vocab_file}"]
    return command + extra


def recipe_line(shortened: list[str], changed: list[str]) -> str:
    """How the run departs from the size's fine-tuning recipe (epochs, learning rate), in words."""
    if shortened:
        return "shortened: " + " ".join(shortened + changed)
    if changed:
        return "the size's epochs, " + " ".join(changed)
    return "full (the size's epochs and learning rate)"


def record(args, command: list[str], summary: dict, wall_seconds: float, extra: list[str], commit: str,
           task_settings: dict) -> dict:
    """The result record; `task_settings` are those the run wrote to its `finetune_config.json`."""
    median = summary["median"]
    shortened = [flag for flag in extra if flag.startswith(("--max_train_steps", "--num_train_epochs"))]
    changed = [flag for flag in extra if flag.startswith("--learning_rate")]
    return {
        "name": args.name,
        "task": args.task,
        "model": args.model_label or (f"pre-trained {args.init_checkpoint}" if args.init_checkpoint
                                      else f"{args.model_size}, random init"),
        "command": " ".join(shlex.quote(c) for c in command),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine_line(),
        "wall_seconds": round(wall_seconds),
        "seeds": len(summary["runs"]),
        "train_steps": summary["runs"][0].get("train_steps"),
        "recipe": recipe_line(shortened, changed),
        "tagging_segment_id": task_settings["tagging_segment_id"],
        "dev": {key: round(median[key], 2) for key in REPORTED if key in median},
        "f1_per_seed": [round(run["selected"]["f1"], 2) for run in summary["runs"] if "f1" in run.get("selected", {})],
        "dev_all": {key: round(value, 4) for key, value in median.items()},
        "data": summary.get("data", {}),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.conll_ner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="the record's name: docs/results/conll/<name>.json")
    parser.add_argument("--task", default="ner", choices=["ner", "chunk"])
    parser.add_argument("--model_size", default="tiny", help="without --init_checkpoint")
    parser.add_argument("--init_checkpoint", default=None, help="a pre-trained export (e.g. mini)")
    parser.add_argument("--model_label", default=None,
                        help="what the results table calls the model (default: the export's path or the size)")
    parser.add_argument("--data_dir", default=os.path.relpath(CONLL, ROOT))
    parser.add_argument("--vocab_file", default=os.path.relpath(EN_VOCAB, ROOT), help="without --init_checkpoint")
    parser.add_argument("--num_seeds", type=int, default=1)
    parser.add_argument("--output_dir", default=None,
                        help="default out/conll/<name> (relative paths: to the repository root, as recorded)")
    parser.add_argument("--results_dir", default=str(RESULTS))
    parser.add_argument("extra", nargs="*", help="more run_finetuning flags (after --)")
    args = parser.parse_args(argv)
    # Relative, so the recorded command names no folder of this machine (docs/finetuning.md shows it).
    args.output_dir = args.output_dir or f"out/conll/{args.name}"
    command = command_for(args, args.extra)
    print("+", " ".join(shlex.quote(c) for c in command), flush=True)
    start, commit = time.time(), git_commit()  # the code that ran
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    result = subprocess.run([sys.executable] + command[1:], cwd=ROOT, env=env)
    if result.returncode:
        return result.returncode
    output_dir = Path(args.output_dir if os.path.isabs(args.output_dir) else ROOT / args.output_dir)
    summary = json.loads((output_dir / "metrics.json").read_text())
    # What the run itself recorded: the flag given among the extra flags, else run_finetuning's default.
    task_settings = json.loads((output_dir / "finetune_config.json").read_text())["task_settings"]
    entry = record(args, command, summary, time.time() - start, args.extra, commit, task_settings)
    os.makedirs(args.results_dir, exist_ok=True)
    path = Path(args.results_dir) / f"{args.name}.json"
    write_json_atomic(str(path), entry)
    print(f"dev entity F1 {entry['dev'].get('f1')} (P {entry['dev'].get('precision')}, "
          f"R {entry['dev'].get('recall')}); wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
