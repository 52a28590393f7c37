"""One writer per run directory: the ``run.lock`` file in ``--model_dir`` (``--output_dir`` when fine-tuning).

``run_pretraining.py`` (in a multi-worker run only the chief, the only writer of checkpoints) and
``run_finetuning.py`` take the lock before they write anything and hold it until they exit, normally or with an
error. A second run on the directory is refused with one line naming the holder's host, pid and start time. A run
that stops before writing anything removes the directory again if it created it.

**The kernel lock.** A run opens ``run.lock``, takes an exclusive ``fcntl.flock`` on it (``LOCK_EX | LOCK_NB``)
and keeps the file open for its whole life; then it writes ``{"host", "pid", "pid_start", "start_time"}`` into the
file, for the refusal message only (a run refused in the moment between the two reads the record the dead run
left, which it can tell is dead, and waits for the holder's own). The kernel drops the flock when the process
dies, however it dies, so a lock is stale exactly when no process holds its flock. Nothing a restart can fake
decides it: a container restarted on the same volume keeps its hostname and its entrypoint is pid 1 again, and the
pid a killed run recorded may belong to anyone by now. A run that finds a record nobody holds takes the file with a warning naming the run that left
it. There is no separate take-over step: getting the flock is the take-over, and the kernel grants it to one
process only. At a clean exit the run deletes the file while it still holds the flock; a run that opened the file
just before and then gets the flock of the deleted file sees that the name no longer leads to it and starts over.

**File systems.** On a local file system one kernel sees every lock. On NFS, Linux (since 2.6.12) emulates flock
with a POSIX byte-range lock on the whole file, which the server arbitrates (NLM for v3, the protocol itself for
v4), so runs on different clients exclude each other. The lock of a client that dies is freed by the server, not
at once: v4 when the client's lease expires (90 s by default), v3 when the client reboots and its ``statd`` tells
the server; a run started meanwhile is refused. NFS mounted with ``nolock`` or ``local_lock=flock|all`` keeps locks
on the client, and FUSE and other network file systems may: there, on any file system this module does not know,
and where flock fails as unsupported (``ENOLCK``, e.g. NFSv3 without ``lockd``; ``EOPNOTSUPP``), the lock falls
back to the record file alone, with one warning line.

**The fallback: pid and start time.** ``run.lock`` is created with ``O_CREAT | O_EXCL`` (atomic on local file
systems and on NFS v3 and later). A record written on this host is stale when its pid no longer runs or runs with
another start time (``/proc/PID/stat`` field 22, clock ticks since boot): a process that reuses the pid, and a
restarted container's pid 1, started at another time. The boot id would not do: a container restart keeps it. A
stale record is replaced under ``run.lock.takeover``, created exclusively: only its creator may replace the record,
after checking it is still the stale one, by renaming a complete file over it, so no third run can slip in
between (a run killed within those milliseconds leaves ``run.lock.takeover``: the next runs are refused naming
it). A record of another host cannot be checked from here and is refused; the message names the file to delete if
that run is gone. Every host writing a directory must lock it the same way (mount NFS with locking
everywhere): a run that holds only a record is not seen by one that holds the flock.

**Object stores** (``gs://``, ``s3://``) have neither kernel locks nor an exclusive create on this path; the usual
answer there is a lease with a heartbeat (the holder rewrites a timestamp every few seconds, and a lease not
renewed within its term may be taken). This lock does not cover them: a directory with a ``scheme://`` is not
locked, with a one-line warning.

Example:

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> lock = RunLock(d)
>>> lock.acquire()
>>> try:
...     RunLock(d).acquire()
... except RunLockError as e:
...     print(str(e).split(" (")[0])
--model_dir ... is in use by another run
>>> lock.release()
>>> os.path.exists(os.path.join(d, LOCK_NAME))
False
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import os
import re
import socket
import time
from typing import Optional

from absl import logging

LOCK_NAME = "run.lock"
# flock errors that mean "this file system has no flock" rather than "the file is locked".
_FLOCK_UNSUPPORTED = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})
# File systems that one kernel serves alone: its flock is seen by every process that can open the file.
_ONE_KERNEL_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs",
                                      "bcachefs", "tmpfs", "ramfs", "overlay", "vfat", "exfat", "ntfs3"})
_NFS_LOCAL_LOCK_OPTIONS = frozenset({"nolock", "local_lock=flock", "local_lock=all"})
_TRIES = 100  # attempts while the lock file changes under us (a holder leaving, a take-over in progress)
_HELD: list = []  # the RunLocks this process holds


class RunLockError(RuntimeError):
    """The run directory is locked by another run."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def process_start_ticks(pid: int) -> Optional[int]:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22); None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 2, the command name, is in parentheses and may hold spaces and parentheses itself.
    after_name = stat[stat.rfind(")") + 2:].split()
    try:
        return int(after_name[22 - 3])
    except (IndexError, ValueError):
        return None


def _read(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            holder = json.load(f)
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None


def _mount_of(path: str) -> Optional[tuple]:
    """(file system type, mount options) of the mount that holds ``path``, from /proc/self/mounts."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    real = os.path.realpath(path)
    best = None
    for fields in mounts:
        if len(fields) < 4:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])  # "\040" is a space
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):  # the last of equal mounts is the visible one
            best = (point, fields[2], fields[3])
    return best[1:] if best else None


def flock_stays_local(path: str) -> Optional[str]:
    """Why a flock on a file in ``path`` may not be seen by every host writing there (the file system); None
    where it is: a file system one kernel serves alone, or NFS mounted with locking."""
    mount = _mount_of(path)
    if mount is None:
        return "file system unknown"
    fs_type, options = mount
    if fs_type in ("nfs", "nfs4"):
        local = sorted(_NFS_LOCAL_LOCK_OPTIONS & set(options.split(",")))
        return f"{fs_type} mounted with {','.join(local)}" if local else None
    return None if fs_type in _ONE_KERNEL_FILE_SYSTEMS else fs_type


class RunLock:
    """``run.lock`` in ``model_dir``; ``held`` is True exactly while this process owns it."""

    def __init__(self, model_dir: str, flag: str = "--model_dir"):
        self.model_dir = model_dir
        self.flag = flag  # names the directory in messages
        self.path = os.path.join(model_dir, LOCK_NAME)
        self.held = False
        self.me = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": process_start_ticks(os.getpid())}
        self._fd: Optional[int] = None  # the open run.lock whose flock this process holds
        self._created_dirs: list = []  # removed again at release if still empty

    def acquire(self) -> None:
        """Takes the lock; raises RunLockError naming the holder if another live run has it."""
        self._make_dir()
        stays_local = flock_stays_local(self.model_dir)
        if stays_local:
            self._warn_fallback(f"its locks may stay on this host ({stays_local})")
        try:
            if stays_local or not self._acquire_flock():
                self._acquire_record()
        except BaseException:
            self._remove_created_dirs()
            raise
        self.held = True
        _HELD.append(self)

    def release(self) -> None:
        """Deletes the lock file and drops the lock if this process holds it (idempotent)."""
        if not self.held or os.getpid() != self.me["pid"]:  # a forked child must not release its parent's lock
            return
        self.held = False
        if self in _HELD:
            _HELD.remove(self)
        if self._fd is not None:
            if self._names_open_file(self._fd):  # deleted while the flock is still ours: see _acquire_flock
                _unlink(self.path)
            os.close(self._fd)
            self._fd = None
        elif self._is_mine(_read(self.path)):
            _unlink(self.path)
        self._remove_created_dirs()

    # --- the kernel lock ---

    def _acquire_flock(self) -> bool:
        """Holds the flock of the file named run.lock; False where this file system has no flock."""
        for _ in range(_TRIES):
            fd, created = self._open_lock_file()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunLockError(self._refusal(self._flock_holder(), deletable=False)) from None
            except OSError as e:
                os.close(fd)
                if e.errno not in _FLOCK_UNSUPPORTED:
                    raise ValueError(f"{self.flag} {self.model_dir}: cannot lock {self.path}: {e}") from None
                if created:
                    _unlink(self.path)  # empty and ours: the fallback creates the file itself
                self._warn_fallback(f"flock is not supported there ({e.strerror})")
                return False
            if self._names_open_file(fd):
                try:
                    self._record_in(fd)
                except OSError as e:
                    os.close(fd)  # drops the flock: the empty file is nobody's
                    raise ValueError(f"{self.flag} {self.model_dir} is not writable: {e}") from None
                self._fd = fd
                return True
            os.close(fd)  # its holder deleted the file at exit after we opened it: lock the one there now
        raise RunLockError(f"{self.flag} {self.model_dir}: {self.path} kept changing while this run tried to lock "
                           "it: another run is starting there")

    def _open_lock_file(self) -> tuple:
        """(fd, whether this call created the file) of run.lock, opened for writing."""
        for _ in range(_TRIES):
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                pass
            except FileNotFoundError:  # the directory was removed by a run that created it and just ended
                self._make_dir()
                continue
            except OSError as e:
                raise ValueError(f"{self.flag} {self.model_dir} is not writable: {e}") from None
            try:
                return os.open(self.path, os.O_RDWR), False
            except FileNotFoundError:  # deleted by its holder meanwhile
                continue
        raise RunLockError(f"{self.flag} {self.model_dir}: {self.path} kept changing while this run tried to lock "
                           "it: another run is starting there")

    def _names_open_file(self, fd: int) -> bool:
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def _record_in(self, fd: int) -> None:
        """Writes this run into the held file, warning about the run that left its record there."""
        left_by = _read(self.path)
        data = json.dumps(self._record()).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        if left_by:
            self._warn_took_over(left_by)

    # --- the fallback: the record file alone ---

    def _acquire_record(self) -> None:
        """Creates run.lock exclusively, or replaces a stale record in it under run.lock.takeover."""
        for _ in range(_TRIES):
            if self._create_record():
                return
            holder = self._holder()
            if holder is None and not os.path.exists(self.path):
                continue  # released meanwhile
            if not self._record_is_stale(holder):
                raise RunLockError(self._refusal(holder, deletable=True))
            if self._replace_stale(holder):
                return
            time.sleep(0.05)  # another run is taking it over: see who won
        takeover = self.path + ".takeover"
        raise RunLockError(f"{self.flag} {self.model_dir}: the take-over of its stale lock by another run did not "
                           f"finish: if no run uses this directory, delete {takeover}")

    def _create_record(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except FileNotFoundError:  # the directory was removed by a run that created it and just ended
            self._make_dir()
            return False
        except OSError as e:
            raise ValueError(f"{self.flag} {self.model_dir} is not writable: {e}") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._record(), f)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            _unlink(self.path)  # an empty lock would be refused as unreadable until deleted by hand
            raise ValueError(f"{self.flag} {self.model_dir} is not writable: {e}") from None
        return True

    def _record_is_stale(self, holder: Optional[dict]) -> bool:
        if not holder or holder.get("host") != self.me["host"]:
            return False  # unreadable, or another host's: nothing here can tell
        if not pid_alive(holder["pid"]):
            return True
        recorded, now = holder.get("pid_start"), process_start_ticks(holder["pid"])
        return recorded is not None and now is not None and recorded != now  # the pid was reused

    def _replace_stale(self, holder: dict) -> bool:
        """Replaces the stale record ``holder``; False if another run is taking it over or has taken it."""
        takeover = self.path + ".takeover"
        try:
            os.close(os.open(takeover, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        try:
            if _read(self.path) != holder:
                return False  # replaced by the run that held run.lock.takeover before us
            self._write_then_rename(self.path)
        finally:
            _unlink(takeover)
        self._warn_took_over(holder)
        return True

    def _write_then_rename(self, path: str) -> None:
        """Replaces ``path`` with this run's record: readers see the old record or ours, never a part."""
        temporary = f"{path}.{self.me['pid']}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                json.dump(self._record(), f)
                f.flush()
                os.fsync(f.fileno())
            os.rename(temporary, path)
        except OSError as e:
            _unlink(temporary)
            raise ValueError(f"{self.flag} {self.model_dir} is not writable: {e}") from None

    # --- shared ---

    def _record(self) -> dict:
        return {**self.me, "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def _is_mine(self, holder: Optional[dict]) -> bool:
        return bool(holder) and all(holder.get(key) == value for key, value in self.me.items())

    def _make_dir(self) -> None:
        missing, path = [], os.path.abspath(self.model_dir)
        while not os.path.isdir(path) and os.path.dirname(path) != path:
            missing.append(path)
            path = os.path.dirname(path)
        try:
            os.makedirs(self.model_dir, exist_ok=True)
        except OSError as e:
            raise ValueError(f"{self.flag} {self.model_dir} is not writable: {e}") from None
        self._created_dirs += [p for p in reversed(missing) if p not in self._created_dirs]

    def _remove_created_dirs(self) -> None:
        """A run that wrote nothing leaves no empty directory behind (the deepest first; one in use stays)."""
        while self._created_dirs:
            try:
                os.rmdir(self._created_dirs.pop())
            except OSError:
                self._created_dirs.clear()

    def _holder(self) -> Optional[dict]:
        holder = _read(self.path)
        for _ in range(5):  # the holder may be between creating the file and writing its record
            if holder is not None or not os.path.exists(self.path):
                break
            time.sleep(0.1)
            holder = _read(self.path)
        return holder

    def _flock_holder(self) -> Optional[dict]:
        """The record of the run that holds the flock. Between taking the flock and writing its record, that
        run's file still holds the record of the run that left it: one this host can tell is dead is not the
        holder's, so wait for the holder's own (another host's record cannot be checked and is taken as read)."""
        for _ in range(_TRIES):
            holder = self._holder()
            if holder is None or not self._record_is_stale(holder):
                return holder
            time.sleep(0.02)
        return None

    def _warn_fallback(self, reason: str) -> None:
        logging.warning("%s %s: %s, so %s is kept by pid and start time instead (another host's lock cannot be "
                        "checked)", self.flag, self.model_dir, reason, LOCK_NAME)

    def _warn_took_over(self, holder: dict) -> None:
        logging.warning("Took over the stale lock %s of host %s, pid %s (started %s), which no longer runs",
                        self.path, holder.get("host"), holder.get("pid"), holder.get("start_time", "?"))

    def _refusal(self, holder: Optional[dict], deletable: bool) -> str:
        """The one-line refusal; ``deletable``: the lock is only a record, which its dead holder may have left."""
        if holder is None:
            if not deletable:
                return (f"{self.flag} {self.model_dir} is in use by another run (its record in {self.path} is not "
                        f"readable): wait for it to end or use another {self.flag}")
            return (f"{self.flag} {self.model_dir} is locked by {self.path}, which is not readable: if no run uses "
                    f"this directory, delete {self.path}")
        refusal = (f"{self.flag} {self.model_dir} is in use by another run (host {holder.get('host')}, pid "
                   f"{holder.get('pid')}, started {holder.get('start_time', '?')}): wait for it to end or use another "
                   f"{self.flag}")
        return refusal + (f"; if that run is gone, delete {self.path}" if deletable else "")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def release_all() -> None:
    """Releases every lock this process holds (for exits that skip ``finally``; also run at exit)."""
    for lock in list(_HELD):
        lock.release()


atexit.register(release_all)


def lock_for_worker(model_dir: str, chief: bool) -> Optional[RunLock]:
    """``lock_run_dir`` on the chief; None on the other workers of a multi-worker run.

    They share ``model_dir`` with the chief but write nothing there (their checkpoint saves go to a
    temporary directory), and the chief's lock must not refuse them.
    """
    return lock_run_dir(model_dir) if chief else None


def lock_run_dir(model_dir: str, flag: str = "--model_dir") -> Optional[RunLock]:
    """The held lock of ``model_dir``, or None (with a warning) where it cannot protect (object stores)."""
    if "://" in model_dir:
        logging.warning("%s %s is on an object store: not locked (run.lock protects local and NFS directories "
                        "only); make sure no other run writes there", flag, model_dir)
        return None
    lock = RunLock(model_dir, flag)
    lock.acquire()
    return lock
