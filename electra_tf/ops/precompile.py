"""The XLA:CPU kernels compiled on a second thread while the step is still being traced.

A training step's first call used to compile its XLA kernels one after another as execution first reached each
(Small: 29 kernels, about 3 s on a 2-core CPU), after Python had traced the step (about 5 s on one core) and
TensorFlow had instantiated it: the other core idled through the trace. `jit(fn)` is
`tf.function(fn, jit_compile=True)` that, each time a graph being traced calls it with fully known shapes, hands
the call to a background thread. That thread calls the same concrete function from a small graph of its own on
zeros of the same shapes and dtypes (made on the step's thread, see `_caller`): XLA keys a compiled kernel by the
function's name, its call attributes (none from a graph) and its arguments' types and shapes, so the step's call
then finds the kernel compiled, or waits for the compilation in progress (`tests/test_precompile.py` checks the
graph's run compiles none again). An eager call has other call attributes and another key, so kernels are
compiled from a graph here, not eagerly. The kernels XLA builds are the same whichever thread asks: nothing
computed changes.

Only where every device is a CPU (the kernels are the CPU default; the saving is measured there,
`bench/xla_cache_first_step.py`), and not for a function that closes over tensors of the graph calling it or
takes anything but tensors and Python constants. A call that cannot be compiled this way is skipped quietly: the
step compiles it as before. At exit the thread finishes the compilation in progress and drops the rest.

Example:

>>> import tensorflow as tf
>>> from electra_tf.ops import precompile
>>> double = precompile.jit(lambda x: 2.0 * x, autograph=False)
>>> @tf.function(autograph=False)
... def graph(x):
...     return double(x) + 1.0
>>> traced = graph.get_concrete_function(tf.TensorSpec([3]))  # the trace queues `double` on [3]
>>> precompile.wait(120)  # compiled on the other thread; the run below finds it
True
>>> traced(tf.constant([1.0, 2.0, 3.0])).numpy().tolist()
[3.0, 5.0, 7.0]
"""

from __future__ import annotations

import atexit
import functools
import queue
import threading

import tensorflow as tf

_PLAIN = (bool, int, float, str, bytes, type(None), tf.DType)


def jit(fn, **options):
    """`tf.function(fn, jit_compile=True, **options)` whose calls from a traced graph are compiled ahead."""
    return Precompiled(tf.function(fn, jit_compile=True, **options))


class Precompiled:
    """A jit-compiled `tf.Function` that hands each call from a traced graph to the background compiler."""

    def __init__(self, function):
        self.function = function
        self.__doc__ = function.__doc__

    def __call__(self, *args, **kwargs):
        outputs = self.function(*args, **kwargs)
        if not tf.executing_eagerly() and enabled():
            submit(self.function, args, kwargs)
        return outputs

    def __getattr__(self, name):
        return getattr(self.function, name)


@functools.cache
def _every_device_a_cpu() -> bool:
    return all(device.device_type == "CPU" for device in tf.config.list_logical_devices())


_switch = {"on": True}


def enabled() -> bool:
    return _switch["on"] and _every_device_a_cpu()


def set_enabled(on: bool) -> bool:
    """Turns ahead-of-call compilation on or off for the process (tests); returns the previous setting."""
    previous, _switch["on"] = _switch["on"], bool(on)
    return previous


def submit(function, args, kwargs):
    """Queues the compilation of `function`'s call on `args`, `kwargs` (from a graph being traced), once per
    concrete function and shapes; does nothing where that call cannot be made from another graph."""
    flat = tf.nest.flatten((args, kwargs))
    if not all(isinstance(x, tf.Tensor) or isinstance(x, _PLAIN) for x in flat):
        return
    tensors = [x for x in flat if isinstance(x, tf.Tensor)]
    if not all(t.shape.is_fully_defined() for t in tensors):
        return
    concrete = function.get_concrete_function(*args, **kwargs)
    if concrete.captured_inputs:
        return
    shapes = tuple((tuple(t.shape), t.dtype) for t in tensors)
    worker = _worker()
    if not worker.wants((concrete.name, shapes)):
        return
    with tf.init_scope():  # eager-context function and tensors, for the background thread to call
        caller = _caller(concrete, flat, (args, kwargs), shapes)
        scalars = [tf.zeros([], dtype) for _, dtype in shapes]  # the zeros are made in the call, when it runs
    worker.submit((concrete.name, shapes), lambda: caller(*scalars))


def _caller(concrete, flat, structure, shapes):
    """A graph of its own that calls `concrete` on zeros of `shapes` (its call compiles the kernel); no outputs.

    Every traced function and every eager tensor takes a number from one process-wide counter, and a kernel's
    name, part of XLA's key (also in the persistent cache, `runtime.use_xla_cache`), is one: it must come out the
    same in every run of the same command. So what takes a number is made here, in the thread tracing the step
    (this graph, a scalar per argument), and the background thread's call creates no tensor: the kernel's outputs
    go to an assertion that always holds (a stateful op, so they are computed) instead of coming back."""

    def call(*scalars):  # arguments, not constants: nothing for grappler to fold or specialise the kernel on
        values = iter(tf.broadcast_to(scalar, shape) for scalar, (shape, _) in zip(scalars, shapes))
        args, kwargs = tf.nest.pack_sequence_as(structure, [next(values) if isinstance(x, tf.Tensor) else x
                                                            for x in flat])
        outputs = tf.nest.flatten(concrete(*args, **kwargs))
        total = tf.add_n([tf.reduce_sum(tf.cast(output, tf.float32)) for output in outputs])
        tf.raw_ops.Assert(condition=tf.logical_or(tf.equal(total, total), tf.math.is_nan(total)), data=[total])

    return tf.function(call, autograph=False).get_concrete_function(*[tf.TensorSpec([], dtype) for _, dtype in shapes])


class _Worker:
    """One daemon thread compiling queued calls in order, each key once."""

    def __init__(self):
        self.jobs = queue.SimpleQueue()
        self.keys = set()
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.pending = 0
        self.stopped = False
        self.failures = 0
        self.thread = threading.Thread(target=self.run, name="electra_tf-xla-precompile", daemon=True)
        self.thread.start()
        atexit.register(self.stop)

    def wants(self, key) -> bool:
        with self.lock:
            return not self.stopped and key not in self.keys

    def submit(self, key, job):
        with self.lock:
            if self.stopped or key in self.keys:
                return
            self.keys.add(key)
            self.pending += 1
        self.jobs.put(job)

    def run(self):
        while (job := self.jobs.get()) is not None:
            try:
                if not self.stopped:
                    job()
            except Exception:  # noqa: BLE001 - the step compiles the kernel itself, as without this thread
                self.failures += 1
            with self.lock:
                self.pending -= 1
                self.idle.notify_all()

    def wait(self, timeout=None) -> bool:
        with self.lock:
            return self.idle.wait_for(lambda: self.pending == 0, timeout)

    def stop(self):
        with self.lock:
            self.stopped = True
        self.jobs.put(None)
        self.thread.join()


def wait(timeout=None) -> bool:
    """Waits until every queued compilation is done (tests, benchmarks); False if `timeout` seconds passed first."""
    return _worker().wait(timeout)


def failures() -> int:
    """How many queued compilations failed (their kernels were compiled by the step instead)."""
    return _worker().failures


_worker_lock = threading.Lock()
_workers: list[_Worker] = []


def _worker() -> _Worker:
    with _worker_lock:
        if not _workers:
            _workers.append(_Worker())
        return _workers[0]
