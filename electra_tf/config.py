"""The single source of truth for ELECTRA hyper-parameters.

Every entry point (`run_pretraining.py`, `run_finetuning.py`, converters,
benchmarks) builds its `ElectraConfig` through `get_config`, so a model size
means the same numbers everywhere. The values follow the ELECTRA paper
(Clark et al., 2020, tables 6-7) and `configure_pretraining.py` /
`configure_finetuning.py` of the official code.

Example:

Each encoder's shape is an `EncoderConfig` under `discriminator` and `generator`;
`--hparams` sets its fields as a nested object, with dotted keys, or with the flat
keys of configs written before the tree (`hidden_size`, `generator_num_layers`):

>>> from electra_tf.config import get_config
>>> config = get_config("small", '{"num_train_steps": 1000, "generator.num_layers": 6}')
>>> config.discriminator.hidden_size, config.generator.hidden_size, config.generator.num_layers
(256, 64, 6)
>>> get_config("small", {"generator_num_layers": 6}) == config.replace(num_train_steps=1_000_000)
True
"""

import dataclasses
import json
import os
from typing import Any, Mapping

from absl import logging

from electra_tf import objective_registry
from electra_tf.options import LEGACY_EXECUTION_FIELDS

# What the pre-training loss covers (each objective is an object in `electra_tf/model/objectives/`; the ELECTRA
# paper, section 3.2):
#   rtd              generator MLM + discriminator sigmoid CE over every real token (ELECTRA)
#   mlm              masked LM alone (BERT); `mlm_encoder` picks its size
#   rtd_masked_only  ELECTRA 15 %: the discriminator loss covers only the masked positions
#   replace_mlm      masked positions get generator samples instead of [MASK]; the main model
#                    predicts the originals there
#   all_tokens_mlm   as replace_mlm, but the main model predicts every real token, with the
#                    paper's copy mechanism: p = D·1[x = input] + (1 − D)·softmax
#   electric         Electric (Clark et al. 2020b): a two-tower cloze generator q (left-to-right and
#                    right-to-left towers, each of the `generator` shape) trained over every candidate
#                    token; the main model outputs an energy per token, trained by noise-contrastive
#                    estimation against q's samples (`electra_tf/model/electric.py`)
# The built-in objectives' names, from `objective_registry`; an objective added later is one `register` line, and
# validation reads the registry when a config is made (so it accepts it).
OBJECTIVES = objective_registry.names()
# The encoders' activation: the exact (erf) GELU of the official code and HF, or its tanh
# approximation (keras-hub's ElectraBackbone). `model.layers.get_activation` maps each name.
ACTIVATIONS = ("gelu", "gelu_approximate")


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """The shape of one transformer stack: the discriminator's or the generator's."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int

    def replace(self, **overrides) -> "EncoderConfig":
        unknown = sorted(set(overrides) - set(ENCODER_FIELDS))
        if unknown:
            raise ValueError(f"Unknown encoder field(s) {unknown}; valid names: {list(ENCODER_FIELDS)}")
        return dataclasses.replace(self, **overrides)


ROLES = ("discriminator", "generator")
ENCODER_FIELDS = tuple(f.name for f in dataclasses.fields(EncoderConfig))
# Keys of configs written before the tree (run directories, exports, --hparams): still accepted.
LEGACY_KEYS = {**{name: f"discriminator.{name}" for name in ENCODER_FIELDS},
               **{f"generator_{name}": f"generator.{name}" for name in ENCODER_FIELDS}}
# Embedding fields both encoders share; with the encoders' fields they shape every weight.
EMBEDDING_SHAPE_FIELDS = ("vocab_size", "embedding_size", "max_position_embeddings", "type_vocab_size")
# The weight-shaping fields as dotted keys (`config.get(key)`): what a checkpoint decides.
SHAPE_FIELDS = EMBEDDING_SHAPE_FIELDS + tuple(f"{role}.{name}" for role in ROLES for name in ENCODER_FIELDS)
# Shape no weight but decide what the weights compute: they follow a checkpoint too.
BEHAVIOUR_FIELDS = ("hidden_act", "layer_norm_epsilon")
# Which encoder a pre-training run trains for fine-tuning: recorded with its weights.
OBJECTIVE_FIELDS = ("objective", "mlm_encoder")
# Which generator weights exist (shared with the discriminator, own embeddings, none at all).
GENERATOR_STRUCTURE_FIELDS = ("untied_generator", "untied_generator_embeddings", "uniform_generator")
# Everything a checkpoint decides: a run resumes, and a fine-tuning run loads, only with these as stored.
CHECKPOINT_FIELDS = SHAPE_FIELDS + BEHAVIOUR_FIELDS + OBJECTIVE_FIELDS + GENERATOR_STRUCTURE_FIELDS


@dataclasses.dataclass(frozen=True)
class ElectraConfig:
    """Model, pre-training and fine-tuning hyper-parameters of one model size."""

    model_size: str = "small"

    # Shared by both encoders (the generator reuses the discriminator's embeddings).
    vocab_size: int = 30522
    embedding_size: int = 128
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout_rate: float = 0.1  # hidden and attention-probability dropout alike (one rate, as keras-hub)
    hidden_act: str = "gelu"  # one of ACTIVATIONS
    layer_norm_epsilon: float = 1e-12
    initializer_range: float = 0.02

    # The encoder kept after pre-training, and the generator: same depth, a fraction of its width.
    discriminator: EncoderConfig = EncoderConfig(hidden_size=256, num_layers=12, num_heads=4, intermediate_size=1024)
    generator: EncoderConfig = EncoderConfig(hidden_size=64, num_layers=12, num_heads=1, intermediate_size=256)

    # Pre-training objective.
    objective: str = "rtd"  # one of objective_registry.names()
    mlm_encoder: str = "discriminator"  # which encoder size "mlm" trains (the paper's BERT baseline: same size)
    mask_prob: float = 0.15
    mask_token_prob: float = 0.85  # share of masked positions shown as [MASK]
    disc_weight: float = 50.0
    gen_weight: float = 1.0
    temperature: float = 1.0
    max_seq_length: int = 128
    # "full": generator and discriminator share one embeddings block (ELECTRA). "gdes":
    # gradient-disentangled sharing (DeBERTaV3): the discriminator uses stop_gradient(shared) + its
    # own zero-initialised delta, so only the generator's MLM loss trains the shared block.
    embedding_sharing: str = "full"
    # The official generator options (`configure_pretraining.py`), official defaults.
    # False: the generator IS the discriminator's encoder (one set of transformer weights, so the
    # generator has the discriminator's size); only the MLM head is the generator's own.
    untied_generator: bool = True
    # True: the generator has its own embeddings, of width generator.hidden_size (no projection).
    untied_generator_embeddings: bool = False
    # True: the generator never samples the original token (its logit gets −1000 before sampling).
    disallow_correct: bool = False
    # True: no generator network; replacements are drawn uniformly over the vocabulary.
    uniform_generator: bool = False
    # True: masking picks whole words (a WordPiece and its `##` continuations; not in the official code).
    mask_whole_words: bool = False

    # Optimisation (shared by pre-training and fine-tuning).
    optimizer: str = "adamw"  # "adamw" (official) or "lamb" (NVIDIA's large-batch recipe)
    learning_rate: float = 5e-4
    train_batch_size: int = 128
    num_train_steps: int = 1_000_000
    num_warmup_steps: int = 10_000
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-6
    clip_norm: float = 1.0
    lr_decay_power: float = 1.0  # 1.0 = linear decay to zero
    # The official AdamWeightDecayOptimizer has no bias correction: lr · (m / (√v + ε) + wd · w).
    # True gives Keras' bias-corrected Adam step (smaller by (1 − β1^t) / √(1 − β2^t) early on).
    adam_bias_correction: bool = False

    # Fine-tuning defaults of this size (paper table 7).
    finetune_learning_rate: float = 3e-4
    finetune_layerwise_lr_decay: float = 0.8
    finetune_batch_size: int = 32
    finetune_weight_decay: float = 0.0
    finetune_warmup_fraction: float = 0.1
    finetune_epochs: int = 3
    # Official fine-tuning sums per-example losses over the batch before the global-norm clip
    # (so clipping acts on nearly every step); "mean" divides by the batch size first.
    finetune_loss_reduction: str = "sum"
    # Fine-tuning's Adam step: the official one (no bias correction) for every size, including the
    # CPU-scale sizes whose short pre-training warm-up uses the corrected step.
    finetune_adam_bias_correction: bool = False
    # The official layer-wise decay has an off-by-one (one extra decay factor on every layer);
    # the paper's learning rates and decays were tuned with it, so it is the default.
    finetune_official_layerwise_lr_bug: bool = True
    # SQuAD head as in the official code: the end logit conditioned on the start (dense 512 +
    # GELU), beam search over `squad_beam_size` starts × ends, and the answerability classifier
    # (also trained, on all-answerable data, for SQuAD 1.1).
    squad_joint_prediction: bool = True
    squad_beam_size: int = 20
    squad_answerable_classifier: bool = True

    def __post_init__(self):
        problems = []
        if self.objective not in objective_registry.names():
            problems.append(f"objective must be one of {objective_registry.names()}, got {self.objective!r}")
            raise ValueError("Invalid ELECTRA config: " + "; ".join(problems))
        if self.mlm_encoder not in ("generator", "discriminator"):
            problems.append(f"mlm_encoder must be 'generator' or 'discriminator', got {self.mlm_encoder!r}")
        if self.hidden_act not in ACTIVATIONS:
            problems.append(f"hidden_act must be one of {ACTIVATIONS}, got {self.hidden_act!r}")
        for role in ROLES:
            problems += _encoder_problems(role, getattr(self, role))
        if self.optimizer not in ("adamw", "lamb"):
            problems.append(f"optimizer must be 'adamw' or 'lamb', got {self.optimizer!r}")
        if self.finetune_loss_reduction not in ("sum", "mean"):
            problems.append(f"finetune_loss_reduction must be 'sum' or 'mean', got {self.finetune_loss_reduction!r}")
        if self.embedding_sharing not in ("full", "gdes"):
            problems.append(f"embedding_sharing must be 'full' or 'gdes', got {self.embedding_sharing!r}")
        elif self.embedding_sharing == "gdes" and self._generator_kind() is objective_registry.NO_GENERATOR:
            problems.append(f"embedding_sharing='gdes' needs a generator; objective {self.objective!r} has none")
        elif self.embedding_sharing == "gdes" and self._generator_kind() == objective_registry.OWN_GENERATOR:
            problems.append(f"embedding_sharing='gdes' is not implemented for the {self.objective} objective's "
                            "own generator")
        problems += self._generator_option_problems()
        if not 0.0 < self.mask_prob < 1.0:
            problems.append(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.max_seq_length > self.max_position_embeddings:
            problems.append(
                f"max_seq_length={self.max_seq_length} exceeds max_position_embeddings="
                f"{self.max_position_embeddings}"
            )
        if problems:
            raise ValueError("Invalid ELECTRA config: " + "; ".join(problems))

    def _generator_kind(self) -> str | None:
        """What the objective's generator is (`objective_registry`): whether the generator options and GDES apply."""
        return objective_registry.generator_kind(self.objective)

    def _generator_option_problems(self) -> list:
        """Combinations of the generator options that describe no model."""
        chosen = [name for name, on in (("untied_generator=False", not self.untied_generator),
                                        ("untied_generator_embeddings=True", self.untied_generator_embeddings),
                                        ("disallow_correct=True", self.disallow_correct),
                                        ("uniform_generator=True", self.uniform_generator)) if on]
        if chosen and self._generator_kind() is objective_registry.NO_GENERATOR:
            shaped = objective_registry.names(objective_registry.SHAPED_GENERATOR)
            return [f"{', '.join(chosen)}: needs an objective with a generator {shaped}, got {self.objective!r}"]
        if chosen and self._generator_kind() == objective_registry.OWN_GENERATOR:
            return [f"{', '.join(chosen)}: not implemented for the {self.objective} objective's own generator"]
        problems = []
        if self.uniform_generator and (not self.untied_generator or self.untied_generator_embeddings):
            problems.append("uniform_generator=True has no generator network: untied_generator and "
                            "untied_generator_embeddings must keep their defaults")
        elif not self.untied_generator and self.untied_generator_embeddings:
            problems.append("untied_generator=False shares every generator weight with the discriminator; "
                            "it cannot have untied_generator_embeddings=True")
        elif not self.untied_generator and self.generator != self.discriminator:
            problems.append(f"untied_generator=False makes the discriminator's encoder the generator: set generator "
                            f"to the discriminator's shape ({self.discriminator}), got {self.generator}")
        if self.embedding_sharing == "gdes" and (chosen and set(chosen) != {"disallow_correct=True"}):
            problems.append(f"embedding_sharing='gdes' shares the generator's embeddings; it cannot be combined "
                            f"with {', '.join(c for c in chosen if c != 'disallow_correct=True')}")
        return problems

    def encoder(self, role: str) -> EncoderConfig:
        """The `role` ("discriminator" or "generator") encoder's shape."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        return getattr(self, role)

    def get(self, key: str):
        """A field by name, encoder fields by dotted key ("generator.num_layers") or legacy key."""
        role, _, name = LEGACY_KEYS.get(key, key).partition(".")
        value = getattr(self, role)
        return getattr(value, name) if name else value

    def replace(self, **overrides) -> "ElectraConfig":
        """A copy with `overrides`: fields, dotted or legacy encoder keys, or nested encoder dicts."""
        return dataclasses.replace(self, **_resolve_overrides(self, overrides))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "ElectraConfig":
        """From `to_dict()`'s nested form or the flat form of configs written before the tree.

        Fields that stored configs held before they became execution options (`fused_kernels`,
        `dropout_masks`, `sampling`, `adam_fused_kernel`, `gradient_accumulation_steps`) and `attention_dropout_rate` (always
        equal to `dropout_rate`) are dropped: they never changed the function learned.
        """
        values = dict(values)
        for name in LEGACY_EXECUTION_FIELDS:
            values.pop(name, None)
        attention_rate = values.pop("attention_dropout_rate", None)
        if attention_rate is not None and attention_rate != values.get("dropout_rate", attention_rate):
            raise ValueError(f"attention_dropout_rate={attention_rate} differs from dropout_rate="
                             f"{values['dropout_rate']}: this model has one dropout rate")
        return cls().replace(**values)


def _encoder_problems(role: str, encoder) -> list:
    if not isinstance(encoder, EncoderConfig):
        return [f"{role} must be an EncoderConfig, got {type(encoder).__name__}"]
    problems = [f"{role}.{name} must be a positive integer, got {getattr(encoder, name)!r}"
                for name in ENCODER_FIELDS if not isinstance(getattr(encoder, name), int) or getattr(encoder, name) < 1]
    if not problems and encoder.hidden_size % encoder.num_heads:
        problems.append(f"{role}.hidden_size={encoder.hidden_size} is not divisible by its {encoder.num_heads} heads")
    return problems


def flatten(values: Mapping[str, Any]) -> dict:
    """`values` with encoder fields as dotted keys: legacy keys renamed, encoders spread out.

    Layers of overrides (size defaults, `--hparams`, flags) merge correctly once flat.
    """
    flat = {}
    for key, value in values.items():
        key = LEGACY_KEYS.get(key, key)
        if key in ROLES and isinstance(value, EncoderConfig):
            value = dataclasses.asdict(value)
        if key in ROLES and isinstance(value, Mapping):
            flat.update({f"{key}.{name}": v for name, v in value.items()})
        else:
            flat[key] = value
    return flat


def _resolve_overrides(config: ElectraConfig, overrides: Mapping[str, Any]) -> dict:
    """`overrides` as `dataclasses.replace` arguments: encoder keys gathered into `EncoderConfig`s."""
    fields = {f.name for f in dataclasses.fields(ElectraConfig)}
    plain, encoder_updates = {}, {role: {} for role in ROLES}
    for key, value in flatten(overrides).items():
        if key in LEGACY_EXECUTION_FIELDS:
            raise ValueError(f"{key!r} is an execution option now, not a hyper-parameter: use the flag "
                             f"--{LEGACY_EXECUTION_FIELDS[key]} (see --helpfull)")
        role, _, name = key.partition(".")
        if name and role in ROLES:
            encoder_updates[role][name] = value
        elif key in fields and key not in ROLES:
            plain[key] = value
        else:
            raise ValueError(f"Unknown hyper-parameter {key!r}; valid names: {sorted(fields - set(ROLES))}, "
                             f"and {', '.join(f'{r}.{n}' for r in ROLES for n in ENCODER_FIELDS)}")
    for role, updates in encoder_updates.items():
        if updates:
            plain[role] = getattr(config, role).replace(**updates)
    return plain


def _generator(discriminator: EncoderConfig, fraction: float) -> EncoderConfig:
    """The official code's generator: the discriminator's depth, width × fraction, 64-d heads, 4× FFN."""
    width = int(round(discriminator.hidden_size * fraction))
    return EncoderConfig(hidden_size=width, num_layers=discriminator.num_layers, num_heads=max(1, width // 64),
                         intermediate_size=4 * width)


def _encoders(hidden_size, num_layers, num_heads, intermediate_size, generator_fraction) -> dict:
    discriminator = EncoderConfig(hidden_size, num_layers, num_heads, intermediate_size)
    return dict(discriminator=discriminator, generator=_generator(discriminator, generator_fraction))


MODEL_SIZES = {
    # For CPU tests and the offline demo (~10 minutes on 2 cores). Not a paper size: no
    # dropout (the run is far too short to overfit usefully) and a 1-layer generator, which
    # keeps its samples detectable for longer, as the paper's generator-size study predicts.
    "tiny": dict(
        vocab_size=8192, embedding_size=64, max_position_embeddings=128,
        discriminator=EncoderConfig(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512),
        generator=EncoderConfig(hidden_size=32, num_layers=1, num_heads=1, intermediate_size=128),
        dropout_rate=0.0,
        learning_rate=1e-3, train_batch_size=32, max_seq_length=128, num_train_steps=1000,
        num_warmup_steps=100, adam_bias_correction=True,  # short warm-up: see "mini"
        finetune_learning_rate=1e-3, finetune_layerwise_lr_decay=0.9,
    ),
    # The objectives experiment's shape (experiments/compare_objectives.py, `--budget=cpu`): a
    # 4-layer Small-width discriminator and a 4 × 64 generator, trainable on 2 CPU cores in hours.
    # With only 150 warm-up steps the official (uncorrected) Adam step is 1.6-2.7× larger than
    # the schedule says for 500 steps, so this recipe uses the bias-corrected step.
    "mini": dict(
        embedding_size=128, **_encoders(256, 4, 4, 1024, generator_fraction=0.25),
        learning_rate=5e-4, train_batch_size=128, max_seq_length=128, num_train_steps=1500,
        num_warmup_steps=150, adam_bias_correction=True,
        finetune_learning_rate=1e-4, finetune_layerwise_lr_decay=1.0,
    ),
    "small": dict(
        embedding_size=128, **_encoders(256, 12, 4, 1024, generator_fraction=0.25),
        learning_rate=5e-4, train_batch_size=128, max_seq_length=128, num_train_steps=1_000_000,
        finetune_learning_rate=3e-4, finetune_layerwise_lr_decay=0.8,
    ),
    "base": dict(
        embedding_size=768, **_encoders(768, 12, 12, 3072, generator_fraction=1 / 3),
        learning_rate=2e-4, train_batch_size=256, max_seq_length=512, num_train_steps=766_000,
        finetune_learning_rate=1e-4, finetune_layerwise_lr_decay=0.8,
    ),
    "large": dict(
        embedding_size=1024, **_encoders(1024, 24, 16, 4096, generator_fraction=0.25), mask_prob=0.25,
        learning_rate=2e-4, train_batch_size=2048, max_seq_length=512, num_train_steps=400_000,
        finetune_learning_rate=5e-5, finetune_layerwise_lr_decay=0.9,
    ),
}


def merge_architecture(source: ElectraConfig, requested: ElectraConfig | None,
                       source_name: str = "checkpoint") -> ElectraConfig:
    """`requested` with `source`'s weight-shaping, behaviour and objective fields.

    The checkpoint decides the architecture (differences from `requested` are
    logged); `max_seq_length` is capped at the checkpoint's position embeddings.
    """
    if requested is None:
        return source
    arch = {f: source.get(f) for f in CHECKPOINT_FIELDS}
    changed = {f: (requested.get(f), v) for f, v in arch.items() if requested.get(f) != v}
    if changed:
        logging.warning("%s: architecture taken from the checkpoint: %s", source_name,
                        ", ".join(f"{f} {old}->{new}" for f, (old, new) in changed.items()))
    if requested.max_seq_length > source.max_position_embeddings:
        logging.warning("%s: max_seq_length %d capped at the checkpoint's max_position_embeddings %d",
                        source_name, requested.max_seq_length, source.max_position_embeddings)
        arch["max_seq_length"] = source.max_position_embeddings
    return requested.replace(**arch)


def parse_hparams(hparams: str | Mapping[str, Any] | None) -> dict:
    """Reads overrides from a dict, a JSON string, or the path of a JSON file."""
    if not hparams:
        return {}
    if isinstance(hparams, Mapping):
        return dict(hparams)
    text = hparams
    if not hparams.lstrip().startswith("{"):
        if not os.path.isfile(hparams):
            raise ValueError(f"--hparams: {hparams!r} is neither a JSON object nor an existing JSON file")
        with open(hparams, encoding="utf-8") as f:
            text = f.read()
    try:
        values = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--hparams: invalid JSON ({e}) in {hparams!r}") from None
    if not isinstance(values, dict):
        raise ValueError(f"--hparams: expected a JSON object, got {type(values).__name__}")
    return values


def get_config(model_size: str = "small", hparams=None, **overrides) -> ElectraConfig:
    """The config of `model_size`, with `hparams` (JSON/dict) then `overrides` applied.

    `overrides` whose value is None are ignored, so absl flags left unset fall
    through to the size's defaults.
    """
    if model_size not in MODEL_SIZES:
        raise ValueError(f"--model_size: unknown size {model_size!r}; choose from {sorted(MODEL_SIZES)}")
    values = flatten(dict(MODEL_SIZES[model_size], model_size=model_size))
    values.update(flatten(parse_hparams(hparams)))
    values.update(flatten({k: v for k, v in overrides.items() if v is not None}))
    return ElectraConfig().replace(**values)
