"""The pre-training objectives by name: the one list `ElectraConfig.objective`, `--objective` and every dispatch read.

An entry is a name, the objective (an `electra_tf.model.objectives.base.Objective`, or for the built-in ones the
`"module:attribute"` where it lives, imported on first `get`) and the one fact a config must know without
building anything: what the objective's generator is (`generator`):

* `SHAPED_GENERATOR`: a generator that corrupts the main model's input and that the generator options shape
  (`untied_generator`, `untied_generator_embeddings`, `uniform_generator`, `disallow_correct`) and GDES may share
  embeddings with: rtd and the paper's ablations;
* `OWN_GENERATOR`: a generator of the objective's own design, which those options do not describe (Electric's
  two towers);
* `NO_GENERATOR` (None): one network, no corruption by a generator (mlm).

This module sits below the config (level 1) and imports nothing of ours: the implementations live in
`electra_tf.model.objectives` (level 2) and are imported by name when asked for, so that `electra_tf.config` can
validate an objective's name and generator options without TensorFlow.

Example (a new objective is one `register` line; see docs/pretraining.md, "How to add an objective"):

>>> names()[:2]
('rtd', 'mlm')
>>> generator_kind("electric") == OWN_GENERATOR, generator_kind("mlm") is NO_GENERATOR
(True, True)
"""

from __future__ import annotations

import dataclasses
import importlib

SHAPED_GENERATOR = "shaped"
OWN_GENERATOR = "own"
NO_GENERATOR = None
GENERATOR_KINDS = (SHAPED_GENERATOR, OWN_GENERATOR, NO_GENERATOR)


@dataclasses.dataclass
class Entry:
    name: str
    objective: object  # an Objective, or "module:attribute" until the first `get`
    generator: str | None


_ENTRIES: dict[str, Entry] = {}


def register(name: str, objective, generator: str | None = NO_GENERATOR) -> None:
    """Adds objective `name` (an `Objective`, or `"module:attribute"` naming one) with its kind of generator."""
    if name in _ENTRIES:
        raise ValueError(f"objective {name!r} is already registered ({_ENTRIES[name].objective!r})")
    if generator not in GENERATOR_KINDS:
        raise ValueError(f"register({name!r}): generator must be one of {GENERATOR_KINDS}, got {generator!r}")
    _ENTRIES[name] = Entry(name, objective, generator)


def unregister(name: str) -> None:
    """Removes objective `name` (a test's toy objective at its end)."""
    del _ENTRIES[name]


def names(generator: str | None | object = ...) -> tuple[str, ...]:
    """Every registered objective's name, in registration order; with `generator`, those of that kind."""
    return tuple(name for name, entry in _ENTRIES.items() if generator is ... or entry.generator == generator)


def generator_kind(name: str) -> str | None:
    return _entry(name).generator


def get(name: str):
    """The objective registered as `name` (imported on first use)."""
    entry = _entry(name)
    if isinstance(entry.objective, str):
        module, _, attribute = entry.objective.partition(":")
        entry.objective = getattr(importlib.import_module(module), attribute)
    return entry.objective


def _entry(name: str) -> Entry:
    if name not in _ENTRIES:
        raise ValueError(f"objective must be one of {names()}, got {name!r}")
    return _ENTRIES[name]


_BUILT_IN = "electra_tf.model.objectives."
register("rtd", _BUILT_IN + "electra:RTD", SHAPED_GENERATOR)
register("mlm", _BUILT_IN + "mlm:MLM")
register("rtd_masked_only", _BUILT_IN + "electra:RTD_MASKED_ONLY", SHAPED_GENERATOR)
register("replace_mlm", _BUILT_IN + "electra:REPLACE_MLM", SHAPED_GENERATOR)
register("all_tokens_mlm", _BUILT_IN + "electra:ALL_TOKENS_MLM", SHAPED_GENERATOR)
register("electric", _BUILT_IN + "electric:ELECTRIC", OWN_GENERATOR)
