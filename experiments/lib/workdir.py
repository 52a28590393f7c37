"""An experiment's work folder and its files: where a run pre-trains and fine-tunes, JSON-lines logs read while
they are written, JSON written atomically.

The work folder (outside the checkout) holds `arms/<run name>/pretrain/` (run_pretraining's `--model_dir`) and
`arms/<run name>/finetune/<task>/lr<lr>/seed<seed>/` (one fine-tuning run; its `result.json` marks it done).

Example:

>>> from experiments.lib.protocol import Run
>>> str(finetune_dir(Path("work"), Run("mlm"), "STS-B", 1e-4, 2))
'work/arms/mlm/finetune/STS-B/lr0.0001/seed2'
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.lib.protocol import Run


def write_json_atomic(path: Path, value) -> None:
    from electra_tf.text.manifest import write_json_atomic as write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, value, sort_keys=True)


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


def read_train_log(model_dir: Path) -> list[dict]:
    return read_jsonl(model_dir / "train_log.jsonl")


def pretrain_dir(work_dir: Path, run: Run) -> Path:
    return work_dir / "arms" / run.name / "pretrain"


def finetune_dir(work_dir: Path, run: Run, task: str, lr: float, seed: int) -> Path:
    return work_dir / "arms" / run.name / "finetune" / task / f"lr{lr:g}" / f"seed{seed}"
