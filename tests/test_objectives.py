"""The five pre-training objectives: which positions each loss covers, checked against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model import masking
from electra_tf.config import OBJECTIVES
from electra_tf.training.optimization import create_optimizer
from electra_tf.model.networks import pretrainer_from_config
from electra_tf.options import ExecutionOptions
from pretrain_testutil import SPECIAL_IDS, tiny_config
from test_pretrainer import log_softmax, make_batch


def build(objective, **overrides):
    config = tiny_config(objective=objective, dropout_rate=0.0, **overrides)
    return pretrainer_from_config(config, special_token_ids=SPECIAL_IDS).build_all()


def run(model, batch=None):
    batch = batch or make_batch()
    out = model.compute_losses(batch, training=False, seeds=masking.example_seeds(0, 0, tf.range(4)))
    return batch, out


def masked_position_grid(out, shape):
    """[B, S] 1.0 at the real masked positions."""
    grid = np.zeros(shape)
    positions, weights = out["masked"].positions.numpy(), out["masked"].weights.numpy()
    for row in range(shape[0]):
        grid[row, positions[row][weights[row] > 0]] = 1.0
    return grid


def sigmoid_ce(logits, labels):
    return np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))


def main_hidden(model, batch, out):
    inputs = {"token_ids": out["fake_ids"], "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]}
    return model.discriminator(inputs, training=False)


@pytest.mark.parametrize("objective,covers", [("rtd", "all real tokens"), ("rtd_masked_only", "masked positions")])
def test_discriminator_loss_covers(objective, covers):
    model = build(objective)
    batch, out = run(model)
    mask = batch["input_mask"].numpy().astype(np.float64)
    weights = mask if covers == "all real tokens" else masked_position_grid(out, mask.shape)
    logits = model.discriminator_head(main_hidden(model, batch, out)).numpy().astype(np.float64)
    expected = (sigmoid_ce(logits, out["labels"].numpy()) * weights).sum() / weights.sum()
    np.testing.assert_allclose(out["disc_loss"].numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(out["loss"].numpy(), out["gen_loss"].numpy() + 50 * expected, rtol=1e-5)
    if objective == "rtd_masked_only":
        assert weights.sum() < 0.5 * mask.sum()  # the two objectives really differ here


def test_mlm_loss_covers_only_masked_positions_of_the_masked_input():
    model = build("mlm")
    batch, out = run(model)
    assert "fake_ids" not in out and model.discriminator is None
    masked = out["masked"]
    hidden = model.generator({"token_ids": masked.input_ids, "segment_ids": batch["segment_ids"],
                              "padding_mask": batch["input_mask"]}).numpy()
    gathered = np.take_along_axis(hidden, masked.positions.numpy()[..., None], axis=1)
    logits = model.generator_head(tf.constant(gathered)).numpy()
    nll = -np.take_along_axis(log_softmax(logits), masked.original_ids.numpy()[..., None], -1)[..., 0]
    weights = masked.weights.numpy()
    np.testing.assert_allclose(out["loss"].numpy(), (nll * weights).sum() / weights.sum(), rtol=1e-5)


def test_replace_mlm_predicts_originals_at_masked_positions_from_generator_samples():
    model = build("replace_mlm")
    batch, out = run(model)
    masked = out["masked"]
    grid = masked_position_grid(out, batch["input_ids"].shape)
    fake, ids = out["fake_ids"].numpy(), batch["input_ids"].numpy()
    # Masked positions hold the generator's samples (any token, [MASK] included), the rest the input.
    positions, sampled, weights = (out["masked"].positions.numpy(), out["sampled"].numpy(),
                                   out["masked"].weights.numpy())
    rows = np.arange(len(fake))[:, None].repeat(positions.shape[1], 1)
    np.testing.assert_array_equal(fake[rows[weights > 0], positions[weights > 0]], sampled[weights > 0])
    np.testing.assert_array_equal(fake[grid == 0], ids[grid == 0])
    hidden = main_hidden(model, batch, out).numpy()
    gathered = np.take_along_axis(hidden, masked.positions.numpy()[..., None], axis=1)
    logits = model.discriminator_mlm_head(tf.constant(gathered)).numpy()
    nll = -np.take_along_axis(log_softmax(logits), masked.original_ids.numpy()[..., None], -1)[..., 0]
    weights = masked.weights.numpy()
    expected = (nll * weights).sum() / weights.sum()
    np.testing.assert_allclose(out["main_loss"].numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(out["loss"].numpy(), out["gen_loss"].numpy() + expected, rtol=1e-5)


def test_all_tokens_mlm_covers_every_real_token_with_the_copy_mechanism():
    model = build("all_tokens_mlm")
    batch, out = run(model)
    ids, mask = batch["input_ids"].numpy(), batch["input_mask"].numpy().astype(np.float64)
    fake = out["fake_ids"].numpy()
    hidden = main_hidden(model, batch, out)
    log_p = log_softmax(model.discriminator_mlm_head(hidden).numpy().astype(np.float64))
    keep = 1 / (1 + np.exp(-model.discriminator_head(hidden).numpy().astype(np.float64)))
    p_original = np.exp(np.take_along_axis(log_p, ids[..., None], -1)[..., 0])
    p = keep * (fake == ids) + (1 - keep) * p_original
    expected = -(np.log(p) * mask).sum() / mask.sum()
    np.testing.assert_allclose(out["main_loss"].numpy(), expected, rtol=1e-5)
    assert (fake != ids).any() and (fake == ids).any()  # both branches of the mixture are exercised


@pytest.mark.parametrize("objective", ["replace_mlm", "all_tokens_mlm"])
def test_main_loss_does_not_reach_the_generator(objective):
    model = build(objective)
    with tf.GradientTape() as tape:
        _, out = run(model)
    variables = model.trainable_variables
    grads = dict(zip([v.path for v in variables], tape.gradient(out["main_loss"], variables)))
    generator_own = [p for p in grads if p.startswith(("generator/transformer", "generator_head/"))]
    assert generator_own and all(grads[p] is None for p in generator_own)
    assert grads["discriminator_mlm_head/dense/kernel"] is not None


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_trains_and_reports_its_losses(objective):
    model = build(objective)
    model.compile(optimizer=create_optimizer(model.config))
    out = model.replica_step(make_batch())
    assert sorted(out) == sorted(model.step_output_names + ["nonfinite"])
    assert all(np.isfinite(float(v)) for v in out.values())
    finetuned = model.encoder_for_finetuning
    assert finetuned.hidden_size == model.config.discriminator.hidden_size  # the discriminator-sized model is kept


def losses_and_gradients_by_kernels(config, loss_name, compute=run):
    """Per `kernels` value: the model's outputs and the gradients of `loss_name`, from the same weights."""
    models = {kernels: pretrainer_from_config(config, special_token_ids=SPECIAL_IDS,
                                              execution=ExecutionOptions(kernels=kernels).resolve({"CPU"})).build_all()
              for kernels in ("reference", "xla_cpu")}
    for source, target in zip(models["reference"].weights, models["xla_cpu"].weights):
        target.assign(source)
    results = {}
    for kernels, model in models.items():
        with tf.GradientTape() as tape:
            out = compute(model)
        grads = tape.gradient(out[loss_name], model.trainable_variables)
        results[kernels] = out, [tf.convert_to_tensor(g).numpy() for g in grads if g is not None]
    assert len(results["xla_cpu"][1]) == len(results["reference"][1]) > 0
    return results


def test_all_tokens_mlm_fused_softmax_equals_the_reference_ops():
    """The XLA:CPU path of the every-position softmax: the same loss, predictions and gradients."""
    results = losses_and_gradients_by_kernels(tiny_config(objective="all_tokens_mlm", dropout_rate=0.0), "main_loss",
                                              lambda model: run(model)[1])
    (ref, ref_grads), (fused, fused_grads) = results["reference"], results["xla_cpu"]
    np.testing.assert_allclose(fused["main_loss"].numpy(), ref["main_loss"].numpy(), rtol=1e-6)
    np.testing.assert_array_equal(fused["main_correct"].numpy(), ref["main_correct"].numpy())
    assert 0 < ref["main_correct"].numpy().mean() < 1  # some tokens predicted right, some wrong
    for got, want in zip(fused_grads, ref_grads):
        np.testing.assert_allclose(got, want, atol=1e-6)
