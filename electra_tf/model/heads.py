"""The pre-training heads: the discriminator's replaced-token logit and the masked-LM head.

Their dense + GELU runs as one XLA:CPU kernel under `kernels="xla_cpu"` (`ElectraDense(fused=True)`).

Example:

>>> import numpy as np
>>> head = DiscriminatorHead(hidden_size=8, kernels="reference")
>>> tuple(head(np.zeros((2, 5, 8), "float32")).shape)
(2, 5)
>>> tuple(gather_positions(np.arange(12).reshape(1, 4, 3), np.array([[3, 0]])).shape)
(1, 2, 3)
"""

from typing import NamedTuple

import keras
import tensorflow as tf
from keras import layers, ops

from electra_tf.model.execution import without_legacy_fields
from electra_tf.model.layers import ElectraDense, get_activation, layer_norm, truncated_normal
from electra_tf.ops import xla_cpu
from electra_tf.ops.reference import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class DiscriminatorHead(layers.Layer):
    """dense(H) → GELU → dense(1): one replaced-token logit per position (`kernels`: see `ElectraDense`)."""

    def __init__(self, hidden_size, hidden_act="gelu", initializer_range=0.02, kernels=None, **kwargs):
        super().__init__(**without_legacy_fields(kwargs))
        kernels = kernels or "reference"  # see electra_tf.model.execution: no options, the portable ones
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.dense = ElectraDense(
            hidden_size, activation=get_activation(hidden_act, kernels), fused=kernels == "xla_cpu",
            kernel_initializer=truncated_normal(initializer_range), dtype=self.dtype_policy, name="dense",
        )
        # glorot-uniform: the official discriminator's last dense has no initializer.
        self.logits = ElectraDense(1, kernel_initializer="glorot_uniform", dtype=self.dtype_policy, name="logits")

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.logits.build(tuple(input_shape[:-1]) + (self.hidden_size,))
        self.built = True

    def call(self, hidden):
        return ops.squeeze(self.logits(self.dense(hidden)), axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, hidden_act=self.hidden_act,
                      initializer_range=self.initializer_range)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedLMHead(layers.Layer):
    """dense(E) → GELU → LayerNorm → logits tied to the word embeddings + bias (`kernels`: see `ElectraDense`).

    Call it on hidden states already gathered at the masked positions
    (`[batch, num_masked, hidden]`): at a 30k vocabulary the output projection
    is most of the generator's cost, so it must not run at every position.
    """

    def __init__(self, token_embedding, embedding_size, hidden_act="gelu", layer_norm_epsilon=1e-12,
                 initializer_range=0.02, kernels=None, **kwargs):
        super().__init__(**kwargs)
        kernels = kernels or "reference"  # see electra_tf.model.execution: no options, the portable ones
        self.token_embedding = token_embedding
        self.embedding_size = embedding_size
        self.hidden_act = hidden_act
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.dense = ElectraDense(
            embedding_size, activation=get_activation(hidden_act, kernels), fused=kernels == "xla_cpu",
            kernel_initializer=truncated_normal(initializer_range), dtype=self.dtype_policy, name="dense",
        )
        self.layer_norm = layer_norm(layer_norm_epsilon, kernels, dtype=self.dtype_policy, name="layer_norm")

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.layer_norm.build(tuple(input_shape[:-1]) + (self.embedding_size,))
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.token_embedding.input_dim,), initializer="zeros"
        )
        self.built = True

    def call(self, hidden):
        x = self.layer_norm(self.dense(hidden))
        logits = self.token_embedding(x, reverse=True)
        return ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")

    def get_config(self):
        # The tied embedding layer is serialised with the head: deserialised alone, the head gets its own
        # copy (a model ties it again by building the head on its encoder's `token_embedding`).
        config = super().get_config()
        config.update(token_embedding=keras.layers.serialize(self.token_embedding), embedding_size=self.embedding_size,
                      hidden_act=self.hidden_act, layer_norm_epsilon=self.layer_norm_epsilon,
                      initializer_range=self.initializer_range)
        return config

    @classmethod
    def from_config(cls, config):
        config = without_legacy_fields(config)
        return cls(keras.layers.deserialize(config.pop("token_embedding")), **config)


def gather_positions(sequence, positions):
    """`sequence[b, positions[b, i]]` for `[B, S, H]` and int `[B, N]` → `[B, N, H]`."""
    return ops.take_along_axis(sequence, ops.expand_dims(positions, -1), axis=1)


class VocabularyLogProbs(NamedTuple):
    """`[..., V]` logits read at one token per position, each `[...]`: log q(v) = logits[v] − log_norm."""

    at_labels: tf.Tensor  # log softmax at the labels (the only differentiable part)
    log_norm: tf.Tensor  # log Σ exp(logits)
    top: tf.Tensor  # the largest logit: log softmax at the argmax is top − log_norm
    predictions: tf.Tensor  # the argmax, int32

    def at(self, logits, token_ids):
        """Log softmax at other tokens `[...]` (`logits` the same `[..., V]`), with no gradient."""
        return tf.stop_gradient(tf.gather(logits, token_ids, batch_dims=len(token_ids.shape)) - self.log_norm)


def vocabulary_log_probs(logits, labels, kernels: str) -> VocabularyLogProbs:
    """Log softmax of float32 `[..., V]` logits at `labels`, with what reading it at other tokens needs.

    For a softmax at every position (`all_tokens_mlm`, Electric's cloze model) this is most of the
    step's element-wise work on CPUs: under `kernels="xla_cpu"` it is one fused pass forward and one
    backward (`xla_cpu.vocabulary_softmax`); the reference is TensorFlow's cross-entropy.
    """
    if kernels == "xla_cpu":
        softmax = xla_cpu.vocabulary_softmax(logits, labels)
        top = tf.reshape(softmax.top, tf.shape(labels))
        log_mass = tf.reshape(tf.math.log(tf.reduce_sum(softmax.block_masses, -1)), tf.shape(labels))
        return VocabularyLogProbs(-softmax.losses, top + log_mass, top, softmax.predictions)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    return VocabularyLogProbs(-losses, tf.stop_gradient(tf.reduce_logsumexp(logits, -1)),
                              tf.stop_gradient(tf.reduce_max(logits, -1)), tf.argmax(logits, -1, output_type=tf.int32))
