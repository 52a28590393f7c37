r"""Does task-adaptive pre-training (TAPT, Gururangan et al. 2020) of a `mini` export help CoNLL-2003 NER?

    python -m experiments.domain_adaptation --stage=all          # hours; stops (--max_minutes) and resumes
    python -m experiments.domain_adaptation --stage=report       # the table from the committed records

Arms, all from one start export (`--start_export`, default the efficiency curve's rtd milestone at
192k examples, `~/.cache/electra_tf/efficiency_curve/cpu/arms/rtd/milestones/x1/export`):

- `base`: the start export as it is (NER fine-tuning only);
- `tapt`: continued pre-training (`run_pretraining.py --init_checkpoint`: both networks from the export,
  a fresh optimizer and schedule from step 0) on CoNLL-2003's training sentences;
- `tapt_vocab`: the same after `data_prep.extend_vocab --add=500` on the same text (the 500 whole words
  that save most WordPiece pieces are appended; their embedding rows start at the mean of their pieces').

The budget, fixed up front (`PLANS["cpu"]`): 1000 steps × 128 sequences of 128 tokens (128k examples,
two thirds of the objectives budget's 192k), the objectives recipe's peak learning rate for `mini`
(its config's 5e-4) and its warm-up fraction (10 %: 100 steps; the recipe's 150 are 10 % of its
1500), pre-training seed 0. The text is CoNLL-2003's `train.txt` (`conll_text`): one sentence per
line (the words joined by spaces), a blank line at each `-DOCSTART-` (a document; the shared copy
has none, so its 14,041 sentences are one document and examples run across articles); shards are
built from it by `data_prep.build_pretraining_dataset` (the Wikipedia shards' packing, its manifest
recording the vocab), once with the export's vocab and once with the extended one. Those shards hold
1,826 examples (230k tokens; 1,773 and 223k with the extended vocab), so the budget is about 70
passes over the task's text, in line with the paper's 100 epochs of TAPT on small tasks. NER dev and test sentences are never pre-trained on.

Fine-tuning of each arm: the objectives protocol's NER (`experiments.lib.runner.finetune`: 3 epochs,
batch 32, max_seq_length 128, no layer-wise decay) at each learning rate of its 1e-4/3e-4 grid with
3 seeds, with `--do_predict`; each arm's learning rate is the one with the better median dev entity
F1, and the report gives dev and test F1 (conlleval entity F1, test scored from the run's
`test_predictions.txt`) at it. In the objectives runs, NER dev F1 spread 0.1-1.8 points over 3 seeds
at one learning rate (`docs/results/objectives/cpu/`): differences under ~1 F1 cannot be read.

Records: `docs/results/domain_adaptation/<arm>.json` (the start export's path, step and
discriminator sha256; the budget; the data; the vocab; the pre-training invocations and curve;
every fine-tuning result; the commands), rewritten after every stage and fine-tuning run, small JSON
meant to be committed as it arrives. A rerun skips what the record holds (a fine-tuning run in the
record is not redone, even on a new machine); a pre-training killed or stopped (`--max_minutes`,
`--stop_after_steps`) resumes from its newest checkpoint. `--stage=report` writes
`docs/results/domain_adaptation.{md,json}` from the records alone. The work folder (`--work_dir`,
default `~/.cache/electra_tf/domain_adaptation/<budget>`) is outside the checkout.

Planned wall-clock on this machine (2 cores; `docs/results/domain_adaptation_timing.json` holds the
measurement and its commands): beside the efficiency curve's pre-training (nice 10) and other tests,
TAPT ran 9.4 examples/s (13.7 s a step of 128: 1000 steps in about 3.8 h) and NER fine-tuning 2.1
steps/s of 32 (a full run of 1316 steps about 12 min); alone, the same pre-training runs about 40
examples/s (0.9 h) and a NER run about 8 min. So `base` takes about 1.2 h (0.8 h alone), `tapt` and
`tapt_vocab` about 5 h each (1.7 h alone), 11 h in all (4 h alone). A sitting of an hour runs part of
one arm's pre-training (`--arms=tapt --stage=pretrain --max_minutes=55`; SIGTERM at the deadline
writes a checkpoint at the step reached) or five to seven fine-tuning runs (`--stage=finetune
--max_minutes=45`: no run starts after the deadline, one in flight finishes).

This module runs the arms; the arms, plans and records are `domain_adaptation_plan`'s, the text, start export and
vocab `domain_adaptation_data`'s, the report `domain_adaptation_report`'s.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from electra_tf.runtime import use_onednn_kernels
from experiments.domain_adaptation_data import (build_shards, check_same_start, claim_work_dir, export_identity,
                                                export_vocab, extended_vocab, vocab_size, write_task_text)
from experiments.domain_adaptation_plan import (ARMS, CODE_PATHS, CONLL, DEFAULT_START_EXPORT, PLANS, RESULTS_DIR, ROOT,
                                                STEM, TASK, Arm, Plan, Records, finetune_done, log)
from experiments.domain_adaptation_report import report
from experiments.lib import runner, workdir
from experiments.lib.records import committed_curve
from experiments.lib.runner import checkpoint_step
from experiments.provenance import git_commit


class Deadline:
    """`--max_minutes`: no stage starts after it, and a running pre-training is stopped at it."""

    def __init__(self, minutes: Optional[float]):
        self.end = None if minutes is None else time.time() + 60 * minutes

    def passed(self) -> bool:
        return self.end is not None and time.time() >= self.end

    def stop_reason(self) -> Optional[str]:
        return "--max_minutes reached" if self.passed() else None


# --------------------------------------------------------------------------- pre-training


def pretrain_dir(work_dir: Path, arm: Arm) -> Path:
    return work_dir / "arms" / arm.name / "pretrain"


def pretrain_command(plan: Plan, start: dict, data_dir: Path, model_dir: Path,
                     stop_after_steps: Optional[int]) -> list[str]:
    steps = plan.save_checkpoints_steps
    command = [sys.executable, "run_pretraining.py", f"--init_checkpoint={start['path']}",
               f"--model_size={start['model_size']}", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
               f"--num_train_steps={plan.steps}", f"--num_warmup_steps={plan.warmup_steps}",
               f"--train_batch_size={plan.train_batch_size}", f"--max_seq_length={plan.max_seq_length}",
               f"--save_checkpoints_steps={steps}", "--keep_checkpoint_max=2", f"--log_steps={steps}",
               f"--steps_per_loop={steps}", f"--seed={plan.pretrain_seed}"]
    if stop_after_steps is not None and stop_after_steps < plan.steps:
        command.append(f"--stop_after_steps={stop_after_steps}")
    return command


def export_step(export_dir: Path) -> Optional[int]:
    config = export_dir / "electra_config.json"
    return json.loads(config.read_text()).get("step") if config.exists() else None


def pretrain(plan: Plan, arm: Arm, start: dict, data_dir: Path, work_dir: Path, records: Records,
             deadline: Deadline, stop_after_steps: Optional[int]) -> Optional[Path]:
    """Runs (or resumes) the arm's TAPT; returns its export once it has all the plan's steps, else None."""
    model_dir = pretrain_dir(work_dir, arm)
    export = model_dir / "export"
    if export_step(export) == plan.steps:
        return export
    if deadline.passed():
        return None
    model_dir.mkdir(parents=True, exist_ok=True)
    command = pretrain_command(plan, start, data_dir, model_dir, stop_after_steps)
    from_step = checkpoint_step(model_dir)  # where run_pretraining resumes
    log(f"[{arm.name}] pre-training from step {from_step} to {min(stop_after_steps or plan.steps, plan.steps)} of "
        f"{plan.steps} × {plan.train_batch_size}: {shlex.join(command[1:])}")
    started = time.time()
    with open(model_dir / "stdout.log", "a") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        stopped = runner.watch_pretraining(process, model_dir, arm.name, plan.steps, from_step,
                                               stop_reason=deadline.stop_reason, say=log) is not None
    if process.returncode != 0 and not stopped:
        raise RuntimeError(f"[{arm.name}] pre-training failed (exit {process.returncode}); "
                           f"see {model_dir / 'stdout.log'}")
    invocation = {"from_step": from_step, "to_step": checkpoint_step(model_dir),
                  "seconds": round(time.time() - started, 1), "commit": git_commit(CODE_PATHS),
                  "date": time.strftime("%Y-%m-%d"), "stopped_at_deadline": stopped}
    records.update(arm.name, lambda record: record_pretraining(record, plan, model_dir, invocation, command))
    return export if export_step(export) == plan.steps else None


def record_pretraining(record: dict, plan: Plan, model_dir: Path, invocation: dict, command: list[str]) -> None:
    rows = workdir.read_train_log(model_dir)
    record["pretrain_invocations"].append(invocation)
    record["pretrain_command"] = shlex.join(["python"] + command[1:])
    record["pretrain_steps_done"] = invocation["to_step"]
    record["pretrain_seconds"] = round(sum(i["seconds"] for i in record["pretrain_invocations"]), 1)
    if len(rows) >= len(record.get("pretrain_curve", [])):  # a new work folder restarts the curve
        record["pretrain_curve"] = committed_curve(rows)
    export = model_dir / "export"
    if export_step(export) == plan.steps:
        from electra_tf.text.manifest import sha256_file

        record["export"] = {"step": plan.steps,
                            "discriminator_sha256": sha256_file(str(export / "discriminator.weights.h5"))}


def record_data(record: dict, plan: Plan, text_stats: dict, manifest: dict, vocab_file: Path,
                extension: Optional[dict]) -> None:
    """The arm's text, shards, vocab and the tokens its budget sees."""
    from electra_tf.text.manifest import sha256_file

    examples_seen = plan.steps * plan.train_batch_size
    tokens_per_example = manifest["num_tokens"] / manifest["num_examples"]
    record["data"] = {"text": text_stats, "shard_examples": manifest["num_examples"],
                      "shard_tokens": manifest["num_tokens"], "examples_seen": examples_seen,
                      "tokens_seen": round(examples_seen * tokens_per_example),
                      "epochs": round(examples_seen / manifest["num_examples"], 1)}
    record["vocab"] = {"size": manifest["vocab_size"], "sha256": sha256_file(str(vocab_file)),
                       "added": 0 if extension is None else extension["new_size"] - extension["old_size"]}
    if extension is not None:
        record["vocab"]["first_added"] = [entry["word"] for entry in extension["added"][:20]]


# --------------------------------------------------------------------------- fine-tuning

def test_f1(output_dir: Path) -> Optional[float]:
    """conlleval entity F1 of the run's `test_predictions.txt` (`word gold predicted` lines), or None."""
    from electra_tf.finetuning import tagging_metrics
    from electra_tf.finetuning.conll import read_conll

    path = output_dir / "test_predictions.txt"
    if not path.exists():
        return None
    gold = [tags for _, tags in read_conll(str(path), label_column=1)]
    predicted = [tags for _, tags in read_conll(str(path), label_column=2)]
    return tagging_metrics.evaluate(gold, predicted).f1


def finetune_fn(plan: Plan, arm: Arm, export: Path, lr: float, seed: int, work_dir: Path, conll_dir: Path,
                records: Records):
    """One NER run for `experiments.lib.runner.run_all`: the protocol's run, then its record entry."""
    def fn(threads):
        vocab = export_vocab(export)
        dev = runner.finetune(plan.finetune, arm, export, TASK, lr, seed, work_dir, threads,
                                  data_dir=conll_dir, vocab_file=vocab, extra_flags=("--do_predict",))
        output_dir = workdir.finetune_dir(work_dir, arm, TASK, lr, seed)
        done = json.loads((output_dir / "result.json").read_text())
        entry = {"dev_f1": dev, "test_f1": test_f1(output_dir), "seconds": round(done.get("seconds", 0.0), 1),
                 "commit": done.get("commit", "unknown")}

        def change(record):
            record["finetune"].setdefault(f"{lr:g}", {})[str(seed)] = entry
            record["finetune_command"] = shlex.join(["python"] + done.get("command", []))
        records.update(arm.name, change)
        return dev
    return fn


def finetune_arm(plan: Plan, arm: Arm, export: Path, work_dir: Path, conll_dir: Path, records: Records,
                 progress, deadline: Deadline, jobs: int) -> None:
    """Every lr × seed the record lacks, unless the deadline has passed."""
    record = records.read(arm.name)
    runs = [(arm.name, TASK, lr, seed, finetune_fn(plan, arm, export, lr, seed, work_dir, conll_dir, records))
            for lr in plan.finetune.learning_rates for seed in plan.finetune.seeds
            if not finetune_done(record, lr, seed)]
    if runs and deadline.passed():
        log(f"[{arm.name}] --max_minutes reached: {len(runs)} fine-tuning run(s) left for the next sitting")
        return
    batch = []
    for run in runs:  # in groups of `jobs`, so no run starts after the deadline
        batch.append(run)
        if len(batch) == jobs:
            runner.run_all(batch, progress, jobs)
            batch = []
            if deadline.passed():
                log(f"[{arm.name}] --max_minutes reached: the other fine-tuning runs are left for the next sitting")
                return
    runner.run_all(batch, progress, jobs)


# --------------------------------------------------------------------------- one arm, all stages

def prepare_arm(plan: Plan, arm: Arm, start: dict, work_dir: Path, conll_dir: Path, records: Records) -> Path:
    """The arm's shards (TAPT arms: the text, the vocab), recorded; returns the shards' directory."""
    text, stats = write_task_text(conll_dir, work_dir)
    start_vocab = export_vocab(Path(start["path"]))
    extension = None
    if arm.extended_vocab:
        vocab = extended_vocab(start_vocab, text, work_dir, plan)
        extension = json.loads(Path(str(vocab) + ".extension.json").read_text())
    else:
        vocab = start_vocab
    data_dir = work_dir / "data" / ("extended_vocab" if arm.extended_vocab else "start_vocab")
    manifest = build_shards(vocab, text, data_dir, plan)
    records.update(arm.name, lambda record: record_data(record, plan, stats, manifest, vocab, extension))
    return data_dir


def run_arm(plan: Plan, arm: Arm, start: dict, args, records: Records, progress, deadline: Deadline) -> None:
    work_dir, conll_dir = Path(args.work_dir), Path(args.conll_dir)

    def set_start(record):
        record["start_export"] = start
        if not arm.tapt:
            record["vocab"] = {"size": vocab_size(export_vocab(Path(start["path"]))), "added": 0}
            record["data"] = {"examples_seen": 0, "tokens_seen": 0}
    check_same_start(start, records.read(arm.name).get("start_export"), records.path(arm.name))
    record = records.update(arm.name, set_start)
    if all(finetune_done(record, lr, seed) for lr in plan.finetune.learning_rates for seed in plan.finetune.seeds):
        log(f"[{arm.name}] every fine-tuning run is in {records.path(arm.name)}: nothing to do")
        return
    export = Path(start["path"])
    if arm.tapt:
        data_dir = prepare_arm(plan, arm, start, work_dir, conll_dir, records)
        if args.stage in ("all", "pretrain"):
            export = pretrain(plan, arm, start, data_dir, work_dir, records, deadline, args.stop_after_steps)
        else:
            export = pretrain_dir(work_dir, arm) / "export"
            export = export if export_step(export) == plan.steps else None
        if export is None:
            log(f"[{arm.name}] pre-training not finished ({records.read(arm.name).get('pretrain_steps_done', 0)}/"
                f"{plan.steps} steps): no fine-tuning yet")
            return
    if args.stage in ("all", "finetune"):
        finetune_arm(plan, arm, export, work_dir, conll_dir, records, progress, deadline, args.jobs)


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.domain_adaptation",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=sorted(PLANS), default="cpu",
                        help="cpu: the experiment; smoke: the pipeline in minutes")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {', '.join(ARMS)}")
    parser.add_argument("--stage", choices=("all", "pretrain", "finetune", "report"), default="all",
                        help="pretrain: the TAPT runs only; finetune: the arms whose pre-training is done; "
                             "report: the table from the committed records (also the last step of the others)")
    parser.add_argument("--start_export", default=str(DEFAULT_START_EXPORT),
                        help="the export every arm starts from (default: the efficiency curve's rtd 192k milestone)")
    parser.add_argument("--conll_dir", default=str(CONLL), help="CoNLL-2003 (train.txt, dev.txt, test.txt)")
    parser.add_argument("--max_minutes", type=float, default=None,
                        help="stop this sitting after that long: a pre-training is stopped (it resumes from its "
                             "newest checkpoint), no fine-tuning run starts after it")
    parser.add_argument("--stop_after_steps", type=int, default=None,
                        help="pre-train each TAPT arm up to this step in this sitting")
    parser.add_argument("--jobs", type=int, default=1, help="fine-tuning runs at once (the cores shared out)")
    parser.add_argument("--work_dir", default=None,
                        help="default: ~/.cache/electra_tf/domain_adaptation/<budget> (outside the checkout)")
    parser.add_argument("--results_dir", default=str(RESULTS_DIR), help="where the records and the report go")
    args = parser.parse_args(argv)
    runner.check_common_flags(parser, args, ARMS)
    if args.stop_after_steps is not None and args.stop_after_steps < 1:
        parser.error(f"--stop_after_steps must be at least 1, got {args.stop_after_steps}")
    if args.max_minutes is not None and args.max_minutes <= 0:
        parser.error(f"--max_minutes must be positive, got {args.max_minutes}")
    args.work_dir = args.work_dir or str(Path.home() / ".cache" / "electra_tf" / STEM / args.budget)
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    plan = PLANS[args.budget]
    if args.stage != "report":
        for split in ("train", "dev"):
            if not (Path(args.conll_dir) / f"{split}.txt").is_file():
                sys.exit(f"domain_adaptation: error: --conll_dir={args.conll_dir}: no {split}.txt (CoNLL-2003 format)")
        start = export_identity(Path(args.start_export))
        records = Records(plan, Path(args.results_dir))
        claim_work_dir(start, Path(args.work_dir))
        arms = [ARMS[name] for name in args.arms.split(",")]
        log(f"budget {plan.name}: arms {', '.join(a.name for a in arms)} from {start['path']} (step {start['step']}); "
            f"work dir {args.work_dir}")
        missing = sum(not finetune_done(records.read(arm.name), lr, seed) for arm in arms
                      for lr in plan.finetune.learning_rates for seed in plan.finetune.seeds)
        progress = runner.Progress(missing, args.jobs)  # the fine-tuning runs the records lack
        deadline = Deadline(args.max_minutes)
        for arm in arms:
            run_arm(plan, arm, start, args, records, progress, deadline)
    return report(plan, Path(args.results_dir))


if __name__ == "__main__":
    use_onednn_kernels()  # before TensorFlow is imported
    main()
