"""Fine-tuning loop: encoder + task head, AdamW with layer-wise rates, eval, checkpoints.

One run (`run_single`) builds `FinetuningModel` (an `ElectraEncoder`, fresh
or pre-trained, plus the task's head) under a `tf.distribute` strategy, trains
it with `ElectraAdamW` (warm-up + linear decay, gradient all-reduce then
global-norm clip, per-variable layer-wise multipliers) in a custom loop, scores
the dev set(s) after every epoch and at the end, keeps the weights of the best
dev epoch (`best.weights.h5`, by the task's main metric; `final.weights.h5`
when there is no dev evaluation) and writes
TensorBoard scalars (`tensorboard/`: train loss, learning rate, dev metrics).

Example:

>>> import numpy as np
>>> from electra_tf.config import get_config
>>> from electra_tf.finetuning.heads import ClassificationHead
>>> from electra_tf.modeling import ElectraEncoder
>>> config = get_config("tiny", vocab_size=50, num_layers=1)
>>> model = FinetuningModel(ElectraEncoder.from_config_object(config), ClassificationHead(2))
>>> batch = {"input_ids": np.ones((2, 8), "int32"), "input_mask": np.ones((2, 8), "int32"),
...          "segment_ids": np.zeros((2, 8), "int32"), "label_ids": np.array([0, 1], "int32")}
>>> tuple(model(batch)["logits"].shape)
(2, 2)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from electra_tf import input_pipeline
from electra_tf.finetuning.heads import ClassificationHead, build_head
from electra_tf.finetuning.layerwise_lr import layerwise_lr_multipliers
from electra_tf.modeling import ElectraEncoder
from electra_tf.optimization import ElectraAdamW, WarmupLinearDecay

INPUT_KEYS = ("input_ids", "input_mask", "segment_ids")
BEST_WEIGHTS = "best.weights.h5"
FINAL_WEIGHTS = "final.weights.h5"


def _replica_count():
    context = tf.distribute.get_replica_context()
    return 1 if context is None else context.num_replicas_in_sync


def _all_reduce_sum(values):
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return values
    return context.all_reduce(tf.distribute.ReduceOp.SUM, values)


@keras.saving.register_keras_serializable(package="electra_tf")
class FinetuningModel(keras.Model):
    """`head(encoder(batch), batch)`; `train_step` does one optimisation step.

    The batch is a dict with `input_ids`, `input_mask`, `segment_ids` and the
    head's targets (`label_ids`, `targets` or `start_positions`/...).
    """

    def __init__(self, encoder, head, clip_norm=1.0, **kwargs):
        super().__init__(name=kwargs.pop("name", "finetuning_model"), **kwargs)
        self.encoder = encoder
        self.head = head
        self.clip_norm = clip_norm

    def call(self, batch, training=False):
        inputs = {"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"],
                  "padding_mask": batch["input_mask"]}
        return self.head(self.encoder(inputs, training=training), batch, training=training)

    def build_all(self, seq_length: int):
        """Creates every variable with a dummy batch."""
        ones = tf.ones([1, seq_length], tf.int32)
        self({"input_ids": ones, "input_mask": ones, "segment_ids": tf.zeros_like(ones)})
        return self

    def train_step(self, batch):
        """One step on this replica's slice of a global batch; returns the replica's loss partial."""
        variables = self.trainable_variables
        local_batch = tf.shape(batch["input_ids"])[0]
        global_batch = tf.cast(local_batch * _replica_count(), tf.float32)
        with tf.GradientTape() as tape:
            outputs = self(batch, training=True)
            loss = tf.reduce_sum(self.head.per_example_loss(batch, outputs)) / global_batch
            scaled_loss = self.optimizer.scale_loss(loss)
        grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
                 for g, v in zip(tape.gradient(scaled_loss, variables), variables)]
        grads = _all_reduce_sum(grads)
        loss_scale = self._loss_scale()
        grads, grad_norm = tf.clip_by_global_norm(grads, self.clip_norm * loss_scale)
        self.optimizer.apply(grads, variables)
        return {"loss": loss, "grad_norm": grad_norm / loss_scale / tf.cast(_replica_count(), tf.float32)}

    def _loss_scale(self):
        if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            return tf.cast(self.optimizer.dynamic_scale, tf.float32)
        return tf.constant(1.0)

    def get_config(self):
        return {"name": self.name, "clip_norm": self.clip_norm,
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "head": keras.saving.serialize_keras_object(self.head)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        encoder = keras.saving.deserialize_keras_object(config.pop("encoder"))
        head = keras.saving.deserialize_keras_object(config.pop("head"))
        return cls(encoder, head, **config)


@dataclasses.dataclass
class RunOptions:
    """What one fine-tuning run needs besides the config and the task."""

    output_dir: str
    learning_rate: float
    train_batch_size: int
    eval_batch_size: int
    num_train_epochs: float
    warmup_fraction: float
    weight_decay: float
    layerwise_lr_decay: float
    max_seq_length: int
    seed: int = 0
    official_layerwise_lr_bug: bool = False
    max_train_steps: Optional[int] = None
    do_train: bool = True
    do_eval: bool = True
    do_predict: bool = False
    mixed_precision: str = "none"
    log_steps: int = 50
    steps_per_loop: int = 50
    jit_compile: bool = False


def train_schedule(num_examples: int, options: RunOptions) -> tuple[int, int]:
    """(total steps, steps per epoch), the total as in the official code: int(N × epochs / B)."""
    steps_per_epoch = max(1, num_examples // options.train_batch_size)
    total = max(1, int(num_examples * options.num_train_epochs / options.train_batch_size))
    if options.max_train_steps:
        total = min(total, options.max_train_steps)
    return total, steps_per_epoch


def make_optimizer(model, options: RunOptions, config, total_steps: int):
    multipliers = layerwise_lr_multipliers(model.encoder, model.head.trainable_weights, options.layerwise_lr_decay,
                                           official_bug=options.official_layerwise_lr_bug)
    warmup = int(round(total_steps * options.warmup_fraction))
    optimizer = ElectraAdamW(
        learning_rate=WarmupLinearDecay(options.learning_rate, total_steps, warmup, power=1.0),
        weight_decay=options.weight_decay, beta_1=config.adam_beta1, beta_2=config.adam_beta2,
        epsilon=config.adam_epsilon, bias_correction=config.adam_bias_correction, lr_multipliers=multipliers)
    if options.mixed_precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def train_dataset(features: dict, batch_size: int, seed: int, num_shards: int = 1,
                  shard_index: int = 0) -> tf.data.Dataset:
    """Shuffled, repeated, fixed-size batches (drop_remainder keeps replicas even).

    With several workers each reads its own shard and `batch_size` is its share.
    """
    dataset = tf.data.Dataset.from_tensor_slices(features)
    if num_shards > 1:
        dataset = dataset.shard(num_shards, shard_index)
    dataset = dataset.shuffle(len(next(iter(features.values()))), seed=seed, reshuffle_each_iteration=True)
    return dataset.repeat().batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def worker_train_dataset(strategy, features: dict, global_batch_size: int, seed: int) -> tf.data.Dataset:
    """This worker's batches; `split_for_replicas` hands each local replica its slice.

    A plain iterator (not `experimental_distribute_dataset`, whose multi-device
    iterator took ~1 min to tear down after a few epochs on CPU).
    """
    workers = input_pipeline.num_workers(strategy)
    worker_id = getattr(strategy.extended, "_task_id", 0) or 0
    return train_dataset(features, global_batch_size // workers, seed, workers, worker_id)


def predict(model, features: dict, batch_size: int) -> dict[str, np.ndarray]:
    """Model outputs on `features` (inputs only), as NumPy arrays in input order."""
    inputs = {k: features[k] for k in INPUT_KEYS}
    num = len(inputs["input_ids"])
    if num == 0:
        return {}
    dataset = tf.data.Dataset.from_tensor_slices(inputs).batch(batch_size).prefetch(tf.data.AUTOTUNE)
    outputs = model.predict(dataset, verbose=0)
    return {k: np.asarray(v) for k, v in outputs.items()}


class ScalarWriter:
    """TensorBoard scalars under `<run_dir>/tensorboard` plus a JSON-lines log."""

    def __init__(self, run_dir):
        self.writer = tf.summary.create_file_writer(os.path.join(run_dir, "tensorboard"))
        self.jsonl = os.path.join(run_dir, "log.jsonl")

    def write(self, step: int, scalars: dict, prefix: str):
        with self.writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(f"{prefix}/{name}", value)
        self.writer.flush()
        with open(self.jsonl, "a") as f:
            f.write(json.dumps({"step": step, prefix: scalars}) + "\n")


def _make_train_fn(strategy, model, jit_compile=False):
    step_fn = tf.function(model.train_step, jit_compile=True) if jit_compile else model.train_step

    def one_step(iterator):
        batch = input_pipeline.split_for_replicas(strategy, next(iterator))
        return strategy.run(step_fn, args=(batch,))

    @tf.function
    def train_steps(iterator, num_steps):
        outputs = one_step(iterator)
        for _ in tf.range(num_steps - 1):
            outputs = one_step(iterator)
        return {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for k, v in outputs.items()}

    return train_steps


def evaluate(model, task, eval_sets, options: RunOptions, run_dir: Optional[str]) -> dict[str, float]:
    """The task's metrics over all its dev sets."""
    results = {}
    for eval_set in eval_sets:
        outputs = predict(model, eval_set.features, options.eval_batch_size)
        results.update(task.score(eval_set, outputs, run_dir))
    return results


def _learning_rate(optimizer, step):
    schedule = getattr(optimizer, "inner_optimizer", optimizer)._learning_rate
    return float(schedule(step)) if callable(schedule) else float(schedule)


class BestTracker:
    """Logs dev metrics and keeps the weights of the best evaluation by the main metric."""

    def __init__(self, model, run_dir: str, main_key: str, writer: ScalarWriter):
        self.model, self.run_dir, self.main_key, self.writer = model, run_dir, main_key, writer
        self.best_value, self.best, self.best_step, self.last = -math.inf, None, None, None

    def __call__(self, step: int, metrics: dict):
        self.last = metrics
        self.writer.write(step, metrics, "dev")
        logging.info("dev @ step %d: %s", step, "  ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
        if metrics.get(self.main_key, -math.inf) > self.best_value:
            self.best_value, self.best, self.best_step = metrics[self.main_key], dict(metrics), step
            self.model.save_weights(os.path.join(self.run_dir, BEST_WEIGHTS))

    def summary(self) -> dict:
        if self.best is None:
            return {"final": self.last or {}}
        return {"final": self.last, "best": self.best, "best_step": self.best_step}

    def restore_best(self):
        if self.best is not None:
            self.model.load_weights(os.path.join(self.run_dir, BEST_WEIGHTS))


def train(model, task, config, features, options: RunOptions, strategy, eval_sets, tracker, writer) -> dict:
    """The training loop: evaluates after every epoch and at the end."""
    num_examples = len(features["input_ids"])
    total_steps, steps_per_epoch = train_schedule(num_examples, options)
    with strategy.scope():
        optimizer = make_optimizer(model, options, config, total_steps)
        model.compile(optimizer=optimizer)
        optimizer.build(model.trainable_variables)
    iterator = iter(worker_train_dataset(strategy, features, options.train_batch_size, options.seed))
    train_steps = _make_train_fn(strategy, model, options.jit_compile)
    logging.info("Fine-tuning %s: %d examples, %d steps (%d per epoch), batch %d, lr %g, layer decay %g",
                 task.name, num_examples, total_steps, steps_per_epoch, options.train_batch_size,
                 options.learning_rate, options.layerwise_lr_decay)
    step, start = 0, time.time()
    while step < total_steps:
        stop = min(total_steps, *[(step // n + 1) * n for n in (options.steps_per_loop, steps_per_epoch,
                                                                  options.log_steps)])
        outputs = train_steps(iterator, tf.constant(stop - step))
        step = stop
        if step % options.log_steps == 0 or step == total_steps:
            scalars = {"loss": float(outputs["loss"]), "learning_rate": _learning_rate(optimizer, step),
                       "grad_norm": float(outputs["grad_norm"]),
                       "steps_per_second": step / max(time.time() - start, 1e-9)}
            writer.write(step, scalars, "train")
            logging.info("step %d/%d  loss=%.4f  lr=%.3g", step, total_steps, scalars["loss"],
                         scalars["learning_rate"])
        if eval_sets and (step % steps_per_epoch == 0 or step == total_steps):
            tracker(step, evaluate(model, task, eval_sets, options, tracker.run_dir))
    return {"train_steps": total_steps, "train_seconds": time.time() - start}


def restore_finetuned(model, run_dir: str):
    """For --do_train=false: the weights a previous run left in `run_dir`, if any."""
    saved = [os.path.join(run_dir, name) for name in (BEST_WEIGHTS, FINAL_WEIGHTS)]
    saved = [path for path in saved if os.path.exists(path)]
    if saved:
        model.load_weights(saved[0])
        logging.info("Using the fine-tuned weights of %s", saved[0])
    else:
        logging.warning("--do_train=false and no %s in %s: the task head is untrained", BEST_WEIGHTS, run_dir)


def write_all_predictions(model, task, predict_sets, options: RunOptions, run_dir: str) -> list[str]:
    paths = []
    for predict_set in predict_sets:
        outputs = predict(model, predict_set.features, options.eval_batch_size)
        paths.append(task.write_predictions(predict_set, outputs, run_dir))
        logging.info("Wrote %s", paths[-1])
    return paths


def run_single(task, config, encoder_fn, tokenizer, options: RunOptions, strategy, run_dir: str,
               data_cache: dict) -> dict:
    """Trains/evaluates/predicts once with `options.seed`; returns a result dict.

    `data_cache` holds (or receives) the features: "train", "eval", "predict".
    """
    os.makedirs(run_dir, exist_ok=True)
    keras.utils.set_random_seed(options.seed)
    with strategy.scope():
        model = FinetuningModel(encoder_fn(), build_head(task, config), clip_norm=config.clip_norm)
        model.build_all(options.max_seq_length)
    seq = options.max_seq_length
    eval_sets = _cached(data_cache, "eval", lambda: task.eval_sets(tokenizer, seq)) if options.do_eval else []
    writer = ScalarWriter(run_dir)
    tracker = BestTracker(model, run_dir, task.main_metric_key(), writer)
    result = {"seed": options.seed}
    if options.do_train:
        features = _cached(data_cache, "train", lambda: task.train_features(tokenizer, seq))
        result.update(train(model, task, config, features, options, strategy, eval_sets, tracker, writer))
        if not eval_sets:  # no dev metric to pick a best epoch: keep the final weights
            model.save_weights(os.path.join(run_dir, FINAL_WEIGHTS))
    else:
        restore_finetuned(model, run_dir)
    if eval_sets:
        result.update(tracker.summary() if options.do_train else
                      {"final": evaluate(model, task, eval_sets, options, run_dir)})
    if options.do_predict:
        tracker.restore_best()
        predict_sets = _cached(data_cache, "predict", lambda: task.predict_sets(tokenizer, seq))
        result["predictions"] = write_all_predictions(model, task, predict_sets, options, run_dir)
    with open(os.path.join(run_dir, "run_metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    return result


def _cached(cache: dict, key: str, fn):
    if key not in cache:
        cache[key] = fn()
    return cache[key]


def median_metrics(runs: list[dict], key: str = "final") -> dict[str, float]:
    """The median of every metric over runs (the official README reports medians)."""
    names = sorted({name for run in runs for name in run.get(key, {})})
    return {name: float(np.median([run[key][name] for run in runs if name in run.get(key, {})]))
            for name in names}


def new_encoder_fn(config):
    """A factory of randomly initialised discriminator encoders."""
    def build():
        encoder = ElectraEncoder.from_config_object(config, role="discriminator")
        encoder.build()
        return encoder
    return build
