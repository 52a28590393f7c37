"""A pre-training run's set-up: every check that can fail before anything is built, and what they decide.

`set_up` checks the flags, the data and where the run starts (resume, `--init_checkpoint`, phase 2), resolves
the execution options and writes the run's record (`run_record.check_start`); `pretraining.train` then builds
and trains from the `RunSetup` it returns. A run refused here writes nothing into its `model_dir`.
"""

import dataclasses
import os

import tensorflow as tf
from absl import logging

from electra_tf.config import ElectraConfig
from electra_tf.options import ExecutionOptions, TrainOptions
from electra_tf.text import verify
from electra_tf.training import (data_service, distribution, evaluation, input_pipeline, restore, run_record,
                                 text_input)
from electra_tf.training.skipped_records import SkippedRecords


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


@dataclasses.dataclass(frozen=True)
class RunSetup:
    """What `set_up` checked and decided before anything is built."""

    chief: bool
    worker: int
    workers: int
    per_worker_input_state: bool  # several workers with --input_sharding=file: each worker keeps its input state
    execution: ExecutionOptions  # resolved for this run's devices
    phase1: restore.Phase1 | None  # where phase 2 of a run starts
    manifest: dict
    eval_source: tuple[str, dict] | None  # the held-out data (`evaluation.resolve_source`)
    eval_every: int  # evaluate every that many steps (0: only at the end)
    skipping: SkippedRecords | None  # --skip_corrupt_records
    final_step: int  # the step this invocation ends at (--stop_after_steps)
    text: text_input.TextSource | None = None  # --train_text: read raw text instead of data_dir's shards


def set_up(config: ElectraConfig, options: TrainOptions, strategy) -> RunSetup:
    """Every check that can fail before the first step, then the run's record (`run_record.check_start`):
    nothing is built, and a run refused here writes nothing into its `model_dir`."""
    chief, worker = distribution.is_chief(strategy), distribution.worker_index(strategy)
    workers = distribution.num_workers(strategy)
    per_worker_input_state = workers > 1 and options.input_sharding == "file" and not options.data_service
    if options.phase2_from and options.train_text:  # as run_pretraining.py's --phase2 needs --data_dir
        raise ValueError("--phase2 reads phase 2's shards in --data_dir, not --train_text: build them with python -m "
                         "data_prep.build_pretraining_dataset at phase 2's --max_seq_length")
    if options.data_service:
        check_service_options(options)
    # Decided once, before anything is built or written; every layer and loop below takes it as is.
    execution = resolve_run_execution(options, strategy, config)
    phase1 = None
    if options.phase2_from:  # checked before anything is written
        phase1 = restore.phase2_start(options.phase2_from, options.model_dir, config, options.init_checkpoint)
    text = text_input.checked_source(options, config) if options.train_text else None
    if text is not None:
        manifest = text_input.synthesized_manifest(text)
    else:
        manifest = input_pipeline.load_checked_manifest(options.data_dir, config)
        # A truncated shard fails here, not mid-run; under --skip_corrupt_records its lost records are counted.
        for line in verify.check_shard_sizes(options.data_dir, manifest, allow_truncated=options.skip_corrupt_records):
            logging.warning("%s", line)
    eval_source = evaluation.resolve_source(options.eval_data_dir, options.data_dir or "", manifest, config)
    if eval_source is None and text is not None and text.eval_fraction > 0:
        eval_source = text_input.held_out_source(text, options.seed)
    eval_every = evaluation.every_steps(options) if eval_source and options.eval_batches else 0
    skipping = SkippedRecords(options.data_dir, manifest) if options.skip_corrupt_records else None
    check_data_against_start(options, manifest, text is not None)
    if chief or per_worker_input_state:  # the first thing written into model_dir: every check above is done
        check_writable(options.model_dir, ".write_test" if chief else f".write_test_worker{worker}")
    run_record.check_start(options.model_dir, config, write=chief, record=phase1 and phase1.record(),
                           options=run_record.recipe_options(options, manifest),
                           data=run_record.data_identity(options, manifest),
                           execution=run_record.execution_record(execution, strategy, options.data_service))
    final_step = min(config.num_train_steps, options.stop_after_steps or config.num_train_steps)
    return RunSetup(chief, worker, workers, per_worker_input_state, execution, phase1, manifest, eval_source,
                    eval_every, skipping, final_step, text)


def check_data_against_start(options: TrainOptions, manifest: dict, text: bool) -> None:
    """The vocabulary rule between the data and where the run starts from: `--init_checkpoint`'s vocabulary
    (at a start with no checkpoint of its own yet) or phase 1's."""
    if options.init_checkpoint and not run_record.has_checkpoint(options.model_dir):
        name = f"--train_text's --vocab_file {options.vocab_file}" if text else f"--data_dir {options.data_dir}"
        restore.check_init_vocabulary(options.init_checkpoint, manifest, name)
    if options.phase2_from:
        run_record.check_phase2_data(options.phase2_from, manifest)


def check_service_options(options: TrainOptions) -> None:
    """`--data_service`: refuses `--skip_corrupt_records` and an address where no dispatcher answers (one line)."""
    if options.skip_corrupt_records:
        raise ValueError("--data_service cannot be combined with --skip_corrupt_records: the skipped-record "
                         "counts are kept exact by checkpointing them with the input position, which a tf.data "
                         "service input has not; drop one of the two flags")
    data_service.check_address(options.data_service)


def resolve_run_execution(options: TrainOptions, strategy, config: ElectraConfig):
    """The run's execution options (`distribution.resolve_execution`), its micro-batches taken from the
    run's record when it resumes; on CPUs, the step's cost logged before the first step."""
    recorded = run_record.recorded_micro_batches(options.model_dir)
    execution, micro = distribution.resolve_execution(options.execution, strategy, config, recorded)
    if distribution.all_cpu(strategy):
        from electra_tf.training import cost

        for line in cost.cpu_cost_lines(config, cost.matmul_flops_per_second(), execution.gradient_accumulation_steps,
                                        micro.chosen_by):
            logging.info("%s", line)
    return execution
