"""The fine-tuning model: an ELECTRA encoder and a task head, one optimisation step per global batch.

`FinetuningModel` computes `head(encoder(batch), batch)`; the head is whatever
`task.build_head(config)` returns, so the model never asks which kind of task it
serves. As in the official code:

* the training loss is the *sum* of the per-example losses over the global
  batch (`finetune_loss_reduction="sum"`); gradients are all-reduced over the
  replicas and then clipped to global norm `clip_norm` (1.0), so clipping acts
  on nearly every step. "mean" divides by the global batch size first (under
  Adam that equals "sum" with the clip at clip_norm / batch size). The logged
  loss is always the per-example mean.

Example:

>>> import numpy as np
>>> from electra_tf.config import get_config
>>> from electra_tf.finetuning.heads import ClassificationHead
>>> from electra_tf.model.encoder import ElectraEncoder
>>> config = get_config("tiny", vocab_size=50, num_layers=1)
>>> model = FinetuningModel(ElectraEncoder.from_config_object(config), ClassificationHead(2))
>>> batch = {"input_ids": np.ones((2, 8), "int32"), "input_mask": np.ones((2, 8), "int32"),
...          "segment_ids": np.zeros((2, 8), "int32"), "label_ids": np.array([0, 1], "int32")}
>>> tuple(model(batch)["logits"].shape)
(2, 2)
"""

from __future__ import annotations

import keras
import tensorflow as tf

from electra_tf.finetuning.task import Task
from electra_tf.model import example_dropout, step
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.model.execution import layer_execution
from electra_tf.options import ExecutionOptions
from electra_tf.ops.replicas import replica_context_info

# The model's inputs; a batch also holds the head's targets.
INPUT_KEYS = ("input_ids", "input_mask", "segment_ids")
LOSS_REDUCTIONS = ("sum", "mean")


def _replica_count():
    return replica_context_info()[1]


@keras.saving.register_keras_serializable(package="electra_tf")
class FinetuningModel(keras.Model):
    """`head(encoder(batch), batch)`; `train_step` does one optimisation step (a `model.step.StepModel`).

    The batch is a dict with `input_ids`, `input_mask`, `segment_ids` and the
    head's targets (`label_ids`, `targets` or `start_positions`/...).
    `loss_reduction` ("sum", official, or "mean") is how the per-example
    losses of a global batch are combined before the gradient and its clip.
    """

    def __init__(self, encoder, head, clip_norm=1.0, loss_reduction="sum", execution: ExecutionOptions | None = None,
                 seed=0, **kwargs):
        super().__init__(name=kwargs.pop("name", "finetuning_model"), **kwargs)
        self.execution = layer_execution(execution)  # how the step is computed; not part of the config
        self.seed = int(seed)  # the run's: dropout keyed by (seed, step, example); not part of the config
        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"loss_reduction must be one of {LOSS_REDUCTIONS}, got {loss_reduction!r}")
        self.encoder = encoder
        self.head = head
        self.clip_norm = clip_norm
        self.loss_reduction = loss_reduction

    def call(self, batch, training=False):
        inputs = {"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"],
                  "padding_mask": batch["input_mask"]}
        sequence = self.encoder(inputs, training=training, output_length=getattr(self.head, "output_length", None))
        return self.head(sequence, batch, training=training)

    def build_all(self, seq_length: int):
        """Creates every variable with a dummy batch."""
        ones = tf.ones([1, seq_length], tf.int32)
        self({"input_ids": ones, "input_mask": ones, "segment_ids": tf.zeros_like(ones)})
        return self

    def step_context(self, batch) -> step.StepContext:
        """Each example's dropout stream (`model.step`: made before a compiled step, outside XLA)."""
        return {"per_example": {"dropout_streams": self._dropout_streams(batch)}}

    def _dropout_streams(self, batch):
        optimizer = getattr(self, "optimizer", None)  # none before `compile`
        step_ = optimizer.iterations if optimizer else 0
        indices = example_dropout.global_indices(tf.shape(batch["input_ids"])[0])
        return example_dropout.example_streams(self.seed, step_, indices)

    def compute_losses(self, batch, training=True, dropout_streams=None):
        """This replica's share of the objective: the global-batch sum (official) or mean.

        `mean_loss` is the per-example mean's partial, for the log. Dropout (encoder and head) is
        keyed by the example (`model.example_dropout`), so N replicas train as one device.
        """
        global_batch = tf.cast(tf.shape(batch["input_ids"])[0] * _replica_count(), tf.float32)
        if dropout_streams is None:
            dropout_streams = self._dropout_streams(batch)
        with example_dropout.keyed_by(dropout_streams):
            outputs = self(batch, training=training)
        total = tf.reduce_sum(tf.cast(self.head.per_example_loss(batch, outputs), tf.float32))
        objective = total if self.loss_reduction == "sum" else total / global_batch
        return {"loss": objective, "mean_loss": total / global_batch}

    def update_metrics(self, batch, outputs):
        pass  # fine-tuning scores the dev sets instead of keeping running training metrics

    def train_step(self, batch):
        """One step (`model.step.train_step`: all-reduce before one global-norm clip, so N replicas clip
        exactly what one device would); returns partials that sum to the global values."""
        out = step.train_step(self, batch, self.clip_norm, jit_compile=self.execution.jit_compile)
        replicas = tf.cast(_replica_count(), tf.float32)
        return {"loss": out["mean_loss"], "grad_norm": out["grad_norm"] / replicas, "nonfinite": out["nonfinite"]}

    def get_config(self):
        return {"name": self.name, "clip_norm": self.clip_norm, "loss_reduction": self.loss_reduction,
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "head": keras.saving.serialize_keras_object(self.head)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        encoder = keras.saving.deserialize_keras_object(config.pop("encoder"))
        head = keras.saving.deserialize_keras_object(config.pop("head"))
        return cls(encoder, head, **config)


def build_model(task: Task, config, encoder_fn, strategy, seq_length: int,
                execution: ExecutionOptions | None = None, seed: int = 0) -> FinetuningModel:
    """Encoder + the task's head, with the config's clip norm and loss reduction, all variables built;
    `execution`: the run's resolved options (default: the portable ones); `seed`: the run's (dropout)."""
    with strategy.scope():
        model = FinetuningModel(encoder_fn(execution), task.build_head(config), clip_norm=config.clip_norm,
                                loss_reduction=config.finetune_loss_reduction, execution=execution, seed=seed)
        model.build_all(seq_length)
    return model


def new_encoder_fn(config):
    """A factory of randomly initialised discriminator encoders: `build(execution=None)`."""
    def build(execution: ExecutionOptions | None = None):
        encoder = ElectraEncoder.from_config_object(config, role="discriminator", execution=execution)
        encoder.build()
        return encoder
    return build
