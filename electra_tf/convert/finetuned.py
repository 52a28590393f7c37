"""A fine-tuned model of ours, its `run_finetuning.py --output_dir`, read as files (no model is built here).

A fine-tuning run writes `finetune_config.json` (task, model config, options, vocabulary) and the weights
`final.weights.h5` (and `best.weights.h5` with `--select_best_epoch`) into its `--output_dir`; with
`--num_seeds > 1` each seed's weights are in `seed_N/`, which is then the path to give. This module reads those
files: whether a folder is such a run (`is_finetuning_run`), its record (`read_record`), model config
(`read_finetuned_config`) and vocabulary (`recorded_vocab`), its weights file (`weights_file`) and the head's
kind and sizes (`read_head_spec` → `HeadSpec`), for `api.detect_format`, `api.read_config`,
`api.checkpoint_vocab` and the ONNX graph. Rebuilding the Keras model needs the fine-tuning package's heads and
tasks, which import this package: that half is `electra_tf.finetuning.finetuned_run` (`load_finetuned`,
`load_finetuned_encoder`), and the command line's conversion of a run is `electra_tf.serving.convert_finetuned`.

Example (from the repository root):

>>> is_finetuning_run("tests/fixtures/hf_electra")
False
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import h5py

from electra_tf.config import ElectraConfig
from electra_tf.convert.errors import ConversionError

CONFIG_FILE = "finetune_config.json"  # written by `finetuning.runner.run_seeds`
FINAL_WEIGHTS, BEST_WEIGHTS = "final.weights.h5", "best.weights.h5"  # `finetuning.evaluate`'s names
TAGGING_LABELS = "tagging_labels.json"  # `finetuning.tagging.LABELS_FILE`
# The `name` each task's `build_head` gives its head (recorded in the weights file) → the kind of model.
HEAD_KINDS = {"classification_head": "classifier", "tagging_head": "tagger", "span_head": "squad"}
KINDS = ("classifier", "regression", "tagger", "squad")


def config_file(path: str) -> Optional[str]:
    """The run's `finetune_config.json`: in `path`, or in its parent for a `seed_N/` folder."""
    for directory in (path, os.path.dirname(os.path.normpath(path))):
        candidate = os.path.join(directory, CONFIG_FILE)
        if os.path.isfile(candidate):
            return candidate
    return None


def is_finetuning_run(path: str) -> bool:
    """A `run_finetuning.py --output_dir` (or one seed's folder of it) holding fine-tuned weights."""
    return (os.path.isdir(path) and config_file(path) is not None
            and any(os.path.isfile(os.path.join(path, name)) for name in (FINAL_WEIGHTS, BEST_WEIGHTS)))


def weights_file(path: str, select_best_epoch: bool) -> str:
    """The weights the run reported: best.weights.h5 after --select_best_epoch, else final.weights.h5."""
    order = (BEST_WEIGHTS, FINAL_WEIGHTS) if select_best_epoch else (FINAL_WEIGHTS, BEST_WEIGHTS)
    for name in order:
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    seeds = sorted(d for d in os.listdir(path) if d.startswith("seed_")) if os.path.isdir(path) else []
    hint = f": give one seed's folder ({', '.join(seeds)})" if seeds else ""
    raise ConversionError(f"{path}: no {FINAL_WEIGHTS} or {BEST_WEIGHTS} (a fine-tuning run's weights){hint}")


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """The head's kind and the sizes its weights file records."""

    kind: str
    num_labels: int = 0  # classifier / tagger
    answerable: bool = False  # squad: the answerability classifier
    joint_prediction: bool = False  # squad: end conditioned on the start (beam outputs)
    joint_hidden_size: int = 0
    answerable_hidden_size: int = 0


def read_head_spec(weights_path: str) -> HeadSpec:
    """The head of a `FinetuningModel` weights file (`head/vars` names it; its dense layers give the sizes)."""
    with h5py.File(weights_path, "r") as f:
        if "head" not in f or "vars" not in f["head"]:
            raise ConversionError(f"{weights_path}: not a fine-tuned model's weights (no head)")
        name = f["head/vars"].attrs.get("name")
        name = name.decode() if isinstance(name, bytes) else str(name)
        if name not in HEAD_KINDS:
            raise ConversionError(f"{weights_path}: head {name!r} is none of {', '.join(HEAD_KINDS)}")
        kind = HEAD_KINDS[name]
        if kind in ("classifier", "tagger"):
            num_labels = int(f["head/dense/vars/0"].shape[-1])
            if kind == "classifier" and num_labels == 1:
                kind = "regression"
            return HeadSpec(kind, num_labels=num_labels)
        head = f["head"]
        return HeadSpec(
            "squad", answerable="answerable_hidden" in head, joint_prediction="joint_hidden" in head,
            joint_hidden_size=int(head["joint_hidden/vars/0"].shape[-1]) if "joint_hidden" in head else 0,
            answerable_hidden_size=(int(head["answerable_hidden/vars/0"].shape[-1])
                                    if "answerable_hidden" in head else 0))


def read_record(path: str) -> tuple[str, dict]:
    """(path of the run's finetune_config.json, its content)."""
    recorded = config_file(path)
    if not os.path.isdir(path) or recorded is None:
        raise ConversionError(f"{path}: not a fine-tuning run (expected {CONFIG_FILE} and {FINAL_WEIGHTS} "
                              "of run_finetuning.py --output_dir)")
    with open(recorded, encoding="utf-8") as f:
        return recorded, json.load(f)


def read_finetuned_config(path: str) -> ElectraConfig:
    """The model config the fine-tuning run at `path` recorded."""
    return ElectraConfig.from_dict(read_record(path)[1]["config"])


def recorded_vocab(path: str) -> Optional[str]:
    """The vocabulary file the fine-tuning run at `path` recorded, if it is still there."""
    vocab_file = read_record(path)[1].get("vocab_file")
    return vocab_file if vocab_file and os.path.isfile(vocab_file) else None


