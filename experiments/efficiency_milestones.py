"""The efficiency curve's plan: its arms and milestones, each milestone's steps and compute, where its work folder
and committed records are, and when a milestone's fine-tuning is complete.

Shared by the run (`experiments.efficiency_curve`) and its report (`experiments.efficiency_report`), which
import this module and never each other the other way (the report imports no run).

Example:

>>> from experiments.lib.protocol import BUDGETS
>>> [milestone_steps(BUDGETS["cpu"], "rtd", m) for m in MULTIPLES]
[375, 750, 1500, 3000, 6000]
>>> Milestone("mlm", 0.25).name
'mlm-x0.25'
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from experiments.lib import protocol
from experiments.lib.protocol import Budget

ARMS = ("rtd", "mlm")
MULTIPLES = (0.25, 0.5, 1.0, 2.0, 4.0)  # milestones, × the objectives budget's compute
PRETRAIN_SEED = 0  # the objectives' first seed: its 192k runs share this run's data order and init
TUNING_TASKS = protocol.TUNING_TASKS  # STS-B, MRPC
SEED_SPREAD = 3.9  # STS-B points between rtd's two pre-training seeds in the objectives report


def milestone_budget(budget: Budget, multiple: float) -> Budget:
    return dataclasses.replace(budget, name=f"x{multiple:g}", rtd_steps=round(budget.rtd_steps * multiple))


def milestone_steps(budget: Budget, arm: str, multiple: float) -> int:
    """The arm's steps at the milestone: rtd's, or those that spend rtd's FLOPs there."""
    return protocol.arm_steps(milestone_budget(budget, multiple), arm)


def total_steps(budget: Budget, arm: str) -> int:
    return milestone_steps(budget, arm, MULTIPLES[-1])


def milestone_compute(budget: Budget, arm: str, multiple: float) -> dict:
    steps = milestone_steps(budget, arm, multiple)
    per_step = protocol.arm_compute(milestone_budget(budget, multiple), arm)["flops_per_step"]
    return {"steps": steps, "examples": steps * budget.train_batch_size, "pretrain_flops": per_step * steps,
            "rtd_equivalent_examples": round(budget.rtd_steps * multiple) * budget.train_batch_size}


@dataclasses.dataclass(frozen=True)
class Milestone:
    """One milestone of one arm, as `experiments.lib`'s fine-tuning helpers take a run (by `name`)."""

    arm: str
    multiple: float

    @property
    def name(self) -> str:
        return f"{self.arm}-x{self.multiple:g}"


# --------------------------------------------------------------------------- work folder and records

@dataclasses.dataclass(frozen=True)
class Curve:
    """One budget's curve: where its work folder and committed records are."""

    budget: Budget
    work_dir: Path
    results_dir: Path

    def arm_dir(self, arm: str) -> Path:
        return self.work_dir / "arms" / arm

    def model_dir(self, arm: str) -> Path:
        return self.arm_dir(arm) / "pretrain"

    def milestone_dir(self, milestone: Milestone) -> Path:
        return self.arm_dir(milestone.arm) / "milestones" / f"x{milestone.multiple:g}"

    def record_path(self, arm: str) -> Path:
        return records_dir(self.results_dir, self.budget) / f"{arm}-pseed{PRETRAIN_SEED}.json"

    def read_record(self, arm: str) -> dict:
        path = self.record_path(arm)
        return json.loads(path.read_text()) if path.exists() else {}


def records_dir(results_dir: Path, budget: Budget) -> Path:
    return Path(results_dir) / "efficiency_curve" / budget.name


def finetune_complete(budget: Budget, entry: dict, tasks=TUNING_TASKS) -> bool:
    """Whether `entry` holds every seed at every learning rate of `budget`'s grid for each of `tasks`."""
    return all(len(entry.get("finetune", {}).get(task, {}).get(f"{lr:g}", [])) == len(budget.seeds)
               for task in tasks for lr in budget.learning_rates)
