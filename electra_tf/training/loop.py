"""The training loop shared by pre-training and fine-tuning.

A model's `train_step` (`electra_tf.model.step.train_step`: one optimisation step, its
collectives outside any XLA computation) returns replica partials; `make_step_driver`
runs `steps_per_loop` of them per call, looped inside one `tf.function` (what TPUs need) or on the
host around a traced step (the CPU default: a shorter first step), with or without TF's graph
optimizer (grappler), as the run's resolved execution options say. `ScalarLogger` writes
TensorBoard scalars plus a JSON-lines file, and `ProgressReporter` shows a progress bar on a
terminal and log lines otherwise.

Example:

>>> import tensorflow as tf
>>> total = tf.Variable(0.0)
>>> def step(batch):  # what a model's replica step returns: partials and whether the step was skipped
...     total.assign_add(batch)
...     return {"loss": total.read_value(), "nonfinite": tf.constant(0.0)}
>>> run = make_step_driver(tf.distribute.get_strategy(), step, ["loss"])
>>> out = run(iter(tf.data.Dataset.from_tensors(2.0).repeat()), tf.constant(3))
>>> float(out["loss"]), int(out["nonfinite_steps"])
(6.0, 0)
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

from electra_tf.model.step import loss_scale
from electra_tf.training import distribution
from electra_tf.training.cost import format_duration
from electra_tf.runtime import onednn_enabled, xla_cache_in_use


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


def make_step_driver(strategy, step_fn, output_names, stop_on_nonfinite=True, stop_requested=None,
                     graph_optimizer="off", input_report=None, step_loop="graph"):
    """`run(iterator, num_steps)`: up to `num_steps` steps, returning the last step's outputs summed over
    replicas (step functions return replica partials) and `nonfinite_steps`, the number of steps not
    applied because they were not finite.

    `step_loop` (the run's resolved `ExecutionOptions.step_loop`) says where the steps loop:
    - "graph": in one `tf.function`, the step traced once inside a `tf.while_loop` (TPUs need it; no host
      round trip between steps). Every variable and slot the step touches becomes a loop variable;
    - "host": one step per call of a `tf.function` holding the step alone, looped here: without the loop's
      variables the step traces and instantiates faster (docs/performance.md, "The first step"); each
      step then ends with the host reading whether it was finite, which a CPU step waits for anyway.
    Both run the same step function on the same iterator in the same order: the same steps, bit for bit
    (`tests/test_training.py`, `tests/test_loop.py`).
    Only the graph loop goes through autograph: step functions use explicit TF control flow
    (`tf.cond`, `tf.while_loop`), and converting them, with every function they call, took
    about a quarter of the tracing time.
    With `stop_on_nonfinite` the loop ends at the first such step, so the caller can name it.
    `stop_requested`, a boolean `tf.Variable` (e.g. set by a SIGTERM handler while the loop
    runs in another thread), ends the loop after the step in progress. `graph_optimizer`
    ("on", "off": the run's resolved `ExecutionOptions.graph_optimizer`) says whether grappler
    optimises the traced function. XLA is the step's business (`model.step.train_step`): the loop around
    it holds the all-reduces and is never compiled whole.
    `input_report` (e.g. `input_pipeline.SkipReport`) takes fields that are not the model's off
    each input element (`split`); they are summed over the call's steps into the outputs, from
    its `zeros()`.
    """
    if graph_optimizer not in ("on", "off"):
        raise ValueError(f"make_step_driver needs a resolved graph_optimizer ('on' or 'off'), got {graph_optimizer!r}")
    if step_loop not in ("graph", "host"):
        raise ValueError(f"make_step_driver needs a resolved step_loop ('graph' or 'host'), got {step_loop!r}")
    use_grappler = graph_optimizer == "on"
    step_fn = tf.autograph.experimental.do_not_convert(step_fn)
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

    def initial():
        outputs = {name: tf.constant(0.0) for name in output_names}
        return outputs, tf.constant(0.0), input_report.zeros() if input_report is not None else {}

    @tf.function
    def run(iterator, num_steps):
        outputs, skipped, reported = initial()
        for _ in tf.range(num_steps):
            outputs, nonfinite, report = one_step(iterator)
            skipped += nonfinite
            reported = {name: reported[name] + report[name] for name in reported}
            if stop_on_nonfinite and nonfinite > 0:
                break
            if stop_requested is not None and stop_requested:
                break
        return {**outputs, **reported, "nonfinite_steps": skipped}

    step = tf.function(one_step, autograph=False)

    def run_on_host(iterator, num_steps):
        outputs, skipped, reported = initial()
        for _ in range(int(num_steps)):
            outputs, nonfinite, report = step(iterator)
            skipped += nonfinite
            reported = {name: reported[name] + report[name] for name in reported}
            if stop_on_nonfinite and float(nonfinite) > 0:
                break
            if stop_requested is not None and bool(stop_requested.numpy()):
                break
        return {**outputs, **reported, "nonfinite_steps": skipped}

    def run_with_graph_options(iterator, num_steps):
        with grappler(use_grappler):
            return (run if step_loop == "graph" else run_on_host)(iterator, num_steps)

    def concrete_function(iterator):
        """The traced function a call runs (the whole loop, or the one step), traced here if not yet."""
        if step_loop == "graph":
            return run.get_concrete_function(iterator, tf.constant(1))
        return step.get_concrete_function(iterator)

    run_with_graph_options.grappler = use_grappler
    run_with_graph_options.step_loop = step_loop
    run_with_graph_options.concrete_function = concrete_function
    return run_with_graph_options


def runtime_summary(run) -> str:
    """For the training logs: which TF CPU kernels run, whether grappler optimises `run` and where its steps loop."""
    onednn = "on" if onednn_enabled() else "off"
    where = "in the graph" if run.step_loop == "graph" else "on the host"
    return (f"TF oneDNN CPU kernels {onednn}, graph optimizer (grappler) {'on' if run.grappler else 'off'}, "
            f"steps looped {where}, XLA:CPU kernel cache {xla_cache_in_use() or 'off'}")


class NonFiniteError(RuntimeError):
    """Training stopped at a step whose loss or gradient norm was NaN or infinite."""


class SkippedSteps:
    """Steps not applied: a NaN/Inf loss or gradient norm, or, under fp16, an overflow the loss scale absorbs.

    Without `tolerate` (fp32 without --skip_nonfinite_steps) the driver stops at the first one and
    `observe` raises `NonFiniteError` naming it. Otherwise they are counted and training goes on,
    but a run of `LIMIT` consecutive skipped steps raises the same one-line error: Keras'
    `LossScaleOptimizer` has no scale floor, so on a loss that stays non-finite it halves the scale
    forever and `iterations` never advances (the run would loop with no log, no checkpoint and no
    error). A healthy fp16 run skips a handful of steps while its scale settles (from 2^15, each
    skip halves it); `LIMIT` skipped in a row means a scale below 2^-49.
    """

    LIMIT = 64

    def __init__(self, tolerate: bool, limit: int = LIMIT):
        self.tolerate, self.limit = tolerate, limit
        self.total = self.consecutive = 0

    def observe(self, previous: int, step: int, attempted: int, skipped: int, optimizer, last_checkpoint,
                what: str = "step") -> int:
        """Counts a driver call's `skipped` steps (of `attempted`, from step `previous` to `step`); returns
        how many it skipped. Raises `NonFiniteError` when they cannot be tolerated any longer."""
        if not skipped:
            self.consecutive = 0
            return 0
        self.total += skipped
        # A call that applied no step skipped all it attempted; one that applied some ended the run of skips
        # before it (its own trailing skips are not known, so the bound may take one call more).
        self.consecutive = self.consecutive + attempted if step == previous else 0
        if not self.tolerate or self.consecutive >= self.limit:
            raise NonFiniteError(self.message(step, optimizer, last_checkpoint(), what))
        return skipped

    def message(self, step: int, optimizer, last_checkpoint, what: str) -> str:
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            why = (f"{self.consecutive} {what}s in a row were skipped: the loss or gradients are still not "
                   f"finite with the fp16 loss scale down to {float(loss_scale(optimizer)):.3g}")
        elif self.tolerate:
            why = f"{self.consecutive} {what}s in a row were skipped: the loss or gradient norm is not finite"
        else:
            why = "the loss or gradient norm is not finite"
        return (f"{what} {step + 1}: {why}; stopping (the {what} was not applied). Last good checkpoint: "
                f"{last_checkpoint or 'none'}. Lower the learning rate"
                + ("" if self.tolerate else ", or pass --skip_nonfinite_steps to skip such steps"))


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
