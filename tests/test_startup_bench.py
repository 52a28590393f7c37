"""bench/startup_bench.py: its grappler-log parser counts only the traced loop's first optimisation; its node
counts and kernel timeline."""

import importlib.util
import os

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "startup_bench.py")


@pytest.fixture(scope="module")
def startup_bench():
    spec = importlib.util.spec_from_file_location("startup_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no TensorFlow: that happens in main()
    return module


def _line(pass_name, ms):
    return (f"I0000 00:00:1795452958.5   25848 meta_optimizer.cc:973] {pass_name}: Graph size after: "
            f"100 nodes (-3), 200 edges (0), time = {ms}ms.\n")


def test_parser_sums_each_pass_of_the_first_loop_optimisation_only(startup_bench, tmp_path):
    log = tmp_path / "tf.log"
    log.write_text(
        "I0000 meta_optimizer.cc:1059] Starting optimization for grappler item: graph\n"
        + _line("model_pruner", 999)  # the dataset graph: not the loop
        + "I0000 meta_optimizer.cc:1092] Optimized main graph.\n"
        + "I0000 meta_optimizer.cc:1059] Starting optimization for grappler item: __inference_run_43394\n"
        + _line("model_pruner", 500) + _line("constant_folding", 1250.5)
        + _line("tfg_optimizer{any(tfg-consolidate-attrs,tfg-toposort,tfg-shape-inference{graph-version=0})}", 300)
        + _line("model_pruner", 250)  # second meta-optimizer iteration: summed with the first
        + "I0000 meta_optimizer.cc:1092] Optimized main graph.\n"
        + "I0000 meta_optimizer.cc:1059] Starting optimization for grappler item: __inference_run_43394\n"
        + _line("constant_folding", 7000)  # re-instantiation after an options toggle: left out
        + "I0000 meta_optimizer.cc:1092] Optimized main graph.\n")
    passes = startup_bench.grappler_pass_times(str(log))
    assert passes == pytest.approx({"constant_folding": 1.2505, "model_pruner": 0.75, "tfg_optimizer": 0.3})
    assert list(passes) == ["constant_folding", "model_pruner", "tfg_optimizer"]  # largest first


def test_parser_of_a_log_without_grappler_lines_is_empty(startup_bench, tmp_path):
    log = tmp_path / "tf.log"
    log.write_text("W0000 something else entirely\n")
    assert startup_bench.grappler_pass_times(str(log)) == {}


def test_graph_parts_classifies_nodes_by_name(startup_bench):
    class Node:
        def __init__(self, name, op="MatMul"):
            self.name, self.op = name, op

    class Function:
        def __init__(self, names):
            self.node_def = [Node(n) for n in names]

    class GraphDef:
        # The step alone: traced in the outer graph, its captured slots placeholders named after the optimizer.
        node = [Node("outer_a"), Node("gradient_tape/outer_b"), Node("electra_adam_w/m", "Placeholder")]
        library = type("Library", (), {"function": [
            Function(["while/electra_pretrainer/dense/MatMul", "gradient_tape/while/dense/MatMul",
                      "gradient_tape/while/dense/BiasAddGrad"]),
            Function(["cond/electra_adam_w/mul", "cond/electra_adam_w/AssignSubVariableOp",
                      "cond/electra_lamb/sub"])]})()

    class Concrete:
        graph = type("Graph", (), {"as_graph_def": staticmethod(lambda: GraphDef())})()

    assert startup_bench.graph_parts(Concrete()) == {
        "forward, losses, metrics, loop": 2, "backward": 3, "optimizer update": 3, "captured inputs": 1,
        "outer graph": 3}


def test_kernel_timeline_times_each_compilation_queued_by_a_trace(startup_bench):
    import tensorflow as tf

    from electra_tf.ops import precompile

    if not precompile.enabled():
        pytest.skip("kernels are compiled ahead only where every device is a CPU")
    double = precompile.jit(lambda x: 2.0 * x, autograph=False)

    @tf.function(autograph=False)
    def graph(x):
        return double(x) + 1.0

    timeline = startup_bench.KernelTimeline()
    try:
        timeline.start()
        graph.get_concrete_function(tf.TensorSpec([7]))  # queues `double` on [7]
        summary = timeline.summary(trace_s=0.5)
    finally:
        timeline.close()
    assert precompile._Worker.submit is timeline.submit  # restored
    (queued, started, ended), = summary["per_kernel_queued_started_ended_s"]
    assert summary["kernels"] == 1 and 0 <= queued <= started <= ended == summary["last_compiled_s"]
    assert summary["trace_ended_s"] == 0.5 and summary["compiling_s"] == pytest.approx(ended - started, abs=0.02)
