"""The pre-training networks an `ElectraPretrainer` is given, built from an `ElectraConfig` by its objective.

As tensorflow/models' pretrainer takes its generator and discriminator networks, ours does too:
`build_networks` asks the config's objective (`objective_registry.get(config.objective).build_networks`, see
`model/objectives/`) which networks it needs, and `pretrainer_from_config` hands them, and the objective, to the
pretrainer. This module holds the pieces the objectives build from (`built_discriminator`, `rtd_generator`,
`mlm_head`, `discriminator_head`). Each objective creates its networks in a fixed order (the discriminator, the
generator, then the heads): each layer draws its initializers' seeds from Python's `random` when created, so the
order is what makes a seeded model's initial weights.

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

from electra_tf import objective_registry
from electra_tf.config import ElectraConfig
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.model.execution import layer_execution
from electra_tf.model.heads import DiscriminatorHead, MaskedLMHead
from electra_tf.model.pretrainer import ElectraPretrainer
from electra_tf.options import ExecutionOptions


@dataclasses.dataclass
class PretrainingNetworks:
    """What `ElectraPretrainer` computes with; its field names are the pretrainer's checkpoint keys."""

    generator: object  # ElectraEncoder, electric.TwoTowerGenerator, or None (uniform generator; the toy's)
    discriminator: ElectraEncoder | None  # None for the "mlm" objective
    generator_head: MaskedLMHead | None
    discriminator_head: DiscriminatorHead | None = None
    discriminator_mlm_head: MaskedLMHead | None = None


def build_networks(config: ElectraConfig, execution: ExecutionOptions | None = None) -> PretrainingNetworks:
    """The networks of the config's objective, computing with `execution` (resolved; default portable)."""
    return objective_registry.get(config.objective).build_networks(config, layer_execution(execution))


def pretrainer_from_config(config: ElectraConfig, special_token_ids=None, seed=0,
                           execution: ExecutionOptions | None = None, whole_words=None, **kwargs) -> ElectraPretrainer:
    """`ElectraPretrainer` over `build_networks(config, execution)` and the config's objective."""
    execution = layer_execution(execution)
    return ElectraPretrainer(config, **vars(build_networks(config, execution)), special_token_ids=special_token_ids,
                             seed=seed, execution=execution, whole_words=whole_words,
                             objective=objective_registry.get(config.objective), **kwargs)


def built_discriminator(config: ElectraConfig, execution: ExecutionOptions) -> ElectraEncoder:
    """The discriminator encoder, built: the shared embeddings get created under its name."""
    discriminator = ElectraEncoder.from_config_object(config, "discriminator", execution=execution)
    discriminator.build()
    return discriminator


def rtd_generator(config: ElectraConfig, discriminator: ElectraEncoder, execution: ExecutionOptions):
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


def discriminator_head(config: ElectraConfig, execution: ExecutionOptions) -> DiscriminatorHead:
    """The one-unit head on the discriminator: the detector of rtd, the copy gate of all_tokens_mlm, the energy of
    electric."""
    return DiscriminatorHead(config.discriminator.hidden_size, config.hidden_act, config.initializer_range,
                             kernels=execution.kernels, name="discriminator_head")
