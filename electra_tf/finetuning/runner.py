"""A fine-tuning run with one seed (`run_single`), and the medians over several (`median_metrics`).

`run_single` builds `FinetuningModel` (an `ElectraEncoder`, fresh or
pre-trained, plus the head `task.build_head(config)` returns) under a
`tf.distribute` strategy, trains it (`train`), scores the dev set(s) after every
epoch and at the end (`evaluate`), then exports and predicts with the selected
weights. Tasks are known only through the `task.Task` interface.

Example:

>>> runs = [{"final": {"accuracy": 70.0}}, {"final": {"accuracy": 74.0, "f1": 80.0}}, {"final": {"accuracy": 71.0}}]
>>> median_metrics(runs)
{'accuracy': 71.0, 'f1': 80.0}
"""

from __future__ import annotations

import dataclasses
import json
import os

import keras
import numpy as np

from electra_tf import distribution
from electra_tf.finetuning.data import padding_for
from electra_tf.finetuning.evaluate import (FINAL_WEIGHTS, BestTracker, EvalContext, evaluate, restore_finetuned,
                                            selected_metrics)
from electra_tf.finetuning.export import export_serving
from electra_tf.finetuning.model import build_model
from electra_tf.finetuning.predict import write_predictions
from electra_tf.finetuning.task import Task
from electra_tf.finetuning.train import ScalarWriter, train
from electra_tf.options import RunOptions


def _cached(cache: dict, key: str, fn):
    if key not in cache:
        cache[key] = fn()
    return cache[key]


def run_single(task: Task, config, encoder_fn, tokenizer, options: RunOptions, strategy, run_dir: str,
               data_cache: dict) -> dict:
    """Trains/evaluates/predicts once with `options.seed`; returns a result dict.

    `data_cache` holds (or receives) the features: "train", "eval", "predict".
    The result's "final" holds the last evaluation's metrics, "best"/"best_step"
    the best one's, and "selected" those of the weights used for predictions
    ("selection": "final", or "best_epoch" with `options.select_best_epoch`).
    """
    os.makedirs(run_dir, exist_ok=True)
    options = dataclasses.replace(options, execution=distribution.resolve_execution(options.execution, strategy))
    keras.utils.set_random_seed(options.seed)
    model = build_model(task, config, encoder_fn, strategy, options.max_seq_length)
    seq = options.max_seq_length
    eval_sets = _cached(data_cache, "eval", lambda: task.eval_sets(tokenizer, seq)) if options.do_eval else []
    context = EvalContext(task, eval_sets, options, strategy, padding_for(task, config, options), run_dir)
    writer = ScalarWriter(run_dir)
    tracker = BestTracker(model, run_dir, task.main_metric_key(), writer, keep_best_weights=options.select_best_epoch)
    result = {"seed": options.seed}
    if options.do_train:
        features = _cached(data_cache, "train", lambda: task.train_features(tokenizer, seq))
        result.update(_train(model, config, features, context, tracker, writer))
    else:
        result["selection"] = restore_finetuned(model, run_dir, options.select_best_epoch) or "final"
        if eval_sets:
            result["final"] = evaluate(model, context)
    if "final" in result:  # after --do_train=false, "final" scores the restored weights
        result["selected"] = selected_metrics(result)
    result.update(_export_and_predict(model, tokenizer, context, data_cache))
    with open(os.path.join(run_dir, "run_metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    return result


def _train(model, config, features, context: EvalContext, tracker: BestTracker, writer) -> dict:
    """Trains, saves the final weights and selects the weights to report; returns the result's entries."""
    options, run_dir = context.options, context.run_dir
    result = train(model, context.task, config, features, options, context.strategy, context, tracker, writer,
                   context.padding)
    model.save_weights(os.path.join(run_dir, FINAL_WEIGHTS))
    result.update(tracker.summary() if context.eval_sets else {})
    result["selection"] = tracker.select(options.select_best_epoch)
    return result


def _export_and_predict(model, tokenizer, context: EvalContext, data_cache: dict) -> dict:
    """The SavedModel and the prediction files the options ask for; returns the result's entries."""
    task, options, result = context.task, context.options, {}
    if options.export_saved_model:
        result["saved_model"] = export_serving(model, task, tokenizer, options, data_cache)
    if options.do_predict:
        predict_sets = _cached(data_cache, "predict", lambda: task.predict_sets(tokenizer, options.max_seq_length))
        result["predictions"] = write_predictions(model, task, predict_sets, options.eval_batch_size,
                                                  context.strategy, context.padding, context.run_dir)
    return result


def median_metrics(runs: list[dict], key: str = "final") -> dict[str, float]:
    """The median of every metric over runs (the official README reports medians)."""
    names = sorted({name for run in runs for name in run.get(key, {})})
    return {name: float(np.median([run[key][name] for run in runs if name in run.get(key, {})]))
            for name in names}
