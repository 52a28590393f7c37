"""Where our serving SavedModel's load + first request go: grappler on (TensorFlow's default) against off, per export.

Not a test. Each (round, export, setting) is a fresh process that imports TensorFlow, then times
`tf.saved_model.load` of `WORKDIR/EXPORT` (`--exports`, default `serving`, written by `python -m
bench.inference_bench --stage=prepare`; an earlier commit's by `--stage=export_ours` there, the directory renamed),
the first request (one sentence, or for a SQuAD export one question-context pair: the signature's function
instantiated, grappler run over it) and a second one, in wall and CPU seconds (CPU seconds are the steadier figure on
a shared machine). `off` disables grappler's meta-optimizer in that process
(`tf.config.optimizer.set_experimental_options`), which only a loading process can do: a SavedModel carries no
optimizer options, and TF Serving sets its own; `--grappler=on` times TensorFlow's default alone. The exports and
settings are rotated within each round; any export directory works (a tagger's, `bench.inference_bench_tagger`'s
`serving_tagger`; SQuAD's, `serving_squad`), e.g. two commits' exports of the same weights linked into one WORKDIR.

    python -m bench.inference_bench_first_request --workdir=/tmp/inference_bench --rounds=4 \\
        --exports=serving_main,serving --out=bench/results/inference-first-request.json
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

SETTINGS = ("on", "off")
SENTENCE = "it 's a charming and often affecting journey ."
# A SQuAD export's request (its signature takes `question` and `context`): SQuAD v1.1 dev's first question
# and the first three sentences of its context.
QUESTION = "Which NFL team represented the AFC at Super Bowl 50?"
CONTEXT = ("Super Bowl 50 was an American football game to determine the champion of the National Football League "
           "(NFL) for the 2015 season. The American Football Conference (AFC) champion Denver Broncos defeated the "
           "National Football Conference (NFC) champion Carolina Panthers 24–10 to earn their third Super Bowl title.")


def request(signature) -> dict:
    """One request's inputs for `signature`: a SQuAD pair, or (classifier, tagger) one sentence."""
    import tensorflow as tf

    names = set(signature.structured_input_signature[1])
    if names == {"question", "context"}:
        return {"question": tf.constant([QUESTION]), "context": tf.constant([CONTEXT])}
    return {"text": tf.constant([SENTENCE])}


def child(workdir: str, export: str, grappler: str) -> dict:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

    if grappler == "off":
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    clock = lambda: (time.perf_counter(), time.process_time())  # noqa: E731
    started = clock()
    signature = tf.saved_model.load(os.path.join(workdir, export)).signatures["serving_default"]
    loaded = clock()
    inputs = request(signature)
    signature(**inputs)
    first = clock()
    signature(**inputs)
    second = clock()
    return {"export": export, "grappler": grappler, "load_s": loaded[0] - started[0],
            "load_cpu_s": loaded[1] - started[1], "first_request_s": first[0] - loaded[0],
            "first_request_cpu_s": first[1] - loaded[1], "second_request_s": second[0] - first[0]}


def spawn(workdir: str, export: str, grappler: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "bench.inference_bench_first_request", "--child", grappler,
                             f"--export={export}", f"--workdir={workdir}"], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.returncode != 0:
        raise SystemExit(f"child ({export}, grappler {grappler}) failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inference_bench_first_request",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--exports", default="serving", help="export directories in WORKDIR, comma-separated")
    parser.add_argument("--grappler", default=",".join(SETTINGS), help="comma-separated: on (TensorFlow's default), off")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    parser.add_argument("--export", default="serving", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="the results JSON to write")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.workdir, args.export, args.child)))
        return 0
    settings = [s for s in args.grappler.split(",") if s]
    if not set(settings) <= set(SETTINGS):
        parser.error(f"--grappler={args.grappler}: expected a comma-separated subset of {', '.join(SETTINGS)}")
    cases = [(export, grappler) for export in args.exports.split(",") if export for grappler in settings]
    runs = []
    for i in range(args.rounds):
        order = cases[i % len(cases):] + cases[:i % len(cases)]
        runs += [spawn(args.workdir, export, grappler) for export, grappler in order]
        print(f"round {i + 1}: " + ", ".join(f"{r['export']} grappler {r['grappler']}: load {r['load_s']:.2f} s, "
                                             f"first {r['first_request_s']:.2f} s" for r in runs[-len(cases):]),
              flush=True)
    keys = ("load_s", "load_cpu_s", "first_request_s", "first_request_cpu_s", "second_request_s")
    summary = {f"{export}, grappler {grappler}": {
        key: round(statistics.median(r[key] for r in runs if (r["export"], r["grappler"]) == (export, grappler)), 3)
        for key in keys} for export, grappler in cases}
    record = {**run_header("bench.inference_bench_first_request", argv), "rounds": args.rounds, "medians": summary,
              "runs": runs}
    emit(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
