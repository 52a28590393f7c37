"""Where the first pre-training step's time goes: build, trace, graph optimisation, first step.

Not a test. Splits the first call of `training.make_train_fn`'s driver (what `run_pretraining.py`
runs) into Python tracing (`get_concrete_function`) and the first execution (grappler, function
instantiation, oneDNN rewrites and one step); counts the traced graph's nodes by part (forward,
backward, optimizer update); and compares, interleaved in one process, steps with TF's grappler
meta-optimizer on (TF's default) and off. Wall and CPU seconds are both printed: on a shared
machine CPU seconds are the steadier measure.

    python -m bench.startup_bench --size=small --rounds=4
    python -m bench.startup_bench --size=small --grappler_log   # per-pass grappler times
    python -m bench.startup_bench --size=small --grappler=off --rounds=0   # the CPU default's first step alone
    python -m bench.startup_bench --size=small --grappler=off --rounds=0 --step_loop=graph   # the steps in a while loop
    python -m bench.startup_bench --size=small --grappler=off --rounds=0 --kernel_timeline   # the kernels' compilations

Under `TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR` a second process finds the XLA kernels the first
compiled: the difference of their first calls is the kernels' compile time.

`--grappler_log` sets `TF_CPP_VMODULE=meta_optimizer=1` before TensorFlow is imported and sends
TF's log (file descriptor 2) to a file; the script sums each grappler pass's time from it, for the
first optimisation of the traced loop. TensorFlow is imported only in `main`, so the log parser
can be imported (and tested) without it.
"""

import argparse
import collections
import dataclasses
import os
import re
import statistics
import sys
import time

from electra_tf.options import STEP_LOOPS
from electra_tf.runtime import use_onednn_kernels


def redirect_tf_log() -> str:
    """Before TensorFlow is imported: have meta_optimizer log each pass, and send file descriptor 2
    (TF's C++ log, and Python's stderr) to a file to parse at the end."""
    os.environ["TF_CPP_VMODULE"] = "meta_optimizer=1"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"startup_bench_{os.getpid()}.log")
    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
    return path


class Timer:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu

    def pair(self):
        return {"wall_s": round(self.wall, 2), "cpu_s": round(self.cpu, 2)}


def graph_parts(concrete) -> dict:
    """Node counts of the traced function (the step driver's loop, or its step alone) and the functions it
    calls, by part: the optimizer update's nodes carry its name scope (`electra_adam_w`, `electra_lamb`);
    backward nodes carry the tape's `gradient_tape/` prefix. The traced function's placeholders are its
    captured inputs (variables, slots, the iterator), counted apart: slots are named after the optimizer."""
    counts = collections.Counter()
    graph = concrete.graph.as_graph_def()
    inner = [node for function in graph.library.function for node in function.node_def]
    for node in [node for node in graph.node if node.op != "Placeholder"] + inner:
        if "electra_adam_w" in node.name or "electra_lamb" in node.name:
            counts["optimizer update"] += 1
        elif node.name.startswith("gradient_tape/"):
            counts["backward"] += 1
        else:
            counts["forward, losses, metrics, loop"] += 1
    counts["captured inputs"] = sum(node.op == "Placeholder" for node in graph.node)
    counts["outer graph"] = len(graph.node)
    return dict(counts)


class KernelTimeline:
    """When each XLA:CPU kernel was queued for, started and ended compiling on `electra_tf.ops.precompile`'s
    thread, in seconds from `start()` (the first step's trace). Wraps the worker's private `submit`: a
    measurement only, for this bench."""

    def __init__(self):
        from electra_tf.ops import precompile

        self.origin, self.jobs = None, []
        self.submit = submit = precompile._Worker.submit

        def timed_submit(worker, key, job):
            queued = time.perf_counter()

            def timed_job():
                started = time.perf_counter()
                try:
                    job()
                finally:
                    self.jobs.append((queued, started, time.perf_counter()))

            return submit(worker, key, timed_job)

        precompile._Worker.submit = timed_submit

    def start(self):
        self.origin = time.perf_counter()

    def close(self):
        from electra_tf.ops import precompile

        precompile._Worker.submit = self.submit

    def summary(self, trace_s: float) -> dict:
        from electra_tf.ops import precompile

        precompile.wait(600)
        jobs = sorted((q - self.origin, s - self.origin, e - self.origin) for q, s, e in self.jobs)
        return {"kernels": len(jobs), "trace_ended_s": round(trace_s, 2),
                "last_queued_s": round(max((q for q, _, _ in jobs), default=0.0), 2),
                "compiling_s": round(sum(e - s for _, s, e in jobs), 2),
                "last_compiled_s": round(max((e for _, _, e in jobs), default=0.0), 2),
                "per_kernel_queued_started_ended_s": [[round(t, 2) for t in job] for job in jobs]}


def first_step(config, batch, strategy, grappler: bool, precision: str, step_loop: str = "auto",
               timeline: KernelTimeline | None = None) -> tuple:
    from bench.step_bench import ours
    execution = dataclasses.replace(ours.baseline_execution(strategy), graph_optimizer="on" if grappler else "off")
    if step_loop != "auto":
        execution = dataclasses.replace(execution, step_loop=step_loop)
    with Timer() as build:
        impl = ours.OursPretraining(config, batch, precision, strategy, execution)
    if timeline:
        timeline.start()
    with Timer() as trace:
        concrete = impl.fn.concrete_function(impl.iterator)
    with Timer() as first:
        impl.call(1)
    times = {"build": build.pair(), "trace": trace.pair(), "first_call": first.pair()}
    if timeline:
        times["kernel_compilation"] = timeline.summary(trace.wall)
        timeline.close()
    return impl, times, concrete


def timed_steps(impl, steps: int) -> dict:
    impl.call(1)
    with Timer() as t:
        impl.call(steps)
    return {"wall_s": t.wall / steps, "cpu_s": t.cpu / steps}


def grappler_pass_times(log_path: str) -> dict:
    """Seconds per grappler pass (summed over its iterations) for the first optimisation of the
    traced loop (`__inference_run_*`), from meta_optimizer's log lines. Later optimisations of the
    same function (TF re-instantiates it when the optimizer options are toggled) are left out."""
    totals = collections.defaultdict(float)
    pattern = re.compile(r"meta_optimizer\.cc:\d+\] (\S+?)(\{.*\})?: Graph size after: .* time = ([\d.]+)ms")
    inside = False
    with open(log_path, errors="replace") as f:
        for line in f:
            if "Starting optimization for grappler item: __inference_run" in line:
                inside = True
            elif inside and "Optimized main graph" in line:
                break
            elif inside and (match := pattern.search(line)):
                totals[match.group(1)] += float(match.group(3)) / 1000
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="small", choices=["tiny", "mini", "small", "base"],
                        help="model size; batch as in step_bench (Small 32, Base 8) × 128")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--rounds", type=int, default=4,
                        help="interleaved rounds of the grappler on/off step comparison (0: skip it)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per build per round")
    parser.add_argument("--grappler", default="both", choices=["both", "off"],
                        help="first steps to time: grappler on then off (the A/B), or off only (the CPU default's "
                             "first step, with nothing compiled before it in the process)")
    parser.add_argument("--step_loop", default="auto", choices=STEP_LOOPS,
                        help="where the driver loops the steps (auto: the default on this CPU, host); the trace is "
                             "the whole loop (graph) or the step alone (host)")
    parser.add_argument("--kernel_timeline", action="store_true",
                        help="also report when each XLA:CPU kernel was queued and compiled on the second thread "
                             "(seconds from the trace's start, beside the trace's end); the first call does not "
                             "wait for them")
    parser.add_argument("--grappler_log", action="store_true",
                        help="also report grappler's per-pass times (from TF's own log)")
    parser.add_argument("--json_out", default=None, help="write the numbers here as JSON")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    grappler_log = redirect_tf_log() if args.grappler_log else None
    if grappler_log:
        print(f"TensorFlow's log (and stderr) goes to {grappler_log}", flush=True)
    use_onednn_kernels()  # before TensorFlow is imported
    import tensorflow as tf

    from bench.step_bench import harness, workload
    from electra_tf.text.manifest import write_json_atomic

    config = workload.bench_config(args.size)
    batch = workload.pretraining_batch(config, args.size)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    machine = harness.machine()
    report = {"command": "python -m bench.startup_bench " + " ".join(argv), "commit": harness.commit_id(),
              "machine": machine, "hardware": harness.hardware_line(machine), "size": args.size,
              "precision": args.precision, "step_loop": args.step_loop}

    impls = {}
    timeline = KernelTimeline() if args.kernel_timeline else None
    for grappler in (True, False) if args.grappler == "both" else (False,):
        impl, times, concrete = first_step(config, batch, strategy, grappler, args.precision, args.step_loop,
                                           timeline if not impls else None)
        impls[grappler] = impl
        report[f"grappler_{'on' if grappler else 'off'}"] = times
        print(f"grappler {'on ' if grappler else 'off'}: " + ", ".join(
            f"{k} {v['wall_s']} s wall / {v['cpu_s']} CPU-s" for k, v in times.items() if "wall_s" in v), flush=True)
        if "kernel_compilation" in times:
            compilation = times["kernel_compilation"]
            print("XLA:CPU kernels:", {k: v for k, v in compilation.items() if not k.startswith("per_")}, flush=True)
    report["graph_nodes"] = graph_parts(concrete)
    print("traced function, nodes by part:", report["graph_nodes"], flush=True)

    rounds = args.rounds if args.grappler == "both" else 0  # the on/off A/B needs both first steps
    per_round = {True: [], False: []}
    for round_index in range(rounds):
        for grappler in ((True, False) if round_index % 2 == 0 else (False, True)):
            per_round[grappler].append(timed_steps(impls[grappler], args.steps))
        on, off = per_round[True][-1], per_round[False][-1]
        print(f"round {round_index}: CPU-s/step on {on['cpu_s']:.3f}, off {off['cpu_s']:.3f} "
              f"(on ÷ off {on['cpu_s'] / off['cpu_s']:.3f})", flush=True)
    if rounds:
        ratios = [on["cpu_s"] / off["cpu_s"] for on, off in zip(per_round[True], per_round[False])]
        report["steps"] = {"on": per_round[True], "off": per_round[False],
                           "cpu_ratio_on_over_off": ratios, "median_ratio": statistics.median(ratios)}
        print(f"step CPU time, grappler on ÷ off: median {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}–{max(ratios):.3f}; < 1: grappler makes steps faster)")

    if grappler_log:
        passes = grappler_pass_times(grappler_log)
        report["grappler_pass_seconds"] = passes
        print(f"grappler passes (grappler-on first call; log {grappler_log}), seconds: total "
              f"{sum(passes.values()):.1f}: " + ", ".join(f"{k} {v:.2f}" for k, v in passes.items()))
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        write_json_atomic(args.json_out, report)
    print("command:", report["command"])


if __name__ == "__main__":
    main(sys.argv[1:])
