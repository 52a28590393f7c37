r"""Does replaced-token detection beat masked LM at equal compute? Pre-train each arm, fine-tune, tabulate.

    python -m experiments.compare_objectives --budget=cpu      # hours: spans sittings, resumes
    python -m experiments.compare_objectives --budget=smoke    # the same pipeline in minutes

Arms: `rtd` (ELECTRA), `mlm` (BERT-style, discriminator-sized), `none` (no pre-training), and the
paper's ablations `rtd_masked_only`, `replace_mlm`, `all_tokens_mlm` (see `electra_tf/config.py`), and
`gdes` (rtd with DeBERTaV3's gradient-disentangled embedding sharing).
Every arm pre-trains the `mini` shape on the English Wikipedia shards built from
`../shared/data/pretrain/enwiki` with the shared English-uncased vocab. Compute: the `rtd` arm
runs the budget's steps; every other arm runs the steps that spend the same training FLOPs
(`electra_tf/flops.py`), but never fewer than rtd's, so no arm sees fewer examples (arms that are
costlier than rtd per step therefore get more compute than rtd, and the table says so).

Fine-tuning per arm: STS-B and MRPC at each learning rate of the grid, several seeds; the arm's
learning rate is the one with the better STS-B median; with it, SST-2, CoLA and RTE. STS-B runs
right after each arm's pre-training (and `none` right after the first arm), so the headline
comparison is known early; the other tasks follow once every arm has pre-trained.

Everything is resumable: the work folder (`--work_dir`, default `~/.cache/electra_tf/
compare_objectives/<budget>`, outside the checkout) holds the shards, each arm's pre-training run
(`run_pretraining.py` resumes from its newest checkpoint after a kill) and one folder per
fine-tuning run whose `result.json` marks it done. `--stage=report` (also the last step of a full
run) writes `docs/results/compare_objectives.{md,json}` and the plots from whatever has finished.
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
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
EN_VOCAB = DATA / "vocab" / "en_uncased" / "vocab.txt"
ENWIKI = DATA / "pretrain" / "enwiki"
GLUE = DATA / "glue"
RESULTS_DIR = ROOT / "docs" / "results"

# Arm → pre-training objective overrides (None: no pre-training).
ARMS = {
    "rtd": {"objective": "rtd"},
    "mlm": {"objective": "mlm", "mlm_encoder": "discriminator"},
    "none": None,
    "rtd_masked_only": {"objective": "rtd_masked_only"},
    "replace_mlm": {"objective": "replace_mlm"},
    "all_tokens_mlm": {"objective": "all_tokens_mlm"},
    "gdes": {"objective": "rtd", "embedding_sharing": "gdes"},  # DeBERTaV3's gradient-disentangled sharing
}
# Task → (main metric key in run_finetuning's metrics.json, epochs).
TASKS = {"STS-B": ("spearman", 3), "MRPC": ("accuracy", 3), "SST-2": ("accuracy", 1),
         "CoLA": ("mcc", 3), "RTE": ("accuracy", 3)}
TUNING_TASKS = ("STS-B", "MRPC")
SELECTION_TASK = "STS-B"


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


def log(message: str):
    print(f"[compare_objectives {time.strftime('%H:%M:%S')}] {message}", flush=True)


def format_seconds(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def write_json_atomic(path: Path, value) -> None:
    from data_prep.manifest import write_json_atomic as write_atomic

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
    from electra_tf.flops import steps_for_flops, train_flops_per_step

    if arm == "rtd":
        return budget.rtd_steps
    rtd_flops = train_flops_per_step(arm_config(budget, "rtd")) * budget.rtd_steps
    return max(budget.rtd_steps, steps_for_flops(arm_config(budget, arm), rtd_flops))


def arm_compute(budget: Budget, arm: str) -> dict:
    from electra_tf.flops import train_flops_per_step

    if ARMS[arm] is None:
        return {"steps": 0, "examples": 0, "pretrain_flops": 0, "flops_per_step": 0}
    steps = arm_steps(budget, arm)
    per_step = train_flops_per_step(arm_config(budget, arm, steps))
    return {"steps": steps, "examples": steps * budget.train_batch_size, "pretrain_flops": per_step * steps,
            "flops_per_step": per_step}


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


def pretrain_command(budget: Budget, arm: str, data_dir: Path, model_dir: Path) -> list[str]:
    steps = arm_steps(budget, arm)
    hparams = dict(budget.pretrain_hparams, **ARMS[arm])
    return [sys.executable, "run_pretraining.py", "--model_size=mini", f"--data_dir={data_dir}",
            f"--model_dir={model_dir}", f"--hparams={json.dumps(hparams, sort_keys=True)}",
            f"--num_train_steps={steps}", f"--num_warmup_steps={budget.warmup_steps}",
            f"--train_batch_size={budget.train_batch_size}",
            f"--save_checkpoints_steps={budget.save_checkpoints_steps}", "--keep_checkpoint_max=3",
            f"--log_steps={budget.save_checkpoints_steps}", f"--steps_per_loop={budget.save_checkpoints_steps}",
            "--seed=0"]


def read_train_log(model_dir: Path) -> list[dict]:
    path = model_dir / "train_log.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return rows


def pretrain(budget: Budget, arm: str, work_dir: Path, data_dir: Path) -> Optional[Path]:
    """Runs (or resumes) the arm's pre-training; returns its export dir."""
    model_dir = work_dir / "arms" / arm / "pretrain"
    export_dir = model_dir / "export"
    if (export_dir / "electra_config.json").exists():
        return export_dir
    steps = arm_steps(budget, arm)
    model_dir.mkdir(parents=True, exist_ok=True)
    command = pretrain_command(budget, arm, data_dir, model_dir)
    log(f"[{arm}] pre-training {steps} steps × {budget.train_batch_size}: {' '.join(command[1:])}")
    with open(model_dir / "stdout.log", "a") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        last_step, started = None, time.time()
        start_step = (read_train_log(model_dir) or [{"step": 0}])[-1]["step"]
        while process.poll() is None:
            time.sleep(5)
            rows = read_train_log(model_dir)
            if rows and rows[-1]["step"] != last_step:
                row, last_step = rows[-1], rows[-1]["step"]
                rate = (last_step - start_step) / max(time.time() - started, 1e-9)
                eta = (steps - last_step) / rate if rate > 0 else float("nan")
                metric = "disc_auc" if "disc_auc" in row else "gen_accuracy"
                log(f"[{arm}] step {last_step}/{steps}  {row['examples_per_second']:.1f} ex/s  "
                    f"{metric} {row.get(metric, float('nan')):.3f}  loss {row['loss']:.3f}  ETA {format_seconds(eta)}")
    if process.returncode != 0:
        raise RuntimeError(f"[{arm}] pre-training failed (exit {process.returncode}); see {model_dir / 'stdout.log'}")
    return export_dir


def finetune_dir(work_dir: Path, arm: str, task: str, lr: float, seed: int) -> Path:
    return work_dir / "arms" / arm / "finetune" / task / f"lr{lr:g}" / f"seed{seed}"


def finetune_command(budget: Budget, arm: str, export_dir: Optional[Path], task: str, lr: float, seed: int,
                     output_dir: Path) -> list[str]:
    _, epochs = TASKS[task]
    command = [sys.executable, "run_finetuning.py", f"--task={task}", f"--data_dir={GLUE}",
               f"--output_dir={output_dir}", f"--vocab_file={EN_VOCAB}", f"--learning_rate={lr:g}",
               f"--num_train_epochs={epochs}", "--train_batch_size=32", "--layerwise_lr_decay=1.0",
               f"--max_seq_length={budget.finetune_max_seq_length}", f"--seed={seed}", "--log_steps=100"]
    if export_dir is not None:
        command.append(f"--init_checkpoint={export_dir}")
    else:
        command.append("--model_size=mini")
    if budget.finetune_max_train_steps:
        command.append(f"--max_train_steps={budget.finetune_max_train_steps}")
    return command


def finetune(budget: Budget, arm: str, export_dir: Optional[Path], task: str, lr: float, seed: int,
             work_dir: Path, threads: Optional[int] = None) -> float:
    """One fine-tuning run (cached): the task's main dev metric × 100.

    `threads`: TensorFlow's intra-op threads for the run (inter-op 1), for runs side by side
    (`--jobs`); None keeps TensorFlow's defaults (all cores).
    """
    output_dir = finetune_dir(work_dir, arm, task, lr, seed)
    done = output_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())["metric"]
    output_dir.mkdir(parents=True, exist_ok=True)
    command = finetune_command(budget, arm, export_dir, task, lr, seed, output_dir)
    started = time.time()
    with open(output_dir / "stdout.log", "w") as out:
        result = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=thread_env(threads))
    if result.returncode != 0:
        raise RuntimeError(f"[{arm}] {task} lr {lr:g} seed {seed} failed; see {output_dir / 'stdout.log'}")
    metric_key, _ = TASKS[task]
    summary = json.loads((output_dir / "metrics.json").read_text())
    value = float(summary["median"][metric_key])
    write_json_atomic(done, {"metric": value, "metric_key": metric_key, "seconds": time.time() - started,
                             "command": command[1:]})
    return value


def thread_env(threads: Optional[int]) -> Optional[dict]:
    """The environment of a fine-tuning subprocess limited to `threads` intra-op threads."""
    if threads is None:
        return None
    return dict(os.environ, TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS="1")


def run_all(runs: list, progress, jobs: int = 1) -> None:
    """Fine-tuning runs `(arm, task, lr, seed, fn)`; `fn(threads)` runs one. With `jobs` > 1, that
    many at once, each with the cores shared out (`os.cpu_count() // jobs`, at least 1). Every run
    is tried; the first failure is raised after the others have finished."""
    if jobs <= 1:
        for arm, task, lr, seed, fn in runs:
            progress(arm, task, lr, seed, lambda: fn(None))
        return
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(progress, arm, task, lr, seed, functools.partial(fn, threads))
                   for arm, task, lr, seed, fn in runs]
    for future in futures:
        future.result()


def finetune_runs(budget: Budget, arm: str, export_dir: Optional[Path], work_dir: Path, tasks,
                  learning_rates) -> list:
    """`run_all`'s runs for every task × learning rate × seed, in that order."""
    return [(arm, task, lr, seed, functools.partial(finetune, budget, arm, export_dir, task, lr, seed, work_dir))
            for task in tasks for lr in learning_rates for seed in budget.seeds]


def finetune_grid(budget: Budget, arm: str, export_dir: Optional[Path], work_dir: Path, progress,
                  task: str, jobs: int = 1) -> None:
    """The task at every learning rate of the grid, every seed."""
    run_all(finetune_runs(budget, arm, export_dir, work_dir, [task], budget.learning_rates), progress, jobs)


def finetune_arm(budget: Budget, arm: str, export_dir: Optional[Path], work_dir: Path, progress,
                 jobs: int = 1) -> None:
    for task in TUNING_TASKS:
        finetune_grid(budget, arm, export_dir, work_dir, progress, task, jobs)
    lr = chosen_lr(collect_finetune(budget, arm, work_dir))
    other_tasks = [task for task in TASKS if task not in TUNING_TASKS]
    run_all(finetune_runs(budget, arm, export_dir, work_dir, other_tasks, [lr]), progress, jobs)


def schedule(arms) -> list:
    """Execution order: arms without pre-training right after the first pre-trained arm.

    With the selection task fine-tuned after each arm's pre-training, the headline comparison
    (rtd vs no pre-training on STS-B) is known hours before the last arm has pre-trained.
    """
    pretrained = [arm for arm in arms if ARMS[arm] is not None]
    untrained = [arm for arm in arms if ARMS[arm] is None]
    return pretrained[:1] + untrained + pretrained[1:]


def runs_per_arm(budget: Budget) -> int:
    return len(TUNING_TASKS) * len(budget.learning_rates) * len(budget.seeds) + \
        (len(TASKS) - len(TUNING_TASKS)) * len(budget.seeds)


class Progress:
    """Prints each fine-tuning run with an ETA over the runs still to do (each run counted once).

    Thread-safe: with `jobs` runs at once the ETA divides the remaining run time by `jobs`.
    """

    def __init__(self, total_runs: int, jobs: int = 1):
        self.total, self.jobs, self.done, self.seconds = total_runs, max(1, jobs), set(), []
        self.lock = threading.Lock()

    def __call__(self, arm, task, lr, seed, fn):
        key = (arm, task, lr, seed)
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
            log(f"[{arm}] {task} lr {lr:g} seed {seed}: {value:.2f}  ({len(self.done)}/{self.total} runs, "
                f"ETA ≤ {format_seconds(eta)})")
        return value


# --------------------------------------------------------------------------- results

def collect_finetune(budget: Budget, arm: str, work_dir: Path) -> dict:
    """{task: {lr: [metric per finished seed]}} from the cached runs."""
    results = {}
    for task in TASKS:
        for lr in budget.learning_rates:
            values = []
            for seed in budget.seeds:
                done = finetune_dir(work_dir, arm, task, lr, seed) / "result.json"
                if done.exists():
                    values.append(json.loads(done.read_text())["metric"])
            if values:
                results.setdefault(task, {})[f"{lr:g}"] = values
    return results


def chosen_lr(finetune_results: dict) -> float:
    """The learning rate with the better STS-B median (the first on ties)."""
    by_lr = finetune_results.get(SELECTION_TASK, {})
    if not by_lr:
        raise ValueError(f"no {SELECTION_TASK} results to choose a learning rate from")
    return float(max(by_lr, key=lambda lr: statistics.median(by_lr[lr])))


def median_or_none(values):
    return statistics.median(values) if values else None


def build_results(budget: Budget, work_dir: Path, arms, command: str) -> dict:
    from electra_tf.config import get_config
    from electra_tf.flops import train_flops_per_step

    small = get_config("small")
    small_flops = train_flops_per_step(small) * small.num_train_steps
    results = {"budget": budget.name, "command": command, "model_size": "mini",
               "electra_small_pretrain_flops": small_flops, "arms": {}}
    for arm in arms:
        entry = dict(arm_compute(budget, arm))
        entry["finetune"] = collect_finetune(budget, arm, work_dir)
        try:
            entry["chosen_lr"] = chosen_lr(entry["finetune"])
        except ValueError:
            entry["chosen_lr"] = None
        log_rows = read_train_log(work_dir / "arms" / arm / "pretrain") if ARMS[arm] else []
        entry["pretrain_steps_done"] = log_rows[-1]["step"] if log_rows else 0
        entry["pretrain_seconds"] = sum(
            budget.save_checkpoints_steps * budget.train_batch_size / r["examples_per_second"]
            for r in log_rows if r.get("examples_per_second"))
        entry["finetune_seconds"] = finetune_seconds(work_dir, arm)
        entry["fraction_of_electra_small_flops"] = entry["pretrain_flops"] / small_flops
        results["arms"][arm] = entry
    return results


def finetune_seconds(work_dir: Path, arm: str) -> float:
    """Wall-clock of the arm's finished fine-tuning runs."""
    return sum(json.loads(done.read_text()).get("seconds", 0.0)
               for done in (work_dir / "arms" / arm / "finetune").glob("*/*/*/result.json"))


def headline(entry: dict, task: str) -> Optional[float]:
    """The task's median at the arm's chosen learning rate."""
    if entry.get("chosen_lr") is None:
        return None
    return median_or_none(entry["finetune"].get(task, {}).get(f"{entry['chosen_lr']:g}", []))


def glue_average(entry: dict) -> Optional[float]:
    values = [headline(entry, task) for task in TASKS]
    return statistics.mean(values) if all(v is not None for v in values) else None


def markdown(results: dict) -> str:
    tasks = list(TASKS)
    lines = [f"# Objectives at equal compute (`--budget={results['budget']}`)", "",
             f"Command: `{results['command']}`", "",
             "Medians over fine-tuning seeds at each arm's chosen learning rate (the better STS-B median "
             "of the grid); metric × 100: Spearman (STS-B), accuracy (MRPC, SST-2, RTE), MCC (CoLA). "
             "Each cell lists the seeds in brackets.", "",
             "| arm | steps | examples | pre-train FLOPs | × ELECTRA-Small | chosen lr | "
             + " | ".join(tasks) + " | average |",
             "|---|---|---|---|---|---|" + "---|" * len(tasks) + "---|"]
    for arm, entry in results["arms"].items():
        cells = []
        for task in tasks:
            value = headline(entry, task)
            seeds = entry["finetune"].get(task, {}).get(f"{entry['chosen_lr']:g}", []) if entry["chosen_lr"] else []
            cells.append("–" if value is None else f"**{value:.1f}** [{', '.join(f'{v:.1f}' for v in seeds)}]")
        average = glue_average(entry)
        lr = "–" if entry["chosen_lr"] is None else f"{entry['chosen_lr']:g}"
        lines.append(f"| {arm} | {entry['pretrain_steps_done']}/{entry['steps']} | {entry['examples']:,} | "
                     f"{entry['pretrain_flops']:.3g} | {entry['fraction_of_electra_small_flops']:.2%} | {lr} | "
                     + " | ".join(cells) + f" | {'–' if average is None else f'{average:.1f}'} |")
    lines += ["", "Learning-rate grid (median [seeds]) on the tuning tasks:", "",
              "| arm | task | " + " | ".join(f"lr {lr}" for lr in _grid(results)) + " |",
              "|---|---|" + "---|" * len(_grid(results))]
    for arm, entry in results["arms"].items():
        for task in TUNING_TASKS:
            by_lr = entry["finetune"].get(task, {})
            cells = [f"{statistics.median(by_lr[lr]):.1f} [{', '.join(f'{v:.1f}' for v in by_lr[lr])}]"
                     if lr in by_lr else "–" for lr in _grid(results)]
            lines.append(f"| {arm} | {task} | " + " | ".join(cells) + " |")
    lines += ["", "Pre-training FLOPs: forward matmul FLOPs × 3, generator included (`electra_tf/flops.py`); "
              f"ELECTRA-Small (1M steps × 128 × 128) is {results['electra_small_pretrain_flops']:.3g} by the same "
              "formula. The rtd arm runs the budget's steps; every other arm the steps that spend rtd's FLOPs, "
              "but never fewer than rtd's.", "",
              "Wall-clock on the machine that ran it (2 CPU cores unless said otherwise): "
              + "; ".join(f"{arm} pre-training {format_seconds(e['pretrain_seconds'])}, fine-tuning "
                          f"{format_seconds(e.get('finetune_seconds', 0.0))}" for arm, e in results["arms"].items())
              + ".", ""]
    return "\n".join(lines)


def _grid(results: dict) -> list[str]:
    return sorted({lr for e in results["arms"].values() for t in e["finetune"].values() for lr in t}, key=float)


def plot(results: dict, work_dir: Path, out_dir: Path) -> list[Path]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (pip install -r requirements-bench.txt): no plots")
        return []
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for arm, entry in results["arms"].items():
        x = max(entry["pretrain_flops"], 1e12)
        for ax, value, title in ((axes[0], headline(entry, "STS-B"), "STS-B Spearman × 100"),
                                 (axes[1], glue_average(entry), "average of the five tasks")):
            if value is not None:
                ax.scatter([x], [value], s=60)
                ax.annotate(arm, (x, value), textcoords="offset points", xytext=(5, 5))
            ax.set_title(title)
            ax.set_xscale("log")
            ax.set_xlabel("pre-training FLOPs (none plotted at 1e12)")
    fig.tight_layout()
    paths.append(out_dir / "compare_objectives_vs_flops.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    curves = [("disc_auc", "discriminator AUC"), ("gen_accuracy", "generator / MLM accuracy"),
              ("gen_loss", "generator / MLM loss"), ("disc_loss", "discriminator loss")]
    fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3.5))
    for index, arm in enumerate(results["arms"]):
        rows = read_train_log(work_dir / "arms" / arm / "pretrain") if ARMS[arm] else []
        for ax, (key, title) in zip(axes, curves):
            points = [(r["step"], r[key]) for r in rows if key in r]
            if points:  # one colour per arm in every panel, even where an arm has no such curve
                ax.plot(*zip(*points), label=arm, color=f"C{index}")
            ax.set_title(title)
            ax.set_xlabel("step")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "compare_objectives_pretraining.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def report(budget: Budget, work_dir: Path, arms, out_dir: Path, command: str) -> dict:
    results = build_results(budget, work_dir, arms, command)
    stem = "compare_objectives" if budget.name == "cpu" else f"compare_objectives_{budget.name}"
    write_json_atomic(out_dir / f"{stem}.json", results)
    (out_dir / f"{stem}.md").write_text(markdown(results))
    if budget.name == "cpu":
        plot(results, work_dir, out_dir)
    print(markdown(results), flush=True)
    return results


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="smoke")
    parser.add_argument("--arms", default=None, help=f"comma-separated subset of {', '.join(ARMS)} "
                        "(default: the budget's required arms)")
    parser.add_argument("--stage", choices=("all", "pretrain", "finetune", "report"), default="all")
    parser.add_argument("--jobs", type=int, default=1,
                        help="fine-tuning runs at once, the cores shared out between them (2 on 2 cores: "
                             "about 1.27x the runs per hour, measured on MRPC)")
    parser.add_argument("--work_dir", default=None,
                        help="default: ~/.cache/electra_tf/compare_objectives/<budget> (outside the checkout)")
    parser.add_argument("--results_dir", default=str(RESULTS_DIR), help="where the table, JSON and plots go")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    return args


def main(argv=None):
    args = parse_args(argv)
    budget = BUDGETS[args.budget]
    arms = tuple(args.arms.split(",")) if args.arms else budget.arms
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        sys.exit(f"compare_objectives: error: --arms: unknown arm(s) {unknown}; choose from {list(ARMS)}")
    if not GLUE.is_dir() or not ENWIKI.is_dir():
        sys.exit(f"compare_objectives: error: the shared data folder {DATA} (glue/, pretrain/enwiki/) is absent")
    work_dir = Path(args.work_dir or Path.home() / ".cache" / "electra_tf" / "compare_objectives" / budget.name)
    command = f"python -m experiments.compare_objectives --budget={budget.name}" + (
        f" --arms={','.join(arms)}" if args.arms else "")
    log(f"budget {budget.name}, arms {', '.join(arms)}, work dir {work_dir}")
    exports = {}
    if args.stage in ("all", "pretrain", "finetune"):
        data_dir = build_data(work_dir)
    progress = Progress(runs_per_arm(budget) * len(arms), args.jobs)
    if args.stage == "pretrain":
        for arm in arms:
            if ARMS[arm] is not None:
                pretrain(budget, arm, work_dir, data_dir)
    if args.stage in ("all", "finetune"):
        ready = []
        for arm in schedule(arms):
            if ARMS[arm] is not None:
                exports[arm] = pretrain(budget, arm, work_dir, data_dir) if args.stage == "all" else (
                    work_dir / "arms" / arm / "pretrain" / "export")
                if not (exports[arm] / "electra_config.json").exists():
                    log(f"[{arm}] no export yet in {exports[arm]}: run the pretrain stage first; skipping")
                    continue
            finetune_grid(budget, arm, exports.get(arm), work_dir, progress, SELECTION_TASK, args.jobs)
            ready.append(arm)
        for arm in ready:
            finetune_arm(budget, arm, exports.get(arm), work_dir, progress, args.jobs)
    if args.stage in ("all", "report", "finetune"):
        report(budget, work_dir, arms, Path(args.results_dir), command)


if __name__ == "__main__":
    main()
