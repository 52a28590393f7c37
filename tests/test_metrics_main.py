"""Which metric each task reports as its main one: the official README's results table.

"Metrics | MCC | Acc | Acc | Spearman | Acc | Acc | Acc | Acc | EM | EM" for CoLA, SST, MRPC, STS, QQP,
MNLI, QNLI, RTE, SQuAD 1.1, SQuAD 2.0 (google-research/electra README, "Expected Results"); these
are also the official scorers (`MCCScorer`, `RegressionScorer`, `AccuracyScorer` for the rest, SQuAD's
official scripts, 2.0 at `qa_na_threshold` −2.75). WNLI is not in the official code: accuracy, as on GLUE.
"""

import numpy as np
import pytest

from electra_tf.finetuning import metrics
from electra_tf.finetuning.tasks import EvalSet, get_task

OFFICIAL_MAIN = {
    "CoLA": "mcc", "SST-2": "accuracy", "MRPC": "accuracy", "STS-B": "spearman", "QQP": "accuracy",
    "MNLI": "matched_accuracy", "QNLI": "accuracy", "RTE": "accuracy", "WNLI": "accuracy",
    "squad": "exact_match", "squad_v2": "exact",
}
ALSO_REPORTED = {"MRPC": {"f1"}, "QQP": {"f1"}, "STS-B": {"pearson"}, "squad": {"f1"},
                 "squad_v2": {"f1", "best_exact", "best_f1"}}


@pytest.mark.parametrize("name", sorted(OFFICIAL_MAIN))
def test_main_metric_is_the_official_one(name):
    task = get_task(name)
    assert task.main_metric_key() == OFFICIAL_MAIN[name]
    reported = set(task.metric_names)
    assert task.main_metric in reported and ALSO_REPORTED.get(name, set()) <= reported


@pytest.mark.parametrize("name", ["CoLA", "MRPC", "STS-B", "QQP", "MNLI"])
def test_scores_hold_the_main_metric_with_the_official_values(name):
    """Scores in percent from the task's own `score`, checked against the metric functions."""
    task = get_task(name)
    rng = np.random.RandomState(0)
    labels = rng.randint(0, 2, size=40)
    if task.kind == "regression":
        targets = rng.uniform(size=40).astype("float32")
        predictions = targets + rng.normal(scale=0.3, size=40)
        features, outputs = {"targets": targets}, {"predictions": predictions}
    else:
        logits = rng.normal(size=(40, task.num_labels)) + 1.5 * np.eye(task.num_labels)[labels]
        features, outputs = {"label_ids": labels}, {"logits": logits}
    split = task.dev_splits()[0]
    result = task.score(EvalSet(split, [], features), outputs)
    main = result[task.main_metric_key()]
    if name == "CoLA":
        assert main == pytest.approx(100 * metrics.matthews_corrcoef(labels, logits.argmax(-1)))
    elif name == "STS-B":
        assert main == pytest.approx(100 * metrics.spearman(targets, predictions))
    else:
        assert main == pytest.approx(100 * np.mean(labels == logits.argmax(-1)))
        if name in ("MRPC", "QQP"):
            assert result["f1"] == pytest.approx(100 * metrics.f1_score(labels, logits.argmax(-1)))
