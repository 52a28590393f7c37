"""Schedule and AdamW: the official update, decay exclusions, per-variable learning rates."""

import keras
import numpy as np
import pytest

from electra_tf.training.optimization import ElectraAdamW, WarmupLinearDecay


def test_schedule_matches_the_official_formula():
    schedule = WarmupLinearDecay(2e-4, num_train_steps=1000, num_warmup_steps=100, power=1.0)
    for step in (0, 1, 50, 100, 101, 500, 999, 1000, 1500):
        expected = 2e-4 * (1 - min(step, 1000) / 1000) * min(1.0, step / 100)
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-10)


def make_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="dense"),
                              keras.layers.LayerNormalization(name="layer_norm")], name="net")
    for variable in model.weights:
        variable.assign(np.full(variable.shape, 2.0, "float32"))
    return model


def step(model, optimizer, grads):
    optimizer.apply(grads, model.trainable_variables)
    return {v.path: v.numpy() for v in model.trainable_variables}


def test_weight_decay_skips_layer_norm_and_biases():
    model = make_model()
    optimizer = ElectraAdamW(learning_rate=0.1, weight_decay=0.5)
    zeros = [np.zeros(v.shape, "float32") for v in model.trainable_variables]
    after = step(model, optimizer, zeros)  # zero gradients: only weight decay moves anything
    np.testing.assert_allclose(after["net/dense/kernel"], 2.0 * (1 - 0.5 * 0.1), rtol=1e-6)
    for path in ("net/dense/bias", "net/layer_norm/gamma", "net/layer_norm/beta"):
        np.testing.assert_array_equal(after[path], 2.0)


def test_learning_rate_multipliers_scale_adam_step_and_weight_decay():
    model = make_model()
    multipliers = {"net/dense/kernel": 0.25}
    optimizer = ElectraAdamW(learning_rate=0.1, weight_decay=0.0, lr_multipliers=multipliers,
                             bias_correction=True)
    grads = [np.ones(v.shape, "float32") for v in model.trainable_variables]
    after = step(model, optimizer, grads)
    # Adam's bias-corrected first step moves each weight by lr × g / (|g| + eps) ≈ lr × multiplier.
    np.testing.assert_allclose(after["net/dense/kernel"], 2.0 - 0.1 * 0.25, rtol=1e-5)
    np.testing.assert_allclose(after["net/dense/bias"], 2.0 - 0.1, rtol=1e-5)

    model = make_model()
    optimizer = ElectraAdamW(learning_rate=0.1, weight_decay=0.5, lr_multipliers=multipliers)
    after = step(model, optimizer, [np.zeros(v.shape, "float32") for v in model.trainable_variables])
    np.testing.assert_allclose(after["net/dense/kernel"], 2.0 * (1 - 0.5 * 0.1 * 0.25), rtol=1e-6)


def test_optimizer_config_round_trips():
    optimizer = ElectraAdamW(learning_rate=WarmupLinearDecay(1e-3, 10, 2), lr_multipliers={"a/b": 0.5})
    restored = ElectraAdamW.from_config(optimizer.get_config())
    assert restored.lr_multipliers == {"a/b": 0.5} and restored.gradients_are_reduced
    assert restored.bias_correction is False


def official_adamw(params, grads_per_step, lrs, multipliers, decays, wd, b1=0.9, b2=0.999, eps=1e-6):
    """`AdamWeightDecayOptimizer._apply_gradients` of google-research/electra, in NumPy."""
    params = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    for grads, lr in zip(grads_per_step, lrs):
        for k in params:
            m[k] = b1 * m[k] + (1 - b1) * grads[k]
            v2[k] = b2 * v2[k] + (1 - b2) * grads[k] ** 2
            update = m[k] / (np.sqrt(v2[k]) + eps)
            if decays[k]:
                update = update + wd * params[k]
            params[k] = params[k] - lr * multipliers[k] * update
    return params


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("bias_correction", [False, True])
def test_update_matches_the_official_adamw_in_numpy(bias_correction, fused):
    rng = np.random.RandomState(0)
    model = make_model()
    for variable in model.weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    start = {v.path: v.numpy() for v in model.trainable_variables}
    schedule = WarmupLinearDecay(1e-2, num_train_steps=20, num_warmup_steps=3)
    multipliers = {"net/dense/kernel": 0.5}
    optimizer = ElectraAdamW(learning_rate=schedule, weight_decay=0.1, lr_multipliers=multipliers,
                             bias_correction=bias_correction, fused=fused)
    grads_per_step = [{k: rng.normal(size=v.shape) for k, v in start.items()} for _ in range(6)]
    for grads in grads_per_step:
        after = step(model, optimizer, [grads[v.path].astype("float32") for v in model.trainable_variables])
    lrs = [float(schedule(t)) for t in range(6)]
    expected = official_adamw(start, grads_per_step, lrs, {k: multipliers.get(k, 1.0) for k in start},
                              {k: k.endswith("kernel") for k in start}, wd=0.1)
    if bias_correction:  # Keras' step differs from the official one from the first update on
        assert not np.allclose(after["net/dense/bias"], expected["net/dense/bias"], atol=1e-4)
        return
    for path, value in expected.items():
        np.testing.assert_allclose(after[path], value, atol=1e-6, err_msg=path)


def numpy_keras_adam(params, grads_per_step, lrs, multipliers, decays, wd, b1=0.9, b2=0.999, eps=1e-6):
    """Keras' bias-corrected Adam step plus the decoupled decay, in NumPy."""
    params = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
        for k in params:
            rate = lr * multipliers[k]
            if decays[k]:
                params[k] = params[k] - rate * wd * params[k]
            m[k] = b1 * m[k] + (1 - b1) * grads[k]
            v2[k] = b2 * v2[k] + (1 - b2) * grads[k] ** 2
            alpha = rate * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
            params[k] = params[k] - alpha * m[k] / (np.sqrt(v2[k]) + eps)
    return params


@pytest.mark.parametrize("fused", [True, False])
def test_bias_corrected_update_matches_numpy(fused):
    rng = np.random.RandomState(1)
    model = make_model()
    for variable in model.weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    start = {v.path: v.numpy() for v in model.trainable_variables}
    multipliers = {"net/dense/kernel": 0.5}
    optimizer = ElectraAdamW(learning_rate=1e-2, weight_decay=0.1, lr_multipliers=multipliers,
                             bias_correction=True, fused=fused)
    grads_per_step = [{k: rng.normal(size=v.shape) for k, v in start.items()} for _ in range(5)]
    for grads in grads_per_step:
        after = step(model, optimizer, [grads[v.path].astype("float32") for v in model.trainable_variables])
    expected = numpy_keras_adam(start, grads_per_step, [1e-2] * 5, {k: multipliers.get(k, 1.0) for k in start},
                                {k: k.endswith("kernel") for k in start}, wd=0.1)
    for path, value in expected.items():
        np.testing.assert_allclose(after[path], value, atol=1e-6, err_msg=path)


def traced_update_ops(fused):
    import tensorflow as tf

    model = make_model()
    optimizer = ElectraAdamW(learning_rate=1e-3, fused=fused)
    grads = [tf.ones(v.shape) for v in model.trainable_variables]
    optimizer.build(model.trainable_variables)
    graph = tf.function(lambda: optimizer.apply(grads, model.trainable_variables)).get_concrete_function().graph
    return [op.type for op in graph.get_operations()]


def test_fused_update_is_one_kernel_per_variable_and_smaller():
    fused, unfused = traced_update_ops(True), traced_update_ops(False)
    assert fused.count("ResourceApplyAdam") == 4 and "ResourceApplyAdam" not in unfused
    assert unfused.count("Sqrt") == 4 and "Sqrt" not in fused
    assert len(fused) < len(unfused) / 1.5


def test_fused_update_rejects_non_float32_variables():
    variable = keras.Variable(np.ones(3, "float16"), dtype="float16", name="kernel")
    optimizer = ElectraAdamW(learning_rate=0.1)
    with pytest.raises(TypeError, match="fused=False"):
        optimizer.apply([np.ones(3, "float16")], [variable])
    ElectraAdamW(learning_rate=0.1, fused=False).apply([np.ones(3, "float16")], [variable])


def test_the_execution_option_chooses_the_fused_kernel():
    from electra_tf.config import get_config
    from electra_tf.training.optimization import create_optimizer

    assert create_optimizer(get_config("small")).fused is True
    assert create_optimizer(get_config("small"), fused=False).fused is False
    restored = ElectraAdamW.from_config(ElectraAdamW(fused=False).get_config())
    assert restored.fused is False


def test_config_defaults_to_the_official_update_and_mini_opts_out():
    from electra_tf.config import get_config
    from electra_tf.training.optimization import create_optimizer

    assert create_optimizer(get_config("small")).bias_correction is False
    assert create_optimizer(get_config("mini")).bias_correction is True


def numpy_lamb(params, grads_per_step, lr, decays, wd, b1=0.9, b2=0.999, eps=1e-6):
    """NVIDIA's LAMB (tensorflow_addons' LAMB with layer adaptation excluded where decay is)."""
    params = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    for t, grads in enumerate(grads_per_step, start=1):
        for k in params:
            m[k] = b1 * m[k] + (1 - b1) * grads[k]
            v2[k] = b2 * v2[k] + (1 - b2) * grads[k] ** 2
            update = (m[k] / (1 - b1 ** t)) / (np.sqrt(v2[k] / (1 - b2 ** t)) + eps)
            ratio = 1.0
            if decays[k]:
                update = update + wd * params[k]
                w_norm, u_norm = np.linalg.norm(params[k]), np.linalg.norm(update)
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            params[k] = params[k] - lr * ratio * update
    return params


def test_lamb_matches_numpy_and_excludes_layer_norm_and_biases():
    from electra_tf.config import get_config
    from electra_tf.training.optimization import ElectraLamb, create_optimizer

    assert isinstance(create_optimizer(get_config("tiny", optimizer="lamb")), ElectraLamb)
    rng = np.random.RandomState(1)
    model = make_model()
    for variable in model.weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    start = {v.path: v.numpy() for v in model.trainable_variables}
    optimizer = ElectraLamb(learning_rate=0.01, weight_decay=0.1)
    grads_per_step = [{k: rng.normal(size=v.shape) for k, v in start.items()} for _ in range(4)]
    for grads in grads_per_step:
        after = step(model, optimizer, [grads[v.path].astype("float32") for v in model.trainable_variables])
    expected = numpy_lamb(start, grads_per_step, 0.01, {k: k.endswith("kernel") for k in start}, wd=0.1)
    for path, value in expected.items():
        np.testing.assert_allclose(after[path], value, atol=1e-5, err_msg=path)


def test_finetuning_uses_the_official_update_even_for_cpu_sizes():
    from electra_tf.config import get_config

    for size in ("tiny", "mini", "small"):
        assert get_config(size).finetune_adam_bias_correction is False
