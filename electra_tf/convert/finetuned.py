"""A fine-tuned model of ours, read back from its `run_finetuning.py --output_dir`, as plain arrays.

A fine-tuning run writes `finetune_config.json` (task, model config, options, vocabulary) and the weights
`final.weights.h5` (and `best.weights.h5` with `--select_best_epoch`) into its `--output_dir`; with
`--num_seeds > 1` each seed's weights are in `seed_N/`, which is then the path to give. `load_finetuned(path)`
rebuilds the model from those files alone (no data set, no task files: the head's kind and shape are read from
the weights file, the names of the labels from the task where it fixes them) and returns a `FinetunedModel`:

* `kind`: "classifier" (sentence or pair classification: `logits` `[B, labels]`), "regression" (STS-B:
  `predictions` `[B]`), "tagger" (`logits` `[B, L, labels]`) or "squad" (`SpanHead`'s outputs);
* `model`: the Keras `FinetuningModel` in float32 with TensorFlow's standard ops, the weights loaded;
* `encoder_weights()`: `{canonical name: array}` of the encoder (`names`, `[in, out]` kernels);
* `head_weights()`: `{dense layer name: (kernel [in, out], bias)}` of the head.

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
import numpy as np

from electra_tf.config import ElectraConfig
from electra_tf.convert import keras_model, names
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


def build_head(spec: HeadSpec, config: ElectraConfig):
    """The Keras head of `spec`, named as the task's `build_head` names it."""
    from electra_tf.finetuning.heads import ClassificationHead, SpanHead, TokenClassificationHead

    if spec.kind in ("classifier", "regression"):
        return ClassificationHead(spec.num_labels, dropout_rate=config.dropout_rate, name="classification_head")
    if spec.kind == "tagger":
        return TokenClassificationHead(spec.num_labels, name="tagging_head")
    return SpanHead(answerable=spec.answerable, answerable_hidden_size=spec.answerable_hidden_size or 512,
                    joint_prediction=spec.joint_prediction, beam_size=config.squad_beam_size,
                    joint_hidden_size=spec.joint_hidden_size or 512, hidden_act=config.hidden_act, name="span_head")


@dataclasses.dataclass
class FinetunedModel:
    """A fine-tuned model read back from its run folder (see the module docstring)."""

    path: str
    task: str
    config: ElectraConfig
    head: HeadSpec
    model: object  # finetuning.model.FinetuningModel
    vocab_file: Optional[str]
    max_seq_length: int
    labels: Optional[list] = None
    segment_id: int = 0  # taggers: the token type id of every real token (`--tagging_segment_id`, default 1)

    @property
    def kind(self) -> str:
        return self.head.kind

    def encoder_weights(self) -> dict:
        """`{canonical key: float32 array}` of the encoder (embeddings, projection, layers)."""
        encoder = self.model.encoder
        variables = {**keras_model.embedding_variables(encoder.embeddings),
                     **keras_model.encoder_variables(encoder, "discriminator")}
        shapes = names.expected_shapes(self.config, ("discriminator",))
        return {key: np.asarray(variable.numpy(), np.float32).reshape(shapes[key])
                for key, variable in variables.items()}

    def head_weights(self) -> dict:
        """`{dense layer name: (kernel [in, out], bias)}` of the head, float32."""
        head = self.model.head
        layers = {"logits": head.dense} if self.kind != "squad" else {
            name: getattr(head, name) for name in ("start_logits", "end_logits", "joint_hidden", "answerable_hidden",
                                                   "answerable_logit") if hasattr(head, name)}
        return {name: (np.asarray(layer.kernel.numpy(), np.float32), np.asarray(layer.bias.numpy(), np.float32))
                for name, layer in layers.items()}

    def outputs(self, input_ids, attention_mask, token_type_ids) -> dict:
        """The Keras model's outputs (NumPy) for a batch of ids: what the converted models must equal."""
        batch = {"input_ids": np.asarray(input_ids, np.int32), "input_mask": np.asarray(attention_mask, np.int32),
                 "segment_ids": np.asarray(token_type_ids, np.int32)}
        return {key: np.asarray(value) for key, value in self.model(batch, training=False).items()}


def _labels(task: str, path: str, spec: HeadSpec, run_dir: str) -> Optional[list]:
    """The label names where the run or the task fixes them (tagging: the run's file; GLUE: the task)."""
    if spec.kind == "tagger":
        for directory in (path, run_dir):
            saved = os.path.join(directory, TAGGING_LABELS)
            if os.path.isfile(saved):
                with open(saved, encoding="utf-8") as f:
                    return list(json.load(f)["labels"])
        return None
    if spec.kind != "classifier":
        return None
    from electra_tf.finetuning.glue import GLUE_SPECS
    from electra_tf.finetuning.registry import get_task

    if task not in GLUE_SPECS:
        return None  # text_classification: its labels come from its data files
    labels = get_task(task).serving_labels()
    return labels if labels and len(labels) == spec.num_labels else None


def _read_record(path: str) -> tuple[str, dict]:
    """(path of the run's finetune_config.json, its content)."""
    recorded = config_file(path)
    if not os.path.isdir(path) or recorded is None:
        raise ConversionError(f"{path}: not a fine-tuning run (expected {CONFIG_FILE} and {FINAL_WEIGHTS} "
                              "of run_finetuning.py --output_dir)")
    with open(recorded, encoding="utf-8") as f:
        return recorded, json.load(f)


def read_finetuned_config(path: str) -> ElectraConfig:
    """The model config the fine-tuning run at `path` recorded."""
    return ElectraConfig.from_dict(_read_record(path)[1]["config"])


def recorded_vocab(path: str) -> Optional[str]:
    """The vocabulary file the fine-tuning run at `path` recorded, if it is still there."""
    vocab_file = _read_record(path)[1].get("vocab_file")
    return vocab_file if vocab_file and os.path.isfile(vocab_file) else None


def load_finetuned_encoder(path: str, name: str = "discriminator", execution=None):
    """`(ElectraEncoder, ElectraConfig, vocab_file)`: the fine-tuned encoder of the run at `path` (`api.load_encoder`),
    computing with `execution` (default: the portable options)."""
    from electra_tf.model.encoder import ElectraEncoder

    finetuned = load_finetuned(path)
    encoder = ElectraEncoder.from_config_object(finetuned.config, "discriminator", name=name, execution=execution)
    encoder.build()
    variables = {**keras_model.embedding_variables(encoder.embeddings),
                 **keras_model.encoder_variables(encoder, "discriminator")}
    keras_model.assign_variables(variables, finetuned.encoder_weights())
    return encoder, finetuned.config, finetuned.vocab_file


def load_finetuned(path: str) -> FinetunedModel:
    """The fine-tuned model of run folder `path` (an `--output_dir`, or one seed's `seed_N/` in it)."""
    recorded, record = _read_record(path)
    config = ElectraConfig.from_dict(record["config"])
    options = record.get("options", {})
    weights = weights_file(path, bool(options.get("select_best_epoch")))
    spec = read_head_spec(weights)
    model = _build_model(config, spec, weights)
    vocab_file = record.get("vocab_file")
    if vocab_file and not os.path.isfile(vocab_file):
        vocab_file = None  # moved since: --vocab_file names it
    return FinetunedModel(path=path, task=record.get("task", ""), config=config, head=spec, model=model,
                          vocab_file=vocab_file, max_seq_length=int(options.get("max_seq_length") or 128),
                          labels=_labels(record.get("task", ""), path, spec, os.path.dirname(recorded)),
                          segment_id=int(record.get("task_settings", {}).get("tagging_segment_id", 0)))


def _build_model(config: ElectraConfig, spec: HeadSpec, weights: str):
    """`FinetuningModel` of `config` + the head of `spec` in float32 with the portable ops, `weights` loaded."""
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.model.encoder import ElectraEncoder

    encoder = ElectraEncoder.from_config_object(config, "discriminator", dtype="float32")
    model = FinetuningModel(encoder, build_head(spec, config), dtype="float32")
    model.build_all(min(config.max_position_embeddings, max(16, config.squad_beam_size)))
    try:
        model.load_weights(weights)
    except ValueError as e:
        raise ConversionError(f"{weights}: does not fit the model of {CONFIG_FILE} ({e})") from None
    return model
