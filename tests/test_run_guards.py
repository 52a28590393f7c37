"""run_pretraining.py's guards: a corrupt record mid-run, one writer per --model_dir (run.lock)."""

import json
import os
import re
import socket
import subprocess

import pytest

from pretrain_testutil import write_shards
from test_preemption import ROOT, checkpoint_steps, cli_args, quiet_env
from test_verify_shards import record_offsets


def run_cli(data_dir, model_dir, steps, **flags):
    return subprocess.run(cli_args(data_dir, model_dir, steps, **flags), cwd=ROOT, env=quiet_env(),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=96, num_shards=3)
    return path


@pytest.mark.slow  # ~18 s CLI run; test_skip_corrupt stops a run on a corrupt record in-process by default
def test_a_corrupt_record_ends_the_run_with_one_line_naming_it_and_the_last_good_checkpoint(tmp_path):
    data = str(tmp_path / "data")
    manifest = write_shards(data, num_examples=96, num_shards=3)
    shard = os.path.join(data, manifest["shards"][2])
    offsets = record_offsets(shard)
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:  # the last record's data; the size stays, so the start-up check passes
        f.seek(offsets[-1] + 12 + 8)
        f.write(b"\xa5" * 64)
    assert os.path.getsize(shard) == size
    model_dir = str(tmp_path / "run")
    # No example shuffle: the corrupt record is read after 16 records of every shard, i.e. a few steps in.
    result = run_cli(data, model_dir, 40, shuffle_buffer=1, steps_per_loop=1, save_checkpoints_steps=2,
                     log_steps=1)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    saved = checkpoint_steps(model_dir)
    assert saved, result.stderr[-3000:]
    good = os.path.join(model_dir, "checkpoints", f"ckpt-{saved[-1]}")
    match = re.fullmatch(
        re.escape(f"run_pretraining.py: error: corrupt training data: {shard}: record {len(offsets) - 1}, "
                  f"byte offset {offsets[-1]}: data CRC mismatch (corrupt record); stopped at step ")
        + r"(\d+)" + re.escape(f", last good checkpoint: {good}. Check every shard with `python -m "
                               f"data_prep.inspect_shards --verify {data}`, delete the corrupt shard and its "
                               ".done.json and rebuild it with `python -m data_prep.build_pretraining_dataset` "
                               "(same flags), then re-run to resume"), last)
    assert match, last
    reached = int(match.group(1))
    assert saved[-1] <= reached < 40 and saved[-1] >= reached - 2  # every 2 steps until the error, none after
    names = os.listdir(os.path.join(model_dir, "checkpoints"))
    assert not [n for n in names if "tmp" in n], names  # nothing half-written
    assert not os.path.exists(os.path.join(model_dir, "export"))
    assert not os.path.exists(os.path.join(model_dir, "run.lock"))  # released on the error path too


def write_lock(model_dir, pid, host=None):
    os.makedirs(model_dir, exist_ok=True)
    holder = {"host": host or socket.gethostname(), "pid": pid, "start_time": "2000-01-01T00:00:00+0000"}
    with open(os.path.join(model_dir, "run.lock"), "w") as f:
        json.dump(holder, f)
    return holder


def test_a_model_dir_locked_by_a_live_run_is_refused_naming_its_host_and_pid(data_dir, tmp_path):
    from test_run_lock import held_by_another_process

    model_dir = str(tmp_path / "run")
    lock = os.path.join(model_dir, "run.lock")
    with held_by_another_process(model_dir, tmp_path) as holder:
        with open(lock) as f:
            started = json.load(f)["start_time"]
        result = run_cli(data_dir, model_dir, 2)
        assert os.listdir(model_dir) == ["run.lock"]  # the holder's lock is untouched; nothing else written
        with open(lock) as f:
            assert json.load(f)["pid"] == holder.pid
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"run_pretraining.py: error: --model_dir {model_dir} is in use by another run (host {socket.gethostname()}, "
        f"pid {holder.pid}, started {started}): wait for it to end or use another --model_dir")


@pytest.mark.slow  # a CLI run; test_run_lock.py tests the takeover (dead pid, pid reuse, races) in-process by default
def test_the_stale_lock_of_a_dead_run_is_taken_over_with_a_warning_and_removed_at_exit(data_dir, tmp_path):
    model_dir = str(tmp_path / "run")
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_lock(model_dir, dead.pid)
    result = run_cli(data_dir, model_dir, 2)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(rf"Took over the stale lock {re.escape(model_dir)}/run.lock of host \S+, pid {dead.pid} "
                     r"\(started 2000-01-01T00:00:00\+0000\), which no longer runs", result.stderr)
    assert checkpoint_steps(model_dir) == [2]
    assert not [n for n in os.listdir(model_dir) if n.startswith("run.lock")]  # released, no .stale- file left


def test_a_run_holds_the_lock_while_it_runs_and_an_error_releases_it(tmp_path):
    from electra_tf.training.run_lock import RunLock

    model_dir = str(tmp_path / "run")
    lock = RunLock(model_dir)
    lock.acquire()
    with open(lock.path) as f:
        assert json.load(f)["pid"] == os.getpid()
    lock.release()
    assert not os.path.exists(lock.path)
    # A run that fails (no such data) leaves no lock behind either.
    result = run_cli(str(tmp_path / "no_data"), model_dir, 2)
    assert result.returncode == 2 and "no pre-training manifest" in result.stderr
    assert not os.path.exists(lock.path)


def test_in_a_multi_worker_run_the_chief_takes_the_lock_and_the_other_workers_do_not(tmp_path):
    from types import SimpleNamespace

    from electra_tf.training import distribution
    from electra_tf.training.run_lock import lock_for_worker

    def worker(index):  # what distribution reads of a MultiWorkerMirroredStrategy
        return SimpleNamespace(extended=SimpleNamespace(_id_in_cluster=index, _num_workers=2))

    model_dir = str(tmp_path / "run")
    other = lock_for_worker(model_dir, chief=distribution.is_chief(worker(1)))
    assert other is None and not os.path.exists(model_dir)  # nothing taken, nothing written
    chief = lock_for_worker(model_dir, chief=distribution.is_chief(worker(0)))
    try:
        with open(os.path.join(model_dir, "run.lock")) as f:
            assert json.load(f)["pid"] == os.getpid()
        # A non-chief started while the chief holds the lock is not refused.
        assert lock_for_worker(model_dir, chief=distribution.is_chief(worker(1))) is None
    finally:
        chief.release()
    assert not os.path.exists(os.path.join(model_dir, "run.lock"))


@pytest.mark.slow  # three command-line runs, one killed mid-run
def test_a_second_run_is_refused_and_after_kill_9_of_the_first_a_new_run_takes_over_and_resumes(data_dir, tmp_path):
    import signal

    from test_preemption import wait_for_step

    model_dir = str(tmp_path / "run")
    flags = dict(log_steps=5, steps_per_loop=5, save_checkpoints_steps=10)
    first = subprocess.Popen(cli_args(data_dir, model_dir, 100000, **flags), cwd=ROOT, env=quiet_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_step(model_dir, 10, [first], timeout=240)
        second = run_cli(data_dir, model_dir, 20, **flags)
        assert second.returncode == 1 and f"pid {first.pid}," in second.stderr.strip().splitlines()[-1]
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        first.kill()
    reached = max(checkpoint_steps(model_dir))
    third = run_cli(data_dir, model_dir, reached + 10, **flags)
    assert third.returncode == 0, third.stderr[-3000:]
    assert f"pid {first.pid}" in third.stderr and "which no longer runs" in third.stderr  # took over the lock
    assert f"ckpt-{reached}" in third.stderr and "Resumed from" in third.stderr
    assert max(checkpoint_steps(model_dir)) == reached + 10
    assert not os.path.exists(os.path.join(model_dir, "run.lock"))
