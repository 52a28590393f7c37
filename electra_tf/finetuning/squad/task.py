"""SquadTask: SQuAD 1.1 / 2.0 for `run_finetuning` (files, span head, official scoring, prediction files).

Example:

>>> from electra_tf.finetuning.squad.task import SquadTask
>>> task = SquadTask(v2=True)
>>> task.name, task.main_metric_key(), task.default_epochs, task.default_max_seq_length
('squad_v2', 'exact', 2, 512)
"""

from __future__ import annotations

import json
import os

from absl import logging

from electra_tf.finetuning import metrics as metrics_lib
from electra_tf.finetuning.heads import SpanHead
from electra_tf.finetuning.squad.decoding import decode_predictions
from electra_tf.finetuning.squad.examples import load_squad, read_examples
from electra_tf.finetuning.squad.features import convert_examples_to_features
from electra_tf.finetuning.task import EvalSet, Task
from electra_tf.options import SquadOptions

# The official `qa_na_threshold`: 2.0 predicts "no answer" where the null odds exceed it.
OFFICIAL_NULL_THRESHOLD = -2.75
# The span head ranks start/end positions (top-k, beam search): batches are never cut below this.
SPAN_MIN_LENGTH = 64


def apply_null_threshold(predictions: dict, null_odds: dict, threshold: float) -> dict:
    """2.0: predict "" where the null odds exceed `threshold`."""
    return {qid: ("" if null_odds[qid] > threshold else text) for qid, text in predictions.items()}


def write_json(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
    return path


class SquadTask(Task):
    """SQuAD 1.1 (`v2=False`) or 2.0 for `run_finetuning`: 2 epochs of 512-token windows by default.

    Files: `{data_dir}/train-v1.1.json`, `dev-v1.1.json` (or `-v2.0`),
    replaced by --train_file/--dev_file/--test_file. `train_articles` /
    `dev_articles` ("start:end") keep a slice of the articles.

    Metrics as the official code and README report them: 1.1 `exact_match`
    (main, the README's "EM") and `f1` of the v1.1 script; 2.0 the v2.0
    script's `exact` (main) and `f1` with "no answer" predicted where the null
    odds exceed `null_score_threshold` (default −2.75, the official
    `qa_na_threshold`), plus `best_exact` / `best_f1` and their thresholds
    from the script's threshold search. `predictions.json` applies the same
    threshold, so it scores the headline numbers.
    """

    default_epochs = 2
    default_max_seq_length = 512

    def __init__(self, v2=False, data_dir=None, file_overrides=None, max_query_length=SquadOptions.max_query_length,
                 doc_stride=SquadOptions.doc_stride, n_best_size=SquadOptions.n_best_size,
                 max_answer_length=SquadOptions.max_answer_length, train_articles=None, dev_articles=None,
                 null_score_threshold=None, do_lower_case=True):
        super().__init__("squad_v2" if v2 else "squad")
        self.v2 = v2
        self.data_dir = data_dir
        self.file_overrides = {k: v for k, v in (file_overrides or {}).items() if v}
        self.max_query_length, self.doc_stride = max_query_length, doc_stride
        self.n_best_size, self.max_answer_length = n_best_size, max_answer_length
        self.articles = {"train": train_articles, "dev": dev_articles}
        self.null_score_threshold = (OFFICIAL_NULL_THRESHOLD if null_score_threshold is None
                                     else float(null_score_threshold))
        self.do_lower_case = do_lower_case
        self.metric_names = ("exact", "f1", "best_exact", "best_f1") if v2 else ("exact_match", "f1")
        self.main_metric = "exact" if v2 else "exact_match"

    def build_head(self, config) -> SpanHead:
        """The official head: joint start/end prediction with a `squad_beam_size` beam and the
        answerability classifier (config switches `squad_joint_prediction`, `squad_answerable_classifier`)."""
        return SpanHead(answerable=config.squad_answerable_classifier,
                        joint_prediction=config.squad_joint_prediction, beam_size=config.squad_beam_size,
                        hidden_act=config.hidden_act, name="span_head")

    def min_sequence_length(self, config) -> int:
        return max(SPAN_MIN_LENGTH, config.squad_beam_size)

    def split_path(self, split):
        if split in self.file_overrides:
            return self.file_overrides[split]
        if split == "test":
            return None
        if not self.data_dir:
            raise ValueError(f"--data_dir is required for task {self.name} (or pass --{split}_file)")
        return os.path.join(self.data_dir, f"{split}-{'v2.0' if self.v2 else 'v1.1'}.json")

    def data(self, split):
        return load_squad(self.split_path(split), self.articles.get(split))

    def train_features(self, tokenizer, max_seq_length):
        examples, _ = read_examples(self.data("train"), is_training=True, v2=self.v2)
        features, _ = convert_examples_to_features(examples, tokenizer, max_seq_length, self.doc_stride,
                                                   self.max_query_length, is_training=True)
        logging.info("%s: %d training questions → %d features", self.name, len(examples), len(features["input_ids"]))
        return features

    def _eval_set(self, split, tokenizer, max_seq_length):
        data = self.data(split)
        examples, _ = read_examples(data, is_training=False, v2=self.v2)
        features, meta = convert_examples_to_features(examples, tokenizer, max_seq_length, self.doc_stride,
                                                      self.max_query_length, is_training=False)
        return EvalSet(split, examples, features, extra={"data": data, "meta": meta, "tokenizer": tokenizer})

    def eval_sets(self, tokenizer, max_seq_length):
        return [self._eval_set("dev", tokenizer, max_seq_length)]

    def predict_sets(self, tokenizer, max_seq_length):
        split = "test" if self.split_path("test") else "dev"
        eval_set = self._eval_set(split, tokenizer, max_seq_length)
        eval_set.extra["prefix"] = "test_" if split == "test" else ""
        return [eval_set]

    def _decode(self, eval_set, outputs):
        return decode_predictions(eval_set.examples, eval_set.extra["meta"], outputs, eval_set.extra["tokenizer"],
                                  self.n_best_size, self.max_answer_length, self.v2, self.do_lower_case)

    def score(self, eval_set, outputs, output_dir=None):
        """Official EM/F1 on the dev questions; writes the prediction files to `output_dir`."""
        predictions, nbest, null_odds = self._decode(eval_set, outputs)
        data = eval_set.extra["data"]
        if self.v2:
            result = metrics_lib.squad_v2_evaluate(data, predictions, null_odds,
                                                   na_prob_thresh=self.null_score_threshold)
        else:
            result = metrics_lib.squad_v1_evaluate(data, predictions)
        if output_dir:
            self._write(predictions, nbest, null_odds, output_dir, prefix="")
        return {k: float(v) for k, v in result.items()}

    def write_predictions(self, eval_set, outputs, output_dir):
        predictions, nbest, null_odds = self._decode(eval_set, outputs)
        return self._write(predictions, nbest, null_odds, output_dir, eval_set.extra.get("prefix", ""))

    def _write(self, predictions, nbest, null_odds, output_dir, prefix):
        if self.v2:
            write_json(null_odds, os.path.join(output_dir, prefix + "null_odds.json"))
            predictions = apply_null_threshold(predictions, null_odds, self.null_score_threshold)
        write_json(nbest, os.path.join(output_dir, prefix + "nbest_predictions.json"))
        return write_json(dict(predictions), os.path.join(output_dir, prefix + "predictions.json"))
