"""Continued pre-training from a released checkpoint (official TF1, or Hugging Face discriminator/ + generator/):
both networks and heads are the checkpoint's, the optimizer and the schedule start over at step 0.

The checkpoints are the conversion fixtures (tests/fixtures/hf_electra, and the official one test_convert derives
from it with adam_m = 0.5, adam_v = 0.25 and global_step = 1000 beside the weights, as a real run saves them).
"""

import json
import logging
import os
import shutil

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import ElectraConfig
from electra_tf.convert import api as convert_api
from electra_tf.convert import keras_model, names
from electra_tf.convert.vocab import special_token_ids
from electra_tf.text.manifest import sha256_file
from electra_tf.training import loop, pretraining, restore, vocab_extension
from pretrain_testutil import write_shards
from test_convert import HF_DIR, fixture_tool

CHECKPOINT_STEP = 1000  # the official fixture's global_step
PARTS = ("discriminator", "discriminator_head", "generator", "generator_head")
LOADED = "loaded discriminator, discriminator_head, generator, generator_head; fresh (as built): nothing"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{format: path} of the two released-checkpoint formats holding both networks."""
    directory = tmp_path_factory.mktemp("official")
    tool = fixture_tool()
    prefix = str(directory / f"model.ckpt-{CHECKPOINT_STEP}")
    tool.write_official_checkpoint(tool.official_variables(str(HF_DIR)), prefix)
    shutil.copy(HF_DIR / "discriminator" / "vocab.txt", directory)
    return {"official": str(directory), "hf": str(HF_DIR)}


def run_config(path: str, **overrides) -> ElectraConfig:
    """The checkpoint's architecture with a short schedule whose rate differs at step 0 and the checkpoint's step."""
    values = dict(max_seq_length=16, train_batch_size=4, num_train_steps=5000, num_warmup_steps=2000,
                  learning_rate=1e-3)
    return convert_api.read_config(path)[0].replace(**{**values, **overrides})


@pytest.mark.parametrize("source_format", ["official", "hf"])
def test_both_networks_from_the_checkpoint_and_a_fresh_optimizer_at_step_0(checkpoints, source_format, tmp_path,
                                                                          caplog):
    path = checkpoints[source_format]
    assert convert_api.detect_format(path) == source_format
    config = run_config(path)
    model, optimizer = pretraining.build_model(config, tf.distribute.get_strategy(),
                                               special_token_ids(convert_api.checkpoint_vocab(path)), seed=0,
                                               mixed_precision="none")
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer), str(tmp_path), 1)
    with caplog.at_level(logging.INFO):
        replay = restore.restore_or_initialize(manager, manager._checkpoint, model, optimizer, path)
    assert replay is False and f"Initialised weights from {path}: {LOADED}" in caplog.text

    assert loop.current_step(optimizer) == 0
    assert loop.learning_rate_at(optimizer, loop.current_step(optimizer)) == 0.0  # the warm-up's first rate
    assert loop.learning_rate_at(optimizer, CHECKPOINT_STEP) > 0.0  # what a loaded global_step would have given
    slots = [v for v in optimizer.variables if "momentum" in v.path or "velocity" in v.path]
    assert len(slots) == 2 * len(model.trainable_variables)
    assert not any(np.any(v.numpy()) for v in slots)  # the checkpoint's adam_m/adam_v (0.5, 0.25) stay out

    source = convert_api.open_foreign(path, source_format).source
    loaded = keras_model.read_weights(model, PARTS)
    expected = source.arrays(names.expected_shapes(config, PARTS))
    assert {names.part_of(key) for key in loaded} == set(PARTS)
    for key, value in expected.items():  # the generator is the checkpoint's, not a fresh one
        np.testing.assert_array_equal(loaded[key], value, err_msg=key)



def test_an_export_gives_its_weights_but_not_the_step_and_optimizer_state_its_run_saved_with(checkpoints, tmp_path,
                                                                                          caplog):
    """Keras writes a compiled model's optimizer into `pretrainer.weights.h5`: continuing from one of our exports
    once took its run's step (a run from the 750-step export started at 750) and Adam's m and v."""
    from electra_tf.convert import export_dir as export_format

    path = checkpoints["hf"]
    config, special = run_config(path), special_token_ids(convert_api.checkpoint_vocab(path))
    strategy = tf.distribute.get_strategy()
    saved, saved_optimizer = pretraining.build_model(config, strategy, special, seed=0, mixed_precision="none")
    saved_optimizer.iterations.assign(750)
    for variable in saved_optimizer.variables:
        if "momentum" in variable.path or "velocity" in variable.path:
            variable.assign(tf.ones_like(variable))
    export = export_format.save_ours(saved, str(tmp_path / "export"), vocab_file=convert_api.checkpoint_vocab(path), step=750,
                            keras_hub=False)
    with h5py.File(os.path.join(export, export_format.PRETRAINER_WEIGHTS)) as weights:  # exports written now hold none
        assert "optimizer" not in weights and "discriminator" in weights
    # An export written before that holds its run's optimizer: it must not become this run's either.
    keras.saving.save_weights(saved, os.path.join(export, export_format.PRETRAINER_WEIGHTS))
    model, optimizer = pretraining.build_model(config, strategy, special, seed=1, mixed_precision="none")
    with caplog.at_level(logging.INFO):
        restore.initialize_from(model, export)
    assert loop.current_step(optimizer) == 0
    assert not any(np.any(v.numpy()) for v in optimizer.variables if "momentum" in v.path or "velocity" in v.path)
    for key, value in keras_model.read_weights(saved, PARTS).items():  # the weights are the export's
        np.testing.assert_array_equal(keras_model.read_weights(model, PARTS)[key], value, err_msg=key)

def extended_data(data_dir: str, checkpoint_vocab: str, new_tokens: list) -> dict:
    """Shards of the checkpoint's vocabulary with `new_tokens` appended (ids up to the new size)."""
    with open(checkpoint_vocab) as f:
        tokens = f.read().split("\n")[:-1] + new_tokens
    manifest = write_shards(data_dir, num_examples=16, num_shards=1, seq_length=16, vocab_size=len(tokens))
    with open(manifest["vocab_file"], "w") as f:
        f.write("\n".join(tokens) + "\n")
    manifest.update(vocab_sha256=sha256_file(manifest["vocab_file"]),
                    special_token_ids=special_token_ids(manifest["vocab_file"]))
    with open(os.path.join(data_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return manifest


@pytest.mark.slow  # ~40 s on 2 cores, most of it tracing the step
def test_a_run_from_the_official_checkpoint_with_an_extended_vocabulary(checkpoints, tmp_path, caplog):
    """The run's own path (`pretraining.train`): the data's vocabulary decides the rows, the run counts its steps
    from 0 (its checkpoints are ckpt-1, ckpt-2, not the checkpoint's step + 1)."""
    path, data_dir, model_dir = checkpoints["official"], str(tmp_path / "data"), str(tmp_path / "run")
    manifest = extended_data(data_dir, convert_api.checkpoint_vocab(path), ["zebra", "quark", "##ology"])
    config = run_config(path, num_train_steps=2, num_warmup_steps=1)
    config = config.replace(vocab_size=vocab_extension.data_vocab_size(
        path, config.vocab_size, convert_api.checkpoint_vocab(path), manifest, data_dir))
    options = pretraining.TrainOptions(data_dir=data_dir, model_dir=model_dir, init_checkpoint=path, log_steps=1,
                                       steps_per_loop=1, save_checkpoints_steps=1, eval_batches=0, export=False)
    with caplog.at_level(logging.INFO):
        pretraining.train(config, options, tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert "extended vocabulary: 1000 -> 1003 (3 new rows from their pieces' mean)" in caplog.text
    assert LOADED in caplog.text
    assert tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")).endswith("ckpt-2")
    with open(os.path.join(model_dir, "train_log.jsonl")) as f:
        records = [json.loads(line) for line in f if '"learning_rate"' in line]
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["learning_rate"] == pytest.approx(1e-3 * 0.5)  # step 1 of 2: warm-up done, half decayed


def test_the_log_names_the_parts_left_fresh(checkpoints, caplog):
    """A discriminator alone (Hugging Face's ElectraForPreTraining folder): the generator and its head stay as built."""
    config = run_config(checkpoints["hf"])
    model = keras_model.build_pretrainer(config)
    fresh = keras_model.read_weights(model, ("generator", "generator_head"))
    with caplog.at_level(logging.INFO):
        restore.initialize_from(model, str(HF_DIR / "discriminator"))
    assert "loaded discriminator, discriminator_head; fresh (as built): generator, generator_head" in caplog.text
    for key, value in keras_model.read_weights(model, ("generator", "generator_head")).items():
        np.testing.assert_array_equal(value, fresh[key], err_msg=key)
