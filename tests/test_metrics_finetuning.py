"""Fine-tuning metrics against SciPy and hand-computed values (no scikit-learn)."""

import numpy as np
import pytest
from scipy import stats

from electra_tf.finetuning import metrics


def test_accuracy_f1_by_hand():
    assert metrics.accuracy([0, 1, 1, 0], [0, 1, 0, 0]) == 0.75
    # tp=2 fp=1 fn=1 -> 2*2 / (2*2 + 1 + 1)
    assert metrics.f1_score([1, 1, 0, 0, 1], [1, 0, 0, 1, 1]) == pytest.approx(4 / 6)
    assert metrics.f1_score([0, 0], [0, 0]) == 0.0


def test_matthews_by_hand():
    # tp=1 tn=2 fp=0 fn=1: (1*2 - 0*1) / sqrt(1 * 2 * 2 * 3)
    assert metrics.matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(2 / np.sqrt(12))
    assert metrics.matthews_corrcoef([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert metrics.matthews_corrcoef([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
    assert metrics.matthews_corrcoef([1, 0, 1], [1, 1, 1]) == 0.0  # undefined -> 0
    # tp=3 tn=4 fp=2 fn=1: (12 - 2) / sqrt(5 * 4 * 6 * 5)
    labels = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    preds = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]
    assert metrics.matthews_corrcoef(labels, preds) == pytest.approx(10 / np.sqrt(600))


def test_correlations_match_scipy():
    rng = np.random.RandomState(0)
    x = rng.normal(size=50)
    y = 0.5 * x + rng.normal(size=50)
    assert metrics.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    xt, yt = np.round(x), np.round(y * 2) / 2  # many ties
    assert metrics.spearman(xt, yt) == pytest.approx(stats.spearmanr(xt, yt)[0], abs=1e-12)
    assert list(metrics.average_ranks([10, 20, 10, 30])) == [1.5, 3.0, 1.5, 4.0]
    assert metrics.pearson([1, 1, 1], [1, 2, 3]) == 0.0


def _dataset(qas):
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def test_squad_normalisation_and_pair_scores():
    assert metrics.normalize_answer("  The  Eiffel-Tower, a tower! ") == "eiffeltower tower"
    assert metrics.squad_exact_match("the Eiffel Tower", "Eiffel tower.") == 1.0
    # pred [1889, year], gold [in, 1889]: P = R = 1/2
    assert metrics.squad_f1("1889 year", "in 1889") == pytest.approx(0.5)
    assert metrics.squad_f1("", "") == 1.0 and metrics.squad_f1("x", "") == 0.0


def test_squad_v1_evaluate_by_hand():
    data = _dataset([
        {"id": "q1", "answers": [{"text": "the Eiffel Tower"}, {"text": "Eiffel Tower"}]},
        {"id": "q2", "answers": [{"text": "in 1889"}]},
        {"id": "q3", "answers": [{"text": "Gustave Eiffel"}]},
    ])
    preds = {"q1": "Eiffel tower!", "q2": "1889 year", "q3": "Paris"}
    result = metrics.squad_v1_evaluate(data, preds)
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert result["f1"] == pytest.approx(50.0)  # (1 + 0.5 + 0) / 3


def test_squad_v2_evaluate_and_threshold_search_by_hand():
    data = _dataset([
        {"id": "a", "answers": [{"text": "Gustave Eiffel"}], "is_impossible": False},
        {"id": "b", "answers": [{"text": "in 1889"}], "is_impossible": False},
        {"id": "c", "answers": [], "is_impossible": True},
        {"id": "d", "answers": [], "is_impossible": True},
    ])
    preds = {"a": "Gustave Eiffel", "b": "1889 year", "c": "Paris", "d": ""}
    plain = metrics.squad_v2_evaluate(data, preds)
    assert plain["exact"] == pytest.approx(50.0) and plain["f1"] == pytest.approx(62.5)
    assert plain["HasAns_f1"] == pytest.approx(75.0) and plain["NoAns_exact"] == pytest.approx(50.0)
    assert "best_f1" not in plain
    na = {"a": 0.1, "b": 0.6, "c": 0.9, "d": 0.3}
    result = metrics.squad_v2_evaluate(data, preds, na)
    # Visiting a(+1) d(0) b(+0.5) c(-1) from 2 no-answers: best 3.5 of 4 at 0.6.
    assert result["best_f1"] == pytest.approx(87.5) and result["best_f1_thresh"] == pytest.approx(0.6)
    assert result["best_exact"] == pytest.approx(75.0) and result["best_exact_thresh"] == pytest.approx(0.1)
    thresholded = metrics.squad_v2_evaluate(data, preds, na, na_prob_thresh=0.5)
    assert thresholded["exact"] == pytest.approx(75.0) and thresholded["f1"] == pytest.approx(75.0)
