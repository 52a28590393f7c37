"""Sentence(-pair) classification and regression: the shared half of GLUE and tsv/csv tasks.

`SentenceTask` turns examples into `[CLS] a [SEP] b [SEP]` features (labels
as `label_ids`, regression targets normalised as `targets`), builds the
`ClassificationHead` (one output for regression), scores outputs with the
task's GLUE metrics and writes GLUE submission files. Subclasses say where
the examples come from (`get_examples`, `test_splits`).

Example:

>>> from electra_tf.config import get_config
>>> class Toy(SentenceTask):
...     labels = ("neg", "neu", "pos")
...     def get_examples(self, split):
...         return [InputExample("0", "fine", label="pos")]
...     def test_splits(self):
...         return []
>>> task = Toy("toy")
>>> task.build_head(get_config("tiny")).num_labels, task.label_to_feature("pos"), task.serving_labels()
(3, 2, ['neg', 'neu', 'pos'])
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from electra_tf.finetuning import metrics as metrics_lib
from electra_tf.finetuning.encoding import encode_pairs
from electra_tf.finetuning.heads import ClassificationHead
from electra_tf.finetuning.task import EvalSet, InputExample, Task

METRIC_FNS = {"accuracy": metrics_lib.accuracy, "f1": metrics_lib.f1_score, "mcc": metrics_lib.matthews_corrcoef,
              "pearson": metrics_lib.pearson, "spearman": metrics_lib.spearman}


class SentenceTask(Task):
    """Base class of the GLUE and generic sentence(-pair) tasks."""

    kind = "classification"  # or "regression"
    labels: Optional[tuple] = None
    label_range: tuple = (0.0, 5.0)  # regression only
    metric_names: tuple = ("accuracy",)
    main_metric = "accuracy"
    unordered_pair = False

    def __init__(self, name: str, double_unordered: bool = True):
        super().__init__(name)
        self.double_unordered = double_unordered

    # ---- where the examples come from ---------------------------------------
    def get_examples(self, split: str) -> list[InputExample]:
        raise NotImplementedError

    def dev_splits(self) -> tuple:
        return ("dev",)

    def test_splits(self) -> list[tuple[str, str]]:
        """(split, submission file name) pairs."""
        raise NotImplementedError

    # ---- the Task interface -------------------------------------------------
    @property
    def is_regression(self) -> bool:
        return self.kind == "regression"

    @property
    def num_labels(self) -> int:
        return 1 if self.is_regression else len(self.labels)

    def build_head(self, config) -> ClassificationHead:
        """The [CLS] head; dropout `config.dropout_rate` (0.1, as in the official code)."""
        return ClassificationHead(self.num_labels, dropout_rate=config.dropout_rate, name="classification_head")

    def serving_labels(self) -> Optional[list[str]]:
        return None if self.is_regression else [str(label) for label in self.labels]

    def label_to_feature(self, label):
        if self.is_regression:
            low, high = self.label_range
            return (float(label) - low) / high  # the official normalisation
        return self.labels.index(label)

    def train_features(self, tokenizer, max_seq_length: int) -> dict[str, np.ndarray]:
        examples = self.get_examples("train")
        if self.unordered_pair and self.double_unordered:
            examples = examples + [InputExample(e.guid + "-swapped", e.text_b, e.text_a, e.label) for e in examples]
        return self.features(tokenizer, examples, max_seq_length, with_labels=True)

    def features(self, tokenizer, examples, max_seq_length, with_labels=False) -> dict[str, np.ndarray]:
        texts_b = [e.text_b for e in examples] if any(e.text_b is not None for e in examples) else None
        features = encode_pairs(tokenizer, [e.text_a for e in examples], texts_b, max_seq_length)
        if with_labels:
            key, dtype = ("targets", np.float32) if self.is_regression else ("label_ids", np.int32)
            features[key] = np.asarray([self._label_feature(e) for e in examples], dtype)
        return features

    def _label_feature(self, example: InputExample):
        if not self.is_regression and example.label not in self.labels:
            where = example.source or f"{self.name} example {example.guid}"
            raise ValueError(f"{where}: label {example.label!r} is not one of {list(self.labels)}")
        return self.label_to_feature(example.label)

    def eval_sets(self, tokenizer, max_seq_length) -> list[EvalSet]:
        sets = []
        for split in self.dev_splits():
            examples = self.get_examples(split)
            sets.append(EvalSet(split, examples, self.features(tokenizer, examples, max_seq_length, True)))
        return sets

    def predict_sets(self, tokenizer, max_seq_length) -> list[EvalSet]:
        sets = []
        for split, filename in self.test_splits():
            examples = self.get_examples(split)
            sets.append(EvalSet(split, examples, self.features(tokenizer, examples, max_seq_length),
                                extra={"filename": filename}))
        return sets

    def decode(self, outputs: dict) -> np.ndarray:
        if self.is_regression:
            return np.asarray(outputs["predictions"], np.float64)
        return np.argmax(np.asarray(outputs["logits"]), axis=-1)

    def score(self, eval_set: EvalSet, outputs: dict, output_dir: Optional[str] = None) -> dict[str, float]:
        """The task's metrics on one dev split (names prefixed for MNLI's two dev sets)."""
        predictions = self.decode(outputs)
        feats = eval_set.features
        labels = feats["targets"] if self.is_regression else feats["label_ids"]
        prefix = self.metric_prefix(eval_set.name)
        return {prefix + name: 100.0 * METRIC_FNS[name](labels, predictions) for name in self.metric_names}

    def metric_prefix(self, split: str) -> str:
        return "" if len(self.dev_splits()) == 1 else split.replace("dev_", "") + "_"

    def main_metric_key(self) -> str:
        return self.metric_prefix(self.dev_splits()[0]) + self.main_metric

    def write_predictions(self, eval_set: EvalSet, outputs: dict, output_dir: str) -> str:
        """Writes a GLUE submission file (`index\\tprediction`); returns its path."""
        predictions = self.decode(outputs)
        path = os.path.join(output_dir, eval_set.extra["filename"])
        with open(path, "w", encoding="utf-8") as f:
            f.write("index\tprediction\n")
            for example, prediction in zip(eval_set.examples, predictions):
                f.write(f"{example.guid}\t{self.format_prediction(prediction)}\n")
        return path

    def format_prediction(self, prediction) -> str:
        if self.is_regression:
            low, high = self.label_range
            return f"{min(max(float(prediction) * high + low, low), high):.3f}"
        return str(self.labels[int(prediction)])
