"""Elastic resume (`--input_sharding=batch`, the default): a run stopped on 2 replicas continues on 1, and
the reverse (with another number of micro-batches too), on the uninterrupted run's trajectory with dropout on.

The global batch is the same however it is split, and every random stream (masking, sampling, dropout:
`model.example_dropout`) is keyed by (run seed, step, global example index), so the resumed steps log
the uninterrupted run's losses (1e-5 relative) and end on its weights (1e-5 absolute). Before dropout
was keyed by the example, each replica drew its own masks and the resumed steps left the trajectory.
"""

import dataclasses
import logging

import pytest
import tensorflow as tf

from electra_tf.options import ExecutionOptions
from pretrain_testutil import mirrored_cpus, write_shards
from test_training import assert_same_training, run, small

LOGGED = ("step_loss", "gen_loss", "disc_loss", "gen_accuracy", "grad_norm")
CPU_SET = ExecutionOptions().resolve({"CPU"})


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=64, num_shards=2)
    return path


def config():
    return small(dropout_rate=0.1, train_batch_size=8, num_train_steps=4)


def layout(replicas: int, micro_batches: int = 1) -> dict:
    strategy = mirrored_cpus() if replicas == 2 else tf.distribute.OneDeviceStrategy("/cpu:0")
    return {"strategy": strategy,
            "execution": dataclasses.replace(CPU_SET, gradient_accumulation_steps=micro_batches)}


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("uninterrupted"))
    return run(config(), data_dir, model_dir, export=False, **layout(1)), model_dir


def assert_resume_continues(data_dir, tmp_path, uninterrupted, before: dict, after: dict):
    full, full_dir = uninterrupted
    model_dir = str(tmp_path / "elastic")
    assert run(config(), data_dir, model_dir, stop_after_steps=2, export=False, **before)[-1]["step"] == 2
    resumed = run(config(), data_dir, model_dir, export=False, **after)
    assert [h["step"] for h in resumed] == [3, 4]
    assert_same_training(full[2:], resumed, full_dir, model_dir, LOGGED)


def test_a_run_stopped_on_two_replicas_resumes_on_one_device(data_dir, tmp_path, uninterrupted):
    assert_resume_continues(data_dir, tmp_path, uninterrupted, layout(2), layout(1))


def test_a_run_stopped_on_one_device_resumes_on_two_replicas_with_two_micro_batches(data_dir, tmp_path, uninterrupted,
                                                                                    caplog):
    with caplog.at_level(logging.INFO):
        assert_resume_continues(data_dir, tmp_path, uninterrupted, layout(1), layout(2, micro_batches=2))
    # The resume says so in one line (run_record.resume_note), not that the random stream now differs.
    notes = [r.getMessage() for r in caplog.records if f"--model_dir {tmp_path / 'elastic'} resumes" in r.getMessage()]
    assert notes == [f"--model_dir {tmp_path / 'elastic'} resumes on 2 replicas × 2 micro-batches (recorded: 1 × 1): "
                     "the same trajectory (dropout, masking and sampling are keyed by the example)"]


@pytest.mark.slow
def test_a_run_stopped_with_two_micro_batches_resumes_with_one(data_dir, tmp_path, uninterrupted):
    assert_resume_continues(data_dir, tmp_path, uninterrupted, layout(1, micro_batches=2), layout(1))
