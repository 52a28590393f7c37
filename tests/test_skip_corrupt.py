"""--skip_corrupt_records: a corrupt frame loses the rest of its shard; the loss is counted, logged and resumed exactly."""

import json
import os
import re

import pytest
import tensorflow as tf

from electra_tf.training import input_pipeline, loop, pretraining, skipped_records
from pretrain_testutil import write_shards
from test_preemption import checkpoint_steps
from test_run_guards import run_cli
from test_training import assert_same_training, run, small

RECORDS = 100  # per shard; ~175 bytes each, so byte 5000 is inside record 28
LOST = RECORDS - 28
NAMES = ("step_loss", "gen_loss", "disc_loss")


def corrupt(data_dir, manifest, index=1):
    """Overwrites 64 bytes at offset 5000 of shard `index` (its size stays: the start-up check passes)."""
    path = os.path.join(data_dir, manifest["shards"][index])
    with open(path, "r+b") as f:
        f.seek(5000)
        f.write(b"\xa5" * 64)
    return path


@pytest.fixture(scope="module")
def clean_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("clean"))
    return path, write_shards(path, num_examples=3 * RECORDS, num_shards=3)


@pytest.fixture(scope="module")
def corrupt_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("corrupt"))
    manifest = write_shards(path, num_examples=3 * RECORDS, num_shards=3)
    return path, manifest, corrupt(path, manifest)


def batches(data_dir, manifest, skip_corrupt):
    return list(input_pipeline.pretraining_dataset(data_dir, manifest, batch_size=4, shuffle_buffer=0, repeat=False,
                                                   skip_corrupt=skip_corrupt))


def test_without_corruption_both_pipelines_read_the_same_examples(clean_dir):
    plain, skipping = batches(*clean_dir, False), batches(*clean_dir, True)
    assert len(plain) == len(skipping) == 3 * RECORDS // 4
    for a, b in zip(plain, skipping):
        assert (a["input_ids"].numpy() == b["input_ids"].numpy()).all()
        assert b["skipped_records"].numpy().sum() == 0


def test_the_reader_gives_up_on_the_rest_of_the_corrupt_shard_and_the_loss_is_reported_once(corrupt_dir):
    data_dir, manifest, path = corrupt_dir
    skipping = batches(data_dir, manifest, True)
    assert len(skipping) * 4 == 3 * RECORDS - LOST  # records 28-99 of shard 1 are never read
    reports = [(int(b["skipped_records"].numpy().sum()), set(b["skipped_shard"].numpy()[b["skipped_records"].numpy() > 0]))
               for b in skipping if b["skipped_records"].numpy().any()]
    assert reports == [(LOST, {1})]
    assert input_pipeline.record_offset(path, 28) == 28 * 175  # the record holding byte 5000


def test_the_skipped_count_needs_the_shards_record_counts(tmp_path):
    data = str(tmp_path / "data")
    manifest = write_shards(data, num_examples=8, num_shards=1)
    del manifest["examples_per_shard"]
    with pytest.raises(ValueError, match=r"--skip_corrupt_records needs each shard's record count.*rebuild"):
        input_pipeline.shard_record_counts(data, manifest)
    with open(os.path.join(data, manifest["shards"][0]) + ".done.json", "w") as f:
        json.dump({"num_examples": 8}, f)
    assert input_pipeline.shard_record_counts(data, manifest) == [8]


def skip_reports(data_dir, manifest, num_batches):
    """The step driver's per-shard skip report of each of the first `num_batches` batches (4 records)."""
    report = input_pipeline.SkipReport(len(manifest["shards"]))
    dataset = input_pipeline.pretraining_dataset(data_dir, manifest, batch_size=4, shuffle_buffer=0,
                                                 skip_corrupt=True)
    return [report.split(element)[1] for element in dataset.take(num_batches)]


def test_a_shard_that_loses_its_tail_on_every_pass_counts_those_records_once(corrupt_dir, caplog):
    data_dir, manifest, path = corrupt_dir
    passes = 3
    reports = skip_reports(data_dir, manifest, passes * (3 * RECORDS - LOST) // 4)
    one_call = {name: sum(r[name] for r in reports) for name in reports[0]}  # a driver call spanning every pass
    assert one_call["skipped_by_shard"].numpy().tolist() == [0, passes * LOST, 0]  # the reader loses it each pass
    for calls in (reports, [one_call]):
        skipping = skipped_records.SkippedRecords(data_dir, manifest)
        caplog.clear()
        for step, outputs in enumerate(calls):
            skipping.add(outputs, step)
        assert skipping.by_shard.numpy().tolist() == [0, LOST, 0] and skipping.total == LOST
        assert skipping.summary().startswith(f"--skip_corrupt_records: skipped {LOST} record(s) not readable in 1 "
                                             f"shard(s): {path} ({LOST});")
        assert [r.getMessage().split(": ", 2)[1] for r in caplog.records] == [path]  # logged when first met


def test_the_chief_counts_and_logs_the_records_another_worker_lost(corrupt_dir, caplog, monkeypatch):
    data_dir, manifest, path = corrupt_dir
    strategy = tf.distribute.get_strategy()  # the chief; `gather`'s collective is stood in for
    other_worker = tf.constant([0, LOST, 0], tf.int64)
    monkeypatch.setattr(skipped_records, "max_over_workers_fn",
                        lambda _: lambda own: tf.maximum(tf.convert_to_tensor(own), other_worker))
    skipping = skipped_records.SkippedRecords(data_dir, manifest)
    skipping.gather(strategy, step=8)
    assert skipping.total == LOST and skipping.by_shard.numpy().tolist() == [0, 0, 0]  # its own count stays its own
    assert f"{path} ({LOST})" in skipping.summary()
    assert re.search(rf"skipped corrupt data by step 8 \(read by another worker\): {re.escape(path)}: record 28, "
                     rf"byte offset 4900: .*{LOST} of its {RECORDS} records not read; {LOST} skipped so far",
                     caplog.text), caplog.text
    caplog.clear()
    skipping.gather(strategy, step=12)
    assert "skipped corrupt data" not in caplog.text  # the same loss again: no new line


def test_the_max_over_replicas_takes_each_shards_largest_count():
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"],  # no collective ops (see test_training)
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    counts = [[[0, 72, 0]], [[0, 0, 3]]]  # each replica's, as each worker's with --input_sharding=file
    per_replica = mirrored.experimental_distribute_values_from_function(
        lambda context: tf.constant(counts[context.replica_id_in_sync_group], tf.int64))
    assert skipped_records.max_over_replicas(mirrored, per_replica).numpy().tolist() == [0, 72, 3]
    assert skipped_records.max_over_workers_fn(mirrored)(tf.constant([5, 0, 1], tf.int64)).numpy().tolist() == \
        [5, 0, 1]


@pytest.mark.slow  # two training runs and a resume; the CLI test keeps the flag in the default suite
def test_a_run_that_skips_resumes_exactly(corrupt_dir, tmp_path):
    data_dir, _, _ = corrupt_dir
    config = small(num_train_steps=24)
    options = dict(skip_corrupt_records=True, shuffle_buffer=1, export=False)
    whole = run(config, data_dir, str(tmp_path / "whole"), **options)
    assert whole[-1]["skipped_records"] == LOST
    split_dir = str(tmp_path / "split")
    first = run(config, data_dir, split_dir, stop_after_steps=6, **options)
    assert first[-1]["skipped_records"] == 0  # the corrupt record is met later
    second = run(config, data_dir, split_dir, **options)
    assert [h["skipped_records"] for h in first + second] == [h["skipped_records"] for h in whole]
    assert_same_training(first + second, whole, split_dir, str(tmp_path / "whole"), NAMES)


@pytest.mark.slow  # two training runs and a resume; the CLI test keeps the flag in the default suite
def test_a_run_stopped_by_a_corrupt_record_resumes_with_the_flag_as_if_it_had_skipped_from_the_start(
        corrupt_dir, tmp_path, caplog):
    data_dir, _, path = corrupt_dir
    config = small(num_train_steps=24)
    model_dir = str(tmp_path / "run")
    with pytest.raises(loop.CorruptDataError, match=re.escape(path)):
        run(config, data_dir, model_dir, shuffle_buffer=1, steps_per_loop=1, export=False)
    stopped = checkpoint_steps(model_dir)[-1]
    resumed = run(config, data_dir, model_dir, skip_corrupt_records=True, shuffle_buffer=1, export=False)
    assert f"holds the input position of a run without --skip_corrupt_records: reading the input's first {stopped} " \
        "batches again" in caplog.text
    skipping_dir = str(tmp_path / "skipping")
    whole = run(config, data_dir, skipping_dir, skip_corrupt_records=True, shuffle_buffer=1, export=False)
    assert resumed[0]["step"] == stopped + 1
    assert_same_training(resumed, whole[stopped:], model_dir, skipping_dir, NAMES + ("skipped_records",))


@pytest.mark.slow  # a CLI run; the count and its resume are tested in-process above
def test_the_cli_with_the_flag_finishes_and_reports_the_count_in_one_line(corrupt_dir, tmp_path):
    data_dir, _, path = corrupt_dir
    model_dir = str(tmp_path / "run")
    steps = 64  # 512 examples: two passes over the 228 readable ones, each losing the same 72
    result = run_cli(data_dir, model_dir, steps, shuffle_buffer=1, skip_corrupt_records=True, log_steps=8,
                     steps_per_loop=8, save_checkpoints_steps=32)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = re.findall(r"skipped corrupt data by step \d+: .*", result.stderr)
    assert len(lines) == 1 and re.fullmatch(
        rf"skipped corrupt data by step \d+: {re.escape(path)}: record 28, byte offset 4900: not readable, the "
        rf"reader gave up on the rest of the shard: {LOST} of its {RECORDS} records not read; {LOST} skipped so far",
        lines[0]), result.stderr[-3000:]
    summary = [line for line in result.stdout.splitlines() if line.startswith("--skip_corrupt_records:")]
    assert summary == [f"--skip_corrupt_records: skipped {LOST} record(s) not readable in 1 shard(s): {path} ({LOST}); "
                       f"check them with `python -m data_prep.inspect_shards --verify {data_dir}`"]
    with open(os.path.join(model_dir, "train_log.jsonl")) as f:
        records = [json.loads(line) for line in f]
    assert records[-1]["step"] == steps and records[-1]["skipped_records"] == LOST
    assert checkpoint_steps(model_dir)[-1] == steps
    names = os.listdir(os.path.join(model_dir, "checkpoints"))
    assert not [n for n in names if "tmp" in n], names  # nothing half-written
    assert os.path.isdir(os.path.join(model_dir, "export"))
    assert not os.path.exists(os.path.join(model_dir, "run.lock"))
