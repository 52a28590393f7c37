"""What each kind of op a serving graph holds costs its first request: op kinds counted per export, and timed.

Not a test. Where oneDNN is on (TensorFlow's x86 default), instantiating a function runs oneDNN's layout pass
(`MklLayoutRewritePass`), which asks, for every node with a `T` type attribute, whether an oneDNN kernel exists for
its (op, T); the first time a thread asks about a pair, the answer is looked up in the whole kernel registry
(`mkl_op_registry::IsMklOp`, cached per thread). A serving export's first request instantiates its graph on one of
the executor's threads, so it pays that lookup once for each distinct (op, T) its graph holds, whatever the nodes.

Two measurements:

* `--exports`: the distinct (op, T) pairs in the functions a serving signature runs (from its `saved_model.pb`,
  before TensorFlow lowers `While` and `If`, which adds the `Enter`, `Merge`, `Switch`, `NextIteration` and `Exit` of
  each loop variable's type), per export directory;
* the probe: fresh processes, each timing the first call of one `tf.function` of `--kinds` float ops, either all of
  one kind (`same`) or each of its own kind (`distinct`), the same number of nodes, with oneDNN on and off
  (`TF_ENABLE_ONEDNN_OPTS`), the four cases rotated in each of `--rounds` rounds. (distinct − same) ÷ (kinds − 1)
  is what a kind costs a first call; its difference between on and off, what oneDNN's layout pass adds.

    python -m bench.first_call_op_kinds --rounds=8 \\
        --exports=/tmp/inference_bench/serving,/tmp/inference_bench_tagger/serving_tagger,… \\
        --out=bench/results/first-call-op-kinds.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench.inference_bench import ROOT, emit, run_header

# Unary float ops that oneDNN's layout pass leaves to TensorFlow's kernels (it rewrites none of them), so both
# settings run the same kernels; `same` repeats the first.
PROBE_OPS = ("Abs", "Neg", "Exp", "Sin", "Cos", "Sqrt", "Square", "Log1p", "Expm1", "Floor", "Ceil", "Round", "Sign",
             "Reciprocal", "Rsqrt", "Erf", "Erfc", "Atan", "Asinh", "Rint", "Lgamma", "Digamma", "Tan", "Sinh",
             "Cosh", "Atanh", "Acosh", "Asin", "Acos", "Log")
CASES = tuple((onednn, kinds) for onednn in ("on", "off") for kinds in ("same", "distinct"))


def op_kind_pairs(export_dir: str, signature: str = "serving_default") -> set:
    """The distinct (op, T) pairs (T a `DataType` enum) in the functions `signature` of the SavedModel at
    `export_dir` runs."""
    from tensorflow.core.protobuf import saved_model_pb2

    from electra_tf.serving.compact import functions_called

    model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        model.ParseFromString(f.read())
    meta_graph = model.meta_graphs[0]
    outputs = {t.name.split(":")[0] for t in meta_graph.signature_def[signature].outputs.values()}
    library = {f.signature.name: f for f in meta_graph.graph_def.library.function}
    called = functions_called([node for node in meta_graph.graph_def.node if node.name in outputs], library)
    return {(node.op, node.attr["T"].type) for name in called for node in library[name].node_def
            if "T" in node.attr and node.attr["T"].WhichOneof("value") == "type"}


def op_kinds(export_dir: str, signature: str = "serving_default") -> dict:
    """`op_kind_pairs`' count, and how many of each dtype."""
    import tensorflow as tf

    pairs = op_kind_pairs(export_dir, signature)
    by_dtype = {}
    for _, dtype in pairs:
        name = tf.dtypes.as_dtype(dtype).name
        by_dtype[name] = by_dtype.get(name, 0) + 1
    return {"op_kinds": len(pairs), "by_dtype": dict(sorted(by_dtype.items(), key=lambda item: -item[1]))}


def child(kinds: str, count: int) -> dict:
    """The first call of a function of `count` unary float ops (`kinds`: `same` or `distinct`), in ms."""
    import tensorflow as tf

    ops = [getattr(tf.raw_ops, name) for name in PROBE_OPS[:count]]
    if kinds == "same":
        ops = ops[:1] * count

    @tf.function
    def probe(x):
        return tf.add_n([op(x=x + float(i)) for i, op in enumerate(ops)])

    x = tf.constant([0.25, 0.5])
    started = time.perf_counter()
    probe(x).numpy()
    return {"first_call_ms": 1e3 * (time.perf_counter() - started)}


def spawn(onednn: str, kinds: str, count: int) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "1" if onednn == "on" else "0"}
    result = subprocess.run([sys.executable, "-m", "bench.first_call_op_kinds", f"--child={kinds}",
                             f"--kinds={count}"], capture_output=True, text=True, cwd=ROOT, env=env)
    if result.returncode != 0:
        raise SystemExit(f"child (oneDNN {onednn}, {kinds}) failed:\n{result.stderr[-3000:]}")
    return {"onednn": onednn, "kinds": kinds, **json.loads(result.stdout.strip().splitlines()[-1])}


def probe_summary(runs: list, count: int) -> dict:
    """Per oneDNN setting: the median first call of each case, and what one more kind costs."""
    summary = {}
    for onednn in ("on", "off"):
        medians = {kinds: statistics.median(r["first_call_ms"] for r in runs if (r["onednn"], r["kinds"]) ==
                                            (onednn, kinds)) for kinds in ("same", "distinct")}
        summary[f"oneDNN {onednn}"] = {**{f"{k}_ms": round(v, 1) for k, v in medians.items()},
                                       "per_kind_ms": round((medians["distinct"] - medians["same"]) / (count - 1), 2)}
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.first_call_op_kinds", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kinds", type=int, default=len(PROBE_OPS), help=f"ops in the probe (2 to {len(PROBE_OPS)})")
    parser.add_argument("--exports", default="", help="serving export directories to count, comma-separated")
    parser.add_argument("--child", choices=("same", "distinct"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help="the results JSON to write")
    args = parser.parse_args(argv)
    if not 2 <= args.kinds <= len(PROBE_OPS):
        parser.error(f"--kinds={args.kinds}: expected 2 to {len(PROBE_OPS)}")
    if args.child:
        print(json.dumps(child(args.child, args.kinds)))
        return 0
    exports = {os.path.basename(os.path.normpath(path)): op_kinds(path) for path in args.exports.split(",") if path}
    runs = []
    for i in range(args.rounds):
        order = CASES[i % len(CASES):] + CASES[:i % len(CASES)]
        runs += [spawn(onednn, kinds, args.kinds) for onednn, kinds in order]
        print(f"round {i + 1}: " + ", ".join(f"oneDNN {r['onednn']} {r['kinds']} {r['first_call_ms']:.0f} ms"
                                             for r in runs[-len(CASES):]), flush=True)
    record = {**run_header("bench.first_call_op_kinds", argv), "rounds": args.rounds, "probe_kinds": args.kinds,
              "probe": probe_summary(runs, args.kinds), "exports": exports, "runs": runs}
    emit(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
