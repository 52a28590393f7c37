"""A new objective is one object plus its registry line (issue #57): this file defines one and trains with it.

The toy: replaced-token detection against uniform noise, with the discriminator alone. At ELECTRA's masked
positions the input gets uniform draws over the vocabulary (never the original token), and the discriminator's
one-unit head learns which tokens were replaced (sigmoid CE over every real token). No generator, its own metric
(`toy_detected`, the fraction of replaced tokens it finds). Nothing outside this file names it: the run, its FLOP
count (logged before the first step on CPUs), its metrics, its checkpoint and its export all go through the
registry entry.
"""

import logging
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import objective_registry
from electra_tf.convert import export_dir
from electra_tf.model import flops, masking, networks
from electra_tf.model.objectives.base import Objective, register, unregister
from electra_tf.ops.replicas import all_reduce_sum
from electra_tf.options import TrainOptions
from electra_tf.training import pretraining
from pretrain_testutil import SPECIAL_IDS, tiny_config, write_shards

NAME = "toy_uniform_rtd"
SEQ, BATCH = 16, 4


class UniformNoiseDetection(Objective):
    """The discriminator detects uniform replacements at the masked positions."""

    step_output_names = ("loss", "grad_norm")

    def build_networks(self, config, execution):
        discriminator = networks.built_discriminator(config, execution)
        return networks.PretrainingNetworks(None, discriminator, None, networks.discriminator_head(config, execution))

    def compute_losses(self, model, batch, seeds, normalizers, training):
        input_ids, input_mask = batch["input_ids"], batch["input_mask"]
        masked = model.mask(input_ids, input_mask, seeds)
        noise = masking.uniform_sample(seeds, model.config.vocab_size, masked.original_ids, disallow_original=True)
        fake_ids, labels = masking.corrupt(input_ids, masked, noise)
        hidden = model.discriminator(model.encoder_inputs(fake_ids, batch), training=training)
        logits = tf.cast(model.discriminator_head(hidden), tf.float32)
        weights = tf.cast(input_mask, tf.float32)
        num_tokens = (all_reduce_sum(tf.reduce_sum(weights)) if normalizers is None else normalizers["num_tokens"])
        losses = tf.nn.sigmoid_cross_entropy_with_logits(labels, logits)
        return {"loss": tf.reduce_sum(losses * weights) / tf.maximum(num_tokens, 1.0), "labels": labels,
                "logits": logits, "weights": weights}

    def create_metrics(self):
        return {**super().create_metrics(), "toy_detected": keras.metrics.Recall(name="toy_detected")}

    def update_metrics(self, model, batch, out, add_partial):
        add_partial("loss", out["loss"])
        model.tracked["toy_detected"].update_state(out["labels"], tf.sigmoid(out["logits"]),
                                                   sample_weight=out["weights"])

    def call(self, model, batch, training=False):
        hidden = model.discriminator(model.encoder_inputs(batch["input_ids"], batch), training=training)
        return model.discriminator_head(hidden)

    def forward_flops_per_sequence(self, config, seq_length):
        encoder, width = flops.encoder_of(config, "discriminator", seq_length)
        return encoder + flops.discriminator_head_forward_flops(seq_length, width)

    def encoder_roles(self, config):
        return ["discriminator"]


@pytest.fixture
def toy():
    register(NAME, UniformNoiseDetection())
    yield objective_registry.get(NAME)
    unregister(NAME)


def config():
    return tiny_config(objective=NAME, num_layers=1, generator_num_layers=1, max_seq_length=SEQ,
                       max_position_embeddings=SEQ, train_batch_size=BATCH, num_train_steps=3, num_warmup_steps=1)


def independent_train_flops(config) -> int:
    """3 × batch × (the discriminator's matmuls + its one-unit head), written out from the shapes."""
    d, seq = config.discriminator, SEQ
    projection = 2 * seq * config.embedding_size * d.hidden_size
    layer = 2 * seq * (4 * d.hidden_size ** 2 + 2 * seq * d.hidden_size + 2 * d.hidden_size * d.intermediate_size)
    head = 2 * seq * (d.hidden_size ** 2 + d.hidden_size)
    return 3 * BATCH * (projection + d.num_layers * layer + head)


def test_a_registered_toy_objective_trains_counts_its_flops_and_exports(toy, tmp_path, caplog):
    assert NAME in objective_registry.names() and config().objective == NAME  # passes the config's validation
    data_dir = str(tmp_path / "data")
    write_shards(data_dir, num_examples=16, num_shards=1, seq_length=SEQ)
    model_dir = str(tmp_path / "run")
    options = TrainOptions(data_dir=data_dir, model_dir=model_dir, log_steps=1, steps_per_loop=1,
                           save_checkpoints_steps=1, shuffle_buffer=8, eval_every_steps=0)
    with caplog.at_level(logging.INFO):
        history = pretraining.train(config(), options, tf.distribute.OneDeviceStrategy("/cpu:0"))

    assert [h["step"] for h in history] == [1, 2, 3]
    assert all({"loss", "toy_detected", "grad_norm"} <= set(h) and "gen_loss" not in h for h in history)
    assert all(np.isfinite(h["loss"]) and 0.0 <= h["toy_detected"] <= 1.0 for h in history)

    expected = independent_train_flops(config())
    assert flops.train_flops_per_step(config()) == expected
    rtd_flops = flops.train_flops_per_step(config().replace(objective="rtd"))
    assert f"{expected:.2g}" != f"{rtd_flops:.2g}"  # the log line below tells the two apart
    assert f"{expected:.2g} training FLOPs per step" in caplog.text

    export = os.path.join(model_dir, "export")
    exported_config, meta = export_dir.read_ours_config(export)[0], export_dir.read_export_metadata(export)
    assert exported_config.objective == NAME and meta["finetuning_role"] == "discriminator" and meta["step"] == 3
    encoder = export_dir.load_ours_encoder(export)[0]
    pretrainer = networks.pretrainer_from_config(exported_config, SPECIAL_IDS).build_all()
    assert pretrainer.objective is toy and pretrainer.generator is None
    untrained = pretrainer.discriminator.embeddings.token_embedding.embeddings.numpy()
    pretrainer.load_weights(os.path.join(export, export_dir.PRETRAINER_WEIGHTS))
    trained = pretrainer.discriminator.embeddings.token_embedding.embeddings.numpy()
    assert not np.allclose(untrained, trained)

    ids = np.random.RandomState(3).randint(5, 64, size=(2, SEQ)).astype("int32")
    batch = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
    inputs = pretrainer.encoder_inputs(ids, batch)
    np.testing.assert_allclose(encoder(inputs), pretrainer.discriminator(inputs), rtol=1e-6, atol=1e-6)
    assert tuple(pretrainer(batch).shape) == (2, SEQ)


def test_the_registry_refuses_a_second_entry_of_a_name_and_the_config_an_unregistered_one(toy):
    with pytest.raises(ValueError, match=f"objective '{NAME}' is already registered"):
        register(NAME, UniformNoiseDetection())
    with pytest.raises(ValueError, match="disallow_correct=True: needs an objective with a generator"):
        config().replace(disallow_correct=True)  # the registry line says: no generator
    unregister(NAME)
    try:
        with pytest.raises(ValueError, match=f"objective must be one of .*'electric'.*got '{NAME}'"):
            config()
    finally:
        register(NAME, toy)
