"""Model outputs on a set of features, batched by length and cut to each batch's longest example.

`predict` sorts the examples by length (with a dynamic `Padding`), runs one
`tf.function` for every sequence length (its sequence dimension is left
unknown, so a new length never retraces), puts the outputs back in input order
and pads per-token outputs (span logits) back to the full length with
`PADDED_LOGIT`. `write_predictions` writes a task's prediction files.

Example:

>>> import numpy as np
>>> from electra_tf.config import get_config
>>> from electra_tf.finetuning.data import Padding
>>> from electra_tf.finetuning.heads import SpanHead
>>> from electra_tf.finetuning.model import FinetuningModel
>>> from electra_tf.model.encoder import ElectraEncoder
>>> config = get_config("tiny", vocab_size=50, num_layers=1)
>>> model = FinetuningModel(ElectraEncoder.from_config_object(config), SpanHead(answerable=False, joint_prediction=False))
>>> mask = np.zeros((3, 64), "int32"); mask[:, :5] = 1
>>> features = {"input_ids": mask, "input_mask": mask, "segment_ids": np.zeros_like(mask)}
>>> outputs = predict(model, features, batch_size=2, padding=Padding.dynamic(64))
>>> outputs["start_logits"].shape, float(outputs["start_logits"][0, -1]) == PADDED_LOGIT
((3, 64), True)
"""

from __future__ import annotations

import weakref
from typing import Optional

import numpy as np
import tensorflow as tf
from absl import logging

from electra_tf.training import distribution
from electra_tf.finetuning.data import Padding, sequence_lengths
from electra_tf.finetuning.model import INPUT_KEYS
from electra_tf.finetuning.task import Task

# Sequence outputs (start/end logits) cut by dynamic padding are padded back with this value.
PADDED_LOGIT = -10000.0

_PREDICT_FNS = weakref.WeakKeyDictionary()


def _predict_fn(model, strategy, dynamic: bool):
    """A `tf.function` returning each replica's outputs; one trace for all sequence lengths."""
    key = (strategy, dynamic)
    cache = _PREDICT_FNS.setdefault(model, {})
    if key not in cache:
        model_ref = weakref.ref(model)  # the cache entry must not keep the model alive

        def run(batch):
            per_replica = strategy.run(lambda b: model_ref()(b, training=False),
                                       args=(distribution.split_for_replicas(strategy, batch),))
            return strategy.experimental_local_results(per_replica)

        # Dynamic: the sequence dimension is left unknown, so a new length never retraces.
        signature = [{k: tf.TensorSpec([None, None], tf.int32) for k in INPUT_KEYS}] if dynamic else None
        cache[key] = (tf.function(run, input_signature=signature), {})
    return cache[key]


def _run_predict(fn, inputs: dict, rows: int) -> dict[str, np.ndarray]:
    """Outputs of the first `rows` rows of `inputs`, whose row count suits the replicas."""
    per_replica = fn({k: tf.constant(v) for k, v in inputs.items()})
    keys = per_replica[0].keys()
    return {k: np.concatenate([np.asarray(r[k]) for r in per_replica])[:rows] for k in keys}


def _pad_rows(inputs: dict, rows: int) -> dict:
    """Repeats the last row up to `rows` rows (replicas need equal slices)."""
    missing = rows - len(inputs["input_ids"])
    if missing <= 0:
        return inputs
    return {k: np.concatenate([v, np.repeat(v[-1:], missing, axis=0)]) for k, v in inputs.items()}


def _sequence_output_keys(fn, seq_info: dict, inputs: dict, padding: Padding, rows: int) -> set:
    """Outputs whose dimension 1 follows the sequence length (probed once at two lengths)."""
    if "keys" not in seq_info:
        probe = _pad_rows({k: v[:1] for k, v in inputs.items()}, rows)
        short, full = padding.length(1), padding.max_length
        a = _run_predict(fn, {k: v[:, :short] for k, v in probe.items()}, 1)
        b = _run_predict(fn, probe, 1)
        seq_info["keys"] = {k for k in a if a[k].ndim >= 2 and a[k].shape[1] == short and b[k].shape[1] == full}
    return seq_info["keys"]


def _pad_back(values: np.ndarray, length: int) -> np.ndarray:
    if values.shape[1] == length:
        return values
    fill = PADDED_LOGIT if np.issubdtype(values.dtype, np.floating) else 0
    widths = [(0, 0), (0, length - values.shape[1])] + [(0, 0)] * (values.ndim - 2)
    return np.pad(values, widths, constant_values=fill)


def _in_input_order(chunks: list[dict], order: np.ndarray) -> dict[str, np.ndarray]:
    """The batches' outputs concatenated, row `order[i]` of the result being row i of the batches."""
    results = {}
    for key in chunks[0]:
        values = np.concatenate([c[key] for c in chunks])
        results[key] = np.empty_like(values)
        results[key][order] = values
    return results


def predict(model, features: dict, batch_size: int, strategy=None,
            padding: Optional[Padding] = None) -> dict[str, np.ndarray]:
    """Model outputs on `features` (inputs only), as NumPy arrays in input order.

    With a dynamic `padding` the examples are batched in order of length and
    each batch is cut to its longest example; per-token outputs come back at
    the full length, the cut positions holding `PADDED_LOGIT` (they were padding).
    """
    inputs = {k: np.asarray(features[k], np.int32) for k in INPUT_KEYS}
    num, seq = inputs["input_ids"].shape[0], inputs["input_ids"].shape[1]
    if num == 0:
        return {}
    strategy = strategy or tf.distribute.get_strategy()
    padding = padding or Padding.fixed(seq)
    replicas = strategy.num_replicas_in_sync
    batch_size = -(-batch_size // replicas) * replicas  # every replica gets the same number of rows
    lengths = sequence_lengths(inputs["input_mask"])
    order = np.arange(num) if padding.is_fixed else np.argsort(lengths, kind="stable")
    fn, seq_info = _predict_fn(model, strategy, not padding.is_fixed)
    seq_keys = set() if padding.is_fixed else _sequence_output_keys(fn, seq_info, inputs, padding, replicas)
    chunks = []
    for start in range(0, num, batch_size):
        index = order[start:start + batch_size]
        length = padding.length(lengths[index].max())
        batch = _pad_rows({k: v[index, :length] for k, v in inputs.items()}, batch_size)
        outputs = _run_predict(fn, batch, len(index))
        chunks.append({k: _pad_back(v, seq) if k in seq_keys else v for k, v in outputs.items()})
    return _in_input_order(chunks, order)


def write_predictions(model, task: Task, predict_sets, batch_size: int, strategy, padding: Padding,
                      run_dir: str) -> list[str]:
    """Predicts every set of `predict_sets` and writes the task's files for it; returns their paths."""
    paths = []
    for predict_set in predict_sets:
        outputs = predict(model, predict_set.features, batch_size, strategy, padding)
        paths.append(task.write_predictions(predict_set, outputs, run_dir))
        logging.info("Wrote %s", paths[-1])
    return paths
