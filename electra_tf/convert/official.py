"""Official (google-research/electra, TF1) pre-training checkpoints → our `ElectraPretrainer`.

Reads `model.ckpt-N` with `tf.train.load_checkpoint` under the official
variable names (`names.official_name`): the discriminator under `electra/`
(whose `electra/embeddings/*` the generator shares), the generator under
`generator/`, the heads under `discriminator_predictions/` and
`generator_predictions/`. Optimizer slots (`*/adam_m`, `*/adam_v`) and
`global_step` are ignored. The checkpoint stores no head counts: they come from
the given config / `--config_json`, else the official rule hidden/64 (true
for every released ELECTRA size). GELU is exact, as in the official code.

Example:

>>> from electra_tf.convert import official  # doctest: +SKIP
>>> config, pretrainer, vocab = official.load_official_checkpoint(  # doctest: +SKIP
...     "electra_small/model.ckpt-1000000", vocab_file="electra_small/vocab.txt")
"""

import os
import re

import numpy as np
import tensorflow as tf

from electra_tf.config import ElectraConfig
from electra_tf.convert import foreign, names
from electra_tf.convert.checkpoint import SourceTensors
from electra_tf.convert.foreign import ForeignCheckpoint
from electra_tf.convert.errors import ConversionError

IGNORED = re.compile(r"(^global_step$|/adam_[mv]$|/Adam(_1)?$|^beta[12]_power$)")
OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"
# Official layer norms (tf.contrib.layers.layer_norm) use epsilon 1e-12.
BEHAVIOUR = {"hidden_act": "gelu", "layer_norm_epsilon": 1e-12}


def checkpoint_prefix(path: str) -> str | None:
    """The checkpoint prefix that `path` names (a prefix, a file of it, or a directory), else None."""
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        indexes = sorted(f[: -len(".index")] for f in os.listdir(path) if f.endswith(".index"))
        return os.path.join(path, indexes[-1]) if indexes else None
    prefix = re.sub(r"\.(index|meta|data-\d+-of-\d+)$", "", path)
    return prefix if os.path.isfile(prefix + ".index") else None


def is_object_based(prefix: str) -> bool:
    """True for a TF2 `tf.train.Checkpoint` (our training runs), False for a name-based TF1 one."""
    return OBJECT_GRAPH in tf.train.load_checkpoint(prefix).get_variable_to_shape_map()


def _hint(variables) -> str:
    tops = sorted({name.split("/", 1)[0] for name in variables})
    hints = [f"variables under {tops}"]
    if "bert" in tops:
        hints.append("this looks like a BERT checkpoint (bert/...), not an ELECTRA pre-training one")
    if {"generator_ltr", "generator_rtl"} & set(tops):
        hints.append("a two-tower (Electric) generator: only ELECTRA's one-encoder generator is supported")
    if any(name.startswith("generator/embeddings/") for name in variables):
        hints.append("untied generator embeddings (generator/embeddings/*, untied_generator_embeddings=True) "
                     "are not converted: ours reads one shared embeddings block")
    return "; ".join(hints)


def source_tensors(prefix: str) -> SourceTensors:
    """The canonical view of the official checkpoint at `prefix`."""
    reader = tf.train.load_checkpoint(prefix)
    shapes = {name: tuple(shape) for name, shape in reader.get_variable_to_shape_map().items()}
    if OBJECT_GRAPH in shapes:
        raise ConversionError(f"{prefix} is an object-based TF2 checkpoint (an electra-tf training run?), not an "
                              "official TF1 one: use its export directory instead")
    variables = {name: shape for name, shape in shapes.items() if not IGNORED.search(name)}
    found = {key: names.official_name(key) for key in names.all_keys(names.max_layer_index(variables))
             if names.official_name(key) in variables}
    mapped = set(found.values())
    return SourceTensors(
        path=prefix, shapes={key: variables[name] for key, name in found.items()},
        load=lambda key: np.asarray(reader.get_tensor(found[key]), np.float32),
        unexpected=sorted(name for name in variables if name not in mapped),
        name_of=names.official_name, hint=_hint(variables),
    )


def open_official(path: str) -> ForeignCheckpoint:
    """The official checkpoint that `path` names (a prefix like `.../model.ckpt-1000`, or a directory)."""
    prefix = checkpoint_prefix(path)
    if prefix is None:
        raise ConversionError(f"{path}: no TF checkpoint found", missing=[path + ".index", path + "/checkpoint"])
    directory = os.path.dirname(prefix)
    return ForeignCheckpoint(source=source_tensors(prefix), heads={}, behaviour=dict(BEHAVIOUR),
                             vocab_dirs=[directory, os.path.dirname(directory)])


def load_official_checkpoint(path: str, config: ElectraConfig | None = None, vocab_file: str | None = None,
                             overrides: dict | None = None, strict: bool = True):
    """`(ElectraConfig, ElectraPretrainer, vocab_file)` from an official TF1 checkpoint.

    The vocabulary is `vocab_file`, else `vocab.txt` beside the checkpoint or in
    its parent. `config`/`overrides` are checked as in `checkpoint.resolve_config`.
    """
    return foreign.load(open_official(path), config, vocab_file, overrides, strict)
