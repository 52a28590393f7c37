"""Task heads on top of the ELECTRA encoder, each with its loss.

* `ClassificationHead`: the [CLS] vector → dropout → linear, as in the
  official ELECTRA code (its "pooled output" is `sequence[:, 0]`, no tanh
  pooler). `num_labels=1` makes it the regression head (MSE loss, STS-B).
* `SpanHead`: start/end logits over the context tokens (and position 0,
  which stands for "no answer"), plus for SQuAD 2.0 the official
  `answerable_classifier` (with `answerable_uses_start_logits`):
  concat([CLS], softmax(start)·hidden) → dense(512, GELU) → dense(1), trained
  with sigmoid cross-entropy on `is_impossible`, weight 0.5.

Heads return float32 outputs whatever the compute dtype.

Example:

>>> import numpy as np
>>> head = ClassificationHead(num_labels=3)
>>> hidden = np.random.RandomState(0).normal(size=(2, 5, 8)).astype("float32")
>>> tuple(head(hidden, {})["logits"].shape)
(2, 3)
>>> span = SpanHead(answerable=True, answerable_hidden_size=16)
>>> batch = {"input_mask": np.ones((2, 5), "int32"), "segment_ids": np.array([[0, 0, 1, 1, 1]] * 2, "int32")}
>>> sorted(span(hidden, batch))
['answerable_logit', 'end_logits', 'start_logits']
"""

from __future__ import annotations

import keras
from keras import layers, ops

from electra_tf.modeling import get_activation, truncated_normal

PACKAGE = "electra_tf"


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassificationHead(layers.Layer):
    """[CLS] hidden state → dropout → dense(num_labels). num_labels=1: regression."""

    def __init__(self, num_labels, dropout_rate=0.1, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_labels = int(num_labels)
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.dropout = layers.Dropout(dropout_rate, name="dropout")
        self.dense = layers.Dense(self.num_labels, kernel_initializer=truncated_normal(initializer_range),
                                  dtype=self.dtype_policy, name="logits")

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    def build(self, sequence_shape, batch_shape=None):
        self.dense.build((sequence_shape[0], sequence_shape[-1]))
        self.built = True

    def call(self, sequence, batch=None, training=None):
        cls = self.dropout(sequence[:, 0], training=training)
        logits = ops.cast(self.dense(cls), "float32")
        if self.is_regression:
            return {"predictions": ops.squeeze(logits, -1)}
        return {"logits": logits}

    def per_example_loss(self, batch, outputs):
        if self.is_regression:
            return ops.square(outputs["predictions"] - ops.cast(batch["targets"], "float32"))
        log_probs = ops.log_softmax(outputs["logits"], axis=-1)
        labels = ops.one_hot(ops.cast(batch["label_ids"], "int32"), self.num_labels)
        return -ops.sum(labels * log_probs, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(num_labels=self.num_labels, dropout_rate=self.dropout_rate,
                      initializer_range=self.initializer_range)
        return config


def _log_softmax_ce(logits, positions, depth):
    log_probs = ops.log_softmax(logits, axis=-1)
    return -ops.sum(ops.one_hot(ops.cast(positions, "int32"), depth) * log_probs, axis=-1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SpanHead(layers.Layer):
    """Start/end logits (+ optional answerability logit) for extractive QA."""

    def __init__(self, answerable=False, answerable_hidden_size=512, answerable_weight=0.5,
                 hidden_act="gelu", initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.answerable = bool(answerable)
        self.answerable_hidden_size = int(answerable_hidden_size)
        self.answerable_weight = float(answerable_weight)
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        init = truncated_normal(initializer_range)
        self.span_logits = layers.Dense(2, kernel_initializer=init, dtype=self.dtype_policy, name="span_logits")
        if self.answerable:
            self.answerable_hidden = layers.Dense(
                self.answerable_hidden_size, activation=get_activation(hidden_act), kernel_initializer=init,
                dtype=self.dtype_policy, name="answerable_hidden")
            self.answerable_logit = layers.Dense(1, kernel_initializer=init, dtype=self.dtype_policy,
                                                 name="answerable_logit")

    def build(self, sequence_shape, batch_shape=None):
        hidden = sequence_shape[-1]
        self.span_logits.build(tuple(sequence_shape))
        if self.answerable:
            self.answerable_hidden.build((sequence_shape[0], 2 * hidden))
            self.answerable_logit.build((sequence_shape[0], self.answerable_hidden_size))
        self.built = True

    def call(self, sequence, batch, training=None):
        logits = ops.cast(self.span_logits(sequence), "float32")
        mask = ops.cast(batch["input_mask"], "float32") * ops.cast(batch["segment_ids"], "float32")
        seq_length = ops.shape(mask)[1]
        mask = ops.minimum(mask + ops.expand_dims(ops.one_hot(0, seq_length), 0), 1.0)
        penalty = 1000.0 * (mask - 1.0)
        start_logits = logits[..., 0] + penalty
        end_logits = logits[..., 1] + penalty
        outputs = {"start_logits": start_logits, "end_logits": end_logits}
        if self.answerable:
            start_p = ops.softmax(start_logits, axis=-1)
            hidden = ops.cast(sequence, "float32")
            start_feature = ops.sum(ops.expand_dims(start_p, -1) * hidden, axis=1)
            features = ops.concatenate([hidden[:, 0], start_feature], axis=-1)
            features = ops.cast(features, self.compute_dtype)
            outputs["answerable_logit"] = ops.cast(
                ops.squeeze(self.answerable_logit(self.answerable_hidden(features)), -1), "float32")
        return outputs

    def per_example_loss(self, batch, outputs):
        depth = ops.shape(outputs["start_logits"])[-1]
        loss = (_log_softmax_ce(outputs["start_logits"], batch["start_positions"], depth)
                + _log_softmax_ce(outputs["end_logits"], batch["end_positions"], depth)) / 2.0
        if self.answerable:
            labels = ops.cast(batch["is_impossible"], "float32")
            loss += self.answerable_weight * ops.binary_crossentropy(
                labels, outputs["answerable_logit"], from_logits=True)
        return loss

    def get_config(self):
        config = super().get_config()
        config.update(answerable=self.answerable, answerable_hidden_size=self.answerable_hidden_size,
                      answerable_weight=self.answerable_weight, hidden_act=self.hidden_act,
                      initializer_range=self.initializer_range)
        return config


def build_head(task, config):
    """The head of `task` with the hyper-parameters of `config` (an `ElectraConfig`)."""
    if task.kind == "span":
        return SpanHead(answerable=task.v2, hidden_act=config.hidden_act,
                        initializer_range=config.initializer_range, name="span_head")
    return ClassificationHead(task.num_labels, dropout_rate=config.dropout_rate,  # 0.1 as in the official code
                              initializer_range=config.initializer_range,
                              name="classification_head")
