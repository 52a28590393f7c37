"""SQuAD decoding of the joint head's beam (official `qa_metrics.write_predictions`) and 2.0 scoring.

Hand-made beams with known answers, a brute-force reference over every beam candidate, and the
full stack (SpanHead beam → decoder) against an exhaustive search over all start/end pairs.
"""

import json

import numpy as np
import pytest
from scipy.special import log_softmax

from electra_tf.finetuning.heads import SpanHead
from electra_tf.finetuning.metrics import squad_v2_evaluate
from electra_tf.finetuning.squad.decoding import decode_predictions, get_final_text
from electra_tf.finetuning.squad.examples import read_examples
from electra_tf.finetuning.squad.features import convert_examples_to_features
from electra_tf.finetuning.squad.task import SquadTask
from electra_tf.finetuning.task import EvalSet
from electra_tf.text.tokenization import WordPieceTokenizer
from test_squad_features import VOCAB, squad_json


@pytest.fixture
def tokenizer(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return WordPieceTokenizer(str(path))


def _features(tokenizer, data, seq=64, stride=128, training=False, v2=False):
    examples, _ = read_examples(data, is_training=training, v2=v2)
    features, meta = convert_examples_to_features(examples, tokenizer, seq, stride, 8, is_training=training)
    return examples, features, meta


def _position(tokenizer, m, word):
    """Index in window `m` of the first document token `word`."""
    tokens = tokenizer.convert_ids_to_tokens(m["tokens"])
    return next(i for i in range(m["doc_offset"], len(tokens)) if tokens[i] == word)


def _paris_question(tokenizer):
    data = [{"title": "B", "paragraphs": [dict(squad_json()["data"][1]["paragraphs"][0])]}]
    data[0]["paragraphs"][0]["qas"] = data[0]["paragraphs"][0]["qas"][:1]  # q3, one window
    examples, features, meta = _features(tokenizer, data)
    assert len(meta) == 1
    return examples, meta


def test_joint_beam_hand_made(tokenizer):
    examples, meta = _paris_question(tokenizer)
    p = {w: _position(tokenizer, meta[0], w) for w in ("paris", "france", "gustave", "eiffel")}
    outputs = {  # K = 3
        "start_top_index": np.array([[1, p["paris"], p["gustave"]]]),  # 1: a question token
        "start_top_log_probs": np.array([[-0.1, -0.5, -1.5]], np.float32),
        "end_top_index": np.array([[[p["paris"], p["france"], p["eiffel"]],
                                    [p["paris"] - 1, p["paris"], p["france"]],  # paris − 1: the question's [SEP]
                                    [p["eiffel"], p["gustave"], p["paris"]]]]),  # last: reversed
        "end_top_log_probs": np.array([[[-0.01, -0.02, -0.03], [-0.05, -0.2, -0.9], [-0.1, -0.6, -0.7]]],
                                      np.float32),
    }
    _, nbest, _ = decode_predictions(examples, meta, outputs, tokenizer)
    got = [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest["q3"]]
    expected = [("Paris", -0.5, -0.2), ("Paris is the capital of France", -0.5, -0.9),
                ("Gustave Eiffel", -1.5, -0.1), ("Gustave", -1.5, -0.6)]
    assert [g[0] for g in got] == [e[0] for e in expected]
    np.testing.assert_allclose([g[1:] for g in got], [e[1:] for e in expected], rtol=1e-6)
    scores = np.array([s + e for _, s, e in expected])
    np.testing.assert_allclose([e["probability"] for e in nbest["q3"]],
                               np.exp(scores) / np.exp(scores).sum(), rtol=1e-6)
    # A 6-token span is longer than max_answer_length=5; n_best_size cuts the list, not the beam.
    predictions, nbest, _ = decode_predictions(examples, meta, outputs, tokenizer, n_best_size=2,
                                               max_answer_length=5)
    assert predictions == {"q3": "Paris"} and [e["text"] for e in nbest["q3"]] == ["Paris", "Gustave Eiffel"]


def _reference_nbest(examples, meta, outputs, tokenizer, n_best_size, max_answer_length):
    """Brute force, straight from the official rules: every (window, beam start i, beam end j)."""
    result = {}
    for example_index, example in enumerate(examples):
        candidates = []
        for f, m in enumerate(meta):
            if m["example_index"] != example_index:
                continue
            for i, s in enumerate(outputs["start_top_index"][f]):
                for j, e in enumerate(outputs["end_top_index"][f, i]):
                    n = len(m["tokens"])
                    if not (0 < s < n and e < n and s <= e < s + max_answer_length):
                        continue
                    if m["token_to_orig"][s] < 0 or m["token_to_orig"][e] < 0 or not m["max_context"][s]:
                        continue
                    candidates.append((float(outputs["start_top_log_probs"][f, i]),
                                       float(outputs["end_top_log_probs"][f, i, j]), f, s, e))
        candidates.sort(key=lambda c: -(c[0] + c[1]))
        nbest = []
        for start_score, end_score, f, s, e in candidates:
            m = meta[f]
            pieces = " ".join(tokenizer.convert_ids_to_tokens(m["tokens"][s:e + 1])).replace(" ##", "")
            words = " ".join(example.doc_tokens[m["token_to_orig"][s]:m["token_to_orig"][e] + 1])
            text = get_final_text(pieces, words)
            if text not in [t for t, _, _ in nbest] and len(nbest) < n_best_size:
                nbest.append((text, start_score, end_score))
        result[example.qas_id] = nbest
    return result


def test_joint_beam_matches_brute_force(tokenizer):
    examples, features, meta = _features(tokenizer, squad_json()["data"], seq=24, stride=6)
    assert len(meta) > len(examples)  # several windows per question
    rng = np.random.RandomState(3)
    n, k, seq = len(meta), 6, 24
    start_scores = -np.sort(rng.exponential(size=(n, k)), axis=1)
    end_scores = -np.sort(rng.exponential(size=(n, k, k)), axis=2)
    outputs = {"start_top_index": rng.randint(0, seq + 2, size=(n, k)), "start_top_log_probs": start_scores,
               "end_top_index": rng.randint(0, seq + 2, size=(n, k, k)), "end_top_log_probs": end_scores}
    for n_best_size, max_answer_length in ((20, 30), (3, 2)):
        predictions, nbest, _ = decode_predictions(examples, meta, outputs, tokenizer, n_best_size,
                                                   max_answer_length)
        reference = _reference_nbest(examples, meta, outputs, tokenizer, n_best_size, max_answer_length)
        for qid, expected in reference.items():
            expected = expected or [("empty", 0.0, 0.0)]
            assert [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest[qid]] == expected
            assert predictions[qid] == expected[0][0]
    assert any(len(v) > 1 for v in reference.values())


def test_head_beam_and_decoder_find_the_exhaustive_best_span(tokenizer):
    """With a beam as wide as the sequence the beam search is exhaustive: the decoded answer is the
    valid span maximising log p(start) + log p(end | start), found here by scoring every pair."""
    examples, features, meta = _features(tokenizer, squad_json()["data"], seq=24, stride=6)
    seq, hidden_size = 24, 8
    head = SpanHead(beam_size=seq, joint_hidden_size=16, answerable=False)
    hidden = np.random.RandomState(5).normal(size=(len(meta), seq, hidden_size)).astype("float32")
    outputs = {k: np.asarray(v) for k, v in head(hidden, features).items()}
    _, nbest, _ = decode_predictions(examples, meta, outputs, tokenizer, max_answer_length=4)
    start_log_probs = log_softmax(np.asarray(outputs["start_logits"], np.float64), axis=-1)
    best = {}
    for f, m in enumerate(meta):
        # Row s: the end log-probs given start s (the training path conditions on the given start).
        every_start = {k: np.repeat(v[f:f + 1], seq, axis=0) for k, v in features.items()}
        every_start["start_positions"] = np.arange(seq)
        conditioned = log_softmax(np.asarray(head(np.repeat(hidden[f:f + 1], seq, axis=0), every_start,
                                                  training=True)["end_logits"], np.float64), axis=-1)
        for s in range(1, len(m["tokens"])):
            for e in range(s, min(s + 4, len(m["tokens"]))):
                if m["token_to_orig"][s] < 0 or m["token_to_orig"][e] < 0 or not m["max_context"][s]:
                    continue
                score = start_log_probs[f, s] + conditioned[s, e]
                qid = examples[m["example_index"]].qas_id
                best[qid] = max(best.get(qid, -np.inf), score)
    for qid, score in best.items():
        top = nbest[qid][0]
        assert top["start_logit"] + top["end_logit"] == pytest.approx(score, abs=1e-3)


def _oracle_beam(features, answerable_logit):
    """A K=2 beam whose best pair is each window's gold span (or [CLS], which is never valid)."""
    n = len(features["input_ids"])
    start_index = np.stack([features["start_positions"], np.full(n, 1)], axis=1)
    end_index = np.stack([np.stack([features["end_positions"], features["end_positions"] + 1], 1)] * 2, axis=1)
    return {"start_logits": np.zeros((n, features["input_ids"].shape[1]), np.float32),
            "start_top_index": start_index, "start_top_log_probs": np.tile([-0.1, -3.0], (n, 1)),
            "end_top_index": end_index, "end_top_log_probs": np.tile([[-0.1, -4.0]], (n, 2, 1)),
            "answerable_logit": np.asarray(answerable_logit, np.float32)}


def test_v2_headline_at_the_official_threshold_with_best_beside(tokenizer, tmp_path):
    data = squad_json(v2=True)["data"]
    examples, features, meta = _features(tokenizer, data, seq=32, stride=8, training=True, v2=True)
    # Null odds: q5 (unanswerable) -2.0 and q1 -2.5 exceed -2.75 ("no answer"); the others -3.0.
    by_question = {"q1": -2.5, "q5": -2.0}
    logits = [by_question.get(examples[m["example_index"]].qas_id, -3.0) for m in meta]
    outputs = _oracle_beam(features, logits)
    task = SquadTask(v2=True)
    assert task.main_metric_key() == "exact" and task.null_score_threshold == -2.75
    eval_set = EvalSet("dev", examples, features, extra={"data": data, "meta": meta, "tokenizer": tokenizer})
    result = task.score(eval_set, outputs, str(tmp_path))
    assert result["exact"] == pytest.approx(80.0) and result["f1"] == pytest.approx(80.0)  # q1 wrongly ""
    assert result["best_exact"] == pytest.approx(100.0) and result["best_f1"] == pytest.approx(100.0)
    assert result["best_f1_thresh"] == pytest.approx(-2.5)
    assert result["HasAns_exact"] == pytest.approx(75.0) and result["NoAns_exact"] == pytest.approx(100.0)
    written = json.loads((tmp_path / "predictions.json").read_text())
    assert written["q1"] == "" and written["q5"] == "" and written["q4"] == "Gustave Eiffel"
    assert squad_v2_evaluate(data, written)["exact"] == pytest.approx(result["exact"])  # the file scores the headline
    null_odds = json.loads((tmp_path / "null_odds.json").read_text())
    assert null_odds == pytest.approx({q: by_question.get(q, -3.0) for q in ("q1", "q2", "q3", "q4", "q5")})
    relaxed = SquadTask(v2=True, null_score_threshold=-2.4).score(eval_set, outputs)
    assert relaxed["exact"] == pytest.approx(100.0)


def test_v1_ignores_the_answerability_logit(tokenizer):
    data = squad_json()["data"]
    examples, features, meta = _features(tokenizer, data, seq=32, stride=8, training=True)
    outputs = _oracle_beam(features, np.full(len(meta), 5.0))
    task = SquadTask(v2=False)
    assert task.main_metric_key() == "exact_match"
    eval_set = EvalSet("dev", examples, features, extra={"data": data, "meta": meta, "tokenizer": tokenizer})
    assert task.score(eval_set, outputs) == {"exact_match": 100.0, "f1": 100.0}


@pytest.mark.parametrize("joint", [True, False])
def test_v2_null_odds_without_the_answerability_classifier(tokenizer, joint):
    """Official fallback: min over windows of the position-0 score, minus the best span's score."""
    examples, meta = _paris_question(tokenizer)
    p = _position(tokenizer, meta[0], "paris")
    start_logits = np.full((1, 64), -5.0, np.float32)
    start_logits[0, 0], start_logits[0, p] = 1.0, 2.0
    if joint:  # no end logits at inference: position 0 scores its start logit alone
        outputs = {"start_logits": start_logits, "start_top_index": np.array([[p]]),
                   "start_top_log_probs": np.array([[-0.5]]), "end_top_index": np.array([[[p]]]),
                   "end_top_log_probs": np.array([[[-0.2]]])}
        expected = 1.0 - (-0.5 - 0.2)
    else:
        end_logits = start_logits.copy()
        end_logits[0, 0] = 0.5
        outputs = {"start_logits": start_logits, "end_logits": end_logits}
        expected = (1.0 + 0.5) - (2.0 + 2.0)
    predictions, _, null_odds = decode_predictions(examples, meta, outputs, tokenizer, v2=True)
    assert predictions == {"q3": "Paris"} and null_odds["q3"] == pytest.approx(expected)
