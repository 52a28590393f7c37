"""The one line a resume logs about its execution choices (`run_record.resume_note`, #55 × #56 item 3).

Dropout, masking and sampling are keyed by (seed, step, the example's global index), so with
`--input_sharding=batch` a resume on other replicas, workers or micro-batches continues the uninterrupted
trajectory (tests/test_elastic_resume.py shows it on real runs): one INFO line says so. A file-sharded resume on
another worker count reads another data order, and a checkpoint written before the stream was recorded was trained
on the per-replica dropout masks: one WARNING each. Before this, every such change got the generic warning that
"the random stream or arithmetic now differs".
"""

import dataclasses
import logging

import pytest
import tensorflow as tf

from electra_tf.model.example_dropout import DROPOUT_STREAM
from electra_tf.options import ExecutionOptions, TrainOptions
from electra_tf.training import run_record
from pretrain_testutil import fake_checkpoint, tiny_config

RESOLVED = ExecutionOptions().resolve({"CPU"})


def execution(**changes) -> dict:
    """An `execution_record` of one CPU device, with `changes`."""
    values = run_record.execution_record(RESOLVED, tf.distribute.OneDeviceStrategy("/cpu:0"), None)
    return {**values, **changes}


def stopped_run(tmp_path, input_sharding="batch", name="run", **recorded) -> str:
    """A run folder whose record holds `recorded` execution choices and one checkpoint (`None` drops a field).
    A resume rewrites the record with its own choices: the next resume compares with those."""
    model_dir = str(tmp_path / name)
    options = run_record.recipe_options(TrainOptions(data_dir="d", model_dir=model_dir,
                                                     input_sharding=input_sharding), {})
    values = {name: value for name, value in execution(**recorded).items() if value is not None}
    run_record.check_start(model_dir, tiny_config(), options=options, execution=values)
    fake_checkpoint(model_dir)
    return model_dir


def resume_lines(model_dir, caplog, input_sharding="batch", **now) -> list:
    """(level, message) of every line at INFO or above that names the resume of `model_dir`."""
    caplog.clear()
    options = run_record.recipe_options(TrainOptions(data_dir="d", model_dir=model_dir,
                                                     input_sharding=input_sharding), {})
    with caplog.at_level(logging.INFO):
        run_record.check_start(model_dir, tiny_config(), options=options, execution=execution(**now))
    return [(r.levelno, r.getMessage()) for r in caplog.records if f"--model_dir {model_dir} resumes" in r.getMessage()]


def test_the_execution_record_names_the_dropout_stream():
    assert execution()["dropout_stream"] == DROPOUT_STREAM == "per-example-philox-v1"


def test_another_split_of_the_batch_under_batch_sharding_is_the_same_trajectory_in_one_info_line(tmp_path, caplog):
    model_dir = stopped_run(tmp_path, replicas=1, gradient_accumulation_steps=1)
    assert resume_lines(model_dir, caplog, replicas=2, gradient_accumulation_steps=2) == [
        (logging.INFO, f"--model_dir {model_dir} resumes on 2 replicas × 2 micro-batches (recorded: 1 × 1): the same "
                       "trajectory (dropout, masking and sampling are keyed by the example)")]
    unchanged = stopped_run(tmp_path, name="unchanged", replicas=1, gradient_accumulation_steps=1)
    assert resume_lines(unchanged, caplog, replicas=1, gradient_accumulation_steps=1) == []


def test_another_worker_count_names_the_workers_in_the_same_trajectory_line(tmp_path, caplog):
    model_dir = stopped_run(tmp_path, replicas=4, workers=2)
    assert resume_lines(model_dir, caplog, replicas=1, workers=1) == [
        (logging.INFO, f"--model_dir {model_dir} resumes on 1 replica on 1 worker × 1 micro-batch (recorded: 4 on 2 "
                       "workers × 1): the same trajectory (dropout, masking and sampling are keyed by the example)")]


def test_file_sharding_on_another_worker_count_warns_once_that_the_data_order_differs(tmp_path, caplog):
    model_dir = stopped_run(tmp_path, "file", replicas=2, workers=2)
    lines = resume_lines(model_dir, caplog, "file", replicas=4, workers=4)
    assert lines == [(logging.WARNING, f"--model_dir {model_dir} resumes on 4 replicas on 4 workers × 1 micro-batch "
                      "(recorded: 2 on 2 workers × 1): the data order now differs from the uninterrupted run's: with "
                      "--input_sharding=file each worker reads its own shards, so the order depends on the number of "
                      "workers (2 there vs 4 now)")]
    # The same workers, more replicas each: the same data order, the same trajectory.
    same_workers = stopped_run(tmp_path, "file", name="same_workers", replicas=2, workers=2)
    assert [level for level, _ in resume_lines(same_workers, caplog, "file", replicas=4, workers=2)] == [logging.INFO]


@pytest.mark.parametrize("recorded_stream", [None, "per-replica-v0"])
def test_a_checkpoint_from_another_dropout_stream_warns_once_that_the_masks_differ(tmp_path, caplog, recorded_stream):
    model_dir = stopped_run(tmp_path, replicas=2, dropout_stream=recorded_stream)
    lines = resume_lines(model_dir, caplog, replicas=1)
    written = ("before runs recorded their dropout stream (the old per-replica stream: each layer's seed generator "
               "per replica)" if recorded_stream is None else "under dropout stream per-replica-v0")
    assert lines == [(logging.WARNING, f"--model_dir {model_dir} resumes on 1 replica × 1 micro-batch (recorded: 2 × "
                      f"1): dropout masks now differ from the uninterrupted run's: its checkpoints were written "
                      f"{written}, this start draws per-example-philox-v1 (keyed by the example)")]
    # On the recorded layout too: the masks still differ.
    same_layout = stopped_run(tmp_path, name="same_layout", replicas=2, dropout_stream=recorded_stream)
    assert [level for level, _ in resume_lines(same_layout, caplog, replicas=2)] == [logging.WARNING]


def test_other_execution_choices_keep_the_warning_that_the_stream_or_arithmetic_differs(tmp_path, caplog):
    model_dir = stopped_run(tmp_path, replicas=2)
    other = "gumbel" if RESOLVED.sampling != "gumbel" else "inverse_cdf"
    lines = resume_lines(model_dir, caplog, replicas=1, sampling=other)
    assert lines == [(logging.WARNING, f"--model_dir {model_dir} resumes on 1 replica × 1 micro-batch (recorded: 2 × "
                      f"1) with other execution choices (sampling: {RESOLVED.sampling} there vs {other} now): the "
                      "random stream or arithmetic now differs from the uninterrupted run's (exact only with the "
                      "recorded choices)")]


def test_under_a_data_service_another_split_is_not_called_the_same_trajectory(tmp_path, caplog):
    model_dir = stopped_run(tmp_path, replicas=2, data_service=True)
    [(level, line)] = resume_lines(model_dir, caplog, replicas=1, data_service=True)
    assert level == logging.WARNING and "with other execution choices (replicas: 2 there vs 1 now)" in line


def test_fine_tuning_records_without_a_stream_or_sharding_keep_the_generic_warning(caplog):
    """Fine-tuning's record (`finetuning.checkpointing`) has neither a dropout stream nor an input sharding."""
    recorded = dataclasses.asdict(RESOLVED)
    with caplog.at_level(logging.INFO):
        run_record.note_execution_changes("--output_dir o", recorded, dict(recorded, gradient_accumulation_steps=2))
        run_record.note_execution_changes("--output_dir o", recorded, recorded)
    assert [(r.levelno, r.getMessage()) for r in caplog.records if "--output_dir o" in r.getMessage()] == [
        (logging.WARNING, "--output_dir o resumes with 2 micro-batches (recorded: 1) with other "
                          "execution choices (gradient_accumulation_steps: 1 there vs 2 now): the random stream or "
                          "arithmetic now differs from the uninterrupted run's (exact only with the recorded choices)")]


def test_steps_looped_elsewhere_are_the_same_steps_and_the_resume_says_nothing(tmp_path, caplog):
    """--step_loop changes where a call's steps loop, not a bit of them (tests/test_training.py): no warning that the
    arithmetic differs, where any other execution choice gets one."""
    model_dir = stopped_run(tmp_path, step_loop="host")
    assert resume_lines(model_dir, caplog, step_loop="graph") == []
    [(level, line)] = resume_lines(model_dir, caplog, step_loop="host", adam_kernel="ops")
    assert level == logging.WARNING and "adam_kernel: fused there vs ops now" in line and "step_loop" not in line
