"""Electric: the two-tower cloze generator and the NCE loss, checked against NumPy."""

import math
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.convert import ConversionError, initialize_pretrainer, save_hf
from electra_tf.convert.cli import main as convert_main
from electra_tf.convert.export_dir import save_ours
from electra_tf.model import masking
from electra_tf.model.networks import pretrainer_from_config
from electra_tf.training.optimization import create_optimizer
from pretrain_testutil import SPECIAL_IDS, tiny_config, write_vocab
from test_objectives import losses_and_gradients_by_kernels, masked_position_grid, sigmoid_ce
from test_pretrainer import log_softmax, make_batch


def electric_config(**overrides):
    return tiny_config(objective="electric", dropout_rate=0.0, num_layers=1, generator_num_layers=1, **overrides)


@pytest.fixture(scope="module")
def model():
    return pretrainer_from_config(electric_config(), special_token_ids=SPECIAL_IDS).build_all()


def run(model, batch):
    return model.compute_losses(batch, training=False, seeds=masking.example_seeds(0, 0, tf.range(4)))


def cloze_log_probs(model, batch, token_ids):
    """NumPy log q(· | context) at every position, from the generator run on `token_ids`."""
    inputs = {"token_ids": token_ids, "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]}
    return log_softmax(model.generator_head(model.generator(inputs)).numpy().astype(np.float64))


def test_nce_loss_equals_numpy_from_energies_and_log_q(model):
    batch = make_batch()
    out = run(model, batch)
    ids, mask = batch["input_ids"].numpy(), batch["input_mask"].numpy().astype(np.float64)
    fake = out["fake_ids"].numpy()
    # Noise labels: every drawn position, whether or not the sample equals the original token.
    labels = masked_position_grid(out, ids.shape)
    np.testing.assert_array_equal(out["labels"].numpy(), labels)
    inputs = {"token_ids": out["fake_ids"], "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]}
    energy = model.discriminator_head(model.discriminator(inputs)).numpy().astype(np.float64)
    # q is the cloze model on the uncorrupted context, read at the corrupted token.
    log_q = np.take_along_axis(cloze_log_probs(model, batch, batch["input_ids"]), fake[..., None], -1)[..., 0]
    logits = energy + log_q + math.log(0.15 / 0.85)
    disc_loss = (sigmoid_ce(logits, labels) * mask).sum() / mask.sum()
    np.testing.assert_allclose(out["disc_loss"].numpy(), disc_loss, rtol=1e-5)

    # The cloze loss covers every candidate token (not [CLS], [SEP], [PAD]), not only the drawn ones.
    nll = -np.take_along_axis(cloze_log_probs(model, batch, batch["input_ids"]), ids[..., None], -1)[..., 0]
    candidates = mask * ~np.isin(ids, list(SPECIAL_IDS.values()))
    gen_loss = (nll * candidates).sum() / candidates.sum()
    np.testing.assert_allclose(out["gen_loss"].numpy(), gen_loss, rtol=1e-5)
    np.testing.assert_allclose(out["loss"].numpy(), gen_loss + 50 * disc_loss, rtol=1e-5)
    assert candidates.sum() > 2 * labels.sum()  # the cloze loss really covers more than the drawn positions


def test_cloze_model_at_a_position_never_sees_its_token_but_sees_both_sides(model):
    batch = make_batch()
    ids = batch["input_ids"].numpy()
    t = 5  # inside every row of make_batch (sequences are ≥ 8 tokens), away from the ends where the roll wraps
    base = cloze_log_probs(model, batch, batch["input_ids"])
    for changed_at, should_change in ((t, False), (t - 1, True), (t + 1, True)):
        other = ids.copy()
        other[:, changed_at] = 5 + (other[:, changed_at] - 5 + 7) % 59  # another ordinary token
        changed = cloze_log_probs(model, batch, tf.constant(other))
        moved = np.abs(changed[:, t] - base[:, t]).max()
        assert (moved > 1e-4) == should_change, (changed_at, moved)


def test_no_gradient_flows_through_sampling_or_log_q(model):
    batch = make_batch()
    with tf.GradientTape(persistent=True) as tape:
        out = run(model, batch)
    generator_own = [v for v in model.trainable_variables if v.path.startswith(("generator/", "generator_head/"))]
    main_own = [v for v in model.trainable_variables
                if v.path.startswith(("discriminator/transformer", "discriminator_head/"))]
    assert {v.path.split("/")[1] for v in generator_own} >= {"generator_ltr", "generator_rtl"}
    assert all(g is None for g in tape.gradient(out["disc_loss"], generator_own))
    assert all(g is not None for g in tape.gradient(out["disc_loss"], main_own))
    assert all(g is None for g in tape.gradient(out["gen_loss"], main_own))
    assert all(g is not None for g in tape.gradient(out["gen_loss"], generator_own))  # both towers and the head


def test_the_fused_cloze_softmax_equals_the_reference_ops():
    """The cloze loss and log q from the XLA:CPU softmax pass: the same values and gradients."""
    results = losses_and_gradients_by_kernels(electric_config(), "loss", lambda model: run(model, make_batch()))
    (ref, ref_grads), (fused, fused_grads) = results["reference"], results["xla_cpu"]
    for name in ("gen_loss", "disc_loss", "log_q"):
        np.testing.assert_allclose(fused[name].numpy(), ref[name].numpy(), rtol=1e-5, atol=1e-6)
    for got, want in zip(fused_grads, ref_grads):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_electric_pretrains_a_few_steps_with_finite_falling_loss():
    config = electric_config(learning_rate=2e-3, num_warmup_steps=1, num_train_steps=10)
    model = pretrainer_from_config(config, special_token_ids=SPECIAL_IDS).build_all()
    model.compile(optimizer=create_optimizer(config))
    batch = make_batch(batch_size=8)
    losses = [model.replica_step(batch) for _ in range(6)]
    assert all(np.isfinite(float(v)) for step in losses for v in step.values())
    total = [float(step["loss"]) for step in losses]
    assert np.mean(total[-2:]) < np.mean(total[:2])
    assert float(losses[-1]["gen_loss"]) < float(losses[0]["gen_loss"])
    assert model.encoder_for_finetuning is model.discriminator


def test_converters_refuse_the_two_tower_generator_in_one_line_and_export_the_discriminator(model, tmp_path, capsys):
    vocab = write_vocab(str(tmp_path / "vocab.txt"), model.config.vocab_size)
    with pytest.raises(ConversionError) as refused:
        save_hf(model, model.config, str(tmp_path / "hf"), vocab)
    assert "\n" not in str(refused.value) and "objective='electric'" in str(refused.value)
    export = save_ours(model, str(tmp_path / "export"), vocab, keras_hub=False)
    for target in ("hf", "ours"):
        assert convert_main([f"--to={target}", f"--input={export}", f"--output={tmp_path / target}"]) == 2
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and "objective='electric'" in error and "--to=keras_hub" in error
    assert convert_main(["--to=keras_hub", f"--input={export}", f"--output={tmp_path / 'preset'}"]) == 0
    assert "the discriminator alone" in capsys.readouterr().out
    with open(tmp_path / "preset" / "config.json") as f:
        assert '"hidden_dim": 32' in f.read()  # the discriminator's width (the towers are 16 wide)
    with pytest.raises(ConversionError, match="objective='electric'"):  # continued pre-training from HF
        initialize_pretrainer(model, str(Path(__file__).parent / "fixtures" / "hf_electra"))
