"""`ElectraPretrainer` under Keras' `fit` with 2 mirrored replicas logs the global values the run logs."""

import keras
import pytest
import tensorflow as tf

from electra_tf.options import ExecutionOptions
from electra_tf.training import input_pipeline, pretraining
from pretrain_testutil import mirrored_cpus, write_shards
from test_training import run, small

KEYS = ("loss", "gen_loss", "disc_loss", "gen_accuracy", "disc_accuracy", "disc_auc", "replaced_fraction", "grad_norm")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=64, num_shards=2)
    return path


@pytest.mark.slow  # ~23 s: Keras fit under two replicas, kept for -m slow to hold the default suite to 15 minutes
def test_fit_under_two_replicas_logs_what_the_run_logs(data_dir, tmp_path):
    config = small(dropout_rate=0.0, num_train_steps=4, train_batch_size=8)
    execution = ExecutionOptions(gradient_accumulation_steps=1).resolve({"CPU"})
    logged = run(config, data_dir, str(tmp_path / "run"), strategy=mirrored_cpus(), log_steps=4, steps_per_loop=4,
                 save_checkpoints_steps=4, export=False, execution=execution)[-1]

    strategy = mirrored_cpus()
    keras.utils.set_random_seed(0)  # as the run: the same initial weights
    manifest = input_pipeline.load_checked_manifest(data_dir, config)
    model, _ = pretraining.build_model(config, strategy, manifest["special_token_ids"], 0, "none", execution)
    # The run's first 4 batches, kept: `fit` may iterate a dataset more than once, and each new iterator of
    # the shuffled pipeline draws another order.
    batches = list(input_pipeline.pretraining_dataset(data_dir, manifest, config.train_batch_size, seed=0).take(4))
    dataset = tf.data.Dataset.from_tensor_slices({key: tf.stack([b[key] for b in batches]) for key in batches[0]})
    history = model.fit(dataset, epochs=1, verbose=0, shuffle=False, callbacks=[
        keras.callbacks.TensorBoard(str(tmp_path / "tensorboard")),
        keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))])
    for key in KEYS:
        fitted = history.history[key][-1]
        assert abs(fitted - logged[key]) <= 1e-5 * max(1.0, abs(logged[key])), (key, fitted, logged[key])
    assert any(path.name.startswith("events.out.tfevents") for path in (tmp_path / "tensorboard" / "train").iterdir())
