"""Where a pre-training run starts: its own checkpoints (resume), `--init_checkpoint`'s weights, or the
model and optimizer of a phase-1 run (phase 2).

Phase 2 is BERT's two-phase recipe (NVIDIA's `--phase2`): most steps at length 128, then a short run at
512 with its own batch size and schedule. It continues a phase-1 run directory `<model_dir>` in the folder
`<model_dir>/phase2/` (`PHASE2_DIR`), a run directory of its own (checkpoints, logs, export,
`run_config.json`), so phase 1's files stay as they were. Its config is phase 1's recorded one with only
what phase 2 is for changed (`PHASE2_CHANGES`: length, batch, steps, schedule; `phase2_config`). At its
first start it restores the model and the optimizer's slots (Adam's m and v, LAMB's too) from phase 1's
newest checkpoint and sets the step to 0: its warm-up, decay, masking seeds and checkpoint numbers start
over, and its data iterator is new. From then on it is an ordinary run: re-running the command resumes
phase 2 from its own checkpoints. The bias correction of LAMB (and of `adam_bias_correction`) restarts
with the step, which NVIDIA's phase 2 also sets to 0: with warm moments this makes the first steps
smaller, not larger.

What a run is (its recipe, data, execution choices) is recorded and compared at every start by
`run_record`, the one owner of `run_config.json`; this module restores the state a start begins from. An
`--init_checkpoint` start checks the data's vocabulary against the checkpoint's first (`check_init_vocabulary`,
the vocabulary rule of `text.vocabulary`).

Example (a phase-1 run in `runs/base`, trained on 128-token shards):

>>> from electra_tf.training import restore
>>> restore.phase2_dir("runs/base")
'runs/base/phase2'
"""

import dataclasses
import os

import tensorflow as tf
from absl import logging

from electra_tf.config import ElectraConfig, flatten
from electra_tf.convert import api as convert_api
from electra_tf.convert import export_dir
from electra_tf.text.manifest import load_manifest
from electra_tf.training import loop, run_record, vocab_extension

PHASE2_DIR = "phase2"
# What phase 2 is for: its sequence length, batch, steps and schedule. Every other field is phase 1's: the
# model, the objective and masking, and the optimizer whose slots phase 2 restores.
PHASE2_CHANGES = ("max_seq_length", "train_batch_size", "num_train_steps", "num_warmup_steps", "learning_rate",
                  "lr_decay_power")
def phase2_dir(model_dir: str) -> str:
    """The run directory of phase 2 of the run in `model_dir`."""
    return os.path.join(model_dir, PHASE2_DIR)


@dataclasses.dataclass(frozen=True)
class Phase1:
    """The phase-1 state a new phase-2 run starts from."""

    model_dir: str
    checkpoint: str
    step: int

    def record(self) -> dict:
        return {"number": 2, "phase1_model_dir": os.path.abspath(self.model_dir),
                "phase1_checkpoint": os.path.abspath(self.checkpoint), "phase1_step": self.step}

    def restore(self, model, optimizer) -> None:
        """Model and optimizer slots from phase 1, then step 0 (the schedule and masking seeds start over)."""
        status = tf.train.Checkpoint(model=model, optimizer=optimizer).restore(self.checkpoint)
        status.expect_partial()  # phase 1's input position and dropout state are not phase 2's
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            raise ValueError(f"--phase2: {self.checkpoint} does not hold this model and optimizer "
                             f"({str(e).splitlines()[0][:200]}); phase 2 needs phase 1's --mixed_precision "
                             "(fp16 or not) and --optimizer") from None
        optimizer.iterations.assign(0)
        logging.info("Phase 2: model and optimizer state from %s (phase 1 step %d); step reset to 0",
                     self.checkpoint, self.step)


def phase2_start(phase1_dir: str, model_dir: str, config: ElectraConfig, init_checkpoint=None) -> Phase1 | None:
    """Checks a phase-2 run before anything is built or written; returns what to start from, or None
    when `model_dir` already holds phase-2 checkpoints (the run resumes from them)."""
    if init_checkpoint:
        raise ValueError("--init_checkpoint cannot be used with --phase2: phase 2 starts from phase 1's "
                         "checkpoint in --model_dir")
    if os.path.abspath(model_dir) == os.path.abspath(phase1_dir):
        raise ValueError(f"phase 2 must write into its own directory, not phase 1's {phase1_dir}")
    _check_matches_phase1(phase1_dir, config)
    if tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")):
        return None
    checkpoint = tf.train.latest_checkpoint(os.path.join(phase1_dir, "checkpoints"))
    if checkpoint is None:
        raise ValueError(f"--phase2: no checkpoint in {os.path.join(phase1_dir, 'checkpoints')} to start from; "
                         "run phase 1 there first")
    step = run_record.checkpoint_step(checkpoint)
    planned = phase1_config(phase1_dir).num_train_steps
    if step < planned:
        logging.warning("--phase2: phase 1's newest checkpoint %s is at step %d of its %d; phase 2 starts "
                        "from it", checkpoint, step, planned)
    return Phase1(phase1_dir, checkpoint, step)


def phase1_config(phase1_dir: str) -> ElectraConfig:
    """The config recorded by the phase-1 run in `phase1_dir`."""
    return run_record.recorded_config(phase1_dir, "--phase2", "run phase 1 there first")


def phase2_config(phase1_dir: str, hparams: dict, flag_values: dict) -> ElectraConfig:
    """Phase 2's config: phase 1's recorded one, with what `hparams` (--hparams) and `flag_values` (the config
    fields set by flags; None = unset) change of `PHASE2_CHANGES`. A value that contradicts phase 1's
    anywhere else is refused in one line; one equal to phase 1's is accepted."""
    phase1 = phase1_config(phase1_dir)
    flag_values = {name: value for name, value in flag_values.items() if value is not None}
    requested = {**flatten(hparams), **flag_values}
    recorded = flatten(phase1.to_dict())  # names it does not hold are refused by `replace` below
    contradictions = [f"{f'--{name}' if name in flag_values else f'--hparams {name}'}={value} "
                      f"(phase 1: {recorded[name]})" for name, value in requested.items()
                      if name in recorded and name not in PHASE2_CHANGES and value != recorded[name]]
    if contradictions:
        raise ValueError(f"--phase2: {', '.join(contradictions)} "
                         f"{'contradicts' if len(contradictions) == 1 else 'contradict'} phase 1's config in "
                         f"{convert_api.run_config_path(phase1_dir)}; phase 2 keeps phase 1's model, objective and "
                         f"optimizer and changes only {', '.join(PHASE2_CHANGES)}: drop the flag or pass phase 1's "
                         "value")
    return phase1.replace(**requested)


def _check_matches_phase1(phase1_dir: str, config: ElectraConfig) -> None:
    phase1 = flatten(phase1_config(phase1_dir).to_dict())
    now = flatten(config.to_dict())
    for field, value in phase1.items():
        if field not in PHASE2_CHANGES and value != now[field]:
            raise ValueError(f"--phase2: {field} is {value} in phase 1 ({phase1_dir}) but {now[field]} now; phase 2 "
                             f"keeps phase 1's config and changes only {', '.join(PHASE2_CHANGES)}")


def requested_sequence_length(flag_value: int | None, phase2_data_dir: str | None,
                              position_table: int) -> int | None:
    """`--max_seq_length`, or with `--phase2` (`phase2_data_dir` set) and the flag unset, the length of the
    shards in --data_dir; refused in one line when longer than the model's position table."""
    length, source = flag_value, f"--max_seq_length={flag_value}"
    if length is None and phase2_data_dir is not None:
        length = load_manifest(phase2_data_dir)["max_seq_length"]
        source = f"--max_seq_length (unset: the shards' length in --data_dir, {length})"
    if length is not None and length > position_table:
        raise ValueError(f"{source} exceeds the model's position table, max_position_embeddings={position_table}: "
                         f"use shards of at most {position_table} tokens")
    return length


def check_init_vocabulary(init_checkpoint: str, manifest: dict, data_name: str) -> None:
    """The data's vocabulary (`manifest`, named `data_name`) against `--init_checkpoint`'s, before anything is
    built or written: the checkpoint's own, or an extension of it (`vocab_extension.data_vocab_size`); refused in
    one line naming both files and digests otherwise."""
    try:
        checkpoint_size = convert_api.read_config(init_checkpoint)[0].vocab_size
    except ValueError:  # (ConversionError too) a checkpoint file of a run: restored as it is
        return
    vocab_extension.data_vocab_size(init_checkpoint, checkpoint_size, convert_api.checkpoint_vocab(init_checkpoint),
                                    manifest, data_name)


def initialize_from(model, init_checkpoint, vocab_file=None):
    """Continued pre-training: weights from an export, a HF/official checkpoint or another run; never its
    optimizer state (Adam's m and v) or step: the run starts at step 0 of its own schedule.

    `vocab_file`: the run's vocabulary (its data's). Where the model has more token rows than the checkpoint,
    the checkpoint is loaded into a twin with its rows and extended into `model` (`vocab_extension`: refused
    unless `vocab_file` is the checkpoint's vocabulary with tokens appended). The log says what was loaded.
    """
    extension = _vocabulary_extension(model, init_checkpoint, vocab_file)
    target = extension.source_model(model) if extension else model
    loaded = _load_weights(target, init_checkpoint)
    if extension:
        extension.copy_into(model, target)
        logging.info("%s", extension.describe())
    fresh = [part for part in _model_parts(model) if part not in loaded]
    logging.info("Initialised weights from %s: loaded %s; fresh (as built): %s; optimizer state and step: fresh "
                 "(step 0 of this run's schedule; the checkpoint's own are not loaded)",
                 init_checkpoint, ", ".join(loaded), ", ".join(fresh) or "nothing")


def _model_parts(model) -> tuple:
    """The networks of `model` (an `ElectraPretrainer`), by the names the converters give them."""
    return tuple(part for part in ("discriminator", "discriminator_head", "generator", "generator_head",
                                   "discriminator_mlm_head") if getattr(model, part, None) is not None)


def _load_weights(model, init_checkpoint) -> tuple:
    """Copies the weights of `init_checkpoint` into `model`; returns the parts loaded."""
    if export_dir.is_export_dir(init_checkpoint):
        # Keras saves a compiled model's optimizer (its step, Adam's m and v) in the weights file: an export
        # of a run holds that run's, which must not become this run's step and state.
        optimizer = getattr(model, "optimizer", None)
        model.load_weights(os.path.join(init_checkpoint, export_dir.PRETRAINER_WEIGHTS),
                           objects_to_skip=[optimizer] if optimizer is not None else None)
        return _model_parts(model)
    if convert_api.detect_format(init_checkpoint) in ("hf", "official"):
        return convert_api.initialize_pretrainer(model, init_checkpoint)
    latest = tf.train.latest_checkpoint(os.path.join(init_checkpoint, "checkpoints")) or \
        tf.train.latest_checkpoint(init_checkpoint)
    if latest is None:
        raise ValueError(f"--init_checkpoint: no electra-tf export or checkpoint found in {init_checkpoint!r}")
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    return _model_parts(model)


def _vocabulary_extension(model, init_checkpoint, vocab_file):
    """The `VocabularyExtension` from the checkpoint's vocabulary to `vocab_file`, or None where the model has
    the checkpoint's number of token rows."""
    try:
        checkpoint_size = convert_api.read_config(init_checkpoint)[0].vocab_size
    except ValueError:  # (ConversionError too) a checkpoint file of a run: restored as it is
        return None
    if checkpoint_size == model.config.vocab_size:
        return None
    checkpoint_vocab = convert_api.checkpoint_vocab(init_checkpoint)
    vocab_extension.check_growth(init_checkpoint, checkpoint_size, checkpoint_vocab, model.config.vocab_size,
                                 vocab_file, "the run's vocabulary")
    return vocab_extension.VocabularyExtension.between(checkpoint_vocab, vocab_file)


def saves(path: str, key: str) -> bool:
    """Whether the checkpoint at `path` holds an object under `key`."""
    return any(name.split("/")[0] == key for name, _ in tf.train.list_variables(path))


def restore_or_initialize(manager, checkpoint, model, optimizer, init_checkpoint, input_key=None,
                          without_input=None, phase1: Phase1 | None = None, vocab_file=None) -> bool:
    """Resumes from the newest readable checkpoint (falling back past corrupt ones), else initialises
    (from `phase1`, else `init_checkpoint`, else as built; `vocab_file`: the run's vocabulary, see
    `initialize_from`).

    The two input pipelines (`--skip_corrupt_records` or not) save different iterator states, under
    different keys. A checkpoint holding the other one is restored through `without_input` (the
    checkpoint less the iterator), and True is returned: the caller replays the input to that step.
    """
    for path in reversed(manager.checkpoints):
        try:
            replay = without_input is not None and not saves(path, input_key)
            status = (without_input if replay else checkpoint).restore(path)
            if replay:
                status.expect_partial()
            status.assert_existing_objects_matched()
        except (tf.errors.OpError, ValueError, AssertionError, IndexError, RuntimeError) as e:  # truncated files
            logging.warning("Checkpoint %s cannot be read (%s: %s); falling back to the previous one",
                            path, type(e).__name__, str(e).splitlines()[0][:200])
            continue
        logging.info("Resumed from %s at step %d", path, loop.current_step(optimizer))
        return replay
    if manager.checkpoints:
        raise ValueError(f"no checkpoint in {manager.directory} can be read; move them away to start over")
    if phase1 is not None:
        phase1.restore(model, optimizer)
    elif init_checkpoint:
        initialize_from(model, init_checkpoint, vocab_file)
    return False


def replay_input(iterator, steps: int, report, skip_corrupt: bool, path: str, other_key: str) -> dict:
    """Advances `iterator` by `steps` batches, for a checkpoint without this pipeline's input position.

    Saved by the other pipeline (under `other_key`): both read the same examples in the same order up to the
    first skipped record, which a run that stops at corrupt records has not passed. Saved with none (a run fed by
    `--data_service`): the batches a run from step 0 would have read, which are not those the service served.
    Returns the skip report of those batches."""
    if saves(path, other_key):
        logging.warning("Checkpoint %s holds the input position of a run %s --skip_corrupt_records: reading the "
                        "input's first %d batches again to reach it", path, "without" if skip_corrupt else "with",
                        steps)
    else:
        logging.warning("Checkpoint %s holds no input position (a run fed by --data_service saved it): reading "
                        "the input's first %d batches again, so this run goes on as one that read its own input "
                        "from step 0 would (not exact: the service's order was another)", path, steps)

    @tf.function
    def advance(num_steps):
        total = report.zeros() if report is not None else {}
        for _ in tf.range(num_steps):
            element = next(iterator)
            if report is not None:
                _, counts = report.split(element)
                total = {name: total[name] + counts[name] for name in total}
        return total

    return advance(tf.constant(steps))


def restore_worker_input(input_saver, step: int, worker: int, input_key: str) -> bool:
    """`--input_sharding=file`: this worker's iterator state at `step`, if it was saved; True when it
    was saved by the other `--skip_corrupt_records` pipeline (the caller replays the input)."""
    path = os.path.join(input_saver.directory, f"ckpt-{step}")
    if tf.io.gfile.exists(path + ".index"):
        if not saves(path, input_key):
            return True
        input_saver.checkpoint.restore(path).assert_consumed()
        return False
    if step > 0:
        logging.warning("Worker %d has no saved input position at step %d (a different number of workers?): "
                        "its data starts over, so some examples are seen again early", worker, step)
    return False
