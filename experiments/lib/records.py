"""A run's committed record (`docs/results/<experiment>/<budget>/<run>.json`) and the scores read from records.

A record is written from the work folder after every stage (`run_record`) and committed as it arrives, so
results survive the machine; on a new machine its fine-tuning results come back into the work folder
(`restore_finetune`). A report reads records alone: `load_runs`, and per run the chosen learning rate
(`chosen_lr`) and each task's headline (`headline`, `glue_average`).

Example:

>>> chosen_lr({"STS-B": {"0.0001": [10.0, 12.0, 11.0], "0.0003": [20.0, 1.0, 2.0]}})
0.0001
>>> committed_curve([{"step": 10, "loss": 1.23456789, "other": 1}])
[{'step': 10, 'loss': 1.234568}]
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Optional

from experiments.lib.protocol import ARMS, GLUE_TASKS, OWN_GRID_TASKS, SELECTION_TASK, TASKS, Budget, Run, arm_compute
from experiments.lib.workdir import finetune_dir, pretrain_dir, read_train_log, write_json_atomic
from experiments.provenance import machine_line

# Pre-training scalars kept in a run's committed curve.
CURVE_KEYS = ("step", "loss", "gen_loss", "disc_loss", "gen_accuracy", "disc_auc", "disc_accuracy",
              "replaced_fraction", "learning_rate", "examples_per_second")
PRETRAIN_FIELDS = ("pretrain_commits", "pretrain_steps_done", "pretrain_seconds", "pretrain_curve")  # what a record keeps when the work folder lost the pre-training


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


def committed_curve(rows: list[dict]) -> list[dict]:
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
        "pretrain_curve": committed_curve(rows),
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


# --------------------------------------------------------------------------- scores read from records

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
