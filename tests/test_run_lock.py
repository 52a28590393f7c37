"""run.lock with real processes: pid reuse, a race for a stale lock, a second fine-tuning writer (issue #38).

Each racer or holder is a small `python -c` process using `electra_tf.training.run_lock`; "no_flock" runs it where
flock fails with ENOLCK (as on NFSv3 without lockd), so the fallback (pid and start time) is used.
"""

import contextlib
import errno
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from test_finetuning_run import _common, glue_dir, run_main, vocab_file  # noqa: F401 (fixtures)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ["flock", "no_flock"]

# argv: model_dir, start file, end file, options (JSON). Waits for the start file (a barrier for racers), takes
# the lock, prints "held" or "refused: <message>", and holds the lock until the end file appears.
PROCESS = r"""
import json, os, socket, sys, time
from electra_tf.training import run_lock


def start_ticks(pid):  # as start_ticks below
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[22 - 3])


model_dir, start_file, end_file, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if options.get("no_flock"):
    import errno, fcntl

    def no_flock(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    fcntl.flock = no_flock


def slowed(call, seconds):  # a slow file system: this process's renames and links take a while
    def slow(*args, **kwargs):
        time.sleep(seconds)
        return call(*args, **kwargs)
    return slow


os.rename, os.link = slowed(os.rename, options.get("rename", 0)), slowed(os.link, options.get("link", 0))
if options.get("record_own_pid"):  # a run that had this pid before a restart, started at another time, left it
    with open(os.path.join(model_dir, "run.lock"), "w") as f:
        json.dump({"host": socket.gethostname(), "pid": os.getpid(), "start_time": "2000-01-01T00:00:00+0000",
                   "pid_start": start_ticks(os.getpid()) - 1}, f)
print("ready", flush=True)
while not os.path.exists(start_file):
    time.sleep(0.002)
try:
    lock = run_lock.RunLock(model_dir)
    lock.acquire()
except run_lock.RunLockError as e:
    print("refused:", e, flush=True)
    sys.exit(3)
print("held", flush=True)
while not os.path.exists(end_file):
    time.sleep(0.01)
lock.release()
"""


def start_ticks(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot: field 22 of /proc/PID/stat (the name, field 2, may hold
    spaces)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[22 - 3])


def start(model_dir, tmp_path, **options):
    """A lock process, started and ready (imports done); it tries the lock once tmp_path/start exists."""
    process = subprocess.Popen(
        [sys.executable, "-c", PROCESS, str(model_dir), str(tmp_path / "start"), str(tmp_path / "end"),
         json.dumps(options)], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready", process.communicate(timeout=30)
    return process


def outcome(process) -> str:
    """The process's first line after "ready": "held" or "refused: ..." (waits for it)."""
    line = process.stdout.readline().strip()
    assert line, process.communicate(timeout=30)
    return line


def finish(processes, tmp_path):
    """Lets every holder release and waits for all; their stderr."""
    (tmp_path / "end").touch()
    return [p.communicate(timeout=60)[1] for p in processes]


@contextlib.contextmanager
def held_by_another_process(model_dir, tmp_path, **options):
    """A live process holding model_dir's lock; yields it."""
    holder = start(model_dir, tmp_path, **options)
    (tmp_path / "start").touch()
    try:
        assert outcome(holder) == "held", holder.communicate(timeout=30)
        yield holder
    finally:
        finish([holder], tmp_path)
        holder.kill()


def write_record(model_dir, pid, host=None, **extra):
    os.makedirs(model_dir, exist_ok=True)
    record = {"host": host or socket.gethostname(), "pid": pid, "start_time": "2000-01-01T00:00:00+0000", **extra}
    with open(os.path.join(model_dir, "run.lock"), "w") as f:
        json.dump(record, f)
    return record


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


# --- pid reuse: a dead run's record whose pid is a live, unrelated process now ---

@pytest.mark.parametrize("mode", MODES)
def test_a_dead_runs_lock_whose_pid_is_now_our_own_is_taken_over_not_refused_forever(mode, tmp_path):
    """A container restart: the entrypoint is pid 1 again, as it was for the run that left the lock."""
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    process = start(model_dir, tmp_path, record_own_pid=True, no_flock=mode == "no_flock")
    (tmp_path / "start").touch()
    assert outcome(process) == "held"
    stderr = finish([process], tmp_path)[0]
    assert process.returncode == 0, stderr
    assert f"Took over the stale lock {model_dir}/run.lock of host {socket.gethostname()}, pid {process.pid} " \
           "(started 2000-01-01T00:00:00+0000), which no longer runs" in stderr
    assert os.listdir(model_dir) == []  # released at exit, nothing left over


@pytest.mark.parametrize("mode", MODES)
def test_a_dead_runs_lock_whose_pid_now_belongs_to_another_live_process_is_taken_over(mode, tmp_path):
    model_dir = tmp_path / "run"
    unrelated = subprocess.Popen(["sleep", "60"])
    try:
        # The dead run had this pid and started earlier than the process that has the pid now.
        write_record(model_dir, unrelated.pid, pid_start=start_ticks(unrelated.pid) - 1)
        process = start(model_dir, tmp_path, no_flock=mode == "no_flock")
        (tmp_path / "start").touch()
        assert outcome(process) == "held"
        stderr = finish([process], tmp_path)[0]
    finally:
        unrelated.kill()
        unrelated.wait()
    assert process.returncode == 0, stderr
    assert f"pid {unrelated.pid} (started 2000-01-01T00:00:00+0000), which no longer runs" in stderr
    assert os.listdir(model_dir) == []


def test_without_flock_a_live_pid_with_its_own_start_time_still_holds(tmp_path, monkeypatch):
    from electra_tf.training import run_lock

    monkeypatch.setattr("fcntl.flock", _no_flock)
    holder = subprocess.Popen(["sleep", "60"])
    try:
        write_record(tmp_path, holder.pid, pid_start=start_ticks(holder.pid))
        with pytest.raises(run_lock.RunLockError, match=rf"in use by another run \(host \S+, pid {holder.pid},"):
            run_lock.RunLock(str(tmp_path)).acquire()
    finally:
        holder.kill()
        holder.wait()


# --- a three-way race for one stale lock ---

def test_a_run_refused_while_the_winner_writes_its_record_names_the_winner_not_the_dead_run(tmp_path):
    """The window of test_three_runs_racing...[flock], made certain: the winner holds the flock while run.lock still
    holds the dead run's record, and writes its own 0.3 s later; the refused run must name the winner."""
    import fcntl
    import threading

    from electra_tf.training import run_lock

    model_dir = tmp_path / "run"
    write_record(model_dir, dead_pid())
    winner = {"host": socket.gethostname(), "pid": os.getpid(), "start_time": "2026-11-27T00:00:00+0000"}
    fd = os.open(model_dir / "run.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: the RunLock below cannot get it

    def write_winners_record():
        time.sleep(0.3)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(winner).encode(), 0)

    writer = threading.Thread(target=write_winners_record)
    writer.start()
    try:
        with pytest.raises(run_lock.RunLockError) as refused:
            run_lock.RunLock(str(model_dir)).acquire()
    finally:
        writer.join()
        os.close(fd)
    assert f"pid {os.getpid()}, started 2026-11-27T00:00:00+0000" in str(refused.value), str(refused.value)


@pytest.mark.parametrize("mode", MODES)
def test_three_runs_racing_for_one_stale_lock_exactly_one_wins(mode, tmp_path):
    """Started together on a slow file system: each racer's renames and links are delayed differently, so that
    one's take-over overlaps another's (the window of a take-over that moves a lock aside and puts it back)."""
    model_dir = tmp_path / "run"
    stale = write_record(model_dir, dead_pid())
    slowness = [dict(rename=0.1), dict(rename=0.3, link=0.6), dict(rename=0.6)]
    racers = [start(model_dir, tmp_path, no_flock=mode == "no_flock", **slow) for slow in slowness]
    (tmp_path / "start").touch()
    outcomes = [outcome(racer) for racer in racers]
    held = [racer for racer, said in zip(racers, outcomes) if said == "held"]
    try:
        assert len(held) == 1, outcomes
        with open(model_dir / "run.lock") as f:
            assert json.load(f)["pid"] == held[0].pid
    finally:
        stderrs = finish(racers, tmp_path)
    winner = held[0].pid
    for racer, said in zip(racers, outcomes):
        if racer.pid != winner:
            assert racer.returncode == 3 and said.startswith(
                f"refused: --model_dir {model_dir} is in use by another run (host {socket.gethostname()}, "
                f"pid {winner}, started "), said
    assert sum(f"pid {stale['pid']} (started" in stderr for stderr in stderrs) == 1  # one took over, one warned
    assert os.listdir(model_dir) == []  # no lock, no aside, take-over or temporary file left


# --- a second fine-tuning writer ---

def test_a_second_fine_tuning_run_on_an_output_dir_in_use_exits_1_in_one_line_naming_the_holder(
        tmp_path, vocab_file, glue_dir):
    out = tmp_path / "out"
    command = [sys.executable, "run_finetuning.py", *_common(tmp_path, vocab_file), "--task=SST-2",
               f"--data_dir={glue_dir}", "--max_train_steps=1"]
    with held_by_another_process(out, tmp_path) as holder:
        with open(out / "run.lock") as f:
            started = json.load(f)["start_time"]
        begun = time.monotonic()
        second = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"},
                                capture_output=True, text=True, timeout=300)
        seconds = time.monotonic() - begun
        assert os.listdir(out) == ["run.lock"]  # nothing written beside the holder's lock
    assert second.returncode == 1, second.stderr[-3000:]
    assert second.stderr.strip().splitlines() == [
        f"run_finetuning.py: error: --output_dir {out} is in use by another run (host {socket.gethostname()}, pid "
        f"{holder.pid}, started {started}): wait for it to end or use another --output_dir"]
    assert seconds < 60  # refused before the model and the data are loaded


def test_fine_tuning_holds_the_lock_through_the_run_and_releases_it_after_an_error(tmp_path, monkeypatch):
    import run_finetuning
    from electra_tf.training.run_lock import RunLock, RunLockError

    out = tmp_path / "out"
    seen = {}

    def run(*prepared):  # training, evaluation and export would happen here
        with open(out / "run.lock") as f:
            seen["holder"] = json.load(f)["pid"]
        with pytest.raises(RunLockError, match="--output_dir .* is in use by another run"):
            RunLock(str(out), "--output_dir").acquire()
        raise RuntimeError("training failed")

    monkeypatch.setattr(run_finetuning, "setup", lambda: (None,) * 7)
    monkeypatch.setattr(run_finetuning, "run", run)
    with pytest.raises(RuntimeError, match="training failed"):
        run_main([f"--output_dir={out}", "--task=SST-2"])
    assert seen == {"holder": os.getpid()}
    assert not out.exists()  # lock released, and the directory it created for nothing removed


# --- file systems and object stores ---

def _no_flock(fd, operation):
    raise OSError(errno.ENOLCK, "No locks available")


def test_where_flock_fails_the_lock_falls_back_to_pid_and_start_time_with_one_warning(tmp_path, monkeypatch,
                                                                                         caplog):
    from electra_tf.training import run_lock

    monkeypatch.setattr("fcntl.flock", _no_flock)
    lock = run_lock.RunLock(str(tmp_path / "run"))
    lock.acquire()
    try:
        warnings = [r.getMessage() for r in caplog.records if "pid and start time" in r.getMessage()]
        assert warnings == [f"--model_dir {tmp_path}/run: flock is not supported there (No locks available), so "
                            "run.lock is kept by pid and start time instead (another host's lock cannot be checked)"]
        with open(lock.path) as f:
            assert json.load(f)["pid_start"] == start_ticks(os.getpid())
        with pytest.raises(run_lock.RunLockError, match="in use by another run"):  # ourselves, still running
            run_lock.RunLock(str(tmp_path / "run")).acquire()
    finally:
        lock.release()
    assert not (tmp_path / "run").exists()


def test_another_hosts_record_is_taken_over_under_flock_and_refused_where_locks_stay_on_the_host(tmp_path,
                                                                                                 monkeypatch):
    from electra_tf.training import run_lock

    model_dir = str(tmp_path / "run")
    write_record(model_dir, 1, host="elsewhere.example")
    lock = run_lock.RunLock(model_dir)
    lock.acquire()  # nobody holds its flock: that run is gone, whatever its host was called (a new container)
    lock.release()
    write_record(model_dir, 1, host="elsewhere.example")
    monkeypatch.setattr(run_lock, "_mount_of", lambda path: ("nfs", "rw,vers=3,nolock"))
    with pytest.raises(run_lock.RunLockError) as refused:
        run_lock.RunLock(model_dir).acquire()
    assert str(refused.value) == (
        f"--model_dir {model_dir} is in use by another run (host elsewhere.example, pid 1, started "
        f"2000-01-01T00:00:00+0000): wait for it to end or use another --model_dir; if that run is gone, delete "
        f"{model_dir}/run.lock")


def test_which_file_systems_share_their_flocks_across_hosts(tmp_path, monkeypatch):
    from electra_tf.training import run_lock

    assert run_lock.flock_stays_local(str(tmp_path)) is None  # this machine's temporary directory
    for mount, stays_local in [(("ext4", "rw"), None), (("nfs4", "rw,vers=4.2"), None),
                               (("nfs", "rw,vers=3,nolock"), "nfs mounted with nolock"),
                               (("nfs4", "rw,local_lock=flock"), "nfs4 mounted with local_lock=flock"),
                               (("fuse.gcsfuse", "rw"), "fuse.gcsfuse"), (None, "file system unknown")]:
        monkeypatch.setattr(run_lock, "_mount_of", lambda path: mount)
        assert run_lock.flock_stays_local(str(tmp_path)) == stays_local, mount


def test_object_stores_are_not_locked_with_one_warning(caplog):
    from electra_tf.training.run_lock import lock_run_dir

    assert lock_run_dir("gs://bucket/run", flag="--output_dir") is None
    assert "--output_dir gs://bucket/run is on an object store: not locked (run.lock protects local and NFS " \
           "directories only); make sure no other run writes there" in caplog.text


def test_process_start_ticks_tell_a_reused_pid_apart():
    from electra_tf.training.run_lock import process_start_ticks

    mine = process_start_ticks(os.getpid())
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert mine == start_ticks(os.getpid()) and process_start_ticks(child.pid) == start_ticks(child.pid) >= mine
    finally:
        child.kill()
        child.wait()
    assert process_start_ticks(child.pid) is None  # gone
