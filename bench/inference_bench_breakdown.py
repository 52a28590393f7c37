"""Where a batch-1 request to our serving SavedModels goes, and what an export change buys: one process, interleaved.

Not a test. Five parts (`--parts`), on the SST-2 dev sentences unless said otherwise, from the exports in WORKDIR
(`python -m bench.inference_bench --stage=prepare`, then an export per variant: `--stage=export_ours` at each commit,
the directory renamed; `--exports` names them, the first is the baseline):

* `ab`: every export loaded in ONE process and called in turn on each request (the order rotated), so load on the
  machine hits them alike: batch 1 (median, p90 and CPU ms per request over `--requests` sentences) and batch 32
  (sentences/s and CPU ms per sentence, two passes over the dev set in alternating order), and the largest
  |logit difference| against the first export; with `--head=tagger`, tagger exports (`python -m
  bench.inference_bench_tagger --stage=export_ours`) on the CoNLL-2003 dev sentences, and whether every
  sentence's tags equal the first export's;
* `parts`: one request's pieces, interleaved the same way, on the weights of WORKDIR's current commit: the
  signature call, an empty `tf.function` call on a string (Python's and TensorFlow's fixed cost of a call), the
  in-graph tokenisation alone, and the model alone on the tokenised ids;
* `attention`: where attention's two kernel sets cross (`serving.forward.FEW_TOKENS`): WORKDIR's weights exported
  twice as a classifier (to WORKDIR/attention_few_tokens and WORKDIR/attention_many_tokens), attention always on
  `few_tokens_attention`'s kernels and always on `many_tokens_attention`'s, called in turn on a batch of texts of
  each (batch, tokens) of `--grid`: median ms of each, and their ratio;
* `ablation`: the tagger bench's weights (`python -m bench.inference_bench_tagger --stage=prepare` in WORKDIR)
  exported three ways, called in turn on each CoNLL-2003 dev sentence in one process: as served (`served`); every
  2-D matmul of the trace (the encoder's dense layers, the head) replaced by a broadcast product of its output's shape
  (`no_matmul`: what the graph around the matmuls costs); no model, the logits zeros (`no_model`: the text pipeline,
  windows, tags and entities); batch-1 medians overall and by words per request (the tagger bench's buckets);
* `ops`: per export, TF Serving's way in (the TF1 session loader) with TensorFlow's step stats of
  `--traced` requests of one sentence: time per op type, summed over the executed kernels (oneDNN's rewrites
  named as they run, e.g. `_MklTranspose`; function-call ops left out, their ops counted), and the executed
  node count.

`--threads=INTRA,INTER` sets TensorFlow's thread pools in the process (default: TensorFlow's).

    python -m bench.inference_bench_breakdown --workdir=/tmp/inference_bench --exports=serving_main,serving \\
        --out=bench/results/inference-batch1-breakdown.json
    python -m bench.inference_bench_breakdown --workdir=/tmp/inference_bench --parts attention \\
        --out=bench/results/inference-attention-crossover.json
    python -m bench.inference_bench_breakdown --workdir=/tmp/inference_bench_tagger --parts ablation \\
        --requests=600 --out=bench/results/inference-batch1-tagger-ablation.json
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import time

import numpy as np

from bench.inference_bench import (BATCH, DEFAULT_SST2, DEFAULT_VOCAB, MAX_SEQ_LENGTH, NUM_LABELS, by_bucket, emit,
                                   prepared_classifier, read_sentences, run_header)


# Ops that call a function (a pruned export's signature calls its pruned graph): the step stats list the function's
# ops too, so the call's own time would count them twice.
CALLS = ("StatefulPartitionedCall", "PartitionedCall")


WARMUP = 10  # requests each call answers before any is timed (the first instantiates its function)


def warmed(calls: dict, sentences) -> dict:
    """`calls`, each having answered the first `WARMUP` sentences, one a request."""
    for call in calls.values():
        for sentence in sentences[:WARMUP]:
            call([sentence])
    return calls


def sentences_sent(sentences, requests: int) -> list:
    """Every sentence `warmed` and `interleaved(calls, requests, sentences)` send a call."""
    return list(sentences[:max(WARMUP, requests)])


def interleaved(calls: dict, requests: int, sentences, buckets=None) -> dict:
    """Batch-1 median / p90 ms and mean CPU ms of each call, the calls rotated on every request; with `buckets` (a
    name per sentence), each bucket's median ms too (`batch1_median_ms_by_bucket`, in the buckets' first order)."""
    names = list(calls)
    wall, cpu = {n: [] for n in names}, {n: [] for n in names}
    for i in range(requests):
        for name in names[i % len(names):] + names[:i % len(names)]:
            started, started_cpu = time.perf_counter(), time.process_time()
            calls[name]([sentences[i % len(sentences)]])
            cpu[name].append(time.process_time() - started_cpu)
            wall[name].append(time.perf_counter() - started)
    result = {n: {"batch1_median_ms": round(1e3 * statistics.median(wall[n]), 2),
                  "batch1_p90_ms": round(1e3 * float(np.percentile(wall[n], 90)), 2),
                  "batch1_cpu_ms": round(1e3 * statistics.mean(cpu[n]), 2)} for n in names}
    if buckets is not None:
        sent = [buckets[i % len(sentences)] for i in range(requests)]
        for n in names:
            result[n]["batch1_median_ms_by_bucket"] = {b: round(group["median_ms"], 2)
                                                       for b, group in by_bucket(wall[n], sent).items()}
    return result


def signature_call(path: str, output: str = "logits"):
    import tensorflow as tf

    signature = tf.saved_model.load(path).signatures["serving_default"]
    return lambda texts: signature(text=tf.constant(texts))[output].numpy()


def ab(workdir: str, exports: list[str], sentences, requests: int, head: str = "classifier") -> dict:
    output = "tags" if head == "tagger" else "logits"
    calls = warmed({name: signature_call(os.path.join(workdir, name), output) for name in exports}, sentences)
    result = interleaved(calls, requests, sentences)
    outputs = {}
    for rep in range(2):
        for name in exports if rep == 0 else exports[::-1]:
            started, started_cpu = time.perf_counter(), time.process_time()
            outputs[name] = [calls[name](sentences[i:i + BATCH]) for i in range(0, len(sentences), BATCH)]
            result[name].setdefault("batch32_sentences_per_s", []).append(
                round(len(sentences) / (time.perf_counter() - started), 1))
            result[name].setdefault("batch32_cpu_ms_per_sentence", []).append(
                round(1e3 * (time.process_time() - started_cpu) / len(sentences), 2))
    for name in exports[1:]:
        if head == "tagger":  # each batch's tags, padded to its longest sentence
            result[name]["tags_equal_to_" + exports[0]] = all(
                np.array_equal(a, b) for a, b in zip(outputs[name], outputs[exports[0]]))
        else:
            result[name]["max_abs_logit_difference_vs_" + exports[0]] = float(np.max(np.abs(
                np.concatenate(outputs[name]) - np.concatenate(outputs[exports[0]]))))
    return result


def tagger_sentences(conll_dev: str | None) -> list[str]:
    """The CoNLL dev file's sentences as raw text (the tagger bench's requests)."""
    from bench.inference_bench_tagger import DEFAULT_CONLL_DEV, read_texts

    return read_texts(conll_dev or DEFAULT_CONLL_DEV)


def parts(workdir: str, export: str, sentences, requests: int) -> dict:
    import tensorflow as tf

    from electra_tf.serving.classifier import ClassifierServer
    from electra_tf.serving.portable import serving_model
    from electra_tf.text.tokenization import WordPieceTokenizer

    model = prepared_classifier(workdir)
    server = ClassifierServer(serving_model(model, MAX_SEQ_LENGTH), WordPieceTokenizer(DEFAULT_VOCAB),
                              [str(i) for i in range(NUM_LABELS)], MAX_SEQ_LENGTH)
    text = tf.TensorSpec([None], tf.string)
    encode = tf.function(server.encode, input_signature=[text])
    ids = {name: tf.TensorSpec([None, None], tf.int32) for name in ("input_ids", "input_mask", "segment_ids")}
    forward = tf.function(lambda features: server.model(features, training=False)["logits"], input_signature=[ids])
    empty = tf.function(tf.strings.length, input_signature=[text])
    tokenised = {s: {k: v.numpy() for k, v in encode(tf.constant([s])).items()}
                 for s in sentences_sent(sentences, requests)}  # what "model" is sent, tokenised beforehand
    calls = {"signature": signature_call(os.path.join(workdir, export)),
             "empty_function": lambda texts: empty(tf.constant(texts)).numpy(),
             "tokenise": lambda texts: {k: v.numpy() for k, v in encode(tf.constant(texts)).items()},
             "model": lambda texts: forward(tokenised[texts[0]]).numpy()}
    result = interleaved(warmed(calls, sentences), requests, sentences)
    lengths = [tokenised[s]["input_ids"].shape[1] for s in sentences[:requests]]
    result["tokens"] = {"median": statistics.median(lengths), "min": min(lengths), "max": max(lengths)}
    return result


# Words of one WordPiece each in the uncased vocabulary: a text of n of them is n + 2 tokens with [CLS] and [SEP].
WORDS = "the film is a serious look at young women and a charming journey".split()


def attention(workdir: str, grid: list[tuple[int, int]], calls: int) -> list[dict]:
    """Two classifier exports of WORKDIR's weights, attention always on `few_tokens_attention`'s kernels and always on
    `many_tokens_attention`'s; per (batch, tokens) of `grid`, median ms of each over `calls` calls in turn."""
    from unittest import mock

    import tensorflow as tf

    from electra_tf.serving import classifier, portable
    from electra_tf.text.tokenization import WordPieceTokenizer

    model = prepared_classifier(workdir)
    signatures = {}
    for kernels, few_tokens in (("few_tokens", 1 << 30), ("many_tokens", 0)):
        path = os.path.join(workdir, f"attention_{kernels}")
        with mock.patch.object(classifier, "serving_model",  # the exports' own code, the threshold set
                               lambda model, length, few_tokens=few_tokens: portable.serving_model(model, length,
                                                                                                   few_tokens)):
            classifier.export_classifier(model, WordPieceTokenizer(DEFAULT_VOCAB), [str(i) for i in range(NUM_LABELS)],
                                         MAX_SEQ_LENGTH, path, False)
        signatures[kernels] = tf.saved_model.load(path).signatures["serving_default"]
    rows = []
    for batch, tokens in grid:
        texts = tf.constant([" ".join((WORDS * tokens)[:tokens - 2])] * batch)
        times = {name: [] for name in signatures}
        for i in range(calls + 5):
            for name in (list(signatures) if i % 2 else list(signatures)[::-1]):
                started = time.perf_counter()
                signatures[name](text=texts)["logits"].numpy()
                if i >= 5:  # the first calls warm up
                    times[name].append(time.perf_counter() - started)
        few, many = (1e3 * statistics.median(times[name]) for name in signatures)
        rows.append({"batch": batch, "tokens": tokens, "batch_tokens": batch * tokens, "few_tokens_ms": round(few, 2),
                     "many_tokens_ms": round(many, 2), "few_over_many": round(few / many, 3)})
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def tagger_ablation(workdir: str, sentences, requests: int) -> dict:
    """The `ablation` part (see the module docstring): per export, `interleaved`'s timings and the batch-1 median of
    each word bucket."""
    from unittest import mock

    import tensorflow as tf

    from bench import inference_bench_tagger as tagger_bench
    from electra_tf.serving import tagging

    model, task = tagger_bench.served_tagger(workdir, tagger_bench.DEFAULT_CONLL_DEV)
    matmul = tf.matmul

    def broadcast_product(a, b, **options):  # a 2-D product's output shape, without the product
        return matmul(a, b, **options) if options or a.shape.rank != 2 else a[:, :1] * b[:1, :]

    def zero_logits(model, seq_length):  # in place of `serving_model(model, seq_length)`
        return lambda features, training=False: {"logits": tf.zeros(tf.concat(
            [tf.shape(features["input_ids"]), [len(task.labels)]], 0))}

    variants = {"served": [], "no_matmul": [mock.patch.object(tf, "matmul", broadcast_product)],
                "no_model": [mock.patch.object(tagging, "serving_model", zero_logits)]}
    calls = {}
    for name, patches in variants.items():
        path = os.path.join(workdir, f"ablation_{name}")
        with contextlib.ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patch)
            tagger_bench.export_tagger(model, task, os.path.join(workdir, "ours", "vocab.txt"), path)
        calls[name] = signature_call(path, "tags")
    buckets = [tagger_bench.word_bucket(s) for s in sentences]
    result = interleaved(warmed(calls, sentences), requests, sentences, buckets)
    for timings in result.values():  # the buckets in word order
        medians = timings["batch1_median_ms_by_bucket"]
        timings["batch1_median_ms_by_bucket"] = {b: medians[b] for b in tagger_bench.BUCKET_NAMES if b in medians}
    return result


def ops(path: str, sentence: str, traced: int, threads) -> dict:
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2

    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads[0], inter_op_parallelism_threads=threads[1])
    micros, nodes = collections.Counter(), collections.Counter()
    with tf.Graph().as_default(), tf.compat.v1.Session(config=config) as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["serving_default"]
        fetch, feed = signature.outputs["logits"].name, signature.inputs["text"].name
        for _ in range(10):
            session.run(fetch, {feed: [sentence]})
        options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
        for _ in range(traced):
            metadata = config_pb2.RunMetadata()
            session.run(fetch, {feed: [sentence]}, options=options, run_metadata=metadata)
            for device in metadata.step_stats.dev_stats:
                for node in device.node_stats:
                    label = node.timeline_label
                    op = label.split(" = ")[1].split("(")[0] if " = " in label else "other"
                    if op in CALLS:  # its time is its ops', counted one by one
                        continue
                    micros[op] += node.op_end_rel_micros
                    nodes[op] += 1
    return {"op_us_per_request": round(sum(micros.values()) / traced), "nodes_per_request": sum(nodes.values()) // traced,
            "by_op": {op: {"us": round(us / traced), "nodes": nodes[op] // traced} for op, us in micros.most_common(12)}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inference_bench_breakdown",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--exports", help="export directories in WORKDIR, the baseline first (not for attention)")
    parser.add_argument("--parts", choices=("ab", "parts", "attention", "ablation", "ops"), nargs="*",
                        default=["ab", "parts", "ops"])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--traced", type=int, default=10, help="ops: traced requests per export")
    parser.add_argument("--threads", default="0,0", help="INTRA,INTER (0: TensorFlow's default)")
    parser.add_argument("--head", choices=("classifier", "tagger"), default="classifier",
                        help="ab: the exports' head (tagger: on --conll_dev's sentences)")
    parser.add_argument("--sst2_dev", default=DEFAULT_SST2)
    parser.add_argument("--conll_dev", default=None, help="ab --head=tagger: CoNLL-2003 English dev.txt")
    parser.add_argument("--grid", default="1x8,1x24,1x48,1x64,1x80,1x96,1x128,2x24,2x40,2x48,4x16,4x24,4x32,8x16,"
                        "8x32,16x16,32x48", help="attention: BATCHxTOKENS,...")
    parser.add_argument("--calls", type=int, default=60, help="attention: timed calls per (batch, tokens)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    threads = tuple(int(t) for t in args.threads.split(","))
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

    if threads != (0, 0):
        tf.config.threading.set_intra_op_parallelism_threads(threads[0])
        tf.config.threading.set_inter_op_parallelism_threads(threads[1])
    exports = [e for e in (args.exports or "").split(",") if e]
    if not exports and {"ab", "parts", "ops"} & set(args.parts):
        parser.error("--exports: export directories in WORKDIR expected for --parts ab, parts or ops")
    if args.head == "tagger" and set(args.parts) != {"ab"}:
        parser.error("--head=tagger: --parts ab only (the other parts read a classifier's logits)")
    tagger_input = args.head == "tagger" or "ablation" in args.parts
    sentences = tagger_sentences(args.conll_dev) if tagger_input else read_sentences(args.sst2_dev)
    record = {**run_header("bench.inference_bench_breakdown", argv), "threads": args.threads,
              "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "TensorFlow's default (on)"),
              "load_average_1min_at_start": round(os.getloadavg()[0], 2)}
    if "ab" in args.parts:
        record["ab"] = ab(args.workdir, exports, sentences, args.requests, args.head)
    if "parts" in args.parts:
        record["parts"] = parts(args.workdir, exports[-1], sentences, args.requests)
    if "attention" in args.parts:
        grid = [tuple(int(n) for n in cell.split("x")) for cell in args.grid.split(",")]
        record["attention"] = attention(args.workdir, grid, args.calls)
    if "ablation" in args.parts:
        record["ablation"] = tagger_ablation(args.workdir, sentences, args.requests)
    if "ops" in args.parts:
        record["ops"] = {name: ops(os.path.join(args.workdir, name), sentences[0], args.traced, threads)
                         for name in exports}
    record["load_average_1min_at_end"] = round(os.getloadavg()[0], 2)
    emit(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
