"""Stopping cleanly when asked to (SIGTERM): checkpoint at the step reached, then exit 0.

Schedulers and pre-emptible VMs (Kubernetes, Slurm, GCE/GKE spot, TPU VMs) send SIGTERM
and wait a grace period before SIGKILL. `StopRequest` turns the signal into a stop
after the step in progress, so the run checkpoints the step it reached and a re-run
resumes exactly there.

While the main thread is inside the compiled multi-step `tf.function`, Python signal
handlers cannot run. `StopRequest.call` therefore runs each multi-step call in a helper
thread while the main thread waits: the handler runs at once, sets `local` (a boolean
`tf.Variable`), and the step driver (`loop.make_step_driver(stop_requested=...)`)
ends its in-graph loop after the step in progress.

With several workers (MultiWorkerMirroredStrategy), all of them must stop after the
same step: a worker that stopped alone would leave the others waiting in the next
step's collectives. The driver then reads `agreed`, not `local`: `wrap_step` adds to
every step an all-reduce of the workers' `local` flags and stores the result in
`agreed`, so every worker sees the same decision after the same step, whichever
worker (or all of them) got the signal. TF's `PreemptionCheckpointHandler` agrees
through the coordination service only between calls, i.e. every `steps_per_loop` steps.

Example:

>>> import tensorflow as tf
>>> request = StopRequest(tf.distribute.get_strategy(), signals=())
>>> request.requested, request.call(lambda x: x + 1, 1)
(False, 2)
"""

from __future__ import annotations

import concurrent.futures
import signal
import threading

import keras
import tensorflow as tf
from absl import logging

from electra_tf.training import distribution
from electra_tf.ops.replicas import all_reduce_sum

STOP_SIGNALS = (signal.SIGTERM,)


class StopRequest:
    """A stop request set by a signal handler and read by the step driver.

    Use as a context manager: it installs the handlers for `signals` on entry (main
    thread only) and restores the previous ones on exit.
    """

    def __init__(self, strategy: tf.distribute.Strategy, signals=STOP_SIGNALS):
        self.signals = tuple(signals)
        self.multi_worker = distribution.num_workers(strategy) > 1
        # Plain (not mirrored) variables on this worker: created outside the strategy's scope.
        self.local = tf.Variable(False, trainable=False, name="stop_requested_here")
        self.agreed = tf.Variable(False, trainable=False, name="stop_agreed") if self.multi_worker else self.local
        self.received: str | None = None
        self._previous = {}
        self._executor = None

    def __enter__(self):
        if self.signals and threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
            policy = keras.mixed_precision.global_policy()  # Keras' global state is per thread
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="train_steps",
                initializer=keras.mixed_precision.set_global_policy, initargs=(policy,))
        return self

    def __exit__(self, *exc_info):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        first = self.received is None
        self.received = self.received or name
        self.local.assign(True)
        if first:
            logging.warning("%s received: stopping after the step in progress to save a checkpoint", name)

    def request(self):
        """Asks for a stop as the signal handler does (e.g. from another thread)."""
        self.local.assign(True)

    @property
    def requested(self) -> bool:
        """The decision the driver acts on (the same on every worker after every step)."""
        return bool(self.agreed.numpy())

    @property
    def requested_here(self) -> bool:
        """This process received a signal (its workers may not have acted on it yet)."""
        return bool(self.local.numpy())

    def wrap_step(self, step_fn):
        """`step_fn` plus, with several workers, the all-reduce of the stop flags into `agreed`."""
        if not self.multi_worker:
            return step_fn

        def step(batch):
            outputs = step_fn(batch)
            votes = all_reduce_sum(tf.cast(self.local.read_value(), tf.float32))
            self.agreed.assign(votes > 0)
            return outputs

        return step

    def call(self, fn, *args):
        """`fn(*args)`, run in a helper thread while this (main) thread waits, so signals are handled."""
        if self._executor is None:
            return fn(*args)
        future = self._executor.submit(fn, *args)
        while True:
            try:
                return future.result(timeout=1.0)
            except concurrent.futures.TimeoutError:
                continue
            except KeyboardInterrupt:  # let the call end after its current step, then abort
                self.local.assign(True)
                concurrent.futures.wait([future])
                raise
