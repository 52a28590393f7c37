"""Serving speed on a CPU, the tagger: our NER SavedModel against Hugging Face transformers and ONNX Runtime.

Not a test. `bench/inference_bench.py`'s harness (fresh process per (round, system), interleaved rounds, the
same timings) on a CoNLL-2003 NER tagger of the same ELECTRA-Small weights, raw text in and tags out:

* `ours`: the SavedModel `export_tagging` writes (`tf.saved_model.load`, `serving_default` on a string batch),
  its `tags` output: words split on whitespace, the label read at each word's first piece, sentences longer
  than `max_seq_length - 2` pieces split into windows, BIOES labels decoded back to the files' IOB2;
* `hf`: transformers' `ElectraForTokenClassification` (PyTorch) on the converted discriminator, the fast
  tokenizer on the words (`is_split_into_words=True`, truncated at `max_seq_length`), the argmax label at each
  word's first piece decoded by the fine-tuning predictions' own `TaggingTask.decode_tags`;
* `ort`: that PyTorch model through `torch.onnx.export`, run by ONNX Runtime, the same Python around it.

Both heads are one dense layer on every token (ours: `TokenClassificationHead`, no dropout; HF's
`classifier` after a dropout, inactive in eval mode), so HF's gets our head's weights as they are. Every real
token gets the segment id NER trains with (`tagging.DEFAULT_SEGMENT_ID`, 1), in HF's `token_type_ids` too.

    python -m bench.inference_bench_tagger --stage=prepare --workdir=/tmp/inference_bench   # models, once
    python -m bench.inference_bench_tagger --stage=run --workdir=/tmp/inference_bench --rounds=3 \\
        --out=bench/results/inference-conll-tagger-small.json

`prepare` reuses WORKDIR/ours and WORKDIR/hf when `bench.inference_bench --stage=prepare` wrote them. The
data: CoNLL-2003 English dev, each sentence's words joined by single spaces. Compared: the tags of every word
of every dev sentence, between each pair of systems; words past HF's truncation have no HF tag and are
counted apart. Batch 1 is also timed by the words of each request (`WORD_BUCKETS`): where short sentences
cost each system a fixed part, the ratio moves with the length.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import numpy as np

from bench.inference_bench import (MAX_SEQ_LENGTH, ROOT, SEED, bench_parser, chosen_systems, emit, hf_or_ort_loader,
                                   interleaved, onnx_export, prepare_encoder, ratios, run_header, save_dense_head,
                                   set_dense_head, spawn_worker, timed, timing_rows)

SYSTEMS = ("ours", "hf", "ort")
DEFAULT_CONLL_DEV = os.path.join(ROOT, "..", "shared", "data", "conll2003", "dev.txt")
SERVING_DIR = "serving_tagger"
HEAD_FILE = "tagger_head.npz"
ONNX_FILE = "tagger.onnx"
# Words per request, both ends included (None: no upper end): the batch-1 requests grouped by length. The first 200
# dev sentences (the requests) fall 26, 77, 53 and 44 into them.
WORD_BUCKETS = ((1, 3), (4, 9), (10, 19), (20, None))


def bucket_name(low: int, high: int | None) -> str:
    return f"{low}+" if high is None else f"{low}–{high}"


BUCKET_NAMES = [bucket_name(low, high) for low, high in WORD_BUCKETS]  # in word order


def word_bucket(text: str) -> str:
    """The `WORD_BUCKETS` name of `text`'s whitespace words ("1–3", …, "20+"); no word counts in the first."""
    words = len(text.split())
    return bucket_name(*next((low, high) for low, high in WORD_BUCKETS if high is None or words <= high))


def ner_task(workdir: str, data_dir: str | None = None, do_train: bool = True):
    """The registry's NER task; its label list is kept in WORKDIR (`tagging_labels.json`) by `prepare`, so the
    workers read the labels, scheme and segment id the export was made with."""
    from electra_tf.finetuning.registry import get_task

    return get_task("ner", data_dir, output_dir=workdir, do_train=do_train)


def read_texts(path: str) -> list[str]:
    """The CoNLL file's sentences as raw text: the words joined by single spaces."""
    from electra_tf.finetuning.conll import read_conll

    try:
        sentences = read_conll(path, tags="iob2")
    except (OSError, ValueError) as e:
        raise SystemExit(f"--conll_dev: {e} (expected CoNLL-2003's dev.txt)") from None
    return [" ".join(words) for words, _ in sentences]


# ---- prepare: the three taggers from one set of weights -----------------------------------------


def prepare(workdir: str, vocab_file: str, conll_dev: str) -> None:
    """The shared pre-training export (unless there), a random NER head (seeded), then every served tagger."""
    import keras

    if not os.path.isdir(os.path.join(workdir, "ours")):
        prepare_encoder(workdir, vocab_file)
    keras.utils.set_random_seed(SEED)
    model, task = tagging_model(workdir, conll_dev)  # saves the labels
    save_dense_head(model, os.path.join(workdir, HEAD_FILE))
    export_ours(workdir, vocab_file, conll_dev)
    onnx_export(hf_tagger(workdir, len(task.labels)), os.path.join(workdir, ONNX_FILE),
                {0: "batch", 1: "sequence"})


def tagging_model(workdir: str, conll_dev: str):
    """Our tagger on the prepared encoder, built (its head as initialised), and its task."""
    from electra_tf.convert import load_encoder
    from electra_tf.finetuning.model import FinetuningModel

    task = ner_task(workdir, data_dir=os.path.dirname(conll_dev))
    encoder, config, _ = load_encoder(os.path.join(workdir, "ours"))
    return FinetuningModel(encoder, task.build_head(config)).build_all(MAX_SEQ_LENGTH), task


def served_tagger(workdir: str, conll_dev: str):
    """Our tagger on the prepared encoder with the prepared head (the weights every system serves), and its task."""
    model, task = tagging_model(workdir, conll_dev)
    set_dense_head(model, os.path.join(workdir, HEAD_FILE))
    return model, task


def export_tagger(model, task, vocab_file: str, path: str) -> None:
    """`model`'s serving SavedModel at `path`, as the bench serves it."""
    from electra_tf.serving.tagging import export_tagging
    from electra_tf.text.tokenization import WordPieceTokenizer

    export_tagging(model, WordPieceTokenizer(vocab_file), task.labels, task.scheme, MAX_SEQ_LENGTH, path,
                   segment_id=task.segment_id)


def export_ours(workdir: str, vocab_file: str, conll_dev: str) -> None:
    """Our serving SavedModel of the prepared weights (`--stage=export_ours` redoes it after a serving change)."""
    model, task = served_tagger(workdir, conll_dev)
    export_tagger(model, task, vocab_file, os.path.join(workdir, SERVING_DIR))


def hf_tagger(workdir: str, num_labels: int):
    """HF's token classifier on the converted discriminator, its `classifier` (one dense layer) holding ours."""
    import torch
    from transformers import ElectraForTokenClassification

    model = ElectraForTokenClassification.from_pretrained(os.path.join(workdir, "hf", "discriminator"),
                                                          num_labels=num_labels)
    head = np.load(os.path.join(workdir, HEAD_FILE))
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(head["kernel"].T))
        model.classifier.bias.copy_(torch.from_numpy(head["bias"]))
    return model.eval()


# ---- worker: one system in its own process ------------------------------------------------------


def first_piece_tags(logits: np.ndarray, word_ids: list[list], labels, decode) -> list[list[str]]:
    """Per row, the tag of every word that has a piece: the argmax label at its first piece (`word_ids`: the
    word of each position, None for [CLS], [SEP] and padding), decoded by `decode` (BIOES → the files' scheme).
    A sentence cut by truncation gets tags for its first words only."""
    out = []
    for row, ids in zip(np.argmax(logits, axis=-1), word_ids):
        first = {}
        for position, word in enumerate(ids):
            if word is not None and word not in first:
                first[word] = position
        out.append(decode([labels[row[first[w]]] for w in sorted(first)]))
    return out


def load_system(system: str, workdir: str):
    """A function: list of texts → per text, the tag of each word, with its libraries imported."""
    if system == "ours":
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

        def load():
            signature = tf.saved_model.load(os.path.join(workdir, SERVING_DIR)).signatures["serving_default"]

            def run(texts):
                out = signature(text=tf.constant(texts))
                return [[t.decode() for t in tags[:n]] for tags, n in zip(out["tags"].numpy(),
                                                                          out["num_words"].numpy())]
            return run
        return load
    task = ner_task(workdir, do_train=False)

    def encode(tok, texts, kind):
        encoding = tok([text.split() for text in texts], is_split_into_words=True, padding=True, truncation=True,
                       max_length=MAX_SEQ_LENGTH, return_tensors=kind)
        encoding["token_type_ids"] = encoding["attention_mask"] * task.segment_id
        return encoding, [encoding.word_ids(i) for i in range(len(texts))]

    def decode(outputs, word_ids):
        return first_piece_tags(outputs[0], word_ids, task.labels, task.decode_tags)

    return hf_or_ort_loader(system, workdir, lambda: hf_tagger(workdir, len(task.labels)), ONNX_FILE, ["logits"],
                            encode, decode)


def worker(system: str, workdir: str, texts: list[str], requests: int) -> dict:
    timings, outputs = timed(system, lambda: load_system(system, workdir), texts, requests, bucket=word_bucket)
    return {**timings, "tags": [tags for batch in outputs for tags in batch]}


# ---- run: interleaved rounds, the summary -------------------------------------------------------


def agreement(tags_a: list[list[str]], tags_b: list[list[str]]) -> dict:
    """Word by word over the words both tagged: the agreeing fraction and the sentences with any disagreement.
    Words only one of the two tagged (past HF's truncation) are counted apart, with their sentences, and how many
    of the disagreeing sentences are among those (the cut changes the context of the words before it)."""
    words = agreeing = disagreeing = one_only = in_part = disagreeing_in_part = 0
    for a, b in zip(tags_a, tags_b, strict=True):
        both = min(len(a), len(b))
        same = sum(x == y for x, y in zip(a, b))
        cut = len(a) != len(b)
        words, agreeing, one_only = words + both, agreeing + same, one_only + abs(len(a) - len(b))
        disagreeing += same < both
        in_part += cut
        disagreeing_in_part += cut and same < both
    return {"words": words, "agreeing_fraction": round(agreeing / max(words, 1), 6),
            "sentences_with_disagreement": disagreeing, "words_tagged_by_one_only": one_only,
            "sentences_tagged_in_part_by_one": in_part, "of_which_with_disagreement": disagreeing_in_part}


def summarise(rounds: list[list[dict]], systems) -> dict:
    """Timings as the classifier's (`timing_rows`, `ratios`); the first round's tags compared pair by pair."""
    rows = timing_rows(rounds, systems)
    tags = {r["system"]: r["tags"] for r in rounds[0]}
    pairs = {f"{a} vs {b}": agreement(tags[a], tags[b]) for i, a in enumerate(systems) for b in systems[i + 1:]}
    return {"systems": rows, "tag_agreement": pairs, "compared_inputs": len(tags[systems[0]]), **ratios(rows),
            **by_words(rounds, systems)}


def by_words(rounds: list[list[dict]], systems) -> dict:
    """Batch 1 by words per request (`{"batch1_by_words": …}`, where the workers timed it): per bucket, its
    requests, each system's median over the rounds of its bucket medians, and ours ÷ ONNX Runtime of those."""
    runs = [r for one in rounds for r in one]
    if not all("batch1_by_bucket" in r for r in runs):
        return {}
    buckets = {}
    for name in [name for name in BUCKET_NAMES if name in runs[0]["batch1_by_bucket"]]:  # word order
        medians = {system: round(statistics.median(r["batch1_by_bucket"][name]["median_ms"] for r in runs
                                                   if r["system"] == system), 2) for system in systems}
        ratio = {"ours_over_ort": round(medians["ours"] / medians["ort"], 2)} if {"ours", "ort"} <= set(medians) else {}
        buckets[name] = {"requests": runs[0]["batch1_by_bucket"][name]["requests"], "median_ms": medians, **ratio}
    return {"batch1_by_words": buckets}


def spawn(system: str, args) -> dict:
    return spawn_worker("bench.inference_bench_tagger", system, [f"--workdir={args.workdir}",
                                                                 f"--conll_dev={args.conll_dev}",
                                                                 f"--requests={args.requests}"])


def main(argv=None) -> int:
    parser = bench_parser("bench.inference_bench_tagger", __doc__, ("prepare", "export_ours", "run", "worker"),
                          SYSTEMS)
    parser.add_argument("--conll_dev", default=DEFAULT_CONLL_DEV, help="CoNLL-2003 English dev.txt")
    args = parser.parse_args(argv)
    if args.stage == "prepare":
        prepare(args.workdir, args.vocab_file, args.conll_dev)
        return 0
    if args.stage == "export_ours":
        export_ours(args.workdir, args.vocab_file, args.conll_dev)
        return 0
    texts = read_texts(args.conll_dev)
    if args.stage == "worker":
        print(json.dumps(worker(args.system, args.workdir, texts, args.requests)))
        return 0
    systems = chosen_systems(args.systems, SYSTEMS)
    rounds = interleaved(systems, args.rounds, lambda system: spawn(system, args))
    task = ner_task(args.workdir, do_train=False)
    record = {**run_header("bench.inference_bench_tagger", argv),
              "model": f"ELECTRA-Small, randomly initialised (seed {SEED}), NER head of {len(task.labels)} BIOES "
                       f"labels, tags in {task.scheme.upper()}",
              "data": f"CoNLL-2003 English dev, {len(texts)} sentences", "rounds": args.rounds,
              "requests": args.requests, "max_seq_length": MAX_SEQ_LENGTH, **summarise(rounds, systems)}
    emit(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
