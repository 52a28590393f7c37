"""One optimisation step of a model that computes its own losses: what Keras' `Model.train_step` does, for ours.

A model that trains here implements `StepModel` (as `ElectraPretrainer` and `FinetuningModel` do;
tests/test_step_protocol.py checks both):

* `compute_losses(batch, training=True, **context) -> dict` with a scalar `"loss"`: this
  replica's *partial* of the global-batch loss (sums divided by global counts), plus whatever
  its metrics need;
* `update_metrics(batch, outputs)`: running metrics for the log;
* `step_context(batch) -> StepContext`: what its losses need from outside the batch (per-example
  tensors, sliced with it into micro-batches, and whole-batch values such as all-reduced loss
  normalisers), passed to `compute_losses` as keyword arguments. A model without it (a plain
  duck-typed one, as below) trains with an empty context.

With K > 1 micro-batches the step also reads `step_output_names` (the loss partials summed over them).

`train_step` runs the one gradient-apply sequence: gradients → all-reduce over replicas → undo
the fp16 loss scale → global-norm clip → optimizer. A step whose loss or gradient norm is not
finite is not applied and is reported as `nonfinite = 1` (under fp16 the loss-scale optimizer
lowers its scale and skips it itself; it is reported the same way, so a loop can bound a run of
them).

Where the gradients are computed, and what is compiled: with one micro-batch and no XLA, the
model's `compute_losses` runs as is (its normalisers all-reduced inside). With K > 1 micro-batches
or `jit_compile`, the context is computed first (its collectives included), then the K
micro-batches' forward and backward passes run as one function, XLA-compiled under `jit_compile`,
which holds no collective: the gradient all-reduce and the optimizer update (whose cross-replica
updates go through `merge_call` under `MirroredStrategy`) run after it, outside XLA. So the
compiled part is the same on one device, on N mirrored replicas, on many workers and on a TPU
(see docs/performance.md, "XLA under a strategy").

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

from typing import Mapping, Protocol, TypedDict, runtime_checkable

import keras
import tensorflow as tf

from electra_tf.ops.replicas import all_reduce_sum

NOT_SUMMED = ("grad_norm", "nonfinite")  # step outputs that are not sums over micro-batches

# A (micro-)batch: `input_ids`, `input_mask`, `segment_ids` `[B, S]` int, and whatever targets the model reads.
Batch = Mapping[str, tf.Tensor]


class StepContext(TypedDict, total=False):
    """`step_context`'s answer: `per_example` tensors (first dimension B, sliced with the batch into micro-batches)
    and whole-batch `kwargs` (e.g. all-reduced loss normalisers); both go to `compute_losses` as keywords."""

    per_example: dict[str, tf.Tensor]
    kwargs: dict[str, object]


@runtime_checkable
class StepModel(Protocol):
    """What `train_step` trains: a Keras model that computes its own losses and metrics."""

    def compute_losses(self, batch: Batch, training: bool = True, **context) -> dict[str, tf.Tensor]:
        """This replica's outputs on `batch`: a scalar float `"loss"`, the global-batch loss's partial (sums
        divided by global counts, so the partials of every replica and micro-batch sum to it), other scalar
        partials (`step_output_names`) and the tensors `update_metrics` reads."""

    def update_metrics(self, batch: Batch, outputs: dict[str, tf.Tensor]) -> None:
        """Updates the running metrics with one replica's (micro-)batch `outputs` of `compute_losses`."""

    def step_context(self, batch: Batch) -> StepContext:
        """What `compute_losses` needs beyond a micro-batch of `batch` (`StepContext`); may be empty."""


def loss_scale(optimizer) -> tf.Tensor:
    """The dynamic fp16 loss scale (1 for other optimizers)."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return tf.cast(optimizer.dynamic_scale if optimizer.built else optimizer.initial_scale, tf.float32)
    return tf.constant(1.0)


def apply_gradients(optimizer, grads, variables, clip_norm: float, loss=None) -> tuple[tf.Tensor, tf.Tensor]:
    """Reduces, unscales, clips (global norm, after the all-reduce) and applies.

    Gradients are summed over replicas *before* the clip, so N replicas clip what one
    device would (Keras would clip each replica's partial gradient). Returns the
    pre-clip norm and whether the step was skipped as non-finite (1.0) or applied (0.0);
    under fp16 a skipped step is one whose scaled gradients overflowed.

    A non-finite step is skipped by the optimizer's own `apply_if` where it has one
    (`ElectraAdamW`'s fused update: no branch, the skipped step's gradients zeroed by the
    clip), else by a `tf.cond` around `apply`, whose branch has an input per gradient,
    variable and slot, each traced, matched by a dummy in the other branch and instantiated:
    a large part of the first step's tracing (docs/performance.md, "The first step, measured").
    """
    grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v) for g, v in zip(grads, variables)]
    grads = all_reduce_sum(grads)
    scale = loss_scale(optimizer)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        grads, grad_norm = clip_by_global_norm(grads, clip_norm * scale)
        optimizer.apply(grads, variables)  # skips overflowed steps and lowers the scale itself
        return grad_norm / scale, 1.0 - tf.cast(tf.math.is_finite(grad_norm), tf.float32)
    grad_norm = tf.linalg.global_norm(grads)
    finite = tf.math.is_finite(grad_norm)
    if loss is not None:
        finite = tf.logical_and(finite, tf.math.is_finite(all_reduce_sum(loss)))
    if getattr(optimizer, "can_apply_if", lambda _: False)(variables):
        optimizer.apply_if(finite, clipped(grads, grad_norm, clip_norm * scale, keep=finite), variables)
    else:
        _apply_if(finite, optimizer, clipped(grads, grad_norm, clip_norm * scale), variables)
    return grad_norm / scale, 1.0 - tf.cast(finite, tf.float32)


def clip_by_global_norm(grads, clip_norm):
    """`tf.clip_by_global_norm`'s arithmetic (a NaN or infinite norm makes every gradient NaN)
    without its per-tensor `Identity` and colocation scopes (two graph nodes per variable fewer)."""
    norm = tf.linalg.global_norm(grads)
    return clipped(grads, norm, clip_norm), norm


def clipped(grads, norm, clip_norm, keep=None):
    """`grads` scaled to global norm at most `clip_norm`, given their global `norm`; a NaN or infinite
    norm makes every gradient NaN, unless `keep` (a boolean) is given: then every gradient is zero
    where `keep` is false (`multiply_no_nan`: 0 · NaN is 0) and bit for bit the plain clip's where
    it is true."""
    with tf.name_scope("clip_by_global_norm"):
        scale = clip_norm * tf.minimum(1.0 / norm, tf.constant(1.0, norm.dtype) / clip_norm)
        scale = scale + (norm - norm)
        if keep is None:
            return [g * tf.cast(scale, g.dtype) for g in grads]
        scale = tf.where(keep, scale, tf.zeros_like(scale))
        return [tf.math.multiply_no_nan(g, tf.cast(scale, g.dtype)) for g in grads]


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


def train_step(model: StepModel, batch: Batch, clip_norm: float, accumulation_steps: int = 1,
               jit_compile: bool = False) -> dict:
    """One optimisation step of `model` on this replica's slice of the batch; returns its outputs.

    With `accumulation_steps` K > 1 the slice is cut into K micro-batches whose gradients are
    summed before the one update; the model's `step_context(batch)` supplies what makes that
    equal to the whole batch's step (whole-batch loss normalisers, per-example seeds).
    `jit_compile`: the forward and backward passes (not the collectives, not the update) as one
    XLA computation.
    """
    variables = model.trainable_variables
    if accumulation_steps == 1 and not jit_compile:
        with tf.GradientTape() as tape:
            outputs = model.compute_losses(batch, training=True)
            scaled_loss = model.optimizer.scale_loss(outputs["loss"])
        grads = tape.gradient(scaled_loss, variables)
        model.update_metrics(batch, outputs)
    else:
        context = step_context(model, batch)  # collectives first: none may run inside the compiled part
        outputs, grads = gradient_function(model, accumulation_steps, jit_compile)(batch, context)
    outputs["grad_norm"], outputs["nonfinite"] = apply_gradients(
        model.optimizer, grads, variables, clip_norm, loss=outputs["loss"])
    return outputs


def step_context(model: StepModel, batch: Batch) -> StepContext:
    """The model's `step_context(batch)` (an empty one for a model without it), both parts present."""
    context = model.step_context(batch) if hasattr(model, "step_context") else {}
    return {"per_example": dict(context.get("per_example", {})), "kwargs": dict(context.get("kwargs", {}))}


def gradient_function(model, accumulation_steps: int, jit_compile: bool):
    """`fn(batch, context) -> (summed outputs, summed gradients)` over K micro-batches, cached on the model
    (one `tf.function` per setting, traced per replica device)."""
    cache = model.__dict__.setdefault("_electra_gradient_functions", {})
    key = (accumulation_steps, jit_compile)
    if key not in cache:
        def gradients(batch, context):
            return _micro_batch_gradients(model, batch, context, accumulation_steps)

        cache[key] = tf.function(gradients, jit_compile=True, autograph=False) if jit_compile else gradients
    return cache[key]


def _micro_batch_gradients(model, batch, context, num_micro):
    variables = model.trainable_variables
    sliced = {"batch": batch, **context["per_example"]}
    micro = tf.nest.map_structure(
        lambda t: tf.reshape(t, tf.concat([[num_micro, -1], tf.shape(t)[1:]], 0)), sliced)

    def one(k):
        part = tf.nest.map_structure(lambda t: t[k], micro)
        extra = {key: value for key, value in part.items() if key != "batch"}
        with tf.GradientTape() as tape:
            outputs = model.compute_losses(part["batch"], training=True, **extra, **context["kwargs"])
            scaled_loss = model.optimizer.scale_loss(outputs["loss"])
        grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                 for v, g in zip(variables, tape.gradient(scaled_loss, variables))]
        model.update_metrics(part["batch"], outputs)
        return scalars(outputs), grads

    if num_micro == 1:
        return one(0)
    # The step's loss partials (`model.step_output_names`) summed over the micro-batches; the loop traces
    # the forward and backward pass once.
    names = [name for name in model.step_output_names if name not in NOT_SUMMED]

    def body(k, grads, totals):
        outputs, step_grads = one(k)
        return k + 1, [total + g for total, g in zip(grads, step_grads)], \
            {name: totals[name] + outputs[name] for name in names}

    # An explicit loop: the step is traced without autograph (see `training.loop.make_step_driver`).
    _, grads, totals = tf.while_loop(
        lambda k, grads, totals: k < num_micro, body,
        (tf.constant(0), [tf.zeros_like(v) for v in variables], {name: tf.constant(0.0) for name in names}))
    return totals, grads


def scalars(outputs: dict) -> dict:
    """The scalar float outputs of `compute_losses` (the loss partials): what sums over micro-batches and
    leaves the compiled function."""
    return {name: value for name, value in outputs.items()
            if isinstance(value, tf.Tensor) and value.shape.rank == 0 and value.dtype.is_floating}
