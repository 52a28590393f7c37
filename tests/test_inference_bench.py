"""bench/inference_bench.py's summary (medians, ranges, the ratios, the logit differences) and its docs table."""

import json
from pathlib import Path

import numpy as np
import pytest

from bench import inference_bench
from tools import docs_renderers, render_docs


def worker_result(system, batch1_ms, per_s, logits, load=1.0, first=0.5):
    return {"system": system, "import_s": 2.0, "load_s": load, "first_request_s": first,
            "batch1_median_ms": batch1_ms, "batch1_p90_ms": 2 * batch1_ms, "batch32_sentences_per_s": per_s,
            "logits": logits}


def rendered_block(root, results, record, name):
    """docs/performance.md's generated block `name`, rendered from `record` written to `results` under `root`."""
    path = root / results
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record), encoding="utf-8")
    page = f"<!-- begin generated: {name} -->\n<!-- end generated: {name} -->\n"
    return render_docs.render_page(page, Path("docs/performance.md"), root)


def tiny_rounds():
    logits = np.array([[0.5, -1.0], [2.0, 0.25]])
    return [[worker_result("ours", 10.0, 100.0, logits.tolist()),
             worker_result("hf", 20.0, 80.0, (logits + [[0.0, 1e-3], [0.0, 0.0]]).tolist()),
             worker_result("ort", 8.0, 120.0, (logits - 2e-3).tolist())],
            [worker_result("hf", 30.0, 60.0, logits.tolist()), worker_result("ort", 6.0, 100.0, logits.tolist()),
             worker_result("ours", 14.0, 110.0, logits.tolist(), load=3.0)]]


def test_the_summary_takes_medians_over_rounds_and_compares_the_first_round_logits():
    summary = inference_bench.summarise(tiny_rounds(), ["ours", "hf", "ort"])
    ours = summary["systems"]["ours"]
    assert ours["batch1_median_ms"] == {"median": 12.0, "min": 10.0, "max": 14.0, "runs": [10.0, 14.0]}
    assert ours["load_s"]["median"] == 2.0
    assert summary["ratios"] == {"ours_over_ort_batch1_median": round(12.0 / 7.0, 2),
                                 "ours_over_ort_batch1_by_round": [round(10.0 / 8.0, 2), round(14.0 / 6.0, 2)],
                                 "ours_over_ort_batch32_throughput": round(105.0 / 110.0, 2),
                                 "ours_over_hf_batch32_throughput": round(105.0 / 70.0, 2)}
    differences = summary["max_abs_logit_difference"]
    np.testing.assert_allclose([differences["ours vs hf"], differences["ours vs ort"], differences["hf vs ort"]],
                               [1e-3, 2e-3, 3e-3])
    assert summary["compared_inputs"] == 2


def test_the_docs_table_is_rendered_from_the_results(tmp_path):
    record = {"command": "python -m bench.inference_bench --stage=run", "commit": "abc1234", "date": "2026-01-02",
              "machine": "Some CPU, 2 cores", "model": "ELECTRA-Small", "data": "SST-2 dev, 2 sentences",
              "rounds": 2, "requests": 200, "ours_before": "commit 0000000",
              **inference_bench.summarise(tiny_rounds(), ["ours", "hf", "ort"])}
    out = rendered_block(tmp_path, docs_renderers.INFERENCE_RESULTS, record, "inference_bench")
    assert "| our serving SavedModel | 12.0 [10.0–14.0] | 24.0 | 105.0 [100.0–110.0] | 2.00 s | 0.500 s |" in out
    assert "| ONNX Runtime, HF fast tokenizer | 7.0 [6.0–8.0] |" in out
    text = " ".join(out.split())
    assert "[`bench/results/inference-sst2-small.json`](../bench/results/inference-sst2-small.json)" in text
    assert "batch-1 median: 1.71, each round's own 1.25, 2.33 (goal ≤ 1, acceptance ≤ 1.5)" in text
    assert "load + first request: 2.50 s (acceptance ≤ 0.5 s)" in text
    assert "ours vs hf 1.0e-03" in text and "Before: commit 0000000." in text


def test_the_breakdown_sends_every_request_to_each_call_in_rotated_order():
    from bench import inference_bench_breakdown

    order = []
    calls = {name: (lambda name: lambda texts: order.append((name, texts[0])))(name) for name in ("a", "b", "c")}
    result = inference_bench_breakdown.interleaved(calls, 4, ["s0", "s1", "s2"])
    assert order == [("a", "s0"), ("b", "s0"), ("c", "s0"), ("b", "s1"), ("c", "s1"), ("a", "s1"),
                     ("c", "s2"), ("a", "s2"), ("b", "s2"), ("a", "s0"), ("b", "s0"), ("c", "s0")]
    assert set(result) == {"a", "b", "c"}
    assert set(result["a"]) == {"batch1_median_ms", "batch1_p90_ms", "batch1_cpu_ms"}


def test_the_breakdown_takes_each_buckets_median_over_the_requests_sent_from_it(monkeypatch):
    """`interleaved(buckets=…)`: per call, the median wall time of the requests whose sentence is in each bucket."""
    from bench import inference_bench_breakdown

    now = [0.0]  # the clock `interleaved` reads: a call advances it 1 s for a short sentence, 3 s for a long one

    def call(texts):
        now[0] += {"short": 1, "long": 3}[texts[0]]

    monkeypatch.setattr(inference_bench_breakdown.time, "perf_counter", lambda: now[0])
    result = inference_bench_breakdown.interleaved({"a": call}, 5, ["short", "long"], buckets=["few", "many"])
    assert result["a"]["batch1_median_ms_by_bucket"] == {"few": 1000.0, "many": 3000.0}


@pytest.mark.parametrize("requests", [3, 12])
def test_the_breakdown_knows_every_sentence_its_calls_are_sent(requests):
    """`parts` tokenises beforehand what its "model" call will be sent (`sentences_sent`); the warm-up sends more
    sentences than 3 requests do (before: `--requests` under 10 failed on the warm-up's first untokenised one)."""
    from bench import inference_bench_breakdown as breakdown

    sentences = [f"s{i}" for i in range(20)]
    sent = []
    calls = breakdown.warmed({"a": lambda texts: sent.append(texts[0])}, sentences)
    breakdown.interleaved(calls, requests, sentences)
    assert set(sent) == set(breakdown.sentences_sent(sentences, requests))


def test_the_breakdown_compares_tagger_exports_by_their_tags_batch_by_batch(monkeypatch):
    """`--head=tagger`: the exports' `tags` (padded per batch, so batches differ in width) are compared batch by
    batch against the first export's; any tag differing makes it False. Other parts refuse the tagger head."""
    import numpy as np

    from bench import inference_bench_breakdown as breakdown

    sentences = [" ".join(["w"] * (1 + i % 3)) for i in range(40)]  # 2 batches of 32 and 8

    def tags(flip):
        def call(texts):
            width = max(len(t.split()) for t in texts)
            out = np.array([[b"O"] * len(t.split()) + [b""] * (width - len(t.split())) for t in texts])
            if flip and len(texts) < 32:
                out[-1, 0] = b"B-PER"
            return out
        return call

    exports = {"a": tags(False), "b": tags(False), "c": tags(True)}
    outputs = []
    monkeypatch.setattr(breakdown, "signature_call", lambda path, output: (outputs.append(output),
                                                                          exports[path.split("/")[-1]])[1])
    result = breakdown.ab("/w", ["a", "b", "c"], sentences, 3, head="tagger")
    assert set(outputs) == {"tags"}
    assert result["b"]["tags_equal_to_a"] is True and result["c"]["tags_equal_to_a"] is False
    with pytest.raises(SystemExit):
        breakdown.main(["--workdir=/w", "--exports=a", "--head=tagger", "--parts", "ab", "ops"])


def test_a_worker_times_load_first_request_batch_1_and_returns_every_batch_of_32_in_order():
    calls = []

    def run(texts):
        calls.append(len(texts))
        return [t.upper() for t in texts]

    texts = [f"s{i}" for i in range(70)]
    timings, outputs = inference_bench.timed("fake", lambda: lambda: run, texts, requests=5)
    assert calls == [1] * 6 + [32, 32, 6]
    assert [t for batch in outputs for t in batch] == [t.upper() for t in texts]
    assert timings["system"] == "fake" and set(timings) >= {"load_s", "first_request_s", "batch1_p90_ms"}
    assert timings["batch32_sentences_per_s"] > 0 and "batch1_by_bucket" not in timings
    grouped, _ = inference_bench.timed("fake", lambda: lambda: run, texts, requests=73, bucket=lambda t: len(t))
    # requests cycle through the 70 texts: "s0".."s9" (2 characters) 13 times, the 60 others once each
    assert {name: b["requests"] for name, b in grouped["batch1_by_bucket"].items()} == {2: 13, 3: 60}


def test_by_bucket_takes_each_groups_median_in_milliseconds():
    assert inference_bench.by_bucket([0.001, 0.009, 0.003, 0.004], ["a", "b", "a", "a"]) == {
        "a": {"median_ms": 3.0, "requests": 3}, "b": {"median_ms": 9.0, "requests": 1}}


# ---- the tagger (bench/inference_bench_tagger.py) ----


def tagger_rounds():
    ours = [["B-PER", "I-PER", "O"], ["O", "B-LOC"], ["O"] * 4]
    hf = [["B-PER", "I-PER", "O"], ["O", "O"], ["O", "O"]]  # sentence 3 cut after two words
    return [[{**worker_result("ours", 10.0, 100.0, None), "tags": ours, **bucket_timings(6.0, 12.0)},
             {**worker_result("hf", 20.0, 80.0, None), "tags": hf, **bucket_timings(18.0, 22.0)},
             {**worker_result("ort", 8.0, 120.0, None), "tags": hf, **bucket_timings(4.0, 10.0)}]]


def bucket_timings(short_ms: float, long_ms: float) -> dict:
    """A tagger worker's `batch1_by_bucket`: its medians of 1–3-word and 20+-word requests."""
    return {"batch1_by_bucket": {"1–3": {"median_ms": short_ms, "requests": 5},
                                 "20+": {"median_ms": long_ms, "requests": 2}}}


def test_the_tagger_groups_requests_by_their_words():
    from bench.inference_bench_tagger import WORD_BUCKETS, word_bucket

    assert [word_bucket(" ".join(["w"] * n)) for n in (0, 1, 3, 4, 9, 10, 19, 20, 200)] == [
        "1–3", "1–3", "1–3", "4–9", "4–9", "10–19", "10–19", "20+", "20+"]
    assert WORD_BUCKETS[-1][1] is None and all(a[1] + 1 == b[0] for a, b in zip(WORD_BUCKETS, WORD_BUCKETS[1:]))


def test_the_tagger_agreement_counts_words_sentences_and_the_words_past_a_truncation_apart():
    from bench.inference_bench_tagger import agreement

    ours, hf = tagger_rounds()[0][0]["tags"], tagger_rounds()[0][1]["tags"]
    assert agreement(ours, hf) == {"words": 7, "agreeing_fraction": round(6 / 7, 6),
                                   "sentences_with_disagreement": 1, "words_tagged_by_one_only": 2,
                                   "sentences_tagged_in_part_by_one": 1, "of_which_with_disagreement": 0}
    assert agreement(hf, hf)["agreeing_fraction"] == 1.0


def test_the_tagger_reads_each_word_at_its_first_piece_and_decodes_the_bioes_labels():
    from bench.inference_bench_tagger import first_piece_tags
    from electra_tf.finetuning.tagging import from_bioes

    labels = ["O", "B-PER", "E-PER", "S-LOC"]
    logits = np.eye(4)[[[0, 1, 0, 2, 3, 0]]]  # [CLS] w0 w0-piece w1 w2 [SEP]: w0's second piece says O
    tags = first_piece_tags(logits, [[None, 0, 0, 1, 2, None]], labels, lambda t: from_bioes(t, "iob2"))
    assert tags == [["B-PER", "I-PER", "B-LOC"]]


def test_the_tagger_summary_and_its_docs_table(tmp_path):
    from bench import inference_bench_tagger

    summary = inference_bench_tagger.summarise(tagger_rounds(), ["ours", "hf", "ort"])
    assert summary["compared_inputs"] == 3
    assert summary["tag_agreement"]["hf vs ort"]["agreeing_fraction"] == 1.0
    assert summary["ratios"]["ours_over_ort_batch1_median"] == 1.25
    record = {"command": "python -m bench.inference_bench_tagger --stage=run", "commit": "abc1234",
              "date": "2026-01-02", "machine": "Some CPU, 2 cores", "model": "ELECTRA-Small, NER head",
              "data": "CoNLL-2003 English dev, 3 sentences", "rounds": 1, "requests": 200, **summary}
    out = rendered_block(tmp_path, docs_renderers.INFERENCE_TAGGER_RESULTS, record, "inference_tagger")
    assert "| our serving SavedModel | 10.0 [10.0–10.0] | 20.0 | 100.0 [100.0–100.0] | 1.00 s | 0.500 s |" in out
    text = " ".join(out.split())
    results = "bench/results/inference-conll-tagger-small.json"
    assert f"[`{results}`](../{results})" in text
    assert ("ours vs hf: 85.714 % of 7 words agree, disagreeing sentences: 1; words past HF's truncation, not "
            "compared: 2 (sentences cut: 1, of them disagreeing: 0)") in text
    assert "hf vs ort: 100.000 % of 7 words agree, disagreeing sentences: 0." in text
    assert "our load + first request: 1.50 s (acceptance ≤ 0.5 s)." in text
    assert "batch-1 median: 1.25, each round's own 1.25 (goal ≤ 1, acceptance ≤ 1.5)" in text
    assert summary["batch1_by_words"]["1–3"] == {"requests": 5, "median_ms": {"ours": 6.0, "hf": 18.0, "ort": 4.0},
                                                 "ours_over_ort": 1.5}
    assert ("Batch-1 medians by words per request (requests): 1–3 words (5): ours 6.00, ONNX Runtime 4.00 ms, "
            "1.50 ×; 20+ words (2): ours 12.00, ONNX Runtime 10.00 ms, 1.20 ×.") in text
    del record["ratios"]["ours_over_ort_batch1_by_round"]  # a results file written before these were recorded
    del record["batch1_by_words"]
    old = " ".join(rendered_block(tmp_path / "old", docs_renderers.INFERENCE_TAGGER_RESULTS, record,
                                  "inference_tagger").split())
    assert "batch-1 median: 1.25 (goal ≤ 1, acceptance ≤ 1.5)" in old and "by words" not in old
    shuffled = tagger_rounds()
    for r in shuffled[0]:  # a worker lists its buckets as its requests first meet them; the summary in word order
        r["batch1_by_bucket"] = dict(reversed(r["batch1_by_bucket"].items()))
    summary = inference_bench_tagger.summarise(shuffled, ["ours", "hf", "ort"])
    assert list(summary["batch1_by_words"]) == ["1–3", "20+"]
    rounds = tagger_rounds()
    del rounds[0][1]["batch1_by_bucket"]  # a worker that did not time them: no buckets in the summary
    assert "batch1_by_words" not in inference_bench_tagger.summarise(rounds, ["ours", "hf", "ort"])


# ---- SQuAD (bench/inference_bench_squad.py) ----


def squad_rounds():
    ours = ["Denver Broncos", "1990", "empty"]
    hf = ["Denver Broncos", "(1990)", "empty"]
    return [[{**worker_result("ours", 10.0, 100.0, None), "answers": ours},
             {**worker_result("hf", 20.0, 80.0, None), "answers": hf},
             {**worker_result("ort", 8.0, 120.0, None), "answers": hf}]]


def test_the_squad_head_maps_onto_hf_qa_outputs_start_column_first():
    from types import SimpleNamespace

    from bench.inference_bench_squad import qa_outputs_weights

    def dense(kernel, bias):
        return SimpleNamespace(weights=[SimpleNamespace(numpy=lambda: np.array(kernel)),
                                        SimpleNamespace(numpy=lambda: np.array(bias))])

    head = SimpleNamespace(start_logits=dense([[1.0], [2.0]], [0.5]), end_logits=dense([[3.0], [4.0]], [-0.5]))
    weights = qa_outputs_weights(head)
    assert weights["kernel"].tolist() == [[1.0, 3.0], [2.0, 4.0]] and weights["bias"].tolist() == [0.5, -0.5]


def test_the_squad_heads_weights_come_back_from_hf_qa_outputs():
    from types import SimpleNamespace

    from bench.inference_bench_squad import qa_outputs_weights, set_qa_outputs_weights

    class Dense:
        def __init__(self):
            self.weights = []

        def set_weights(self, values):
            self.weights = [SimpleNamespace(numpy=lambda v=np.asarray(v): v) for v in values]

    head = SimpleNamespace(start_logits=Dense(), end_logits=Dense())
    set_qa_outputs_weights(head, {"kernel": np.array([[1.0, 3.0], [2.0, 4.0]]), "bias": np.array([0.5, -0.5])})
    assert [w.numpy().tolist() for w in head.start_logits.weights] == [[[1.0], [2.0]], [0.5]]
    assert [w.numpy().tolist() for w in head.end_logits.weights] == [[[3.0], [4.0]], [-0.5]]
    back = qa_outputs_weights(head)  # the round trip
    assert back["kernel"].tolist() == [[1.0, 3.0], [2.0, 4.0]] and back["bias"].tolist() == [0.5, -0.5]


def test_the_squad_windows_know_their_context_pieces_and_where_each_has_its_max_context():
    from bench.inference_bench_squad import window_meta

    # Two windows of a 5-piece context, 2 pieces apart: [CLS] q [SEP] c c c c [SEP], then pieces 2-4.
    windows = [[None, 0, None, 1, 1, 1, 1, None], [None, 0, None, 1, 1, 1, None]]
    first, second = window_meta(windows, doc_stride=2)
    assert first["token_to_orig"] == [-1, -1, -1, 0, 1, 2, 3, -1]
    assert second["token_to_orig"] == [-1, -1, -1, 2, 3, 4, -1]
    # Piece 2 is nearer the middle of the first window, piece 3 of the second.
    assert first["max_context"] == [False] * 3 + [True, True, True, False, False]
    assert second["max_context"] == [False] * 3 + [False, True, True, False]


def test_the_squad_answer_is_the_best_valid_span_over_the_windows_sliced_at_its_offsets():
    from bench.inference_bench_squad import NO_SPAN_TEXT, best_answer, window_meta
    from electra_tf.options import SquadOptions

    context = "Denver Broncos won"
    ids = [None, 0, None, 1, 1, 1, None]  # [CLS] q [SEP] denver broncos won [SEP]
    offsets = [[(0, 0), (0, 3), (0, 0), (0, 6), (7, 14), (15, 18), (0, 0)]]
    metas = window_meta([ids], doc_stride=128)
    start = [[9.0, 0, 50.0, 3.0, 1.0, 0, 0]]  # the question piece (50) is masked like the head masks it
    end = [[9.0, 0, 0, 0, 4.0, 0, 0]]
    assert best_answer(context, offsets, metas, start, end, SquadOptions()) == "Denver Broncos"
    reversed_only = [[0, 0, 0, 0, 0, 9.0, 0]], [[0, 0, 0, 9.0, 0, 0, 0]]
    assert best_answer(context, offsets, metas, *reversed_only, SquadOptions(n_best_size=1)) == NO_SPAN_TEXT


def test_the_squad_summary_compares_answers_exactly_and_its_docs_table(tmp_path):
    from bench import inference_bench_squad

    summary = inference_bench_squad.summarise(squad_rounds(), ["ours", "hf", "ort"])
    assert summary["answer_agreement"]["ours vs hf"] == {"pairs": 3, "exact_match_fraction": round(2 / 3, 6),
                                                         "differing": 1}
    assert summary["answer_agreement"]["hf vs ort"]["differing"] == 0
    record = {"command": "python -m bench.inference_bench_squad --stage=run", "commit": "abc1234",
              "date": "2026-01-02", "machine": "Some CPU, 2 cores", "model": "ELECTRA-Small, start/end head",
              "data": "SQuAD v1.1 dev, the first 3 question-context pairs", "rounds": 1, "requests": 200, **summary}
    text = " ".join(rendered_block(tmp_path, docs_renderers.INFERENCE_SQUAD_RESULTS, record, "inference_squad").split())
    assert "| HF transformers (PyTorch), fast tokenizer | 20.0 [20.0–20.0] | 40.0 | 80.0 [80.0–80.0] |" in text
    assert "ours vs hf: 66.7 % of 3 answers identical, 1 differ; ours vs ort: 66.7 %" in text
    assert "hf vs ort: 100.0 % of 3 answers identical, 0 differ." in text


def test_the_squad_bench_constants_are_the_librarys():
    """The SQuAD workers hold the head's mask and the no-span answer as plain values (HF's and ONNX Runtime's
    processes import no Keras); they must stay the library's."""
    from bench import inference_bench_squad
    from electra_tf.finetuning.heads import MASK_PENALTY
    from electra_tf.serving.squad import NO_SPAN_TEXT

    assert inference_bench_squad.MASK_PENALTY == -MASK_PENALTY  # the head subtracts it, the bench adds it
    assert inference_bench_squad.NO_SPAN_TEXT == NO_SPAN_TEXT


# ---- the matmul chain (bench/matmul_chain_bench.py) ----


def test_the_matmul_chain_stores_shared_weights_once():
    """`--weights=shared` times every layer on the first layer's weights: each system must hold them once (a copy
    per layer would be as much memory to read as the distinct weights, and time the same thing twice)."""
    from bench.matmul_chain_bench import LAYERS, SHAPES, stored_once, weights

    stored = []
    shared = stored_once(weights(shared=True), lambda w, index: stored.append(w) or index)
    assert len(stored) == len(SHAPES) and shared == [list(range(len(SHAPES)))] * LAYERS
    stored.clear()
    distinct = stored_once(weights(), lambda w, index: stored.append(w) or index)
    assert len(stored) == LAYERS * len(SHAPES) and distinct[1] == list(range(len(SHAPES), 2 * len(SHAPES)))
    np.testing.assert_array_equal(weights(shared=True)[5][4], weights()[0][4])
