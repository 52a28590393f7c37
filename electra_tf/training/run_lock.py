"""One writer per run directory: the ``run.lock`` file in ``--model_dir``.

``run_pretraining.py`` takes the lock before it trains or exports (in a
multi-worker run only the chief, which is the only writer of checkpoints) and
removes it when it exits, normally or with an error. A second run on the same
directory is refused with one line naming the holder's host and pid.

The file holds ``{"host", "pid", "start_time"}`` as JSON. It is created with
``O_CREAT | O_EXCL``, which is atomic on local file systems and on NFS
(v3 and later), so of two runs starting together exactly one gets it.

A lock whose host is this host and whose pid is not alive is stale (its run
was killed without cleaning up): it is taken over with a warning. A lock held
by another host cannot be checked from here and is refused; the message says
which file to delete if that run is gone.

Object stores (``gs://``, ``s3://``) have neither an exclusive create through
this path nor pids to check; the usual answer there is a lease file with a
heartbeat (the holder rewrites a timestamp every few seconds, and a lease not
renewed within its term may be taken). This lock protects local and NFS
directories only: for a ``--model_dir`` with a ``scheme://`` it is skipped
with a warning.

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
import json
import os
import socket
import time
from typing import Optional

from absl import logging

LOCK_NAME = "run.lock"
_HELD: list = []  # the RunLocks this process has acquired (released ones stay: release is idempotent)


class RunLockError(RuntimeError):
    """``--model_dir`` is locked by another run."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def _read(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            holder = json.load(f)
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None


class RunLock:
    """``run.lock`` in ``model_dir``; ``held`` is True exactly while this process owns the file."""

    def __init__(self, model_dir: str):
        self.model_dir = model_dir
        self.path = os.path.join(model_dir, LOCK_NAME)
        self.held = False
        self.me = {"host": socket.gethostname(), "pid": os.getpid()}

    def acquire(self) -> None:
        """Takes the lock; raises RunLockError naming the holder if another live run has it."""
        try:
            os.makedirs(self.model_dir, exist_ok=True)
        except OSError as e:
            raise ValueError(f"--model_dir {self.model_dir} is not writable: {e}") from None
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if self._stale(holder) and self._take_over(holder):
                    continue
                raise RunLockError(self._refusal(holder)) from None
            except OSError as e:
                raise ValueError(f"--model_dir {self.model_dir} is not writable: {e}") from None
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({**self.me, "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, f)
                f.flush()
                os.fsync(f.fileno())
            self.held = True
            _HELD.append(self)
            atexit.register(self.release)
            return
        raise RunLockError(self._refusal(self._holder()))

    def release(self) -> None:
        """Removes the lock file if this process holds it (idempotent)."""
        if not self.held:
            return
        self.held = False
        holder = _read(self.path)
        if holder and holder.get("pid") == self.me["pid"] and holder.get("host") == self.me["host"]:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def _holder(self) -> Optional[dict]:
        holder = _read(self.path)
        if holder is None and os.path.exists(self.path):  # the holder may be between create and write
            time.sleep(0.2)
            holder = _read(self.path)
        return holder

    def _stale(self, holder: Optional[dict]) -> bool:
        return bool(holder) and holder.get("host") == self.me["host"] and not pid_alive(holder["pid"])

    def _take_over(self, holder: dict) -> bool:
        """Removes the stale lock ``holder``; False if the file changed meanwhile (another run took it)."""
        aside = f"{self.path}.stale-{self.me['pid']}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return True  # removed by someone else: try to create it again
        if _read(aside) != holder:  # another run replaced the stale lock first: put its lock back
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
            os.unlink(aside)
            return False
        os.unlink(aside)
        logging.warning("Took over the stale lock %s of host %s, pid %s (started %s), which no longer runs",
                        self.path, holder.get("host"), holder.get("pid"), holder.get("start_time", "?"))
        return True

    def _refusal(self, holder: Optional[dict]) -> str:
        if holder is None:
            return (f"--model_dir {self.model_dir} is locked by {self.path}, which is not readable: if no run "
                    f"uses this directory, delete {self.path}")
        return (f"--model_dir {self.model_dir} is in use by another run (host {holder.get('host')}, pid "
                f"{holder.get('pid')}, started {holder.get('start_time', '?')}): wait for it to end or use another "
                f"--model_dir; if that run is gone, delete {self.path}")


def release_all() -> None:
    """Releases every lock this process holds (for exits that skip ``finally`` and ``atexit``)."""
    for lock in _HELD:
        lock.release()


def lock_for_worker(model_dir: str, chief: bool) -> Optional[RunLock]:
    """``lock_run_dir`` on the chief; None on the other workers of a multi-worker run.

    They share ``model_dir`` with the chief but write nothing there (their checkpoint saves go to a
    temporary directory), and the chief's lock must not refuse them.
    """
    return lock_run_dir(model_dir) if chief else None


def lock_run_dir(model_dir: str) -> Optional[RunLock]:
    """The held lock of ``model_dir``, or None (with a warning) where it cannot protect (object stores)."""
    if "://" in model_dir:
        logging.warning("--model_dir %s is on an object store: not locked (run.lock protects local and NFS "
                        "directories only); make sure no other run writes there", model_dir)
        return None
    lock = RunLock(model_dir)
    lock.acquire()
    return lock
