"""SQuAD: examples, sliding-window features, n-best decoding and prediction files on tiny synthetic data."""

import json

import numpy as np
import pytest

from electra_tf.finetuning.squad.decoding import decode_predictions, get_final_text
from electra_tf.finetuning.squad.examples import load_squad, read_examples
from electra_tf.finetuning.squad.features import convert_examples_to_features
from electra_tf.finetuning.squad.task import SquadTask
from electra_tf.finetuning.task import EvalSet
from electra_tf.text.tokenization import WordPieceTokenizer

WORDS = ("the cat sat on mat who where did what is capital of france paris steve smith s born in year "
         "1895 1943 tower was built by gustave eiffel and").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "'", "(", ")", "-", "##s"] + WORDS

CONTEXT_1 = "Steve Smith's cat sat on the mat. The leader was Steve Smith (1895-1943)."
CONTEXT_2 = "Paris is the capital of France. The tower was built by Gustave Eiffel."


def squad_json(v2=False):
    qas1 = [
        {"id": "q1", "question": "Who sat on the mat?",
         "answers": [{"text": "Steve Smith", "answer_start": 0}]},
        {"id": "q2", "question": "What year was Steve Smith born?",
         "answers": [{"text": "1895", "answer_start": CONTEXT_1.index("1895")}]},
    ]
    qas2 = [
        {"id": "q3", "question": "What is the capital of France?",
         "answers": [{"text": "Paris", "answer_start": 0}]},
        {"id": "q4", "question": "Who built the tower?",
         "answers": [{"text": "Gustave Eiffel", "answer_start": CONTEXT_2.index("Gustave")}]},
    ]
    if v2:
        for qa in qas1 + qas2:
            qa["is_impossible"] = False
        qas2.append({"id": "q5", "question": "Where was the cat born?", "answers": [], "is_impossible": True})
    return {"version": "2.0" if v2 else "1.1", "data": [
        {"title": "A", "paragraphs": [{"context": CONTEXT_1, "qas": qas1}]},
        {"title": "B", "paragraphs": [{"context": CONTEXT_2, "qas": qas2}]}]}


@pytest.fixture
def tokenizer(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return WordPieceTokenizer(str(path))


def test_read_examples_maps_characters_to_words():
    examples, failures = read_examples(squad_json()["data"], is_training=True, v2=False)
    assert failures == 0 and len(examples) == 4
    q2 = examples[1]
    assert q2.doc_tokens[q2.start_position] == "(1895-1943)."  # whitespace word holding the answer
    assert examples[0].doc_tokens is examples[1].doc_tokens  # shared per paragraph
    broken = squad_json()
    broken["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 20
    examples, failures = read_examples(broken["data"], is_training=True, v2=False)
    assert failures == 1 and len(examples) == 3


def _tokens(tokenizer, ids):
    return tokenizer.convert_ids_to_tokens(ids)


def test_features_windows_and_improved_span(tokenizer):
    examples, _ = read_examples(squad_json()["data"], is_training=True, v2=False)
    features, meta = convert_examples_to_features(examples, tokenizer, max_seq_length=24, doc_stride=6,
                                                  max_query_length=8, is_training=True)
    assert features["input_ids"].shape[1] == 24 and len(meta) == len(features["input_ids"])
    by_example = {}
    for i, m in enumerate(meta):
        by_example.setdefault(m["example_index"], []).append(i)
    assert len(by_example[1]) > 1  # the long paragraph is split into windows
    for i, m in enumerate(meta):
        tokens = _tokens(tokenizer, m["tokens"])
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        start, end = features["start_positions"][i], features["end_positions"][i]
        if start:
            answer = " ".join(tokens[start:end + 1])
            # _improve_answer_span trims "( 1895 - 1943 ) ." down to "1895".
            assert answer == {0: "steve smith", 1: "1895", 2: "paris", 3: "gustave eiffel"}[m["example_index"]]
        segments = features["segment_ids"][i]
        assert segments[len(tokens) - 1] == 1 and segments[1] == 0
    # Every document token is the "max context" token of exactly one window.
    for example_index, feature_ids in by_example.items():
        owners = []
        for i in feature_ids:
            m = meta[i]
            owners += [m["span_start"] + pos - m["doc_offset"] for pos in np.nonzero(m["max_context"])[0]]
        assert sorted(owners) == list(range(max(owners) + 1))


def _oracle_outputs(examples, meta, features, with_answer=True):
    """Logits peaking at the gold span of each window (or at [CLS])."""
    n, seq = features["input_ids"].shape
    start = np.full((n, seq), -10.0, np.float32)
    end = np.full((n, seq), -10.0, np.float32)
    for i in range(n):
        start[i, features["start_positions"][i]] = 5.0
        end[i, features["end_positions"][i]] = 5.0
        start[i, 0] = end[i, 0] = 0.0
    return {"start_logits": start, "end_logits": end, "answerable_logit": np.where(
        features["is_impossible"] == 1, 3.0, -3.0).astype(np.float32)}


def test_oracle_decoding_scores_100(tokenizer):
    data = squad_json()["data"]
    examples, _ = read_examples(data, is_training=True, v2=False)
    features, meta = convert_examples_to_features(examples, tokenizer, 24, 6, 8, is_training=True)
    outputs = _oracle_outputs(examples, meta, features)
    predictions, nbest, null_odds = decode_predictions(examples, meta, outputs, tokenizer, v2=False)
    # Original casing/punctuation is restored from the context.
    assert predictions == {"q1": "Steve Smith", "q2": "1895", "q3": "Paris", "q4": "Gustave Eiffel"}
    assert null_odds == {}
    assert nbest["q1"][0]["text"] == "Steve Smith" and nbest["q1"][0]["probability"] > 0.5
    assert all(len(v) <= 20 for v in nbest.values())
    from electra_tf.finetuning.metrics import squad_v1_evaluate
    assert squad_v1_evaluate(data, predictions) == {"exact_match": 100.0, "f1": 100.0}


def test_v2_null_odds_and_prediction_files(tokenizer, tmp_path):
    data = squad_json(v2=True)["data"]
    examples, _ = read_examples(data, is_training=True, v2=True)
    assert examples[-1].is_impossible
    features, meta = convert_examples_to_features(examples, tokenizer, 32, 8, 8, is_training=True)
    outputs = _oracle_outputs(examples, meta, features)
    task = SquadTask(v2=True)
    eval_set = EvalSet("dev", examples, features, extra={"data": data, "meta": meta, "tokenizer": tokenizer})
    result = task.score(eval_set, outputs, str(tmp_path))
    # Headline numbers at the official -2.75 threshold: null odds 3.0 (q5) and -3.0 (the others) split right.
    assert result["exact"] == pytest.approx(100.0) and result["f1"] == pytest.approx(100.0)
    assert result["best_f1"] == pytest.approx(100.0) and result["best_exact"] == pytest.approx(100.0)
    null_odds = json.loads((tmp_path / "null_odds.json").read_text())
    assert null_odds["q5"] == pytest.approx(3.0) and null_odds["q1"] == pytest.approx(-3.0)
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    assert predictions["q5"] == "" and predictions["q4"] == "Gustave Eiffel"
    nbest = json.loads((tmp_path / "nbest_predictions.json").read_text())
    assert set(nbest) == {"q1", "q2", "q3", "q4", "q5"}
    assert set(nbest["q1"][0]) == {"text", "probability", "start_logit", "end_logit"}


def test_get_final_text():
    assert get_final_text("steve smith", "Steve Smith's") == "Steve Smith"
    assert get_final_text("1895", "(1895-1943).") == "1895"
    assert get_final_text("nothing", "Paris") == "Paris"  # fallback: the original words


@pytest.mark.data
def test_real_squad_dev_question_count(shared_data):
    data = load_squad(str(shared_data / "squad" / "dev-v1.1.json"))
    examples, failures = read_examples(data, is_training=False, v2=False)
    assert len(data) == 48 and len(examples) == 10570 and failures == 0
    assert len(load_squad(str(shared_data / "squad" / "dev-v1.1.json"), "40:48")) == 8
