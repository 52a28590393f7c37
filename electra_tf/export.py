"""Exporting a pre-trained model for fine-tuning, and loading it back.

An export directory holds:

* `electra_config.json` — the `ElectraConfig`, which encoder is fine-tuned
  (`finetuning_role`), the special token ids and the training step;
* `discriminator.weights.h5` — the encoder to fine-tune (the discriminator, or
  the MLM encoder of an `objective="mlm"` run), loadable into
  `ElectraEncoder.from_config_object(config, role)`;
* `discriminator.keras` — the same encoder as a self-contained Keras model;
* `pretrainer.weights.h5` — generator + discriminator + heads (embeddings once);
* `keras_hub/` — a `keras_hub.models.ElectraBackbone` preset
  (`ElectraBackbone.from_preset("<export>/keras_hub")`); keras-hub hard-codes
  the tanh GELU, so `keras_hub/electra_export.json` states the deviation when
  the model was trained with exact GELU;
* `vocab.txt` — the vocabulary, when known.

The directory is written under a temporary name and renamed into place.

Example:

>>> from electra_tf.export import export_pretrained, load_pretrained_encoder  # doctest: +SKIP
>>> export_pretrained(pretrainer, "out/export", vocab_file="vocab.txt")  # doctest: +SKIP
>>> encoder, config, vocab = load_pretrained_encoder("out/export")  # doctest: +SKIP
"""

import json
import os
import shutil
import tempfile

import keras
import keras_hub
import numpy as np
from absl import logging

from electra_tf.config import ElectraConfig
from electra_tf.modeling import ElectraEncoder

CONFIG_FILE = "electra_config.json"
ENCODER_WEIGHTS = "discriminator.weights.h5"
PRETRAINER_WEIGHTS = "pretrainer.weights.h5"


def to_keras_hub_backbone(encoder: ElectraEncoder, config: ElectraConfig) -> keras_hub.models.ElectraBackbone:
    """A keras-hub `ElectraBackbone` holding `encoder`'s weights (its unused pooler stays random)."""
    backbone = keras_hub.models.ElectraBackbone(
        vocab_size=config.vocab_size,
        num_layers=encoder.num_layers,
        num_heads=encoder.transformer_layers[0].num_heads,
        hidden_dim=encoder.hidden_size,
        embedding_dim=config.embedding_size,
        intermediate_dim=encoder.transformer_layers[0].intermediate_dim,
        dropout=config.dropout_rate,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size,
    )
    pairs = [(backbone.get_layer(name), getattr(encoder.embeddings, name)) for name in
             ("token_embedding", "position_embedding", "segment_embedding", "embeddings_layer_norm")]
    if encoder.embeddings_projection is not None:
        pairs.append((backbone.get_layer("embeddings_projection"), encoder.embeddings_projection))
    pairs += list(zip(backbone.transformer_layers, encoder.transformer_layers))
    for target, source in pairs:
        target.set_weights(source.get_weights())
    return backbone


def keras_hub_deviation(encoder: ElectraEncoder, backbone, config: ElectraConfig, seq_length=16) -> float:
    """Max |ours − keras-hub| over sequence outputs on a fixed random input."""
    rng = np.random.RandomState(0)
    inputs = {
        "token_ids": rng.randint(0, config.vocab_size, size=(2, seq_length)).astype("int32"),
        "segment_ids": (np.arange(seq_length) >= seq_length // 2).astype("int32")[None].repeat(2, 0),
        "padding_mask": np.ones((2, seq_length), "int32"),
    }
    ours = keras.ops.convert_to_numpy(encoder(inputs, training=False))
    theirs = keras.ops.convert_to_numpy(backbone(inputs, training=False)["sequence_output"])
    return float(np.max(np.abs(ours - theirs)))


def _write_keras_hub(encoder, config, directory):
    backbone = to_keras_hub_backbone(encoder, config)
    backbone.save_to_preset(directory)
    deviation = keras_hub_deviation(encoder, backbone, config)
    note = {"hidden_act": config.hidden_act, "keras_hub_activation": "gelu_approximate",
            "max_abs_sequence_output_deviation": deviation}
    if config.hidden_act != "gelu_approximate":
        note["warning"] = ("keras-hub's ElectraBackbone uses tanh-approximate GELU; this model was trained "
                           f"with exact GELU, so its sequence outputs differ by up to {deviation:.2e}")
        logging.warning("keras-hub export: %s", note["warning"])
    with open(os.path.join(directory, "electra_export.json"), "w") as f:
        json.dump(note, f, indent=2)


def export_pretrained(pretrainer, export_dir: str, vocab_file: str | None = None, step: int | None = None,
                      keras_hub_preset: bool = True) -> str:
    """Writes the export directory described in the module docstring; returns its path."""
    config = pretrainer.config
    encoder = pretrainer.encoder_for_finetuning
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        meta = {"config": config.to_dict(), "finetuning_role": pretrainer.finetuning_role,
                "special_token_ids": pretrainer.special_token_ids, "step": step}
        with open(os.path.join(staging, CONFIG_FILE), "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
        encoder.save_weights(os.path.join(staging, ENCODER_WEIGHTS))
        encoder.save(os.path.join(staging, "discriminator.keras"))
        pretrainer.save_weights(os.path.join(staging, PRETRAINER_WEIGHTS))
        if keras_hub_preset:
            _write_keras_hub(encoder, config, os.path.join(staging, "keras_hub"))
        if vocab_file:
            shutil.copyfile(vocab_file, os.path.join(staging, "vocab.txt"))
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


def is_export_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, CONFIG_FILE)) and os.path.isfile(os.path.join(path, ENCODER_WEIGHTS))


def read_export_metadata(export_dir: str) -> dict:
    with open(os.path.join(export_dir, CONFIG_FILE)) as f:
        return json.load(f)


def load_pretrained_encoder(init_checkpoint: str, config: ElectraConfig | None = None, name="discriminator"):
    """`(encoder, config, vocab_file or None)` from an export of ours or a HF/official checkpoint.

    For our exports the export decides every weight-shaping field (differences
    from `config` are logged) and `config`'s training fields (dropout, learning
    rate, ...) are kept. Hugging Face / official TF1 checkpoints go through
    `electra_tf.convert`, which refuses a `config` of another architecture and
    lists the mismatched variables.
    """
    if not is_export_dir(init_checkpoint):
        return _load_foreign(init_checkpoint, config, name)
    meta = read_export_metadata(init_checkpoint)
    exported = ElectraConfig.from_dict(meta["config"])
    config = merge_architecture(exported, config, init_checkpoint)
    encoder = ElectraEncoder.from_config_object(config, meta["finetuning_role"], name=name)
    encoder.build()
    encoder.load_weights(os.path.join(init_checkpoint, ENCODER_WEIGHTS))
    vocab = os.path.join(init_checkpoint, "vocab.txt")
    return encoder, config, vocab if os.path.exists(vocab) else None


ARCHITECTURE_FIELDS = (
    "vocab_size", "embedding_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
    "max_position_embeddings", "type_vocab_size", "generator_hidden_size", "generator_num_heads",
    "generator_intermediate_size", "generator_num_layers", "objective", "mlm_encoder",
)


# Shape no weight but decide what the model computes: they follow the checkpoint too.
BEHAVIOUR_FIELDS = ("hidden_act", "layer_norm_epsilon")


def merge_architecture(source: ElectraConfig, requested: ElectraConfig | None, source_name="checkpoint"):
    """`requested` with the weight-shaping fields (and activation, LayerNorm epsilon) of `source`.

    The checkpoint decides the architecture; differences from `requested` are
    logged. `max_seq_length` is capped at the checkpoint's position embeddings.
    """
    if requested is None:
        return source
    arch = {f: getattr(source, f) for f in ARCHITECTURE_FIELDS + BEHAVIOUR_FIELDS}
    changed = {f: (getattr(requested, f), v) for f, v in arch.items() if getattr(requested, f) != v}
    if changed:
        logging.warning("%s: architecture taken from the checkpoint: %s", source_name,
                        ", ".join(f"{f} {old}->{new}" for f, (old, new) in changed.items()))
    if requested.max_seq_length > source.max_position_embeddings:
        logging.warning("%s: max_seq_length %d capped at the checkpoint's max_position_embeddings %d",
                        source_name, requested.max_seq_length, source.max_position_embeddings)
        arch["max_seq_length"] = source.max_position_embeddings
    return requested.replace(**arch)


def pretrained_config(init_checkpoint: str) -> tuple[ElectraConfig, dict]:
    """`(config, recorded fine-tuning fields)` of a checkpoint, without loading its weights.

    For an export of ours the config is the pre-training run's (its
    `model_size` and every `finetune_*` field it recorded, returned as the
    dict); for Hugging Face / official checkpoints the architecture is read
    off the tensors' shapes and the config files (the dict is empty).
    """
    if is_export_dir(init_checkpoint):
        values = read_export_metadata(init_checkpoint)["config"]
        recorded = {k: v for k, v in values.items() if k.startswith("finetune_")}
        return ElectraConfig.from_dict(values), recorded
    from electra_tf.convert import api

    opened = api.open_foreign(init_checkpoint, api.detect_format(init_checkpoint))
    return opened.resolve(None, strict=False), {}


def _load_foreign(path: str, config, name):
    """Hugging Face / official TF1 checkpoints, through the converters."""
    from electra_tf import convert

    return convert.load_encoder(path, config=config, name=name)
