"""Where our serving SavedModel's load + first request go: grappler on (TensorFlow's default) against off.

Not a test. Each (round, setting) is a fresh process that imports TensorFlow, then times `tf.saved_model.load` of
`WORKDIR/serving` (written by `python -m bench.inference_bench --stage=prepare`), the first request (one sentence:
the signature's function instantiated, grappler run over it) and a second one. `off` disables grappler's
meta-optimizer in that process (`tf.config.optimizer.set_experimental_options`), which only a loading process can
do: a SavedModel carries no optimizer options, and TF Serving sets its own.

    python -m bench.inference_bench_first_request --workdir=/tmp/inference_bench --rounds=4 \\
        --out=bench/results/inference-first-request.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench.inference_bench import ROOT, commit, cpu_name

SETTINGS = ("on", "off")
SENTENCE = "it 's a charming and often affecting journey ."


def child(workdir: str, grappler: str) -> dict:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

    if grappler == "off":
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    started = time.perf_counter()
    signature = tf.saved_model.load(os.path.join(workdir, "serving")).signatures["serving_default"]
    loaded = time.perf_counter()
    signature(text=tf.constant([SENTENCE]))
    first = time.perf_counter()
    signature(text=tf.constant([SENTENCE]))
    second = time.perf_counter()
    return {"grappler": grappler, "load_s": loaded - started, "first_request_s": first - loaded,
            "second_request_s": second - first}


def spawn(workdir: str, grappler: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "bench.inference_bench_first_request", "--child", grappler,
                             f"--workdir={workdir}"], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.returncode != 0:
        raise SystemExit(f"child (grappler {grappler}) failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inference_bench_first_request",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help="the results JSON to write")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.workdir, args.child)))
        return 0
    runs = []
    for i in range(args.rounds):
        order = SETTINGS if i % 2 == 0 else SETTINGS[::-1]
        runs += [spawn(args.workdir, grappler) for grappler in order]
        print(f"round {i + 1}: " + ", ".join(f"grappler {r['grappler']}: load {r['load_s']:.2f} s, first "
                                             f"{r['first_request_s']:.2f} s" for r in runs[-2:]), flush=True)
    summary = {grappler: {key: round(statistics.median(r[key] for r in runs if r["grappler"] == grappler), 3)
                          for key in ("load_s", "first_request_s", "second_request_s")} for grappler in SETTINGS}
    record = {"command": "python -m bench.inference_bench_first_request " + " ".join(
                  a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--out")),
              "commit": commit(), "machine": cpu_name(), "rounds": args.rounds, "medians": summary, "runs": runs}
    print(json.dumps(record, indent=1))
    if args.out:
        with open(args.out + ".tmp", "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
