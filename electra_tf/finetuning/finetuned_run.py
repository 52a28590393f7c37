"""A fine-tuned model of ours rebuilt from its `run_finetuning.py --output_dir`, as Keras and as plain arrays.

`electra_tf.convert.finetuned` reads the run's files (config, weights file, head's kind and sizes);
this module builds the model they describe, which needs the fine-tuning package's heads and tasks (it lives here
because fine-tuning imports convert, never the reverse). `load_finetuned(path)` rebuilds the model from those
files alone (no data set, no task files: the head's kind and shape are read from the weights file, the names of
the labels from the task where it fixes them) and returns a `FinetunedModel`:

* `kind`: "classifier" (sentence or pair classification: `logits` `[B, labels]`), "regression" (STS-B:
  `predictions` `[B]`), "tagger" (`logits` `[B, L, labels]`) or "squad" (`SpanHead`'s outputs);
* `model`: the Keras `FinetuningModel` in float32 with TensorFlow's standard ops, the weights loaded;
* `encoder_weights()`: `{canonical name: array}` of the encoder (`names`, `[in, out]` kernels);
* `head_weights()`: `{dense layer name: (kernel [in, out], bias)}` of the head.

`load_finetuned_encoder(path)` gives the run's encoder alone (`run_finetuning.py --init_checkpoint=<a run>`).

Example:

>>> build_head(finetuned.HeadSpec("tagger", num_labels=5), ElectraConfig()).name
'tagging_head'
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import numpy as np

from electra_tf.config import ElectraConfig
from electra_tf.convert import finetuned, keras_model, names
from electra_tf.convert.errors import ConversionError
from electra_tf.convert.finetuned import HeadSpec
from electra_tf.finetuning.glue import GLUE_SPECS
from electra_tf.finetuning.heads import ClassificationHead, SpanHead, TokenClassificationHead
from electra_tf.finetuning.model import FinetuningModel
from electra_tf.finetuning.registry import get_task
from electra_tf.model.encoder import ElectraEncoder


def build_head(spec: HeadSpec, config: ElectraConfig):
    """The Keras head of `spec`, named as the task's `build_head` names it."""
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
    model: FinetuningModel
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
            saved = os.path.join(directory, finetuned.TAGGING_LABELS)
            if os.path.isfile(saved):
                with open(saved, encoding="utf-8") as f:
                    return list(json.load(f)["labels"])
        return None
    if spec.kind != "classifier":
        return None
    if task not in GLUE_SPECS:
        return None  # text_classification: its labels come from its data files
    labels = get_task(task).serving_labels()
    return labels if labels and len(labels) == spec.num_labels else None


def load_finetuned_encoder(path: str, name: str = "discriminator", execution=None):
    """`(ElectraEncoder, ElectraConfig, vocab_file)`: the fine-tuned encoder of the run at `path`, computing with
    `execution` (default: the portable options); `run_finetuning.py --init_checkpoint=<a fine-tuning run>`."""
    run = load_finetuned(path)
    encoder = ElectraEncoder.from_config_object(run.config, "discriminator", name=name, execution=execution)
    encoder.build()
    variables = {**keras_model.embedding_variables(encoder.embeddings),
                 **keras_model.encoder_variables(encoder, "discriminator")}
    keras_model.assign_variables(variables, run.encoder_weights())
    return encoder, run.config, run.vocab_file


def load_finetuned(path: str) -> FinetunedModel:
    """The fine-tuned model of run folder `path` (an `--output_dir`, or one seed's `seed_N/` in it)."""
    recorded, record = finetuned.read_record(path)
    config = ElectraConfig.from_dict(record["config"])
    options = record.get("options", {})
    weights = finetuned.weights_file(path, bool(options.get("select_best_epoch")))
    spec = finetuned.read_head_spec(weights)
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
    encoder = ElectraEncoder.from_config_object(config, "discriminator", dtype="float32")
    model = FinetuningModel(encoder, build_head(spec, config), dtype="float32")
    model.build_all(min(config.max_position_embeddings, max(16, config.squad_beam_size)))
    try:
        model.load_weights(weights)
    except ValueError as e:
        raise ConversionError(f"{weights}: does not fit the model of {finetuned.CONFIG_FILE} ({e})") from None
    return model
