"""Fine-tuning loop: encoder + task head, AdamW with layer-wise rates, eval, checkpoints.

One run (`run_single`) builds `FinetuningModel` (an `ElectraEncoder`, fresh
or pre-trained, plus the head `task.build_head(config)` returns) under a
`tf.distribute` strategy, trains it with `ElectraAdamW` (warm-up + linear
decay, per-variable layer-wise multipliers) in a custom loop, scores the dev
set(s) after every epoch and at the end, and writes TensorBoard scalars
(`tensorboard/`: train loss, learning rate, gradient norm, dev metrics) and
`log.jsonl`. Tasks are known only through the `task.Task` interface.

As in the official code:

* the training loss is the *sum* of the per-example losses over the global
  batch (`finetune_loss_reduction="sum"`); gradients are all-reduced over the
  replicas and then clipped to global norm `clip_norm` (1.0), so clipping acts
  on nearly every step. "mean" divides by the global batch size first (under
  Adam that equals "sum" with the clip at clip_norm / batch size). The logged
  loss is always the per-example mean;
* test predictions and the reported metrics come from the *final* weights
  (`final.weights.h5`). `select_best_epoch` instead keeps the weights of the
  best dev evaluation (`best.weights.h5`, by the task's main metric) and uses
  them for predictions and the summary.

Unlike the official code, batches are not padded to `max_seq_length`: each is
cut to its longest real example, rounded up to a multiple of 16 per 128 tokens
(`Padding`), and training draws its batches from length buckets, so short
tasks (STS-B pairs average ~30 tokens) do not pay for 128-token attention.
Results are unchanged: padded positions are masked out of attention and carry
no loss.

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
>>> Padding.dynamic(128).length(30), Padding.fixed(128).length(30)
(32, 128)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import weakref
from typing import Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from electra_tf import distribution, loop
from electra_tf.finetuning.layerwise_lr import layerwise_lr_multipliers
from electra_tf.finetuning.task import Task
from electra_tf.modeling import ElectraEncoder
from electra_tf.optimization import ElectraAdamW, WarmupLinearDecay
from electra_tf.options import RunOptions

INPUT_KEYS = ("input_ids", "input_mask", "segment_ids")
BEST_WEIGHTS = "best.weights.h5"
FINAL_WEIGHTS = "final.weights.h5"
LOSS_REDUCTIONS = ("sum", "mean")
# Sequence outputs (start/end logits) cut by dynamic padding are padded back with this value.
PADDED_LOGIT = -10000.0


def _replica_count():
    return distribution.replica_context_info()[1]


@keras.saving.register_keras_serializable(package="electra_tf")
class FinetuningModel(keras.Model):
    """`head(encoder(batch), batch)`; `train_step` does one optimisation step.

    The batch is a dict with `input_ids`, `input_mask`, `segment_ids` and the
    head's targets (`label_ids`, `targets` or `start_positions`/...).
    `loss_reduction` ("sum", official, or "mean") is how the per-example
    losses of a global batch are combined before the gradient and its clip.
    """

    def __init__(self, encoder, head, clip_norm=1.0, loss_reduction="sum", **kwargs):
        super().__init__(name=kwargs.pop("name", "finetuning_model"), **kwargs)
        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"loss_reduction must be one of {LOSS_REDUCTIONS}, got {loss_reduction!r}")
        self.encoder = encoder
        self.head = head
        self.clip_norm = clip_norm
        self.loss_reduction = loss_reduction

    def call(self, batch, training=False):
        inputs = {"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"],
                  "padding_mask": batch["input_mask"]}
        sequence = self.encoder(inputs, training=training, output_length=getattr(self.head, "output_length", None))
        return self.head(sequence, batch, training=training)

    def build_all(self, seq_length: int):
        """Creates every variable with a dummy batch."""
        ones = tf.ones([1, seq_length], tf.int32)
        self({"input_ids": ones, "input_mask": ones, "segment_ids": tf.zeros_like(ones)})
        return self

    def compute_losses(self, batch, training=True):
        """This replica's share of the objective: the global-batch sum (official) or mean.

        `mean_loss` is the per-example mean's partial, for the log.
        """
        global_batch = tf.cast(tf.shape(batch["input_ids"])[0] * _replica_count(), tf.float32)
        outputs = self(batch, training=training)
        total = tf.reduce_sum(tf.cast(self.head.per_example_loss(batch, outputs), tf.float32))
        objective = total if self.loss_reduction == "sum" else total / global_batch
        return {"loss": objective, "mean_loss": total / global_batch}

    def update_metrics(self, batch, outputs):
        pass  # fine-tuning scores the dev sets instead of keeping running training metrics

    def train_step(self, batch):
        """One step (`loop.train_step`: all-reduce before one global-norm clip, so N replicas clip
        exactly what one device would); returns partials that sum to the global values."""
        out = loop.train_step(self, batch, self.clip_norm)
        replicas = tf.cast(_replica_count(), tf.float32)
        return {"loss": out["mean_loss"], "grad_norm": out["grad_norm"] / replicas, "nonfinite": out["nonfinite"]}

    def get_config(self):
        return {"name": self.name, "clip_norm": self.clip_norm, "loss_reduction": self.loss_reduction,
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "head": keras.saving.serialize_keras_object(self.head)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        encoder = keras.saving.deserialize_keras_object(config.pop("encoder"))
        head = keras.saving.deserialize_keras_object(config.pop("head"))
        return cls(encoder, head, **config)


# --------------------------------------------------------------------------
# Batches trimmed to their longest example
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Padding:
    """The sequence length of a batch: its longest real example rounded up to `multiple`.

    Rounding bounds the number of distinct shapes (XLA and TPUs compile once
    per shape), here to at most 8 for any `max_length`; `min_length` keeps
    span heads' top-k/beam search over enough positions. `Padding.fixed(n)`
    pads every batch to `n`, as the official code does.
    """

    max_length: int
    multiple: int
    min_length: int = 1

    @classmethod
    def fixed(cls, max_length: int) -> "Padding":
        return cls(max_length, max_length, max_length)

    @classmethod
    def dynamic(cls, max_length: int, min_length: int = 1) -> "Padding":
        return cls(max_length, 16 * math.ceil(max_length / 128), min(min_length, max_length))

    @property
    def is_fixed(self) -> bool:
        return self.min_length >= self.max_length

    def length(self, longest: int) -> int:
        rounded = -(-int(longest) // self.multiple) * self.multiple
        return min(self.max_length, max(self.min_length, rounded))

    def tf_length(self, longest):
        longest = tf.cast(longest, tf.int32)
        rounded = (longest + self.multiple - 1) // self.multiple * self.multiple
        return tf.minimum(self.max_length, tf.maximum(self.min_length, rounded))


def padding_for(task: Task, config, options: RunOptions) -> Padding:
    """The task's padding: fixed when `options.dynamic_padding` is off."""
    if not options.dynamic_padding:
        return Padding.fixed(options.max_seq_length)
    return Padding.dynamic(options.max_seq_length, task.min_sequence_length(config))


def sequence_lengths(input_mask) -> np.ndarray:
    """Per example, the position after its last real token (0 for an all-padding row)."""
    mask = np.asarray(input_mask) > 0
    return (mask * np.arange(1, mask.shape[1] + 1)).max(axis=1).astype(np.int32)


def trim_batch(batch: dict, length) -> dict:
    """Cuts every per-token feature (dim 1 == the sequence length) of `batch` to `length`."""
    seq = batch["input_ids"].shape[1]
    return {k: v[:, :length] if v.shape.rank >= 2 and v.shape[1] == seq else v for k, v in batch.items()}


def train_schedule(num_examples: int, options: RunOptions) -> tuple[int, int]:
    """(total steps, steps per epoch), the total as in the official code: int(N × epochs / B)."""
    steps_per_epoch = max(1, num_examples // options.train_batch_size)
    total = max(1, int(num_examples * options.num_train_epochs / options.train_batch_size))
    if options.max_train_steps:
        total = min(total, options.max_train_steps)
    return total, steps_per_epoch


def make_optimizer(model, options: RunOptions, config, total_steps: int):
    official_bug = options.official_layerwise_lr_bug
    if official_bug is None:
        official_bug = config.finetune_official_layerwise_lr_bug
    multipliers = layerwise_lr_multipliers(model.encoder, model.head.trainable_weights, options.layerwise_lr_decay,
                                           official_bug=official_bug)
    warmup = int(round(total_steps * options.warmup_fraction))
    optimizer = ElectraAdamW(
        learning_rate=WarmupLinearDecay(options.learning_rate, total_steps, warmup, power=1.0),
        weight_decay=options.weight_decay, beta_1=config.adam_beta1, beta_2=config.adam_beta2,
        epsilon=config.adam_epsilon, bias_correction=config.finetune_adam_bias_correction, lr_multipliers=multipliers,
        fused=options.execution.adam_kernel == "fused")
    if options.mixed_precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def train_dataset(features: dict, batch_size: int, seed: int, num_shards: int = 1, shard_index: int = 0,
                  padding: Optional[Padding] = None, bucketing: bool = False) -> tf.data.Dataset:
    """Shuffled, repeated batches of `batch_size` (drop_remainder keeps replicas even).

    With a dynamic `padding` each batch is cut to its longest example; with
    `bucketing` a batch is filled from examples of one padded length
    (`group_by_window`), so little padding is left. Both are deterministic for
    a seed. With several workers each reads its own shard and `batch_size` is
    its share.
    """
    lengths = sequence_lengths(features["input_mask"])
    dataset = tf.data.Dataset.from_tensor_slices((features, lengths))
    if num_shards > 1:
        dataset = dataset.shard(num_shards, shard_index)
    dataset = dataset.shuffle(len(lengths), seed=seed, reshuffle_each_iteration=True).repeat()
    if padding is None or padding.is_fixed:
        dataset = dataset.batch(batch_size, drop_remainder=True).map(lambda batch, _: batch)
        return dataset.prefetch(tf.data.AUTOTUNE)
    if bucketing:
        dataset = dataset.group_by_window(
            key_func=lambda _, length: tf.cast(padding.tf_length(length), tf.int64),
            reduce_func=lambda _, window: window.batch(batch_size, drop_remainder=True),
            window_size=batch_size)
    else:
        dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(lambda batch, n: trim_batch(batch, padding.tf_length(tf.reduce_max(n))))
    return dataset.prefetch(tf.data.AUTOTUNE)


def worker_train_dataset(strategy, features: dict, global_batch_size: int, seed: int,
                         padding: Optional[Padding] = None, bucketing: bool = False) -> tf.data.Dataset:
    """This worker's batches; `split_for_replicas` hands each local replica its slice.

    A plain iterator (not `experimental_distribute_dataset`, whose multi-device
    iterator took ~1 min to tear down after a few epochs on CPU). A batch is
    trimmed before it is split, so all local replicas get the same shape.
    """
    workers = distribution.num_workers(strategy)
    return train_dataset(features, global_batch_size // workers, seed, workers,
                         distribution.worker_index(strategy), padding, bucketing)


# --------------------------------------------------------------------------
# Prediction
# --------------------------------------------------------------------------

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
    results = {}
    for key in chunks[0]:
        values = np.concatenate([c[key] for c in chunks])
        results[key] = np.empty_like(values)
        results[key][order] = values
    return results


# --------------------------------------------------------------------------
# Training, evaluation, selection
# --------------------------------------------------------------------------

def ScalarWriter(run_dir):
    """TensorBoard scalars under `<run_dir>/tensorboard` plus `log.jsonl` ({"step", prefix: scalars})."""
    return loop.ScalarLogger(run_dir, "tensorboard", "log.jsonl")


def _make_train_fn(strategy, model, jit_compile=False, graph_optimizer="auto"):
    return loop.make_step_driver(strategy, model.train_step, ["loss", "grad_norm"], jit_compile,
                                 graph_optimizer=graph_optimizer)


@dataclasses.dataclass
class EvalContext:
    """What scoring the dev sets needs: where, how, with which strategy."""

    task: Task
    eval_sets: list
    options: RunOptions
    strategy: object
    padding: Padding
    run_dir: Optional[str]


def evaluate(model, context: EvalContext) -> dict[str, float]:
    """The task's metrics over all its dev sets."""
    results = {}
    for eval_set in context.eval_sets:
        outputs = predict(model, eval_set.features, context.options.eval_batch_size, context.strategy,
                          context.padding)
        results.update(context.task.score(eval_set, outputs, context.run_dir))
    return results



class BestTracker:
    """Logs every dev evaluation and remembers the best one by the main metric.

    With `keep_best_weights` (`--select_best_epoch`) the weights of the best
    evaluation are saved to `best.weights.h5` so they can be restored.
    """

    def __init__(self, model, run_dir: str, main_key: str, writer: ScalarWriter, keep_best_weights=False):
        self.model, self.run_dir, self.main_key, self.writer = model, run_dir, main_key, writer
        self.keep_best_weights = keep_best_weights
        self.best_value, self.best, self.best_step, self.last = -math.inf, None, None, None

    def __call__(self, step: int, metrics: dict):
        self.last = metrics
        self.writer.write(step, metrics, "dev", nested=True)
        logging.info("dev @ step %d: %s", step, "  ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
        if metrics.get(self.main_key, -math.inf) > self.best_value:
            self.best_value, self.best, self.best_step = metrics[self.main_key], dict(metrics), step
            if self.keep_best_weights:
                self.model.save_weights(os.path.join(self.run_dir, BEST_WEIGHTS))

    def summary(self) -> dict:
        if self.best is None:
            return {"final": self.last or {}}
        return {"final": self.last, "best": self.best, "best_step": self.best_step}

    def select(self, select_best_epoch: bool) -> str:
        """Restores the best evaluation's weights if asked (and known); returns the selection name."""
        if not select_best_epoch:
            logging.info("Predictions and reported metrics use the final weights (--select_best_epoch "
                         "would use the best dev evaluation)")
            return "final"
        if self.best is None or not self.keep_best_weights:
            logging.warning("--select_best_epoch: no dev evaluation to select from; using the final weights")
            return "final"
        self.model.load_weights(os.path.join(self.run_dir, BEST_WEIGHTS))
        logging.info("--select_best_epoch: predictions and reported metrics use the best dev evaluation "
                     "(step %d, %s=%.4f)", self.best_step, self.main_key, self.best_value)
        return "best_epoch"


def train(model, task: Task, config, features, options: RunOptions, strategy, eval_context, tracker, writer,
          padding: Optional[Padding] = None) -> dict:
    """The training loop: evaluates after every epoch and at the end (when `eval_context` has sets)."""
    num_examples = len(features["input_ids"])
    total_steps, steps_per_epoch = train_schedule(num_examples, options)
    with strategy.scope():
        optimizer = make_optimizer(model, options, config, total_steps)
        model.compile(optimizer=optimizer)
        optimizer.build(model.trainable_variables)
    iterator = iter(worker_train_dataset(strategy, features, options.train_batch_size, options.seed, padding,
                                         options.length_bucketing))
    train_steps = _make_train_fn(strategy, model, options.execution.jit_compile, options.execution.graph_optimizer)
    logging.info("Fine-tuning %s: %d examples, %d steps (%d per epoch), batch %d, lr %g, layer decay %g, "
                 "loss %s over the batch, clip %g; %s", task.name, num_examples, total_steps,
                 steps_per_epoch, options.train_batch_size, options.learning_rate, options.layerwise_lr_decay,
                 model.loss_reduction, model.clip_norm, loop.runtime_summary(train_steps))
    step, start = 0, time.time()
    progress = loop.ProgressReporter(total_steps, 0, options.train_batch_size, keys=("loss",))
    while step < total_steps:
        stop = loop.next_stop(step, total_steps, options.steps_per_loop, steps_per_epoch, options.log_steps)
        outputs = train_steps(iterator, tf.constant(stop - step))
        if int(outputs["nonfinite_steps"]):
            raise loop.NonFiniteError(f"fine-tuning step {loop.current_step(optimizer) + 1}: the loss or gradient "
                                      "norm is not finite; stopping (lower the learning rate)")
        step = stop
        log_now = step % options.log_steps == 0 or step == total_steps
        scalars = {"loss": float(outputs["loss"]), "learning_rate": loop.learning_rate_at(optimizer, step),
                   "grad_norm": float(outputs["grad_norm"]),
                   "steps_per_second": step / max(time.time() - start, 1e-9)}
        if log_now:
            writer.write(step, scalars, "train", nested=True)
        progress.update(step, scalars, log=log_now)
        if eval_context.eval_sets and (step % steps_per_epoch == 0 or step == total_steps):
            tracker(step, evaluate(model, eval_context))
    return {"train_steps": total_steps, "train_seconds": time.time() - start}


def restore_finetuned(model, run_dir: str, select_best_epoch: bool = False) -> Optional[str]:
    """For --do_train=false: the weights a previous run left in `run_dir` (final, or best if selected)."""
    names = (BEST_WEIGHTS, FINAL_WEIGHTS) if select_best_epoch else (FINAL_WEIGHTS, BEST_WEIGHTS)
    saved = [os.path.join(run_dir, name) for name in names if os.path.exists(os.path.join(run_dir, name))]
    if not saved:
        logging.warning("--do_train=false and no %s in %s: the task head is untrained", FINAL_WEIGHTS, run_dir)
        return None
    model.load_weights(saved[0])
    logging.info("Using the fine-tuned weights of %s", saved[0])
    return "best_epoch" if saved[0].endswith(BEST_WEIGHTS) else "final"


def write_all_predictions(model, task: Task, predict_sets, context: EvalContext) -> list[str]:
    paths = []
    for predict_set in predict_sets:
        outputs = predict(model, predict_set.features, context.options.eval_batch_size, context.strategy,
                          context.padding)
        paths.append(task.write_predictions(predict_set, outputs, context.run_dir))
        logging.info("Wrote %s", paths[-1])
    return paths


def build_model(task: Task, config, encoder_fn, strategy, seq_length: int) -> FinetuningModel:
    """Encoder + the task's head, with the config's clip norm and loss reduction, all variables built."""
    with strategy.scope():
        model = FinetuningModel(encoder_fn(), task.build_head(config), clip_norm=config.clip_norm,
                                loss_reduction=config.finetune_loss_reduction)
        model.build_all(seq_length)
    return model


def run_single(task: Task, config, encoder_fn, tokenizer, options: RunOptions, strategy, run_dir: str,
               data_cache: dict) -> dict:
    """Trains/evaluates/predicts once with `options.seed`; returns a result dict.

    `data_cache` holds (or receives) the features: "train", "eval", "predict".
    The result's "final" holds the last evaluation's metrics, "best"/"best_step"
    the best one's, and "selected" those of the weights used for predictions
    ("selection": "final", or "best_epoch" with `options.select_best_epoch`).
    """
    os.makedirs(run_dir, exist_ok=True)
    options = dataclasses.replace(options, execution=distribution.resolve_execution(options.execution, strategy,
                                                                                     config.hidden_act))
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
        result.update(train(model, task, config, features, options, strategy, context, tracker, writer,
                            context.padding))
        model.save_weights(os.path.join(run_dir, FINAL_WEIGHTS))
        result.update(tracker.summary() if eval_sets else {})
        result["selection"] = tracker.select(options.select_best_epoch)
    else:
        result["selection"] = restore_finetuned(model, run_dir, options.select_best_epoch) or "final"
        if eval_sets:
            result["final"] = evaluate(model, context)
    if "final" in result:  # after --do_train=false, "final" scores the restored weights
        result["selected"] = result.get("best", result["final"]) if result["selection"] == "best_epoch" \
            else result["final"]
    if options.export_saved_model:
        result["saved_model"] = export_serving(model, task, tokenizer, options, data_cache)
    if options.do_predict:
        predict_sets = _cached(data_cache, "predict", lambda: task.predict_sets(tokenizer, seq))
        result["predictions"] = write_all_predictions(model, task, predict_sets, context)
    with open(os.path.join(run_dir, "run_metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    return result


def export_serving(model, task: Task, tokenizer, options: RunOptions, data_cache: dict) -> str:
    """Writes the SavedModel of `electra_tf.serving` for a sentence (pair) classification task."""
    from electra_tf import serving

    labels = task.serving_labels()
    features = data_cache.get("train") or next(iter(s.features for s in data_cache.get("eval", [])), None)
    two_texts = features is not None and bool(np.any(features["segment_ids"]))
    path = serving.export_classifier(model, tokenizer, labels, options.max_seq_length, options.export_saved_model,
                                     two_texts)
    logging.info("Exported a serving SavedModel (%s) to %s", "text, text_b" if two_texts else "text", path)
    return path


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
