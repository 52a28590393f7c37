"""The XLA:CPU transformer layer (`ElectraTransformerEncoder` with kernels="xla_cpu") against the reference call,
and where the encoders' kernel options come from; the kernels themselves are `test_xla_cpu_ops.py`'s."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import get_config
from electra_tf.model import example_dropout
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.model.heads import DiscriminatorHead
from electra_tf.model.layers import ElectraDense
from electra_tf.model.transformer_layer import ElectraTransformerEncoder
from electra_tf.ops.reference import gelu_exact
from electra_tf.options import ExecutionOptions

RNG = np.random.RandomState(0)  # X below is its first draw, as it was in test_xla_cpu_ops.py

# --------------------------------------------------------------------------
# the XLA:CPU transformer layer against the reference call
# --------------------------------------------------------------------------

CPU_DEFAULTS = ExecutionOptions().resolve({"CPU"})  # what a run on CPUs resolves


def _layer(policy="float32", **kwargs):
    """A layer with the CPU defaults' kernels and masks unless `kwargs` say otherwise."""
    kwargs = {"kernels": CPU_DEFAULTS.kernels, "dropout_masks": CPU_DEFAULTS.dropout_masks, **kwargs}
    layer = ElectraTransformerEncoder(intermediate_dim=48, num_heads=4, dropout=0.1, activation=gelu_exact,
                                      layer_norm_epsilon=1e-12, dtype=policy,
                                      kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.2), **kwargs)
    layer.build((None, None, 32))
    rng = np.random.RandomState(1)
    for variable in layer.weights:  # non-trivial biases and LayerNorm parameters
        if variable.path.endswith(("bias", "beta")):
            variable.assign(0.3 * rng.normal(size=variable.shape))
        elif variable.path.endswith("gamma"):
            variable.assign(1 + 0.3 * rng.normal(size=variable.shape))
    return layer


def _dropout_states(layer):
    return [d.seed_generator.state for d in (layer._self_attention_layer._dropout_layer,
                                             layer._self_attention_dropout, layer._feedforward_dropout)]


def _run_layer(layer, fused_on, x, mask, training, states, **kwargs):
    """Output and gradients (input, then every weight) with the dropout generators reset to `states`."""
    for state, saved in zip(_dropout_states(layer), states):
        state.assign(saved)
    layer.kernels = "xla_cpu" if fused_on else "reference"
    upstream = tf.cos(tf.range(32, dtype=tf.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, padding_mask=mask, training=training, **kwargs)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
    return y, tape.gradient(loss, [x] + layer.trainable_weights)


X = tf.constant(RNG.normal(size=(3, 7, 32)).astype("float32"))
MASK = tf.constant(np.array([[1] * 7, [1] * 4 + [0] * 3, [1] * 6 + [0]], bool))


@pytest.mark.parametrize("training", [False, True])
def test_xla_cpu_layer_equals_the_reference_call_with_the_same_dropout_masks(training):
    layer = _layer()
    assert layer.kernels == "xla_cpu"  # the CPU default
    states = [s.numpy() for s in _dropout_states(layer)]
    y, grads = _run_layer(layer, True, X, MASK, training, states)
    y_ref, grads_ref = _run_layer(layer, False, X, MASK, training, states)
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=2e-6)
    names = ["inputs"] + [w.path for w in layer.trainable_weights]
    for name, got, want in zip(names, grads, grads_ref):
        got, want = np.asarray(tf.convert_to_tensor(got)), np.asarray(tf.convert_to_tensor(want))
        if name.endswith("key/bias"):  # softmax is invariant to it: its gradient is round-off
            assert np.abs(got).max() < 1e-4 and np.abs(want).max() < 1e-4
            continue
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max(), err_msg=name)
    if training:  # dropout was on: a second call draws new masks
        again, _ = _run_layer(layer, True, X, MASK, training, [s.numpy() for s in _dropout_states(layer)])
        assert not np.allclose(again.numpy(), y.numpy())


@pytest.mark.parametrize("length", [7, 16])
def test_xla_cpu_layer_keyed_by_the_example_equals_the_reference_call(length):
    """Inside `keyed_by`, the XLA:CPU kernels take the keyed words uninterleaved (`random_bits.KeyedWords`)
    and interleave them in the fusion; the reference call takes the interleaved bits: the same masks, so
    the same outputs and gradients, with rows (7) that do not fill the last block of 8."""
    layer = _layer()
    x, mask = tf.tile(X, [1, 3, 1])[:, :length], tf.tile(MASK, [1, 3])[:, :length]
    streams = example_dropout.example_streams(seed=3, step=5, global_indices=tf.range(3))
    runs = []
    for fused_on in (True, False):
        with example_dropout.keyed_by(streams):
            runs.append(_run_layer(layer, fused_on, x, mask, True, [s.numpy() for s in _dropout_states(layer)]))
    (y, grads), (y_ref, grads_ref) = runs
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=2e-6)
    for got, want in zip(grads[:1] + grads[-4:], grads_ref[:1] + grads_ref[-4:]):  # inputs; last dense, LayerNorm
        got, want = np.asarray(tf.convert_to_tensor(got)), np.asarray(tf.convert_to_tensor(want))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    with example_dropout.keyed_by(streams):  # and dropout is on: another run's streams drop out others
        y_off, _ = _run_layer(layer, True, x, mask, False, [s.numpy() for s in _dropout_states(layer)])
    assert not np.allclose(y_off.numpy(), y.numpy())


def test_xla_cpu_bfloat16_layer_is_as_close_to_float32_as_the_reference():
    layer32, layer16 = _layer(), _layer("mixed_bfloat16")
    layer16.set_weights(layer32.get_weights())
    states = [s.numpy() for s in _dropout_states(layer32)]
    reference, _ = _run_layer(layer32, True, X, MASK, True, states)
    errors = {}
    for fused_on in (True, False):
        y, grads = _run_layer(layer16, fused_on, X, MASK, True, states)
        assert y.dtype == tf.bfloat16 and all(g.dtype == tf.float32 for g in grads[1:])
        errors[fused_on] = np.abs(y.numpy().astype("float32") - reference.numpy()).max()
    assert errors[True] <= errors[False] * 1.25 and errors[True] < 0.1, errors


@pytest.mark.parametrize("length", [1, 3])
def test_fused_layer_at_the_first_positions_equals_its_full_output_there(length):
    layer = _layer()
    full = layer(X, padding_mask=MASK)
    first = layer(X, padding_mask=MASK, query_length=length)
    assert first.shape == (3, length, 32)
    np.testing.assert_allclose(first.numpy(), full.numpy()[:, :length], rtol=1e-5, atol=2e-6)


def test_fused_layer_takes_a_dynamic_batch_and_sequence_length():
    layer = _layer()

    @tf.function(input_signature=[tf.TensorSpec([None, None, 32]), tf.TensorSpec([None, None], tf.bool)])
    def run(x, mask):
        return layer(x, padding_mask=mask, training=True)

    for batch, length in [(3, 7), (2, 5)]:
        y = run(X[:batch, :length], MASK[:batch, :length])
        assert y.shape == (batch, length, 32) and np.all(np.isfinite(y.numpy()))


def test_xla_cpu_kernels_raise_where_they_cannot_compute_instead_of_falling_back():
    with pytest.raises(ValueError, match="16-bit dropout masks"):
        _layer(kernels="xla_cpu", dropout_masks="keras")
    with pytest.raises(ValueError, match="the exact GELU"):
        ElectraTransformerEncoder(intermediate_dim=8, num_heads=2, activation="gelu", kernels="xla_cpu",
                                  dropout_masks="16bit")
    with pytest.raises(ValueError, match="fused=True.*needs activation=gelu_exact"):
        ElectraDense(8, activation="relu", fused=True)  # the fused bias + GELU kernel: refused, not skipped
    layer = _layer()
    with pytest.raises(ValueError, match="padding mask only"):
        layer(X, attention_mask=tf.ones((3, 7, 7), tf.bool))
    with pytest.raises(ValueError, match="padding mask only"):
        layer(X, padding_mask=MASK, return_attention_scores=True)
    reference = _layer(kernels="reference", dropout_masks="keras")  # the reference call takes all of these
    reference(X, attention_mask=tf.ones((3, 7, 7), tf.bool))


def test_execution_reaches_the_encoders_and_stays_out_of_their_config():
    config = get_config("tiny", vocab_size=100)
    reference = ElectraEncoder.from_config_object(config, "discriminator",
                                                  execution=ExecutionOptions(kernels="reference").resolve({"CPU"}))
    reference.build()
    assert {layer.kernels for layer in reference.transformer_layers} == {"reference"}
    assert not {"fused_kernels", "dropout_masks", "execution"} & set(reference.get_config())
    cpu = ElectraEncoder.from_config_object(config, "generator", execution=CPU_DEFAULTS)
    cpu.build()
    assert {layer.kernels for layer in cpu.transformer_layers} == {"xla_cpu"}


def test_encoders_saved_with_execution_fields_in_their_config_still_load():
    config = get_config("tiny", vocab_size=100)
    encoder = ElectraEncoder.from_config_object(config, "discriminator")
    saved = {**encoder.get_config(), "fused_kernels": False, "dropout_masks": "keras", "attention_dropout_rate": 0.1}
    assert ElectraEncoder.from_config(saved).get_config() == encoder.get_config()


def test_encoder_outputs_do_not_depend_on_fused_kernels():
    config = get_config("tiny", vocab_size=100, hparams={"discriminator.num_layers": 2})
    inputs = {"token_ids": tf.constant(np.random.RandomState(2).randint(5, 100, size=(2, 9)), tf.int32),
              "segment_ids": tf.zeros((2, 9), tf.int32),
              "padding_mask": tf.constant([[1] * 9, [1] * 5 + [0] * 4], tf.int32)}
    fused_encoder = ElectraEncoder.from_config_object(config, "discriminator")
    plain = ElectraEncoder.from_config_object(config, "discriminator",
                                              execution=ExecutionOptions(kernels="reference").resolve({"CPU"}))
    fused_encoder.build(), plain.build()
    plain.set_weights(fused_encoder.get_weights())
    np.testing.assert_allclose(fused_encoder(inputs).numpy(), plain(inputs).numpy(), rtol=1e-5, atol=5e-6)
    np.testing.assert_allclose(fused_encoder(inputs, output_length=1).numpy(),
                               plain(inputs, output_length=1).numpy(), rtol=1e-5, atol=5e-6)


def test_bfloat16_layer_and_head_bias_gradients_match_float32():
    """Over 32 × 128 positions every bias gradient under mixed_bfloat16 stays within bf16 rounding of
    the float32 one, with either kernels (Keras' own dense layers' bias gradients are off by up to 88 %)."""
    x = tf.constant(np.random.RandomState(5).normal(size=(32, 128, 32)).astype("float32"))
    mask = tf.ones((32, 128), tf.bool)
    layer32, layer16 = _layer(), _layer("mixed_bfloat16")
    layer16.set_weights(layer32.get_weights())
    states = [s.numpy() for s in _dropout_states(layer32)]
    _, grads32 = _run_layer(layer32, True, x, mask, False, states)
    for fused_on in (True, False):
        _, grads16 = _run_layer(layer16, fused_on, x, mask, False, states)
        for weight, g32, g16 in zip(layer32.trainable_weights, grads32[1:], grads16[1:]):
            if weight.path.endswith("bias") and not weight.path.endswith("key/bias"):
                g32, g16 = np.asarray(tf.convert_to_tensor(g32)), np.asarray(tf.convert_to_tensor(g16))
                np.testing.assert_allclose(g16, g32, rtol=0, atol=0.05 * np.abs(g32).max(),
                                           err_msg=f"{weight.path}, xla_cpu kernels={fused_on}")
    head32 = DiscriminatorHead(32)
    head16 = DiscriminatorHead(32, dtype="mixed_bfloat16")
    head32.build(x.shape), head16.build(x.shape)
    head16.set_weights(head32.get_weights())
    upstream = tf.constant(np.random.RandomState(6).normal(size=(32, 128)).astype("float32"))
    grads = []
    for head in (head32, head16):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(head(x), tf.float32) * upstream)
        grads.append(tape.gradient(loss, head.trainable_weights))
    for weight, g32, g16 in zip(head32.trainable_weights, *grads):
        np.testing.assert_allclose(g16.numpy(), g32.numpy(), rtol=0, atol=0.05 * np.abs(g32.numpy()).max(),
                                   err_msg=weight.path)


def test_a_model_built_without_options_computes_with_the_portable_ones_and_auto_is_refused():
    """No process-global default: no options means TensorFlow's standard ops; "auto" is the run's to resolve."""
    encoder = ElectraEncoder.from_config_object(get_config("tiny", vocab_size=100))
    encoder.build()
    assert encoder.execution == ExecutionOptions.portable()
    assert {layer.kernels for layer in encoder.transformer_layers} == {"reference"}
    with pytest.raises(ValueError, match="resolve them for the run's devices first"):
        ElectraEncoder.from_config_object(get_config("tiny", vocab_size=100), execution=ExecutionOptions())


def test_the_run_resolves_the_kernels_per_model_activation():
    """One place decides: a tanh-GELU model gets the reference kernels on CPUs, an exact-GELU one XLA:CPU's."""
    from electra_tf.training import distribution

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    for hidden_act, kernels in (("gelu_approximate", "reference"), ("gelu", "xla_cpu")):
        config = get_config("tiny", vocab_size=100, hidden_act=hidden_act)
        resolved, _ = distribution.resolve_execution(ExecutionOptions(), strategy, config)
        encoder = ElectraEncoder.from_config_object(config, execution=resolved)
        encoder.build()
        assert {layer.kernels for layer in encoder.transformer_layers} == {kernels}
