"""`pretraining.train`'s named steps, each on its own: set-up, checkpoints (resume), the loop and its stops."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.options import TrainOptions
from electra_tf.training import pretraining, preemption, run_setup
from pretrain_testutil import write_shards
from test_training import small


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=48, num_shards=2)
    return path


def one_device():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def test_set_up_decides_the_run_and_writes_only_its_records(data_dir, tmp_path):
    model_dir = str(tmp_path / "run")
    setup = run_setup.set_up(small(num_train_steps=6), TrainOptions(data_dir=data_dir, model_dir=model_dir,
                                                                      stop_after_steps=4), one_device())
    assert (setup.chief, setup.workers, setup.per_worker_input_state, setup.final_step, setup.skipping) == \
        (True, 1, False, 4, None)
    assert setup.manifest["num_examples"] == 48
    assert sorted(os.listdir(model_dir)) == ["run_config.json"]  # the one record (execution choices included)
    refused = str(tmp_path / "refused")
    with pytest.raises(ValueError, match="max_seq_length"):
        run_setup.set_up(small(max_seq_length=48), TrainOptions(data_dir=data_dir, model_dir=refused), one_device())
    assert not os.path.exists(refused)  # refused before model_dir is first written (#55)


def build(config, options, strategy):
    """`train`'s steps before the loop: set-up, seeded model, input, checkpoints."""
    setup = run_setup.set_up(config, options, strategy)
    keras.utils.set_random_seed(options.seed)
    model, optimizer = pretraining.build_model(config, strategy, setup.manifest["special_token_ids"], options.seed,
                                               "none", setup.execution)
    iterator = pretraining.make_input(setup, config, options, strategy)
    return setup, model, iterator, pretraining.RunCheckpoints(setup, options, model, optimizer, iterator)


def test_run_checkpoints_resume_the_step_the_weights_and_the_input_position(data_dir, tmp_path):
    config, options = small(), TrainOptions(data_dir=data_dir, model_dir=str(tmp_path / "run"))
    _, model, iterator, checkpoints = build(config, options, one_device())
    assert checkpoints.resume(init_checkpoint=None) is False and checkpoints.latest() is None  # a new run
    for _ in range(2):
        next(iterator)
    checkpoints.optimizer.iterations.assign(2)
    model.weights[0].assign(model.weights[0] + 1.0)  # not what a fresh build draws
    checkpoints.open_saver(scratch=None)
    checkpoints.save(2)
    expected = next(iterator)

    _, model2, iterator2, resumed = build(config, options, one_device())
    assert resumed.resume(init_checkpoint=None) is False
    assert int(resumed.optimizer.iterations) == 2 and resumed.latest().endswith("ckpt-2")
    np.testing.assert_array_equal(model2.weights[0].numpy(), model.weights[0].numpy())
    np.testing.assert_array_equal(next(iterator2)["input_ids"].numpy(), expected["input_ids"].numpy())


def test_the_loop_logs_checkpoints_and_stops_where_its_options_say(data_dir, tmp_path):
    config = small(num_train_steps=6)
    options = TrainOptions(data_dir=data_dir, model_dir=str(tmp_path / "run"), steps_per_loop=4, log_steps=2,
                           save_checkpoints_steps=3, stop_after_steps=5, export=False)
    strategy = one_device()
    setup, model, iterator, checkpoints = build(config, options, strategy)
    checkpoints.resume(init_checkpoint=None)
    stop_request = preemption.StopRequest(strategy, signals=())
    training = pretraining.TrainLoop(setup, config, options, strategy, model, iterator, checkpoints, stop_request)
    checkpoints.open_saver(scratch=None)
    training.run()
    assert training.step == 5 and [h["step"] for h in training.history] == [2, 4]  # --stop_after_steps=5
    assert [os.path.basename(p) for p in checkpoints.manager.checkpoints] == ["ckpt-3", "ckpt-5"]  # and at the end


def test_input_checkpoint_keys_stay_those_of_existing_checkpoints():
    """The keys are attribute names inside checkpoints already on disk: a rename would lose their input position."""
    assert pretraining.input_checkpoint_key(False) == "iterator"
    assert pretraining.input_checkpoint_key(True) == "input_skipping_corrupt"
