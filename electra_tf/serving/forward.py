"""The encoder a serving export computes with: `ElectraEncoder`'s inference forward in few standard TensorFlow ops.

A served request is short (SST-2: ~25 tokens at batch 1), so each of the encoder's matmuls is a few microseconds of
work, about what TensorFlow's executor spends dispatching one op. The reference kernels' forward, traced, runs
Keras' ops one by one: `EinsumDense` projections whose bias adds sit under custom gradients (`IdentityN`),
attention through `einsum` and a masked softmax built of `where`, casts and shape arithmetic around each: several
times the ops this forward runs for the same function. The per-request effect is in
`bench/results/inference-batch1-breakdown.json`.

`ServingEncoder` is an `ElectraEncoder` (the same layers, weights and order: `serving.portable.copy_weights` fills
it) whose call computes, per transformer layer, on `[batch · tokens, hidden]` rows:

* query, key and value as `MatMul` + `BiasAdd` (the projection kernels `[hidden, heads, size]` read as
  `[hidden, heads · size]`), split into heads by one reshape and transpose each;
* scores as one `BatchMatMulV2`, scaled by 1/√size, plus the padding mask as an additive bias of
  −0.7 · float32's max on padded keys (what Keras' masked softmax puts there), softmax, one `BatchMatMulV2`;
* the output projection, the residual and LayerNorm (Keras' formula: `x · inv + (β − mean · inv)`,
  `inv = rsqrt(var + ε) · γ`), the feed-forward with the dense layer's own activation, residual, LayerNorm.

Inference only: no dropout, and no `attention_mask` (Electric's one-directional towers are a pre-training model);
`training=True` or an attention mask raise. `output_length=n` computes the last layer's queries at the first n
positions only, as `ElectraEncoder.call` does (a [CLS] head). The outputs equal the reference kernels' to float
rounding (`tests/test_serving_portable.py` and `tests/test_serving_speed.py` hold the served outputs to the trained
model's within 1e-5).
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from electra_tf.model.encoder import ElectraEncoder

# What Keras' masked softmax (`_apply_masks`) puts at a masked score: −0.7 × float32's largest value.
MASKED_SCORE = -0.7 * float(tf.float32.max)


def transpose_bits(x, perm):
    """`tf.transpose(x, perm)` of a float32 `x`, moving its bits as int32 (`Bitcast` copies nothing).

    Where oneDNN is on (TensorFlow's x86 default), TensorFlow runs a float32 `Transpose` as oneDNN's, which cost
    about 66 µs a call on these [batch, tokens, heads, size] tensors at batch 1 against 4 µs for TensorFlow's own
    (`bench/results/inference-batch1-breakdown.json`, step stats); oneDNN takes int32 only on the CPUs where it
    says so (else it logs "oneDNN supports DT_INT32 only on platforms with AVX-512" and TensorFlow's kernel runs).
    Same bits out, either way."""
    return tf.bitcast(tf.transpose(tf.bitcast(x, tf.int32), perm), tf.float32)


class ServingEncoder(ElectraEncoder):
    """`ElectraEncoder` with the inference forward of this module (see the module docstring)."""

    def call(self, inputs, training=None, output_length=None, attention_mask=None):
        if training or attention_mask is not None:
            raise ValueError("ServingEncoder computes inference only (training=False) with a padding mask only")
        ids, segments = inputs["token_ids"], inputs["segment_ids"]
        batch, length = tf.shape(ids)[0], tf.shape(ids)[1]
        rows = embedded_rows(self.embeddings, ids, segments, length)
        if self.embeddings_projection is not None:
            rows = dense(rows, self.embeddings_projection)
        mask_bias = (1.0 - tf.cast(inputs["padding_mask"], tf.float32))[:, None, None, :] * MASKED_SCORE
        layers = self.transformer_layers
        shapes = LayerShapes(batch, length, layers[0].sublayers()["attention"])  # every layer's the same
        for i, layer in enumerate(layers):
            query_length = output_length if i == len(layers) - 1 else None
            rows = transformer_layer(layer, rows, shapes, mask_bias, query_length)
        return tf.reshape(rows, [batch, -1, self.hidden_size])


def embedded_rows(embeddings, ids, segments, length):
    """`ElectraEmbeddings`' output at inference (no dropout) as `[batch · tokens, embedding]` rows."""
    x = (tf.gather(embeddings.token_embedding.embeddings, ids)
         + embeddings.position_embedding.position_embeddings[:length]
         + tf.gather(embeddings.segment_embedding.embeddings, segments))
    return tf.reshape(layer_norm(x, embeddings.embeddings_layer_norm), [-1, embeddings.embedding_size])


def layer_norm(x, norm: keras.layers.LayerNormalization):
    """`norm(x)` over the last axis, Keras' formula (`keras.ops.layer_normalization`)."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    inv = tf.math.rsqrt(variance + norm.epsilon) * norm.gamma
    return x * inv + (norm.beta - mean * inv)


def dense(rows, layer, kernel=None, bias=None):
    """`rows @ kernel + bias`, then the layer's activation (if any); kernel and bias default to the layer's."""
    kernel = layer.kernel if kernel is None else kernel
    out = tf.nn.bias_add(tf.matmul(rows, kernel), layer.bias if bias is None else bias)
    activation = getattr(layer, "activation", None)
    return out if activation is None or activation is keras.activations.linear else activation(out)


class LayerShapes:
    """The shape and permutation tensors every layer reuses, made once per trace: a traced graph holds one node
    for each instead of one per use (fewer nodes to load and for grappler to optimise on the first request)."""

    def __init__(self, batch, length, attention):
        heads, size = attention.num_heads, attention.key_dim
        self.heads, self.size, self.width = heads, size, heads * size
        self.hidden = attention.output_dense.kernel.shape[-1]
        self.by_heads = tf.stack([batch, length, heads, size])  # [batch · length, width] → these, then transposed
        self.sequences = tf.stack([batch, length, self.hidden])
        self.kernel = tf.constant([-1, self.width])  # EinsumDense [hidden, heads, size] → [hidden, width]
        self.output_kernel = tf.constant([self.width, -1])  # the output projection's [heads, size, hidden]
        self.bias = tf.constant([self.width])
        self.rows = tf.constant([-1, self.width])
        self.swap = tf.constant([0, 2, 1, 3])  # [batch, tokens, heads, size] ↔ [batch, heads, tokens, size]
        self.scale = tf.constant(1.0 / math.sqrt(size))
        self.batch = batch


def transformer_layer(layer, rows, shapes: LayerShapes, mask_bias, query_length=None):
    """One post-LN `ElectraTransformerEncoder` at inference on `[batch · length, hidden]` rows; with
    `query_length=n`, only each sequence's first n positions are computed (keys and values span all)."""
    parts = layer.sublayers()
    attention = parts["attention"]

    def projection(x, einsum_dense):  # EinsumDense "abc,cde->abde" as a 2-D matmul
        return tf.nn.bias_add(tf.matmul(x, tf.reshape(einsum_dense.kernel, shapes.kernel)),
                              tf.reshape(einsum_dense.bias, shapes.bias))

    def by_heads(x, shape):  # [batch · tokens, width] → [batch, heads, tokens, size]
        return transpose_bits(tf.reshape(x, shape), shapes.swap)

    queries, query_shape = rows, shapes.by_heads
    if query_length is not None:
        queries = tf.reshape(tf.reshape(rows, shapes.sequences)[:, :query_length], [-1, shapes.hidden])
        query_shape = tf.stack([shapes.batch, query_length, shapes.heads, shapes.size])
    q = by_heads(projection(queries, attention.query_dense), query_shape)
    k = by_heads(projection(rows, attention.key_dense), shapes.by_heads)
    v = by_heads(projection(rows, attention.value_dense), shapes.by_heads)
    scores = tf.matmul(q, k, transpose_b=True) * shapes.scale + mask_bias
    context = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
    context = tf.reshape(transpose_bits(context, shapes.swap), shapes.rows)
    output_kernel = tf.reshape(attention.output_dense.kernel, shapes.output_kernel)
    attended = dense(context, attention.output_dense, output_kernel)
    hidden_rows = layer_norm(attended + queries, parts["attention_norm"])
    feedforward = dense(dense(hidden_rows, parts["intermediate"]), parts["output"])
    return layer_norm(feedforward + hidden_rows, parts["feedforward_norm"])
