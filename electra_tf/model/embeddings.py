"""The embeddings block (word + position + segment embeddings, LayerNorm, dropout) and its GDES view.

`ElectraEmbeddings` is laid out like `keras_hub.models.ElectraBackbone`'s embedding layers (same
classes, names and weight order). The generator and discriminator share one block; under
gradient-disentangled embedding sharing (`GdesEmbeddings`) the discriminator sees it through deltas
of its own.

Example:

>>> import numpy as np
>>> embeddings = ElectraEmbeddings(vocab_size=10, embedding_size=4, max_position_embeddings=8)
>>> tuple(embeddings(np.array([[2, 5, 3]]), np.zeros((1, 3), "int32")).shape)
(1, 3, 4)
>>> tuple(GdesEmbeddings(embeddings)(np.array([[2, 5, 3]]), np.zeros((1, 3), "int32")).shape)
(1, 3, 4)
"""

import keras
from keras import layers, ops
from keras_hub.layers import PositionEmbedding

from electra_tf.model.execution import without_legacy_fields
from electra_tf.model.layers import ElectraDropout, layer_norm, truncated_normal
from electra_tf.ops.reference import PACKAGE, layer_norm_last_axis


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraEmbeddings(layers.Layer):
    """Word + position + segment embeddings, LayerNorm and dropout.

    Layer names match `keras_hub.models.ElectraBackbone`. Call with
    `(token_ids, segment_ids)`; returns `[batch, seq, embedding_size]`.
    """

    def __init__(
        self,
        vocab_size,
        embedding_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        dropout_rate=0.1,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        kernels=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        kernels = kernels or "reference"  # see electra_tf.model.execution: no options, the portable ones
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.dropout_rate = dropout_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        init = truncated_normal(initializer_range)
        self.token_embedding = layers.ReversibleEmbedding(
            vocab_size, embedding_size, embeddings_initializer=init,
            # The MLM logits' vocabulary matmul runs in float32 under mixed precision, as the
            # official code computes its logits; it only runs at the masked positions.
            reverse_dtype="float32", dtype=self.dtype_policy, name="token_embedding",
        )
        self.position_embedding = PositionEmbedding(
            sequence_length=max_position_embeddings, initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy, name="position_embedding",
        )
        self.segment_embedding = layers.Embedding(
            type_vocab_size, embedding_size, embeddings_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy, name="segment_embedding",
        )
        self.embeddings_layer_norm = layer_norm(layer_norm_epsilon, kernels, dtype=self.dtype_policy,
                                                name="embeddings_layer_norm")
        self.embeddings_dropout = ElectraDropout(dropout_rate, masks="keras", dtype=self.dtype_policy,
                                                 name="embeddings_dropout")

    def build(self, token_ids_shape, segment_ids_shape=None):
        self.token_embedding.build(token_ids_shape)
        embedded_shape = tuple(token_ids_shape) + (self.embedding_size,)
        self.position_embedding.build(embedded_shape)
        self.segment_embedding.build(token_ids_shape)
        self.embeddings_layer_norm.build(embedded_shape)
        self.built = True

    def call(self, token_ids, segment_ids, training=None):
        tokens = self.token_embedding(token_ids)
        x = tokens + self.position_embedding(tokens) + self.segment_embedding(segment_ids)
        x = self.embeddings_layer_norm(x)
        return self.embeddings_dropout(x, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embedding_size=self.embedding_size,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            dropout_rate=self.dropout_rate,
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**without_legacy_fields(config))


@keras.saving.register_keras_serializable(package=PACKAGE)
class GdesEmbeddings(layers.Layer):
    """Gradient-disentangled embedding sharing (DeBERTaV3): the discriminator's view of shared embeddings.

    Every parameter θ of the generator's `ElectraEmbeddings` block (word, position
    and segment tables, LayerNorm) is used as `stop_gradient(θ) + Δθ`, with Δθ
    zero-initialised and owned by the discriminator. The generator's MLM loss
    alone trains the shared θ; the discriminator's loss trains only the deltas,
    so the two losses no longer pull the shared table in opposite directions
    ("tug of war"). `fold()` returns the plain block `θ + Δθ` for fine-tuning.
    Same call signature as `ElectraEmbeddings`.
    """

    def __init__(self, base: ElectraEmbeddings, **kwargs):
        super().__init__(**kwargs)
        self.base = base

    def build(self, token_ids_shape=None, segment_ids_shape=None):
        if not self.base.built:
            self.base.build((None, None))
        self.deltas = {
            name: self.add_weight(name=delta_name, shape=tuple(variable.shape), initializer="zeros")
            for name, delta_name, variable in self._shared()
        }
        self.built = True

    def _shared(self):
        """(key, delta variable name, shared variable); LayerNorm deltas keep the names
        `gamma`/`beta` so the optimizer excludes them from weight decay like their bases."""
        base = self.base
        return [
            ("token", "token_embedding_delta", base.token_embedding.embeddings),
            ("position", "position_embedding_delta", base.position_embedding.position_embeddings),
            ("segment", "segment_embedding_delta", base.segment_embedding.embeddings),
            ("gamma", "gamma", base.embeddings_layer_norm.gamma),
            ("beta", "beta", base.embeddings_layer_norm.beta),
        ]

    def _table(self, key, variable):
        return ops.stop_gradient(ops.convert_to_tensor(variable)) + ops.convert_to_tensor(self.deltas[key])

    def call(self, token_ids, segment_ids, training=None):
        tables = {key: ops.cast(self._table(key, variable), self.compute_dtype)
                  for key, _, variable in self._shared()}
        tokens = ops.take(tables["token"], token_ids, axis=0)
        length = ops.shape(token_ids)[1]
        positions = ops.expand_dims(tables["position"][:length], 0)
        x = tokens + positions + ops.take(tables["segment"], segment_ids, axis=0)
        x = layer_norm_last_axis(x, tables["gamma"], tables["beta"], self.base.layer_norm_epsilon)
        return self.base.embeddings_dropout(x, training=training)

    def fold(self) -> ElectraEmbeddings:
        """A plain `ElectraEmbeddings` holding θ + Δθ (what the discriminator computes)."""
        base = self.base
        folded = ElectraEmbeddings(**{k: v for k, v in base.get_config().items()
                                      if k not in ("name", "trainable", "dtype")},
                                   dtype=base.dtype_policy, name="embeddings")
        folded.build((None, None))
        for (key, _, variable), (_, _, target) in zip(self._shared(), _shared_variables(folded)):
            target.assign(ops.convert_to_tensor(variable) + ops.convert_to_tensor(self.deltas[key]))
        return folded

    def get_config(self):
        # The shared block is serialised with it: deserialised alone, it wraps its own copy (a model shares
        # the generator's block again by building it on that block; an export folds it: `fold()`).
        config = super().get_config()
        config.update(base=keras.layers.serialize(self.base))
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(keras.layers.deserialize(config.pop("base")), **config)


def _shared_variables(embeddings: ElectraEmbeddings):
    return GdesEmbeddings(embeddings)._shared()
