"""`ElectraEncoder`: embeddings → optional projection → post-LN transformer layers, in Keras 3.

The discriminator is laid out exactly like `keras_hub.models.ElectraBackbone` (same layer names
and weight order), so its weights copy into that class one layer at a time (see
`electra_tf.convert.keras_hub_preset`). The generator reuses the discriminator's whole
`ElectraEmbeddings` block (the same variable objects) and adds its own projection and narrower
transformer layers, as in the official code.

How the layers compute is an execution choice (`electra_tf.options.ExecutionOptions`), never part
of the encoder's config: see `model.transformer_layer` for the two kernel implementations.

Example:

>>> import numpy as np
>>> from electra_tf.config import get_config
>>> from electra_tf.model.encoder import ElectraEncoder
>>> config = get_config("tiny")
>>> encoder = ElectraEncoder.from_config_object(config, role="discriminator")
>>> inputs = {
...     "token_ids": np.array([[2, 10, 11, 3, 0]], "int32"),
...     "segment_ids": np.zeros((1, 5), "int32"),
...     "padding_mask": np.array([[1, 1, 1, 1, 0]], "int32"),
... }
>>> tuple(encoder(inputs).shape), tuple(encoder(inputs, output_length=1).shape)
((1, 5, 128), (1, 1, 128))
"""

import dataclasses

import keras
from keras import ops

from electra_tf.config import ElectraConfig
from electra_tf.model import layer_loop
from electra_tf.model.embeddings import ElectraEmbeddings
from electra_tf.model.execution import layer_execution, without_legacy_fields
from electra_tf.model.layers import ElectraDense, get_activation, truncated_normal
from electra_tf.model.transformer_layer import ElectraTransformerEncoder
from electra_tf.options import ExecutionOptions
from electra_tf.ops.reference import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraEncoder(keras.Model):
    """Embeddings → optional projection → post-LN transformer layers.

    Inputs: a dict with int `token_ids`, `segment_ids` and `padding_mask`
    (1 = real token), each `[batch, seq]`. Output: `[batch, seq, hidden_size]`.
    Pass `embeddings=` to share an existing `ElectraEmbeddings` block. `execution`
    (`electra_tf.options.ExecutionOptions`, resolved; default: the portable options) says how the
    layers compute; it is not part of the encoder's config.
    """

    def __init__(
        self,
        vocab_size,
        embedding_size,
        hidden_size,
        num_layers,
        num_heads,
        intermediate_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        dropout_rate=0.1,
        hidden_act="gelu",
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        embeddings=None,
        execution: ExecutionOptions | None = None,
        **kwargs,
    ):
        super().__init__(**without_legacy_fields(kwargs))
        self.execution = execution = layer_execution(execution)
        self.embeddings = embeddings or ElectraEmbeddings(
            vocab_size, embedding_size, max_position_embeddings, type_vocab_size,
            dropout_rate, layer_norm_epsilon, initializer_range, kernels=execution.kernels,
            dtype=self.dtype_policy, name="embeddings",
        )
        self.embeddings_projection = None
        if hidden_size != embedding_size:
            # glorot-uniform: the official `embeddings_project` is a tf.layers.dense with no initializer.
            self.embeddings_projection = ElectraDense(
                hidden_size, kernel_initializer="glorot_uniform",
                dtype=self.dtype_policy, name="embeddings_projection",
            )
        # Named attributes, not a list: TF's object-based checkpoints cannot see
        # inside Keras' TrackedList, so listed layers would silently not be saved.
        for i in range(num_layers):
            setattr(self, f"transformer_layer_{i}", ElectraTransformerEncoder(
                intermediate_dim=intermediate_size,
                num_heads=num_heads,
                dropout=dropout_rate,
                activation=get_activation(hidden_act, execution.kernels),
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=truncated_normal(initializer_range),
                kernels=execution.kernels,
                dropout_masks=execution.dropout_masks,
                dtype=self.dtype_policy,
                name=f"transformer_layer_{i}",
            ))
        self._config = dict(
            vocab_size=vocab_size, embedding_size=embedding_size, hidden_size=hidden_size,
            num_layers=num_layers, num_heads=num_heads, intermediate_size=intermediate_size,
            max_position_embeddings=max_position_embeddings, type_vocab_size=type_vocab_size,
            dropout_rate=dropout_rate, hidden_act=hidden_act, layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range,
        )

    @classmethod
    def from_config_object(cls, config: ElectraConfig, role="discriminator", embeddings=None,
                           dtype=None, name=None, execution: ExecutionOptions | None = None):
        return cls(
            vocab_size=config.vocab_size,
            embedding_size=config.embedding_size,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            dropout_rate=config.dropout_rate,
            hidden_act=config.hidden_act,
            layer_norm_epsilon=config.layer_norm_epsilon,
            initializer_range=config.initializer_range,
            execution=execution,
            embeddings=embeddings,
            dtype=dtype,
            name=name or role,
            **dataclasses.asdict(config.encoder(role)),
        )

    @property
    def hidden_size(self) -> int:
        return self._config["hidden_size"]

    @property
    def num_layers(self) -> int:
        return self._config["num_layers"]

    @property
    def transformer_layers(self) -> list:
        return [getattr(self, f"transformer_layer_{i}") for i in range(self.num_layers)]

    def build(self, input_shape=None):
        shape = (None, None)
        if not self.embeddings.built:
            self.embeddings.build(shape)
        width = self._config["embedding_size"]
        if self.embeddings_projection is not None:
            self.embeddings_projection.build(shape + (width,))
            width = self.hidden_size
        for layer in self.transformer_layers:
            layer.build(shape + (width,))
        self.built = True

    def call(self, inputs, training=None, output_length=None, attention_mask=None):
        """`output_length=n`: the last layer runs its queries, residuals and feed-forward only at
        the first n positions (keys and values still span the sequence) and the output is
        `[batch, n, hidden]`. Those n positions equal the full output's; a [CLS] head passes 1
        and skips (L − 1)/L of the last layer's work, forward and backward.

        `attention_mask` (`[batch or 1, seq, seq]`, 1 = query may attend to key) restricts every
        layer's attention beyond the padding mask (Electric's one-directional towers); it needs
        `kernels="reference"`."""
        x = self.embeddings(inputs["token_ids"], inputs["segment_ids"], training=training)
        if self.embeddings_projection is not None:
            x = self.embeddings_projection(x)
        padding_mask = ops.cast(inputs["padding_mask"], "bool")
        transformer_layers = self.transformer_layers
        if output_length is not None:
            *transformer_layers, last = transformer_layers
        masks = {} if attention_mask is None else {"attention_mask": attention_mask}
        if layer_loop.applies(transformer_layers, training, attention_mask):
            x = layer_loop.run(transformer_layers, x, padding_mask, training)
        else:
            for layer in transformer_layers:
                x = layer(x, padding_mask=padding_mask, training=training, **masks)
        if output_length is None:
            return x
        return last(x, padding_mask=padding_mask, training=training, query_length=output_length, **masks)

    def get_config(self):
        # A shared embeddings block is re-created (not shared) on deserialisation.
        return {"name": self.name, "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
                **self._config}

    @classmethod
    def from_config(cls, config):
        return cls(**without_legacy_fields(config))
