r"""Benchmark: the pool engine vs the Beam engine of ``build_pretraining_dataset``, end to end.

Each repeat runs the command line twice, interleaved (pool, beam, pool, beam, ...), each time
into a fresh output directory, with ``--num_processes=2``: the pool engine's two worker
processes against Beam's in-process ``FnApiRunner`` with ``direct_running_mode=multi_processing``
and ``direct_num_workers=2`` (the Beam engine's default without ``--runner``).  The wall time
includes start-up (interpreter, TensorFlow import, tokenizer, Beam's worker processes), as a user
sees it.  Every run's shards are checked byte for byte against the first pool run's.  The load
average before the runs is recorded: other work on the machine slows both engines alike, since
their runs alternate.

Usage:

    python -m bench.data_prep_beam_bench --name=enwiki_AA --repeats=3     # the whole ../shared/data/pretrain/enwiki/AA
    python -m bench.data_prep_beam_bench --num_files=2 --repeats=1 --name=smoke

Writes ``bench/results/data_prep_beam-<name>.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
ENGINES = ("pool", "beam")


def command(engine: str, inputs: list[Path], vocab: Path, out_dir: Path, processes: int,
            max_seq_length: int) -> list[str]:
    return [sys.executable, "-m", "data_prep.build_pretraining_dataset",
            f"--input={','.join(str(p) for p in inputs)}", f"--vocab_file={vocab}", f"--output_dir={out_dir}",
            f"--max_seq_length={max_seq_length}", f"--num_processes={processes}", f"--engine={engine}"]


def run_once(argv: list[str]) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"failed: {' '.join(argv)}\n{proc.stderr[-3000:]}")
    return seconds, proc.stderr


def same_shards(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir() if p.name.startswith("pretrain_data"))
    return names == sorted(p.name for p in b.iterdir() if p.name.startswith("pretrain_data")) and \
        all(filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input_dir", default=str(SHARED / "pretrain" / "enwiki" / "AA"))
    parser.add_argument("--num_files", type=int, default=0, help="first N files of --input_dir (0: all)")
    parser.add_argument("--vocab_file", default=str(SHARED / "vocab" / "en_uncased" / "vocab.txt"))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default="enwiki_AA")
    args = parser.parse_args()

    inputs = sorted(Path(args.input_dir).iterdir())
    if args.num_files:
        inputs = inputs[:args.num_files]
    input_bytes = sum(p.stat().st_size for p in inputs)
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="data_prep_beam_bench-"))
    runs = {engine: [] for engine in ENGINES}
    reference, runner, manifest = None, None, None
    try:
        for repeat in range(args.repeats):
            for engine in ENGINES:
                out_dir = work / f"{engine}-{repeat}"
                argv = command(engine, inputs, Path(args.vocab_file), out_dir, args.processes,
                               args.max_seq_length)
                seconds, stderr = run_once(argv)
                manifest = json.loads((out_dir / "manifest.json").read_text())
                if reference is None:
                    reference = out_dir
                elif not same_shards(reference, out_dir):
                    sys.exit(f"{engine} run {repeat}: shards differ from {reference}")
                if engine == "beam":
                    runner = re.search(r"runner: (.*)", stderr).group(1)
                runs[engine].append(seconds)
                print(f"repeat {repeat} {engine}: {seconds:.1f} s", flush=True)
                if out_dir != reference:
                    shutil.rmtree(out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    examples = manifest["num_examples"]
    results = {}
    for engine, seconds in runs.items():
        median = statistics.median(seconds)
        results[engine] = {"seconds": [round(s, 2) for s in seconds], "median_seconds": round(median, 2),
                           "mb_per_s": round(input_bytes / 1e6 / median, 3),
                           "examples_per_s": round(examples / median, 1),
                           "mb_per_s_per_process": round(input_bytes / 1e6 / median / args.processes, 3)}
    ratio = results["beam"]["median_seconds"] / results["pool"]["median_seconds"]
    report = {
        "command": "python -m bench.data_prep_beam_bench " + " ".join(sys.argv[1:]),
        "build_commands": {engine: " ".join(command(engine, [Path(args.input_dir) / "<files>"],
                                                    Path(args.vocab_file), Path("<out>"), args.processes,
                                                    args.max_seq_length)[1:]) for engine in ENGINES},
        "inputs": f"{args.input_dir} ({len(inputs)} files)", "input_bytes": input_bytes,
        "num_shards": manifest["num_shards"], "num_examples": examples,
        "processes": args.processes, "repeats": args.repeats, "beam_runner": runner,
        "timing": "end to end (start-up included), median of interleaved repeats",
        "shards_identical": True, "results": results,
        "beam_over_pool_time": round(ratio, 3), "within_2x": ratio <= 2.0,
        "loadavg_before": [round(x, 2) for x in load_before], "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "apache_beam": _version("apache_beam"), "tensorflow": _version("tensorflow"),
    }
    path = REPO / "bench" / "results" / f"data_prep_beam-{args.name}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'engine':6} {'median s':>9} {'MB/s':>7} {'examples/s':>11}")
    for engine, r in results.items():
        print(f"{engine:6} {r['median_seconds']:9.1f} {r['mb_per_s']:7.2f} {r['examples_per_s']:11.0f}")
    print(f"beam/pool time: {ratio:.2f} (runner: {runner}); load average before: {load_before[0]:.2f}")
    print(f"wrote {path}")


def _version(module: str) -> str:
    from importlib.metadata import version
    try:
        return version({"apache_beam": "apache-beam"}.get(module, module))
    except Exception:
        return "absent"


if __name__ == "__main__":
    main()
