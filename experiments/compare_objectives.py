r"""Does replaced-token detection beat masked LM at equal compute? Pre-train each arm, fine-tune, tabulate.

    python -m experiments.compare_objectives --budget=cpu      # hours; stops and resumes
    python -m experiments.compare_objectives --budget=smoke    # the same pipeline in minutes

Arms: `rtd` (ELECTRA), `mlm` (BERT-style, discriminator-sized), `none` (no pre-training), the
paper's Table 5 ablations `rtd_masked_only`, `replace_mlm`, `all_tokens_mlm` (see `electra_tf/config.py`),
`gdes` (rtd with DeBERTaV3's gradient-disentangled embedding sharing), `electric` (Electric's
energy-based NCE objective with a two-tower cloze generator), and the generator-size study
(the paper's Figure 3): `gen32`, `gen128`, `gen256` are rtd with a generator of that hidden size
(heads 1/2/4, FFN 4 × hidden; `rtd` itself has 64) at rtd's steps.
`--pretrain_seed=N` pre-trains an arm again with another seed: each (arm, pre-training seed) is
one run of the report.
Every arm pre-trains the `mini` shape on the English Wikipedia shards built from
`../shared/data/pretrain/enwiki` with the shared English-uncased vocab. Compute: the `rtd` arm
runs the budget's steps; every other arm runs the steps that spend the same training FLOPs
(`electra_tf/model/flops.py`), but never fewer than rtd's, so no arm sees fewer examples (arms that are
costlier than rtd per step therefore get more compute than rtd, and the table says so).

Fine-tuning per arm: STS-B and MRPC at each learning rate of the grid, several seeds; the arm's
learning rate is the one with the better STS-B median; with it, SST-2, CoLA and RTE (`--tasks`; `NER`,
CoNLL-2003 entity F1 over the whole grid, on request). STS-B runs
right after each arm's pre-training (and `none` right after the first arm), so the headline
comparison is known early; the other tasks follow once every arm has pre-trained.

Results survive the machine: every (arm, pre-training seed) writes `docs/results/objectives/
<arm>-pseed<N>.json` (its commit, compute, pre-training curve and every fine-tuning result) as
soon as its pre-training ends and after each fine-tuning run, small JSON meant to be committed
as it arrives; the report (`--stage=report`) is built from those files alone, with no work folder.
On a new machine, a run's finished fine-tuning results come back from its file into the work folder
(`restore_finetune`), so going on with the run neither redoes them nor drops them from the file.

Everything is resumable: the work folder (`--work_dir`, default `~/.cache/electra_tf/
compare_objectives/<budget>`, outside the checkout) holds the shards, each arm's pre-training run
(`run_pretraining.py` resumes from its newest checkpoint after a kill) and one folder per
fine-tuning run whose `result.json` marks it done. `--stage=report` (also the last step of a full
run) writes `docs/results/compare_objectives.{md,json}` and the plots from the committed run files.
`--jobs=N` runs N fine-tuning runs at once with the cores shared out between them (TensorFlow's
intra-op threads = cores // N): on 2 cores `--jobs=2` did 1.27× the MRPC runs per hour of one run
with both cores, with the same dev accuracy; on larger machines it is the way to use the cores,
since one run of the `mini` shape cannot.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Optional

from electra_tf.runtime import use_onednn_kernels
from experiments.lib import runner
from experiments.lib.protocol import (ARMS, BUDGETS, CONLL, DATA, ENWIKI, GLUE, GLUE_TASKS, OWN_GRID_TASKS,
                                      RESULTS_DIR, SELECTION_TASK, TASKS, TUNING_TASKS, Budget, Run)
from experiments.lib.records import (PRETRAIN_FIELDS, chosen_lr, collect_finetune, restore_finetune, run_file,
                                     run_record, runs_dir_of)
from experiments.lib.runner import build_data, check_common_flags, check_subset, finetune, log, pretrain
from experiments.lib.workdir import pretrain_dir, write_json_atomic
from experiments.objectives_report import report


# --------------------------------------------------------------------------- the runs of an arm

class Recorder:
    """Writes a run's committed results file after each stage that changes it (thread-safe).

    A work folder without the run's pre-training (a new machine) keeps the record's pre-training
    fields, and `restore` gives it the record's fine-tuning results, so going on never loses them.
    """

    def __init__(self, budget: Budget, work_dir: Path, runs_dir: Path):
        self.budget, self.work_dir, self.runs_dir = budget, work_dir, runs_dir
        self.lock = threading.Lock()

    def restore(self, run: Run) -> None:
        count = restore_finetune(self.budget, run, self.work_dir, run_file(self.runs_dir, run))
        if count:
            log(f"[{run.name}] {count} fine-tuning result(s) taken from {run_file(self.runs_dir, run)}")

    def __call__(self, run: Run) -> Path:
        with self.lock:
            path = run_file(self.runs_dir, run)
            record = run_record(self.budget, run, self.work_dir)
            if path.exists() and not record["pretrain_curve"]:
                committed = json.loads(path.read_text())
                record.update({key: committed[key] for key in PRETRAIN_FIELDS if key in committed})
            write_json_atomic(path, record)
            return path

    def finetune_fn(self, run: Run, export_dir, task, lr, seed):
        def fn(threads):
            value = finetune(self.budget, run, export_dir, task, lr, seed, self.work_dir, threads)
            self(run)
            return value
        return fn


def finetune_runs(recorder: Recorder, run: Run, export_dir: Optional[Path], tasks, learning_rates) -> list:
    """`run_all`'s runs for every task × learning rate × seed, in that order."""
    return [(run.name, task, lr, seed, recorder.finetune_fn(run, export_dir, task, lr, seed))
            for task in tasks for lr in learning_rates for seed in recorder.budget.seeds]


def finetune_grid(recorder: Recorder, run: Run, export_dir, progress, task: str, jobs: int = 1) -> None:
    """The task at every learning rate of the grid, every seed."""
    runner.run_all(finetune_runs(recorder, run, export_dir, [task], recorder.budget.learning_rates), progress, jobs)


def finetune_run(recorder: Recorder, run: Run, export_dir, progress, jobs: int = 1, tasks=None) -> None:
    """The tuning tasks' grid, then the other tasks (`tasks`: the GLUE ones by default) at the chosen lr,
    or over the grid for `OWN_GRID_TASKS`."""
    for task in TUNING_TASKS:
        finetune_grid(recorder, run, export_dir, progress, task, jobs)
    lr = chosen_lr(collect_finetune(recorder.budget, run, recorder.work_dir))
    other_tasks = [task for task in (tasks or GLUE_TASKS) if task not in TUNING_TASKS]
    runs = []
    for task in other_tasks:
        learning_rates = recorder.budget.learning_rates if task in OWN_GRID_TASKS else [lr]
        runs += finetune_runs(recorder, run, export_dir, [task], learning_rates)
    runner.run_all(runs, progress, jobs)


def schedule(runs) -> list:
    """Execution order: runs without pre-training right after the first pre-trained run.

    With the selection task fine-tuned after each run's pre-training, the headline comparison
    (rtd vs no pre-training on STS-B) is known hours before the last arm has pre-trained.
    """
    pretrained = [run for run in runs if run.pretrained]
    untrained = [run for run in runs if not run.pretrained]
    return pretrained[:1] + untrained + pretrained[1:]


def runs_per_arm(budget: Budget, tasks=None) -> int:
    others = [task for task in (tasks or GLUE_TASKS) if task not in TUNING_TASKS]
    grid = len(budget.learning_rates)
    return (len(TUNING_TASKS) * grid + sum(grid if task in OWN_GRID_TASKS else 1 for task in others)) \
        * len(budget.seeds)


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="smoke")
    parser.add_argument("--arms", default=None, help=f"comma-separated subset of {', '.join(ARMS)} "
                        "(default: the budget's required arms)")
    parser.add_argument("--pretrain_seed", type=int, default=0,
                        help="the pre-training seed of every arm run (0: the runs of the first table)")
    parser.add_argument("--tasks", default=None,
                        help=f"comma-separated fine-tuning tasks of {', '.join(TASKS)} (default: "
                             f"{', '.join(GLUE_TASKS)}); "
                             f"{', '.join(TUNING_TASKS)} always run, they choose the learning rate")
    parser.add_argument("--stage", choices=("all", "pretrain", "finetune", "report"), default="all")
    parser.add_argument("--jobs", type=int, default=1,
                        help="fine-tuning runs at once, the cores shared out between them (2 on 2 cores: "
                             "about 1.27x the runs per hour, measured on MRPC)")
    parser.add_argument("--work_dir", default=None,
                        help="default: ~/.cache/electra_tf/compare_objectives/<budget> (outside the checkout)")
    parser.add_argument("--results_dir", default=str(RESULTS_DIR),
                        help="where the run files (objectives/<budget>/), the table, JSON and plots go")
    args = parser.parse_args(argv)
    check_common_flags(parser, args, ARMS)
    if args.pretrain_seed < 0:
        parser.error(f"--pretrain_seed must be at least 0, got {args.pretrain_seed}")
    check_subset(parser, "tasks", args.tasks, TASKS, "task")
    return args


def command_line(args, budget: Budget) -> str:
    return f"python -m experiments.compare_objectives --budget={budget.name} --stage=report"


def main(argv=None):
    args = parse_args(argv)
    budget = BUDGETS[args.budget]
    arms = tuple(args.arms.split(",")) if args.arms else budget.arms
    tasks = tuple(args.tasks.split(",")) if args.tasks else None
    if args.pretrain_seed:  # no pre-training has no pre-training seed
        arms = tuple(arm for arm in arms if ARMS[arm] is not None)
    runs = [Run(arm, args.pretrain_seed) for arm in arms]
    if args.stage != "report" and (not GLUE.is_dir() or not ENWIKI.is_dir()):
        sys.exit(f"compare_objectives: error: the shared data folder {DATA} (glue/, pretrain/enwiki/) is absent")
    if args.stage != "report" and "NER" in (tasks or ()) and not CONLL.is_dir():
        sys.exit(f"compare_objectives: error: --tasks=NER needs {CONLL} (train.txt, dev.txt)")
    work_dir = Path(args.work_dir or Path.home() / ".cache" / "electra_tf" / "compare_objectives" / budget.name)
    recorder = Recorder(budget, work_dir, runs_dir_of(Path(args.results_dir), budget))
    log(f"budget {budget.name}, runs {', '.join(run.name for run in runs)}, work dir {work_dir}")
    if args.stage in ("all", "pretrain", "finetune"):
        data_dir = build_data(work_dir)
    if args.stage == "pretrain":
        for run in runs:
            if run.pretrained:
                pretrain(budget, run, work_dir, data_dir)
                recorder(run)
    if args.stage in ("all", "finetune"):
        progress = runner.Progress(runs_per_arm(budget, tasks) * len(runs), args.jobs)
        exports, ready = {}, []
        for run in schedule(runs):
            recorder.restore(run)
            if run.pretrained:
                if args.stage == "all":
                    exports[run] = pretrain(budget, run, work_dir, data_dir)
                    recorder(run)
                else:
                    exports[run] = pretrain_dir(work_dir, run) / "export"
                if not (exports[run] / "electra_config.json").exists():
                    log(f"[{run.name}] no export yet in {exports[run]}: run the pretrain stage first; skipping")
                    continue
            finetune_grid(recorder, run, exports.get(run), progress, SELECTION_TASK, args.jobs)
            ready.append(run)
        for run in ready:
            finetune_run(recorder, run, exports.get(run), progress, args.jobs, tasks)
    report(budget, Path(args.results_dir), command_line(args, budget))


if __name__ == "__main__":
    use_onednn_kernels()  # before TensorFlow is imported (electra_tf.model.flops imports it)
    main()
