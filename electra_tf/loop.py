"""The training loop shared by pre-training and fine-tuning.

A model that trains here implements two methods (as `ElectraPretrainer` and
`FinetuningModel` do); everything else is common:

* `compute_losses(batch, training=True) -> dict` with a scalar `"loss"`: this
  replica's *partial* of the global-batch loss (sums divided by global counts),
  plus whatever its metrics need;
* `update_metrics(batch, outputs)`: running metrics for the log.

`train_step(model, batch)` runs the one gradient-apply sequence: tape →
zero-fill missing gradients → all-reduce over replicas → undo the fp16 loss
scale → global-norm clip → optimizer. `make_step_driver` compiles
`steps_per_loop` steps into one `tf.function` (what TPUs need, and on CPU it
traces the step once). `ScalarLogger` writes TensorBoard scalars plus a
JSON-lines file, and `ProgressReporter` shows a progress bar on a terminal and
log lines otherwise.

Example:

>>> import keras, numpy as np
>>> class Line(keras.Model):
...     def __init__(self):
...         super().__init__()
...         self.w = self.add_weight(shape=(), initializer="zeros")
...     def compute_losses(self, batch, training=True):
...         return {"loss": keras.ops.mean((self.w * batch["x"] - batch["y"]) ** 2)}
...     def update_metrics(self, batch, outputs):
...         pass
>>> model = Line()
>>> model.compile(optimizer=keras.optimizers.SGD(0.1))
>>> batch = {"x": np.ones(4, "float32"), "y": np.full(4, 2.0, "float32")}
>>> out = train_step(model, batch, clip_norm=1.0)
>>> round(float(out["grad_norm"]), 3), round(float(model.w.numpy()), 3)  # |dL/dw| = 4, clipped to 1
(4.0, 0.1)
"""

from __future__ import annotations

import json
import os
import sys
import time

import keras
import tensorflow as tf
from absl import logging

from electra_tf import distribution


def loss_scale(optimizer) -> tf.Tensor:
    """The dynamic fp16 loss scale (1 for other optimizers)."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return tf.cast(optimizer.dynamic_scale, tf.float32)
    return tf.constant(1.0)


def apply_gradients(optimizer, tape, scaled_loss, variables, clip_norm: float) -> tf.Tensor:
    """Reduces, unscales, clips (global norm, after the all-reduce) and applies; returns the norm.

    Gradients are summed over replicas *before* the clip, so N replicas clip what one
    device would (Keras would clip each replica's partial gradient).
    """
    grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
             for g, v in zip(tape.gradient(scaled_loss, variables), variables)]
    grads = distribution.all_reduce_sum(grads)
    scale = loss_scale(optimizer)
    grads, grad_norm = tf.clip_by_global_norm(grads, clip_norm * scale)
    optimizer.apply(grads, variables)
    return grad_norm / scale


def train_step(model, batch, clip_norm: float) -> dict:
    """One optimisation step of `model` on this replica's slice of the batch; returns its outputs."""
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        outputs = model.compute_losses(batch, training=True)
        scaled_loss = model.optimizer.scale_loss(outputs["loss"])
    outputs["grad_norm"] = apply_gradients(model.optimizer, tape, scaled_loss, variables, clip_norm)
    model.update_metrics(batch, outputs)
    return outputs


def make_step_driver(strategy, step_fn, output_names, jit_compile=False):
    """`run(iterator, num_steps)`: `num_steps` steps in one `tf.function`, returning the last
    step's outputs summed over replicas (step functions return replica partials).

    The step is traced once, inside the loop; the outputs ride along as loop variables.
    """
    step_fn = tf.function(step_fn, jit_compile=True) if jit_compile else step_fn

    def one_step(iterator):
        batch = distribution.split_for_replicas(strategy, next(iterator))
        per_replica = strategy.run(step_fn, args=(batch,))
        return {name: strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[name], axis=None)
                for name in output_names}

    @tf.function
    def run(iterator, num_steps):
        outputs = {name: tf.constant(0.0) for name in output_names}
        for _ in tf.range(num_steps):
            outputs = one_step(iterator)
        return outputs

    return run


def current_step(optimizer) -> int:
    return int(optimizer.iterations.value.numpy())  # .value: a MirroredVariable under a strategy


def learning_rate_at(optimizer, step: int) -> float:
    """The schedule's learning rate at `step` (through a LossScaleOptimizer too)."""
    schedule = getattr(optimizer, "inner_optimizer", optimizer)._learning_rate
    return float(schedule(step)) if callable(schedule) else float(schedule)


def next_stop(step: int, total: int, *intervals, extra_stops=()) -> int:
    """The next step at which the loop must return to Python: a multiple of any interval, or a stop."""
    return min([total, *[(step // n + 1) * n for n in intervals if n], *[s for s in extra_stops if s > step]])


class ScalarLogger:
    """TensorBoard scalars (`<log_dir>/<subdir>`) plus one JSON object per write in `jsonl_name`."""

    def __init__(self, log_dir: str, subdir: str, jsonl_name: str):
        self.writer = tf.summary.create_file_writer(os.path.join(log_dir, subdir))
        self.jsonl = os.path.join(log_dir, jsonl_name)

    def write(self, step: int, scalars: dict, prefix: str = "train", nested: bool = False):
        with self.writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(f"{prefix}/{name}", value)
        self.writer.flush()
        record = {"step": step, prefix: scalars} if nested else {"step": step, **scalars}
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(record) + "\n")


class ProgressReporter:
    """A Keras progress bar (step, ETA, examples/s, key metrics) on a terminal; log lines otherwise."""

    def __init__(self, total_steps: int, start_step: int, batch_size: int, keys=(), stream=None,
                 interactive=None, label="step"):
        self.stream = stream or sys.stdout
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.total, self.batch_size, self.keys, self.label = total_steps, batch_size, tuple(keys), label
        self.start_step, self.start_time = start_step, time.time()
        self.bar = keras.utils.Progbar(total_steps, stateful_metrics=self.keys + ("examples/s",),
                                       unit_name=label, interval=0.0) if self.interactive else None
        if self.bar is not None:
            self.bar.update(start_step)

    def examples_per_second(self, step: int) -> float:
        return (step - self.start_step) * self.batch_size / max(time.time() - self.start_time, 1e-9)

    def update(self, step: int, scalars: dict, log: bool):
        """Moves the bar to `step`; when `log` (a log step) and not interactive, writes a log line."""
        shown = [(k, float(scalars[k])) for k in self.keys if k in scalars]
        shown.append(("examples/s", self.examples_per_second(step)))
        if self.bar is not None:
            self.bar.update(step, values=shown)
        elif log:
            logging.info("%s %d/%d  %s", self.label, step, self.total, "  ".join(f"{k}={v:.4g}" for k, v in scalars.items()))
