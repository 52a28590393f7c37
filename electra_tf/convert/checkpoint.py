"""A foreign checkpoint seen through canonical names: validation and config inference.

Readers (`hf.py`, `official.py`) wrap what they find in a `SourceTensors`;
this module decides which parts are present, infers the architecture from the
shapes, reconciles it with a requested `ElectraConfig`, and refuses anything
that does not fit with a `ConversionError` that lists the variables
concerned (missing, unexpected, or of the wrong shape) under the source's own
names.

Example:

>>> from electra_tf.convert.checkpoint import ConversionError, SourceTensors, resolve_config
>>> source = SourceTensors(path="ckpt", shapes={"embeddings/word": (10, 4)}, load=None,
...                        unexpected=["bert/encoder/layer_0/attention/self/query/kernel"],
...                        name_of=lambda key: key)
>>> try:
...     resolve_config(source, heads={})
... except ConversionError as e:
...     print(e.missing[:2])
['embeddings/position', 'embeddings/segment']
"""

import dataclasses
from typing import Callable

import numpy as np
from absl import logging

from electra_tf.config import BEHAVIOUR_FIELDS, MODEL_SIZES, SHAPE_FIELDS, ElectraConfig, flatten, get_config
from electra_tf.convert import names
from electra_tf.convert.errors import ConversionError


@dataclasses.dataclass
class SourceTensors:
    """The tensors of one checkpoint under canonical keys.

    `shapes` holds canonical (`[in, out]`) shapes of the keys found, `load(key)`
    returns the canonical array, `name_of(key)` the source's name of any key
    (found or not), `unexpected` the source names that map to no key, and
    `transposed(key)` whether the source stores that key's transpose.
    """

    path: str
    shapes: dict
    load: Callable
    unexpected: list
    name_of: Callable
    transposed: Callable = lambda key: False
    hint: str = ""

    def source_shape(self, key, shape):
        return tuple(reversed(shape)) if self.transposed(key) else tuple(shape)

    def present_parts(self) -> tuple:
        found = {names.part_of(key) for key in self.shapes}
        return tuple(part for part in names.PARTS if part in found)

    def arrays(self, keys) -> dict:
        return {key: np.asarray(self.load(key), np.float32) for key in keys}


def _layer_count(shapes, role):
    count = 0
    while f"{role}/layer_{count}/attention/query/kernel" in shapes:
        count += 1
    return count


def _required_keys(role):
    first = "embeddings/word embeddings/position embeddings/segment".split() if role == "discriminator" else []
    return first + [f"{role}/layer_0/attention/query/kernel", f"{role}/layer_0/ffn/intermediate/kernel"]


def _encoder_fields(shapes, role, embedding_size, heads):
    hidden = shapes.get(f"{role}/projection/kernel", (embedding_size, embedding_size))[1]
    return {f"{role}.hidden_size": hidden, f"{role}.num_layers": _layer_count(shapes, role),
            f"{role}.num_heads": heads.get(role) or max(1, hidden // 64),
            f"{role}.intermediate_size": shapes[f"{role}/layer_0/ffn/intermediate/kernel"][1]}


def infer_architecture(source: SourceTensors, heads: dict) -> dict:
    """The `SHAPE_FIELDS` (dotted keys) implied by the shapes; `heads[role]` (else hidden/64, the official rule)."""
    parts = source.present_parts()
    for role in ("discriminator",) + (("generator",) if "generator" in parts else ()):
        missing = [key for key in _required_keys(role) if key not in source.shapes]
        if missing:
            expected = [key for key in names.all_keys(1) if names.part_of(key) in (role, role + "_head")]
            raise ConversionError(
                f"{source.path} is not an ELECTRA pre-training checkpoint: its {role} is incomplete or absent"
                + (f" ({source.hint})" if source.hint else ""),
                missing=[source.name_of(key) for key in expected if key not in source.shapes],
                unexpected=source.unexpected,
            )
    vocab, embed = source.shapes["embeddings/word"]
    fields = {"vocab_size": vocab, "embedding_size": embed,
              "max_position_embeddings": source.shapes["embeddings/position"][0],
              "type_vocab_size": source.shapes["embeddings/segment"][0]}
    fields.update(_encoder_fields(source.shapes, "discriminator", embed, heads))
    if "generator" in parts:
        fields.update(_encoder_fields(source.shapes, "generator", embed, heads))
    return fields


def check_shapes(source: SourceTensors, config: ElectraConfig, parts, what="the checkpoint") -> None:
    """Raises `ConversionError` unless `parts` of `source` are exactly what `config` expects."""
    expected = names.expected_shapes(config, parts)
    in_parts = {key for key in source.shapes if names.part_of(key) in parts}
    missing = [source.name_of(key) for key in expected if key not in source.shapes]
    unexpected = [source.name_of(key) for key in sorted(in_parts - set(expected))] + list(source.unexpected)
    mismatched = [
        f"{source.name_of(key)}: checkpoint {source.source_shape(key, source.shapes[key])}, "
        f"config expects {source.source_shape(key, shape)}"
        for key, shape in expected.items() if key in source.shapes and tuple(source.shapes[key]) != tuple(shape)
    ]
    if missing or unexpected or mismatched:
        hint = f" ({source.hint})" if unexpected and source.hint else ""
        raise ConversionError(f"{source.path} does not match {what}{hint}", missing, unexpected, mismatched)


def size_config(fields: dict) -> ElectraConfig:
    """`get_config(size)` of the model size whose encoder shapes `fields` has, else defaults ("custom")."""
    compared = [f for f in SHAPE_FIELDS if f not in ("vocab_size", "max_position_embeddings")]
    for size in MODEL_SIZES:
        candidate = get_config(size)
        if all(candidate.get(f) == fields[f] for f in compared if f in fields):
            return candidate
    return ElectraConfig(model_size="custom")


def _field_differences(values: dict, fields: dict) -> list:
    return [f"{f}: config {values[f]!r}, checkpoint {v!r}" for f, v in fields.items()
            if f in values and values[f] != v]


def _requested_values(requested: ElectraConfig | None, overrides: dict | None) -> dict:
    if requested is not None and overrides:
        raise ValueError("pass either a full config or overrides, not both")
    return flatten(requested.to_dict() if requested is not None else dict(overrides or {}))


def _heads_hint(heads: dict, values: dict) -> dict:
    """Authoritative head counts of the source, else the requested ones (official checkpoints store none)."""
    return {role: heads.get(role) or values.get(f"{role}.num_heads") for role in ("discriminator", "generator")}


def _as_requested(requested, values, fields):
    """The full config the caller asked for: `requested`, or the inferred one with the requested fields."""
    if requested is not None:
        return requested
    try:
        return size_config(fields).replace(**fields).replace(**{f: values[f] for f in SHAPE_FIELDS if f in values})
    except ValueError:  # e.g. heads that do not divide the width: report the fields alone
        return None


def _refuse_differences(source, requested, values, fields, parts):
    differences = _field_differences({f: values[f] for f in SHAPE_FIELDS if f in values}, fields)
    if not differences:
        return
    candidate = _as_requested(requested, values, fields)
    if candidate is not None:
        try:
            check_shapes(source, candidate, parts, what="the given config")
        except ConversionError as e:
            raise ConversionError(f"{e.message} (config fields: " + "; ".join(differences) + ")",
                                  e.missing, e.unexpected, e.mismatched) from None
    raise ConversionError(f"{source.path} does not match the given config: " + "; ".join(differences))


def resolve_config(source: SourceTensors, heads: dict, behaviour=None, requested: ElectraConfig | None = None,
                   overrides: dict | None = None, strict: bool = True, defaults=None) -> ElectraConfig:
    """The `ElectraConfig` of `source`: its shapes and `behaviour` over a requested config or a size default.

    `requested` is a full config (every shape field is checked); `overrides`
    (e.g. from `--config_json`) checks only the fields it names and supplies
    the rest (learning rate, ...). Under `strict`, a shape difference raises a
    `ConversionError` listing the variables that disagree; otherwise the
    checkpoint wins and the differences are logged. `behaviour` (hidden_act,
    layer_norm_epsilon) always comes from the source, so the converted model
    computes what the source computed; `defaults` (e.g. the source's dropout)
    only fill what neither `requested` nor `overrides` set.
    """
    values = _requested_values(requested, overrides)
    fields = infer_architecture(source, _heads_hint(heads, values))
    parts = [p for p in source.present_parts() if p != "generator" or "generator.num_layers" in fields]
    if strict:
        _refuse_differences(source, requested, values, fields, parts)
    else:
        differences = _field_differences(values, fields)
        if differences:
            logging.warning("%s: architecture taken from the checkpoint: %s", source.path, "; ".join(differences))
    behaviour = dict(behaviour or {})
    changed = _field_differences(values, behaviour)
    if changed:
        logging.warning("%s: taken from the checkpoint, so the model computes what it computed: %s",
                        source.path, "; ".join(changed))
    base = requested if requested is not None else size_config(fields).replace(**dict(defaults or {})).replace(
        **{k: v for k, v in values.items() if k not in SHAPE_FIELDS + BEHAVIOUR_FIELDS})
    config = base.replace(**fields, **behaviour,
                          max_seq_length=min(base.max_seq_length, fields["max_position_embeddings"]))
    check_shapes(source, config, parts)
    return config
