"""Our own export directories (`electra_tf.export`) as a conversion source and target.

`load_ours` rebuilds the whole `ElectraPretrainer` (both encoders and heads)
from `pretrainer.weights.h5`; `save_ours` writes an export directory with
`export.export_pretrained`.

Example (from the repository root):

>>> import os, tempfile
>>> from electra_tf.convert import load_any, ours
>>> _, pretrainer, vocab = load_any("tests/fixtures/hf_electra")
>>> export_dir = ours.save_ours(pretrainer, os.path.join(tempfile.mkdtemp(), "export"), vocab)
>>> config, reloaded, vocab = ours.load_ours(export_dir)
>>> config.num_layers, config.generator_num_layers
(1, 2)
"""

import os

from electra_tf import export
from electra_tf.config import ElectraConfig
from electra_tf.convert import keras_model
from electra_tf.convert.checkpoint import BEHAVIOUR_FIELDS, SHAPE_FIELDS
from electra_tf.convert.errors import ConversionError


def _resolve(path: str, exported: ElectraConfig, requested: ElectraConfig | None, overrides: dict | None,
             strict: bool) -> ElectraConfig:
    """The export's config, checked against `requested` (full) or `overrides` (some fields)."""
    values = requested.to_dict() if requested is not None else dict(overrides or {})
    differences = [f"{f}: config {values[f]!r}, export {getattr(exported, f)!r}"
                   for f in SHAPE_FIELDS if f in values and values[f] != getattr(exported, f)]
    if differences and strict:
        raise ConversionError(f"{path} does not match the given config", mismatched=differences)
    if requested is not None:
        return export.merge_architecture(exported, requested, path)
    kept = set(SHAPE_FIELDS) | set(BEHAVIOUR_FIELDS)
    return exported.replace(**{k: v for k, v in values.items() if k not in kept})


def load_ours(path: str, config: ElectraConfig | None = None, overrides: dict | None = None, strict: bool = True):
    """`(ElectraConfig, ElectraPretrainer, vocab_file or None)` from an export directory."""
    if not export.is_export_dir(path):
        raise ConversionError(f"{path} is not an electra-tf export directory",
                              missing=[os.path.join(path, export.CONFIG_FILE)])
    weights = os.path.join(path, export.PRETRAINER_WEIGHTS)
    if not os.path.isfile(weights):
        raise ConversionError(f"{path} holds only the fine-tuning encoder, not generator + discriminator",
                              missing=[weights])
    meta = export.read_export_metadata(path)
    resolved = _resolve(path, ElectraConfig.from_dict(meta["config"]), config, overrides, strict)
    pretrainer = keras_model.build_pretrainer(resolved, meta.get("special_token_ids"))
    pretrainer.load_weights(weights)
    vocab = os.path.join(path, "vocab.txt")
    return resolved, pretrainer, vocab if os.path.isfile(vocab) else None


def save_ours(pretrainer, out_dir: str, vocab_file: str | None) -> str:
    """An export directory of ours (see `electra_tf.export`); returns its path."""
    return export.export_pretrained(pretrainer, out_dir, vocab_file=vocab_file)
