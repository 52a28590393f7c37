"""Batch 1, ours against ONNX Runtime, in two live processes taking turns: a ratio the host's drift does not move.

Not a test. The four-system benches (`bench/inference_bench.py` and the tagger's and SQuAD's) time each system in a
fresh process of its own, one after the other; on a shared host whose speed drifts by tens of percent within
minutes, their batch-1 ratio moves with it (the tagger's: 1.44 to 1.97 over ten runs of one serving graph). Here
both systems are loaded once, each in its own process (`--child`), and answer the same requests in alternating
chunks: chunk c (`--chunk` requests) goes to one system, then the same requests to the other, the first of the two
alternating with c. Each chunk compares the two within seconds, so `chunk_ratios` (ours ÷ ONNX Runtime, each chunk's
medians) show how much the comparison itself varies, and the ratio of the medians over all `--requests` is
measured under the same host conditions for both.

The requests cycle through the bench's first `--distinct` inputs (200: the four-system benches' batch-1 requests),
after a warm-up of 10 of them in each process. The models are the benches' own (`--workdir` of `--bench`'s
`--stage=prepare`), loaded by that bench's `load_system`, so each request is the same raw text in, outputs out.

    python -m bench.inference_paired --bench=tagger --workdir=/tmp/inference_bench_tagger --requests=2000 \\
        --out=bench/results/inference-paired-tagger.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.inference_bench import ROOT, by_bucket, emit, run_header

SYSTEMS = ("ours", "ort")
WARM_UP = 10
# --bench → (the bench's module, a function of that module reading its default inputs)
BENCHES = {"classifier": ("bench.inference_bench", lambda m: m.read_sentences(m.DEFAULT_SST2)),
           "tagger": ("bench.inference_bench_tagger", lambda m: m.read_texts(m.DEFAULT_CONLL_DEV)),
           "squad": ("bench.inference_bench_squad", lambda m: m.read_pairs(m.DEFAULT_SQUAD_DEV, 500))}


def bench_inputs(bench: str) -> tuple:
    """(the bench's module, its inputs)."""
    name, read = BENCHES[bench]
    module = importlib.import_module(name)
    return module, read(module)


def child(bench: str, system: str, workdir: str, distinct: int) -> None:
    """Loads `system`, warms it up, says `ready`, then times each line of request indices (JSON) it reads, one
    request at a time, answering with their milliseconds (JSON), until its input closes."""
    module, inputs = bench_inputs(bench)
    inputs = inputs[:distinct]
    run = module.load_system(system, workdir)()
    for text in inputs[:WARM_UP]:
        run([text])
    print("ready", flush=True)
    for line in sys.stdin:
        timings = []
        for i in json.loads(line):
            started = time.perf_counter()
            run([inputs[i]])
            timings.append(1e3 * (time.perf_counter() - started))
        print(json.dumps(timings), flush=True)


def schedule(requests: int, chunk: int, distinct: int, systems=SYSTEMS) -> list[tuple[str, list[int]]]:
    """The turns: (system, request indices) per chunk and system, each chunk's indices the same for every system,
    the first system of a chunk alternating, the indices cycling through `distinct` inputs."""
    turns = []
    for c, start in enumerate(range(0, requests, chunk)):
        indices = [i % distinct for i in range(start, min(start + chunk, requests))]
        turns += [(system, indices) for system in (systems if c % 2 == 0 else systems[::-1])]
    return turns


def paired_summary(turns: list[tuple[str, list[int]]], timings: list[list[float]], bucket_of=None,
                   bucket_order=lambda name: name) -> dict:
    """Per system the median and p90 over all requests; ours ÷ ONNX Runtime of the medians; each chunk's ratio of
    medians (median, quartiles, range); with `bucket_of(index)`, per bucket (sorted by `bucket_order(name)`) the
    medians and their ratio."""
    by_system = {s: [t for (system, _), ts in zip(turns, timings) if system == s for t in ts] for s in SYSTEMS}
    summary = {s: {"median_ms": round(statistics.median(v), 3), "p90_ms": round(float(np.percentile(v, 90)), 3),
                   "requests": len(v)} for s, v in by_system.items()}
    chunks = {}  # `schedule`'s turns come a chunk's systems at a time
    for n, ((system, _), ts) in enumerate(zip(turns, timings)):
        chunks.setdefault(n // len(SYSTEMS), {})[system] = statistics.median(ts)
    chunk_ratios = [c["ours"] / c["ort"] for c in chunks.values()]
    quartiles = np.percentile(chunk_ratios, [25, 50, 75])
    summary["ours_over_ort"] = round(summary["ours"]["median_ms"] / summary["ort"]["median_ms"], 3)
    summary["chunk_ratios"] = {"chunks": len(chunk_ratios), "median": round(float(quartiles[1]), 3),
                               "quartiles": [round(float(quartiles[0]), 3), round(float(quartiles[2]), 3)],
                               "range": [round(min(chunk_ratios), 3), round(max(chunk_ratios), 3)]}
    if bucket_of is not None:
        groups = {s: by_bucket([t / 1e3 for t in by_system[s]],  # by_bucket takes seconds
                               [bucket_of(i) for (system, indices) in turns if system == s for i in indices])
                  for s in SYSTEMS}
        summary["by_bucket"] = {name: {**{f"{s}_ms": round(groups[s][name]["median_ms"], 3) for s in SYSTEMS},
                                       "ours_over_ort": round(groups["ours"][name]["median_ms"] /
                                                              groups["ort"][name]["median_ms"], 3)}
                                for name in sorted(groups["ours"], key=bucket_order)}
    return summary


def start_child(args, system: str, log):
    command = [sys.executable, "-m", "bench.inference_paired", f"--bench={args.bench}", f"--workdir={args.workdir}",
               f"--distinct={args.distinct}", f"--child={system}"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                               cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if process.stdout.readline().strip() != "ready":
        process.kill()
        log.seek(0)
        raise SystemExit(f"child {system} did not start:\n{log.read()[-3000:]}")
    return process


def run_turns(processes: dict, turns: list) -> list[list[float]]:
    timings = []
    for n, (system, indices) in enumerate(turns):
        process = processes[system]
        process.stdin.write(json.dumps(indices) + "\n")
        process.stdin.flush()
        timings.append(json.loads(process.stdout.readline()))
        if (n + 1) % (20 * len(SYSTEMS)) == 0:
            print(f"{n + 1}/{len(turns)} turns", flush=True)
    return timings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inference_paired", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", choices=sorted(BENCHES), required=True)
    parser.add_argument("--workdir", required=True, help="the bench's --workdir (its prepare stage's models)")
    parser.add_argument("--requests", type=int, default=2000, help="batch-1 requests to each system")
    parser.add_argument("--chunk", type=int, default=20, help="requests per turn")
    parser.add_argument("--distinct", type=int, default=200, help="the requests cycle through the first N inputs")
    parser.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help="the results JSON to write")
    args = parser.parse_args(argv)
    if args.child:
        child(args.bench, args.child, args.workdir, args.distinct)
        return 0
    module, inputs = bench_inputs(args.bench)
    inputs = inputs[:args.distinct]
    turns = schedule(args.requests, args.chunk, len(inputs))
    buckets = {}
    if hasattr(module, "word_bucket"):  # the tagger's requests by words, in its buckets' order
        buckets = {"bucket_of": lambda i: module.word_bucket(inputs[i]), "bucket_order": module.BUCKET_NAMES.index}
    load_before = os.getloadavg()
    with tempfile.TemporaryFile("w+") as log:
        processes = {system: start_child(args, system, log) for system in SYSTEMS}
        try:
            timings = run_turns(processes, turns)
        finally:
            for process in processes.values():
                process.stdin.close()
                process.wait()
    record = {**run_header("bench.inference_paired", argv), "bench": args.bench, "chunk": args.chunk,
              "distinct_inputs": len(inputs), "load_average": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
              **paired_summary(turns, timings, **buckets)}
    emit(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
