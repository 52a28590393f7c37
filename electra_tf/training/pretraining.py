"""The pre-training loop: strategy, checkpoints, TensorBoard, resume, export.

`ElectraPretrainer.replica_step` does the work of one step; this module runs
it under a `tf.distribute` strategy, `steps_per_loop` steps per `tf.function`
call (what TPUs need), and keeps a `tf.train.CheckpointManager` holding the
model, the optimizer (its step counter drives the schedule and the masking
seeds) and the input iterator. Re-running the same command restores all three,
so a resumed run repeats an uninterrupted one exactly (not with `--data_service`, whose input position
cannot be checkpointed: see `training.data_service`). A custom loop rather
than `Model.fit` because `fit` cannot checkpoint its data iterator. Where a run
starts (resume, `--init_checkpoint`, phase 2 of a run) is `restore`'s part.

Scalars go to TensorBoard (`<model_dir>/train`) and, one JSON object per log
line, to `<model_dir>/train_log.jsonl`.

Example (see `run_pretraining.py` for the command-line front end):

>>> from electra_tf.training.pretraining import TrainOptions, train  # doctest: +SKIP
>>> train(get_config("tiny"), TrainOptions(data_dir="data", model_dir="out"), strategy)  # doctest: +SKIP
"""

import contextlib
import os
import shutil
import tempfile
import time

import keras
import tensorflow as tf
from absl import logging

from electra_tf.training import (data_service, detection_preview, distribution, evaluation, input_pipeline, loop,
                                 preemption, restore, run_record, text_input)
from electra_tf.training.run_setup import RunSetup, set_up
from electra_tf.config import ElectraConfig
from electra_tf.convert import export_dir
from electra_tf.training.optimization import create_optimizer
from electra_tf.options import ExecutionOptions, TrainOptions
from electra_tf.model.networks import pretrainer_from_config
from electra_tf.text import verify


def build_model(config, strategy, special_token_ids, seed, mixed_precision, execution=None, whole_words=None):
    with strategy.scope():
        model = pretrainer_from_config(config, special_token_ids=special_token_ids, seed=seed, execution=execution,
                                       whole_words=whole_words)
        optimizer = create_optimizer(config, fused=model.execution.adam_kernel == "fused")
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


def make_train_fn(strategy, model, execution: ExecutionOptions, stop_on_nonfinite=True, stop_request=None,
                  input_report=None):
    """`run(iterator, num_steps)` over `model.replica_step` (see `loop.make_step_driver`), looped and optimised
    as the resolved `execution` says.

    With a `preemption.StopRequest`, the loop ends after the step in progress once a stop
    is requested (agreed by all workers: see `StopRequest.wrap_step`).
    """
    step_fn = model.replica_step if stop_request is None else stop_request.wrap_step(model.replica_step)
    return loop.make_step_driver(strategy, step_fn, model.step_output_names, stop_on_nonfinite=stop_on_nonfinite,
                                 stop_requested=None if stop_request is None else stop_request.agreed,
                                 graph_optimizer=execution.graph_optimizer, step_loop=execution.step_loop,
                                 input_report=input_report)


def input_checkpoint_key(skip_corrupt_records: bool) -> str:
    """The checkpoint attribute that holds the input position: each pipeline (--skip_corrupt_records or not) keeps
    its own, so that one never restores the other's iterator. The strings are checkpoint keys: never change them."""
    return "input_skipping_corrupt" if skip_corrupt_records else "iterator"


def train(config: ElectraConfig, options: TrainOptions, strategy: tf.distribute.Strategy) -> list[dict]:
    """Trains to `config.num_train_steps` (resuming if possible); returns the logged scalars.

    Several workers (MultiWorkerMirroredStrategy) share `model_dir` (GCS, NFS): all of them
    resume from its checkpoints, and only the chief (worker 0) writes checkpoints, TensorBoard,
    `train_log.jsonl` and the export. The others take part in every (collective) checkpoint
    save into a temporary directory that is removed at the end. With `options.stop_signals`,
    such a signal ends training after the step in progress, with a checkpoint at that step.

    The steps, in this order (randomness, checkpoints and collectives depend on it): `run_setup.set_up` (every
    check, the run's records), `build_model` (seeded), `make_input`, `RunCheckpoints.resume` (and
    `replay_input`), `TrainLoop.run` (steps, logs, checkpoints, evaluation) and `finish` (stop or export).
    """
    setup = set_up(config, options, strategy)
    keras.utils.set_random_seed(options.seed)  # the initial weights and the dropout seeds
    model, optimizer = build_model(config, strategy, setup.manifest["special_token_ids"], options.seed,
                                   options.mixed_precision, setup.execution,
                                   input_pipeline.whole_words_table(config, setup.manifest))
    iterator = make_input(setup, config, options, strategy)
    checkpoints = RunCheckpoints(setup, options, model, optimizer, iterator)
    if checkpoints.resume(options.init_checkpoint):
        replay_input(setup, options, iterator, checkpoints)
    stop_request = preemption.StopRequest(strategy, options.stop_signals)
    training = TrainLoop(setup, config, options, strategy, model, iterator, checkpoints, stop_request)
    with stop_request, _scratch_dir(setup.chief, setup.worker) as scratch:
        checkpoints.open_saver(scratch)
        training.run()
        finish(setup, options, strategy, training)
        return training.history


def make_input(setup: RunSetup, config: ElectraConfig, options: TrainOptions, strategy):
    """This worker's input iterator: a plain `tf.data` one (it is checkpointed), or with `--data_service`
    one reading a tf.data service job (not checkpointable)."""
    seed, service = options.seed, None
    if options.data_service:  # a new job and a new order at each (re)start: the service keeps no position
        step = run_record.steps_taken(options.model_dir)
        seed, service = options.seed + step, (options.data_service, data_service.job_name(options.model_dir, step))
    text = {} if setup.text is None else dict(  # --train_text: text_input's reader under the same rules
        make_dataset=text_input.reader(setup.text, seed, options.shuffle_buffer),
        files=text_input.expand_patterns(setup.text.patterns))
    dataset = input_pipeline.worker_dataset(strategy, options.data_dir, setup.manifest, config.train_batch_size,
                                            seed=seed, shuffle_buffer=options.shuffle_buffer,
                                            sharding=options.input_sharding,
                                            skip_corrupt=options.skip_corrupt_records, service=service, **text)
    return iter(dataset)


SERVICE_RESUME = ("--data_service: this resume at step %d is not exact: a tf.data service input position cannot be "
                  "checkpointed, so the input restarts in a new service job (examples may be repeated or skipped); "
                  "the model, optimizer and dropout RNG state are restored")


class RunCheckpoints:
    """The run's checkpoints in `<model_dir>/checkpoints`: the model, the optimizer, the dropout RNG state and
    the input position (with `--skip_corrupt_records`, the records lost too; with `--data_service`, none).
    Under `setup.per_worker_input_state` each worker keeps its input position beside them (`input-worker<i>-of-<n>`)."""

    def __init__(self, setup: RunSetup, options: TrainOptions, model, optimizer, iterator):
        self.setup, self.model, self.optimizer = setup, model, optimizer
        self.input_key = input_checkpoint_key(options.skip_corrupt_records)
        self.directory = os.path.join(options.model_dir, "checkpoints")
        self.keep = options.keep_checkpoint_max
        state = dict(model=model, optimizer=optimizer, dropout_rng=rng_states(model))
        skipped = {"skipped_records": setup.skipping.by_shard} if setup.skipping else {}
        self.service = options.data_service
        self.input_state = {} if self.service else {self.input_key: iterator, **skipped}
        self.checkpoint = tf.train.Checkpoint(**state, **({} if setup.per_worker_input_state else self.input_state))
        self.without_input = None if setup.per_worker_input_state or self.service else tf.train.Checkpoint(**state)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.directory, max_to_keep=self.keep,
                                                  step_counter=optimizer.iterations)
        self.input_saver = None
        self.saver = None

    def resume(self, init_checkpoint) -> bool:
        """Restores the newest readable checkpoint, else initialises (`restore.restore_or_initialize`); True when
        the input position was saved by the other `--skip_corrupt_records` pipeline (see `replay_input`)."""
        replay = restore.restore_or_initialize(self.manager, self.checkpoint, self.model, self.optimizer,
                                               init_checkpoint, self.input_key, self.without_input,
                                               self.setup.phase1, self.setup.manifest.get("vocab_file"))
        if self.service and self.manager.latest_checkpoint:
            logging.warning(SERVICE_RESUME, loop.current_step(self.optimizer))
        if self.setup.per_worker_input_state:
            setup = self.setup
            self.input_saver = tf.train.CheckpointManager(
                tf.train.Checkpoint(**self.input_state),
                os.path.join(self.directory, f"input-worker{setup.worker}-of-{setup.workers}"),
                max_to_keep=self.keep, step_counter=self.optimizer.iterations)
            replay = restore.restore_worker_input(self.input_saver, loop.current_step(self.optimizer), setup.worker,
                                                  self.input_key)
        return replay

    def latest(self):
        """The newest checkpoint (the chief's manager knows; another worker looks)."""
        return self.manager.latest_checkpoint if self.setup.chief else tf.train.latest_checkpoint(self.directory)

    def open_saver(self, scratch):
        """Saves go to the run's checkpoints on the chief, to `scratch` on another worker (see `save`)."""
        self.saver = self.manager if self.setup.chief else tf.train.CheckpointManager(
            self.checkpoint, scratch, max_to_keep=1, step_counter=self.optimizer.iterations)

    def save(self, step: int) -> None:
        """Collective: every worker calls it at the same steps (the others into their scratch directory)."""
        loop.check_finite_weights(self.model, step, "checkpoint")
        self.saver.save(checkpoint_number=step)
        if self.input_saver is not None:
            self.input_saver.save(checkpoint_number=step)

    def corrupt_data_as_error(self, data_dir: str):
        """`_corrupt_data_as_error` for this run: its shards, step and newest checkpoint."""
        return _corrupt_data_as_error(data_dir, self.setup.manifest, self.optimizer, self.latest)


def replay_input(setup: RunSetup, options: TrainOptions, iterator, checkpoints: RunCheckpoints) -> None:
    """Reads the input again up to the restored step (`restore.replay_input`), counting its lost records."""
    step = loop.current_step(checkpoints.optimizer)
    report = setup.skipping.report if setup.skipping else None
    saver = checkpoints.input_saver or checkpoints.manager  # where the input position was looked for
    with checkpoints.corrupt_data_as_error(options.data_dir):
        other_key = input_checkpoint_key(not options.skip_corrupt_records)
        replayed = restore.replay_input(iterator, step, report, options.skip_corrupt_records,
                                        saver.latest_checkpoint, other_key=other_key)
    if setup.skipping is not None:
        setup.skipping.add(replayed, step)


class TrainLoop:
    """From the restored step to `setup.final_step`: calls of the step driver (`steps_per_loop` steps each), then
    per call the skipped steps and records, the log line, the checkpoint and the held-out evaluation due."""

    def __init__(self, setup: RunSetup, config: ElectraConfig, options: TrainOptions, strategy, model, iterator,
                 checkpoints: RunCheckpoints, stop_request):
        self.setup, self.config, self.options, self.strategy = setup, config, options, strategy
        self.model, self.optimizer, self.iterator = model, checkpoints.optimizer, iterator
        self.checkpoints, self.stop_request = checkpoints, stop_request
        # fp16's loss-scale optimizer skips overflowed steps itself: those never stop the driver.
        self.skipped_steps = loop.SkippedSteps(
            tolerate=options.skip_nonfinite_steps or options.mixed_precision == "fp16")
        self.train_steps = make_train_fn(strategy, model, setup.execution,
                                         stop_on_nonfinite=not self.skipped_steps.tolerate, stop_request=stop_request,
                                         input_report=setup.skipping.report if setup.skipping else None)
        self.logger = loop.ScalarLogger(options.model_dir, "train", "train_log.jsonl") if setup.chief else None
        with checkpoints.corrupt_data_as_error(options.data_dir):
            self.preview = detection_preview.make_preview(model, options, setup.manifest, setup.text) if setup.chief else None
        self.evaluator = evaluation.for_training(model, setup.eval_source, options, config, setup.chief)
        self.history = []
        self.step = self.saved_step = loop.current_step(self.optimizer)
        self.progress = loop.ProgressReporter(config.num_train_steps, self.step, config.train_batch_size,
                                              keys=("loss", "disc_auc", "gen_accuracy", "main_accuracy"))
        self.timer = loop.StepTimer(self.step, config.num_train_steps)
        self.window_start, self.window_step = time.time(), self.step
        self.log_start()

    def log_start(self) -> None:
        config, execution, setup = self.config, self.setup.execution, self.setup
        logging.info("Training %s (%s) from step %d to %d, global batch %d x %d tokens%s, %d replica(s) on %d "
                     "worker(s)%s; %s", config.model_size, config.objective, self.step, config.num_train_steps,
                     config.train_batch_size, config.max_seq_length,
                     f" in {execution.gradient_accumulation_steps} micro-batches per replica"
                     if execution.gradient_accumulation_steps > 1 else "", self.strategy.num_replicas_in_sync,
                     setup.workers, "" if setup.chief else f" (this is worker {setup.worker})",
                     loop.runtime_summary(self.train_steps))

    def run(self) -> None:
        """Trains until `setup.final_step` or an agreed stop request."""
        while self.step < self.setup.final_step and not self.stop_request.requested:
            previous = self.step
            outputs = self.call_steps()
            if self.step == previous:  # every step of the call was skipped (fp16 overflow or non-finite)
                continue
            log_now = self.step % self.options.log_steps == 0 or self.step >= self.config.num_train_steps
            self.progress.update(self.step, self.log_scalars(outputs, log_now), log=log_now)
            self.save_and_evaluate()

    def call_steps(self) -> dict:
        """One call of the step driver up to the next stop (log, checkpoint, evaluation, timing); counts its
        skipped steps and records (raising `NonFiniteError` when they cannot be tolerated)."""
        previous, options = self.step, self.options
        stop = loop.next_stop(previous, self.setup.final_step, options.steps_per_loop, options.log_steps,
                              options.save_checkpoints_steps, self.setup.eval_every, extra_stops=self.timer.stops)
        with self.checkpoints.corrupt_data_as_error(options.data_dir):
            outputs = self.stop_request.call(self.train_steps, self.iterator, tf.constant(stop - previous))
        self.step = loop.current_step(self.optimizer)
        if self.setup.chief:
            self.timer.observe(self.step)
        if self.setup.skipping is not None:
            self.setup.skipping.add(outputs, self.step)
        skipped = self.skipped_steps.observe(previous, self.step, stop - previous, int(outputs["nonfinite_steps"]),
                                             self.optimizer, self.checkpoints.latest)
        if skipped:
            logging.warning("skipped %d non-finite step(s) (%d so far)", skipped, self.skipped_steps.total)
        return outputs

    def log_scalars(self, outputs: dict, log_now: bool) -> dict:
        """The model's metrics; at a log step also the step's loss and the run's counters, written (chief) to
        TensorBoard and `train_log.jsonl` and kept in `history`, and the metrics restart."""
        step, skipping = self.step, self.setup.skipping
        scalars = {name: float(value) for name, value in self.model.metric_results().items()}
        if not log_now:
            return scalars
        elapsed = time.time() - self.window_start
        if skipping is not None and self.setup.per_worker_input_state:
            skipping.gather(self.strategy, step)  # collective: log steps are the same on every worker
        scalars.update(step_loss=float(outputs["loss"]), learning_rate=loop.learning_rate_at(self.optimizer, step),
                       nonfinite_steps_skipped=float(self.skipped_steps.total),
                       **({"skipped_records": float(skipping.total)} if skipping else {}),
                       examples_per_second=(step - self.window_step) * self.config.train_batch_size
                       / max(elapsed, 1e-9))
        if self.logger is not None:  # the chief
            self.logger.write(step, scalars)
        if self.preview is not None:
            self.preview.write(self.logger.writer, step)
        self.history.append({"step": step, **scalars})
        for metric in self.model.metrics:
            metric.reset_state()
        self.window_start, self.window_step = time.time(), step
        return scalars

    def save_and_evaluate(self) -> None:
        """The checkpoint (every `save_checkpoints_steps` and at the end) and the held-out evaluation due."""
        step = self.step
        if step % self.options.save_checkpoints_steps == 0 or step >= self.setup.final_step:
            self.checkpoints.save(step)
            self.saved_step = step
        if self.evaluator is not None and evaluation.due(step, self.setup.final_step, self.setup.eval_every):
            self.evaluator.evaluate(step)


def finish(setup: RunSetup, options: TrainOptions, strategy, training: TrainLoop) -> None:
    """The invocation's end: at a stop request a checkpoint at the step reached; at the last step the export
    (chief); the line on skipped records, however it ended; then every worker waits for the chief."""
    step, total, skipping = training.step, training.config.num_train_steps, setup.skipping
    if skipping is not None and setup.per_worker_input_state:
        skipping.gather(strategy, step)  # collective, so before the chief's own work
    stop_request = training.stop_request
    if stop_request.requested and step < setup.final_step:  # the same on every worker (see preemption.StopRequest)
        if step > training.saved_step:
            training.checkpoints.save(step)
        where = training.checkpoints.manager.latest_checkpoint if setup.chief else "written by worker 0"
        how = stop_request.received or "another worker was asked to stop"
        logging.warning("Stopped at step %d of %d (%s); checkpoint %s. Run the same command again to resume.",
                        step, total, how, where)
        print(f"Stopped at step {step} of {total} ({how}); re-run the same command to resume.", flush=True)
    elif options.export and setup.chief and step >= setup.final_step:
        export(training.model, options.model_dir, setup.manifest, step)
    if skipping is not None and setup.chief:
        logging.warning("%s", skipping.summary())
        print(skipping.summary(), flush=True)
    distribution.barrier(strategy)  # the other workers end after the chief's export


def export(model, model_dir: str, manifest: dict, step: int) -> str:
    """The end of the run, or of this invocation's --stop_after_steps: an export of the weights reached."""
    loop.check_finite_weights(model, step, "export")
    return export_dir.save_ours(model, os.path.join(model_dir, "export"), vocab_file=manifest.get("vocab_file"), step=step)


@contextlib.contextmanager
def _corrupt_data_as_error(data_dir: str, manifest: dict, optimizer, latest_checkpoint):
    """Turns a `tf.errors.DataLossError` of the input into `loop.CorruptDataError`: one line naming the
    shard and record (found by scanning the shards' framing), the step reached and the last good checkpoint."""
    try:
        yield
    except tf.errors.DataLossError as e:
        step = loop.current_step(optimizer)
        problems = list(verify.find_corrupt_records(data_dir, manifest))
        if problems:
            what = str(problems[0]) + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        else:
            what = f"unreadable input ({str(e).strip().splitlines()[0][:300]})"
        raise loop.CorruptDataError(
            f"corrupt training data: {what}; stopped at step {step}, last good checkpoint: "
            f"{latest_checkpoint() or 'none'}. Check every shard with `python -m data_prep.inspect_shards "
            f"--verify {data_dir}`, delete the corrupt shard and its .done.json and rebuild it with "
            "`python -m data_prep.build_pretraining_dataset` (same flags), then re-run to resume") from None


@contextlib.contextmanager
def _scratch_dir(chief: bool, worker: int):
    """None for the chief; for another worker a temporary directory for its checkpoint saves, removed at exit."""
    if chief:
        yield None
        return
    path = tempfile.mkdtemp(prefix=f"electra_worker{worker}_")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def export_latest(config: ElectraConfig, model_dir: str, special_token_ids: dict, vocab_file=None) -> str:
    """Exports the newest checkpoint of `model_dir` without training (`--export_only`)."""
    strategy = tf.distribute.get_strategy()
    model, optimizer = build_model(config, strategy, special_token_ids, 0, "none")
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    if latest is None:
        raise ValueError(f"--model_dir {model_dir}: no checkpoint to export")
    tf.train.Checkpoint(model=model, optimizer=optimizer).restore(latest).expect_partial()
    return export_dir.save_ours(model, os.path.join(model_dir, "export"), vocab_file=vocab_file,
                          step=loop.current_step(optimizer))
