"""The serving export of a fine-tuned model: a SavedModel that takes raw text.

`export_serving` writes `electra_tf.serving`'s SavedModel (tokenisation in the
graph; label probabilities and the label name out) for a sentence or
sentence-pair classification or regression task, and `electra_tf.squad_serving`'s
(question + context in, answer out) for SQuAD 1.1 / 2.0; other span tasks are
refused by `Task.serving_labels`. Whether a classifier reads one text or two
follows the features it was trained (or evaluated) on.

Example:

>>> import numpy as np
>>> takes_text_pairs({"train": {"segment_ids": np.array([[0, 0, 1, 1]])}})
True
>>> takes_text_pairs({})
False
"""

from __future__ import annotations

import numpy as np
from absl import logging

from electra_tf.finetuning.task import Task
from electra_tf.options import RunOptions


def takes_text_pairs(data_cache: dict) -> bool:
    """Whether the run's features (train, else the first dev set) hold a second segment."""
    features = data_cache.get("train") or next(iter(s.features for s in data_cache.get("eval", [])), None)
    return features is not None and bool(np.any(features["segment_ids"]))


def export_serving(model, task: Task, tokenizer, options: RunOptions, data_cache: dict) -> str:
    """Writes the SavedModel of `electra_tf.serving` for a sentence (pair) classification task, or of
    `electra_tf.squad_serving` for SQuAD."""
    from electra_tf import serving
    from electra_tf.finetuning.squad.task import SquadTask

    if isinstance(task, SquadTask):
        return export_squad(model, task, tokenizer, options)

    labels = task.serving_labels()
    two_texts = takes_text_pairs(data_cache)
    path = serving.export_classifier(model, tokenizer, labels, options.max_seq_length, options.export_saved_model,
                                     two_texts)
    logging.info("Exported a serving SavedModel (%s) to %s", "text, text_b" if two_texts else "text", path)
    return path


def export_squad(model, task, tokenizer, options: RunOptions) -> str:
    """Writes the question + context → answer SavedModel with the run's windowing and decoding settings."""
    from electra_tf import squad_serving

    settings = squad_serving.SquadServingSettings(
        max_seq_length=options.max_seq_length, doc_stride=task.doc_stride, max_query_length=task.max_query_length,
        max_answer_length=task.max_answer_length, n_best_size=task.n_best_size, v2=task.v2,
        null_score_threshold=task.null_score_threshold, do_lower_case=task.do_lower_case)
    path = squad_serving.export_squad(model, tokenizer, settings, options.export_saved_model)
    logging.info("Exported a SQuAD serving SavedModel (question, context) to %s", path)
    return path
