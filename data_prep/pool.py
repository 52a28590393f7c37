"""Worker processes that build shards in parallel and report progress.

``WorkerPool`` is a ``multiprocessing`` pool plus a queue on which every
worker's ``shard_writer.build_shard`` reports ``(shard, bytes, examples,
skipped lines)`` increments.  Workers are forked while TensorFlow is not yet
loaded in the parent (cheap, and they inherit the character tables), else
spawned.  ``build_in_pool`` runs the pending shards, feeds the reports to a
progress object and re-raises a worker's exception (terminating the rest).

Example:

>>> from data_prep.pool import start_method
>>> start_method() in ("fork", "spawn")
True
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_lib
import sys
from typing import Optional

from data_prep import shard_writer


def _worker_init(progress_queue, initializer=None, initargs=()) -> None:
    shard_writer.set_progress_queue(progress_queue)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if initializer is not None:
        initializer(*initargs)


def start_method() -> str:
    """'fork' while TensorFlow is not loaded in this process, else 'spawn'.

    Forking a process that has initialised TensorFlow is unsafe (its thread
    pools do not survive a fork); forking before is safe and saves each
    worker the interpreter start-up.  The character tables are computed
    before forking so the workers inherit them.
    """
    if "tensorflow" in sys.modules or sys.platform != "linux":
        return "spawn"
    from electra_tf.text.normalization import _category_masks, _re2_patterns
    _category_masks()
    _re2_patterns()
    return "fork"


class WorkerPool:
    """A process pool plus the queue its workers report to.

    ``initializer(*initargs)`` runs in each worker after its own set-up (as
    in ``multiprocessing.Pool``; e.g. to warm a tokenizer up before a timed
    build).  A context manager: closes on success, terminates on error.
    """

    def __init__(self, processes: int, initializer=None, initargs=()):
        context = multiprocessing.get_context(start_method())
        self.queue = context.Queue()
        self.pool = context.Pool(processes, initializer=_worker_init,
                                 initargs=(self.queue, initializer, initargs))
        self.processes = processes

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.pool.close()
        else:
            self.pool.terminate()
        self.pool.join()


def make_pool(processes: int, initializer=None, initargs=()) -> WorkerPool:
    """A worker pool; ``initializer(*initargs)`` runs in each worker."""
    return WorkerPool(processes, initializer, initargs)


def _drain(pool: WorkerPool, progress, timeout: Optional[float]) -> bool:
    try:
        if timeout is None:
            message = pool.queue.get_nowait()
        else:
            message = pool.queue.get(timeout=timeout)
    except queue_lib.Empty:
        return False
    progress.add(*message[1:])
    return True


def build_in_pool(plan, pending: list[int], pool: WorkerPool, progress, drops: Optional[dict] = None) -> None:
    """Build the ``pending`` shards of ``plan`` in ``pool``; report to ``progress``.

    ``progress`` has ``add(bytes, examples, skipped)`` and a ``done`` counter;
    ``drops``: ``{shard: document positions to leave out}`` (``data_prep.dedup``).
    """
    drops = drops or {}
    results = [pool.pool.apply_async(shard_writer.build_shard, (plan, shard, drops.get(shard, frozenset())))
               for shard in pending]
    remaining = list(results)
    try:
        while remaining:
            _drain(pool, progress, timeout=0.02)
            for result in [r for r in remaining if r.ready()]:
                remaining.remove(result)
                result.get()  # re-raises a worker's exception here
                progress.done += 1
    except BaseException:
        pool.pool.terminate()
        raise
    while _drain(pool, progress, timeout=None):
        pass
