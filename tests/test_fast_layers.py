"""The step-speed layers of issue #11: 16-bit dropout masks and the hand-written LayerNorm backward."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import training
from electra_tf.config import get_config
from electra_tf.modeling import (ElectraDropout, ElectraEncoder, ElectraLayerNormalization, dropout16,
                                 layer_norm_last_axis)


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_dropout16_rate_and_expectation(rate):
    x = tf.ones([1 << 21])
    y = dropout16(x, rate, tf.constant([3, 4], tf.int32)).numpy()
    threshold = round(rate * 65536)
    assert abs(threshold / 65536 - rate) < 1e-5
    kept = y > 0
    # Binomial standard deviation of the kept fraction over 2M elements is ~3e-4.
    assert abs(kept.mean() - (1 - rate)) < 2e-3
    np.testing.assert_allclose(y[kept], 65536 / (65536 - threshold), rtol=1e-6)
    assert abs(y.mean() - 1.0) < 3e-3  # unbiased: E[y] = x


def test_dropout16_is_deterministic_in_its_seed_and_handles_odd_and_dynamic_shapes():
    x = tf.random.normal([3, 5, 7])  # 105 elements: odd
    seed = tf.constant([1, 2], tf.int32)
    a, b = dropout16(x, 0.1, seed), dropout16(x, 0.1, seed)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), dropout16(x, 0.1, tf.constant([1, 3], tf.int32)).numpy())
    dynamic = tf.function(lambda t: dropout16(t, 0.1, seed), input_signature=[tf.TensorSpec([None, None, 7])])
    np.testing.assert_array_equal(dynamic(x).numpy(), a.numpy())
    bf16 = dropout16(tf.cast(x, tf.bfloat16), 0.1, seed)
    assert bf16.dtype == tf.bfloat16
    np.testing.assert_array_equal(bf16.numpy() == 0, a.numpy() == 0)


def test_dropout16_gradient_is_the_mask():
    x = tf.random.normal([4, 6])
    seed = tf.constant([5, 6], tf.int32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = dropout16(x, 0.25, seed)
    grad = tape.gradient(y, x).numpy()
    np.testing.assert_allclose(grad, np.where(y.numpy() != 0, 65536 / (65536 - 16384), 0.0), rtol=1e-6)


def test_electra_dropout_advances_its_seed_generator_like_keras():
    layer = ElectraDropout(0.1, seed=7)
    x = tf.ones([8, 16])
    first, second = layer(x, training=True), layer(x, training=True)
    assert not np.array_equal(first.numpy(), second.numpy())
    np.testing.assert_array_equal(layer.seed_generator.state.numpy(), [7, 2])
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    again = ElectraDropout(0.1, seed=7)
    np.testing.assert_array_equal(again(x, training=True).numpy(), first.numpy())


def test_encoder_uses_the_fast_layers_with_unchanged_rng_state_list():
    keras.utils.set_random_seed(0)
    config = get_config("small", vocab_size=100, hparams={"discriminator.num_layers": 2})
    encoder = ElectraEncoder.from_config_object(config, "discriminator")
    encoder.build()
    kinds = [type(layer) for layer in encoder._flatten_layers()]
    assert keras.layers.Dropout not in kinds and keras.layers.LayerNormalization not in kinds
    assert kinds.count(ElectraDropout) == 1 + 3 * 2 and kinds.count(ElectraLayerNormalization) == 1 + 2 * 2
    assert len(training.rng_states(encoder)) == 1 + 3 * 2


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

