# Over 450 lines because every kernel follows one dtype rule and one custom-gradient pattern, and `ops.reference`
# holds the same ops one-to-one: split by op, the modules would repeat both.
"""The XLA:CPU implementation of the encoder layers' element-wise ops and the generator's output
(`ExecutionOptions.kernels="xla_cpu"`, the default where every device is a CPU): XLA-compiled kernels
inside the TensorFlow graph.

TensorFlow's CPU kernels run each element-wise op as its own pass over memory:
a transformer layer's GELU, bias adds, dropouts, masked softmax and LayerNorms
are some forty separate ops forward and backward, which on CPU cost more than
the layer's matmuls in bfloat16 (`bench/step_bench`, ablation `reference_kernels`). Each
function here is one such chain as a `tf.function(jit_compile=True)`, which XLA
fuses into one or two loops, with a hand-written backward pass that is fused the
same way: bias + GELU, masked softmax + dropout, bias + dropout + residual +
LayerNorm, bias + split into attention heads, and over the generator's
vocabulary the cross-entropy and the block masses of a two-level inverse-CDF
sampler (`sample_from_logits`). The matmuls stay outside, on TensorFlow's
oneDNN kernels (XLA's own CPU matmuls are slower). The dropout keep decisions
come in as 16-bit random integers from `ops.random_bits` (the ones `ops.reference.dropout16`
draws from the same seeds), so both implementations drop out the same elements.

Element-wise arithmetic runs in float32 whatever the input dtype (bfloat16 in
and out under mixed precision); biases, LayerNorm scales and offsets are taken
in their variable dtype (float32) and their gradients come back in it, summed in
float32.

Example:

>>> import numpy as np, tensorflow as tf
>>> from electra_tf.ops.xla_cpu import bias_gelu
>>> y = bias_gelu(tf.constant([[-1.0, 0.0, 2.0]]), tf.constant([0.0, 0.5, 0.0]))
>>> [round(float(v), 4) for v in y.numpy()[0]]
[-0.1587, 0.3457, 1.9545]
"""

from typing import Callable, NamedTuple

import tensorflow as tf

from electra_tf.ops import precompile
from electra_tf.ops.numerics import DROPOUT_LEVELS, INV_SQRT_2PI, SQRT_HALF, dropout_scale, dropout_threshold
from electra_tf.ops.random_bits import bits_like

# What a masked attention score becomes before the softmax (Keras' masked softmax uses the same).
_MASKED_SCORE = -1e9


def _f32(t):
    return tf.cast(t, tf.float32)


def _column_sum(t):
    """float32 `[..., N]` summed over all axes but the last (a bias's or LayerNorm parameter's
    gradient). A reduce, not a matmul with ones: XLA's CPU matmul of a ones vector with bf16-derived
    rows is an order of magnitude slower than the column reduce."""
    width = t.shape[-1] if t.shape[-1] is not None else tf.shape(t)[-1]
    return tf.reduce_sum(tf.reshape(t, [-1, width]), axis=0)


def _row_sum(t, mean=False):
    """float32 `[..., N]` summed (or averaged) over the last axis, keeping it, as a matmul with
    ones: XLA's CPU compiler rewrites such reductions into `reduce-window` passes it does not fuse."""
    size = tf.shape(t)[-1]
    weight = 1.0 / tf.cast(size, tf.float32) if mean else tf.constant(1.0)
    total = tf.matmul(tf.reshape(t, [-1, size]), tf.fill(tf.stack([size, 1]), weight))
    return tf.reshape(total, tf.concat([tf.shape(t)[:-1], [1]], 0))


def _row_mean(t):
    return _row_sum(t, mean=True)


def _keep_scale(bits, threshold: int, like):
    """float32 multiplier for `like`: 0 where dropped, `dropout_scale` where kept (1 without dropout).
    `bits`: uint16 shaped like `like`, or `random_bits.KeyedWords` (interleaved here, inside the fusion)."""
    if bits is None or threshold <= 0:
        return tf.constant(1.0)
    if threshold >= DROPOUT_LEVELS:  # everything dropped (the threshold does not fit in uint16)
        return tf.constant(0.0)
    bits = bits_like(bits, like)
    return tf.where(bits >= tf.cast(threshold, bits.dtype), tf.constant(dropout_scale(threshold), tf.float32), 0.0)


def _jit(fn):
    # Compiled on a second thread from the moment the step's trace first calls it (ops.precompile).
    return precompile.jit(fn, autograph=False, reduce_retracing=False)


# --------------------------------------------------------------------------
# bias + GELU (the feed-forward intermediate layer, the heads' dense layers)
# --------------------------------------------------------------------------


def _gelu_parts(x, bias):
    z = _f32(x) + _f32(bias)
    return z, 0.5 + 0.5 * tf.math.erf(z * SQRT_HALF)


@_jit
def _bias_gelu_forward(x, bias):
    z, cdf = _gelu_parts(x, bias)
    return tf.cast(z * cdf, x.dtype)


@_jit
def _bias_gelu_backward(x, bias, dy):
    z, cdf = _gelu_parts(x, bias)
    pdf = tf.exp(-0.5 * z * z) * INV_SQRT_2PI
    dz = _f32(dy) * (cdf + z * pdf)
    return tf.cast(dz, x.dtype), _column_sum(dz)


def bias_gelu(x, bias):
    """`gelu(x + bias)` with the exact (erf) GELU; `x` `[..., N]`, `bias` `[N]`."""

    @tf.custom_gradient
    def fused(x, bias):
        def grad(dy):
            dx, dbias = _bias_gelu_backward(x, bias, dy)
            return dx, tf.cast(dbias, bias.dtype)

        return _bias_gelu_forward(x, bias), grad

    return fused(x, bias)


# --------------------------------------------------------------------------
# masked softmax + dropout (attention probabilities)
# --------------------------------------------------------------------------


def _masked_probs(scores, key_mask):
    s = _f32(scores)
    if key_mask is not None:
        s = tf.where(key_mask, s, _MASKED_SCORE)
    e = tf.exp(s - tf.reduce_max(s, axis=-1, keepdims=True))
    p = e / _row_sum(e)
    if key_mask is not None:
        p = tf.where(key_mask, p, 0.0)  # a row with every key masked gives zeros, as Keras' softmax
    return p


def _softmax_dropout_forward(scores, key_mask, bits, threshold):
    p = _masked_probs(scores, key_mask)
    return tf.cast(p * _keep_scale(bits, threshold, scores), scores.dtype)


def _softmax_dropout_backward(scores, key_mask, bits, dy, threshold):
    p = _masked_probs(scores, key_mask)
    dp = _f32(dy) * _keep_scale(bits, threshold, scores)
    ds = p * (dp - _row_sum(dp * p))
    return tf.cast(ds, scores.dtype)


_softmax_dropout_forward_jit = _jit(_softmax_dropout_forward)
_softmax_dropout_backward_jit = _jit(_softmax_dropout_backward)


def softmax_dropout(scores, key_mask=None, bits=None, rate=0.0):
    """`dropout(masked_softmax(scores))` over the last axis.

    `key_mask`: bool, broadcastable to `scores` (False = masked key); `bits`: uint16 random
    integers shaped like `scores` or `random_bits.KeyedWords` for them (dropout on), or None (off);
    `rate`: the dropout rate.
    """
    threshold = dropout_threshold(rate) if bits is not None else 0

    @tf.custom_gradient
    def fused(scores):
        def grad(dy):
            return _softmax_dropout_backward_jit(scores, key_mask, bits, dy, threshold)

        return _softmax_dropout_forward_jit(scores, key_mask, bits, threshold), grad

    return fused(scores)


# --------------------------------------------------------------------------
# bias + dropout + residual + LayerNorm (end of the attention and feed-forward blocks)
# --------------------------------------------------------------------------


def _pre_norm(x, bias, residual, bits, threshold):
    return _f32(residual) + (_f32(x) + _f32(bias)) * _keep_scale(bits, threshold, x)


def _normalize(h, epsilon):
    mean = _row_mean(h)
    centred = h - mean
    inv = tf.math.rsqrt(_row_mean(centred * centred) + epsilon)
    return centred * inv, inv


def _add_norm_forward(x, bias, residual, gamma, beta, bits, threshold, epsilon):
    xhat, _ = _normalize(_pre_norm(x, bias, residual, bits, threshold), epsilon)
    return tf.cast(xhat * _f32(gamma) + _f32(beta), residual.dtype)


def _add_norm_backward(x, bias, residual, gamma, beta, bits, dy, threshold, epsilon):
    xhat, inv = _normalize(_pre_norm(x, bias, residual, bits, threshold), epsilon)
    dy = _f32(dy)
    g = dy * _f32(gamma)
    dh = inv * (g - _row_mean(g) - xhat * _row_mean(g * xhat))
    dx = dh * _keep_scale(bits, threshold, x)
    return (tf.cast(dx, x.dtype), _column_sum(dx), tf.cast(dh, residual.dtype), _column_sum(dy * xhat),
            _column_sum(dy))


_add_norm_forward_jit = _jit(_add_norm_forward)
_add_norm_backward_jit = _jit(_add_norm_backward)


def bias_dropout_add_norm(x, bias, residual, gamma, beta, bits=None, rate=0.0, epsilon=1e-12):
    """`LayerNorm(residual + dropout(x + bias))` over the last axis (a post-LN block's end).

    `bits`: uint16 random integers shaped like `x` or `random_bits.KeyedWords` for them (dropout on),
    or None (off). The output has
    `residual`'s dtype.
    """
    threshold = dropout_threshold(rate) if bits is not None else 0
    epsilon = float(epsilon)

    @tf.custom_gradient
    def fused(x, bias, residual, gamma, beta):
        def grad(dy):
            dx, dbias, dresidual, dgamma, dbeta = _add_norm_backward_jit(
                x, bias, residual, gamma, beta, bits, dy, threshold, epsilon)
            return (dx, tf.cast(dbias, bias.dtype), dresidual, tf.cast(dgamma, gamma.dtype),
                    tf.cast(dbeta, beta.dtype))

        return _add_norm_forward_jit(x, bias, residual, gamma, beta, bits, threshold, epsilon), grad

    return fused(x, bias, residual, gamma, beta)


# --------------------------------------------------------------------------
# The generator's output: softmax cross-entropy over the vocabulary, and sampling from it
# --------------------------------------------------------------------------

SAMPLING_BLOCK = 256  # vocabulary entries per block of the two-level inverse CDF


def _dim(t, axis: int):
    """`t`'s size along `axis`: static where known, else dynamic."""
    return t.shape[axis] if t.shape[axis] is not None else tf.shape(t)[axis]


def _block_masses(logits):
    """Row max `[R, 1]` and `Σ exp(logit − max)` over each `SAMPLING_BLOCK` entries `[R, blocks]`.

    With a static vocabulary the last block may be shorter (padding would cost a copy of the
    logits); a dynamic one is padded with zero weights to whole blocks."""
    rows, vocab = tf.shape(logits)[0], logits.shape[-1]
    top = tf.reduce_max(logits, axis=-1, keepdims=True)
    weights = tf.exp(logits - top)
    if vocab is None:
        padded = tf.pad(weights, [[0, 0], [0, tf.math.floormod(-tf.shape(logits)[-1], SAMPLING_BLOCK)]])
        return top, _row_sum(tf.reshape(padded, [rows, -1, SAMPLING_BLOCK]))[..., 0]
    full = vocab // SAMPLING_BLOCK
    parts = []
    if full:
        blocks = tf.reshape(weights[:, :full * SAMPLING_BLOCK], [rows, full, SAMPLING_BLOCK])
        parts.append(_row_sum(blocks)[..., 0])
    if vocab % SAMPLING_BLOCK:
        parts.append(_row_sum(weights[:, full * SAMPLING_BLOCK:]))
    return top, tf.concat(parts, axis=1)


@_jit
def _cross_entropy_forward(logits, labels):
    top, masses = _block_masses(logits)
    log_norm = top[:, 0] + tf.math.log(_row_sum(masses)[:, 0])
    return log_norm - tf.gather(logits, labels, batch_dims=1), log_norm, top, masses


@_jit
def _cross_entropy_backward(logits, labels, log_norm, dloss):
    vocab = tf.range(tf.shape(logits)[-1], dtype=labels.dtype)
    target = tf.cast(tf.equal(vocab, labels[:, None]), tf.float32)
    return (tf.exp(logits - log_norm[:, None]) - target) * dloss[:, None]


class VocabularySoftmax(NamedTuple):
    """What one pass over `[..., V]` logits gives: the cross-entropy at the labels (differentiable),
    the argmax, and the row max and block masses `sample_from_logits` draws from."""

    losses: tf.Tensor  # [...]
    predictions: tf.Tensor  # [...] int32
    top: tf.Tensor  # [R, 1], R = the product of the leading dims
    block_masses: tf.Tensor  # [R, ceil(V / SAMPLING_BLOCK)]


def vocabulary_softmax(logits, labels) -> VocabularySoftmax:
    """`tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)` for float32 `[..., V]`
    logits, with the argmax and the sampling masses of softmax(logits).

    TensorFlow's op writes the `[..., V]` gradient in the forward pass; here the backward
    pass recomputes it from the logits and the saved log-normaliser.
    """
    vocab = _dim(logits, -1)
    leading = tf.shape(logits)[:-1]
    flat_logits, flat_labels = tf.reshape(logits, [-1, vocab]), tf.reshape(labels, [-1])

    @tf.custom_gradient
    def fused(flat_logits):
        loss, log_norm, top, masses = _cross_entropy_forward(flat_logits, flat_labels)

        def grad(dloss, dtop=None, dmasses=None):
            return _cross_entropy_backward(flat_logits, flat_labels, log_norm, dloss)

        return (loss, top, masses), grad

    loss, top, masses = fused(flat_logits)
    # TensorFlow's argmax: XLA's CPU argmax over 30 522 entries is five times slower.
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return VocabularySoftmax(tf.reshape(loss, leading), predictions, tf.stop_gradient(top), tf.stop_gradient(masses))


def _pick(masses, uniform):
    """Per row, the index i with cumsum[i − 1] ≤ u · total < cumsum[i]: entries without mass are
    never picked (u · total can round up to the total: then the last entry with mass)."""
    cumulative = tf.cumsum(masses, axis=-1)
    index = tf.reduce_sum(tf.cast(cumulative <= uniform[:, None] * cumulative[:, -1:], tf.int32), axis=-1)
    last = tf.shape(masses)[-1] - 1 - tf.argmax(tf.reverse(masses, [-1]) > 0, axis=-1, output_type=tf.int32)
    return tf.minimum(index, last)


@_jit
def _sample_with_masses(scaled, top, masses, uniforms):
    """[R] indices from softmax(scaled): a block by its mass, then an entry by its weight in it."""
    vocab = tf.shape(scaled)[-1]
    start = _pick(masses, uniforms[:, 0]) * SAMPLING_BLOCK
    indices = start[:, None] + tf.range(SAMPLING_BLOCK)
    weights = tf.exp(tf.gather(scaled, tf.minimum(indices, vocab - 1), batch_dims=1) - top)
    weights = tf.where(indices < vocab, weights, 0.0)
    return start + _pick(weights, uniforms[:, 1])


_block_masses_jit = _jit(_block_masses)


def sample_from_logits(logits, uniforms, temperature=1.0, softmax: VocabularySoftmax | None = None):
    """Draws from softmax(logits / temperature) over the last axis by a two-level inverse CDF.

    `logits` float32 `[..., V]`; `uniforms` `[..., 2]` in [0, 1). The first uniform picks a block of
    `SAMPLING_BLOCK` vocabulary entries with probability its mass, the second an entry within it
    with probability its share of the block: exactly the softmax distribution, up to float32
    rounding of the sums. Two uniforms per draw instead of Gumbel-max's one per vocabulary
    entry. `softmax` (`vocabulary_softmax` of the same logits) saves the pass over the logits
    when `temperature` is 1. Returns int32 `[...]`.
    """
    vocab = _dim(logits, -1)
    scaled = tf.reshape(tf.stop_gradient(logits), [-1, vocab])
    if softmax is None or temperature != 1.0:
        scaled = scaled / temperature
        top, masses = _block_masses_jit(scaled)
    else:
        top, masses = softmax.top, softmax.block_masses
    flat = _sample_with_masses(scaled, top, masses, tf.reshape(uniforms, [-1, 2]))
    return tf.reshape(flat, tf.shape(logits)[:-1])


# --------------------------------------------------------------------------
# bias + split into heads (the attention's query, key and value projections)
# --------------------------------------------------------------------------


def _split_heads_forward(qkv, bias, heads, scale):
    """`[B, S, 3·heads·size]` + bias → query (× scale), key, value, each `[B, heads, S, size]`."""
    batch, seq = tf.shape(qkv)[0], tf.shape(qkv)[1]
    t = tf.reshape(_f32(qkv) + _f32(bias), [batch, seq, 3, heads, qkv.shape[-1] // (3 * heads)])
    t = tf.transpose(t, [2, 0, 3, 1, 4])
    return tf.cast(t[0] * scale, qkv.dtype), tf.cast(t[1], qkv.dtype), tf.cast(t[2], qkv.dtype)


def _split_heads_backward(dquery, dkey, dvalue, scale):
    t = tf.transpose(tf.stack([_f32(dquery) * scale, _f32(dkey), _f32(dvalue)]), [1, 3, 0, 2, 4])
    t = tf.reshape(t, [tf.shape(t)[0], tf.shape(t)[1], 3 * t.shape[3] * t.shape[4]])  # [B, S, 3·heads·size]
    return tf.cast(t, dquery.dtype), _column_sum(t)


_split_heads_forward_jit = _jit(_split_heads_forward)
_split_heads_backward_jit = _jit(_split_heads_backward)


def split_heads(qkv, bias, heads: int, scale: float):
    """Query (times `scale`), key and value `[B, heads, S, size]` from one matmul's `[B, S, 3·heads·size]`
    plus `bias`: one pass, with the bias gradient summed in float32 (TensorFlow's CPU
    `BiasAddGrad`, which Keras' bias add becomes, sums bfloat16 in bfloat16: 4096 ones give 256)."""
    scale = float(scale)

    @tf.custom_gradient
    def fused(qkv, bias):
        def grad(dquery, dkey, dvalue):
            dqkv, dbias = _split_heads_backward_jit(dquery, dkey, dvalue, scale)
            return dqkv, tf.cast(dbias, bias.dtype)

        return _split_heads_forward_jit(qkv, bias, heads, scale), grad

    return fused(qkv, bias)


# --------------------------------------------------------------------------
# A whole post-LN transformer layer around the kernels above
# --------------------------------------------------------------------------


class LayerWeights(NamedTuple):
    """One post-LN transformer layer's weights as tensors: kernels in the compute dtype, 2-D;
    biases and LayerNorm parameters in their variable dtype."""

    num_heads: int
    qkv_kernel: tf.Tensor  # [H, 3 · heads · head_size]: query, key, value side by side
    qkv_bias: tf.Tensor  # [3 · heads · head_size]
    output_kernel: tf.Tensor  # [heads · head_size, H]
    output_bias: tf.Tensor
    attention_gamma: tf.Tensor
    attention_beta: tf.Tensor
    intermediate_kernel: tf.Tensor  # [H, I]
    intermediate_bias: tf.Tensor
    ffn_output_kernel: tf.Tensor  # [I, H]
    ffn_output_bias: tf.Tensor
    ffn_gamma: tf.Tensor
    ffn_beta: tf.Tensor
    epsilon: float


class LayerDropout(NamedTuple):
    """`bits(x)` callables (uint16 random integers shaped like `x` or their `random_bits.KeyedWords`,
    or None without dropout) for
    the attention probabilities, the attention block's output and the feed-forward output, and
    the dropout rate."""

    attention_bits: Callable
    attention_output_bits: Callable
    ffn_bits: Callable
    rate: float


def transformer_layer(x, key_mask, weights: LayerWeights, dropout: LayerDropout, query_length=None):
    """A post-LN BERT transformer layer (`model.transformer_layer`, exact GELU) on `x` `[B, S, H]`.

    `key_mask`: bool `[B, 1, 1, S]` (False = padding key). With `query_length=n` only the first n
    positions are computed after the attention's keys and values (output `[B, n, H]`).
    Matmuls run on TensorFlow's kernels; the element-wise chains between them are the fused
    kernels above.
    """
    batch, seq, hidden = tf.shape(x)[0], tf.shape(x)[1], x.shape[-1]
    heads = weights.num_heads
    width = weights.output_kernel.shape[0]
    head_size = width // heads
    rows = tf.reshape(x, [-1, hidden])
    qkv = tf.reshape(tf.matmul(rows, weights.qkv_kernel), [batch, seq, 3 * width])
    query, key, value = split_heads(qkv, weights.qkv_bias, heads, head_size ** -0.5)
    length = seq
    if query_length is not None:
        query, length = query[:, :, :query_length], query_length
        rows = tf.reshape(x[:, :query_length], [-1, hidden])
    scores = tf.matmul(query, key, transpose_b=True)  # [B, heads, length, S]
    probs = softmax_dropout(scores, key_mask, dropout.attention_bits(scores), dropout.rate)
    context = tf.transpose(tf.matmul(probs, value), [0, 2, 1, 3])  # [B, length, heads, head_size]
    attended = tf.matmul(tf.reshape(context, [-1, width]), weights.output_kernel)
    hidden_rows = bias_dropout_add_norm(
        attended, weights.output_bias, rows, weights.attention_gamma, weights.attention_beta,
        dropout.attention_output_bits(attended), dropout.rate, weights.epsilon)
    intermediate = bias_gelu(tf.matmul(hidden_rows, weights.intermediate_kernel), weights.intermediate_bias)
    ffn = tf.matmul(intermediate, weights.ffn_output_kernel)
    out = bias_dropout_add_norm(ffn, weights.ffn_output_bias, hidden_rows, weights.ffn_gamma, weights.ffn_beta,
                                dropout.ffn_bits(ffn), dropout.rate, weights.epsilon)
    return tf.reshape(out, [batch, length, hidden])
