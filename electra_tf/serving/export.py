"""The serving export of a fine-tuned model: a SavedModel that takes raw text.

`export_serving` writes the SavedModel of this package's module for the task:
`classifier` (tokenisation in the graph; label probabilities and the label name out) for a
sentence or sentence-pair classification or regression task, `squad` (question + context in,
answer out) for SQuAD 1.1 / 2.0, `tagging` (text in, tags and entity spans out) for NER,
chunking and other CoNLL tagging; other tasks are refused by `Task.serving_labels`. Whether a
classifier reads one text or two follows the features it was trained (or evaluated) on. Each
holds the serving signature only, traced from a float32 copy of the model with TensorFlow's standard
ops (`electra_tf.serving.portable`), whatever execution options and precision trained it.
`run_finetuning.py` hands `export_serving` to `finetuning.runner.run_seeds` (fine-tuning does not import serving).

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


def _with_dev_features(data_cache: dict, task: Task, tokenizer, max_seq_length: int) -> dict:
    """An export alone (--nodo_train --nodo_eval) has read no features: the dev set's tell one text from two."""
    if data_cache.get("train") or data_cache.get("eval"):
        return data_cache
    try:
        data_cache["eval"] = task.eval_sets(tokenizer, max_seq_length)
    except FileNotFoundError as e:
        raise ValueError(f"--export_saved_model: the dev set tells whether {task.name} reads one text or two; "
                         f"it could not be read ({e}): set --data_dir") from None
    return data_cache


def export_serving(model, task: Task, tokenizer, options: RunOptions, data_cache: dict) -> str:
    """Writes the task's serving SavedModel to `options.export_saved_model`; returns its path."""
    from electra_tf.finetuning.squad.task import SquadTask
    from electra_tf.finetuning.tagging import TaggingTask
    from electra_tf.serving import classifier

    if isinstance(task, SquadTask):
        return export_squad(model, task, tokenizer, options)
    if isinstance(task, TaggingTask):
        return export_tagging(model, task, tokenizer, options)

    labels = task.serving_labels()
    two_texts = takes_text_pairs(_with_dev_features(data_cache, task, tokenizer, options.max_seq_length))
    path = classifier.export_classifier(model, tokenizer, labels, options.max_seq_length, options.export_saved_model,
                                        two_texts)
    logging.info("Exported a serving SavedModel (%s) to %s", "text, text_b" if two_texts else "text", path)
    return path


def export_squad(model, task, tokenizer, options: RunOptions) -> str:
    """Writes the question + context → answer SavedModel with the run's windowing and decoding settings."""
    from electra_tf.serving import squad

    settings = squad.SquadServingSettings(
        max_seq_length=options.max_seq_length, doc_stride=task.doc_stride, max_query_length=task.max_query_length,
        max_answer_length=task.max_answer_length, n_best_size=task.n_best_size, v2=task.v2,
        null_score_threshold=task.null_score_threshold, do_lower_case=task.do_lower_case)
    path = squad.export_squad(model, tokenizer, settings, options.export_saved_model)
    logging.info("Exported a SQuAD serving SavedModel (question, context) to %s", path)
    return path


def export_tagging(model, task, tokenizer, options: RunOptions) -> str:
    """Writes the text → tags and entities SavedModel with the run's labels, scheme, window length and segment id."""
    from electra_tf.serving import tagging

    path = tagging.export_tagging(model, tokenizer, task.labels, task.scheme, options.max_seq_length,
                                  options.export_saved_model, segment_id=task.segment_id)
    logging.info("Exported a tagging serving SavedModel (text → %s) to %s",
                 "tags and entities" if task.chunked else "tags", path)
    return path
