"""Gradient-disentangled embedding sharing: gradient routing, initial equivalence, folding on export."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import convert
from electra_tf.model import masking
from electra_tf.convert import export_dir as export_format
from electra_tf.model.embeddings import ElectraEmbeddings, GdesEmbeddings
from electra_tf.model.networks import pretrainer_from_config
from pretrain_testutil import SPECIAL_IDS, tiny_config
from test_pretrainer import make_batch


def build(**overrides):
    config = tiny_config(embedding_sharing="gdes", dropout_rate=0.0, **overrides)
    return pretrainer_from_config(config, special_token_ids=SPECIAL_IDS).build_all()


def gradients(model, loss_name):
    with tf.GradientTape() as tape:
        out = model.compute_losses(make_batch(), training=False, seeds=masking.example_seeds(0, 0, tf.range(4)))
    variables = model.trainable_variables
    return {v.path: g for v, g in zip(variables, tape.gradient(out[loss_name], variables))}


def nonzero(g):
    return g is not None and float(tf.norm(tf.convert_to_tensor(g))) > 0


def test_discriminator_loss_trains_only_the_deltas_not_the_shared_block():
    model = build()
    grads = gradients(model, "disc_loss")
    shared = [p for p in grads if p.startswith("generator/embeddings/")]
    deltas = [p for p in grads if p.startswith("discriminator/embeddings/")]
    assert len(shared) == 5 and len(deltas) == 5, (shared, deltas)
    assert not any(nonzero(grads[p]) for p in shared), shared
    assert all(nonzero(grads[p]) for p in deltas), deltas


def test_generator_loss_trains_the_shared_block_and_not_the_deltas():
    grads = gradients(build(), "gen_loss")
    assert nonzero(grads["generator/embeddings/token_embedding/embeddings"])
    assert not any(nonzero(g) for p, g in grads.items() if p.startswith("discriminator/"))


def test_zero_deltas_reproduce_the_shared_embeddings():
    model = build()
    gdes = model.discriminator.embeddings
    assert isinstance(gdes, GdesEmbeddings) and gdes.base is model.generator.embeddings
    ids = make_batch()["input_ids"]
    segments = make_batch()["segment_ids"]
    np.testing.assert_allclose(gdes(ids, segments).numpy(), gdes.base(ids, segments).numpy(), atol=1e-5)


def test_export_folds_the_deltas_into_a_plain_encoder(tmp_path):
    model = build()
    for delta in model.discriminator.embeddings.deltas.values():
        delta.assign(tf.random.normal(delta.shape, stddev=0.1, seed=1))
    batch = make_batch()
    inputs = {"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]}
    expected = model.discriminator(inputs).numpy()
    export_dir = export_format.save_ours(model, str(tmp_path / "export"))
    encoder, config, _ = convert.load_encoder(export_dir)
    assert config.embedding_sharing == "gdes" and type(encoder.embeddings) is ElectraEmbeddings
    np.testing.assert_allclose(encoder(inputs).numpy(), expected, atol=1e-5)
    shared = model.generator.embeddings.token_embedding.embeddings.numpy()
    delta = model.discriminator.embeddings.deltas["token"].numpy()
    np.testing.assert_allclose(encoder.embeddings.token_embedding.embeddings.numpy(), shared + delta, atol=1e-6)


def test_gdes_needs_a_generator():
    with pytest.raises(ValueError, match="embedding_sharing='gdes' needs a generator"):
        tiny_config(embedding_sharing="gdes", objective="mlm")


def test_gdes_train_step_moves_deltas_and_keeps_embeddings_shared_with_the_generator():
    from electra_tf.training.optimization import create_optimizer

    model = build(num_warmup_steps=0)
    model.compile(optimizer=create_optimizer(model.config))
    out = tf.function(model.train_step)(make_batch())
    assert np.isfinite(float(out["loss"]))
    assert float(tf.norm(model.discriminator.embeddings.deltas["token"])) > 0
    assert model.generator_head.token_embedding is model.generator.embeddings.token_embedding
