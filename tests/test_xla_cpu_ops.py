"""The XLA:CPU kernels (`electra_tf.ops.xla_cpu`) against float64 references and the reference kernels."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from electra_tf.ops import xla_cpu
from electra_tf.model.layers import ElectraDense, ElectraEinsumDense
from electra_tf.ops.reference import add_bias, dropout16, gelu_exact

RNG = np.random.RandomState(0)


def _grads(fn, inputs, upstream):
    """fn(*inputs) and the gradients of sum(fn · upstream) with respect to each input."""
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = fn(*inputs)
        loss = tf.reduce_sum(tf.cast(y, tf.float64 if y.dtype == tf.float64 else tf.float32) * upstream)
    return y, tape.gradient(loss, inputs)


def _f64(t):
    return np.asarray(tf.cast(t, tf.float64))


def _bits(shape, seed=7):
    return tf.constant(np.random.RandomState(seed).randint(0, 1 << 16, size=shape).astype("uint16"))


def _keep_scale(bits, rate):
    threshold = round(rate * 65536)
    return np.where(np.asarray(bits) >= threshold, 65536 / (65536 - threshold), 0.0)


# --------------------------------------------------------------------------
# kernels against NumPy in float64
# --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, tol", [("float32", 2e-6), ("bfloat16", 1e-2)])
def test_bias_gelu_and_its_gradients_match_the_erf_formula(dtype, tol):
    x = RNG.normal(0, 2, size=(6, 5, 32))
    bias, upstream = RNG.normal(size=32), RNG.normal(size=(6, 5, 32))
    inputs = [tf.cast(tf.constant(x), dtype), tf.constant(bias, tf.float32)]
    y, (dx, dbias) = _grads(xla_cpu.bias_gelu, inputs, tf.constant(upstream, tf.float32))
    assert y.dtype == dx.dtype == tf.as_dtype(dtype) and dbias.dtype == tf.float32
    z = _f64(inputs[0]) + _f64(inputs[1])
    cdf = 0.5 * (1 + erf(z / np.sqrt(2)))
    upstream = _f64(tf.cast(upstream, dtype))  # what reaches the kernel: the gradient of y, in y's dtype
    dz = upstream * (cdf + z * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi))
    np.testing.assert_allclose(_f64(y), z * cdf, rtol=tol, atol=tol)
    np.testing.assert_allclose(_f64(dx), dz, rtol=tol, atol=tol * np.abs(dz).max())
    # The bias gradient is summed in float32 from the unrounded dz, in bfloat16 too.
    np.testing.assert_allclose(_f64(dbias), dz.sum(axis=(0, 1)), rtol=1e-5, atol=1e-4)


def _softmax_reference(scores, key_mask, keep_scale):
    s = np.where(key_mask, scores, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    p = np.where(key_mask, e / e.sum(-1, keepdims=True), 0.0)
    return p, p * keep_scale


@pytest.mark.parametrize("with_dropout", [False, True])
def test_softmax_dropout_matches_masked_softmax_and_its_gradient(with_dropout):
    shape = (3, 2, 4, 6)
    scores, upstream = RNG.normal(0, 3, size=shape), RNG.normal(size=shape)
    key_mask = np.ones((3, 1, 1, 6), bool)
    key_mask[1, ..., 4:] = False
    bits = _bits(shape) if with_dropout else None
    scale = _keep_scale(bits, 0.1) if with_dropout else 1.0
    y, (ds,) = _grads(lambda s: xla_cpu.softmax_dropout(s, tf.constant(key_mask), bits, 0.1),
                      [tf.constant(scores, tf.float32)], tf.constant(upstream, tf.float32))
    p, expected = _softmax_reference(scores, key_mask, scale)
    np.testing.assert_allclose(_f64(y), expected, rtol=1e-5, atol=1e-6)
    dp = upstream * scale
    expected_ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    np.testing.assert_allclose(_f64(ds), expected_ds, rtol=1e-5, atol=1e-6)
    if with_dropout:
        dropped = np.asarray(bits) < round(0.1 * 65536)
        assert dropped.any() and np.all(_f64(y)[dropped] == 0)


def test_dropout_rate_one_drops_everything_as_dropout16_does():
    scores, bits = tf.ones((1, 1, 2, 3)), _bits((1, 1, 2, 3))
    assert np.all(xla_cpu.softmax_dropout(scores, None, bits, 1.0).numpy() == 0)
    x, residual = (tf.constant(RNG.normal(size=(2, 3, 4)), tf.float32) for _ in range(2))
    gamma, beta, bias = tf.ones(4), tf.zeros(4), tf.ones(4)
    dropped = xla_cpu.bias_dropout_add_norm(x, bias, residual, gamma, beta, _bits((2, 3, 4)), 1.0)
    residual_only = xla_cpu.bias_dropout_add_norm(tf.zeros_like(x), tf.zeros(4), residual, gamma, beta)
    np.testing.assert_allclose(dropped.numpy(), residual_only.numpy(), rtol=1e-6, atol=1e-6)
    assert np.all(dropout16(x, 1.0, tf.constant([1, 2], tf.int64)).numpy() == 0)


def test_softmax_dropout_gives_zeros_where_every_key_is_masked():
    y = xla_cpu.softmax_dropout(tf.ones((1, 1, 2, 3)), tf.zeros((1, 1, 1, 3), tf.bool))
    assert np.all(y.numpy() == 0)


@pytest.mark.parametrize("dtype, tol", [("float32", 2e-5), ("bfloat16", 4e-2)])
def test_bias_dropout_add_norm_matches_layer_norm_and_its_gradients(dtype, tol):
    shape = (5, 3, 16)
    x, residual, upstream = (RNG.normal(size=shape) for _ in range(3))
    bias, gamma, beta = RNG.normal(size=16), 1 + 0.3 * RNG.normal(size=16), RNG.normal(size=16)
    bits = _bits(shape)
    inputs = [tf.cast(tf.constant(x), dtype), tf.constant(bias, tf.float32), tf.cast(tf.constant(residual), dtype),
              tf.constant(gamma, tf.float32), tf.constant(beta, tf.float32)]

    def fn(x, bias, residual, gamma, beta):
        return xla_cpu.bias_dropout_add_norm(x, bias, residual, gamma, beta, bits, 0.1, 1e-12)

    y, grads = _grads(fn, inputs, tf.constant(upstream, tf.float32))
    assert y.dtype == tf.as_dtype(dtype) and [g.dtype for g in grads] == [t.dtype for t in inputs]

    # float64 reference by autodiff of the unfused formula, on the same (rounded) inputs.
    ref_inputs = [tf.constant(_f64(t)) for t in inputs]
    scale = tf.constant(_keep_scale(bits, 0.1))

    def reference(x, bias, residual, gamma, beta):
        h = residual + (x + bias) * scale
        mean, var = tf.nn.moments(h, axes=[-1], keepdims=True)
        return (h - mean) * tf.math.rsqrt(var + 1e-12) * gamma + beta

    y_ref, grads_ref = _grads(reference, ref_inputs, tf.constant(upstream))
    np.testing.assert_allclose(_f64(y), y_ref.numpy(), rtol=tol, atol=tol)
    for got, want in zip(grads, grads_ref):
        np.testing.assert_allclose(_f64(got), want.numpy(), rtol=tol, atol=tol * np.abs(want.numpy()).max())


# --------------------------------------------------------------------------
# the generator's cross-entropy
# --------------------------------------------------------------------------

@pytest.mark.parametrize("vocab", [300, 512, 40])
def test_vocabulary_softmax_matches_tensorflows_cross_entropy_and_its_gradient(vocab):
    logits = tf.constant(RNG.normal(0, 3, size=(4, 5, vocab)), tf.float32)
    labels = tf.constant(RNG.randint(0, vocab, size=(4, 5)), tf.int32)
    upstream = tf.constant(RNG.normal(size=(4, 5)), tf.float32)
    softmax = xla_cpu.vocabulary_softmax(logits, labels)
    loss, (grad,) = _grads(lambda t: xla_cpu.vocabulary_softmax(t, labels).losses, [logits], upstream)
    reference, (grad_ref,) = _grads(lambda t: tf.nn.sparse_softmax_cross_entropy_with_logits(labels, t),
                                    [logits], upstream)
    np.testing.assert_allclose(loss.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad.numpy(), grad_ref.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(softmax.predictions.numpy(), tf.argmax(logits, -1).numpy())
    # The sampling masses: Σ exp(logit − max) over each 256-entry block (the last one shorter).
    flat = logits.numpy().reshape(20, vocab)
    weights = np.exp(flat - flat.max(-1, keepdims=True))
    blocks = [weights[:, i:i + xla_cpu.SAMPLING_BLOCK].sum(-1) for i in range(0, vocab, xla_cpu.SAMPLING_BLOCK)]
    np.testing.assert_allclose(softmax.block_masses.numpy(), np.stack(blocks, -1), rtol=1e-5)
    np.testing.assert_allclose(softmax.top.numpy()[:, 0], flat.max(-1))


def test_sampling_with_the_cross_entropys_masses_equals_sampling_alone():
    logits = tf.constant(RNG.normal(0, 2, size=(3, 4, 700)), tf.float32)
    uniforms = tf.constant(RNG.uniform(size=(3, 4, 2)), tf.float32)
    softmax = xla_cpu.vocabulary_softmax(logits, tf.zeros((3, 4), tf.int32))
    alone = xla_cpu.sample_from_logits(logits, uniforms)
    np.testing.assert_array_equal(xla_cpu.sample_from_logits(logits, uniforms, softmax=softmax).numpy(), alone.numpy())
    # The draw is the inverse CDF of the softmax at the two uniforms, computed in float64.
    flat, u = logits.numpy().reshape(12, 700).astype("float64"), uniforms.numpy().reshape(12, 2)
    weights = np.exp(flat - flat.max(-1, keepdims=True))
    for row, drawn in enumerate(alone.numpy().ravel()):
        masses = np.add.reduceat(weights[row], np.arange(0, 700, 256))
        block = np.searchsorted(np.cumsum(masses), u[row, 0] * masses.sum(), side="right")
        inner = weights[row, 256 * block:256 * block + 256]
        assert drawn == 256 * block + np.searchsorted(np.cumsum(inner), u[row, 1] * inner.sum(), side="right")


@pytest.mark.parametrize("vocab", [700, 512, 40])
def test_cross_entropy_and_sampling_take_dynamic_batch_and_vocabulary_sizes(vocab):
    """Traced with `[None, None, None]` logits, the fused cross-entropy, its gradient and both
    samplers give what they give on static shapes."""
    from electra_tf.model import masking

    logits = tf.constant(RNG.normal(0, 2, size=(3, 5, vocab)), tf.float32)
    labels = tf.constant(RNG.randint(0, vocab, size=(3, 5)), tf.int32)
    seeds = tf.constant(RNG.randint(0, 1000, size=(3, 2)), tf.int64)

    def outputs(logits, labels, seeds):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            softmax = xla_cpu.vocabulary_softmax(logits, labels)
            loss = tf.reduce_sum(softmax.losses)
        return (softmax.losses, tape.gradient(loss, logits), masking.inverse_cdf_sample(logits, seeds, 1.0, softmax),
                masking.inverse_cdf_sample(logits, seeds, 0.7), masking.gumbel_sample(logits, seeds))

    dynamic = tf.function(outputs, input_signature=[tf.TensorSpec([None, None, None]),
                                                    tf.TensorSpec([None, None], tf.int32),
                                                    tf.TensorSpec([None, 2], tf.int64)])
    for got, want in zip(dynamic(logits, labels, seeds), outputs(logits, labels, seeds)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------
# bias gradients under bfloat16 (TensorFlow's BiasAddGrad sums bfloat16 in bfloat16)
# --------------------------------------------------------------------------

@pytest.mark.parametrize("activation", ["fused_gelu", None])
def test_mixed_bfloat16_dense_bias_gradient_is_the_float32_sum(activation):
    """The bias gradient under mixed_bfloat16 equals a float64 sum of the same bfloat16 upstream
    terms to 1e-5: rounding it to bfloat16 anywhere (a 2**-8 relative step) would fail."""
    rng = np.random.RandomState(7)
    fused_gelu = activation == "fused_gelu"
    layer = ElectraDense(24, activation=gelu_exact if fused_gelu else None, fused=fused_gelu, dtype="mixed_bfloat16",
                         bias_initializer=keras.initializers.RandomNormal(seed=1))
    x = tf.constant(rng.normal(size=(64, 128, 16)), tf.float32)
    upstream = tf.constant(rng.normal(size=(64, 128, 24)), tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(layer(x), tf.float32) * upstream)
    gradient = tape.gradient(loss, layer.bias)
    assert gradient.dtype == tf.float32
    dy = tf.cast(tf.cast(upstream, tf.bfloat16), tf.float32).numpy().astype("float64")
    if fused_gelu:  # the GELU derivative in float64 at the bf16 matmul TF computes plus the float32 bias
        xk = tf.matmul(tf.cast(x, tf.bfloat16), tf.cast(layer.kernel, tf.bfloat16)).numpy().astype("float64")
        z = xk + layer.bias.numpy().astype("float64")
        dy = dy * (0.5 * (1 + erf(z / np.sqrt(2))) + z * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi))
    np.testing.assert_allclose(gradient.numpy(), dy.sum(axis=(0, 1)), rtol=1e-5, atol=1e-3)


def test_mixed_bfloat16_attention_bias_gradient_is_the_float32_sum():
    rng = np.random.RandomState(8)
    layer = ElectraEinsumDense("abc,cde->abde", output_shape=(None, 2, 8), bias_axes="de", dtype="mixed_bfloat16")
    x = tf.constant(rng.normal(size=(64, 128, 16)), tf.float32)
    upstream = tf.constant(rng.normal(size=(64, 128, 2, 8)), tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(layer(x), tf.float32) * upstream)
    gradient = tape.gradient(loss, layer.bias)
    dy = tf.cast(tf.cast(upstream, tf.bfloat16), tf.float32).numpy().astype("float64")
    assert gradient.dtype == tf.float32
    np.testing.assert_allclose(gradient.numpy(), dy.sum(axis=(0, 1)), rtol=1e-5, atol=1e-4)


def test_tensorflows_bfloat16_bias_gradient_is_truncated_and_ours_is_not():
    ones = tf.ones([4096, 8], tf.bfloat16)
    assert float(tf.raw_ops.BiasAddGrad(out_backprop=ones)[0]) == 256.0  # the TF behaviour worked around
    bias = tf.zeros([8], tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(bias)
        y = add_bias(ones, bias)
    assert tape.gradient(y, bias).numpy().tolist() == [4096.0] * 8
