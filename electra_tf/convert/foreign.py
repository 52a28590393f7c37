"""From an opened foreign checkpoint to our model: config resolution, vocabulary, weight copy.

`hf.open_hf` and `official.open_official` return a `ForeignCheckpoint`;
`load` turns it into `(ElectraConfig, ElectraPretrainer, vocab_file)` and
`initialize` copies it into an existing, already built pretrainer (continued
pre-training from a foreign checkpoint).

Example:

>>> from electra_tf.convert import foreign, official  # doctest: +SKIP
>>> config, pretrainer, vocab = foreign.load(official.open_official("electra_small"))  # doctest: +SKIP
"""

import dataclasses
from typing import Callable

from electra_tf.config import ElectraConfig
from electra_tf.convert import keras_model, names, vocab
from electra_tf.convert.checkpoint import SourceTensors, resolve_config
from electra_tf.convert.errors import ConversionError


@dataclasses.dataclass
class ForeignCheckpoint:
    """A checkpoint's canonical tensors and what its format says beyond the shapes.

    `heads`: `{role: head count}` the format records (official: none);
    `behaviour`: config fields that shape no weight but decide what the model
    computes (hidden_act, layer_norm_epsilon); `defaults`: training settings
    the source records (dropout), used when no config is given; `vocab_dirs`:
    where to look for vocab.txt; `check(config)`: format-specific consistency
    checks of the resolved config.
    """

    source: SourceTensors
    heads: dict
    behaviour: dict
    vocab_dirs: list
    defaults: dict = dataclasses.field(default_factory=dict)
    check: Callable = lambda config: None

    def resolve(self, config: ElectraConfig | None = None, overrides: dict | None = None,
                strict: bool = True) -> ElectraConfig:
        resolved = resolve_config(self.source, self.heads, self.behaviour, requested=config,
                                  overrides=overrides, strict=strict, defaults=self.defaults)
        self.check(resolved)
        return resolved


def load(opened: ForeignCheckpoint, config: ElectraConfig | None = None, vocab_file: str | None = None,
         overrides: dict | None = None, strict: bool = True):
    """`(ElectraConfig, ElectraPretrainer, vocab_file)`; parts absent from the checkpoint stay random."""
    resolved = opened.resolve(config, overrides, strict)
    vocab_path = vocab.find_vocab(vocab_file, opened.vocab_dirs, resolved.vocab_size)
    pretrainer = keras_model.pretrainer_from_source(opened.source, resolved, vocab.special_token_ids(vocab_path))
    return resolved, pretrainer, vocab_path


def initialize(model, opened: ForeignCheckpoint) -> tuple:
    """Copies the checkpoint into built `model` (an `ElectraPretrainer`); returns the parts copied.

    The checkpoint must fit `model.config` exactly, activation included: the
    model is already built, so nothing can be adapted.
    """
    keras_model.refuse_two_tower_generator(model.config, f"{opened.source.path} (one generator encoder)")
    resolved = opened.resolve(model.config, strict=True)
    behaviour = {f: (getattr(model.config, f), getattr(resolved, f)) for f in opened.behaviour
                 if getattr(model.config, f) != getattr(resolved, f)}
    if behaviour:
        raise ConversionError(f"{opened.source.path} was trained with different settings than this run: "
                              + "; ".join(f"{f}: run {a!r}, checkpoint {b!r}" for f, (a, b) in behaviour.items())
                              + " (set them with --hparams)")
    parts = opened.source.present_parts()
    keras_model.assign_weights(model, opened.source.arrays(names.expected_shapes(model.config, parts)), parts)
    return parts
