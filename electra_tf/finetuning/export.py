"""The serving export of a fine-tuned classifier: a SavedModel that takes raw text.

`export_serving` writes `electra_tf.serving`'s SavedModel (tokenisation in the
graph; label probabilities and the label name out) for a sentence or
sentence-pair classification or regression task; span tasks are refused by
`Task.serving_labels`. Whether the model reads one text or two follows the
features it was trained (or evaluated) on.

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
    """Writes the SavedModel of `electra_tf.serving` for a sentence (pair) classification task."""
    from electra_tf import serving

    labels = task.serving_labels()
    two_texts = takes_text_pairs(data_cache)
    path = serving.export_classifier(model, tokenizer, labels, options.max_seq_length, options.export_saved_model,
                                     two_texts)
    logging.info("Exported a serving SavedModel (%s) to %s", "text, text_b" if two_texts else "text", path)
    return path
