"""Evaluation metrics for fine-tuning: GLUE-style scores and the official SQuAD scorer.

Everything is plain NumPy/Python (no scikit-learn). Conventions follow
scikit-learn / SciPy, which the official `classification_metrics.py` calls,
so numbers are comparable with published results: Matthews correlation is 0
when undefined, Spearman is the Pearson correlation of average ranks (ties
share a rank). F1 is the usual binary F1 of label 1 (the official
`F1Scorer` counts predicted positives as gold ones, so its "F1" is the
precision; the official code uses it for no GLUE task, and F1 is never a
main metric here). Which metric is a task's main one lives in `tasks.py`
and `squad/task.py`.

The SQuAD part re-implements the official v1.1 / v2.0 evaluation scripts:
answer normalisation (lower-case, drop punctuation, drop the articles
a/an/the, collapse whitespace), exact match, token F1, the max over the
gold answers, and for v2.0 "no answer" where the no-answer score exceeds
`na_prob_thresh` plus the threshold search (`best_f1`, `best_f1_thresh`).

Example:

>>> from electra_tf.finetuning import metrics
>>> metrics.accuracy([0, 1, 1, 0], [0, 1, 0, 0])
0.75
>>> round(metrics.matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0]), 4)
0.5774
>>> metrics.squad_f1("The cat sat", "a cat sat down")
0.8
"""

from __future__ import annotations

import collections
import re
import string
from typing import Mapping, Sequence

import numpy as np


# --------------------------------------------------------------------------
# Classification / regression metrics
# --------------------------------------------------------------------------

def accuracy(labels: Sequence, predictions: Sequence) -> float:
    """Share of predictions equal to the label."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.size == 0:
        return 0.0
    return float(np.mean(labels == predictions))


def f1_score(labels: Sequence, predictions: Sequence, positive=1) -> float:
    """Binary F1 of the `positive` class (0.0 when it never occurs)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = float(np.sum((predictions == positive) & (labels == positive)))
    fp = float(np.sum((predictions == positive) & (labels != positive)))
    fn = float(np.sum((predictions != positive) & (labels == positive)))
    if tp == 0.0:
        return 0.0
    return 2 * tp / (2 * tp + fp + fn)


def matthews_corrcoef(labels: Sequence, predictions: Sequence) -> float:
    """Matthews correlation (multi-class form of Gorodkin 2004; 0.0 when undefined)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes = np.unique(np.concatenate([labels, predictions]))
    index = {c: i for i, c in enumerate(classes.tolist())}
    confusion = np.zeros((len(classes), len(classes)), np.float64)
    for y, p in zip(labels.tolist(), predictions.tolist()):
        confusion[index[y], index[p]] += 1
    t_sum, p_sum = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, total = np.trace(confusion), confusion.sum()
    cov_yp = correct * total - np.dot(t_sum, p_sum)
    cov_yy = total ** 2 - np.dot(t_sum, t_sum)
    cov_pp = total ** 2 - np.dot(p_sum, p_sum)
    if cov_yy == 0 or cov_pp == 0:
        return 0.0
    return float(cov_yp / np.sqrt(cov_yy * cov_pp))


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation coefficient (0.0 when a side is constant)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.dot(x, x) * np.dot(y, y))
    if denominator == 0:
        return 0.0
    return float(np.dot(x, y) / denominator)


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, tied values get the mean of their ranks (SciPy's 'average')."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(len(values), np.float64)
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation: Pearson of the average ranks."""
    return pearson(average_ranks(x), average_ranks(y))


# --------------------------------------------------------------------------
# SQuAD (official evaluation scripts v1.1 and v2.0)
# --------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def squad_exact_match(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    """F1 of the (multiset) token overlap; 0 when nothing overlaps."""
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_f1(prediction: str, ground_truth: str) -> float:
    """Token-overlap F1 after normalisation; two empty answers score 1 (v2.0 rule)."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(ground_truth).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    return _token_f1(pred_tokens, gold_tokens)


def _squad_v1_f1(prediction: str, ground_truth: str) -> float:
    """The v1.1 script's F1: an empty side simply scores 0."""
    return _token_f1(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def gold_answers(dataset: Sequence[Mapping], v2: bool = False) -> dict[str, list[str]]:
    """qid → gold answer texts of a SQuAD `data` list (v2: [''] for unanswerable)."""
    answers = {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                texts = [a["text"] for a in qa.get("answers", [])]
                if v2:
                    texts = [t for t in texts if normalize_answer(t)] or [""]
                answers[qa["id"]] = texts
    return answers


def squad_v1_evaluate(dataset: Sequence[Mapping], predictions: Mapping[str, str]) -> dict:
    """The official v1.1 script: {'exact_match', 'f1'} in percent over all questions.

    A question missing from `predictions` scores 0 (the script prints a message).
    """
    gold = gold_answers(dataset, v2=False)
    em = f1 = 0.0
    for qid, truths in gold.items():
        if qid not in predictions:
            continue
        pred = predictions[qid]
        em += max(squad_exact_match(pred, t) for t in truths)
        f1 += max(_squad_v1_f1(pred, t) for t in truths)
    total = max(len(gold), 1)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def find_best_thresh(predictions: Mapping[str, str], scores: Mapping[str, float],
                     na_probs: Mapping[str, float], qid_to_has_ans: Mapping[str, bool]):
    """The v2.0 script's threshold search: (best score in %, best threshold).

    Questions are visited by increasing no-answer probability; at each one
    the threshold moves past it (predicting an answer for it instead of "").
    """
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = best_score = num_no_ans
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / max(len(scores), 1), best_thresh


def squad_v2_evaluate(dataset: Sequence[Mapping], predictions: Mapping[str, str],
                      na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0) -> dict:
    """The official v2.0 script: exact/f1 (+ HasAns/NoAns splits and best_* thresholds).

    `na_probs` (qid → no-answer score, here ELECTRA's null odds) default to 0;
    the best_* entries (threshold search) are only computed when given.
    """
    gold = gold_answers(dataset, v2=True)
    qid_to_has_ans = {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qid_to_has_ans[qa["id"]] = bool(qa.get("answers"))
    exact_raw, f1_raw = {}, {}
    for qid, truths in gold.items():
        if qid not in predictions:
            continue
        pred = predictions[qid]
        exact_raw[qid] = max(squad_exact_match(pred, t) for t in truths)
        f1_raw[qid] = max(squad_f1(pred, t) for t in truths)
    given_na_probs = na_probs is not None
    na_probs = dict(na_probs) if given_na_probs else {k: 0.0 for k in predictions}

    def apply_threshold(scores):
        return {qid: (float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else s)
                for qid, s in scores.items()}

    exact, f1 = apply_threshold(exact_raw), apply_threshold(f1_raw)

    def mean(values, qids):
        qids = [q for q in qids if q in values]
        return 100.0 * sum(values[q] for q in qids) / len(qids) if qids else 0.0

    result = {"exact": mean(exact, exact), "f1": mean(f1, f1), "total": len(exact)}
    has_ans = [q for q, h in qid_to_has_ans.items() if h]
    no_ans = [q for q, h in qid_to_has_ans.items() if not h]
    if has_ans:
        result.update(HasAns_exact=mean(exact, has_ans), HasAns_f1=mean(f1, has_ans), HasAns_total=len(has_ans))
    if no_ans:
        result.update(NoAns_exact=mean(exact, no_ans), NoAns_f1=mean(f1, no_ans), NoAns_total=len(no_ans))
    if given_na_probs:
        best_exact, exact_thresh = find_best_thresh(predictions, exact_raw, na_probs, qid_to_has_ans)
        best_f1, f1_thresh = find_best_thresh(predictions, f1_raw, na_probs, qid_to_has_ans)
        result.update(best_exact=best_exact, best_exact_thresh=exact_thresh,
                      best_f1=best_f1, best_f1_thresh=f1_thresh)
    return result
