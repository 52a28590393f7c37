"""Our export directory: the format `run_pretraining.py` writes, as one more converter.

An export directory holds:

* `electra_config.json`: the `ElectraConfig` (under "config"), which encoder is
  fine-tuned (`finetuning_role`), the special token ids, the training step and
  `vocab_sha256` (of the tokenizer file, when there is one);
* `discriminator.weights.h5`: the encoder to fine-tune (the discriminator, or
  the MLM encoder of an `objective="mlm"` run), loadable into
  `ElectraEncoder.from_config_object(config, role)`;
* `discriminator.keras`: the same encoder as a self-contained Keras model;
* `pretrainer.weights.h5`: generator + discriminator + heads (embeddings once);
* `keras_hub/`: a keras-hub `ElectraBackbone` + tokenizer preset
  (`electra_tf.convert.keras_hub_preset`, which records where keras-hub's tanh
  GELU makes it compute something else);
* the tokenizer, when known, under `tokenizers.export_name`: `vocab.txt`
  (WordPiece) or `sentencepiece.model`.  `export_vocab` returns it after
  checking its SHA-256 against the recorded one (exports written before
  2026-11 record none and load as they are).

The directory is written under a temporary name and renamed into place.
`save_ours` writes it, `load_ours` rebuilds the whole pre-trainer,
`load_ours_encoder` only the encoder to fine-tune, and `read_ours_config` reads
the config without building anything.

Example (from the repository root):

>>> import os, tempfile
>>> from electra_tf.convert import export_dir, load_any
>>> _, pretrainer, vocab = load_any("tests/fixtures/hf_electra")
>>> export = export_dir.save_ours(pretrainer, os.path.join(tempfile.mkdtemp(), "export"), vocab)
>>> config, reloaded, vocab = export_dir.load_ours(export)
>>> config.discriminator.num_layers, config.generator.num_layers
(1, 2)
>>> export_dir.read_ours_config(export)[0] == config
True
"""

import json
import os
import shutil
import tempfile

from absl import logging

from electra_tf.config import BEHAVIOUR_FIELDS, SHAPE_FIELDS, ElectraConfig, flatten, merge_architecture
from electra_tf.convert import keras_hub_preset, keras_model
from electra_tf.convert.errors import ConversionError
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.text import tokenizers

CONFIG_FILE = "electra_config.json"
ENCODER_WEIGHTS = "discriminator.weights.h5"
PRETRAINER_WEIGHTS = "pretrainer.weights.h5"
VOCAB_SHA256 = "vocab_sha256"  # key in CONFIG_FILE (as in a data manifest): the SHA-256 of the exported tokenizer file


def is_export_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, CONFIG_FILE)) and os.path.isfile(os.path.join(path, ENCODER_WEIGHTS))


def read_export_metadata(export_dir: str) -> dict:
    with open(os.path.join(export_dir, CONFIG_FILE)) as f:
        return json.load(f)


def read_ours_config(path: str) -> tuple[ElectraConfig, dict]:
    """`(config, the finetune_* fields it recorded)` of an export, without building a model."""
    values = read_export_metadata(path)["config"]
    return ElectraConfig.from_dict(values), {k: v for k, v in values.items() if k.startswith("finetune_")}


def _save_weights_without_optimizer(model, path: str) -> None:
    """`model.save_weights` minus the optimizer: Keras writes a compiled model's (its step and Adam's moments,
    twice the weights again) into the file, and an export holds weights, not a run's training state."""
    import keras

    optimizer = getattr(model, "optimizer", None)
    keras.saving.save_weights(model, path, objects_to_skip=[optimizer] if optimizer is not None else None)


def save_ours(pretrainer, export_dir: str, vocab_file: str | None = None, step: int | None = None,
              keras_hub: bool = True) -> str:
    """Writes the export directory described in the module docstring; returns its path."""
    config = pretrainer.config
    encoder = pretrainer.encoder_for_finetuning
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        meta = {"config": config.to_dict(), "finetuning_role": pretrainer.finetuning_role,
                "special_token_ids": pretrainer.special_token_ids, "step": step}
        if vocab_file:
            meta[VOCAB_SHA256] = tokenizers.tokenizer_sha256(vocab_file)
        with open(os.path.join(staging, CONFIG_FILE), "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
        encoder.save_weights(os.path.join(staging, ENCODER_WEIGHTS))
        encoder.save(os.path.join(staging, "discriminator.keras"))
        _save_weights_without_optimizer(pretrainer, os.path.join(staging, PRETRAINER_WEIGHTS))
        if keras_hub:
            keras_hub_preset.save_keras_hub_preset(encoder, config, os.path.join(staging, "keras_hub"), vocab_file)
        if vocab_file:
            shutil.copyfile(vocab_file, os.path.join(staging, tokenizers.export_name(vocab_file)))
        _replace_dir(staging, export_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logging.info("Exported %s encoder to %s", pretrainer.finetuning_role, export_dir)
    return export_dir


def _replace_dir(staging: str, target: str):
    old = None
    if os.path.exists(target):
        old = target + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    os.replace(staging, target)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def export_vocab(path: str) -> str | None:
    """The export's tokenizer file (vocab.txt or sentencepiece.model), checked against its recorded SHA-256."""
    found = [os.path.join(path, name) for name in tokenizers.EXPORT_NAMES
             if os.path.isfile(os.path.join(path, name))]
    if len(found) > 1:
        raise ConversionError(f"{path} holds two tokenizer files ({', '.join(map(os.path.basename, found))}); "
                              "an export holds the one it was trained with: remove the other")
    if not found:
        return None
    check_tokenizer_sha256(path, found[0])
    return found[0]


def check_tokenizer_sha256(export_dir: str, tokenizer_file: str) -> None:
    """ConversionError (one line) if `tokenizer_file`'s SHA-256 is not the one the export recorded."""
    recorded = read_export_metadata(export_dir).get(VOCAB_SHA256)
    if recorded is None:  # exported before the digest was recorded
        return
    actual = tokenizers.tokenizer_sha256(tokenizer_file)
    if actual != recorded:
        raise ConversionError(f"{tokenizer_file}: sha256 {actual} differs from {recorded}, recorded in "
                              f"{os.path.join(export_dir, CONFIG_FILE)} at export: the tokenizer file was "
                              "replaced; restore the exported one")


def _check_export_dir(path: str) -> None:
    if not is_export_dir(path):
        raise ConversionError(f"{path} is not an electra-tf export directory",
                              missing=[os.path.join(path, CONFIG_FILE), os.path.join(path, ENCODER_WEIGHTS)])


def _resolve(path: str, exported: ElectraConfig, requested: ElectraConfig | None, overrides: dict | None,
             strict: bool) -> ElectraConfig:
    """The export's config, checked against `requested` (full) or `overrides` (some fields)."""
    values = flatten(requested.to_dict() if requested is not None else dict(overrides or {}))
    differences = [f"{f}: config {values[f]!r}, export {exported.get(f)!r}"
                   for f in SHAPE_FIELDS if f in values and values[f] != exported.get(f)]
    if differences and strict:
        raise ConversionError(f"{path} does not match the given config", mismatched=differences)
    if requested is not None:
        return merge_architecture(exported, requested, path)
    kept = set(SHAPE_FIELDS) | set(BEHAVIOUR_FIELDS)
    return exported.replace(**{k: v for k, v in values.items() if k not in kept})


def load_ours(path: str, config: ElectraConfig | None = None, overrides: dict | None = None, strict: bool = True):
    """`(ElectraConfig, ElectraPretrainer, vocab_file or None)` from an export directory."""
    _check_export_dir(path)
    weights = os.path.join(path, PRETRAINER_WEIGHTS)
    if not os.path.isfile(weights):
        raise ConversionError(f"{path} holds only the fine-tuning encoder, not generator + discriminator",
                              missing=[weights])
    meta = read_export_metadata(path)
    resolved = _resolve(path, ElectraConfig.from_dict(meta["config"]), config, overrides, strict)
    pretrainer = keras_model.build_pretrainer(resolved, meta.get("special_token_ids"))
    pretrainer.load_weights(weights)
    return resolved, pretrainer, export_vocab(path)


def load_ours_encoder(path: str, config: ElectraConfig | None = None, name: str = "discriminator", execution=None):
    """`(ElectraEncoder, config, vocab_file or None)`: the export's fine-tuning encoder alone.

    The export decides every weight-shaping field (differences from `config`
    are logged); `config`'s training fields (dropout, learning rate, ...) are kept.
    """
    _check_export_dir(path)
    meta = read_export_metadata(path)
    config = merge_architecture(ElectraConfig.from_dict(meta["config"]), config, path)
    encoder = ElectraEncoder.from_config_object(config, meta["finetuning_role"], name=name, execution=execution)
    encoder.build()
    encoder.load_weights(os.path.join(path, ENCODER_WEIGHTS))
    return encoder, config, export_vocab(path)
