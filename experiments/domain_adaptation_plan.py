"""The domain-adaptation experiment's plan and records: the arms, the budgets, and each arm's committed record
(`docs/results/domain_adaptation/<arm>.json`), which the run rewrites and the report reads.

Example:

>>> [arm.name for arm in ARMS.values() if arm.tapt]
['tapt', 'tapt_vocab']
>>> finetune_done({"finetune": {"0.0001": {"0": {"dev_f1": 80.0}}}}, 1e-4, 0)
True
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

from experiments.lib import protocol, workdir
from experiments.provenance import machine_line

ROOT = protocol.ROOT
RESULTS_DIR = protocol.RESULTS_DIR
CONLL = protocol.CONLL
DEFAULT_START_EXPORT = Path.home() / ".cache" / "electra_tf" / "efficiency_curve" / "cpu" / "arms" / "rtd" / \
    "milestones" / "x1" / "export"
TASK = "NER"  # compare_objectives' task: CoNLL-2003 entity F1, its own lr grid
CODE_PATHS = protocol.CODE_PATHS + ("experiments/domain_adaptation.py",)
STEM = "domain_adaptation"


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    tapt: bool  # continued pre-training on the task's text
    extended_vocab: bool  # with the vocab extended on that text first
    description: str


ARMS = {arm.name: arm for arm in (
    Arm("base", False, False, "the start export as it is"),
    Arm("tapt", True, False, "TAPT on CoNLL-2003 train sentences"),
    Arm("tapt_vocab", True, True, "TAPT after extending the vocab on the same text"),
)}


@dataclasses.dataclass(frozen=True)
class Plan:
    """The budget, stated up front: continued pre-training and the fine-tuning protocol."""

    name: str
    steps: int
    warmup_steps: int
    train_batch_size: int
    added_words: int
    max_seq_length: int  # of the TAPT shards
    save_checkpoints_steps: int
    finetune: protocol.Budget  # the seeds, lr grid and caps `experiments.lib.runner.finetune` reads
    pretrain_seed: int = 0

    def commands(self) -> dict:
        base = f"python -m experiments.domain_adaptation --budget={self.name}"
        return {"run": f"{base} --stage=all", "report": f"{base} --stage=report"}


PLANS = {
    "cpu": Plan("cpu", steps=1000, warmup_steps=100, train_batch_size=128, added_words=500, max_seq_length=128,
                save_checkpoints_steps=50,
                finetune=dataclasses.replace(protocol.BUDGETS["cpu"], name="domain_adaptation",
                                             arms=tuple(ARMS))),
    # The same pipeline in minutes (the smoke test runs it on a tiny export and a tiny CoNLL file).
    "smoke": Plan("smoke", steps=2, warmup_steps=1, train_batch_size=4, added_words=20, max_seq_length=32,
                  save_checkpoints_steps=1,
                  finetune=protocol.Budget("domain_adaptation_smoke", rtd_steps=0, warmup_steps=0,
                                             train_batch_size=0, seeds=(0,), learning_rates=(1e-4, 3e-4),
                                             arms=tuple(ARMS), finetune_max_train_steps=2,
                                             finetune_max_seq_length=32)),
}


def log(message: str) -> None:
    print(f"[domain_adaptation {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- the records

class Records:
    """Each arm's committed JSON record, rewritten whole (atomically) after every change; thread-safe."""

    def __init__(self, plan: Plan, results_dir: Path):
        self.plan = plan
        self.dir = records_dir(results_dir, plan)
        self.lock = threading.Lock()

    def path(self, arm: str) -> Path:
        return self.dir / f"{arm}.json"

    def read(self, arm: str) -> dict:
        path = self.path(arm)
        return json.loads(path.read_text()) if path.exists() else {}

    def update(self, arm: str, change) -> dict:
        """`change(record)` edits the record in place; the record is then written."""
        with self.lock:
            record = self.read(arm) or new_record(self.plan, ARMS[arm])
            change(record)
            record["updated"], record["machine"] = time.strftime("%Y-%m-%d"), machine_line()
            workdir.write_json_atomic(self.path(arm), record)
            return record


def records_dir(results_dir: Path, plan: Plan) -> Path:
    return Path(results_dir) / (STEM if plan.name == "cpu" else f"{STEM}_{plan.name}")


def new_record(plan: Plan, arm: Arm) -> dict:
    tapt = arm.tapt
    return {
        "arm": arm.name, "description": arm.description, "budget": plan.name,
        "pretrain_plan": {"steps": plan.steps if tapt else 0, "warmup_steps": plan.warmup_steps if tapt else 0,
                          "train_batch_size": plan.train_batch_size if tapt else 0,
                          "max_seq_length": plan.max_seq_length, "seed": plan.pretrain_seed,
                          "added_words": plan.added_words if arm.extended_vocab else 0},
        "finetune_plan": {"task": TASK, "learning_rates": [f"{lr:g}" for lr in plan.finetune.learning_rates],
                          "seeds": list(plan.finetune.seeds), "selection": "the better median dev entity F1"},
        "commands": plan.commands(), "pretrain_invocations": [], "finetune": {},
    }


def finetune_done(record: dict, lr: float, seed: int) -> bool:
    return str(seed) in record.get("finetune", {}).get(f"{lr:g}", {})
