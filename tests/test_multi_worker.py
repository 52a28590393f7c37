"""MultiWorkerMirroredStrategy for real: two worker processes on 127.0.0.1 against one process.

One scenario (TensorFlow start-up costs ~15 s per process, so the processes are reused):
two workers train like one process with the same global batch (per-step losses and
weights within 1e-5), only the chief writes, SIGTERM to one worker stops both after the
same step with a checkpoint there, a re-launch resumes from it exactly, and a worker
killed with SIGKILL ends the other with a one-line error instead of a hang.
"""

import json
import os
import re
import signal
import socket
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.training import input_pipeline
from pretrain_testutil import write_shards
from test_preemption import ROOT, checkpoint_steps, checkpoint_values, cli_args, quiet_env, wait_for_step
from test_skip_corrupt import LOST, RECORDS, corrupt

TOTAL = 40
FLAGS = dict(dropout=0.0, log_steps=1, steps_per_loop=10, save_checkpoints_steps=1000)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=96, num_shards=3)
    return path


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def start_workers(data_dir, model_dir, tmp_path, use_flags=False, total=TOTAL, **extra_flags):
    """Two workers sharing `model_dir`; each gets its own TMPDIR (where the non-chief saves)."""
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    workers = []
    for index in range(2):
        scratch = tmp_path / f"tmp{index}"
        scratch.mkdir(exist_ok=True)
        env = quiet_env(TMPDIR=str(scratch))
        flags = {**FLAGS, **extra_flags}
        if use_flags:
            flags.update(worker_hosts=",".join(hosts), task_index=index)
        else:
            flags.update(strategy="multi_worker")
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}})
        workers.append(subprocess.Popen(cli_args(data_dir, model_dir, total, **flags), cwd=ROOT, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return workers


def finish(processes, timeout):
    try:
        return [p.communicate(timeout=timeout) for p in processes]
    finally:
        for p in processes:
            p.kill()


def log_records(model_dir) -> dict[int, dict]:
    with open(os.path.join(model_dir, "train_log.jsonl")) as f:
        records = [json.loads(line) for line in f]
    return {r["step"]: r for r in records}


def assert_same_losses(records, reference, steps):
    for step in steps:
        for name in ("step_loss", "gen_loss", "disc_loss", "grad_norm"):
            a, b = records[step][name], reference[step][name]
            assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (step, name, a, b)


def test_file_sharding_gives_each_worker_its_own_examples(data_dir, tmp_path):
    manifest = json.load(open(os.path.join(data_dir, "manifest.json")))
    one_shard = str(tmp_path / "one_shard")
    one_manifest = write_shards(one_shard, num_examples=24, num_shards=1)
    for directory, shards_manifest, expected in ((data_dir, manifest, 96), (one_shard, one_manifest, 24)):
        seen = []
        for worker in range(2):  # 3 shards: by file; 1 shard (fewer than workers): by example
            context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker)
            dataset = input_pipeline.pretraining_dataset(directory, shards_manifest, batch_size=1,
                                                         input_context=context, shuffle_buffer=0, repeat=False)
            seen.append({tuple(batch["input_ids"].numpy()[0]) for batch in dataset})
        assert not seen[0] & seen[1], directory
        assert len(seen[0]) + len(seen[1]) == expected, directory


def test_two_workers_train_like_one_process_stop_together_and_resume(data_dir, tmp_path):
    model_dir, reference_dir = str(tmp_path / "run"), str(tmp_path / "one")
    # The reference: one process, same global batch, a checkpoint at every step.
    reference = subprocess.Popen(
        cli_args(data_dir, reference_dir, TOTAL, **{**FLAGS, "strategy": "one_device", "save_checkpoints_steps": 1,
                                                    "keep_checkpoint_max": TOTAL}),
        cwd=ROOT, env=quiet_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers = start_workers(data_dir, model_dir, tmp_path)
    try:
        # 1. SIGTERM to the non-chief only: both stop after the same step, exit 0, checkpoint there.
        wait_for_step(model_dir, 3, workers, timeout=150)
        with open(os.path.join(model_dir, "run.lock")) as f:  # the chief holds it; worker 1 runs beside it
            assert json.load(f)["pid"] == workers[0].pid
        workers[1].send_signal(signal.SIGTERM)
        (out0, err0), (out1, err1) = finish(workers, timeout=60)  # a hang fails here
        assert [w.returncode for w in workers] == [0, 0], (err0[-2000:], err1[-2000:])
        (stopped,) = checkpoint_steps(model_dir)
        assert 3 <= stopped < TOTAL
        assert f"Stopped at step {stopped} of {TOTAL} (another worker was asked to stop)" in out0, out0[-2000:]
        assert f"Stopped at step {stopped} of {TOTAL} (SIGTERM)" in out1, out1[-2000:]
        # Each worker took its own rows of every global batch.
        assert "Input of worker 0/2: all 3 shard(s); rows 0-3 of every global batch of 8" in err0
        assert "Input of worker 1/2: all 3 shard(s); rows 4-7 of every global batch of 8" in err1
        # Only the chief wrote; the non-chief's temporary checkpoints are gone.
        assert sorted(os.listdir(model_dir)) == ["checkpoints", "run_config.json", "train", "train_log.jsonl"]
        assert len(os.listdir(os.path.join(model_dir, "train"))) == 1  # one TensorBoard event file
        assert os.listdir(tmp_path / "tmp1") == []
        assert "Checkpoints:" in out0 and "Checkpoints:" not in out1

        # What they stopped with, read before the re-launch appends to it.
        stopped_records, ours = log_records(model_dir), checkpoint_values(model_dir)

        # 2. Re-launched (with --worker_hosts/--task_index), both resume from that checkpoint exactly. Launched
        # before the reference is awaited, so that its last steps and export overlap the workers' start-up.
        workers = start_workers(data_dir, model_dir, tmp_path, use_flags=True)
        wait_for_step(model_dir, stopped + 3, workers, timeout=150)
        # 3. A worker that dies without warning ends the other with one line, not a hang.
        workers[1].send_signal(signal.SIGKILL)
        (out0, err0), _ = finish(workers, timeout=120)  # a hang fails here
        assert workers[0].returncode == 1, err0[-3000:]
        errors = [line for line in err0.splitlines() if line.startswith("run_pretraining.py: error:")]
        assert len(errors) == 1 and "Re-launch every worker" in errors[0], err0[-3000:]
        assert "Traceback" not in err0
        assert f"from step {stopped} to {TOTAL}" in err0

        # The same losses and weights as one process: up to the stop, and on the resumed steps.
        _, reference_err = finish([reference], timeout=200)[0]
        assert reference.returncode == 0, reference_err[-3000:]
        expected = log_records(reference_dir)
        assert sorted(stopped_records) == list(range(1, stopped + 1))
        assert_same_losses(stopped_records, expected, range(1, stopped + 1))
        theirs = checkpoint_values(reference_dir, step=stopped)
        model_keys = [k for k in theirs if k.startswith("model/")]
        assert model_keys and set(ours) == set(theirs)
        for key in model_keys:
            np.testing.assert_allclose(ours[key], theirs[key], atol=1e-5, err_msg=key)
        records = log_records(model_dir)
        resumed = [s for s in records if s > stopped]
        assert len(resumed) >= 3
        assert_same_losses(records, expected, resumed)
    finally:
        for process in [reference, *workers]:
            process.kill()


@pytest.mark.slow  # two worker processes, ~90 s on 2 busy cores; test_skip_corrupt tests the merge by default
def test_with_file_sharding_the_chief_counts_the_records_every_worker_lost(tmp_path):
    data = str(tmp_path / "data")
    path = corrupt(data, write_shards(data, num_examples=3 * RECORDS, num_shards=3))  # shard 1: worker 1's alone
    model_dir = str(tmp_path / "run")
    # 16 steps of 4 examples per worker: worker 1 reads its 28 readable records more than twice.
    workers = start_workers(data, model_dir, tmp_path, total=16, input_sharding="file", skip_corrupt_records=True,
                            log_steps=8, steps_per_loop=8, save_checkpoints_steps=16)
    (out0, err0), (out1, err1) = finish(workers, timeout=300)
    assert [w.returncode for w in workers] == [0, 0], (err0[-2000:], err1[-2000:])
    summary = [line for line in out0.splitlines() if line.startswith("--skip_corrupt_records:")]
    assert summary == [f"--skip_corrupt_records: skipped {LOST} record(s) not readable in 1 shard(s): {path} ({LOST}); "
                       f"check them with `python -m data_prep.inspect_shards --verify {data}`"], out0[-2000:]
    assert f"(read by another worker): {path}: record 28, byte offset 4900:" in err0, err0[-3000:]
    assert log_records(model_dir)[16]["skipped_records"] == LOST
    assert len(re.findall(rf"skipped corrupt data by step \d+: {re.escape(path)}", err1)) == 1, err1[-3000:]
