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
import concurrent.futures
import dataclasses
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from electra_tf.runtime import use_onednn_kernels
from experiments.provenance import git_commit, machine_line

# The code whose edits make a run's commit "+modified".
CODE_PATHS = ("electra_tf", "data_prep", "run_pretraining.py", "run_finetuning.py", "experiments/compare_objectives.py")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
EN_VOCAB = DATA / "vocab" / "en_uncased" / "vocab.txt"
ENWIKI = DATA / "pretrain" / "enwiki"
GLUE = DATA / "glue"
CONLL = DATA / "conll2003"
RESULTS_DIR = ROOT / "docs" / "results"
DISCRIMINATOR_WIDTH = 256  # the `mini` discriminator's hidden size


def generator_arm(width: int) -> dict:
    """rtd with a generator of hidden size `width`: 64-d heads (at least one), FFN 4 × width."""
    return {"objective": "rtd", "generator.hidden_size": width, "generator.num_heads": max(1, width // 64),
            "generator.intermediate_size": 4 * width}


# Arm → pre-training objective overrides (None: no pre-training).
ARMS = {
    "rtd": {"objective": "rtd"},
    "mlm": {"objective": "mlm", "mlm_encoder": "discriminator"},
    "none": None,
    "rtd_masked_only": {"objective": "rtd_masked_only"},
    "replace_mlm": {"objective": "replace_mlm"},
    "all_tokens_mlm": {"objective": "all_tokens_mlm"},
    "gdes": {"objective": "rtd", "embedding_sharing": "gdes"},  # DeBERTaV3's gradient-disentangled sharing
    "electric": {"objective": "electric"},  # two generator towers + cloze head at every position: costlier
    "gen32": generator_arm(32),
    "gen128": generator_arm(128),
    "gen256": generator_arm(256),
    # The official generator options and whole-word masking (see docs/pretraining.md).
    "tied_generator": {**generator_arm(DISCRIMINATOR_WIDTH), "untied_generator": False},
    "untied_embeddings": {"objective": "rtd", "untied_generator_embeddings": True},
    "disallow_correct": {"objective": "rtd", "disallow_correct": True},
    "uniform_generator": {"objective": "rtd", "uniform_generator": True},
    "wwm": {"objective": "rtd", "mask_whole_words": True},
}
# Arms that run rtd's steps whatever their FLOPs: the generator-size study compares at equal steps.
EQUAL_STEP_ARMS = ("gen32", "gen128", "gen256")
# Task → (main metric key in run_finetuning's metrics.json, epochs).
TASKS = {"STS-B": ("spearman", 3), "MRPC": ("accuracy", 3), "SST-2": ("accuracy", 1),
         "CoLA": ("mcc", 3), "RTE": ("accuracy", 3), "NER": ("f1", 3)}
GLUE_TASKS = ("STS-B", "MRPC", "SST-2", "CoLA", "RTE")  # the default tasks and the average's
# run_finetuning's --task and --data_dir of the tasks that are not GLUE's.
TASK_DATA = {"NER": ("ner", CONLL)}
# Tasks that run the whole learning-rate grid and report their own best lr: a per-token task need not
# share the sentence tasks' best lr, and comparing arms at different lrs would confound the two.
OWN_GRID_TASKS = ("NER",)
TUNING_TASKS = ("STS-B", "MRPC")
SELECTION_TASK = "STS-B"
# The paper's Table 5 (GLUE dev score, ELECTRA-Base-sized models trained for the same steps).
PAPER_TABLE5 = (("rtd", "ELECTRA", 85.0), ("all_tokens_mlm", "All-Tokens MLM", 84.3),
                ("replace_mlm", "Replace MLM", 82.4), ("rtd_masked_only", "ELECTRA 15%", 82.4),
                ("mlm", "BERT", 82.2))
# Pre-training scalars kept in a run's committed curve.
CURVE_KEYS = ("step", "loss", "gen_loss", "disc_loss", "gen_accuracy", "disc_auc", "disc_accuracy",
              "replaced_fraction", "learning_rate", "examples_per_second")


@dataclasses.dataclass(frozen=True)
class Budget:
    name: str
    rtd_steps: int
    warmup_steps: int
    train_batch_size: int
    seeds: tuple
    learning_rates: tuple
    arms: tuple
    pretrain_hparams: dict = dataclasses.field(default_factory=dict)
    finetune_max_train_steps: Optional[int] = None  # None: the task's epochs
    finetune_max_seq_length: int = 128
    save_checkpoints_steps: int = 25


BUDGETS = {
    # The mini recipe: 1500 steps × 128 sequences of 128 tokens (192k examples).
    "cpu": Budget("cpu", rtd_steps=1500, warmup_steps=150, train_batch_size=128, seeds=(0, 1, 2),
                  learning_rates=(1e-4, 3e-4), arms=("rtd", "mlm", "none")),
    # Same pipeline, minutes: few steps, one seed, capped fine-tuning.
    "smoke": Budget("smoke", rtd_steps=30, warmup_steps=5, train_batch_size=16, seeds=(0,),
                    learning_rates=(1e-4, 3e-4), arms=("rtd", "mlm", "none"),
                    finetune_max_train_steps=20, finetune_max_seq_length=64, save_checkpoints_steps=10),
}


@dataclasses.dataclass(frozen=True)
class Run:
    """One arm pre-trained with one seed: a row of the report."""

    arm: str
    pretrain_seed: int = 0

    @property
    def name(self) -> str:
        # Seed 0 keeps the arm's name, so work folders made before seeds existed still resume.
        return self.arm if self.pretrain_seed == 0 else f"{self.arm}-pseed{self.pretrain_seed}"

    @property
    def pretrained(self) -> bool:
        return ARMS[self.arm] is not None


def log(message: str):
    print(f"[compare_objectives {time.strftime('%H:%M:%S')}] {message}", flush=True)


def format_seconds(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def write_json_atomic(path: Path, value) -> None:
    from electra_tf.text.manifest import write_json_atomic as write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, value, sort_keys=True)


# --------------------------------------------------------------------------- compute accounting

def arm_config(budget: Budget, arm: str, num_train_steps: Optional[int] = None):
    from electra_tf.config import get_config

    overrides = dict(budget.pretrain_hparams, **ARMS[arm], train_batch_size=budget.train_batch_size,
                     num_warmup_steps=budget.warmup_steps)
    if num_train_steps is not None:
        overrides["num_train_steps"] = num_train_steps
    return get_config("mini", overrides)


def arm_steps(budget: Budget, arm: str) -> int:
    """rtd's steps, or the steps that spend rtd's FLOPs if that is more (never fewer examples)."""
    from electra_tf.model.flops import steps_for_flops, train_flops_per_step

    if arm == "rtd" or arm in EQUAL_STEP_ARMS:
        return budget.rtd_steps
    rtd_flops = train_flops_per_step(arm_config(budget, "rtd")) * budget.rtd_steps
    return max(budget.rtd_steps, steps_for_flops(arm_config(budget, arm), rtd_flops))


def arm_compute(budget: Budget, arm: str) -> dict:
    from electra_tf.model.flops import train_flops_per_step

    if ARMS[arm] is None:
        return {"steps": 0, "examples": 0, "pretrain_flops": 0, "flops_per_step": 0}
    steps = arm_steps(budget, arm)
    per_step = train_flops_per_step(arm_config(budget, arm, steps))
    return {"steps": steps, "examples": steps * budget.train_batch_size, "pretrain_flops": per_step * steps,
            "flops_per_step": per_step}


def generator_width(arm: str) -> Optional[int]:
    """The generator's hidden size of a generator-size arm or of `rtd` (the `mini` default)."""
    if arm == "rtd":
        from electra_tf.config import get_config

        return get_config("mini").generator.hidden_size
    overrides = ARMS.get(arm) or {}
    return overrides.get("generator.hidden_size") if arm in EQUAL_STEP_ARMS else None


# --------------------------------------------------------------------------- stages

def build_data(work_dir: Path) -> Path:
    data_dir = work_dir / "data"
    if (data_dir / "manifest.json").exists():
        return data_dir
    log(f"building the enwiki shards in {data_dir}")
    subprocess.run([sys.executable, "-m", "data_prep.build_pretraining_dataset", f"--input={ENWIKI / 'AA'}",
                    f"--vocab_file={EN_VOCAB}", f"--output_dir={data_dir}", "--max_seq_length=128",
                    "--num_processes=2", "--num_shards=8"], check=True, cwd=ROOT)
    return data_dir


def pretrain_dir(work_dir: Path, run: Run) -> Path:
    return work_dir / "arms" / run.name / "pretrain"


def pretrain_command(budget: Budget, run: Run, data_dir: Path, model_dir: Path) -> list[str]:
    steps = arm_steps(budget, run.arm)
    hparams = dict(budget.pretrain_hparams, **ARMS[run.arm])
    return [sys.executable, "run_pretraining.py", "--model_size=mini", f"--data_dir={data_dir}",
            f"--model_dir={model_dir}", f"--hparams={json.dumps(hparams, sort_keys=True)}",
            f"--num_train_steps={steps}", f"--num_warmup_steps={budget.warmup_steps}",
            f"--train_batch_size={budget.train_batch_size}",
            f"--save_checkpoints_steps={budget.save_checkpoints_steps}", "--keep_checkpoint_max=3",
            f"--log_steps={budget.save_checkpoints_steps}", f"--steps_per_loop={budget.save_checkpoints_steps}",
            f"--seed={run.pretrain_seed}"]


def read_train_log(model_dir: Path) -> list[dict]:
    return read_jsonl(model_dir / "train_log.jsonl")


def read_jsonl(path: Path) -> list[dict]:
    """A JSON-lines file's rows (none if it is absent), skipping a last line still being written."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return rows


def record_commit(path: Path) -> None:
    """Appends the running commit to `path` (one line per distinct commit that ran the stage)."""
    commits = path.read_text().split() if path.exists() else []
    commit = git_commit(CODE_PATHS)
    if commit not in commits:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(commit + "\n")


def pretrain(budget: Budget, run: Run, work_dir: Path, data_dir: Path) -> Path:
    """Runs (or resumes) the run's pre-training; returns its export dir."""
    model_dir = pretrain_dir(work_dir, run)
    export_dir = model_dir / "export"
    if (export_dir / "electra_config.json").exists():
        return export_dir
    steps = arm_steps(budget, run.arm)
    model_dir.mkdir(parents=True, exist_ok=True)
    record_commit(model_dir / "commits.txt")
    command = pretrain_command(budget, run, data_dir, model_dir)
    log(f"[{run.name}] pre-training {steps} steps × {budget.train_batch_size}: {' '.join(command[1:])}")
    start_step = (read_train_log(model_dir) or [{"step": 0}])[-1]["step"]
    with open(model_dir / "stdout.log", "a") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        watch_pretraining(process, model_dir, run.name, steps, start_step)
    if process.returncode != 0:
        raise RuntimeError(f"[{run.name}] pre-training failed (exit {process.returncode}); "
                           f"see {model_dir / 'stdout.log'}")
    return export_dir


def watch_pretraining(process: subprocess.Popen, model_dir: Path, name: str, steps: int, from_step: int,
                      stop_reason: Callable[[], Optional[str]] = lambda: None,
                      say: Callable[[str], None] = log, poll_seconds: float = 2.0) -> Optional[str]:
    """Progress lines (step, speed, metric, loss, ETA) from `model_dir`'s train log until the pre-training exits.

    When `stop_reason()` first names a reason (a deadline, a signal), it is said and passed on as SIGTERM:
    run_pretraining checkpoints the step it reached and exits, and the next run resumes there. Returns that
    reason, or None when the pre-training ended by itself. (The one watcher of the objectives, efficiency-curve
    and domain-adaptation experiments.)"""
    last_step, started, reason = None, time.time(), None
    while process.poll() is None:
        if reason is None:
            reason = stop_reason()
            if reason:
                say(f"[{name}] {reason}: the pre-training checkpoints the step it reached and stops")
                process.terminate()
        rows = read_train_log(model_dir)
        if rows and rows[-1]["step"] != last_step:
            row, last_step = rows[-1], rows[-1]["step"]
            say(progress_line(name, row, steps, (last_step - from_step) / max(time.time() - started, 1e-9)))
        time.sleep(poll_seconds)
    return reason


def progress_line(name: str, row: dict, steps: int, steps_per_second: float) -> str:
    eta = (steps - row["step"]) / steps_per_second if steps_per_second > 0 else float("nan")
    metric = "disc_auc" if "disc_auc" in row else "gen_accuracy"
    return (f"[{name}] step {row['step']}/{steps}  {row.get('examples_per_second', float('nan')):.1f} ex/s  "
            f"{metric} {row.get(metric, float('nan')):.3f}  loss {row.get('loss', float('nan')):.3f}  "
            f"ETA {format_seconds(eta)}")


def finetune_dir(work_dir: Path, run: Run, task: str, lr: float, seed: int) -> Path:
    return work_dir / "arms" / run.name / "finetune" / task / f"lr{lr:g}" / f"seed{seed}"


def finetune_command(budget: Budget, export_dir: Optional[Path], task: str, lr: float, seed: int,
                     output_dir: Path, data_dir: Optional[Path] = None, vocab_file: Path = EN_VOCAB,
                     extra_flags: tuple = ()) -> list[str]:
    """The protocol's run_finetuning command; `data_dir` (default: the task's), `vocab_file` and `extra_flags`
    are for experiments that fine-tune elsewhere (experiments/domain_adaptation.py: an extended vocab)."""
    _, epochs = TASKS[task]
    task_flag, task_dir = TASK_DATA.get(task, (task, GLUE))
    command = [sys.executable, "run_finetuning.py", f"--task={task_flag}", f"--data_dir={data_dir or task_dir}",
               f"--output_dir={output_dir}", f"--vocab_file={vocab_file}", f"--learning_rate={lr:g}",
               f"--num_train_epochs={epochs}", "--train_batch_size=32", "--layerwise_lr_decay=1.0",
               f"--max_seq_length={budget.finetune_max_seq_length}", f"--seed={seed}", "--log_steps=100"]
    if export_dir is not None:
        command.append(f"--init_checkpoint={export_dir}")
    else:
        command.append("--model_size=mini")
    if budget.finetune_max_train_steps:
        command.append(f"--max_train_steps={budget.finetune_max_train_steps}")
    return command + list(extra_flags)


def finetune(budget: Budget, run: Run, export_dir: Optional[Path], task: str, lr: float, seed: int,
             work_dir: Path, threads: Optional[int] = None, **command_options) -> float:
    """One fine-tuning run (cached): the task's main dev metric × 100.

    `threads`: TensorFlow's intra-op threads for the run (inter-op 1), for runs side by side
    (`--jobs`); None keeps TensorFlow's defaults (all cores). `command_options`: `finetune_command`'s.
    """
    output_dir = finetune_dir(work_dir, run, task, lr, seed)
    done = output_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())["metric"]
    output_dir.mkdir(parents=True, exist_ok=True)
    command = finetune_command(budget, export_dir, task, lr, seed, output_dir, **command_options)
    started = time.time()
    with open(output_dir / "stdout.log", "w") as out:
        result = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=thread_env(threads))
    if result.returncode != 0:
        raise RuntimeError(f"[{run.name}] {task} lr {lr:g} seed {seed} failed; see {output_dir / 'stdout.log'}")
    metric_key, _ = TASKS[task]
    summary = json.loads((output_dir / "metrics.json").read_text())
    value = float(summary["median"][metric_key])
    write_json_atomic(done, {"metric": value, "metric_key": metric_key, "seconds": time.time() - started,
                             "command": command[1:], "commit": git_commit(CODE_PATHS)})
    return value


def thread_env(threads: Optional[int]) -> Optional[dict]:
    """The environment of a fine-tuning subprocess limited to `threads` intra-op threads."""
    if threads is None:
        return None
    return dict(os.environ, TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS="1")


def run_all(runs: list, progress, jobs: int = 1) -> None:
    """Fine-tuning runs `(name, task, lr, seed, fn)`; `fn(threads)` runs one. With `jobs` > 1, that
    many at once, each with the cores shared out (`os.cpu_count() // jobs`, at least 1). Every run
    is tried; the first failure is raised after the others have finished."""
    if jobs <= 1:
        for name, task, lr, seed, fn in runs:
            progress(name, task, lr, seed, lambda: fn(None))
        return
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(progress, name, task, lr, seed, functools.partial(fn, threads))
                   for name, task, lr, seed, fn in runs]
    for future in futures:
        future.result()


PRETRAIN_FIELDS = ("pretrain_commits", "pretrain_steps_done", "pretrain_seconds", "pretrain_curve")


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
    run_all(finetune_runs(recorder, run, export_dir, [task], recorder.budget.learning_rates), progress, jobs)


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
    run_all(runs, progress, jobs)


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


class Progress:
    """Prints each fine-tuning run with an ETA over the runs still to do (each run counted once).

    Thread-safe: with `jobs` runs at once the ETA divides the remaining run time by `jobs`.
    """

    def __init__(self, total_runs: int, jobs: int = 1):
        self.total, self.jobs, self.done, self.seconds = total_runs, max(1, jobs), set(), []
        self.lock = threading.Lock()

    def __call__(self, name, task, lr, seed, fn):
        key = (name, task, lr, seed)
        with self.lock:
            repeated = key in self.done
        if repeated:  # the selection task's runs are asked for again, cached, with the other tasks
            return fn()
        started = time.time()
        value = fn()
        elapsed = time.time() - started
        with self.lock:
            self.done.add(key)
            if elapsed > 1.0:  # cached runs take no time and say nothing about speed
                self.seconds.append(elapsed)
            remaining = self.total - len(self.done)
            eta = statistics.mean(self.seconds) * remaining / self.jobs if self.seconds else 0.0
            log(f"[{name}] {task} lr {lr:g} seed {seed}: {value:.2f}  ({len(self.done)}/{self.total} runs, "
                f"ETA ≤ {format_seconds(eta)})")
        return value


# --------------------------------------------------------------------------- a run's committed record

def collect_finetune(budget: Budget, run: Run, work_dir: Path) -> dict:
    """{task: {lr: [metric per finished seed]}} from the cached runs."""
    results = {}
    for task in TASKS:
        for lr in budget.learning_rates:
            values = []
            for seed in budget.seeds:
                done = finetune_dir(work_dir, run, task, lr, seed) / "result.json"
                if done.exists():
                    values.append(json.loads(done.read_text())["metric"])
            if values:
                results.setdefault(task, {})[f"{lr:g}"] = values
    return results


def restored_marker(work_dir: Path, run: Run) -> Path:
    return work_dir / "arms" / run.name / "finetune" / "restored.json"


def restored(work_dir: Path, run: Run) -> dict:
    """What `restore_finetune` took from the committed record: its commits and fine-tuning seconds."""
    path = restored_marker(work_dir, run)
    return json.loads(path.read_text()) if path.exists() else {"finetune_commits": [], "finetune_seconds": 0.0}


def finished_results(work_dir: Path, run: Run) -> list[dict]:
    """Every `result.json` of the run's finished fine-tuning runs (task/lr/seed folders)."""
    return [json.loads(path.read_text())
            for path in (work_dir / "arms" / run.name / "finetune").glob("*/*/*/result.json")]


def finetune_commits(work_dir: Path, run: Run) -> list[str]:
    ran = {result.get("commit", "unknown") for result in finished_results(work_dir, run)
           if "restored_from" not in result}
    return sorted(ran | set(restored(work_dir, run)["finetune_commits"]))


def finetune_seconds(work_dir: Path, run: Run) -> float:
    """Wall-clock of the run's finished fine-tuning runs (restored ones as their record counted them)."""
    return restored(work_dir, run)["finetune_seconds"] + sum(
        result.get("seconds", 0.0) for result in finished_results(work_dir, run))


def restore_finetune(budget: Budget, run: Run, work_dir: Path, record_path: Path) -> int:
    """Gives a work folder the fine-tuning results of the run's committed record that it lacks.

    The machine, with the work folder, can be replaced between sittings; without this, going on with
    a run (another task, a later stage) would redo its finished fine-tuning and rewrite the record
    with only the new results. A task × lr is restored only when the record has every seed (the
    record keeps values in seed order, so a partial list cannot be matched to its seeds). Returns
    how many results were restored. Runs once per work folder (`restored_marker`): the marker carries
    the record's commits and fine-tuning seconds, which must be counted once, so a record rewritten
    elsewhere afterwards is not merged again (a work folder is used on one machine at a time).
    """
    if not record_path.exists() or restored_marker(work_dir, run).exists():
        return 0
    record = json.loads(record_path.read_text())
    count = 0
    for task, by_lr in record.get("finetune", {}).items():
        for lr, values in by_lr.items():
            if task not in TASKS or len(values) != len(budget.seeds):
                continue
            for seed, value in zip(budget.seeds, values):
                done = finetune_dir(work_dir, run, task, float(lr), seed) / "result.json"
                if not done.exists():
                    write_json_atomic(done, {"metric": value, "metric_key": TASKS[task][0], "seconds": 0.0,
                                             "restored_from": str(record_path.name)})
                    count += 1
    if count:
        write_json_atomic(restored_marker(work_dir, run),
                          {"finetune_commits": record.get("finetune_commits", []),
                           "finetune_seconds": record.get("finetune_seconds", 0.0), "results": count})
    return count


def curve(rows: list[dict]) -> list[dict]:
    """The pre-training log's scalars worth keeping, rounded: the committed curve."""
    return [{key: round(row[key], 6) if isinstance(row[key], float) else row[key]
             for key in CURVE_KEYS if key in row} for row in rows]


def run_record(budget: Budget, run: Run, work_dir: Path) -> dict:
    """Everything the report needs of one run, from its work folder."""
    rows = read_train_log(pretrain_dir(work_dir, run)) if run.pretrained else []
    commits_file = pretrain_dir(work_dir, run) / "commits.txt"
    return {
        "arm": run.arm, "pretrain_seed": run.pretrain_seed, "budget": budget.name, "hparams": ARMS[run.arm],
        **arm_compute(budget, run.arm),
        "pretrain_commits": commits_file.read_text().split() if commits_file.exists() else [],
        "finetune_commits": finetune_commits(work_dir, run),
        "updated": time.strftime("%Y-%m-%d"), "machine": machine_line(),
        "pretrain_steps_done": rows[-1]["step"] if rows else 0,
        "pretrain_seconds": sum(budget.save_checkpoints_steps * budget.train_batch_size / r["examples_per_second"]
                                for r in rows if r.get("examples_per_second")),
        "finetune_seconds": finetune_seconds(work_dir, run),
        "pretrain_curve": curve(rows),
        "finetune": collect_finetune(budget, run, work_dir),
    }


def runs_dir_of(results_dir: Path, budget: Budget) -> Path:
    return Path(results_dir) / "objectives" / budget.name


def run_file(runs_dir: Path, run: Run) -> Path:
    return runs_dir / f"{run.arm}-pseed{run.pretrain_seed}.json"


def load_runs(runs_dir: Path) -> list[dict]:
    """Every committed run record, ordered by arm (ARMS order) then pre-training seed."""
    records = [json.loads(path.read_text()) for path in sorted(Path(runs_dir).glob("*.json"))]
    order = list(ARMS)
    return sorted(records, key=lambda r: (order.index(r["arm"]) if r["arm"] in order else len(order),
                                          r["pretrain_seed"]))


# --------------------------------------------------------------------------- the report

def chosen_lr(finetune_results: dict) -> float:
    """The learning rate with the better STS-B median (the first on ties)."""
    by_lr = finetune_results.get(SELECTION_TASK, {})
    if not by_lr:
        raise ValueError(f"no {SELECTION_TASK} results to choose a learning rate from")
    return float(max(by_lr, key=lambda lr: statistics.median(by_lr[lr])))


def median_or_none(values):
    return statistics.median(values) if values else None


def headline_lr(entry: dict, task: str) -> Optional[str]:
    """The lr of the task's headline: the run's chosen one, or the task's own best for `OWN_GRID_TASKS`."""
    by_lr = entry["finetune"].get(task, {})
    if task in OWN_GRID_TASKS and by_lr:
        return max(by_lr, key=lambda lr: statistics.median(by_lr[lr]))
    return None if entry.get("chosen_lr") is None else f"{entry['chosen_lr']:g}"


def headline(entry: dict, task: str) -> Optional[float]:
    """The task's median over fine-tuning seeds at its headline lr (`headline_lr`)."""
    lr = headline_lr(entry, task)
    return None if lr is None else median_or_none(entry["finetune"].get(task, {}).get(lr, []))


def glue_average(entry: dict) -> Optional[float]:
    values = [headline(entry, task) for task in GLUE_TASKS]
    return statistics.mean(values) if all(v is not None for v in values) else None


def run_label(record: dict) -> str:
    return f"{record['arm']} (pre-training seed {record['pretrain_seed']})"


def build_results(budget: Budget, records: list[dict], command: str) -> dict:
    """The report's data: each run with its chosen lr, and per arm the median over pre-training seeds."""
    from electra_tf.config import get_config
    from electra_tf.model.flops import train_flops_per_step

    small = get_config("small")
    small_flops = train_flops_per_step(small) * small.num_train_steps
    runs = {}
    for record in records:
        entry = dict(record)
        try:
            entry["chosen_lr"] = chosen_lr(entry["finetune"])
        except ValueError:
            entry["chosen_lr"] = None
        entry["fraction_of_electra_small_flops"] = entry["pretrain_flops"] / small_flops
        runs[f"{record['arm']}-pseed{record['pretrain_seed']}"] = entry
    arms = {}
    for entry in runs.values():
        arms.setdefault(entry["arm"], []).append(entry)
    summary = {}
    for arm, entries in arms.items():
        per_task = {}
        for task in TASKS:
            values = [headline(e, task) for e in entries]
            values = [v for v in values if v is not None]
            if values:
                per_task[task] = {"median": statistics.median(values), "per_seed": values,
                                  "spread": max(values) - min(values)}
        summary[arm] = {"pretrain_seeds": [e["pretrain_seed"] for e in entries], "tasks": per_task,
                        "generator_width": generator_width(arm)}
    return {"budget": budget.name, "command": command, "model_size": "mini",
            "electra_small_pretrain_flops": small_flops, "average_tasks": list(GLUE_TASKS), "runs": runs,
            "arms": summary, "arm_order": list(summary)}  # the JSON's keys are sorted; this keeps ARMS order


def _cell(value: Optional[float], seeds=()) -> str:
    if value is None:
        return "–"
    return f"**{value:.1f}**" + (f" [{', '.join(f'{v:.1f}' for v in seeds)}]" if seeds else "")


def _headline_cell(entry: dict, task: str) -> str:
    """The task's headline with its seeds; an `OWN_GRID_TASKS` cell names its lr."""
    lr = headline_lr(entry, task)
    value = headline(entry, task)
    cell = _cell(value, entry["finetune"].get(task, {}).get(lr or "", []))
    return cell + (f" (lr {lr})" if task in OWN_GRID_TASKS and value else "")


def _commit(entry: dict) -> str:
    commits = sorted(set(entry.get("pretrain_commits", [])) | set(entry.get("finetune_commits", [])))
    return ", ".join(f"`{c}`" for c in commits) or "–"


def ordering_lines(results: dict) -> list[str]:
    """Our ordering by STS-B median beside the paper's Table 5, with the seed spread."""
    stsb = {arm: s["tasks"][SELECTION_TASK]["median"] for arm, s in results["arms"].items()
            if SELECTION_TASK in s["tasks"]}
    widths = {arm: results["arms"][arm]["generator_width"] for arm in stsb
              if results["arms"][arm]["generator_width"]}  # rtd and the generator-size arms
    by_width = sorted(widths, key=widths.get)
    table5 = {arm: value for arm, value in stsb.items() if arm not in widths or arm == "rtd"}
    spreads = [s["tasks"][SELECTION_TASK]["spread"] for s in results["arms"].values()
               if SELECTION_TASK in s["tasks"] and len(s["tasks"][SELECTION_TASK]["per_seed"]) > 1]
    paper = " > ".join(f"{label} {score}" for _, label, score in PAPER_TABLE5)
    ours = " > ".join(f"{arm} {table5[arm]:.1f}" for arm in sorted(table5, key=table5.get, reverse=True))
    spread = (f"the largest STS-B spread between pre-training seeds of one arm is {max(spreads):.1f} points: "
              "arms closer than that cannot be told apart" if spreads else
              "no arm has two pre-training seeds yet, so the seed spread is unknown")
    lines = [f"- The paper's Table 5 (GLUE, Base-sized, equal steps): {paper}.",
             f"- Ours (STS-B, median over pre-training seeds): {ours}; {spread}."]
    if any(arm != "rtd" for arm in by_width):
        curve = ", ".join(f"{widths[arm]} ({widths[arm] / DISCRIMINATOR_WIDTH:g}): {stsb[arm]:.1f}" for arm in by_width)
        lines.append(f"- Generator size, the paper's Figure 3: GLUE is best with a generator 1/4–1/2 of the "
                     f"discriminator's width. Ours, STS-B by generator hidden size (÷ the discriminator's "
                     f"{DISCRIMINATOR_WIDTH}): {curve}.")
    ner = {arm: s["tasks"]["NER"]["median"] for arm, s in results["arms"].items() if "NER" in s["tasks"]}
    if ner:
        lines.append("- NER (CoNLL-2003 dev entity F1, median over pre-training seeds): "
                     + " > ".join(f"{arm} {ner[arm]:.1f}" for arm in sorted(ner, key=ner.get, reverse=True)) + ".")
    return lines


def markdown(results: dict) -> str:
    tasks = list(TASKS)
    lines = [f"# Objectives at equal compute (`--budget={results['budget']}`)", "",
             f"Generated by `{results['command']}` from the run files in "
             f"`docs/results/objectives/{results['budget']}/`.", "",
             "Each row is one pre-training run (arm × pre-training seed) with the commits that ran it. Cells: the "
             "median over fine-tuning seeds at the run's chosen learning rate (the better STS-B median of the "
             "grid), metric × 100: Spearman (STS-B), accuracy (MRPC, SST-2, RTE), MCC (CoLA), entity F1 "
             "(NER: CoNLL-2003 dev, at its own best lr of the grid, named); the fine-tuning seeds in brackets; the "
             "average is over the GLUE tasks.", "",
             "| arm | pre-training seed | commits | steps | examples | pre-train FLOPs | × ELECTRA-Small | chosen lr | "
             + " | ".join(tasks) + " | average |",
             "|---|---|---|---|---|---|---|---|" + "---|" * len(tasks) + "---|"]
    for entry in results["runs"].values():
        lr = entry["chosen_lr"]
        cells = [_headline_cell(entry, task) for task in tasks]
        average = glue_average(entry)
        lines.append(f"| {entry['arm']} | {entry['pretrain_seed'] if entry['steps'] else '–'} | {_commit(entry)} | "
                     f"{entry['pretrain_steps_done']}/{entry['steps']} | {entry['examples']:,} | "
                     f"{entry['pretrain_flops']:.3g} | {entry['fraction_of_electra_small_flops']:.2%} | "
                     f"{'–' if lr is None else f'{lr:g}'} | " + " | ".join(cells)
                     + f" | {'–' if average is None else f'{average:.1f}'} |")
    lines += ["", "Per arm, the median over pre-training seeds of the runs' medians (each seed's value in brackets):",
              "", "| arm | pre-training seeds | " + " | ".join(tasks) + " |", "|---|---|" + "---|" * len(tasks)]
    for arm, summary in results["arms"].items():
        cells = [_cell(summary["tasks"][t]["median"], summary["tasks"][t]["per_seed"]) if t in summary["tasks"]
                 else "–" for t in tasks]
        lines.append(f"| {arm} | {', '.join(map(str, summary['pretrain_seeds']))} | " + " | ".join(cells) + " |")
    lines += ["", "Ordering:", ""] + ordering_lines(results)
    lines += ["", "Learning-rate grid (median [seeds]) on the tuning tasks and NER:", "",
              "| run | task | " + " | ".join(f"lr {lr}" for lr in _grid(results)) + " |",
              "|---|---|" + "---|" * len(_grid(results))]
    for name, entry in results["runs"].items():
        for task in TUNING_TASKS + tuple(t for t in OWN_GRID_TASKS if t in entry["finetune"]):
            by_lr = entry["finetune"].get(task, {})
            cells = [f"{statistics.median(by_lr[lr]):.1f} [{', '.join(f'{v:.1f}' for v in by_lr[lr])}]"
                     if lr in by_lr else "–" for lr in _grid(results)]
            lines.append(f"| {name} | {task} | " + " | ".join(cells) + " |")
    lines += ["", "Pre-training FLOPs: forward matmul FLOPs × 3, generator included (`electra_tf/model/flops.py`); "
              f"ELECTRA-Small (1M steps × 128 × 128) is {results['electra_small_pretrain_flops']:.3g} by the same "
              "formula. The rtd arm runs the budget's steps; the generator-size arms the same steps; every other "
              "arm the steps that spend rtd's FLOPs, but never fewer than rtd's.", "",
              "Wall-clock (2 CPU cores): "
              + "; ".join(f"{name} pre-training {format_seconds(e['pretrain_seconds'])}, fine-tuning "
                          f"{format_seconds(e.get('finetune_seconds', 0.0))}" for name, e in results["runs"].items())
              + ".", ""]
    missing = [name for name, e in results["runs"].items() if e["steps"] and not e["pretrain_curve"]]
    if missing:
        lines += [f"No pre-training curve was kept for {', '.join(missing)}: only the fine-tuning results of those "
                  "runs survived their work folder.", ""]
    return "\n".join(lines)


def _grid(results: dict) -> list[str]:
    return sorted({lr for e in results["runs"].values() for t in e["finetune"].values() for lr in t}, key=float)


def plot(results: dict, out_dir: Path) -> list[Path]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (pip install -r requirements-bench.txt): no plots")
        return []
    colours = {arm: f"C{index % 10}" for index, arm in enumerate(results["arms"])}
    paths = [_plot_vs_flops(plt, results, colours, out_dir), _plot_generator_width(plt, results, out_dir),
             _plot_curves(plt, results, colours, out_dir)]
    return [path for path in paths if path is not None]


def _plot_vs_flops(plt, results, colours, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for entry in results["runs"].values():
        x = max(entry["pretrain_flops"], 1e12)
        for ax, value, title in ((axes[0], headline(entry, "STS-B"), "STS-B Spearman × 100"),
                                 (axes[1], glue_average(entry), "average of the five tasks")):
            if value is not None:
                ax.scatter([x], [value], s=50, color=colours[entry["arm"]])
                ax.annotate(f"{entry['arm']}/{entry['pretrain_seed']}", (x, value), textcoords="offset points",
                            xytext=(4, 4), fontsize=7)
            ax.set_title(title)
            ax.set_xscale("log")
            ax.set_xlabel("pre-training FLOPs (none at 1e12); label arm/pre-training seed")
    fig.tight_layout()
    path = out_dir / "compare_objectives_vs_flops.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _plot_generator_width(plt, results, out_dir):
    points = [(s["generator_width"] / DISCRIMINATOR_WIDTH, s["tasks"][SELECTION_TASK])
              for s in results["arms"].values()
              if s["generator_width"] and SELECTION_TASK in s["tasks"]]
    if not points:
        return None
    points.sort(key=lambda p: p[0])
    fig, ax = plt.subplots(figsize=(5, 4))
    for ratio, task in points:
        ax.scatter([ratio] * len(task["per_seed"]), task["per_seed"], color="C0", s=25, alpha=0.6)
    ax.plot([p[0] for p in points], [p[1]["median"] for p in points], "o-", color="C1", label="median over seeds")
    for arm, style in (("mlm", "--"), ("none", ":")):  # the bars a generator size has to clear
        reference = results["arms"].get(arm, {}).get("tasks", {}).get(SELECTION_TASK)
        if reference:
            ax.axhline(reference["median"], linestyle=style, color="grey", linewidth=1, label=f"{arm} (median)")
    ax.set_xscale("log", base=2)
    ratios = [p[0] for p in points]
    ax.set_xticks(ratios, [f"{ratio:g}\n({round(ratio * DISCRIMINATOR_WIDTH)})" for ratio in ratios])
    ax.set_xlabel("generator width / discriminator width (generator hidden size)")
    ax.set_ylabel("STS-B Spearman × 100")
    ax.set_title("generator size (rtd, equal steps)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "compare_objectives_generator_size.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _plot_curves(plt, results, colours, out_dir):
    curves = [("disc_auc", "discriminator AUC"), ("gen_accuracy", "generator / MLM accuracy"),
              ("gen_loss", "generator / MLM loss"), ("disc_loss", "discriminator loss")]
    fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3.5))
    for name, entry in results["runs"].items():
        for ax, (key, title) in zip(axes, curves):
            points = [(r["step"], r[key]) for r in entry["pretrain_curve"] if key in r]
            if points:
                style = "-" if entry["pretrain_seed"] == 0 else "--"
                ax.plot(*zip(*points), style, label=name, color=colours[entry["arm"]], linewidth=1)
            ax.set_title(title)
            ax.set_xlabel("step")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.tight_layout()
    path = out_dir / "compare_objectives_pretraining.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(budget: Budget, results_dir: Path, command: str) -> dict:
    """docs/results/compare_objectives[_<budget>].{md,json} (and the plots) from the committed run files."""
    results_dir = Path(results_dir)
    results = build_results(budget, load_runs(runs_dir_of(results_dir, budget)), command)
    stem = "compare_objectives" if budget.name == "cpu" else f"compare_objectives_{budget.name}"
    write_json_atomic(results_dir / f"{stem}.json", results)
    (results_dir / f"{stem}.md").write_text(markdown(results))
    if budget.name == "cpu":
        plot(results, results_dir)
    print(markdown(results), flush=True)
    return results


# --------------------------------------------------------------------------- main

def check_common_flags(parser, args, arms) -> None:
    """The flags the experiments share: `--arms` (comma-separated, each one of `arms`) and `--jobs` (>= 1);
    `parser.error` names the flag and what was expected."""
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    check_subset(parser, "arms", args.arms, arms, "arm")


def check_subset(parser, flag: str, value, choices, noun: str) -> None:
    """`--flag`'s comma-separated names (None or empty: the default) must be among `choices`."""
    unknown = sorted(set(value.split(",")) - set(choices)) if value else []
    if unknown:
        parser.error(f"--{flag}: unknown {noun}(s) {unknown}; choose from {list(choices)}")


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
        progress = Progress(runs_per_arm(budget, tasks) * len(runs), args.jobs)
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
