"""ElectraPretrainer: loss value, gradient flow, embedding sharing, MLM objective."""

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from electra_tf.model import masking
from electra_tf.training.optimization import create_optimizer
from electra_tf.model.networks import pretrainer_from_config
from pretrain_testutil import SPECIAL_IDS, random_example, tiny_config


def make_batch(batch_size=4, seq_length=32, vocab_size=64, seed=0):
    rng = np.random.RandomState(seed)
    rows = [random_example(rng, seq_length, vocab_size) for _ in range(batch_size)]
    ids, mask, segments = (tf.constant(np.stack(x), tf.int32) for x in zip(*rows))
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def build(**overrides):
    model = pretrainer_from_config(tiny_config(dropout_rate=0.0, **overrides),
                              special_token_ids=SPECIAL_IDS)
    return model.build_all()


def numpy_layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def numpy_mlm_logits(model, hidden):
    head = model.generator_head
    kernel, bias = (w.numpy() for w in head.dense.weights)
    x = hidden @ kernel + bias
    x = 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))
    x = numpy_layer_norm(x, *(w.numpy() for w in head.layer_norm.weights))
    embeddings = model.generator.embeddings.token_embedding.embeddings.numpy()
    return x @ embeddings.T + head.output_bias.numpy()


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_joint_loss_equals_independent_numpy_computation():
    model = build()
    batch = make_batch()
    seeds = masking.example_seeds(0, 0, tf.range(4))
    out = model.compute_losses(batch, training=False, seeds=seeds)
    masked = out["masked"]
    ids, mask = batch["input_ids"].numpy(), batch["input_mask"].numpy()
    positions, weights = masked.positions.numpy(), masked.weights.numpy()

    generator_hidden = model.generator({"token_ids": masked.input_ids, "segment_ids": batch["segment_ids"],
                                        "padding_mask": batch["input_mask"]}).numpy()
    gathered = np.take_along_axis(generator_hidden, positions[..., None], axis=1)
    gen_logits = numpy_mlm_logits(model, gathered)
    np.testing.assert_allclose(gen_logits, out["gen_logits"].numpy(), atol=1e-4)
    nll = -np.take_along_axis(log_softmax(gen_logits), ids[np.arange(4)[:, None], positions][..., None], -1)[..., 0]
    gen_loss = (nll * weights).sum() / weights.sum()

    fake = ids.copy()
    sampled = out["sampled"].numpy()
    for row in range(4):
        chosen = weights[row] > 0
        fake[row, positions[row][chosen]] = sampled[row][chosen]
    np.testing.assert_array_equal(fake, out["fake_ids"].numpy())
    labels = (fake != ids).astype(np.float64)
    disc_logits = model({**batch, "input_ids": tf.constant(fake)}).numpy().astype(np.float64)
    sigmoid_ce = np.maximum(disc_logits, 0) - disc_logits * labels + np.log1p(np.exp(-np.abs(disc_logits)))
    disc_loss = (sigmoid_ce * mask).sum() / mask.sum()

    np.testing.assert_allclose(out["gen_loss"].numpy(), gen_loss, rtol=1e-5)
    np.testing.assert_allclose(out["disc_loss"].numpy(), disc_loss, rtol=1e-5)
    np.testing.assert_allclose(out["loss"].numpy(), gen_loss + 50.0 * disc_loss, rtol=1e-5)


def gradients_of(model, loss_name):
    batch = make_batch()
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        out = model.compute_losses(batch, training=False, seeds=masking.example_seeds(0, 0, tf.range(4)))
    grads = tape.gradient(out[loss_name], variables)
    return {v.path: (None if g is None else float(tf.norm(tf.convert_to_tensor(g)))) for v, g in zip(variables, grads)}


def is_zero(norm):
    return norm is None or norm == 0.0


def test_discriminator_loss_does_not_reach_the_generator():
    model = build()
    norms = gradients_of(model, "disc_loss")
    generator_own = [p for p in norms if p.startswith(("generator/", "generator_head/"))
                     and "/embeddings/" not in p]
    assert generator_own, "no generator variables found"
    assert all(is_zero(norms[p]) for p in generator_own), {p: norms[p] for p in generator_own}
    shared = [p for p in norms if "/embeddings/" in p and not p.startswith("generator_head")]
    assert shared and all(not is_zero(norms[p]) for p in shared), {p: norms[p] for p in shared}
    disc = [p for p in norms if p.startswith(("discriminator/transformer", "discriminator_head/"))]
    assert all(not is_zero(norms[p]) for p in disc)


def test_generator_loss_reaches_generator_and_embeddings_only():
    model = build()
    norms = gradients_of(model, "gen_loss")
    generator_own = [p for p in norms if p.startswith(("generator/transformer", "generator_head/"))]
    assert generator_own and all(not is_zero(norms[p]) for p in generator_own)
    assert not is_zero(norms["discriminator/embeddings/token_embedding/embeddings"])
    disc = [p for p in norms if p.startswith(("discriminator/transformer", "discriminator_head/"))]
    assert disc and all(is_zero(norms[p]) for p in disc)


def test_embeddings_are_shared_objects_and_saved_once(tmp_path):
    model = build(max_position_embeddings=40)
    assert model.generator.embeddings is model.discriminator.embeddings
    disc_ids = {id(v) for v in model.discriminator.embeddings.weights}
    gen_ids = {id(v) for v in model.generator.embeddings.weights}
    assert disc_ids == gen_ids and len(disc_ids) == 5
    assert len({id(v) for v in model.weights}) == len(model.weights)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    saved = tf.train.list_variables(path)
    shapes = [shape for _, shape in saved]
    assert sum("token_embedding" in name for name, _ in saved) == 1
    config = model.config
    assert shapes.count([config.vocab_size, config.embedding_size]) == 1
    assert shapes.count([config.max_position_embeddings, config.embedding_size]) == 1


def test_train_step_reduces_loss_on_a_fixed_batch():
    model = build(num_train_steps=100, num_warmup_steps=0, learning_rate=3e-3)
    model.compile(optimizer=create_optimizer(model.config))
    batch = make_batch(batch_size=8)
    step = tf.function(model.replica_step)
    first = [float(step(batch)["loss"]) for _ in range(3)][0]
    for _ in range(25):
        last = float(step(batch)["loss"])
    assert last < first * 0.8
    results = model.metric_results()
    for name in ("disc_auc", "disc_precision", "disc_recall", "replaced_fraction", "gen_accuracy"):
        assert 0.0 <= float(results[name]) <= 1.0


def test_gradients_are_clipped_to_global_norm():
    """With plain SGD (lr 1) the weight change is the clipped gradient: its global norm is clip_norm."""
    import keras

    clip_norm = 1e-3
    model = build(clip_norm=clip_norm)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0))
    before = [v.numpy().copy() for v in model.trainable_variables]
    out = model.replica_step(make_batch())
    assert float(out["grad_norm"]) > 100 * clip_norm  # the pre-clip norm is reported, and clipping is active
    change = tf.linalg.global_norm([tf.constant(b) - v for b, v in zip(before, model.trainable_variables)])
    np.testing.assert_allclose(float(change), clip_norm, rtol=1e-3)


@pytest.mark.parametrize("mlm_encoder,hidden", [("generator", 16), ("discriminator", 32)])
def test_mlm_objective(mlm_encoder, hidden):
    model = build(objective="mlm", mlm_encoder=mlm_encoder)
    assert model.discriminator is None and model.encoder_for_finetuning is model.generator
    assert model.generator.hidden_size == hidden
    model.compile(optimizer=create_optimizer(model.config))
    out = model.replica_step(make_batch())
    assert set(out) == {"loss", "gen_loss", "grad_norm", "nonfinite"} and float(out["nonfinite"]) == 0.0
    np.testing.assert_allclose(out["loss"].numpy(), out["gen_loss"].numpy())
    assert "disc_auc" not in model.metric_results()


def test_model_only_checkpoint_restores_every_variable(tmp_path):
    source = build()
    for variable in source.weights:
        variable.assign(tf.random.normal(variable.shape, seed=3))
    path = tf.train.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = build()
    tf.train.Checkpoint(model=target).restore(path).expect_partial()
    assert len(source.weights) == len(target.weights)
    for a, b in zip(source.weights, target.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
