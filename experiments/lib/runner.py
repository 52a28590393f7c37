"""Running an experiment's pieces as subprocesses: the shards, a pre-training (resumed, watched, stoppable), one
fine-tuning run (cached), many at once with the cores shared out, and the progress lines; the flags that every
experiment's command line shares.

Every experiment runs `run_pretraining.py` and `run_finetuning.py` through here, so they pre-train and fine-tune
alike (`experiments.lib.protocol`); the records of what ran are `experiments.lib.records`'.

Example:

>>> format_seconds(3725), format_seconds(float("nan"))
('1:02:05', '?')
>>> thread_env(None) is None, thread_env(2)["TF_NUM_INTRAOP_THREADS"]
(True, '2')
"""

from __future__ import annotations

import concurrent.futures
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

from experiments.lib.protocol import ARMS, CODE_PATHS, EN_VOCAB, ENWIKI, GLUE, ROOT, TASK_DATA, TASKS, Budget, Run, arm_steps
from experiments.lib.workdir import finetune_dir, pretrain_dir, read_train_log, write_json_atomic
from experiments.provenance import git_commit


def log(message: str):
    print(f"[compare_objectives {time.strftime('%H:%M:%S')}] {message}", flush=True)


def format_seconds(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def build_data(work_dir: Path) -> Path:
    data_dir = work_dir / "data"
    if (data_dir / "manifest.json").exists():
        return data_dir
    log(f"building the enwiki shards in {data_dir}")
    subprocess.run([sys.executable, "-m", "data_prep.build_pretraining_dataset", f"--input={ENWIKI / 'AA'}",
                    f"--vocab_file={EN_VOCAB}", f"--output_dir={data_dir}", "--max_seq_length=128",
                    "--num_processes=2", "--num_shards=8"], check=True, cwd=ROOT)
    return data_dir


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


def checkpoint_step(model_dir: Path) -> int:
    """The step of the newest checkpoint in the run (0 without one)."""
    state = model_dir / "checkpoints" / "checkpoint"
    if not state.exists():
        return 0
    first = state.read_text().splitlines()[0]  # model_checkpoint_path: "ckpt-N"
    return int(first.rsplit("-", 1)[1].rstrip('"'))


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


# --------------------------------------------------------------------------- the flags every experiment shares

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
