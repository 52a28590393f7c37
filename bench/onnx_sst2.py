"""A fine-tuned SST-2 model through `python -m electra_tf.convert --to=onnx --quantize=int8`, on the SST-2 dev set.

    python -m bench.onnx_sst2 --run_dir=out/sst2_tiny --data_dir=../shared/data/glue \\
        --output=bench/results/onnx_sst2-tiny.json

Converts the run (`onnx_export.save_onnx`: model.onnx and model.int8.onnx), tokenizes the 872 dev sentences once
with the run's tokenizer (`--max_seq_length` of the run), and reports

* parity: the max |logit difference| of ONNX Runtime's float32 model against our Keras model on every sentence
  (each batch cut to its longest sentence), and of the int8 model against both;
* accuracy: dev accuracy of Keras, ONNX float32 and ONNX int8, and how many predictions int8 changes;
* speed (ONNX Runtime, `--threads` intra-op threads, float32 and int8 interleaved in `--rounds` rounds):
  batch 1 (each of `--requests` sentences at its own length): median and p90 ms; batch 32 (the dev set in
  batches cut to their longest): sentences/s. Tokenization is outside the timing (the same for both).

The JSON records the command, the CPU and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from bench.machine import cpu_model

BATCH = 32



def dev_features(tokenizer, data_dir: str, max_seq_length: int):
    """(features, labels) of SST-2's dev.tsv: our encoding, as fine-tuning saw it."""
    from electra_tf.finetuning.tasks import encode_pairs

    path = os.path.join(data_dir, "SST-2", "dev.tsv")
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    features = encode_pairs(tokenizer, [r[0] for r in rows], None, max_seq_length)
    return features, np.array([int(r[1]) for r in rows])


def batches(features, size: int):
    """(input_ids, attention_mask, token_type_ids) int64, each batch cut to its longest row."""
    n = len(features["input_ids"])
    for start in range(0, n, size):
        mask = features["input_mask"][start:start + size]
        length = int(mask.sum(-1).max())
        yield tuple(np.asarray(features[k][start:start + size, :length], np.int64)
                    for k in ("input_ids", "input_mask", "segment_ids"))


def session(path: str, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def run_session(sess, ids, mask, segments):
    return sess.run(["logits"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments})[0]


def all_logits(fn, features, size: int = 64) -> np.ndarray:
    return np.concatenate([fn(*b) for b in batches(features, size)])


def parity_and_accuracy(model, sessions: dict, features, labels) -> dict:
    """Max |logit differences| and dev accuracies of Keras, ONNX float32 and int8."""
    logits = {"keras": all_logits(lambda *b: model.outputs(*b)["logits"], features)}
    logits.update({name: all_logits(lambda *b, s=sess: run_session(s, *b), features) for name, sess in sessions.items()})
    result = {"sentences": int(len(labels)),
              "accuracy": {name: float(100 * np.mean(v.argmax(-1) == labels)) for name, v in logits.items()},
              "max_abs_logit_difference": {f"{a}_vs_{b}": float(np.abs(logits[a] - logits[b]).max())
                                           for a, b in (("onnx_fp32", "keras"), ("onnx_int8", "keras"),
                                                        ("onnx_int8", "onnx_fp32")) if a in logits and b in logits}}
    if "onnx_int8" in logits:
        result["int8_changed_predictions"] = int(np.sum(logits["onnx_int8"].argmax(-1) != logits["keras"].argmax(-1)))
    return result


def time_batch1(sess, features, requests: int) -> list:
    times = []
    for ids, mask, segments in list(batches(features, 1))[:requests]:
        start = time.perf_counter()
        run_session(sess, ids, mask, segments)
        times.append(1000 * (time.perf_counter() - start))
    return times


def time_batch32(sess, features) -> float:
    prepared = list(batches(features, BATCH))
    start = time.perf_counter()
    for b in prepared:
        run_session(sess, *b)
    return len(features["input_ids"]) / (time.perf_counter() - start)


def speed(sessions: dict, features, rounds: int, requests: int) -> dict:
    """Interleaved rounds: each round times every session at batch 1 then at batch 32."""
    for sess in sessions.values():  # warm-up: the first run allocates
        time_batch1(sess, features, 5)
    batch1 = {name: [] for name in sessions}
    batch32 = {name: [] for name in sessions}
    for _ in range(rounds):
        for name, sess in sessions.items():
            batch1[name].extend(time_batch1(sess, features, requests))
            batch32[name].append(time_batch32(sess, features))
    return {name: {"batch1_median_ms": float(np.median(batch1[name])),
                   "batch1_p90_ms": float(np.percentile(batch1[name], 90)),
                   "batch32_sentences_per_s_median": float(np.median(batch32[name])),
                   "batch32_sentences_per_s_range": [float(min(batch32[name])), float(max(batch32[name]))]}
            for name in sessions}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_dir", required=True, help="run_finetuning.py --output_dir of an SST-2 run")
    parser.add_argument("--data_dir", required=True, help="GLUE root (SST-2/dev.tsv)")
    parser.add_argument("--output", help="JSON to write")
    parser.add_argument("--onnx_dir", help="where the conversion goes (default: a temporary folder)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--description", default="", help="what the model is, recorded in the JSON")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from electra_tf.finetuning.finetuned_run import load_finetuned
    from electra_tf.convert.onnx_export import save_onnx
    from electra_tf.text.tokenizers import load_tokenizer

    model = load_finetuned(args.run_dir)
    onnx_dir = args.onnx_dir or os.path.join(tempfile.mkdtemp(), "onnx")
    start = time.perf_counter()
    paths = save_onnx(model, onnx_dir, model.vocab_file, quantize="int8")
    convert_seconds = time.perf_counter() - start
    sessions = {"onnx_fp32": session(paths["model"], args.threads), "onnx_int8": session(paths["int8"], args.threads)}
    features, labels = dev_features(load_tokenizer(model.vocab_file), args.data_dir, model.max_seq_length)
    config = model.config.discriminator
    result = {
        "command": "python -m bench.onnx_sst2 " + " ".join(sys.argv[1:] if argv is None else argv),
        "description": args.description, "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
        "load_average_before": list(os.getloadavg()), "threads": args.threads,
        "model": {"task": model.task, "size": model.config.model_size, "layers": config.num_layers,
                  "hidden_size": config.hidden_size, "max_seq_length": model.max_seq_length},
        "file_megabytes": {name: round(os.path.getsize(p) / 2 ** 20, 2) for name, p in paths.items()},
        "convert_seconds": round(convert_seconds, 1),
        "dev": parity_and_accuracy(model, sessions, features, labels),
        "speed": speed(sessions, features, args.rounds, args.requests),
        "load_average_after": list(os.getloadavg()),
    }
    text = json.dumps(result, indent=2)
    if args.output:
        tmp = args.output + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, args.output)
    print(text)
    return result


if __name__ == "__main__":
    main()
