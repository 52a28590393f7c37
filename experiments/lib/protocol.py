"""The objectives protocol that every experiment shares: the shared data, the arms, the budgets, the fine-tuning
tasks, a run's identity (arm × pre-training seed) and its compute at equal FLOPs.

`experiments/compare_objectives.py` defines the protocol (its docstring says why each choice); the efficiency-curve
and domain-adaptation experiments run it at other budgets. Nothing here runs anything or imports TensorFlow at
import time.

Example:

>>> arm_compute(BUDGETS["smoke"], "none")
{'steps': 0, 'examples': 0, 'pretrain_flops': 0, 'flops_per_step': 0}
>>> Run("rtd").name, Run("rtd", pretrain_seed=1).name
('rtd', 'rtd-pseed1')
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

# The code whose edits make a run's commit "+modified".
CODE_PATHS = ("electra_tf", "data_prep", "run_pretraining.py", "run_finetuning.py", "experiments/compare_objectives.py",
              "experiments/lib")

ROOT = Path(__file__).resolve().parents[2]
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
