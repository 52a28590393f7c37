"""The fine-tuning task interface: everything a run (`runner`, `train`, ...) needs from a task.

Like the official `finetune/task.Task`, a task builds its own head and owns
its defaults, so the run never asks which kind of task it runs:

* `build_head(config)`: the head on top of the encoder;
* `train_features` / `eval_sets` / `predict_sets`: NumPy features (and, for
  scoring, the examples behind them) from a tokenizer;
* `score` / `main_metric_key` / `write_predictions`: dev metrics in percent,
  the one that picks the best evaluation, and the prediction files;
* `default_epochs`, `default_max_seq_length`, `min_sequence_length(config)`
  (the shortest a batch may be cut to), `serving_labels()` (what the
  classifier SavedModel returns; only sentence tasks have one),
  `data_summary()` (counts about the inputs, reported in `metrics.json`) and
  `training_settings()` (task options that shape the trained weights).

Implementations: `sentence.SentenceTask` (`glue.GlueTask`,
`text_classification.TextClassificationTask`), `squad.task.SquadTask` and
`tagging.TaggingTask`;
`registry.get_task` finds them by name.

Example:

>>> sorted(Task.__abstractmethods__)
['build_head', 'eval_sets', 'predict_sets', 'score', 'train_features', 'write_predictions']
>>> InputExample("0", "a film", label="1")
InputExample(guid='0', text_a='a film', text_b=None, label='1', source='')
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Optional

import numpy as np


@dataclasses.dataclass
class InputExample:
    """One sentence or sentence pair; `label` is a label string, a float (regression) or None."""

    guid: str
    text_a: str
    text_b: Optional[str] = None
    label: Optional[object] = None
    source: str = dataclasses.field(default="", compare=False)  # "file:line" it was read from, for errors


@dataclasses.dataclass
class EvalSet:
    """A split to score or predict: its features, examples and whatever the task needs besides."""

    name: str
    examples: list
    features: dict
    extra: dict = dataclasses.field(default_factory=dict)


class Task(abc.ABC):
    """A fine-tuning task: its data as features, its head, its scores and predictions."""

    default_epochs: Optional[float] = None  # None: the config's `finetune_epochs`
    default_max_seq_length: int = 128
    metric_names: tuple = ()
    main_metric: str = ""

    def __init__(self, name: str):
        self.name = name

    @abc.abstractmethod
    def build_head(self, config):
        """The head (a Keras layer with `per_example_loss`) for `config`, an `ElectraConfig`."""

    @abc.abstractmethod
    def train_features(self, tokenizer, max_seq_length: int) -> dict[str, np.ndarray]:
        """Inputs and targets of every training example, int32/float32 arrays."""

    @abc.abstractmethod
    def eval_sets(self, tokenizer, max_seq_length: int) -> list[EvalSet]:
        """The dev split(s) to score."""

    @abc.abstractmethod
    def predict_sets(self, tokenizer, max_seq_length: int) -> list[EvalSet]:
        """The split(s) to write predictions for."""

    @abc.abstractmethod
    def score(self, eval_set: EvalSet, outputs: dict, output_dir: Optional[str] = None) -> dict[str, float]:
        """Metrics (in percent) of the head's `outputs` on `eval_set`."""

    @abc.abstractmethod
    def write_predictions(self, eval_set: EvalSet, outputs: dict, output_dir: str) -> str:
        """Writes the prediction file of `eval_set` to `output_dir`; returns its path."""

    def main_metric_key(self) -> str:
        """The key of `score`'s result that picks the best dev evaluation."""
        return self.main_metric

    def min_sequence_length(self, config) -> int:
        """The shortest length dynamic padding may cut a batch to."""
        return 1

    def data_summary(self) -> dict:
        """Counts about the task's inputs (e.g. sentences split into windows), for `metrics.json`."""
        return {}

    def training_settings(self) -> dict:
        """Task options that shape the trained weights: a resumed run must not change them."""
        return {}

    def serving_labels(self) -> Optional[list[str]]:
        """Label names of the text-in SavedModel of `electra_tf.serving.classifier` (None: regression)."""
        raise ValueError(f"--export_saved_model supports sentence classification and regression, SQuAD and "
                         f"tagging, not {self.name}")
