"""The XLA:CPU kernels compiled on a second thread while a step is traced (`electra_tf.ops.precompile`)."""

import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from electra_tf.ops import precompile, xla_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Traces a graph calling one kernel, waits for the background compiler, then runs the graph; TensorFlow's log
# (device_compiler=1) has a line per XLA compilation, and the markers say which happened during the run.
SCRIPT = """
import sys
import tensorflow as tf
from electra_tf.ops import precompile, xla_cpu
precompile.set_enabled(sys.argv[1] == "on")

@tf.function(autograph=False)
def graph(x, bias):
    return xla_cpu.bias_gelu(x, bias) * 2.0

x, bias = tf.reshape(tf.range(128, dtype=tf.float32), [8, 16]) / 64.0, tf.linspace(-1.0, 1.0, 16)
concrete = graph.get_concrete_function(x, bias)
assert precompile.wait(300)
print("CALL", file=sys.stderr, flush=True)
print("VALUES", concrete(x, bias).numpy().tobytes().hex(), precompile.failures(), file=sys.stderr, flush=True)
"""


def run_script(mode):
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}  # no persistent cache: every kernel compiles
    env.update(TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="device_compiler=1", PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    before, _, after = result.stderr.partition("CALL")
    values = next(line for line in after.splitlines() if line.startswith("VALUES")).split()
    compiled = "Compilation of XLA executable"
    return before.count(compiled), after.count(compiled), values[1], int(values[2])


def test_the_traced_call_is_compiled_before_the_graph_runs_and_computes_the_same():
    ahead, during, values, failures = run_script("on")
    assert (ahead, during, failures) == (1, 0, 0)  # compiled once, on the second thread; the run found it
    off_ahead, off_during, off_values, _ = run_script("off")
    assert (off_ahead, off_during) == (0, 1)  # without it the run compiles the kernel itself
    assert values == off_values  # bit for bit


def keys():
    return set(precompile._worker().keys)


def test_calls_that_cannot_run_from_another_graph_are_not_queued():
    before = keys()

    @tf.function(input_signature=[tf.TensorSpec([None, 16]), tf.TensorSpec([16])], autograph=False)
    def unknown_rows(x, bias):
        return xla_cpu.bias_gelu(x, bias)

    unknown_rows.get_concrete_function()

    @tf.function(autograph=False)
    def closes_over_the_graph(x):
        doubled = x * 2.0
        return precompile.jit(lambda z: z + doubled, autograph=False)(x)

    np.testing.assert_allclose(closes_over_the_graph(tf.ones([3])).numpy(), [3.0, 3.0, 3.0])
    xla_cpu.bias_gelu(tf.ones([2, 16]), tf.zeros([16]))  # eager: nothing to trace ahead of
    assert keys() == before


def test_a_traced_call_is_queued_once_and_compiled():
    failures = precompile.failures()

    @tf.function(autograph=False)
    def graph(x, bias):
        return xla_cpu.bias_gelu(x, bias) + xla_cpu.bias_gelu(x, bias)

    before = keys()
    graph.get_concrete_function(tf.ones([5, 24]), tf.zeros([24]))
    added = keys() - before
    assert len(added) == 1 and next(iter(added))[1] == (((5, 24), tf.float32), ((24,), tf.float32))
    assert precompile.wait(300) and precompile.failures() == failures
    np.testing.assert_allclose(graph(tf.ones([5, 24]), tf.zeros([24])).numpy(),
                               2 * xla_cpu.bias_gelu(tf.ones([5, 24]), tf.zeros([24])).numpy())


def test_off_queues_nothing():
    previous = precompile.set_enabled(False)
    try:
        before = keys()

        @tf.function(autograph=False)
        def graph(x, bias):
            return xla_cpu.bias_gelu(x, bias)

        graph.get_concrete_function(tf.ones([7, 24]), tf.zeros([24]))
        assert keys() == before
    finally:
        precompile.set_enabled(previous)
