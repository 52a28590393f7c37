"""The reference ops (`electra_tf.ops.reference`) and the layers built on them (`electra_tf.model.layers`):
GELU and LayerNorm with closed-form backward passes, 16-bit dropout."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model.layers import ElectraDropout, ElectraLayerNormalization, get_activation
from electra_tf.ops.reference import dropout16, gelu_erf, gelu_exact, layer_norm_last_axis

def _value_and_grads(fn, *inputs, weights=None):
    """fn(inputs), and d/d inputs of sum(fn(inputs)² · weights), in float32."""
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = fn(*inputs)
        y32 = tf.cast(y, tf.float32)
        loss = tf.reduce_sum(y32 * y32 * (1.0 if weights is None else weights))
    return y, tape.gradient(loss, list(inputs))


def test_gelu_matches_the_official_formula_and_keras_exact_gelu():
    x = tf.constant(np.linspace(-8.0, 8.0, 4001, dtype="float32"))
    official = 0.5 * x * (1.0 + tf.math.erf(x / tf.sqrt(2.0)))  # electra/model/modeling.py `gelu`
    # For x ≪ 0, 1 + erf(x/√2) cancels: an ulp of x/√2 (÷ √2 vs × 1/√2) moves the
    # result by up to ~1e-6 absolute there, in the official code as here.
    np.testing.assert_allclose(gelu_exact(x).numpy(), official.numpy(), rtol=1e-6, atol=2e-6)
    np.testing.assert_allclose(gelu_exact(x).numpy(), keras.activations.gelu(x, approximate=False).numpy(),
                               rtol=1e-6, atol=2e-6)
    assert get_activation("gelu", kernels="xla_cpu") is gelu_exact and get_activation("gelu") is not gelu_exact


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gelu_gradient_equals_autodiff_of_the_formula(dtype):
    rng = np.random.RandomState(0)
    x = tf.cast(tf.constant(rng.normal(0.0, 2.0, size=(8, 16, 64)).astype("float32")), dtype)
    weights = tf.constant(rng.normal(size=(8, 16, 64)).astype("float32"))
    y, (grad,) = _value_and_grads(gelu_erf, x, weights=weights)
    y_ref, (grad_ref,) = _value_and_grads(lambda t: keras.activations.gelu(t, approximate=False), x,
                                          weights=weights)
    assert y.dtype == y_ref.dtype == grad.dtype == tf.as_dtype(dtype)
    tol = 1e-5 if dtype == "float32" else 2e-2
    g, g_ref = (np.asarray(tf.cast(t, tf.float32)) for t in (grad, grad_ref))
    np.testing.assert_allclose(g, g_ref, rtol=0, atol=tol * np.abs(g_ref).max())


def test_gelu_gradient_matches_central_differences_in_float64():
    x = tf.constant(np.linspace(-6.0, 6.0, 241), tf.float64)
    _, (grad,) = _value_and_grads(gelu_erf, x)
    h = 1e-6
    numeric = (gelu_erf(x + h).numpy() ** 2 - gelu_erf(x - h).numpy() ** 2) / (2 * h)
    np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_layer_norm_matches_keras_forward_exactly_and_backward_closely(policy):
    shape = (4, 16, 64)
    ours = ElectraLayerNormalization(epsilon=1e-12, dtype=policy)
    reference = keras.layers.LayerNormalization(epsilon=1e-12, dtype=policy)
    for layer in (ours, reference):
        layer.build(shape)
    rng = np.random.RandomState(0)
    gamma, beta = rng.normal(size=64).astype("float32"), rng.normal(size=64).astype("float32")
    for layer in (ours, reference):
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    x = tf.constant(rng.normal(1.0, 3.0, size=shape).astype("float32"))
    weights = tf.constant(rng.normal(size=shape).astype("float32"))
    results = []
    for layer in (ours, reference):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2 * weights)
        results.append((y, tape.gradient(loss, [x, layer.gamma, layer.beta])))
    (y, grads), (y_ref, grads_ref) = results
    assert y.dtype == y_ref.dtype
    np.testing.assert_array_equal(y.numpy(), y_ref.numpy())
    for g, g_ref in zip(grads, grads_ref):
        g, g_ref = np.asarray(g, np.float32), np.asarray(g_ref, np.float32)
        np.testing.assert_allclose(g, g_ref, rtol=0, atol=1e-5 * np.abs(g_ref).max())


def test_layer_norm_last_axis_in_graph_matches_autodiff():
    x = tf.random.normal([2, 3, 8], seed=1)
    gamma, beta = tf.random.normal([8], seed=2), tf.random.normal([8], seed=3)

    @tf.function
    def grads(fn):
        with tf.GradientTape() as tape:
            tape.watch([x, gamma, beta])
            loss = tf.reduce_sum(tf.sin(fn(x, gamma, beta)))
        return tape.gradient(loss, [x, gamma, beta])

    def reference(x, gamma, beta):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta

    for g, g_ref in zip(grads(lambda *a: layer_norm_last_axis(*a, 1e-12)), grads(reference)):
        np.testing.assert_allclose(g.numpy(), g_ref.numpy(), rtol=1e-4, atol=1e-5)


def test_layer_norm_falls_back_to_keras_off_the_last_axis():
    x = tf.random.normal([3, 5, 4], seed=4)
    ours, reference = ElectraLayerNormalization(axis=1), keras.layers.LayerNormalization(axis=1)
    np.testing.assert_array_equal(ours(x).numpy(), reference(x).numpy())


# --------------------------------------------------------------------------- 16-bit dropout masks

def test_dropout16_drops_at_the_quantised_rate_and_keeps_the_expectation():
    x = tf.fill([1000, 1001], 3.0)  # odd size: the last 32-bit draw is half used
    y = dropout16(x, 0.1, tf.constant([7, 11], tf.int64)).numpy()
    p = 6554 / 65536  # round(0.1 · 65536) / 65536
    dropped = (y == 0).mean()
    assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / y.size)
    kept = y[y != 0]
    np.testing.assert_array_equal(np.unique(kept), np.float32(3.0 * 65536 / (65536 - 6554)))
    assert abs(y.mean() / 3.0 - 1.0) < 5 * np.sqrt(p / (1 - p) / y.size)


def test_dropout16_is_a_function_of_the_seed_and_shape_agnostic():
    seed = tf.constant([1, 2], tf.int64)
    x = tf.ones([5, 7])
    a, b = dropout16(x, 0.3, seed).numpy(), dropout16(x, 0.3, seed).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, dropout16(x, 0.3, tf.constant([1, 3], tf.int64)).numpy())
    dynamic = tf.function(lambda t: dropout16(t, 0.3, seed),
                          input_signature=[tf.TensorSpec([None, None], tf.float32)])
    np.testing.assert_array_equal(dynamic(x).numpy(), a)  # dynamic size draws the same bits
    assert dropout16(x, 0.0, seed) is x
    np.testing.assert_array_equal(dropout16(x, 1.0, seed).numpy(), 0.0)


def test_dropout16_gradient_is_the_mask_times_the_scale():
    x = tf.Variable(tf.random.normal([64, 33]))
    seed = tf.constant([5, 6], tf.int64)
    with tf.GradientTape() as tape:
        y = dropout16(x, 0.2, seed)
    grad = tape.gradient(y, x).numpy()
    mask = (y.numpy() != 0).astype("float32")
    np.testing.assert_allclose(grad, mask * 65536 / (65536 - round(0.2 * 65536)), rtol=1e-6)


def test_electra_dropout_layer_advances_its_seed_generator_and_is_identity_at_inference():
    layer = ElectraDropout(0.5, seed=3)
    x = np.ones((8, 64), "float32")
    first, second = (np.asarray(layer(x, training=True)) for _ in range(2))
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(np.asarray(layer(x, training=False)), x)
    replay = ElectraDropout(0.5, seed=3)
    np.testing.assert_array_equal(np.asarray(replay(x, training=True)), first)
