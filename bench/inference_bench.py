"""Serving speed on a CPU: our classifier SavedModel against Hugging Face transformers and ONNX Runtime.

Not a test. The same ELECTRA-Small weights in three systems, raw text in and logits out, tokenisation
included:

* `ours`: the serving SavedModel `export_classifier` writes (`tf.saved_model.load`, its `serving_default`
  signature on a string batch; tokenisation in the graph);
* `hf`: transformers' `ElectraForSequenceClassification` (PyTorch) with the fast tokenizer, from the
  directory `python -m electra_tf.convert --to=hf` writes of the same pre-training export;
* `ort`: that PyTorch model exported with `torch.onnx.export` and run by ONNX Runtime, the HF fast
  tokenizer in Python.

Our classification head is one dense layer on [CLS]; HF's is dense + GELU + dense. The HF and ONNX models
get ours: `classifier.dense` and its activation replaced by the identity, `out_proj` holding our head's
weights, so all three compute the same logits (the benchmark reports the largest difference).

    python -m bench.inference_bench --stage=prepare --workdir=/tmp/inference_bench   # models, once
    python -m bench.inference_bench --stage=run --workdir=/tmp/inference_bench --rounds=3 \\
        --out=bench/results/inference-sst2-small.json

`--systems=ours,ours_before,hf,ort --before="commit …"` adds an export of an earlier commit (see `SERVING_DIRS`).
The NER tagger's and SQuAD's benches, `bench/inference_bench_tagger.py` and `bench/inference_bench_squad.py`, run on
this module's harness (`timed`, `spawn_worker`,
`timing_rows`, `ratios`, `interleaved`, `run_header`).

Each (round, system) is a fresh process (`--stage=worker`), the systems rotated within each round. A worker
times: loading (after the imports) and the first request; batch 1 (`--requests` single sentences, the SST-2
dev sentences in order, median and p90); batch 32 (all dev sentences in batches of 32, sentences/s); and
returns the batch-32 logits, which the parent compares across systems. The weights are randomly
initialised (seeded): speed does not depend on them, and equality of the three systems is checked on them.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np

from bench.machine import cpu_model, num_cores

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEMS = ("ours", "ours_before", "hf", "ort")
# `ours_before`: an export by an earlier commit, copied to WORKDIR/serving_before by hand (`--stage=export_ours`
# at that commit, the directory renamed); the results name the commit.
SERVING_DIRS = {"ours": "serving", "ours_before": "serving_before"}
DEFAULT_SST2 = os.path.join(ROOT, "..", "shared", "data", "glue", "SST-2", "dev.tsv")
DEFAULT_VOCAB = os.path.join(ROOT, "..", "shared", "data", "vocab", "en_uncased", "vocab.txt")
MAX_SEQ_LENGTH = 128
NUM_LABELS = 2
SEED = 7
BATCH = 32


def emit(record: dict, out: str | None) -> None:
    """Prints a bench's `record` as JSON and, with `out`, writes it there (atomically)."""
    from electra_tf.text.manifest import write_json_atomic

    print(json.dumps(record, indent=1))
    if out:
        write_json_atomic(out, record)


def read_sentences(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    except OSError as e:
        raise SystemExit(f"--sst2_dev: cannot read {path} ({e.strerror}); it is GLUE's SST-2/dev.tsv") from None
    if not rows or rows[0][:1] != ["sentence"]:
        raise SystemExit(f"--sst2_dev: {path} is not SST-2's dev.tsv (expected a 'sentence' header)")
    return [row[0] for row in rows[1:]]


def cpu_name() -> str:
    """The CPU and how many of its cores this process may run on (`taskset` narrows them)."""
    return f"{cpu_model()}, {num_cores()} cores"


# ---- prepare: the three models from one set of weights ------------------------------------------


def prepare(workdir: str, vocab_file: str) -> None:
    """Our pre-training export (random weights), its HF conversion, a random head, then every served model."""
    prepare_encoder(workdir, vocab_file)
    save_dense_head(finetuning_model(workdir), os.path.join(workdir, "head.npz"))
    export_ours(workdir, vocab_file)
    export_onnx(workdir)


def prepare_encoder(workdir: str, vocab_file: str) -> None:
    """The weights every task's models share: our pre-training export (random, seeded) in WORKDIR/ours and
    `python -m electra_tf.convert --to=hf` of it in WORKDIR/hf."""
    import keras

    from electra_tf.config import get_config
    from electra_tf.convert.keras_model import build_pretrainer
    from electra_tf.convert.export_dir import save_ours
    from electra_tf.text.tokenization import WordPieceTokenizer

    os.makedirs(workdir, exist_ok=True)
    keras.utils.set_random_seed(SEED)
    config = get_config("small", vocab_size=len(WordPieceTokenizer(vocab_file).vocab))
    save_ours(build_pretrainer(config), os.path.join(workdir, "ours"), vocab_file, keras_hub=False)
    subprocess.run([sys.executable, "-m", "electra_tf.convert", "--to=hf", f"--input={workdir}/ours",
                    f"--output={workdir}/hf"], check=True, cwd=ROOT)


def finetuning_model(workdir: str):
    from electra_tf.convert import load_encoder
    from electra_tf.finetuning.heads import ClassificationHead
    from electra_tf.finetuning.model import FinetuningModel

    encoder, _, _ = load_encoder(os.path.join(workdir, "ours"))
    model = FinetuningModel(encoder, ClassificationHead(NUM_LABELS, name="classification_head"))
    return model.build_all(MAX_SEQ_LENGTH)


def save_dense_head(model, path: str) -> None:
    """`model.head.dense`'s `kernel` and `bias` to the .npz at `path` (what `set_dense_head` reads)."""
    kernel, bias = (w.numpy() for w in model.head.dense.weights)
    np.savez(path, kernel=kernel, bias=bias)


def set_dense_head(model, path: str):
    """The prepared head's `kernel` and `bias` (the .npz at `path`) into `model.head.dense`; returns `model`."""
    head = np.load(path)
    model.head.dense.set_weights([head["kernel"], head["bias"]])
    return model


def prepared_classifier(workdir: str):
    """`finetuning_model(workdir)` holding the prepared head (WORKDIR/head.npz)."""
    return set_dense_head(finetuning_model(workdir), os.path.join(workdir, "head.npz"))


def export_ours(workdir: str, vocab_file: str) -> None:
    """Our serving SavedModel of the prepared weights (`--stage=export_ours` redoes it after a serving change)."""
    from electra_tf.serving.classifier import export_classifier
    from electra_tf.text.tokenization import WordPieceTokenizer

    model = prepared_classifier(workdir)
    export_classifier(model, WordPieceTokenizer(vocab_file), [str(i) for i in range(NUM_LABELS)], MAX_SEQ_LENGTH,
                      os.path.join(workdir, "serving"), False)


def hf_classifier(workdir: str):
    """HF's sequence classifier on the converted discriminator, computing our head (see the module docstring)."""
    import torch
    from transformers import ElectraForSequenceClassification

    model = ElectraForSequenceClassification.from_pretrained(os.path.join(workdir, "hf", "discriminator"),
                                                             num_labels=NUM_LABELS)
    head = np.load(os.path.join(workdir, "head.npz"))
    model.classifier.dense = torch.nn.Identity()
    model.classifier.activation = torch.nn.Identity()
    with torch.no_grad():
        model.classifier.out_proj.weight.copy_(torch.from_numpy(head["kernel"].T))
        model.classifier.out_proj.bias.copy_(torch.from_numpy(head["bias"]))
    return model.eval()


def export_onnx(workdir: str) -> None:
    onnx_export(hf_classifier(workdir), os.path.join(workdir, "model.onnx"), {0: "batch"})


def onnx_export(model, path: str, logits_axes: dict, outputs=("logits",)) -> None:
    """`model` (HF, PyTorch) as ONNX: the tokenizer's three inputs, dynamic batch and length, `outputs` (each with
    the dynamic `logits_axes`) out, in the order the model returns them."""
    import torch

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tuple(torch.ones([2, 8], dtype=torch.int64) for _ in names)
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    torch.onnx.export(model, example, path, input_names=names, output_names=list(outputs),
                      dynamic_axes={**axes, **{name: logits_axes for name in outputs}}, opset_version=17, dynamo=False)


# ---- worker: one system in its own process ------------------------------------------------------


def load_system(system: str, workdir: str):
    """A function: list of sentences → logits `[n, labels]` (NumPy), with its libraries imported."""
    if system in SERVING_DIRS:
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

        def load():
            signature = tf.saved_model.load(os.path.join(workdir, SERVING_DIRS[system])).signatures["serving_default"]
            return lambda texts: signature(text=tf.constant(texts))["logits"].numpy()
        return load

    def encode(tok, texts, kind):
        return tok(texts, padding=True, truncation=True, max_length=MAX_SEQ_LENGTH, return_tensors=kind), None

    return hf_or_ort_loader(system, workdir, lambda: hf_classifier(workdir), "model.onnx", ["logits"], encode,
                            lambda outputs, _: outputs[0])


def hf_or_ort_loader(system: str, workdir: str, hf_model, onnx_file: str, output_names: list[str], encode, decode):
    """`load` for the HF (`system="hf"`: `hf_model()`, PyTorch) or ONNX Runtime (`"ort"`: WORKDIR/`onnx_file`)
    system, their libraries imported now (the timings' import phase): the fast tokenizer of WORKDIR/hf; a run is
    `encode(tokenizer, texts, "pt" or "np")` → (the model's inputs, what else `decode` needs), the model's
    `output_names` as NumPy arrays → `decode(outputs, that)`."""
    from transformers import AutoTokenizer

    def tokenizer():
        return AutoTokenizer.from_pretrained(os.path.join(workdir, "hf", "discriminator"), use_fast=True)

    if system == "hf":
        import torch

        def load():
            tok, model = tokenizer(), hf_model()

            def run(texts):
                inputs, extra = encode(tok, texts, "pt")
                with torch.inference_mode():
                    out = model(**inputs)
                return decode([getattr(out, name).numpy() for name in output_names], extra)
            return run
        return load
    import onnxruntime

    def load():
        tok = tokenizer()
        session = onnxruntime.InferenceSession(os.path.join(workdir, onnx_file), providers=["CPUExecutionProvider"])

        def run(texts):
            inputs, extra = encode(tok, texts, "np")
            return decode(session.run(output_names, dict(inputs)), extra)
        return run
    return load


def worker(system: str, workdir: str, sentences: list[str], requests: int) -> dict:
    timings, outputs = timed(system, lambda: load_system(system, workdir), sentences, requests)
    return {**timings, "logits": np.concatenate(outputs).tolist()}


def timed(system: str, load_system, texts: list, requests: int, bucket=None) -> tuple[dict, list]:
    """Times one system: `load_system()` (its imports) → `load()` → `run(texts)`; returns the timings and the
    outputs of `run` on every batch of `BATCH` texts, in order. `bucket(text)`, if given, names each batch-1
    request's group: the timings then hold each group's median and request count too (`batch1_by_bucket`)."""
    started = time.perf_counter()
    load = load_system()
    imported = time.perf_counter()
    run = load()
    loaded = time.perf_counter()
    run(texts[:1])
    first = time.perf_counter()
    requested = [texts[i % len(texts)] for i in range(requests)]  # batch 1 cycles through the texts
    single = []
    for text in requested:
        t = time.perf_counter()
        run([text])
        single.append(time.perf_counter() - t)
    t = time.perf_counter()
    outputs = [run(texts[i:i + BATCH]) for i in range(0, len(texts), BATCH)]
    batch_s = time.perf_counter() - t
    timings = {"system": system, "import_s": imported - started, "load_s": loaded - imported,
               "first_request_s": first - loaded, "batch1_median_ms": 1e3 * statistics.median(single),
               "batch1_p90_ms": 1e3 * float(np.percentile(single, 90)),
               "batch32_sentences_per_s": len(texts) / batch_s}
    if bucket is not None:
        timings["batch1_by_bucket"] = by_bucket(single, [bucket(text) for text in requested])
    return timings, outputs


def by_bucket(seconds: list[float], names: list[str]) -> dict:
    """Per bucket name (in first-seen order), the median ms of its requests and their count."""
    groups: dict[str, list[float]] = {}
    for name, value in zip(names, seconds, strict=True):
        groups.setdefault(name, []).append(value)
    return {name: {"median_ms": 1e3 * statistics.median(values), "requests": len(values)}
            for name, values in groups.items()}


# ---- run: interleaved rounds, the summary -------------------------------------------------------


def spawn(system: str, args) -> dict:
    return spawn_worker("bench.inference_bench", system, [f"--workdir={args.workdir}", f"--sst2_dev={args.sst2_dev}",
                                                         f"--requests={args.requests}"])


def spawn_worker(module: str, system: str, flags: list[str]) -> dict:
    """`python -m module --stage=worker --system=system flags…` in a fresh process; its last stdout line (JSON)."""
    command = [sys.executable, "-m", module, "--stage=worker", f"--system={system}", *flags]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.returncode != 0:
        raise SystemExit(f"worker {system} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def spread(values: list[float], digits: int) -> dict:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "runs": [round(v, digits) for v in values]}


def summarise(rounds: list[list[dict]], systems) -> dict:
    rows = timing_rows(rounds, systems)
    logits = {r["system"]: np.asarray(r["logits"]) for r in rounds[0]}
    differences = {f"{a} vs {b}": float(np.max(np.abs(logits[a] - logits[b])))
                   for i, a in enumerate(systems) for b in systems[i + 1:]}
    return {"systems": rows, "max_abs_logit_difference": differences,
            "compared_inputs": int(len(logits[systems[0]])), **ratios(rows)}


def timing_rows(rounds: list[list[dict]], systems) -> dict:
    """Per system, the `spread` of each timing over the rounds."""
    rows = {}
    for system in systems:
        runs = [r for one in rounds for r in one if r["system"] == system]
        rows[system] = {key: spread([r[key] for r in runs], digits) for key, digits in (
            ("batch1_median_ms", 2), ("batch1_p90_ms", 2), ("batch32_sentences_per_s", 1), ("load_s", 3),
            ("first_request_s", 3), ("import_s", 2))}
    return rows


def ratios(rows: dict) -> dict:
    """Issue #58's goal and acceptance as ratios (`{"ratios": …}`), when ours, ONNX Runtime and HF all ran.

    Beside the ratio of the medians over the rounds, each round's own batch-1 ratio: within a round the systems
    run minutes apart at most, so a round's ratio compares them under the same load of a shared machine, which
    drifts between rounds."""
    if not {"ours", "ort", "hf"} <= set(rows):
        return {}

    def median(system, key):
        return rows[system][key]["median"]
    by_round = zip(rows["ours"]["batch1_median_ms"]["runs"], rows["ort"]["batch1_median_ms"]["runs"], strict=True)
    return {"ratios": {
        "ours_over_ort_batch1_median": round(median("ours", "batch1_median_ms") / median("ort", "batch1_median_ms"), 2),
        "ours_over_ort_batch1_by_round": [round(ours / ort, 2) for ours, ort in by_round],
        "ours_over_ort_batch32_throughput": round(median("ours", "batch32_sentences_per_s")
                                                  / median("ort", "batch32_sentences_per_s"), 2),
        "ours_over_hf_batch32_throughput": round(median("ours", "batch32_sentences_per_s")
                                                 / median("hf", "batch32_sentences_per_s"), 2)}}


def interleaved(systems: list[str], rounds: int, spawn_one) -> list[list[dict]]:
    """`rounds` rounds of `spawn_one(system)` for every system, the order rotated by one each round."""
    results = []
    for i in range(rounds):
        order = systems[i % len(systems):] + systems[:i % len(systems)]
        results.append([spawn_one(system) for system in order])
        print(f"round {i + 1}: " + ", ".join(f"{r['system']} {r['batch1_median_ms']:.1f} ms / "
                                             f"{r['batch32_sentences_per_s']:.0f} s/s" for r in results[-1]),
              flush=True)
    return results


def chosen_systems(flag: str, known) -> list[str]:
    systems = [s for s in flag.split(",") if s]
    unknown = set(systems) - set(known)
    if unknown:
        raise SystemExit(f"--systems: unknown {sorted(unknown)}; choose from {', '.join(known)}")
    return systems


def run_header(module: str, argv) -> dict:
    """The fields every results file starts with: its command (without `--out`), commit, date and machine."""
    command = f"python -m {module} " + shlex.join(a for a in (argv or sys.argv[1:]) if not a.startswith("--out"))
    return {"command": command, "commit": commit(), "date": datetime.date.today().isoformat(), "machine": cpu_name()}


def bench_parser(module: str, doc: str, stages, systems) -> argparse.ArgumentParser:
    """The flags every inference bench takes; each adds its data flags."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    parser.add_argument("--stage", choices=stages, required=True)
    parser.add_argument("--workdir", required=True, help="where prepare writes the three models")
    parser.add_argument("--system", choices=systems, help="worker only")
    parser.add_argument("--systems", default="ours,hf,ort", help="run: which systems, comma-separated")
    parser.add_argument("--vocab_file", default=DEFAULT_VOCAB)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200, help="batch-1 requests per worker")
    parser.add_argument("--out", help="run: the results JSON to write")
    return parser


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    parser = bench_parser("bench.inference_bench", __doc__, ("prepare", "export_ours", "run", "worker"), SYSTEMS)
    parser.add_argument("--before", default="", help="run: what `ours_before` is (e.g. its commit), recorded")
    parser.add_argument("--sst2_dev", default=DEFAULT_SST2)
    args = parser.parse_args(argv)
    if args.stage == "prepare":
        prepare(args.workdir, args.vocab_file)
        return 0
    if args.stage == "export_ours":
        export_ours(args.workdir, args.vocab_file)
        return 0
    sentences = read_sentences(args.sst2_dev)
    if args.stage == "worker":
        print(json.dumps(worker(args.system, args.workdir, sentences, args.requests)))
        return 0
    systems = chosen_systems(args.systems, SYSTEMS)
    rounds = interleaved(systems, args.rounds, lambda system: spawn(system, args))
    record = {**run_header("bench.inference_bench", argv),
              "model": "ELECTRA-Small, randomly initialised (seed 7), 2 labels",
              "data": f"SST-2 dev, {len(sentences)} sentences", "rounds": args.rounds, "requests": args.requests,
              "max_seq_length": MAX_SEQ_LENGTH, **({"ours_before": args.before} if args.before else {}),
              **summarise(rounds, systems)}
    print(json.dumps({k: v for k, v in record.items() if k != "systems"}, indent=1))
    if args.out:
        from electra_tf.text.manifest import write_json_atomic

        write_json_atomic(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
