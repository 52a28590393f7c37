"""Fine-tuning runs: one seed (`run_single`) and several seeds with their medians (`run_seeds`).

`run_single` builds `FinetuningModel` (an `ElectraEncoder`, fresh or
pre-trained, plus the head `task.build_head(config)` returns) under a
`tf.distribute` strategy, trains it (`train`), scores the dev set(s) after every
epoch and at the end (`evaluate`), then exports and predicts with the selected
weights. Tasks are known only through the `task.Task` interface. `run_seeds`
repeats it with seeds seed, seed+1, ... and writes `metrics.json` with every
run and the median of each metric (the official README reports medians).
A killed run resumes from its checkpoints and finished seeds are not trained
again (`checkpointing`). The SavedModel is written by the `export` function the caller passes
(`run_finetuning.py`: `electra_tf.serving.export.export_serving`): serving imports fine-tuning, never the reverse.

Example:

>>> runs = [{"final": {"accuracy": 70.0}}, {"final": {"accuracy": 74.0, "f1": 80.0}}, {"final": {"accuracy": 71.0}}]
>>> median_metrics(runs)
{'accuracy': 71.0, 'f1': 80.0}
>>> seed_run_dir("out", seed=3, num_seeds=1), seed_run_dir("out", seed=3, num_seeds=5)
('out', 'out/seed_3')
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Optional

import keras
import numpy as np
from absl import logging

from electra_tf.training import distribution
from electra_tf.finetuning import checkpointing
from electra_tf.text.manifest import write_json_atomic
from electra_tf.finetuning.data import padding_for
from electra_tf.finetuning.evaluate import (BEST_WEIGHTS, FINAL_WEIGHTS, BestTracker, EvalContext, evaluate, restore_finetuned,
                                            selected_metrics)
from electra_tf.finetuning.model import build_model
from electra_tf.finetuning.predict import write_predictions
from electra_tf.finetuning.task import Task
from electra_tf.finetuning.train import ScalarWriter, train
from electra_tf.options import RunOptions

# (model, task, tokenizer, options, data_cache) → the SavedModel's path: `electra_tf.serving.export.export_serving`.
Exporter = Callable[..., str]


def _cached(cache: dict, key: str, fn):
    if key not in cache:
        cache[key] = fn()
    return cache[key]


def run_single(task: Task, config, encoder_fn, tokenizer, options: RunOptions, strategy, run_dir: str,
               data_cache: dict, export: Optional[Exporter] = None, init_checkpoint: str | None = None) -> dict:
    """Trains/evaluates/predicts once with `options.seed`; returns a result dict.

    `data_cache` holds (or receives) the features: "train", "eval", "predict".
    The result's "final" holds the last evaluation's metrics, "best"/"best_step"
    the best one's, and "selected" those of the weights used for predictions
    ("selection": "final", or "best_epoch" with `options.select_best_epoch`).
    `export` writes the SavedModel `options.export_saved_model` asks for (required then).
    """
    check_exporter(options, export)
    os.makedirs(run_dir, exist_ok=True)
    options = dataclasses.replace(options, execution=finetuning_execution(options, strategy, config))
    keras.utils.set_random_seed(options.seed)
    model = build_model(task, config, encoder_fn, strategy, options.max_seq_length, options.execution, options.seed)
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
        result["selection"] = restore_finetuned(model, finetuned_weights_dir(run_dir, init_checkpoint),
                                                options.select_best_epoch) or "final"
        if eval_sets:
            result["final"] = evaluate(model, context)
    if "final" in result:  # after --do_train=false, "final" scores the restored weights
        result["selected"] = selected_metrics(result)
    result.update(_export_and_predict(model, tokenizer, context, data_cache, export))
    write_json_atomic(os.path.join(run_dir, "run_metrics.json"), result)
    return result


def check_exporter(options: RunOptions, export: Optional[Exporter]) -> None:
    """Before any training: a run asked for a SavedModel must have been given the function that writes one."""
    if options.export_saved_model and export is None:
        raise ValueError("export_saved_model is set but the run was given no export function "
                         "(pass export=electra_tf.serving.export.export_serving)")


def finetuned_weights_dir(run_dir: str, init_checkpoint: str | None = None) -> str:
    """--do_train=false: where the fine-tuned weights are: the seed's folder when it holds them, else
    `init_checkpoint` when that is a fine-tuning run's folder (a checkpoint in, a SavedModel or scores out)."""
    for directory in (run_dir, init_checkpoint):
        if directory and any(os.path.isfile(os.path.join(directory, name)) for name in (FINAL_WEIGHTS, BEST_WEIGHTS)):
            return directory
    return run_dir


def finetuning_execution(options: RunOptions, strategy, config):
    """The run's execution options as `distribution.resolve_execution` decides them (as given when the entry
    point has resolved them already); fine-tuning takes one batch per step (no micro-batches)."""
    if options.execution.resolved:
        return options.execution
    requested = dataclasses.replace(options.execution, gradient_accumulation_steps=1)
    return distribution.resolve_execution(requested, strategy, config, batch_size=options.train_batch_size)[0]


def _train(model, config, features, context: EvalContext, tracker: BestTracker, writer) -> dict:
    """Trains, saves the final weights and selects the weights to report; returns the result's entries."""
    options, run_dir = context.options, context.run_dir
    result = train(model, context.task, config, features, options, context.strategy, context, tracker, writer,
                   context.padding)
    model.save_weights(os.path.join(run_dir, FINAL_WEIGHTS))
    result.update(tracker.summary() if context.eval_sets else {})
    result["selection"] = tracker.select(options.select_best_epoch)
    return result


def _export_and_predict(model, tokenizer, context: EvalContext, data_cache: dict, export: Optional[Exporter]) -> dict:
    """The SavedModel and the prediction files the options ask for; returns the result's entries."""
    task, options, result = context.task, context.options, {}
    if options.export_saved_model:
        result["saved_model"] = export(model, task, tokenizer, options, data_cache)
    if options.do_predict:
        predict_sets = _cached(data_cache, "predict", lambda: task.predict_sets(tokenizer, options.max_seq_length))
        result["predictions"] = write_predictions(model, task, predict_sets, options.eval_batch_size,
                                                  context.strategy, context.padding, context.run_dir)
    return result


def _run_seed(task: Task, config, encoder_fn, tokenizer, options: RunOptions, strategy, run_dir: str,
              data: dict, settings: dict, export: Optional[Exporter], init_checkpoint: str | None = None) -> dict:
    """One seed, resuming from its checkpoints; a seed whose training finished before is not trained again
    (only the predictions / SavedModel asked for are written from its weights)."""
    finished = checkpointing.finished_result(run_dir) if options.do_train else None
    if finished is None:
        if options.do_train:
            checkpointing.start_run(run_dir, settings)
        result = run_single(task, config, encoder_fn, tokenizer, options, strategy, run_dir, data, export,
                            init_checkpoint)
        if options.do_train:
            checkpointing.finish_run(run_dir, result)
        return result
    logging.info("seed %d: training finished before (%s), not trained again", options.seed, run_dir)
    if not (options.do_predict or options.export_saved_model):
        return finished
    outputs = run_single(task, config, encoder_fn, tokenizer, checkpointing.options_without_training(options),
                         strategy, run_dir, data, export)
    result = {**finished, **{k: outputs[k] for k in ("predictions", "saved_model") if k in outputs}}
    write_json_atomic(os.path.join(run_dir, "run_metrics.json"), result)
    return result


def median_metrics(runs: list[dict], key: str = "final") -> dict[str, float]:
    """The median of every metric over runs (the official README reports medians)."""
    names = sorted({name for run in runs for name in run.get(key, {})})
    return {name: float(np.median([run[key][name] for run in runs if name in run.get(key, {})]))
            for name in names}


def seed_run_dir(output_dir: str, seed: int, num_seeds: int) -> str:
    """Where the run of `seed` writes: `output_dir` itself for a single seed, else `seed_<seed>/` in it."""
    return output_dir if num_seeds == 1 else os.path.join(output_dir, f"seed_{seed}")


def seed_options(options: RunOptions, k: int, num_seeds: int) -> RunOptions:
    """The options of the k-th run: seed + k, and with several seeds its own SavedModel folder."""
    seeded = dataclasses.replace(options, seed=options.seed + k)
    if options.export_saved_model and num_seeds > 1:
        seeded = dataclasses.replace(seeded, export_saved_model=os.path.join(
            options.export_saved_model, f"seed_{seeded.seed}"))
    return seeded


def summarize(task: Task, runs: list[dict]) -> dict:
    """The metrics.json content: every run and the medians of the selected, final and best evaluations."""
    selection = "best_epoch" if any(r.get("selection") == "best_epoch" for r in runs) else "final"
    summary = {"task": task.name, "main_metric": task.main_metric_key(), "selection": selection, "runs": runs,
               "median": median_metrics(runs, "selected"), "median_final": median_metrics(runs, "final"),
               "median_best": median_metrics(runs, "best")}
    if task.data_summary():
        summary["data"] = task.data_summary()
    return summary


def run_seeds(task: Task, config, encoder_fn, tokenizer, strategy, options: RunOptions, data: dict,
              num_seeds: int = 1, init_checkpoint=None, export: Optional[Exporter] = None) -> dict:
    """All seeds; writes `finetune_config.json` and `metrics.json` to `options.output_dir`, returns the latter.
    `export`: as `run_single`'s."""
    check_exporter(options, export)
    os.makedirs(options.output_dir, exist_ok=True)
    write_json_atomic(os.path.join(options.output_dir, "finetune_config.json"), {
        "task": task.name, "task_settings": task.training_settings(), "config": config.to_dict(),
        "options": dataclasses.asdict(options), "init_checkpoint": init_checkpoint, "vocab_file": tokenizer.vocab_file})
    runs = []
    num_train = len(data["train"]["input_ids"]) if "train" in data else None
    # Resolved before the runs' settings are recorded: the execution choices are part of the record.
    options = dataclasses.replace(options, execution=finetuning_execution(options, strategy, config))
    for k in range(num_seeds):
        seeded = seed_options(options, k, num_seeds)
        run_dir = seed_run_dir(options.output_dir, seeded.seed, num_seeds)
        settings = checkpointing.run_settings(task.name, config, seeded, init_checkpoint, num_train,
                                              task.training_settings())
        result = _run_seed(task, config, encoder_fn, tokenizer, seeded, strategy, run_dir, data, settings, export,
                           init_checkpoint)
        logging.info("seed %d: %s", seeded.seed, json.dumps(result.get("selected", {})))
        runs.append(result)
    summary = summarize(task, runs)
    write_json_atomic(os.path.join(options.output_dir, "metrics.json"), summary)
    if summary["median"]:
        what = "best dev epoch (--select_best_epoch)" if summary["selection"] == "best_epoch" else "final weights"
        logging.info("median over %d run(s), %s: %s", len(runs), what,
                     "  ".join(f"{k}={v:.2f}" for k, v in summary["median"].items()))
    return summary
