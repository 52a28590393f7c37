"""Serving speed on a CPU, SQuAD: our question-answering SavedModel against Hugging Face transformers and ONNX Runtime.

Not a test. `bench/inference_bench.py`'s harness (fresh process per (round, system), interleaved rounds, the
same timings) on a SQuAD v1.1 span head of the same ELECTRA-Small weights, (question, context) in and the answer
text out; a "sentence" of the timings is one question-context pair:

* `ours`: the SavedModel `export_squad` writes (`tf.saved_model.load`, `serving_default` on `question` and
  `context` string batches), its `answer` output: windowing, decoding and the answer text all in the graph;
* `hf`: transformers' `ElectraForQuestionAnswering` (PyTorch) on the converted discriminator, the fast tokenizer
  making the same windows (`decode_windows`), the answer decoded from its start/end logits by `best_answer`;
* `ort`: that PyTorch model through `torch.onnx.export`, run by ONNX Runtime, the same Python around it.

The head: our default SQuAD head is the official joint-prediction head (`squad_joint_prediction=True`: the end
conditioned on the start, a beam search over both), which HF's `ElectraForQuestionAnswering` has no counterpart
for, so it is not benchmarked against HF. The model here is built with `squad_joint_prediction=False` and without
the answerability classifier (SQuAD v1.1 does not read it): `SpanHead`'s two independent dense layers, start and
end, one output each on every token, which is HF's `qa_outputs` (one dense layer to 2 outputs: start, end) with
our head's weights. Both sides use the library's defaults (`SquadOptions`: doc_stride 128, max_query_length 64,
n_best_size 20, max_answer_length 30) and SQuAD's max_seq_length 384.

HF and ONNX Runtime decode as our Python path does, with its own pieces: windows of `doc_stride` tokens (the
fast tokenizer's `return_overflowing_tokens` with the overlap that gives), the question cut to max_query_length
tokens, logits outside the context (but [CLS]) pushed down by the head's −1000 before the `n_best_size` best
starts × ends are taken (`decoding.span_candidates`), the official filters (`decoding.is_valid_span`, max-context
by `features.check_is_max_context`), the best start + end logit over the windows. The answer text differs in
how it is read: ours maps the pieces back to whitespace words and aligns them (`get_final_text`); HF and ORT
slice the context at the pieces' character offsets. So a few answers may differ in punctuation around a word.

    python -m bench.inference_bench_squad --stage=prepare --workdir=/tmp/inference_bench   # models, once
    python -m bench.inference_bench_squad --stage=run --workdir=/tmp/inference_bench --rounds=3 \\
        --out=bench/results/inference-squad-small.json

`prepare` reuses WORKDIR/ours and WORKDIR/hf when another inference bench's `prepare` wrote them. The data: the
first `--pairs` (question, context) pairs of SQuAD v1.1 dev (all 10,570 would make each worker's batch-32 pass
21 times longer). Compared: the answer strings of every pair, between each pair of
systems (exact match).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np

from bench.inference_bench import (ROOT, SEED, bench_parser, chosen_systems, emit, hf_or_ort_loader, interleaved,
                                   onnx_export, prepare_encoder, ratios, run_header, spawn_worker, timed, timing_rows)
from electra_tf.options import SquadOptions

SYSTEMS = ("ours", "hf", "ort")
DEFAULT_SQUAD_DEV = os.path.join(ROOT, "..", "shared", "data", "squad", "dev-v1.1.json")
MAX_SEQ_LENGTH = 384  # SQuAD's default (`SquadTask.default_max_seq_length`)
SERVING_DIR = "serving_squad"
HEAD_FILE = "squad_head.npz"
ONNX_FILE = "squad.onnx"
LOGITS = ("start_logits", "end_logits")
# Every output the span head masks outside the context gets this much (`heads.MASK_PENALTY`), here in NumPy so the
# HF and ORT workers do not import Keras.
MASK_PENALTY = -1000.0
NO_SPAN_TEXT = "empty"  # the Python path's answer where no span passes the filters (`serving.squad.NO_SPAN_TEXT`)


def read_pairs(path: str, pairs: int) -> list[tuple[str, str]]:
    """The first `pairs` (question, context) pairs of a SQuAD json, in file order."""
    from electra_tf.finetuning.squad.examples import load_squad

    try:
        data = load_squad(path)
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"--squad_dev: {e} (expected SQuAD v1.1's dev-v1.1.json)") from None
    found = [(qa["question"], paragraph["context"]) for article in data for paragraph in article["paragraphs"]
             for qa in paragraph["qas"]]
    if len(found) < pairs:
        raise SystemExit(f"--pairs: {path} has {len(found)} question-context pairs, fewer than {pairs}")
    return found[:pairs]


# ---- prepare: the three models from one set of weights ------------------------------------------


def serving_settings():
    from electra_tf.serving.squad import SquadServingSettings

    options = SquadOptions()
    return SquadServingSettings(max_seq_length=MAX_SEQ_LENGTH, doc_stride=options.doc_stride,
                                max_query_length=options.max_query_length,
                                max_answer_length=options.max_answer_length, n_best_size=options.n_best_size,
                                v2=False, null_score_threshold=0.0)


def prepare(workdir: str, vocab_file: str) -> None:
    """The shared pre-training export (unless there), a random independent start/end head (seeded), then every
    served model."""
    import keras

    if not os.path.isdir(os.path.join(workdir, "ours")):
        prepare_encoder(workdir, vocab_file)
    keras.utils.set_random_seed(SEED)
    np.savez(os.path.join(workdir, HEAD_FILE), **qa_outputs_weights(reading_model(workdir).head))
    export_ours(workdir, vocab_file)
    onnx_export(hf_reader(workdir), os.path.join(workdir, ONNX_FILE), {0: "batch", 1: "sequence"}, LOGITS)


def reading_model(workdir: str):
    """Our independent start/end reader on the prepared encoder, built (its head as initialised)."""
    from electra_tf.convert import load_encoder
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.squad.task import SquadTask

    encoder, config, _ = load_encoder(os.path.join(workdir, "ours"))
    config = dataclasses.replace(config, squad_joint_prediction=False, squad_answerable_classifier=False)
    return FinetuningModel(encoder, SquadTask().build_head(config)).build_all(MAX_SEQ_LENGTH)


def export_ours(workdir: str, vocab_file: str) -> None:
    """Our serving SavedModel of the prepared weights (`--stage=export_ours` redoes it after a serving change)."""
    from electra_tf.serving.squad import export_squad
    from electra_tf.text.tokenization import WordPieceTokenizer

    model = reading_model(workdir)
    set_qa_outputs_weights(model.head, np.load(os.path.join(workdir, HEAD_FILE)))
    export_squad(model, WordPieceTokenizer(vocab_file), serving_settings(), os.path.join(workdir, SERVING_DIR))


def qa_outputs_weights(head) -> dict:
    """Our `SpanHead`'s start and end dense layers (`[H, 1]` kernels) as HF's `qa_outputs`: one `[H, 2]` kernel,
    start in column 0 and end in column 1 (HF splits the output in that order)."""
    start_kernel, start_bias = (w.numpy() for w in head.start_logits.weights)
    end_kernel, end_bias = (w.numpy() for w in head.end_logits.weights)
    return {"kernel": np.concatenate([start_kernel, end_kernel], axis=1),
            "bias": np.concatenate([start_bias, end_bias])}


def set_qa_outputs_weights(head, weights) -> None:
    """`qa_outputs_weights` undone: HF's `[H, 2]` kernel and `[2]` bias into our `SpanHead`'s start (column 0) and
    end (column 1) dense layers."""
    for layer, column in ((head.start_logits, 0), (head.end_logits, 1)):
        layer.set_weights([weights["kernel"][:, column:column + 1], weights["bias"][column:column + 1]])


def hf_reader(workdir: str):
    """HF's question answering model on the converted discriminator, its `qa_outputs` holding our head."""
    import torch
    from transformers import ElectraForQuestionAnswering

    model = ElectraForQuestionAnswering.from_pretrained(os.path.join(workdir, "hf", "discriminator"))
    head = np.load(os.path.join(workdir, HEAD_FILE))
    with torch.no_grad():
        model.qa_outputs.weight.copy_(torch.from_numpy(head["kernel"].T))
        model.qa_outputs.bias.copy_(torch.from_numpy(head["bias"]))
    return model.eval()


# ---- worker: one system in its own process ------------------------------------------------------


def decode_windows(tok, question: str, context: str, options: SquadOptions, max_seq_length: int) -> dict:
    """One pair's windows as our features make them: the question cut to `max_query_length` pieces, the context in
    windows of at most `max_seq_length - question - 3` pieces starting `doc_stride` pieces apart."""
    pieces = tok(question, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if len(pieces) > options.max_query_length:
        question = question[:pieces[options.max_query_length - 1][1]]
    window = max_seq_length - min(len(pieces), options.max_query_length) - 3
    return tok(question, context, truncation="only_second", max_length=max_seq_length,
               stride=window - options.doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True)


def window_meta(sequence_ids: list[list], doc_stride: int) -> list[dict]:
    """Per window, what `decoding.is_valid_span` reads: its tokens, each one's context piece (-1 outside the
    context) and whether this window gives it its maximum context (`features.check_is_max_context`)."""
    from electra_tf.finetuning.squad.features import check_is_max_context

    spans = [(i * doc_stride, sum(s == 1 for s in ids)) for i, ids in enumerate(sequence_ids)]
    metas = []
    for index, ids in enumerate(sequence_ids):
        first = ids.index(1)
        piece = [spans[index][0] + p - first if s == 1 else -1 for p, s in enumerate(ids)]
        metas.append({"tokens": ids, "token_to_orig": piece,
                      "max_context": [p >= 0 and check_is_max_context(spans, index, p) for p in piece]})
    return metas


def answer_penalty(sequence_ids: list) -> np.ndarray:
    """The span head's mask in NumPy: 0 at [CLS] and the context, `MASK_PENALTY` elsewhere."""
    allowed = np.array([s == 1 for s in sequence_ids])
    allowed[0] = True
    return np.where(allowed, 0.0, MASK_PENALTY)


def best_answer(context: str, offsets: list, metas: list[dict], start_logits, end_logits,
                options: SquadOptions) -> str:
    """The best span over one pair's windows (start + end logit, the first on ties), as the context's slice at
    its pieces' character offsets; `NO_SPAN_TEXT` where no candidate passes the filters."""
    from electra_tf.finetuning.squad.decoding import is_valid_span, span_candidates

    best, best_score = None, None
    for w, m in enumerate(metas):
        penalty = answer_penalty(m["tokens"])
        logits = {name: [np.asarray(values[w][:len(penalty)]) + penalty]
                  for name, values in zip(LOGITS, (start_logits, end_logits))}
        for start, end, start_score, end_score in span_candidates(logits, 0, options.n_best_size):
            if is_valid_span(m, start, end, options.max_answer_length) and (
                    best_score is None or start_score + end_score > best_score):
                best, best_score = (offsets[w][start][0], offsets[w][end][1]), start_score + end_score
    return NO_SPAN_TEXT if best is None else context[best[0]:best[1]]


def load_system(system: str, workdir: str):
    """A function: list of (question, context) → per pair, the answer text, with its libraries imported."""
    if system == "ours":
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

        def load():
            signature = tf.saved_model.load(os.path.join(workdir, SERVING_DIR)).signatures["serving_default"]

            def run(pairs):
                questions, contexts = zip(*pairs)
                out = signature(question=tf.constant(questions), context=tf.constant(contexts))
                return [a.decode() for a in out["answer"].numpy()]
            return run
        return load
    options = SquadOptions()

    def encode(tok, pairs, kind):
        """Every pair's windows in one padded batch, and per pair its windows' rows, offsets and meta."""
        rows, per_pair = {"input_ids": [], "token_type_ids": [], "attention_mask": []}, []
        for question, context in pairs:
            windows = decode_windows(tok, question, context, options, MAX_SEQ_LENGTH)
            first = len(rows["input_ids"])
            for name in rows:
                rows[name].extend(windows[name])
            sequence_ids = [windows.sequence_ids(i) for i in range(len(windows["input_ids"]))]
            per_pair.append((context, range(first, len(rows["input_ids"])), windows["offset_mapping"],
                             window_meta(sequence_ids, options.doc_stride)))
        return tok.pad(rows, return_tensors=kind), per_pair

    def answers(logits, per_pair):
        start, end = logits
        return [best_answer(context, offsets, metas, start[rows], end[rows], options)
                for context, rows, offsets, metas in per_pair]

    return hf_or_ort_loader(system, workdir, lambda: hf_reader(workdir), ONNX_FILE, list(LOGITS), encode, answers)


def worker(system: str, workdir: str, pairs: list, batch32_pairs: int, requests: int) -> dict:
    """`timed` on the pairs; batch 32 on the first `batch32_pairs` of them (batch 1 cycles through the same)."""
    timings, outputs = timed(system, lambda: load_system(system, workdir), pairs[:batch32_pairs], requests)
    return {**timings, "answers": [answer for batch in outputs for answer in batch]}


# ---- run: interleaved rounds, the summary -------------------------------------------------------


def answer_agreement(answers_a: list[str], answers_b: list[str]) -> dict:
    """Exact match of the answer strings, pair by pair: the matching fraction and how many differ."""
    same = sum(a == b for a, b in zip(answers_a, answers_b, strict=True))
    return {"pairs": len(answers_a), "exact_match_fraction": round(same / max(len(answers_a), 1), 6),
            "differing": len(answers_a) - same}


def summarise(rounds: list[list[dict]], systems) -> dict:
    """Timings as the classifier's (`timing_rows`, `ratios`); the first round's answers compared pair by pair."""
    rows = timing_rows(rounds, systems)
    answers = {r["system"]: r["answers"] for r in rounds[0]}
    pairs = {f"{a} vs {b}": answer_agreement(answers[a], answers[b])
             for i, a in enumerate(systems) for b in systems[i + 1:]}
    return {"systems": rows, "answer_agreement": pairs, "compared_inputs": len(answers[systems[0]]), **ratios(rows)}


def spawn(system: str, args) -> dict:
    return spawn_worker("bench.inference_bench_squad", system, [
        f"--workdir={args.workdir}", f"--squad_dev={args.squad_dev}", f"--pairs={args.pairs}",
        f"--batch32_pairs={args.batch32_pairs}", f"--requests={args.requests}"])


def main(argv=None) -> int:
    parser = bench_parser("bench.inference_bench_squad", __doc__, ("prepare", "export_ours", "run", "worker"),
                          SYSTEMS)
    parser.add_argument("--squad_dev", default=DEFAULT_SQUAD_DEV, help="SQuAD v1.1 dev-v1.1.json")
    parser.add_argument("--pairs", type=int, default=500, help="the first N (question, context) pairs of dev")
    parser.add_argument("--batch32_pairs", type=int, default=0,
                        help="batch 32 (and the answers compared) on the first N pairs only; 0: all --pairs")
    args = parser.parse_args(argv)
    if args.stage == "prepare":
        prepare(args.workdir, args.vocab_file)
        return 0
    if args.stage == "export_ours":
        export_ours(args.workdir, args.vocab_file)
        return 0
    pairs = read_pairs(args.squad_dev, args.pairs)
    args.batch32_pairs = args.batch32_pairs or args.pairs
    if args.stage == "worker":
        print(json.dumps(worker(args.system, args.workdir, pairs, args.batch32_pairs, args.requests)))
        return 0
    systems = chosen_systems(args.systems, SYSTEMS)
    rounds = interleaved(systems, args.rounds, lambda system: spawn(system, args))
    record = {**run_header("bench.inference_bench_squad", argv),
              "model": f"ELECTRA-Small, randomly initialised (seed {SEED}), independent start/end head "
                       "(squad_joint_prediction=False, no answerability classifier)",
              "data": f"SQuAD v1.1 dev, the first {args.pairs} question-context pairs"
                      + (f" (batch 32 on the first {args.batch32_pairs})" if args.batch32_pairs < args.pairs else ""),
              "rounds": args.rounds, "requests": args.requests, "max_seq_length": MAX_SEQ_LENGTH,
              "squad_options": dataclasses.asdict(SquadOptions()), **summarise(rounds, systems)}
    emit(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
