"""One entry point per use: detect a checkpoint's format and load it whatever it is.

* `detect_format(path)` → "ours" (an export directory), "hf", "official",
  "ours_checkpoint" (a TF2 training-run checkpoint of ours), "keras_hub" or "finetuned"
  (a `run_finetuning.py --output_dir`, read by `finetuned`; its model is rebuilt by
  `electra_tf.finetuning.finetuned_run`, as this package does not import fine-tuning);
* `load_any(path, config=None)` → `(ElectraConfig, ElectraPretrainer, vocab_file)`;
* `load_encoder(path, config=None, name=...)` → `(ElectraEncoder, ElectraConfig,
  vocab_file)`: the encoder to fine-tune (of a pre-training checkpoint: a fine-tuning run's is
  `finetuning.finetuned_run.load_finetuned_encoder`);
* `read_config(path)` → `(ElectraConfig, recorded finetune_* fields)` without
  building a model (exports and run directories of ours: their JSON; Hugging
  Face and official checkpoints: tensor shapes and config files);
* `initialize_pretrainer(model, path)` copies a foreign checkpoint into an
  existing, built `ElectraPretrainer` (`run_pretraining.py --init_checkpoint`).

Example:

>>> from electra_tf.convert import detect_format, load_any
>>> detect_format("tests/fixtures/hf_electra")
'hf'
>>> config, pretrainer, vocab = load_any("tests/fixtures/hf_electra")
>>> type(pretrainer).__name__, config.discriminator.num_heads
('ElectraPretrainer', 4)
>>> read_config("tests/fixtures/hf_electra")[0] == config
True
"""

import json
import os

from electra_tf.config import ElectraConfig
from electra_tf.convert import export_dir, finetuned, foreign, hf, keras_model, official, vocab
from electra_tf.convert.errors import ConversionError
from electra_tf.model.encoder import ElectraEncoder

FORMATS = ("ours", "hf", "official", "ours_checkpoint", "keras_hub", "finetuned")
# Rebuilding a fine-tuned model needs the fine-tuning package, which imports this one: it loads the run's encoder.
FINETUNED_ENCODER = ("{path} is a fine-tuning run: load its encoder with "
                     "electra_tf.finetuning.finetuned_run.load_finetuned_encoder (or run_finetuning.py "
                     "--init_checkpoint={path})")


def is_keras_hub_preset(path: str) -> bool:
    config = os.path.join(path, "config.json")
    if not (os.path.isfile(config) and os.path.isfile(os.path.join(path, "metadata.json"))):
        return False
    with open(config) as f:
        return "keras_hub" in str(json.load(f).get("module", ""))


def detect_format(path: str) -> str:
    """The format of the checkpoint at `path` (one of `FORMATS`)."""
    if export_dir.is_export_dir(path):
        return "ours"
    if finetuned.is_finetuning_run(path):  # before its checkpoints/ (a run still training) are seen
        return "finetuned"
    if is_keras_hub_preset(path):
        return "keras_hub"
    if hf.is_hf_dir(path):
        return "hf"
    for candidate in (path, os.path.join(path, "checkpoints")):
        prefix = official.checkpoint_prefix(candidate)
        if prefix:
            return "ours_checkpoint" if official.is_object_based(prefix) else "official"
    raise ConversionError(
        f"{path}: unrecognised checkpoint; expected an electra-tf export directory (electra_config.json), "
        "a Hugging Face directory (config.json + model.safetensors/pytorch_model.bin), or a TF1 checkpoint "
        "(model.ckpt-N.index, or a directory with a `checkpoint` file)")


_NOT_FOREIGN = {
    "ours": "an export directory of ours: load it with load_any() or load_encoder()",
    "ours_checkpoint": "a training-run checkpoint of ours: use the run's export directory "
                       "(run_pretraining.py --export_only) or restore it with tf.train.Checkpoint",
    "keras_hub": "a keras-hub preset: an output format only",
    "finetuned": "a fine-tuned model (a run_finetuning.py --output_dir): fine-tune from it or export it with "
                 "run_finetuning.py --init_checkpoint, convert it with python -m electra_tf.convert --to=onnx or --to=hf",
}


def open_foreign(path: str, source_format: str, generator_path: str | None = None) -> foreign.ForeignCheckpoint:
    """The Hugging Face or official checkpoint at `path`."""
    if source_format == "hf":
        return hf.open_hf(path, generator_path)
    if source_format == "official":
        return official.open_official(path)
    raise ConversionError(f"{path} is {_NOT_FOREIGN.get(source_format, repr(source_format))}")


def load_any(path: str, config: ElectraConfig | None = None, vocab_file: str | None = None,
             generator_path: str | None = None, overrides: dict | None = None, strict: bool = True,
             source_format: str | None = None):
    """`(ElectraConfig, ElectraPretrainer, vocab_file)` from any supported checkpoint.

    `config` (full) or `overrides` (some fields, e.g. `--config_json`) are
    checked against the checkpoint: with `strict` a difference in any
    weight-shaping field raises a `ConversionError` listing the variables
    concerned; with `strict=False` the checkpoint's architecture wins (logged).
    """
    source_format = source_format or detect_format(path)
    if source_format == "ours":
        return export_dir.load_ours(path, config, overrides, strict)
    opened = open_foreign(path, source_format, generator_path)
    return foreign.load(opened, config, vocab_file, overrides, strict)


def load_encoder(path: str, config: ElectraConfig | None = None, name: str = "discriminator",
                 vocab_file: str | None = None, strict: bool = True, execution=None):
    """`(ElectraEncoder, ElectraConfig, vocab_file)` of the encoder to fine-tune.

    Our exports: the export decides every weight-shaping field (differences
    from `config` are logged) and `config`'s training fields are kept. Hugging
    Face / official checkpoints: `strict` refuses a `config` of another
    architecture, listing the mismatched variables. `execution`: how the encoder computes (resolved
    `ExecutionOptions`; default: the portable ones). A fine-tuning run is refused in one line naming
    `electra_tf.finetuning.finetuned_run.load_finetuned_encoder`, which loads it.
    """
    if export_dir.is_export_dir(path):
        return export_dir.load_ours_encoder(path, config, name, execution)
    if finetuned.is_finetuning_run(path):
        raise ConversionError(FINETUNED_ENCODER.format(path=path))
    config, pretrainer, vocab = load_any(path, config, vocab_file=vocab_file, strict=strict)
    encoder = ElectraEncoder.from_config_object(config, "discriminator", name=name, execution=execution)
    encoder.build()
    variables = {**keras_model.embedding_variables(encoder.embeddings),
                 **keras_model.encoder_variables(encoder, "discriminator")}
    keras_model.assign_variables(variables, keras_model.read_weights(pretrainer, ("discriminator",)))
    return encoder, config, vocab


def read_config(path: str) -> tuple[ElectraConfig, dict]:
    """`(config, finetune_* fields it recorded)` of the checkpoint at `path`, without building a model.

    `path` may also be a pre-training run directory of ours (its run config).
    """
    if export_dir.is_export_dir(path):
        return export_dir.read_ours_config(path)
    if finetuned.is_finetuning_run(path):
        return finetuned.read_finetuned_config(path), {}
    run_config = run_config_path(path)
    if run_config:
        return load_run_config(run_config), {}
    return open_foreign(path, detect_format(path)).resolve(None, strict=False), {}


def checkpoint_vocab(path: str) -> str | None:
    """The vocabulary stored with the checkpoint at `path`, or None."""
    source_format = detect_format(path)
    if source_format == "ours":
        return export_dir.export_vocab(path)
    if source_format == "finetuned":
        return finetuned.recorded_vocab(path)
    if source_format not in ("hf", "official"):
        return None
    try:
        return vocab.find_vocab(None, open_foreign(path, source_format).vocab_dirs)
    except ConversionError:
        return None


# A pre-training run directory's config (flat fields before 2026-11; the export's is `export_dir.CONFIG_FILE`).
RUN_CONFIG = "run_config.json"
_LEGACY_RUN_CONFIG = "electra_config.json"


def run_config_path(model_dir: str) -> str | None:
    """The run config file of pre-training run directory `model_dir`, if it has one."""
    for name in (RUN_CONFIG, _LEGACY_RUN_CONFIG):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            return path
    return None


# Facts of the run kept beside its config (where a phase-2 run started): not hyper-parameters.
RUN_RECORD_KEY = "phase"
# The run's options that belong to its recipe beside the config (seed, data order, precision, vocabulary:
# `training.run_record.recipe_options`); run folders written before they were recorded lack them.
RUN_OPTIONS_KEY = "training"


def load_run_config(path: str) -> ElectraConfig:
    """The config in run config file `path` (either schema)."""
    with open(path) as f:
        values = json.load(f)
    for key in (RUN_RECORD_KEY, RUN_OPTIONS_KEY):
        values.pop(key, None)
    return ElectraConfig.from_dict(values)


def run_record(path: str, key: str = RUN_RECORD_KEY) -> dict | None:
    """What run config file `path` keeps beside the config under `key` (the run's facts, `RUN_RECORD_KEY`, or
    its recipe options, `RUN_OPTIONS_KEY`), if anything."""
    with open(path) as f:
        return json.load(f).get(key)


def initialize_pretrainer(model, path: str, generator_path: str | None = None) -> tuple:
    """Copies a Hugging Face or official checkpoint into built `model`; returns the parts copied."""
    return foreign.initialize(model, open_foreign(path, detect_format(path), generator_path))
