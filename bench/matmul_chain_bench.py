"""What batch 1 costs below the serving graph: ELECTRA-Small's 72 encoder matmuls alone, TensorFlow against ORT.

Not a test. A chain of 12 layers of ELECTRA-Small's matmul shapes (query, key, value and output `[256, 256]`, the
feed-forward `[256, 1024]` and `[1024, 256]`; residual adds between, no attention or LayerNorm), random weights, on
`[rows, 256]` inputs: rows 3 (a one-word request: [CLS] word [SEP]) and 25 (SST-2's median request). TensorFlow
reads its weights from variables in a `tf.function` (as a serving export does; oneDNN's kernels where TensorFlow's
default turns them on), ONNX Runtime from initializers (which it packs once at load, 2 intra-op threads). Both in one
process, alternating per round; median ms per call over `--calls` calls.

`--weights=distinct,shared` times each chain a second time with every layer computing with the first layer's
weights (3 MB, which stay in the caches between calls, where the 12 layers' 36 MB do not): the difference is what
reading the weights from memory costs each system.

    python -m bench.matmul_chain_bench --rounds=3 --out=bench/results/matmul-chain-small.json
    python -m bench.matmul_chain_bench --rounds=3 --weights=distinct,shared \\
        --out=bench/results/matmul-chain-small-shared-weights.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from bench.inference_bench import emit, run_header

SHAPES = [(256, 256)] * 4 + [(256, 1024), (1024, 256)]
LAYERS = 12


WEIGHTS = ("distinct", "shared")


def weights(seed: int = 0, shared: bool = False):
    """The layers' weights (numpy); `shared`: the first layer's arrays in every layer (the same objects)."""
    rng = np.random.default_rng(seed)
    layers = [[(rng.standard_normal(shape) * 0.05).astype(np.float32) for shape in SHAPES] for _ in range(LAYERS)]
    return [layers[0]] * LAYERS if shared else layers


def stored_once(layers, store):
    """`store(array, index)` once per distinct array of `layers` (by identity), as the layers' structure."""
    stored = {}
    for layer in layers:
        for w in layer:
            if id(w) not in stored:
                stored[id(w)] = store(w, len(stored))
    return [[stored[id(w)] for w in layer] for layer in layers]


def tensorflow_chain(layers):
    import tensorflow as tf

    variables = stored_once(layers, lambda w, _: tf.Variable(w))

    @tf.function
    def chain(h):
        for q, k, v, o, up, down in variables:
            h = h + 0.01 * (tf.matmul(h, q) + tf.matmul(h, k) + tf.matmul(h, v) + tf.matmul(h, o))
            h = h + 0.01 * tf.matmul(tf.nn.relu(tf.matmul(h, up)), down)
        return h

    return lambda x: chain(tf.constant(x)).numpy()


def onnx_runtime_chain(layers):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    nodes, initializers, h = [], [], "x"

    def initializer(w, index):
        initializers.append(numpy_helper.from_array(w, f"w{index}"))
        return f"w{index}"

    for i, names in enumerate(stored_once(layers, initializer)):
        outs = [f"p{i}_{j}" for j in range(4)]
        nodes += [helper.make_node("MatMul", [h, names[j]], [outs[j]]) for j in range(4)]
        nodes += [helper.make_node("Sum", outs, [f"s{i}"]), helper.make_node("Mul", [f"s{i}", "c"], [f"m{i}"]),
                  helper.make_node("Add", [h, f"m{i}"], [f"h{i}"]),
                  helper.make_node("MatMul", [f"h{i}", names[4]], [f"u{i}"]),
                  helper.make_node("Relu", [f"u{i}"], [f"r{i}"]),
                  helper.make_node("MatMul", [f"r{i}", names[5]], [f"d{i}"]),
                  helper.make_node("Mul", [f"d{i}", "c"], [f"n{i}"]),
                  helper.make_node("Add", [f"h{i}", f"n{i}"], [f"g{i}"])]
        h = f"g{i}"
    initializers.append(numpy_helper.from_array(np.array(0.01, np.float32), "c"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 256])],
                              [helper.make_tensor_value_info(h, TensorProto.FLOAT, [None, 256])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})[0]


def median_ms(run, x, calls: int) -> float:
    for _ in range(20):
        run(x)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        run(x)
        times.append(time.perf_counter() - started)
    return round(1e3 * statistics.median(times), 3)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.matmul_chain_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rows", default="3,25")
    parser.add_argument("--weights", default="distinct",
                        help="comma-separated: distinct (each layer its own), shared (every layer the first's)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    chosen = [w for w in args.weights.split(",") if w]
    if not chosen or set(chosen) - set(WEIGHTS):
        parser.error(f"--weights={args.weights}: expected a comma-separated subset of {', '.join(WEIGHTS)}")
    inputs = {int(r): np.random.default_rng(1).standard_normal((int(r), 256)).astype(np.float32)
              for r in args.rows.split(",")}
    chains = {}
    for kind in chosen:
        layers = weights(shared=kind == "shared")
        pair = {"tensorflow": tensorflow_chain(layers), "onnx_runtime": onnx_runtime_chain(layers)}
        np.testing.assert_allclose(pair["tensorflow"](inputs[3]), pair["onnx_runtime"](inputs[3]), rtol=1e-4, atol=1e-4)
        chains.update({name + ("" if kind == "distinct" else f", {kind} weights"): run for name, run in pair.items()})
    runs = {f"{name}, {rows} rows": [] for rows in inputs for name in chains}
    for i in range(args.rounds):
        order = list(chains.items()) if i % 2 == 0 else list(chains.items())[::-1]
        for rows, x in inputs.items():
            for name, run in order:
                runs[f"{name}, {rows} rows"].append(median_ms(run, x, args.calls))
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]} ms" for k, v in runs.items()), flush=True)
    record = {**run_header("bench.matmul_chain_bench", argv), "rounds": args.rounds, "calls": args.calls,
              "median_ms": {k: statistics.median(v) for k, v in runs.items()}, "runs_ms": runs}
    emit(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
