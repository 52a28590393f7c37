"""What a pre-training run is, recorded once per run directory, and the one comparison every start goes through.

The record is `<model_dir>/run_config.json` (`convert.api.RUN_CONFIG`, which the converters and `--do_eval` read
as the run's config): the whole `ElectraConfig`, then under `convert.api.RUN_RECORD_KEY` where phase 2 started,
and under `convert.api.RUN_OPTIONS_KEY`:

- the recipe options (`RECIPE_OPTIONS`: seed, shuffle buffer, input sharding, precision), for `--train_text`
  its source and packing (`TEXT_RECIPE`), and the data's vocabulary digest (`VOCABULARY`);
- the data's identity (`DATA_KEY`: source, vocab file, vocab size; the manifest's sha256 for shards);
- the execution choices that change the random streams or the arithmetic (`EXECUTION_KEY`: the resolved
  kernels, dropout masks, sampling, Adam kernel, XLA, graph optimizer, micro-batches, replicas, workers,
  whether a tf.data service feeds the input, and the dropout stream `example_dropout.DROPOUT_STREAM`; also where
  the steps loop, which changes neither and is not compared, `SAME_STEPS`).

The counts live in the checkpoints, which a resume restores together: the optimizer's steps, the input
iterator's position (the batches consumed; fp16's skipped steps read a batch each) and, under
`--skip_corrupt_records`, the records lost.

`check_start` compares a start with the record and answers one of three ways:

- continue exactly: nothing differs (or only what a command may change: paths, logging, cadence, fault handling);
- continue with a named difference: the execution choices differ, and one log line says whether the resume
  still follows the uninterrupted run's trajectory (`resume_note`): another split of the batch (replicas, workers,
  micro-batches) under `--input_sharding=batch` does, since dropout, masking and sampling are keyed by the example
  (INFO); `--input_sharding=file` on other workers reads another data order, a checkpoint of another (or no
  recorded) dropout stream continues on other masks, and any other choice (another device kind where `auto`
  resolves otherwise, `--sampling`, `--dropout_masks`, `--data_service` added or dropped) changes the random
  stream or arithmetic (a WARNING naming each). A run must still be able to move to other hardware
  (docs/distributed.md);
- refuse: a recipe field or the vocabulary differs after the first checkpoint: one line naming the field, both
  values and the flag to change (`num_train_steps` may change where the learning rate of the steps taken stays,
  `new_total_allowed`).

Before the first checkpoint nothing has been learnt under the record, so any field may change: the earlier
start's record is replaced, in one log line naming what changed. Folders written before a part was recorded
(no options, no data identity, no execution; `execution.json` beside the config) still resume, with one line
naming what could not be checked; the record is complete from then on.

Every start calls it: a resume, a fresh run, `--init_checkpoint` and `--train_text` (through the data identity),
`--data_service` (an execution choice) and phase 2 (`check_phase2_data`: phase 2's data must have phase 1's
vocabulary). No other module reads the record's recipe options or vocabulary
(tests/test_run_combinations.py checks it).

Example (a record's options for a run on shards):

>>> from electra_tf.options import TrainOptions
>>> recipe_options(TrainOptions(data_dir="d", model_dir="m"), {"vocab_sha256": "ab" * 32})["mixed_precision"]
'float32'
"""

import dataclasses
import json
import os
import re

import tensorflow as tf
from absl import logging

from electra_tf.config import ElectraConfig, flatten
from electra_tf.convert import api as convert_api
from electra_tf.model.example_dropout import DROPOUT_STREAM
from electra_tf.options import PRECISIONS
from electra_tf.text.manifest import sha256_file
from electra_tf.text.vocabulary import Vocabulary, check_vocabulary

# The `TrainOptions` that belong to a run's recipe beside its config: the seed (initialisation, data order,
# masks, samples, dropout), the data order (the shuffle buffer; `input_sharding`: file sharding reads in
# another order), the arithmetic (mixed_precision; fp16 also adds the loss scale to the optimizer state).
# Not `data_service`: where the input runs, an execution choice (`EXECUTION_KEY`).
RECIPE_OPTIONS = ("seed", "shuffle_buffer", "input_sharding", "mixed_precision")
# --train_text runs also record their source and packing (text_input.synthesized_manifest's fields).
TEXT_RECIPE = ("train_text", "do_lower_case", "short_seq_prob", "single_segment_prob", "eval_fraction")
# The vocabulary the token ids mean: the sha256 of the tokenizer file, as data_prep's manifest records it.
VOCABULARY = "vocab_sha256"
DATA_KEY = "data"  # the data's identity (`data_identity`)
EXECUTION_KEY = "execution"  # the execution choices (`execution_record`)
# How a step's batch is split (`execution_record`'s fields): with the dropout stream keyed by the example and
# `--input_sharding=batch` they change no random stream, so a resume may change them (`resume_note`).
LAYOUT = ("replicas", "workers", "gradient_accumulation_steps")
# Execution choices under which the steps are the same bit for bit (`tests/test_training.py`): a resume may change
# them without a word.
SAME_STEPS = ("step_loop",)
# The execution choices written by runs before the record held them (only the micro-batches).
LEGACY_EXECUTION_FILE = "execution.json"
# The flag that sets a recorded value, named in a refusal (the other config fields: --hparams).
FLAG_OF = {**{name: f"--{name}" for name in ("model_size", "objective", "optimizer", "train_batch_size",
                                              "learning_rate", "num_train_steps", "num_warmup_steps",
                                              "max_seq_length", *RECIPE_OPTIONS, *TEXT_RECIPE)},
           VOCABULARY: "--data_dir's vocabulary"}


def recipe_options(options, manifest: dict) -> dict:
    """The recipe's part of `options` (`TrainOptions`) and the vocabulary of the data (`manifest`; None where
    its build recorded no sha256); for --train_text also the text source and packing (`TEXT_RECIPE`)."""
    values = {name: getattr(options, name) for name in RECIPE_OPTIONS}
    values["mixed_precision"] = PRECISIONS[options.mixed_precision]  # "none" and "fp32" are one policy
    text = {name: manifest[name] for name in TEXT_RECIPE} if manifest.get("source") == "train_text" else {}
    return {**values, VOCABULARY: manifest.get(VOCABULARY), **text}


def data_identity(options, manifest: dict) -> dict:
    """What the data is, beside the recipe's vocabulary digest: its source, vocab file and size, and for shards
    the sha256 of their manifest (a rebuilt or other --data_dir is named in the resume's log)."""
    identity = {"source": "train_text" if manifest.get("source") == "train_text" else "shards",
                "vocab_file": manifest.get("vocab_file"), "vocab_size": manifest.get("vocab_size")}
    manifest_file = os.path.join(options.data_dir, "manifest.json") if options.data_dir else None
    if manifest_file and os.path.isfile(manifest_file):
        identity["manifest_sha256"] = sha256_file(manifest_file)
    return identity


def execution_record(execution, strategy, data_service: str | None) -> dict:
    """The resolved execution choices of this start that change random streams or arithmetic: every
    `ExecutionOptions` field, the replicas and workers, whether a tf.data service feeds the input, and the
    dropout stream (`example_dropout.DROPOUT_STREAM`; a record without one was written under the old
    per-replica stream)."""
    from electra_tf.training import distribution

    values = dataclasses.asdict(execution)
    values.update(replicas=strategy.num_replicas_in_sync, workers=distribution.num_workers(strategy),
                  data_service=bool(data_service), dropout_stream=DROPOUT_STREAM)
    return values


def recorded_micro_batches(model_dir: str) -> int | None:
    """The micro-batches per replica batch the run in `model_dir` recorded (a resume keeps them unless
    `--gradient_accumulation_steps` says otherwise), or None; from the record, else a legacy `execution.json`.
    None before the first checkpoint: a retry may choose again."""
    if not has_checkpoint(model_dir):
        return None
    recorded = _recorded_execution(model_dir)
    return recorded.get("gradient_accumulation_steps")


def _recorded_execution(model_dir: str) -> dict:
    path = convert_api.run_config_path(model_dir)
    execution = (convert_api.run_record(path, convert_api.RUN_OPTIONS_KEY) or {}).get(EXECUTION_KEY) if path else None
    if execution is not None:
        return execution
    legacy = os.path.join(model_dir, LEGACY_EXECUTION_FILE)
    if tf.io.gfile.exists(legacy):
        with tf.io.gfile.GFile(legacy) as f:
            return json.load(f)
    return {}


def check_start(model_dir: str, config: ElectraConfig, write: bool = True, record: dict | None = None,
                options: dict | None = None, data: dict | None = None, execution: dict | None = None) -> None:
    """The start of the run in `model_dir` against its record (see the module docstring), then the record
    written there (if `write`; temporary name, then rename): refuses (ValueError, one line) a change of recipe
    or vocabulary after the first checkpoint, logs one line for changed execution choices, replaces the
    record before the first checkpoint.

    `options`: `recipe_options`; `data`: `data_identity`; `execution`: `execution_record`; `record`: the
    run's facts (`convert_api.RUN_RECORD_KEY`: where phase 2 started), the first start's kept on resume."""
    options, data, execution = options or {}, data or {}, execution or {}
    existing = convert_api.run_config_path(model_dir)
    if existing and not has_checkpoint(model_dir):
        _note_replaced(model_dir, existing, config, options)
        existing_record = None
    elif existing:
        stored = convert_api.run_record(existing, convert_api.RUN_OPTIONS_KEY) or {}
        _check_same_recipe(model_dir, existing, config, options, stored)
        _check_same_vocabulary(model_dir, stored, options, data)
        _note_execution_changes(model_dir, stored, execution)
        existing_record = convert_api.run_record(existing)
        if not options:  # a caller without options keeps the record's
            options, data = _recipe_part(stored), stored.get(DATA_KEY) or data
            execution = execution or stored.get(EXECUTION_KEY) or {}
    else:
        existing_record = None
    if write:
        values = dict(options, **({DATA_KEY: data} if data else {}), **({EXECUTION_KEY: execution} if execution else {}))
        _write(existing or os.path.join(model_dir, convert_api.RUN_CONFIG), config, existing_record or record, values)


def _recipe_part(stored: dict) -> dict:
    return {name: value for name, value in stored.items() if name not in (DATA_KEY, EXECUTION_KEY)}


def _note_replaced(model_dir: str, path: str, config: ElectraConfig, options: dict) -> None:
    """Before the first checkpoint the record only says what an earlier start meant to do: replaced."""
    stored = convert_api.run_record(path, convert_api.RUN_OPTIONS_KEY) or {}
    changes = recipe_changes(convert_api.load_run_config(path), config, _recipe_part(stored), options)
    if changes:
        logging.warning("--model_dir %s: the record of an earlier start that wrote no checkpoint is replaced (%s)",
                        model_dir, "; ".join(f"{name}: {old} -> {new}" for name, (old, new) in changes.items()))


def _check_same_recipe(model_dir: str, path: str, config: ElectraConfig, options: dict, stored: dict) -> None:
    stored_options = _recipe_part(stored)
    changes = recipe_changes(convert_api.load_run_config(path), config, stored_options, options)
    changes.pop(VOCABULARY, None)  # the vocabulary rule decides (`_check_same_vocabulary`)
    steps = steps_taken(model_dir)
    if "num_train_steps" in changes and new_total_allowed(config, steps):
        old, new = changes.pop("num_train_steps")
        logging.info("num_train_steps: %d -> %d; the learning rate of the %d step(s) taken is the same under both",
                     old, new, steps)
    if changes:
        details = "; ".join(_change_line(name, old, new, steps) for name, (old, new) in changes.items())
        raise ValueError(f"--model_dir {model_dir} holds a run with another recipe ({details}): re-run with the "
                         f"values recorded in {path} to resume it, or use a new --model_dir")
    unchecked = [name for name in options if name not in stored_options]
    if unchecked:  # a run folder written before the options were recorded: they are from now on
        logging.warning("--model_dir %s was written before runs recorded %s: this resume cannot check them "
                        "(the config is checked; these are recorded from now on)", model_dir, ", ".join(unchecked))


def _check_same_vocabulary(model_dir: str, stored: dict, options: dict, data: dict) -> None:
    """The vocabulary rule between the record's data and this start's: the same vocabulary, or refused."""
    if options.get(VOCABULARY) is None and not data.get("vocab_file"):
        return
    recorded = Vocabulary(f"the vocabulary --model_dir {model_dir} recorded", (stored.get(DATA_KEY) or {}).get(
        "vocab_file"), stored.get(VOCABULARY))
    now = Vocabulary("this start's data vocabulary", data.get("vocab_file"), options.get(VOCABULARY))
    check_vocabulary(recorded, now, allow_extension=False,
                     hint=f"{FLAG_OF[VOCABULARY]} must be the one the run was trained on; use a new --model_dir "
                          "(--init_checkpoint from its export) for another")


def _note_execution_changes(model_dir: str, stored: dict, execution: dict) -> None:
    recorded = stored.get(EXECUTION_KEY)
    if recorded is None:
        if execution:
            logging.warning("--model_dir %s was written before runs recorded their execution choices: this resume "
                            "cannot check them (recorded from now on)", model_dir)
        return
    note_execution_changes(f"--model_dir {model_dir}", recorded, execution, stored.get("input_sharding"))


def note_execution_changes(where: str, recorded: dict, execution: dict, input_sharding: str | None = None) -> None:
    """One log line on whether the resume of the run at `where` (a flag and folder) continues the uninterrupted
    run's trajectory (`resume_note`: this start's `execution` against the `recorded` choices; `input_sharding`:
    the record's, None where it has none or the run is not a pre-training run); none where nothing differs."""
    note = resume_note(where, recorded, execution, input_sharding)
    if note is not None:
        level, line = note
        logging.log(level, "%s", line)


def resume_note(where: str, recorded: dict, execution: dict, input_sharding: str | None) -> tuple[int, str] | None:
    """`(absl level, line)` classifying the execution changes of the resume at `where`, or None where nothing
    differs:

    - only the layout (replicas, workers, micro-batches) differs, under `--input_sharding=batch` (or `file` with
      the recorded workers), no tf.data service and the recorded dropout stream: INFO, the same trajectory;
    - otherwise a WARNING naming each consequence: dropout masks differ (the record names another stream or none:
      its checkpoints were written under the per-replica stream), the data order differs (`--input_sharding=file`
      and another worker count), the random stream or arithmetic differs (any other choice, and the layout where
      the input sharding is unknown or a tf.data service feeds the input).

    `SAME_STEPS` choices (where the steps loop) change no bit and are not compared.
    Micro-batches are compared only for the layout: `distribution.choose_micro_batches` keeps the recorded count
    and says so where it cannot."""
    def differs(name):
        return name in execution and recorded.get(name, execution[name]) != execution[name]

    stream = execution.get("dropout_stream")
    stream_differs = stream is not None and recorded.get("dropout_stream") != stream
    layout_changed = any(differs(name) for name in LAYOUT)
    file_order = input_sharding == "file" and differs("workers")
    keyed_input = input_sharding in ("batch", "file") and not execution.get("data_service")
    others = [name for name in execution if name not in ("dropout_stream", *LAYOUT, *SAME_STEPS) and differs(name)]
    if layout_changed and not keyed_input and not file_order:  # nothing says the split changes no stream
        others += [name for name in LAYOUT if differs(name)]
    consequences = []
    if others:
        consequences.append("the random stream or arithmetic now differs from the uninterrupted run's (exact only "
                            "with the recorded choices)")
    if stream_differs:
        consequences.append(_dropout_stream_change(recorded.get("dropout_stream"), stream))
    if file_order:
        consequences.append("the data order now differs from the uninterrupted run's: with --input_sharding=file "
                            "each worker reads its own shards, so the order depends on the number of workers "
                            f"({recorded['workers']} there vs {execution['workers']} now)")
    head = [f"{where} resumes"] + ([_layout(execution, recorded)] if layout_changed else [])
    if not consequences:
        return (logging.INFO, " ".join(head) + ": the same trajectory (dropout, masking and sampling are keyed by "
                                               "the example)") if layout_changed else None
    if others:
        head.append("with other execution choices (" + "; ".join(
            f"{name}: {recorded.get(name)} there vs {execution[name]} now" for name in others) + ")")
    return logging.WARNING, " ".join(head) + ": " + "; ".join(consequences)


def _layout(execution: dict, recorded: dict) -> str:
    """'on R replica(s) × K micro-batch(es) (recorded: R' × K')', the workers named where either side has several;
    'with K micro-batch(es) (recorded: K')' for a record without replicas (fine-tuning's)."""
    def now_or_recorded(name):
        return execution.get(name), recorded.get(name, execution.get(name))

    (micro, old_micro), (replicas, old_replicas) = now_or_recorded("gradient_accumulation_steps"), \
        now_or_recorded("replicas")
    micro_batches = f"{micro} micro-batch{'es' * (micro != 1)}"
    if replicas is None:
        return f"with {micro_batches} (recorded: {old_micro})"
    workers, old_workers = now_or_recorded("workers")
    several = max(workers or 1, old_workers or 1) > 1

    def on_workers(count):
        return f" on {count} worker{'s' * (count != 1)}" if several else ""

    return (f"on {replicas} replica{'s' * (replicas != 1)}{on_workers(workers)} × {micro_batches} "
            f"(recorded: {old_replicas}{on_workers(old_workers)} × {old_micro})")


def _dropout_stream_change(recorded: str | None, stream: str) -> str:
    where = ("before runs recorded their dropout stream (the old per-replica stream: each layer's seed generator "
             "per replica)" if recorded is None else f"under dropout stream {recorded}")
    return (f"dropout masks now differ from the uninterrupted run's: its checkpoints were written {where}, this start "
            f"draws {stream} (keyed by the example)")


def recipe_changes(stored: ElectraConfig, config: ElectraConfig, stored_options: dict, options: dict) -> dict:
    """`{name: (stored, now)}` for each config field (encoder fields as dotted names) and recipe option that
    differs. An option one side lacks (not recorded yet, a vocabulary without a sha256) is not compared."""
    before, now = flatten(stored.to_dict()), flatten(config.to_dict())
    changes = {name: (value, now[name]) for name, value in before.items() if value != now[name]}
    changes.update({name: (stored_options[name], value) for name, value in options.items()
                    if None not in (stored_options.get(name), value) and stored_options[name] != value})
    return changes


def new_total_allowed(config: ElectraConfig, steps: int) -> bool:
    """Whether a resume at `steps` may change `num_train_steps`: only where the learning rate of every step
    taken stays as it was, so the run equals one started with the new total. The rate decays towards 0 at
    num_train_steps from the first step on (`optimization.WarmupLinearDecay`), so that is before the first
    step, or with `lr_decay_power=0` (no decay)."""
    return steps == 0 or config.lr_decay_power == 0


def has_checkpoint(model_dir: str) -> bool:
    return tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")) is not None


def steps_taken(model_dir: str) -> int:
    """The step of the newest checkpoint in run directory `model_dir` (0 if none)."""
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    return checkpoint_step(latest) if latest else 0


def checkpoint_step(path: str) -> int:
    match = re.search(r"-(\d+)$", path)
    return int(match.group(1)) if match else 0


def _change_line(name: str, old, new, steps: int) -> str:
    line = f"{name} ({FLAG_OF.get(name, '--hparams')}): {old} there vs {new} now"
    if name == "num_train_steps":
        line += (f", refused at step {steps}: the learning rate decays to 0 at num_train_steps from the first step "
                 "on, so a new total changes the rate of the steps taken (allowed before the first checkpoint or "
                 "with lr_decay_power=0)")
    return line


def _write(path: str, config: ElectraConfig, record: dict | None, options: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    values = config.to_dict()
    if record:
        values[convert_api.RUN_RECORD_KEY] = record
    if options:
        values[convert_api.RUN_OPTIONS_KEY] = options
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(values, indent=2, sort_keys=True))
    os.replace(tmp, path)


def recorded_config(model_dir: str, flag: str, remedy: str = "run it there first") -> ElectraConfig:
    """The config recorded by the run in `model_dir`; ValueError naming `flag` (and `remedy`) where there is
    none."""
    path = convert_api.run_config_path(model_dir)
    if path is None:
        raise ValueError(f"{flag}: {model_dir} holds no pre-training run (no {convert_api.RUN_CONFIG}); {remedy}")
    return convert_api.load_run_config(path)


def check_phase2_data(phase1_dir: str, manifest: dict) -> None:
    """Phase 2's data must mean by its ids what phase 1's meant: the vocabulary rule between phase 1's record
    and phase 2's data (`manifest`), no extension (phase 2 keeps phase 1's embedding rows); a phase-1 record
    without a vocabulary is noted in one line."""
    path = convert_api.run_config_path(phase1_dir)
    stored = convert_api.run_record(path, convert_api.RUN_OPTIONS_KEY) or {} if path else {}
    phase1 = Vocabulary(f"phase 1's vocabulary ({phase1_dir})", (stored.get(DATA_KEY) or {}).get("vocab_file"),
                        stored.get(VOCABULARY))
    phase2 = Vocabulary("--phase2's --data_dir vocabulary", manifest.get("vocab_file"), manifest.get(VOCABULARY))
    verdict = check_vocabulary(phase1, phase2, allow_extension=False,
                               hint="phase 2 keeps phase 1's embedding rows: build its shards with phase 1's "
                                    "vocabulary")
    if verdict == "unchecked":
        logging.warning("--phase2: phase 1's record in %s holds no vocabulary digest (written before runs recorded "
                        "it), so phase 2's data vocabulary could not be compared with it", phase1_dir)
