"""Resuming fine-tuning: checkpoints, the settings they belong to, and finished seeds.

A run directory (the output dir, or `seed_<n>/` with several seeds) holds
`checkpoints/` (a `tf.train.CheckpointManager`: model, optimizer, dropout RNG
state and `TrainProgress`: the batches consumed and the best-evaluation
tracking) and `run_settings.json`, the settings that must not change under a
resumed run. `train_result.json` marks a finished
seed (`train_result.json` holds its result; `run_metrics.json` is the latest
invocation's, which may be a --do_train=false one); its checkpoints are then
removed (the weights stay in `final.weights.h5`).
The batch order is a function of the seed (`data.batch_plan`), so the number of
batches consumed is the whole data position.

Example:

>>> differing_settings({"task": "RTE", "learning_rate": 1e-4}, {"task": "RTE", "learning_rate": 2e-4})
['learning_rate: 0.0001 there vs 0.0002 now']
>>> differing_settings({"task": "ner"}, {"task": "ner", "tagging_segment_id": 1})
['tagging_segment_id: not recorded there vs 1 now']
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time

import tensorflow as tf
from absl import logging

from electra_tf.options import RunOptions
from electra_tf.text.manifest import write_json_atomic
from electra_tf.training.pretraining import rng_states
from electra_tf.training.run_record import note_execution_changes

CHECKPOINT_DIR = "checkpoints"
SETTINGS = "run_settings.json"
TRAIN_RESULT = "train_result.json"
# What a run writes to its directory, removed by --overwrite_output_dir (nothing else is touched).
RUN_FILES = (CHECKPOINT_DIR, SETTINGS, TRAIN_RESULT, "run_metrics.json", "final.weights.h5", "best.weights.h5",
             "log.jsonl", "tensorboard")

# The options that shape the trained weights; the others (evaluation, prediction, export, logging,
# kernels) may change between invocations of one run.
TRAINING_OPTIONS = ("learning_rate", "train_batch_size", "num_train_epochs", "warmup_fraction", "weight_decay",
                    "layerwise_lr_decay", "max_seq_length", "seed", "official_layerwise_lr_bug", "max_train_steps",
                    "select_best_epoch", "dynamic_padding", "length_bucketing", "mixed_precision")
EXECUTION = "execution"  # the resolved execution choices, beside the settings (named on change, not refused)
# Config values the options above already hold (the flags override them), so a change is named once.
CONFIG_AS_OPTIONS = ("finetune_learning_rate", "finetune_batch_size", "finetune_epochs", "finetune_warmup_fraction",
                     "finetune_weight_decay", "finetune_layerwise_lr_decay", "finetune_official_layerwise_lr_bug")


def run_settings(task_name: str, config, options: RunOptions, init_checkpoint=None, num_train_examples=None,
                 task_settings=None) -> dict:
    """What identifies a fine-tuning run: task, model, initial weights, data size, training options and the
    task's own options that shape the weights (`Task.training_settings()`); and, under `EXECUTION`, the resolved
    execution choices where `options.execution` is resolved (a resume that changes them is named in one line)."""
    settings = {"task": task_name, "init_checkpoint": init_checkpoint, "train_examples": num_train_examples}
    if options.execution.resolved:
        settings[EXECUTION] = dataclasses.asdict(options.execution)
    settings.update(task_settings or {})
    settings.update({name: getattr(options, name) for name in TRAINING_OPTIONS})
    model = {k: v for k, v in config.to_dict().items() if k not in CONFIG_AS_OPTIONS}
    settings.update(_flat(model, "config."))
    return json.loads(json.dumps(settings))  # tuples as lists, as they come back from the file


def _flat(values: dict, prefix: str) -> dict:
    """Nested dicts as dotted names, so a change names the one field that differs."""
    flat = {}
    for key, value in values.items():
        flat.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


def differing_settings(stored: dict, current: dict) -> list[str]:
    """`name: stored there vs current now` per setting that differs ("not recorded" where a run lacks it)."""
    def shown(settings, key):
        return settings[key] if key in settings else "not recorded"

    # A setting one run lacks compares as None: settings added later with a None default still resume.
    return [f"{k}: {shown(stored, k)} there vs {shown(current, k)} now" for k in sorted(set(stored) | set(current))
            if stored.get(k) != current.get(k)]


def check_settings(run_dir: str, settings: dict):
    """Refuses (ValueError) to go on with a run directory that holds another run's state."""
    path = os.path.join(run_dir, SETTINGS)
    if not os.path.exists(path):
        if os.path.isdir(os.path.join(run_dir, CHECKPOINT_DIR)):
            raise ValueError(f"--output_dir: {run_dir} holds checkpoints but no {SETTINGS}; use a new "
                             "--output_dir or --overwrite_output_dir")
        return
    with open(path) as f:
        stored = json.load(f)
    # The execution choices change the random streams or arithmetic, not what is trained: named, not refused.
    recorded, execution = stored.pop(EXECUTION, None), settings.get(EXECUTION)
    diff = differing_settings(stored, {name: value for name, value in settings.items() if name != EXECUTION})
    if diff:
        raise ValueError(f"--output_dir: {run_dir} holds a fine-tuning run with other settings "
                         f"({'; '.join(diff)}); re-run with the same flags to resume, or use a new --output_dir "
                         "or --overwrite_output_dir")
    if recorded is not None and execution is not None and os.path.isdir(os.path.join(run_dir, CHECKPOINT_DIR)):
        note_execution_changes(f"--output_dir {run_dir}", recorded, execution)


def start_run(run_dir: str, settings: dict):
    """Checks `run_dir` holds nothing of another run, then records `settings` there."""
    check_settings(run_dir, settings)
    os.makedirs(run_dir, exist_ok=True)
    write_json_atomic(os.path.join(run_dir, SETTINGS), settings)


def finish_run(run_dir: str, result: dict):
    """Marks the seed finished (its result) and removes its checkpoints: the weights are in final.weights.h5."""
    write_json_atomic(os.path.join(run_dir, TRAIN_RESULT), result)
    shutil.rmtree(os.path.join(run_dir, CHECKPOINT_DIR), ignore_errors=True)


def finished_result(run_dir: str):
    """The stored result of a seed whose training finished, else None."""
    path = os.path.join(run_dir, TRAIN_RESULT)
    if not (os.path.exists(path) and os.path.exists(os.path.join(run_dir, SETTINGS))):
        return None
    with open(path) as f:
        return json.load(f)


def remove_run_state(run_dir: str, names=RUN_FILES):
    """--overwrite_output_dir: removes what a run wrote to `run_dir` (only those names, nothing else)."""
    for name in names:
        path = os.path.join(run_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


class TrainProgress(tf.train.experimental.PythonState):
    """The run's two counts and the best-evaluation tracking, saved inside each checkpoint: `step`, the
    optimizer steps applied (the schedule's position), and `batches`, the batches consumed (the data
    position). They differ under fp16: a step the loss scale skips reads its batch and applies nothing.

    Checkpoints written before the two were told apart hold only "step", which was both; a resume from one
    says in one line that an fp16 run's data position could not be checked (`legacy`)."""

    def __init__(self, tracker):
        self.step, self.batches, self.tracker = 0, 0, tracker
        self.legacy = False  # restored from a checkpoint without "batches"

    def serialize(self):
        return json.dumps({"step": self.step, "batches": self.batches, "tracker": self.tracker.state()})

    def deserialize(self, string_value):
        content = json.loads(string_value.numpy() if hasattr(string_value, "numpy") else string_value)
        self.step = content["step"]
        self.legacy = "batches" not in content
        self.batches = content.get("batches", self.step)
        self.tracker.load_state(content["tracker"])


class TrainingCheckpoints:
    """The run's `tf.train.CheckpointManager` over model, optimizer, dropout RNG state and progress."""

    def __init__(self, run_dir: str, model, optimizer, tracker, max_to_keep: int = 2):
        self.progress = TrainProgress(tracker)
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, dropout_rng=rng_states(model),
                                              progress=self.progress)
        self.manager = tf.train.CheckpointManager(self.checkpoint, os.path.join(run_dir, CHECKPOINT_DIR),
                                                  max_to_keep=max_to_keep)

    def restore(self) -> int:
        """Restores the newest readable checkpoint (past truncated ones); returns the batches it had consumed
        (0: none; its optimizer step is the optimizer's `iterations`, restored with it)."""
        for path in reversed(self.manager.checkpoints):
            try:
                self.checkpoint.restore(path).assert_existing_objects_matched()
            except (tf.errors.OpError, ValueError, AssertionError, IndexError, RuntimeError) as e:
                logging.warning("Checkpoint %s cannot be read (%s: %s); falling back to the previous one",
                                path, type(e).__name__, str(e).splitlines()[0][:200])
                continue
            logging.info("Resuming fine-tuning from %s at step %d, %d batches consumed", path, self.progress.step,
                         self.progress.batches)
            if self.progress.legacy:
                logging.warning("Checkpoint %s was written before checkpoints recorded the batches consumed apart "
                                "from the optimizer steps: resuming at batch %d, which is exact unless the run "
                                "skipped fp16 (loss-scale overflow) steps", path, self.progress.batches)
            return self.progress.batches
        if self.manager.checkpoints:
            raise ValueError(f"no checkpoint in {self.manager.directory} can be read; use "
                             "--overwrite_output_dir to start over")
        return 0

    def save(self, step: int, batches: int):
        """A checkpoint at optimizer step `step` (its number) after `batches` batches consumed."""
        self.progress.step, self.progress.batches = step, batches
        self.manager.save(checkpoint_number=step)
        # Test hook: a pause after each checkpoint, so a test can SIGKILL the run mid-way.
        pause = float(os.environ.get("ELECTRA_TEST_PAUSE_AFTER_CHECKPOINT", "0") or 0)
        if pause:
            time.sleep(pause)


def options_without_training(options: RunOptions) -> RunOptions:
    """For a finished seed: only the prediction / export its stored result may lack."""
    return dataclasses.replace(options, do_train=False, do_eval=False)
