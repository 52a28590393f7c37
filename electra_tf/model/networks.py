"""The pre-training networks an `ElectraPretrainer` is given, built from an `ElectraConfig`.

As tensorflow/models' pretrainer takes its generator and discriminator networks, ours does too:
`build_networks` is where the config's objective and generator options become networks (the
discriminator encoder, the generator — an encoder of its own, the discriminator itself when tied,
Electric's two towers, or none for the uniform generator — and the heads), and
`pretrainer_from_config` hands them to the pretrainer. The networks are created in a fixed order
(discriminator, generator, heads): each layer draws its initializers' seeds from Python's `random`
when created, so the order is what makes a seeded model's initial weights.

Example:

>>> from electra_tf.config import get_config
>>> config = get_config("tiny", {"discriminator.num_layers": 1, "generator.num_layers": 1}, vocab_size=64,
...                     max_seq_length=16)
>>> networks = build_networks(config)
>>> networks.generator.name, networks.discriminator.name, type(networks.discriminator_head).__name__
('generator', 'discriminator', 'DiscriminatorHead')
>>> build_networks(config.replace(objective="mlm")).discriminator is None
True
"""

from __future__ import annotations

import dataclasses

from electra_tf.config import GENERATOR_OBJECTIVES, ElectraConfig
from electra_tf.model import electric
from electra_tf.model.embeddings import GdesEmbeddings
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.model.execution import layer_execution
from electra_tf.model.heads import DiscriminatorHead, MaskedLMHead
from electra_tf.model.pretrainer import ElectraPretrainer
from electra_tf.options import ExecutionOptions

# Objectives whose main model has a replaced-token (or copy-gate, or energy) head.
DISCRIMINATOR_HEAD_OBJECTIVES = ("rtd", "rtd_masked_only", "all_tokens_mlm", "electric")
# Objectives whose main model predicts the original tokens with an MLM head of its own.
DISCRIMINATOR_MLM_OBJECTIVES = ("replace_mlm", "all_tokens_mlm")


@dataclasses.dataclass
class PretrainingNetworks:
    """What `ElectraPretrainer` computes with; its field names are the pretrainer's checkpoint keys."""

    generator: object  # ElectraEncoder, electric.TwoTowerGenerator, or None (uniform generator)
    discriminator: ElectraEncoder | None  # None for the "mlm" objective
    generator_head: MaskedLMHead | None
    discriminator_head: DiscriminatorHead | None = None
    discriminator_mlm_head: MaskedLMHead | None = None


def build_networks(config: ElectraConfig, execution: ExecutionOptions | None = None) -> PretrainingNetworks:
    """The config's generator, discriminator and heads, computing with `execution` (resolved; default portable)."""
    execution = layer_execution(execution)
    generator, discriminator = _encoders(config, execution)
    generator_head = None if generator is None else mlm_head(config, generator, "generator_head", execution)
    discriminator_head = None
    if config.objective in DISCRIMINATOR_HEAD_OBJECTIVES:
        # For all_tokens_mlm this is the copy gate: the probability that a token is kept; for
        # electric, the energy of each token.
        discriminator_head = DiscriminatorHead(
            config.discriminator.hidden_size, config.hidden_act, config.initializer_range,
            kernels=execution.kernels, name="discriminator_head")
    discriminator_mlm_head = None
    if config.objective in DISCRIMINATOR_MLM_OBJECTIVES:
        discriminator_mlm_head = mlm_head(config, discriminator, "discriminator_mlm_head", execution)
    return PretrainingNetworks(generator, discriminator, generator_head, discriminator_head, discriminator_mlm_head)


def pretrainer_from_config(config: ElectraConfig, special_token_ids=None, seed=0,
                           execution: ExecutionOptions | None = None, whole_words=None, **kwargs) -> ElectraPretrainer:
    """`ElectraPretrainer` over `build_networks(config, execution)`."""
    execution = layer_execution(execution)
    return ElectraPretrainer(config, **vars(build_networks(config, execution)), special_token_ids=special_token_ids,
                             seed=seed, execution=execution, whole_words=whole_words, **kwargs)


def _encoders(config: ElectraConfig, execution: ExecutionOptions):
    """(generator, discriminator) of the config's objective, the discriminator built first (it owns the
    shared embeddings, created under its name)."""
    if config.embedding_sharing == "gdes":
        generator = ElectraEncoder.from_config_object(config, "generator", execution=execution)
        generator.build()
        discriminator = ElectraEncoder.from_config_object(
            config, "discriminator", embeddings=GdesEmbeddings(generator.embeddings, name="embeddings"),
            execution=execution)
        discriminator.build()
        return generator, discriminator
    if config.objective == "electric":
        discriminator = _built_discriminator(config, execution)
        return electric.TwoTowerGenerator(config, discriminator.embeddings, execution), discriminator
    if config.objective in GENERATOR_OBJECTIVES:
        discriminator = _built_discriminator(config, execution)
        return _rtd_generator(config, discriminator, execution), discriminator
    generator = ElectraEncoder.from_config_object(config, config.mlm_encoder, name="generator", execution=execution)
    return generator, None


def _built_discriminator(config, execution):
    discriminator = ElectraEncoder.from_config_object(config, "discriminator", execution=execution)
    discriminator.build()  # the shared embeddings get created under the discriminator's name
    return discriminator


def _rtd_generator(config: ElectraConfig, discriminator: ElectraEncoder, execution: ExecutionOptions):
    """The generator of an RTD-style objective: None (uniform), the discriminator itself (tied),
    or its own encoder sharing the discriminator's embeddings or not."""
    if config.uniform_generator:
        return None
    if not config.untied_generator:
        return discriminator
    if config.untied_generator_embeddings:
        # As the official `untied_embeddings`: embeddings as wide as the generator, no projection.
        own = config.replace(embedding_size=config.generator.hidden_size)
        return ElectraEncoder.from_config_object(own, "generator", execution=execution)
    return ElectraEncoder.from_config_object(config, "generator", embeddings=discriminator.embeddings,
                                             execution=execution)


def mlm_head(config: ElectraConfig, encoder, name: str, execution: ExecutionOptions) -> MaskedLMHead:
    """A masked-LM head tied to `encoder`'s token embeddings."""
    return MaskedLMHead(encoder.embeddings.token_embedding, encoder.embeddings.embedding_size, config.hidden_act,
                        config.layer_norm_epsilon, config.initializer_range, kernels=execution.kernels, name=name)
