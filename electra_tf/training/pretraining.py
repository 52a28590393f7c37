"""The pre-training loop: strategy, checkpoints, TensorBoard, resume, export.

`ElectraPretrainer.train_step` does the work of one step; this module runs
it under a `tf.distribute` strategy, `steps_per_loop` steps per `tf.function`
call (what TPUs need), and keeps a `tf.train.CheckpointManager` holding the
model, the optimizer (its step counter drives the schedule and the masking
seeds) and the input iterator. Re-running the same command restores all three,
so a resumed run repeats an uninterrupted one exactly. A custom loop rather
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
import numpy as np
import tensorflow as tf
from absl import logging

from electra_tf.model import masking
from electra_tf.training import distribution, evaluation, input_pipeline, loop, preemption, restore
from electra_tf.config import ElectraConfig
from electra_tf.convert import ours
from electra_tf.training.optimization import create_optimizer
from electra_tf.options import TrainOptions
from electra_tf.model.pretrainer import ElectraPretrainer
from electra_tf.text import verify
from electra_tf.text.manifest import FEATURE_NAMES


def build_model(config, strategy, special_token_ids, seed, mixed_precision, execution=None, whole_words=None):
    with strategy.scope():
        model = ElectraPretrainer(config, special_token_ids=special_token_ids, seed=seed, execution=execution,
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


def make_train_fn(strategy, model, jit_compile=False, stop_on_nonfinite=True, stop_request=None,
                  graph_optimizer="auto", input_report=None):
    """`run(iterator, num_steps)` over `model.train_step` (see `loop.make_step_driver`).

    With a `preemption.StopRequest`, the loop ends after the step in progress once a stop
    is requested (agreed by all workers: see `StopRequest.wrap_step`).
    """
    if stop_request is None:
        return loop.make_step_driver(strategy, model.train_step, model.step_output_names, jit_compile,
                                     stop_on_nonfinite=stop_on_nonfinite, graph_optimizer=graph_optimizer,
                                     input_report=input_report)
    step_fn = tf.function(model.train_step, jit_compile=True) if jit_compile else model.train_step
    return loop.make_step_driver(strategy, stop_request.wrap_step(step_fn), model.step_output_names,
                                 stop_on_nonfinite=stop_on_nonfinite, stop_requested=stop_request.agreed,
                                 graph_optimizer=graph_optimizer, input_report=input_report)


class DetectionPreview:
    """What the discriminator sees, for TensorBoard: one example as a table and probability histograms.

    Runs the model (no dropout) on a fixed batch read once from the shards, with
    masking seeds of the current step; it touches no training state, so runs stay
    exactly resumable. Writes `rtd/example` (text: original, discriminator input,
    p(replaced) per token) and histograms `rtd/p_replaced/original` and
    `rtd/p_replaced/replaced`.
    """

    def __init__(self, model, dataset, vocab_file=None, num_examples=8, seed=0):
        self.model, self.seed = model, seed
        self.batch = next(iter(dataset.unbatch().batch(num_examples).take(1)))
        self.vocab = _read_vocab(vocab_file)
        self._forward = tf.function(self._outputs)

    def _outputs(self, step):
        size = tf.shape(self.batch["input_ids"])[0]
        seeds = masking.example_seeds(self.seed, step, tf.range(size))
        out = self.model.compute_losses(self.batch, training=False, seeds=seeds)
        return {"fake_ids": out["fake_ids"], "labels": out["labels"], "probs": tf.sigmoid(out["disc_logits"])}

    def write(self, writer, step: int):
        out = {k: v.numpy() for k, v in self._forward(tf.constant(step, tf.int64)).items()}
        real = self.batch["input_mask"].numpy() > 0
        with writer.as_default(step=step):
            for name, chosen in (("original", out["labels"] == 0), ("replaced", out["labels"] == 1)):
                tf.summary.histogram(f"rtd/p_replaced/{name}", out["probs"][real & chosen])
            tf.summary.text("rtd/example", self.example_table(out, real[0]))
        writer.flush()

    def token(self, token_id: int) -> str:
        return self.vocab[token_id] if 0 <= token_id < len(self.vocab) else str(token_id)

    def example_table(self, out, real) -> str:
        rows = ["| position | original | discriminator input | p(replaced) |", "|---|---|---|---|"]
        original = self.batch["input_ids"].numpy()[0]
        for position in np.flatnonzero(real):
            shown = self.token(int(out["fake_ids"][0, position]))
            if out["labels"][0, position]:
                shown = f"**{shown}** (replaced)"
            rows.append(f"| {position} | {self.token(int(original[position]))} | {shown} | "
                        f"{out['probs'][0, position]:.3f} |")
        return "\n".join(rows)


def _read_vocab(vocab_file) -> list[str]:
    if not vocab_file or not os.path.isfile(vocab_file):
        return []
    with open(vocab_file, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


INPUT_KEYS = {False: "iterator", True: "input_skipping_corrupt"}  # checkpoint key per --skip_corrupt_records


class SkippedRecords:
    """`--skip_corrupt_records`: records skipped per shard (a checkpointed variable), their log lines and
    the run's summary line."""

    def __init__(self, data_dir: str, manifest: dict):
        self.paths = [os.path.join(data_dir, name) for name in manifest["shards"]]
        self.data_dir = data_dir
        self.expected = input_pipeline.shard_record_counts(data_dir, manifest)
        self.report = input_pipeline.SkipReport(len(self.paths))
        self.by_shard = tf.Variable(tf.zeros([len(self.paths)], tf.int64), trainable=False, name="skipped_records")

    @property
    def total(self) -> int:
        return int(tf.reduce_sum(self.by_shard))

    def add(self, outputs: dict, step: int) -> None:
        """Counts and logs the skips a call of the step driver (or a replay) reported."""
        lost = outputs["skipped_by_shard"].numpy()
        if not lost.any():
            return
        self.by_shard.assign_add(lost)
        events = outputs["skip_events_by_shard"].numpy()
        for index in np.flatnonzero(lost):
            logging.warning("%s", self.event_line(index, int(lost[index]), int(events[index]), step))

    def event_line(self, index: int, lost: int, events: int, step: int) -> str:
        # The shard is the same file each pass, so it gives up at the same record every time.
        at = self.expected[index] - lost // max(events, 1)
        offset = input_pipeline.record_offset(self.paths[index], at)
        where = f"record {at}" + (f", byte offset {offset}" if offset is not None else "")
        passes = f" ({events} passes)" if events > 1 else ""
        return (f"skipped corrupt data by step {step}: {self.paths[index]}: {where}: not readable, the reader "
                f"gave up on the rest of the shard: {lost} of its {self.expected[index]} records not read{passes}; "
                f"{self.total} skipped so far")

    def summary(self) -> str:
        lost = self.by_shard.numpy()
        if not lost.any():
            return "--skip_corrupt_records: no corrupt records met; none skipped"
        shards = ", ".join(f"{self.paths[i]} ({lost[i]})" for i in np.flatnonzero(lost))
        return (f"--skip_corrupt_records: skipped {lost.sum()} record(s) not readable in "
                f"{np.count_nonzero(lost)} shard(s): {shards}; check them with `python -m data_prep.inspect_shards "
                f"--verify {self.data_dir}`")


def check_writable(model_dir: str, probe_name: str = ".write_test"):
    """Fails before any work if `model_dir` cannot be created or written."""
    probe = os.path.join(model_dir, probe_name)
    try:
        tf.io.gfile.makedirs(model_dir)
        with tf.io.gfile.GFile(probe, "w") as f:
            f.write("ok")
        tf.io.gfile.remove(probe)
    except (tf.errors.OpError, OSError) as e:
        raise ValueError(f"--model_dir {model_dir} is not writable: {str(e).splitlines()[0]}") from None


def _make_preview(model, options, manifest):
    if "disc_loss" not in model.step_output_names:
        return None
    dataset = input_pipeline.pretraining_dataset(options.data_dir, manifest, batch_size=8, seed=options.seed,
                                                 shuffle_buffer=0, repeat=False,
                                                 skip_corrupt=options.skip_corrupt_records)
    dataset = dataset.map(lambda batch: {name: batch[name] for name in FEATURE_NAMES})
    return DetectionPreview(model, dataset, manifest.get("vocab_file"), seed=options.seed)


def train(config: ElectraConfig, options: TrainOptions, strategy: tf.distribute.Strategy) -> list[dict]:
    """Trains to `config.num_train_steps` (resuming if possible); returns the logged scalars.

    Several workers (MultiWorkerMirroredStrategy) share `model_dir` (GCS, NFS): all of them
    resume from its checkpoints, and only the chief (worker 0) writes checkpoints, TensorBoard,
    `train_log.jsonl` and the export. The others take part in every (collective) checkpoint
    save into a temporary directory that is removed at the end. With `options.stop_signals`,
    such a signal ends training after the step in progress, with a checkpoint at that step.
    """
    chief, worker = distribution.is_chief(strategy), distribution.worker_index(strategy)
    workers = distribution.num_workers(strategy)
    own_input = workers > 1 and options.input_sharding == "file"  # each worker keeps its input state
    phase1 = None
    if options.phase2_from:  # checked before anything is written
        phase1 = restore.phase2_start(options.phase2_from, options.model_dir, config, options.init_checkpoint)
    if chief or own_input:
        check_writable(options.model_dir, ".write_test" if chief else f".write_test_worker{worker}")
    manifest = input_pipeline.load_checked_manifest(options.data_dir, config)
    verify.check_shard_sizes(options.data_dir, manifest)  # a truncated shard fails here, not mid-run
    eval_source = evaluation.resolve_source(options.eval_data_dir, options.data_dir, manifest, config)
    eval_every = evaluation.every_steps(options) if eval_source and options.eval_batches else 0
    skipping = SkippedRecords(options.data_dir, manifest) if options.skip_corrupt_records else None
    report = skipping.report if skipping else None
    restore.check_run_config(options.model_dir, config, write=chief, record=phase1 and phase1.record())
    execution = distribution.resolve_execution(options.execution, strategy, config.hidden_act)
    keras.utils.set_random_seed(options.seed)
    model, optimizer = build_model(config, strategy, manifest["special_token_ids"], options.seed,
                                   options.mixed_precision, execution, input_pipeline.whole_words_table(config, manifest))
    dataset = input_pipeline.worker_dataset(strategy, options.data_dir, manifest, config.train_batch_size,
                                            seed=options.seed, shuffle_buffer=options.shuffle_buffer,
                                            sharding=options.input_sharding,
                                            skip_corrupt=options.skip_corrupt_records)
    iterator = iter(dataset)
    state = dict(model=model, optimizer=optimizer, dropout_rng=rng_states(model))
    input_key = INPUT_KEYS[options.skip_corrupt_records]
    input_state = {input_key: iterator, **({"skipped_records": skipping.by_shard} if skipping else {})}
    checkpoint = tf.train.Checkpoint(**state, **({} if own_input else input_state))
    checkpoint_dir = os.path.join(options.model_dir, "checkpoints")
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=options.keep_checkpoint_max,
                                         step_counter=optimizer.iterations)
    replay = restore.restore_or_initialize(manager, checkpoint, model, optimizer, options.init_checkpoint, input_key,
                                           None if own_input else tf.train.Checkpoint(**state), phase1)
    input_saver = None
    if own_input:
        input_saver = tf.train.CheckpointManager(
            tf.train.Checkpoint(**input_state), os.path.join(checkpoint_dir, f"input-worker{worker}-of-{workers}"),
            max_to_keep=options.keep_checkpoint_max, step_counter=optimizer.iterations)
        replay = restore.restore_worker_input(input_saver, loop.current_step(optimizer), worker, input_key)
    latest_checkpoint = lambda: manager.latest_checkpoint if chief else tf.train.latest_checkpoint(checkpoint_dir)  # noqa: E731
    if replay:
        with _corrupt_data_as_error(options.data_dir, manifest, optimizer, latest_checkpoint):
            replayed = restore.replay_input(iterator, loop.current_step(optimizer), report,
                                            options.skip_corrupt_records, manager.latest_checkpoint)
        if skipping is not None:
            skipping.add(replayed, loop.current_step(optimizer))
    stop_request = preemption.StopRequest(strategy, options.stop_signals)
    train_steps = make_train_fn(strategy, model, execution.jit_compile,
                                stop_on_nonfinite=not options.skip_nonfinite_steps, stop_request=stop_request,
                                graph_optimizer=execution.graph_optimizer, input_report=report)
    skipped_total = 0
    logger = loop.ScalarLogger(options.model_dir, "train", "train_log.jsonl") if chief else None
    with _corrupt_data_as_error(options.data_dir, manifest, optimizer, latest_checkpoint):
        preview = _make_preview(model, options, manifest) if chief else None
    evaluator = evaluation.for_training(model, eval_source, options, config, chief)
    history = []
    step = saved_step = loop.current_step(optimizer)
    total = config.num_train_steps
    progress = loop.ProgressReporter(total, step, config.train_batch_size,
                                     keys=("loss", "disc_auc", "gen_accuracy", "main_accuracy"))
    timer = loop.StepTimer(step, total)
    window_start, window_step = time.time(), step
    logging.info("Training %s (%s) from step %d to %d, global batch %d x %d tokens%s, %d replica(s) on %d worker(s)%s; %s",
                 config.model_size, config.objective, step, total, config.train_batch_size, config.max_seq_length,
                 f" in {config.gradient_accumulation_steps} micro-batches" if config.gradient_accumulation_steps > 1
                 else "", strategy.num_replicas_in_sync, workers,
                 "" if chief else f" (this is worker {worker})", loop.runtime_summary(train_steps))
    last = min(total, options.stop_after_steps or total)
    with stop_request, _scratch_dir(chief, worker) as scratch:
        saver = manager if chief else tf.train.CheckpointManager(checkpoint, scratch, max_to_keep=1,
                                                                 step_counter=optimizer.iterations)

        def save(step):  # collective: every worker calls it, the others into `scratch`
            loop.check_finite_weights(model, step, "checkpoint")
            saver.save(checkpoint_number=step)
            if input_saver is not None:
                input_saver.save(checkpoint_number=step)

        while step < last and not stop_request.requested:
            stop = loop.next_stop(step, last, options.steps_per_loop, options.log_steps, options.save_checkpoints_steps,
                                  eval_every, extra_stops=timer.stops)
            with _corrupt_data_as_error(options.data_dir, manifest, optimizer, latest_checkpoint):
                outputs = stop_request.call(train_steps, iterator, tf.constant(stop - step))
            previous, step = step, loop.current_step(optimizer)
            if chief:
                timer.observe(step)
            if skipping is not None:
                skipping.add(outputs, step)
            skipped = int(outputs["nonfinite_steps"])
            if skipped and not options.skip_nonfinite_steps:
                latest = latest_checkpoint()
                raise loop.NonFiniteError(
                    f"step {step + 1}: the loss or gradient norm is not finite; stopping (the step was not "
                    f"applied). Last good checkpoint: {latest or 'none'}. Lower the "
                    "learning rate, or pass --skip_nonfinite_steps to skip such steps")
            if skipped:
                skipped_total += skipped
                logging.warning("skipped %d non-finite step(s) (%d so far)", skipped, skipped_total)
            if step == previous:  # every step of the call was skipped (fp16 overflow or non-finite)
                continue
            log_now = step % options.log_steps == 0 or step >= total
            scalars = {name: float(value) for name, value in model.metric_results().items()}
            if log_now:
                elapsed = time.time() - window_start
                scalars.update(step_loss=float(outputs["loss"]), learning_rate=loop.learning_rate_at(optimizer, step),
                               nonfinite_steps_skipped=float(skipped_total),
                               **({"skipped_records": float(skipping.total)} if skipping else {}),
                               examples_per_second=(step - window_step) * config.train_batch_size / max(elapsed, 1e-9))
                if logger is not None:  # the chief
                    logger.write(step, scalars)
                if preview is not None:
                    preview.write(logger.writer, step)
                history.append({"step": step, **scalars})
                for metric in model.metrics:
                    metric.reset_state()
                window_start, window_step = time.time(), step
            progress.update(step, scalars, log=log_now)
            if step % options.save_checkpoints_steps == 0 or step >= last:
                save(step)
                saved_step = step
            if evaluator is not None and evaluation.due(step, last, eval_every):
                evaluator.evaluate(step)
        if stop_request.requested and step < last:  # the same on every worker (see preemption.StopRequest)
            if step > saved_step:
                save(step)
            where = manager.latest_checkpoint if chief else "written by worker 0"
            how = stop_request.received or "another worker was asked to stop"
            logging.warning("Stopped at step %d of %d (%s); checkpoint %s. Run the same command again to resume.",
                            step, total, how, where)
            print(f"Stopped at step {step} of {total} ({how}); re-run the same command to resume.", flush=True)
        elif options.export and chief and step >= last:
            # The end of the run, or of this invocation's --stop_after_steps: an export of the weights reached.
            loop.check_finite_weights(model, step, "export")
            ours.save_ours(model, os.path.join(options.model_dir, "export"),
                           vocab_file=manifest.get("vocab_file"), step=step)
        if skipping is not None and chief:  # the run's one line on skipped records, however it ended
            logging.warning("%s", skipping.summary())
            print(skipping.summary(), flush=True)
        distribution.barrier(strategy)  # the other workers end after the chief's export
        return history


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
    return ours.save_ours(model, os.path.join(model_dir, "export"), vocab_file=vocab_file,
                          step=loop.current_step(optimizer))
