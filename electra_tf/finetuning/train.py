"""The fine-tuning training loop: AdamW with layer-wise rates, warm-up + linear decay, dev scores per epoch.

`train` compiles the model with `make_optimizer` (`ElectraAdamW`, per-variable
layer-wise multipliers), draws batches from `worker_train_dataset`, runs the
multi-step driver of `loop` and scores the dev sets after every epoch and at
the end. It writes TensorBoard scalars (`tensorboard/`: train loss, learning
rate, gradient norm, dev metrics) and `log.jsonl` through `ScalarWriter`, and
keeps the checkpoints a killed run resumes from (`checkpointing`).

Example:

>>> from electra_tf.options import RunOptions
>>> options = RunOptions(output_dir="unused", learning_rate=1e-4, train_batch_size=32, eval_batch_size=32,
...                      num_train_epochs=3, warmup_fraction=0.1, weight_decay=0.01, layerwise_lr_decay=0.8,
...                      max_seq_length=128)
>>> train_schedule(1000, options)  # (total steps, steps per epoch)
(93, 31)
"""

from __future__ import annotations

import time
from typing import Optional

import keras
import tensorflow as tf
from absl import logging

from electra_tf.training import loop
from electra_tf.finetuning import checkpointing
from electra_tf.finetuning.data import Padding, worker_train_dataset
from electra_tf.finetuning.evaluate import evaluate
from electra_tf.finetuning.layerwise_lr import layerwise_lr_multipliers
from electra_tf.finetuning.task import Task
from electra_tf.training.optimization import ElectraAdamW, WarmupLinearDecay
from electra_tf.options import ExecutionOptions, RunOptions


def ScalarWriter(run_dir):
    """TensorBoard scalars under `<run_dir>/tensorboard` plus `log.jsonl` ({"step", prefix: scalars})."""
    return loop.ScalarLogger(run_dir, "tensorboard", "log.jsonl")


def train_schedule(num_examples: int, options: RunOptions) -> tuple[int, int]:
    """(total steps, steps per epoch), the total as in the official code: int(N × epochs / B)."""
    steps_per_epoch = max(1, num_examples // options.train_batch_size)
    total = max(1, int(num_examples * options.num_train_epochs / options.train_batch_size))
    if options.max_train_steps:
        total = min(total, options.max_train_steps)
    return total, steps_per_epoch


def make_optimizer(model, options: RunOptions, config, total_steps: int):
    """`ElectraAdamW` with the layer-wise multipliers and the warm-up + linear decay schedule."""
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


def make_train_fn(strategy, model, execution: ExecutionOptions, stop_on_nonfinite=True):
    """`run(iterator, steps)`: the multi-step driver of `model.train_step`, looped and optimised as the resolved
    `execution` says (XLA, if it says so, is the step's own: `model.step.train_step`)."""
    return loop.make_step_driver(strategy, model.train_step, ["loss", "grad_norm"],
                                 stop_on_nonfinite=stop_on_nonfinite, graph_optimizer=execution.graph_optimizer,
                                 step_loop=execution.step_loop)


def _compile(model, options: RunOptions, config, total_steps: int, strategy):
    with strategy.scope():
        optimizer = make_optimizer(model, options, config, total_steps)
        model.compile(optimizer=optimizer)
        optimizer.build(model.trainable_variables)
    return optimizer


def train(model, task: Task, config, features, options: RunOptions, strategy, eval_context, tracker, writer,
          padding: Optional[Padding] = None) -> dict:
    """The training loop: evaluates after every epoch and at the end (when `eval_context` has sets).

    With a `run_dir` in `eval_context`, it checkpoints every `save_checkpoints_steps` (default: per
    epoch), at each epoch end and at the end, and resumes from the newest checkpoint there.
    """
    num_examples = len(features["input_ids"])
    total_steps, steps_per_epoch = train_schedule(num_examples, options)
    optimizer = _compile(model, options, config, total_steps, strategy)
    checkpoints = None
    if eval_context.run_dir:
        checkpoints = checkpointing.TrainingCheckpoints(eval_context.run_dir, model, optimizer, tracker)
    # Two counts (see `checkpointing.TrainProgress`): `step`, the optimizer steps applied (schedule, epochs,
    # checkpoint numbers), and `batches`, the batches consumed (the data position). fp16's skipped steps read
    # a batch each, so batches >= step.
    batches = checkpoints.restore() if checkpoints else 0
    step = first_step = loop.current_step(optimizer)
    iterator = iter(worker_train_dataset(strategy, features, options.train_batch_size, options.seed, padding,
                                         options.length_bucketing, start_step=batches))
    # fp16's loss-scale optimizer skips overflowed steps itself: they do not stop the driver, but a run
    # of them does (`loop.SkippedSteps`); any other non-finite step stops it at once.
    skipped_steps = loop.SkippedSteps(tolerate=options.mixed_precision == "fp16")
    train_steps = make_train_fn(strategy, model, options.execution,
                                stop_on_nonfinite=not skipped_steps.tolerate)
    logging.info("Fine-tuning %s: %d examples, %d steps (%d per epoch), batch %d, lr %g, layer decay %g, "
                 "loss %s over the batch, clip %g%s; %s", task.name, num_examples, total_steps,
                 steps_per_epoch, options.train_batch_size, options.learning_rate, options.layerwise_lr_decay,
                 model.loss_reduction, model.clip_norm, f"; resumed at step {step}" if step else "",
                 loop.runtime_summary(train_steps))
    save_every = options.save_checkpoints_steps or steps_per_epoch
    start = time.time()
    progress = loop.ProgressReporter(total_steps, step, options.train_batch_size, keys=("loss",))
    while step < total_steps:
        stop = loop.next_stop(step, total_steps, options.steps_per_loop, steps_per_epoch, options.log_steps,
                              save_every)
        outputs = train_steps(iterator, tf.constant(stop - step))
        batches += stop - step  # every attempted step read its batch (a non-tolerated skip raises below)
        previous, step = step, loop.current_step(optimizer)  # a skipped step does not count
        skipped_steps.observe(previous, step, stop - previous, int(outputs["nonfinite_steps"]), optimizer,
                              lambda: checkpoints.manager.latest_checkpoint if checkpoints else None,
                              what="fine-tuning step")
        if step == previous:
            continue
        log_now = step % options.log_steps == 0 or step == total_steps
        scalars = {"loss": float(outputs["loss"]), "learning_rate": loop.learning_rate_at(optimizer, step),
                   "grad_norm": float(outputs["grad_norm"]),
                   "steps_per_second": (step - first_step) / max(time.time() - start, 1e-9)}
        if log_now:
            writer.write(step, scalars, "train", nested=True)
        progress.update(step, scalars, log=log_now)
        epoch_end = step % steps_per_epoch == 0 or step == total_steps
        if eval_context.eval_sets and epoch_end:
            tracker(step, evaluate(model, eval_context))
        if checkpoints and (epoch_end or step % save_every == 0):  # after the evaluation, which it records
            checkpoints.save(step, batches)
    return {"train_steps": total_steps, "train_seconds": time.time() - start}
