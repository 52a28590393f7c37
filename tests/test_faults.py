"""Faults in pre-training: non-finite steps, a corrupt newest checkpoint, an unwritable model_dir."""

import glob
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.training import loop, pretraining
from electra_tf.model.pretrainer import ElectraPretrainer
from pretrain_testutil import tiny_config, write_shards
from test_training import checkpoint_values, run, small


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=96, num_shards=3)
    return path


@pytest.fixture
def nan_at_step_3(monkeypatch):
    """The 3rd training batch's loss is NaN, and so are its gradients (later batches are fine)."""
    original = ElectraPretrainer.compute_losses
    calls = tf.Variable(0)

    def poisoned(self, batch, training=True, seeds=None):
        out = original(self, batch, training=training, seeds=seeds)
        if training:
            calls.assign_add(1)
            out["loss"] = out["loss"] * tf.where(tf.equal(calls, 3), np.nan, 1.0)
        return out

    monkeypatch.setattr(ElectraPretrainer, "compute_losses", poisoned)


def test_a_nonfinite_step_stops_training_naming_the_step_and_the_last_good_checkpoint(
        data_dir, tmp_path, nan_at_step_3):
    model_dir = str(tmp_path / "run")
    with pytest.raises(loop.NonFiniteError, match=r"step 3: .*not finite.*Last good checkpoint: .*ckpt-2"):
        run(small(num_train_steps=6), data_dir, model_dir, steps_per_loop=6, save_checkpoints_steps=2)
    assert sorted(os.path.basename(p) for p in glob.glob(f"{model_dir}/checkpoints/ckpt-*.index")) == ["ckpt-2.index"]
    assert all(np.isfinite(v).all() for v in checkpoint_values(model_dir).values())
    assert not os.path.exists(os.path.join(model_dir, "export"))


def test_skip_nonfinite_steps_counts_them_and_finishes(data_dir, tmp_path, nan_at_step_3):
    model_dir = str(tmp_path / "run")
    history = run(small(num_train_steps=5), data_dir, model_dir, skip_nonfinite_steps=True, export=False)
    assert history[-1]["step"] == 5 and history[-1]["nonfinite_steps_skipped"] == 1
    assert all(np.isfinite(v).all() for v in checkpoint_values(model_dir).values())


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(data_dir, tmp_path, caplog):
    model_dir = str(tmp_path / "run")
    run(small(num_train_steps=6), data_dir, model_dir, stop_after_steps=4, export=False)
    newest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    assert newest.endswith("ckpt-4")
    data_file = glob.glob(newest + ".data-*")[0]
    with open(data_file, "r+b") as f:
        f.truncate(os.path.getsize(data_file) // 2)
    history = run(small(num_train_steps=6), data_dir, model_dir, export=False)
    assert [h["step"] for h in history] == [3, 4, 5, 6]  # resumed from ckpt-2
    assert any("ckpt-4 cannot be read" in r.getMessage() for r in caplog.records)


def test_an_unwritable_model_dir_fails_before_the_first_step(data_dir, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match="--model_dir .*a_file/run is not writable"):
        run(small(), data_dir, str(blocker / "run"))


def test_a_truncated_shard_fails_before_the_first_step_naming_it_and_the_sizes(tmp_path):
    data = str(tmp_path / "data")
    manifest = write_shards(data, num_examples=48, num_shards=3)
    shard = os.path.join(data, manifest["shards"][1])
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:
        f.truncate(size - 100)
    model_dir = str(tmp_path / "run")
    expected = (f"shard {shard} has {size - 100} bytes, the build recorded {size} bytes (truncated or replaced?): "
                "rebuild it with `python -m data_prep.build_pretraining_dataset` (same flags; complete shards are "
                f"kept) or see `python -m data_prep.inspect_shards --verify {data}`")
    with pytest.raises(ValueError) as error:
        run(small(), data, model_dir)
    assert str(error.value) == expected
    assert not os.path.exists(model_dir)  # nothing written: no run config, checkpoint or log


def test_a_truncated_shard_under_skip_corrupt_records_is_read_to_the_cut_and_the_rest_counted(tmp_path, caplog):
    data = str(tmp_path / "data")
    manifest = write_shards(data, num_examples=48, num_shards=3)  # 16 records of ~175 bytes per shard
    shard = os.path.join(data, manifest["shards"][1])
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:  # cuts into its last record
        f.truncate(size - 100)
    history = run(small(num_train_steps=8), data, str(tmp_path / "run"), skip_corrupt_records=True, steps_per_loop=4,
                  log_steps=4, save_checkpoints_steps=8, export=False)
    # 64 examples, 47 readable per pass: the cut is met once.
    assert [h["step"] for h in history] == [4, 8] and history[-1]["skipped_records"] == 1
    assert f"shard {shard} has {size - 100} bytes, the build recorded {size} bytes (truncated?): " \
        "--skip_corrupt_records: its records past the cut are not read, and are counted" in caplog.text
    assert re.search(rf"{re.escape(shard)}: record 15, byte offset \d+: not readable, .*: 1 of its 16 records not "
                     "read", caplog.text), caplog.text


def test_a_build_that_recorded_no_sizes_is_not_size_checked(tmp_path):
    from electra_tf.text.verify import check_shard_sizes

    data = str(tmp_path / "data")
    manifest = write_shards(data, num_examples=16, num_shards=2, record_shards=False)
    shard = os.path.join(data, manifest["shards"][0])
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) - 10)
    check_shard_sizes(data, manifest)  # silent: there is nothing to compare with
    with open(shard + ".done.json", "w") as f:  # a data_prep sidecar records the size
        f.write('{"size_bytes": 1}')
    with pytest.raises(ValueError, match=f"shard {shard} has .* bytes, the build recorded 1 bytes"):
        check_shard_sizes(data, manifest)


@pytest.fixture
def fp16_policy():
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.slow  # ~10 s; by default test_loop tests the bound on skipped steps and test_finetuning_run the fine-tuning run
def test_fp16_with_a_diverging_learning_rate_stops_within_a_bounded_number_of_steps(data_dir, tmp_path, fp16_policy):
    """Keras' loss-scale optimizer skips overflowed steps and halves its scale, with no floor: on a loss that
    stays non-finite `iterations` never advances. The run must end with the one-line error, not loop forever
    (before the bound it was still looping when killed at 300 s)."""
    with pytest.raises(loop.NonFiniteError) as error:
        run(small(num_train_steps=300, learning_rate=1e6), data_dir, str(tmp_path / "run"), mixed_precision="fp16",
            steps_per_loop=20, log_steps=20, save_checkpoints_steps=20, export=False)
    message = str(error.value)
    assert "\n" not in message and "in a row were skipped" in message and "fp16 loss scale down to" in message
