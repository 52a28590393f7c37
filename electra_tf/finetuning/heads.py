"""Task heads on top of the ELECTRA encoder, each with its loss.

Both heads follow `get_prediction_module` of the official code
(`finetune/classification/classification_tasks.py`, `finetune/qa/qa_tasks.py`);
every dense layer there is a `tf.layers.dense` without an initializer, i.e.
Glorot-uniform kernels and zero biases, so that is the default here too
(the encoder itself keeps its truncated normal 0.02).

* `ClassificationHead`: the [CLS] vector → dropout 0.1 → linear (the official
  "pooled output" is `sequence[:, 0]`, no tanh pooler). `num_labels=1` makes it
  the regression head (MSE loss, STS-B).
* `SpanHead`: extractive QA. Start logits are a linear map of every position,
  masked to the context tokens plus position 0, which stands for "no answer"
  (the official `answer_mask = input_mask · segment_ids + one_hot(0)`;
  masked logits get −1000). With `joint_prediction` (the official default)
  the end logit is conditioned on the start: the hidden state at the start
  position is concatenated to every position's hidden state → dense(512,
  GELU) → dense(1). Training conditions on the *gold* start; inference keeps
  the `beam_size` best start log-probs and, for each, the `beam_size` best end
  log-probs (`start_top_log_probs/index` `[B, K]`, `end_top_log_probs/index`
  `[B, K, K]`), which `squad.decoding.decode_predictions` turns into spans. With
  `joint_prediction=False` start and end are two independent linear maps.
  The `answerable` classifier (official `answerable_classifier` with
  `answerable_uses_start_logits`): concat([CLS], softmax(start)·hidden) →
  dense(512, GELU) → dense(1), sigmoid cross-entropy on `is_impossible`,
  weight 0.5; as in the official code it is on by default and trained on
  SQuAD 1.1 too (where every label is 0).
* `TokenClassificationHead`: tagging (NER, chunking). A linear map of every
  position → `logits` `[B, L, num_labels]`; the loss is the softmax
  cross-entropy of each position weighted by `label_weights` (1 on the first
  WordPiece of every word, 0 elsewhere) and summed over the sequence, as the
  official `tagging_tasks.py` (which gathers the first pieces and has no
  dropout: `dropout_rate` defaults to 0).

Heads return float32 outputs whatever the compute dtype.

Example:

>>> import numpy as np
>>> head = ClassificationHead(num_labels=3)
>>> hidden = np.random.RandomState(0).normal(size=(2, 5, 8)).astype("float32")
>>> tuple(head(hidden, {})["logits"].shape)
(2, 3)
>>> span = SpanHead(beam_size=3, joint_hidden_size=16, answerable_hidden_size=16)
>>> batch = {"input_mask": np.ones((2, 5), "int32"), "segment_ids": np.array([[0, 0, 1, 1, 1]] * 2, "int32")}
>>> outputs = span(hidden, batch)
>>> sorted(outputs)
['answerable_logit', 'end_top_index', 'end_top_log_probs', 'start_logits', 'start_top_index', 'start_top_log_probs']
>>> tuple(outputs["end_top_index"].shape)
(2, 3, 3)
>>> batch.update(start_positions=np.array([2, 0]), end_positions=np.array([3, 0]), is_impossible=np.array([0, 1]))
>>> tuple(span.per_example_loss(batch, span(hidden, batch, training=True)).shape)
(2,)
>>> tagger = TokenClassificationHead(num_labels=4)
>>> tuple(tagger(hidden, {})["logits"].shape)
(2, 5, 4)
>>> labels = {"label_ids": np.zeros((2, 5), "int32"), "label_weights": np.zeros((2, 5), "float32")}
>>> tagger.per_example_loss(labels, tagger(hidden, {})).numpy().tolist()  # no word weighted: no loss
[0.0, 0.0]
"""

from __future__ import annotations

import copy

import keras
from keras import layers, ops

from electra_tf.model.layers import ElectraDense, ElectraDropout, get_activation

PACKAGE = "electra_tf"
# Added to the logits of positions that cannot start or end an answer (official: 1000 · (mask − 1)).
MASK_PENALTY = 1000.0
# Log-prob of the filler entries when a beam is wider than the sequence (never a real position).
BEAM_FILLER = -1e9


def _initializer_config(initializer):
    """A JSON-able identifier of `initializer` (string or config dict), for get_config."""
    if isinstance(initializer, (str, dict)):
        return initializer
    return keras.initializers.serialize(keras.initializers.get(initializer))


def _new_initializer(identifier):
    """A fresh initializer instance per layer, so two layers never share random draws."""
    return keras.initializers.get(copy.deepcopy(identifier))


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassificationHead(layers.Layer):
    """[CLS] hidden state → dropout → dense(num_labels). num_labels=1: regression."""

    # Positions of the encoder output the head reads: the encoder's last layer runs only there.
    output_length = 1

    def __init__(self, num_labels, dropout_rate=0.1, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_labels = int(num_labels)
        self.dropout_rate = dropout_rate
        self.kernel_initializer = _initializer_config(kernel_initializer)
        self.dropout = ElectraDropout(dropout_rate, masks="keras", name="dropout")  # keyed by the example in training
        self.dense = ElectraDense(self.num_labels, kernel_initializer=_new_initializer(self.kernel_initializer),
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
                      kernel_initializer=self.kernel_initializer)
        return config


def _log_softmax_ce(logits, positions, depth):
    log_probs = ops.log_softmax(logits, axis=-1)
    return -ops.sum(ops.one_hot(ops.cast(positions, "int32"), depth) * log_probs, axis=-1)


def answer_penalty(batch):
    """`[B, L]`: 0 where an answer may start or end (context tokens and position 0), −1000 elsewhere."""
    mask = ops.cast(batch["input_mask"], "float32") * ops.cast(batch["segment_ids"], "float32")
    seq_length = ops.shape(mask)[1]
    mask = ops.minimum(mask + ops.expand_dims(ops.one_hot(0, seq_length), 0), 1.0)
    return MASK_PENALTY * (mask - 1.0)


def beam_top_k(log_probs, k):
    """`ops.top_k` over the last axis that also works when it is shorter than `k`.

    The axis is padded with `k` filler entries (log-prob −1e9, index ≥ L) first:
    they are never chosen while L ≥ k, and the decoder drops them otherwise,
    so outputs are `[..., k]` for any (even dynamic) sequence length.
    """
    rank = len(log_probs.shape)
    padded = ops.pad(log_probs, [[0, 0]] * (rank - 1) + [[0, k]], constant_values=BEAM_FILLER)
    values, indices = ops.top_k(padded, k)
    return values, ops.cast(indices, "int32")


@keras.saving.register_keras_serializable(package=PACKAGE)
class SpanHead(layers.Layer):
    """Start/end scores (+ optional answerability logit) for extractive QA.

    Outputs (float32; indices int32), `K = beam_size`:

    * always: `start_logits` `[B, L]` (masked), and with `answerable`
      `answerable_logit` `[B]` (> 0: unanswerable);
    * `joint_prediction=False`, or `training=True`: `end_logits` `[B, L]`
      (joint: conditioned on `batch["start_positions"]`, the gold start);
    * `joint_prediction=True` and `training` false: `start_top_log_probs`,
      `start_top_index` `[B, K]`, `end_top_log_probs`, `end_top_index`
      `[B, K, K]` (row i: the best ends given start `start_top_index[:, i]`).
    """

    output_length = None  # every position

    def __init__(self, answerable=True, answerable_hidden_size=512, answerable_weight=0.5,
                 joint_prediction=True, beam_size=20, joint_hidden_size=512, hidden_act="gelu",
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.answerable = bool(answerable)
        self.answerable_hidden_size = int(answerable_hidden_size)
        self.answerable_weight = float(answerable_weight)
        self.joint_prediction = bool(joint_prediction)
        self.beam_size = int(beam_size)
        self.joint_hidden_size = int(joint_hidden_size)
        self.hidden_act = hidden_act
        self.kernel_initializer = _initializer_config(kernel_initializer)
        self.activation = get_activation(hidden_act)
        self.start_logits = self._dense(1, "start_logits")
        if self.joint_prediction:  # the official `qa_hidden` (input: [start state, position state])
            self.joint_hidden = self._dense(self.joint_hidden_size, "joint_hidden")
        # Joint: the official `qa_logits` on top of `joint_hidden`; else a linear map of the sequence.
        self.end_logits = self._dense(1, "end_logits")
        if self.answerable:
            self.answerable_hidden = self._dense(self.answerable_hidden_size, "answerable_hidden",
                                                 activation=self.activation)
            self.answerable_logit = self._dense(1, "answerable_logit")

    def _dense(self, units, name, activation=None):
        return ElectraDense(units, activation=activation, kernel_initializer=_new_initializer(self.kernel_initializer),
                            dtype=self.dtype_policy, name=name)

    def build(self, sequence_shape, batch_shape=None):
        batch, hidden = sequence_shape[0], sequence_shape[-1]
        self.start_logits.build(tuple(sequence_shape))
        if self.joint_prediction:
            self.joint_hidden.build((batch, None, 2 * hidden))
            self.end_logits.build((batch, None, self.joint_hidden_size))
        else:
            self.end_logits.build(tuple(sequence_shape))
        if self.answerable:
            self.answerable_hidden.build((batch, 2 * hidden))
            self.answerable_logit.build((batch, self.answerable_hidden_size))
        self.built = True

    def call(self, sequence, batch, training=None):
        penalty = answer_penalty(batch)
        start_logits = self._logits(self.start_logits, sequence) + penalty
        outputs = {"start_logits": start_logits}
        if not self.joint_prediction:
            outputs["end_logits"] = self._logits(self.end_logits, sequence) + penalty
        elif training:
            outputs["end_logits"] = self._gold_start_end_logits(sequence, batch) + penalty
        else:
            outputs.update(self._beam(sequence, start_logits, penalty))
        if self.answerable:
            outputs["answerable_logit"] = self._answerable_logit(sequence, start_logits)
        return outputs

    @staticmethod
    def _logits(dense, sequence):
        return ops.cast(ops.squeeze(dense(sequence), -1), "float32")

    def joint_end_logits(self, sequence, start_index):
        """End logits `[B, K, L]` (unmasked, float32) given K start positions `[B, K]` per example.

        Equal to dense(512, GELU)(concat[h_start, h_end]) → dense(1), computed as
        h_start·W_start + h_end·W_end + b so the `[B, K, L, 2H]` concatenation
        (2 GB for a base model's eval batch) never exists.
        """
        hidden = sequence.shape[-1]
        one_hot = ops.one_hot(ops.cast(start_index, "int32"), ops.shape(sequence)[1], dtype=sequence.dtype)
        start_states = ops.matmul(one_hot, sequence)  # [B, K, H]
        kernel = ops.cast(self.joint_hidden.kernel, sequence.dtype)
        bias = ops.cast(self.joint_hidden.bias, sequence.dtype)
        from_start = ops.matmul(start_states, kernel[:hidden])  # [B, K, J]
        from_end = ops.matmul(sequence, kernel[hidden:])  # [B, L, J]
        joint = self.activation(ops.expand_dims(from_start, 2) + ops.expand_dims(from_end, 1) + bias)
        return self._logits(self.end_logits, joint)

    def _gold_start_end_logits(self, sequence, batch):
        """Training: the end logits `[B, L]` conditioned on the gold start position."""
        if "start_positions" not in batch:
            raise ValueError("SpanHead(joint_prediction=True) called with training=True needs "
                             "batch['start_positions'] (the end logits are conditioned on the gold start)")
        gold = ops.expand_dims(ops.cast(batch["start_positions"], "int32"), 1)
        return ops.squeeze(self.joint_end_logits(sequence, gold), 1)

    def _beam(self, sequence, start_logits, penalty):
        """Inference: the `beam_size` best starts and, for each, the `beam_size` best ends."""
        start_top_log_probs, start_top_index = beam_top_k(ops.log_softmax(start_logits, axis=-1), self.beam_size)
        end_logits = self.joint_end_logits(sequence, start_top_index) + ops.expand_dims(penalty, 1)
        end_top_log_probs, end_top_index = beam_top_k(ops.log_softmax(end_logits, axis=-1), self.beam_size)
        return {"start_top_log_probs": start_top_log_probs, "start_top_index": start_top_index,
                "end_top_log_probs": end_top_log_probs, "end_top_index": end_top_index}

    def _answerable_logit(self, sequence, start_logits):
        """concat([CLS], softmax(start) · hidden) → dense(512, GELU) → dense(1)."""
        hidden = ops.cast(sequence, "float32")
        start_p = ops.softmax(start_logits, axis=-1)
        start_feature = ops.sum(ops.expand_dims(start_p, -1) * hidden, axis=1)
        features = ops.cast(ops.concatenate([hidden[:, 0], start_feature], axis=-1), self.compute_dtype)
        return self._logits(self.answerable_logit, self.answerable_hidden(features))

    def per_example_loss(self, batch, outputs):
        """(start CE + end CE) / 2 (+ 0.5 · answerability BCE): needs the outputs of a training=True call."""
        if "end_logits" not in outputs:
            raise ValueError("SpanHead.per_example_loss needs end_logits: with joint_prediction they come "
                             "from a training=True call (conditioned on the gold start)")
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
                      answerable_weight=self.answerable_weight, joint_prediction=self.joint_prediction,
                      beam_size=self.beam_size, joint_hidden_size=self.joint_hidden_size,
                      hidden_act=self.hidden_act, kernel_initializer=self.kernel_initializer)
        return config



@keras.saving.register_keras_serializable(package=PACKAGE)
class TokenClassificationHead(ClassificationHead):
    """Every position → (dropout) → dense(num_labels): `logits` `[B, L, num_labels]` (float32).

    `per_example_loss` needs `label_ids` and `label_weights` `[B, L]`: the
    weighted softmax cross-entropy summed over positions (the official
    `losses *= labels_mask; reduce_sum`), so only first WordPieces count.
    """

    output_length = None  # every position

    def __init__(self, num_labels, dropout_rate=0.0, kernel_initializer="glorot_uniform", **kwargs):
        # No dropout by default: the official tagging head has none.
        super().__init__(num_labels, dropout_rate=dropout_rate, kernel_initializer=kernel_initializer, **kwargs)

    def build(self, sequence_shape, batch_shape=None):
        self.dense.build(tuple(sequence_shape))
        self.built = True

    def call(self, sequence, batch=None, training=None):
        if self.dropout_rate:
            sequence = self.dropout(sequence, training=training)
        return {"logits": ops.cast(self.dense(sequence), "float32")}

    def per_example_loss(self, batch, outputs):
        log_probs = ops.log_softmax(outputs["logits"], axis=-1)
        labels = ops.one_hot(ops.cast(batch["label_ids"], "int32"), self.num_labels)
        token_loss = -ops.sum(labels * log_probs, axis=-1)
        return ops.sum(token_loss * ops.cast(batch["label_weights"], "float32"), axis=-1)
