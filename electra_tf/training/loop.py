"""The training loop shared by pre-training and fine-tuning.

A model that trains here implements two methods (as `ElectraPretrainer` and
`FinetuningModel` do); everything else is common:

* `compute_losses(batch, training=True) -> dict` with a scalar `"loss"`: this
  replica's *partial* of the global-batch loss (sums divided by global counts),
  plus whatever its metrics need;
* `update_metrics(batch, outputs)`: running metrics for the log.

`train_step(model, batch)` runs the one gradient-apply sequence: tape →
zero-fill missing gradients → all-reduce over replicas → undo the fp16 loss
scale → global-norm clip → optimizer. A step whose loss or gradient norm is
not finite is not applied (outside fp16, whose loss-scale optimizer skips
overflows itself) and is reported as `nonfinite = 1`; the driver stops its
loop there unless told to skip such steps. `make_step_driver` compiles
`steps_per_loop` steps into one `tf.function` (what TPUs need, and on CPU it
traces the step once), run with or without TF's graph optimizer (grappler) as
`--graph_optimizer` says (`grappler_enabled`: off on CPUs by default).
`ScalarLogger` writes TensorBoard scalars plus a JSON-lines file, and
`ProgressReporter` shows a progress bar on a terminal and log lines otherwise.

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

import contextlib
import json
import os
import sys
import time

import keras
import tensorflow as tf
from absl import logging

from electra_tf.training import distribution
from electra_tf.ops.replicas import all_reduce_sum
from electra_tf.training.cost import format_duration
from electra_tf.options import ExecutionOptions
from electra_tf.runtime import onednn_enabled


def loss_scale(optimizer) -> tf.Tensor:
    """The dynamic fp16 loss scale (1 for other optimizers)."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return tf.cast(optimizer.dynamic_scale, tf.float32)
    return tf.constant(1.0)


def apply_gradients(optimizer, grads, variables, clip_norm: float, loss=None) -> tuple[tf.Tensor, tf.Tensor]:
    """Reduces, unscales, clips (global norm, after the all-reduce) and applies.

    Gradients are summed over replicas *before* the clip, so N replicas clip what one
    device would (Keras would clip each replica's partial gradient). Returns the
    pre-clip norm and whether the step was skipped as non-finite (1.0) or applied (0.0).
    """
    grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v) for g, v in zip(grads, variables)]
    grads = all_reduce_sum(grads)
    scale = loss_scale(optimizer)
    grads, grad_norm = clip_by_global_norm(grads, clip_norm * scale)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer.apply(grads, variables)  # skips overflowed steps and lowers the scale itself
        return grad_norm / scale, tf.constant(0.0)
    finite = tf.math.is_finite(grad_norm)
    if loss is not None:
        finite = tf.logical_and(finite, tf.math.is_finite(all_reduce_sum(loss)))
    _apply_if(finite, optimizer, grads, variables)
    return grad_norm / scale, 1.0 - tf.cast(finite, tf.float32)


def clip_by_global_norm(grads, clip_norm):
    """`tf.clip_by_global_norm`'s arithmetic (a NaN or infinite norm makes every gradient NaN)
    without its per-tensor `Identity` and colocation scopes (two graph nodes per variable fewer)."""
    norm = tf.linalg.global_norm(grads)
    with tf.name_scope("clip_by_global_norm"):
        scale = clip_norm * tf.minimum(1.0 / norm, tf.constant(1.0, norm.dtype) / clip_norm)
        scale = scale + (norm - norm)
        return [g * tf.cast(scale, g.dtype) for g in grads], norm


def _apply_if(finite, optimizer, grads, variables):
    """`optimizer.apply` only where `finite` (the same on every replica), as Keras' loss-scale
    optimizer skips overflowed steps: strategies that synchronise through `merge_call` (e.g.
    MirroredStrategy) need the condition taken in cross-replica context."""

    def apply():
        optimizer.apply(grads, variables)
        return tf.constant(True)

    if tf.__internal__.distribute.strategy_supports_no_merge_call():
        tf.cond(finite, apply, lambda: tf.constant(False))
        return

    def cross_replica(strategy, finite, grads, variables):
        def apply_on_replicas():
            strategy.extended.call_for_each_replica(lambda g, v: optimizer.apply(g, v), args=(grads, variables))
            return tf.constant(True)

        tf.cond(strategy.experimental_local_results(finite)[0], apply_on_replicas, lambda: tf.constant(False))

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(finite, grads, variables))


def train_step(model, batch, clip_norm: float, accumulation_steps: int = 1) -> dict:
    """One optimisation step of `model` on this replica's slice of the batch; returns its outputs.

    With `accumulation_steps` K > 1 the slice is cut into K micro-batches whose gradients are
    summed before the one update; the model's `accumulation_context(batch)` supplies what makes
    that equal to the whole batch's step (whole-batch loss normalisers, per-example seeds).
    """
    variables = model.trainable_variables
    if accumulation_steps > 1:
        outputs, grads = _accumulated_gradients(model, batch, variables, accumulation_steps)
    else:
        with tf.GradientTape() as tape:
            outputs = model.compute_losses(batch, training=True)
            scaled_loss = model.optimizer.scale_loss(outputs["loss"])
        grads = tape.gradient(scaled_loss, variables)
        model.update_metrics(batch, outputs)
    outputs["grad_norm"], outputs["nonfinite"] = apply_gradients(
        model.optimizer, grads, variables, clip_norm, loss=outputs["loss"])
    return outputs


def _accumulated_gradients(model, batch, variables, num_micro):
    context = model.accumulation_context(batch)
    sliced = {"batch": batch, **context["per_example"]}
    micro = tf.nest.map_structure(
        lambda t: tf.reshape(t, tf.concat([[num_micro, -1], tf.shape(t)[1:]], 0)), sliced)
    names = [n for n in model.step_output_names if n not in ("grad_norm", "nonfinite")]

    def body(k, grads, totals):
        part = tf.nest.map_structure(lambda t: t[k], micro)
        extra = {key: value for key, value in part.items() if key != "batch"}
        with tf.GradientTape() as tape:
            outputs = model.compute_losses(part["batch"], training=True, normalizers=context["normalizers"], **extra)
            scaled_loss = model.optimizer.scale_loss(outputs["loss"])
        step_grads = tape.gradient(scaled_loss, variables)
        grads = [total if g is None else total + tf.convert_to_tensor(g) for total, g in zip(grads, step_grads)]
        totals = {name: totals[name] + outputs[name] for name in names}
        model.update_metrics(part["batch"], outputs)
        return k + 1, grads, totals

    # An explicit loop: the step is traced without autograph (see `make_step_driver`).
    _, grads, totals = tf.while_loop(
        lambda k, grads, totals: k < num_micro, body,
        (tf.constant(0), [tf.zeros_like(v) for v in variables], {name: tf.constant(0.0) for name in names}))
    return totals, grads


def grappler_enabled(mode: str, strategy) -> bool:
    """Whether the training loop runs TF's graph optimizer (grappler) under `--graph_optimizer=mode`
    ("auto" resolves for `strategy`'s devices: `ExecutionOptions.resolve`)."""
    resolved = ExecutionOptions(graph_optimizer=mode).resolve(distribution.device_types(strategy))
    return resolved.graph_optimizer == "on"


@contextlib.contextmanager
def grappler(enabled: bool):
    """TF's graph optimizer on or off for the functions first called inside (then as before).

    The setting is process-wide, but TF instantiates a function once per setting and keeps
    both, so switching back and forth around the calls of one function costs nothing after
    its first call under each.
    """
    options = tf.config.optimizer.get_experimental_options()
    previous = options.get("disable_meta_optimizer", False)
    if previous == (not enabled):
        yield
        return
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": not enabled})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": previous})


def make_step_driver(strategy, step_fn, output_names, jit_compile=False, stop_on_nonfinite=True,
                     stop_requested=None, graph_optimizer="auto", input_report=None):
    """`run(iterator, num_steps)`: up to `num_steps` steps in one `tf.function`, returning the last
    step's outputs summed over replicas (step functions return replica partials) and
    `nonfinite_steps`, the number of steps not applied because they were not finite.

    The step is traced once, inside the loop; the outputs ride along as loop variables. Only
    the loop itself goes through autograph: step functions use explicit TF control flow
    (`tf.cond`, `tf.while_loop`), and converting them, with every function they call, took
    about a quarter of the tracing time.
    With `stop_on_nonfinite` the loop ends at the first such step, so the caller can name it.
    `stop_requested`, a boolean `tf.Variable` (e.g. set by a SIGTERM handler while the loop
    runs in another thread), ends the loop after the step in progress. `graph_optimizer`
    ("auto", "on", "off") says whether grappler optimises the loop (`grappler_enabled`).
    `input_report` (e.g. `input_pipeline.SkipReport`) takes fields that are not the model's off
    each input element (`split`); they are summed over the call's steps into the outputs, from
    its `zeros()`.
    """
    use_grappler = grappler_enabled(graph_optimizer, strategy)
    step_fn = tf.autograph.experimental.do_not_convert(step_fn)
    step_fn = tf.function(step_fn, jit_compile=True) if jit_compile else step_fn
    output_names = [name for name in output_names if name != "nonfinite"]

    def one_step(iterator):
        element = next(iterator)
        report = {}
        if input_report is not None:
            element, report = input_report.split(element)
        batch = distribution.split_for_replicas(strategy, element)
        per_replica = strategy.run(step_fn, args=(batch,))
        outputs = {name: strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[name], axis=None)
                   for name in output_names}
        # The same on every replica (decided on all-reduced values): take one replica's.
        nonfinite = strategy.experimental_local_results(per_replica["nonfinite"])[0]
        return outputs, nonfinite, report

    @tf.function
    def run(iterator, num_steps):
        outputs = {name: tf.constant(0.0) for name in output_names}
        skipped = tf.constant(0.0)
        reported = input_report.zeros() if input_report is not None else {}
        for _ in tf.range(num_steps):
            outputs, nonfinite, report = one_step(iterator)
            skipped += nonfinite
            reported = {name: reported[name] + report[name] for name in reported}
            if stop_on_nonfinite and nonfinite > 0:
                break
            if stop_requested is not None and stop_requested:
                break
        return {**outputs, **reported, "nonfinite_steps": skipped}

    def run_with_graph_options(iterator, num_steps):
        with grappler(use_grappler):
            return run(iterator, num_steps)

    run_with_graph_options.grappler = use_grappler
    run_with_graph_options.function = run  # the tf.function itself (e.g. to trace it alone)
    return run_with_graph_options


def runtime_summary(run) -> str:
    """For the training logs: which TF CPU kernels run and whether grappler optimises `run`."""
    onednn = "on" if onednn_enabled() else "off"
    return f"TF oneDNN CPU kernels {onednn}, graph optimizer (grappler) {'on' if run.grappler else 'off'}"


class NonFiniteError(RuntimeError):
    """Training stopped at a step whose loss or gradient norm was NaN or infinite."""


class CorruptDataError(RuntimeError):
    """Training stopped at a corrupt record of the input shards (no checkpoint is written after it)."""


def check_finite_weights(model, step: int, what: str):
    """Raises `NonFiniteError` if any weight is NaN/Inf: never checkpoint or export such weights."""
    floats = [v for v in model.weights if "float" in str(v.dtype)]
    finite = tf.stack([tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))) for v in floats]).numpy()
    bad = [v.path for v, ok in zip(floats, finite) if not ok]
    if bad:
        raise NonFiniteError(f"step {step}: {len(bad)} weight(s) are not finite (e.g. {bad[0]}); "
                             f"not writing the {what}")


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
    """TensorBoard scalars (the run `<log_dir>/<subdir>`) plus one JSON object per write in `jsonl_name`.

    A run that holds one split, named after it (pre-training's `train/` and `eval/`), tags a metric by its name
    alone (`disc_auc` in both), so TensorBoard draws the splits' curves on one chart, as Keras' `train/` and
    `validation/` runs; a run that several splits share (fine-tuning's `tensorboard/`) tags `<split>/<name>`.
    """

    def __init__(self, log_dir: str, subdir: str, jsonl_name: str):
        self.writer = tf.summary.create_file_writer(os.path.join(log_dir, subdir))
        self.run_name = os.path.basename(os.path.normpath(subdir))
        self.jsonl = os.path.join(log_dir, jsonl_name)

    def tag(self, name: str, prefix: str) -> str:
        return name if prefix == self.run_name else f"{prefix}/{name}"

    def write(self, step: int, scalars: dict, prefix: str = "train", nested: bool = False):
        with self.writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(self.tag(name, prefix), value)
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

    def eta_seconds(self, step: int) -> float:
        """The remaining steps at the average rate since the start (the first call's tracing included)."""
        done = step - self.start_step
        return (self.total - step) * (time.time() - self.start_time) / done if done > 0 else float("nan")

    def update(self, step: int, scalars: dict, log: bool):
        """Moves the bar to `step`; when `log` (a log step) and not interactive, writes a log line."""
        shown = [(k, float(scalars[k])) for k in self.keys if k in scalars]
        shown.append(("examples/s", self.examples_per_second(step)))
        if self.bar is not None:
            self.bar.update(step, values=shown)
        elif log:
            logging.info("%s %d/%d  ETA %s  %s", self.label, step, self.total, format_duration(self.eta_seconds(step)),
                         "  ".join(f"{k}={v:.4g}" for k, v in scalars.items()))


class StepTimer:
    """Times a run's first steps and logs what the rest will take.

    The loop returns to Python after the first step (its call includes tracing) and after
    `FIRST_STEPS` steady steps, so the cost shows before a long run has spent it.
    """

    FIRST_STEPS = 2

    def __init__(self, start_step: int, total_steps: int):
        self.start_step, self.total = start_step, total_steps
        self.started = self.first_done = time.time()

    @property
    def stops(self) -> tuple:
        return (self.start_step + 1, self.start_step + 1 + self.FIRST_STEPS)

    def observe(self, step: int) -> None:
        now = time.time()
        if step == self.start_step + 1:
            logging.info("First step: %.1f s (tracing the step included).", now - self.started)
            self.first_done = now
        elif step == self.start_step + 1 + self.FIRST_STEPS:
            per_step = (now - self.first_done) / self.FIRST_STEPS
            logging.info("Steps %d-%d: %s per step; the %s steps to go take %s at this rate.",
                         self.start_step + 2, step, format_duration(per_step), f"{self.total - step:,}",
                         format_duration(per_step * (self.total - step)))
