"""`SelfAttention`: BERT's multi-head attention, with `keras.layers.MultiHeadAttention`'s weights.

The same sub-layers, names, shapes and creation order as Keras' layer with a query and a value of
rank 3 (query/key/value `EinsumDense` `[H, heads, head_size]`, output `[heads, head_size, H]`), and
the same computation, op for op: a scaled dot product, a masked softmax, dropout on the
probabilities. Its projections are `ElectraEinsumDense` (bias gradients summed in float32) and its
dropout draws 16-bit masks under `dropout_masks="16bit"`; the transformer layer's XLA:CPU call reads
its weights and dropout layer.

Example:

>>> import numpy as np
>>> layer = SelfAttention(num_heads=2, key_dim=4)
>>> x = np.ones((1, 3, 8), "float32")
>>> tuple(layer(x, x, attention_mask=np.array([[[1, 1, 0]]])).shape)
(1, 3, 8)
"""

import math

import keras
from keras import layers, ops

from electra_tf.model.layers import ElectraEinsumDense, dropout_layer
from electra_tf.ops.reference import PACKAGE


def clone_initializer(initializer):
    """A fresh copy of `initializer`: a seeded initializer shared by two weights would give both the
    same values. A random one with no seed draws its own from Python's `random` (as Keras does)."""
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    return initializer.__class__.from_config(initializer.get_config())


@keras.saving.register_keras_serializable(package=PACKAGE)
class SelfAttention(layers.Layer):
    """Multi-head scaled dot-product attention from `query` `[B, T, H]` to `value` `[B, S, H]`.

    `attention_mask`: `[B, 1, S]` or `[B, T, S]`, 1 (True) = attend. Sub-layers are created in
    `build`, in `keras.layers.MultiHeadAttention`'s order: each draws its initializer's (and the
    dropout its seed generator's) seed from Python's `random` at creation, so a seeded model gets
    the same initial weights and dropout streams as one built from Keras' layer.
    """

    def __init__(self, num_heads, key_dim, dropout=0.0, dropout_masks="keras",
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.dropout_masks = dropout_masks
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self._inverse_sqrt_key_dim = 1.0 / math.sqrt(float(key_dim))
        self._flash_attention = keras.config.is_flash_attention_enabled()

    def _projection(self, equation, output_shape, bias_axes, name):
        return ElectraEinsumDense(
            equation, output_shape=output_shape, bias_axes=bias_axes, name=name,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer), dtype=self.dtype_policy)

    def build(self, query_shape, value_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        heads = (None, self.num_heads, self.key_dim)
        self._query_dense = self._projection("abc,cde->abde", heads, "de", "query")
        self._query_dense.build(query_shape)
        self._key_dense = self._projection("abc,cde->abde", heads, "de", "key")
        self._key_dense.build(value_shape)
        self._value_dense = self._projection("abc,cde->abde", heads, "de", "value")
        self._value_dense.build(value_shape)
        self._softmax = layers.Softmax(axis=(3,), dtype=self.dtype_policy)
        self._dropout_layer = dropout_layer(self.dropout, self.dropout_masks, dtype=self.dtype_policy)
        self._output_dense = self._projection("abcd,cde->abe", (None, query_shape[-1]), "e", "attention_output")
        self._output_dense.build(tuple(query_shape[:-1]) + (self.num_heads, self.key_dim))
        self.built = True

    @property
    def query_dense(self):
        return self._query_dense

    @property
    def key_dense(self):
        return self._key_dense

    @property
    def value_dense(self):
        return self._value_dense

    @property
    def output_dense(self):
        return self._output_dense

    @property
    def dropout_layer(self):
        """The dropout on the attention probabilities."""
        return self._dropout_layer

    def call(self, query, value, attention_mask=None, training=None, return_attention_scores=False):
        query = self._query_dense(query)  # [B, T, heads, head_size]
        key = self._key_dense(value)  # [B, S, heads, head_size]
        value = self._value_dense(value)
        if attention_mask is not None:
            # [B, 1 or T, S] → [B, 1, 1 or T, S]: broadcast over the heads.
            attention_mask = ops.expand_dims(attention_mask, axis=-3)
        if not (self.dropout > 0.0 or return_attention_scores):
            mask = None if attention_mask is None else ops.cast(attention_mask, "bool")
            context = ops.dot_product_attention(query=query, key=key, value=value, bias=None, mask=mask,
                                                scale=self._inverse_sqrt_key_dim, is_causal=False,
                                                flash_attention=self._flash_attention)
            return self._output_dense(context)
        query = ops.multiply(query, ops.cast(self._inverse_sqrt_key_dim, query.dtype))
        scores = ops.einsum("aecd,abcd->acbe", key, query)  # [B, heads, T, S]
        scores = self._softmax(scores, mask=attention_mask)
        probs = self._dropout_layer(scores, training=training) if self.dropout > 0.0 else scores
        output = self._output_dense(ops.einsum("acbe,aecd->abcd", probs, value))
        return (output, scores) if return_attention_scores else output

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, key_dim=self.key_dim, dropout=self.dropout,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                      bias_initializer=keras.initializers.serialize(self.bias_initializer))
        return config
