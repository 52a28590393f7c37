"""`--profile`: a TF-profiler trace of a few steps of ours, summarised by op self time.

Op self time is grouped by op type, by where in the step the op runs (node-name scope) and by
what it computes (node-name classification); see `summarize_xplane`.
"""

import glob
import os
import re
import time
from collections import defaultdict

import tensorflow as tf

from bench.step_bench import harness, ours


def profile_ours(config, batch, precision, strategy, execution, steps, logdir) -> dict:
    impl = ours.OursPretraining(config, batch, precision, strategy, execution)
    impl.call(3)  # tracing and two warm-up steps
    harness.settle()
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    impl.run(steps)
    wall = time.perf_counter() - start
    tf.profiler.experimental.stop()
    impl.close()
    paths = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
    if not paths:
        return {"error": f"no .xplane.pb under {logdir}"}
    summary = summarize_xplane(paths[-1], steps)
    summary.update(wall_s_per_step=wall / steps, steps=steps, precision=precision, xplane=paths[-1])
    return summary


MATMUL_TYPES = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_MklMatMul", "_MklBatchMatMulV2",
                "_FusedMatMul", "_MklFusedMatMul", "Einsum", "_MklEinsum", "_MklNativeFusedMatMul",
                "_MklNativeBatchMatMulV2", "_MklFusedBatchMatMulV2", "_MklNativeMatMul"}


MAP_FN_PURPOSE = {"map": "example_seeds", "map_1": "mask positions", "map_2": "[MASK]/keep draw",
                  "map_3": "sampling uniforms"}


def _scope(node: str) -> str:
    """Where in our step an op runs, from its node name (keras layers name-scope their ops;
    masking, sampling, losses and metrics are top-level ops, reported by their own names)."""
    name = re.sub(r"^((while/)?(body|cond)/_\d+/)+", "", node)
    name = re.sub(r"^(while/)+", "", name)
    backward = name.startswith("gradient_tape/")
    if backward:
        name = re.sub(r"^gradient_tape/(while/)?", "", name)
    first = name.split("/")[0]
    if "electra_adam_w" in name or "adam" in name.lower():
        return "optimizer: AdamW variable updates"
    if first == "cond":
        return "non-finite guard (tf.cond)"
    if re.fullmatch(r"map(_\d+)?", first):
        return f"per-example RNG map_fn ({MAP_FN_PURPOSE.get(first, first)})"
    role = re.sub(r"_\d+$", "", first)
    if role in ("discriminator", "generator", "generator_head", "discriminator_head"):
        return f"{role} {'backward' if backward else 'forward'} (non-matmul ops)"
    if role in ("clip_by_global_norm", "global_norm"):
        return "global-norm clip"
    return ("backward, unscoped: " if backward else "unscoped: ") + role


FUNCTIONS = (  # (substring of the lower-cased node name, function); first match wins; matmuls are split off first
    ("electra_adam_w", "optimizer: AdamW variable updates"), ("clip_by_global_norm", "global-norm clip"),
    ("global_norm", "global-norm clip"), ("map_3/", "sampling: per-example map_fn RNG"),
    ("map/", "masking: per-example map_fn RNG"), ("map_1/", "masking: per-example map_fn RNG"),
    ("map_2/", "masking: per-example map_fn RNG"), ("dropout", "dropout (RNG + mask, fwd + bwd)"),
    ("gelu", "GELU (exact erf, fwd + bwd)"), ("layer_norm", "LayerNorm (fwd + bwd)"),
    ("softmax_1/", "attention softmax + mask (fwd + bwd)"), ("/softmax", "attention softmax + mask (fwd + bwd)"),
    ("self_attention", "attention: other (reshape/transpose/scale)"),
    ("sparsesoftmaxcrossentropy", "generator MLM loss (softmax CE over V)"),
    ("embedding", "embeddings (gather, scatter-add grads)"),
    ("biasadd", "bias add (fwd + bwd)"), ("cond/", "non-finite guard (tf.cond)"),
)


def _function(node: str, kind: str) -> str:
    if kind in MATMUL_TYPES:
        return "matmul (MatMul/BatchMatMul/Einsum)"
    lowered = node.lower()
    for key, label in FUNCTIONS:
        if key in lowered:
            return label
    if kind in ("BiasAdd", "BiasAddGrad"):
        return "bias add (fwd + bwd)"
    if kind in ("Log", "ArgMax", "AddV2") and "gradient_tape" not in lowered and "/while/" in node \
            and re.search(r"while/(Log|Log_1|ArgMax|add_\d+)$", node):
        return "Gumbel max / accuracy argmax (log, add, argmax over V)"
    if kind == "AddN":
        return "gradient accumulation (AddN)"
    return "other: " + kind


def _is_tf_op(meta) -> bool:
    """Executor op events are named "node/name:OpType" with display name "OpType"."""
    return bool(meta.display_name) and meta.name.endswith(":" + meta.display_name)


def summarize_xplane(path, steps) -> dict:
    """Op self time per op type, per scope and per node from the host plane of a TF profiler XSpace.

    An op's self time is its duration on the executor thread minus ops nested in it; work it hands to
    the Eigen pool (ParallelFor, oneDNN) counts to the op. Two executor threads run ops concurrently
    (inter-op parallelism), so op time summed over threads can exceed the wall time.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    by_type, by_scope, by_name = defaultdict(float), defaultdict(float), defaultdict(float)
    by_function = defaultdict(float)
    count_by_type = defaultdict(int)
    total = 0.0
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            events = sorted(((e.offset_ps, e.offset_ps + e.duration_ps, plane.event_metadata[e.metadata_id])
                             for e in line.events if _is_tf_op(plane.event_metadata[e.metadata_id])),
                            key=lambda e: (e[0], -e[1]))
            stack, self_ps = [], []
            for i, (begin, end, meta) in enumerate(events):
                while stack and events[stack[-1]][1] <= begin:
                    stack.pop()
                if stack:
                    self_ps[stack[-1]] -= min(end, events[stack[-1]][1]) - begin
                self_ps.append(end - begin)
                stack.append(i)
            for (begin, end, meta), ps in zip(events, self_ps):
                ms = ps / 1e9
                kind = meta.display_name
                node = meta.name.rsplit(":", 1)[0]
                by_type[kind] += ms
                count_by_type[kind] += 1
                by_scope["matmul (all)" if kind in MATMUL_TYPES else _scope(node)] += ms
                by_name[node] += ms
                by_function[_function(node, kind)] += ms
                total += ms
    per_step = lambda d: sorted(((k, v / steps) for k, v in d.items()), key=lambda kv: -kv[1])  # noqa: E731
    matmul = sum(v for k, v in by_type.items() if k in MATMUL_TYPES) / steps
    return {"op_ms_per_step_total": total / steps, "matmul_ms_per_step": matmul,
            "by_type": per_step(by_type)[:40], "by_scope": per_step(by_scope),
            "by_node": per_step(by_name)[:60], "by_function": per_step(by_function)[:40],
            "count_by_type_per_step": {k: v / steps for k, v in count_by_type.items()}}


def print_table(title: str, rows, total: float, counts=None, top=25):
    print(f"\n| {title} | ms/step | % of op time |{' calls/step |' if counts is not None else ''}")
    print(f"|---|---:|---:|{'---:|' if counts is not None else ''}")
    for name, ms in rows[:top]:
        calls = f" {counts.get(name, 0):.0f} |" if counts is not None else ""
        print(f"| {name} | {ms:.1f} | {100 * ms / total:.1f} % |{calls}")


def print_profile(p: dict):
    if "error" in p:
        print(f"\nProfile: {p['error']}")
        return
    total = p["op_ms_per_step_total"]
    print(f"\nTF profiler, ours {p['precision']} ({p['steps']} steps, {1000 * p['wall_s_per_step']:.0f} ms "
          f"wall per step; op self time summed over threads {total:.0f} ms/step, "
          f"matmuls {p['matmul_ms_per_step']:.0f} ms/step):")
    print_table("function (node-name classification; top 25)", p.get("by_function", []), total)
    print_table("where (node-name scope; top 30)", p["by_scope"], total, top=30)
    print_table("op type (top 25 by self time)", p["by_type"], total, counts=p["count_by_type_per_step"])
