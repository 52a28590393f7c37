"""The pre-training loop: strategy, checkpoints, TensorBoard, resume, export.

`ElectraPretrainer.train_step` does the work of one step; this module runs
it under a `tf.distribute` strategy, `steps_per_loop` steps per `tf.function`
call (what TPUs need), and keeps a `tf.train.CheckpointManager` holding the
model, the optimizer (its step counter drives the schedule and the masking
seeds) and the input iterator. Re-running the same command restores all three,
so a resumed run repeats an uninterrupted one exactly. A custom loop rather
than `Model.fit` because `fit` cannot checkpoint its data iterator.

Scalars go to TensorBoard (`<model_dir>/train`) and, one JSON object per log
line, to `<model_dir>/train_log.jsonl`.

Example (see `run_pretraining.py` for the command-line front end):

>>> from electra_tf.training import TrainOptions, train  # doctest: +SKIP
>>> train(get_config("tiny"), TrainOptions(data_dir="data", model_dir="out"), strategy)  # doctest: +SKIP
"""

import dataclasses
import json
import os
import time

import keras
import tensorflow as tf
from absl import logging

from electra_tf import export, input_pipeline
from electra_tf.config import ElectraConfig
from electra_tf.optimization import create_optimizer
from electra_tf.pretrainer import ElectraPretrainer

RUN_CONFIG = "electra_config.json"


@dataclasses.dataclass
class TrainOptions:
    data_dir: str
    model_dir: str
    seed: int = 0
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_steps: int = 100
    steps_per_loop: int = 100
    jit_compile: bool = False
    mixed_precision: str = "none"
    shuffle_buffer: int = 1000
    init_checkpoint: str | None = None
    stop_after_steps: int | None = None  # stop this invocation early (like a pre-emption)
    export: bool = True


def check_run_config(model_dir: str, config: ElectraConfig):
    """Stores `config` in `model_dir`; refuses to resume a run whose architecture differs."""
    path = os.path.join(model_dir, RUN_CONFIG)
    if os.path.exists(path):
        with open(path) as f:
            previous = ElectraConfig.from_dict(json.load(f))
        diff = {f: (getattr(previous, f), getattr(config, f)) for f in export.ARCHITECTURE_FIELDS
                if getattr(previous, f) != getattr(config, f)}
        if diff:
            details = ", ".join(f"{f}: {old} in {model_dir} vs {new} now" for f, (old, new) in diff.items())
            raise ValueError(f"--model_dir {model_dir} holds a run with a different model ({details}); "
                             "use a new --model_dir or the same flags")
    os.makedirs(model_dir, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(config.to_json())
    os.replace(tmp, path)


def build_model(config, strategy, special_token_ids, seed, mixed_precision):
    with strategy.scope():
        model = ElectraPretrainer(config, special_token_ids=special_token_ids, seed=seed)
        optimizer = create_optimizer(config)
        if mixed_precision == "fp16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        model.compile(optimizer=optimizer)
        model.build_all()
        optimizer.build(model.trainable_variables)
    return model, optimizer


def rng_states(model) -> list:
    """The dropout RNG state variables, which Keras keeps outside TF's object graph.

    Without them a resumed run would draw different dropout masks than an
    uninterrupted one.
    """
    generators = [g for layer in model._flatten_layers() for g in getattr(layer, "_seed_generators", [])]
    return [g.state.value for g in generators]


def make_train_fn(strategy, model, jit_compile=False):
    step_fn = tf.function(model.train_step, jit_compile=True) if jit_compile else model.train_step

    def one_step(iterator):
        batch = input_pipeline.split_for_replicas(strategy, next(iterator))
        return strategy.run(step_fn, args=(batch,))

    output_names = model.step_output_names

    @tf.function
    def train_steps(iterator, num_steps):
        # One traced step inside the loop (tracing dominates start-up on CPU);
        # the last step's globally reduced outputs ride along as loop variables.
        outputs = {name: tf.constant(0.0) for name in output_names}
        for _ in tf.range(num_steps):
            per_replica = one_step(iterator)
            outputs = {name: strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[name], axis=None)
                       for name in output_names}
        return outputs

    return train_steps


def initialize_from(model, init_checkpoint):
    """Continued pre-training: weights from an export, a HF/official checkpoint or another run."""
    from electra_tf import convert

    if export.is_export_dir(init_checkpoint):
        model.load_weights(os.path.join(init_checkpoint, export.PRETRAINER_WEIGHTS))
    elif convert.detect_format(init_checkpoint) in ("hf", "official"):
        convert.initialize_pretrainer(model, init_checkpoint)
    else:
        latest = tf.train.latest_checkpoint(os.path.join(init_checkpoint, "checkpoints")) or \
            tf.train.latest_checkpoint(init_checkpoint)
        if latest is None:
            raise ValueError(f"--init_checkpoint: no electra-tf export or checkpoint found in {init_checkpoint!r}")
        tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    logging.info("Initialised weights from %s", init_checkpoint)


def checkpoint_config(init_checkpoint: str) -> ElectraConfig:
    """The architecture stored with `--init_checkpoint` (export, HF, official, or a run directory)."""
    from electra_tf import convert

    run_config = os.path.join(init_checkpoint, RUN_CONFIG)
    if os.path.isfile(run_config) and not export.is_export_dir(init_checkpoint):
        with open(run_config) as f:
            return ElectraConfig.from_dict(json.load(f))
    config, _, _ = convert.load_any(init_checkpoint, strict=False)
    return config


class ScalarLogger:
    """Writes scalars to TensorBoard and to a JSON-lines file."""

    def __init__(self, model_dir):
        self.writer = tf.summary.create_file_writer(os.path.join(model_dir, "train"))
        self.jsonl = os.path.join(model_dir, "train_log.jsonl")

    def write(self, step: int, scalars: dict):
        with self.writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(f"train/{name}", value)
        self.writer.flush()
        with open(self.jsonl, "a") as f:
            f.write(json.dumps({"step": step, **scalars}) + "\n")


def current_step(optimizer) -> int:
    return int(optimizer.iterations.value.numpy())  # .value: a MirroredVariable under a strategy


def _next_stop(step, options, num_train_steps):
    boundaries = [num_train_steps, step + options.steps_per_loop,
                  (step // options.log_steps + 1) * options.log_steps,
                  (step // options.save_checkpoints_steps + 1) * options.save_checkpoints_steps]
    if options.stop_after_steps is not None:
        boundaries.append(options.stop_after_steps)
    return min(boundaries)


def _learning_rate(optimizer, step):
    schedule = getattr(optimizer, "inner_optimizer", optimizer)._learning_rate
    return float(schedule(step)) if callable(schedule) else float(schedule)


def train(config: ElectraConfig, options: TrainOptions, strategy: tf.distribute.Strategy) -> list[dict]:
    """Trains to `config.num_train_steps` (resuming if possible); returns the logged scalars."""
    manifest = input_pipeline.load_checked_manifest(options.data_dir, config)
    check_run_config(options.model_dir, config)
    keras.utils.set_random_seed(options.seed)
    model, optimizer = build_model(config, strategy, manifest["special_token_ids"], options.seed,
                                   options.mixed_precision)
    dataset = input_pipeline.worker_dataset(strategy, options.data_dir, manifest, config.train_batch_size,
                                            seed=options.seed, shuffle_buffer=options.shuffle_buffer)
    iterator = iter(dataset)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, iterator=iterator,
                                     dropout_rng=rng_states(model))
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(options.model_dir, "checkpoints"),
                                         max_to_keep=options.keep_checkpoint_max,
                                         step_counter=optimizer.iterations)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        logging.info("Resumed from %s at step %d", manager.latest_checkpoint, current_step(optimizer))
    elif options.init_checkpoint:
        initialize_from(model, options.init_checkpoint)

    train_steps = make_train_fn(strategy, model, options.jit_compile)
    logger = ScalarLogger(options.model_dir)
    history = []
    step = current_step(optimizer)
    window_start, window_step = time.time(), step
    logging.info("Training %s (%s) from step %d to %d, global batch %d, %d replica(s)", config.model_size,
                 config.objective, step, config.num_train_steps, config.train_batch_size,
                 strategy.num_replicas_in_sync)
    while step < config.num_train_steps and (options.stop_after_steps is None or step < options.stop_after_steps):
        stop = _next_stop(step, options, config.num_train_steps)
        outputs = train_steps(iterator, tf.constant(stop - step))
        previous, step = step, current_step(optimizer)
        if step == previous:  # fp16: every step of the call overflowed and was skipped
            continue
        if step % options.log_steps == 0 or step >= config.num_train_steps:
            elapsed = time.time() - window_start
            scalars = {name: float(value) for name, value in model.metric_results().items()}
            scalars.update(step_loss=float(outputs["loss"]), learning_rate=_learning_rate(optimizer, step),
                           examples_per_second=(step - window_step) * config.train_batch_size / max(elapsed, 1e-9))
            logger.write(step, scalars)
            history.append({"step": step, **scalars})
            logging.info("step %d/%d  %s", step, config.num_train_steps,
                         "  ".join(f"{k}={v:.4g}" for k, v in scalars.items()))
            for metric in model.metrics:
                metric.reset_state()
            window_start, window_step = time.time(), step
        if step % options.save_checkpoints_steps == 0 or step >= config.num_train_steps:
            manager.save(checkpoint_number=step)
    if options.export and step >= config.num_train_steps:
        export.export_pretrained(model, os.path.join(options.model_dir, "export"),
                                 vocab_file=manifest.get("vocab_file"), step=step)
    return history


def export_latest(config: ElectraConfig, model_dir: str, special_token_ids: dict, vocab_file=None) -> str:
    """Exports the newest checkpoint of `model_dir` without training (`--export_only`)."""
    strategy = tf.distribute.get_strategy()
    model, optimizer = build_model(config, strategy, special_token_ids, 0, "none")
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    if latest is None:
        raise ValueError(f"--model_dir {model_dir}: no checkpoint to export")
    tf.train.Checkpoint(model=model, optimizer=optimizer).restore(latest).expect_partial()
    return export.export_pretrained(model, os.path.join(model_dir, "export"), vocab_file=vocab_file,
                                    step=current_step(optimizer))
