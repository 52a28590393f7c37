"""`Objective`: what one pre-training objective owns, and the registry of objectives by name.

`ElectraPretrainer` (`model/pretrainer.py`) is the generic shell: it holds the injected networks (attribute names
are the checkpoint's keys: `generator`, `discriminator`, `generator_head`, `discriminator_head`,
`discriminator_mlm_head`), the masking seeds and dropout streams, the step driving and the metric plumbing. The
objective (`pretrainer.objective`, `get(config.objective)` unless given) owns everything that differs between
objectives, and every place that used to ask `config.objective` asks it instead:

* `build_networks(config, execution)`: which networks and heads, created in a fixed order (each layer draws its
  initializers' seeds from Python's `random` when created: the order makes a seeded model's initial weights);
* `compute_losses(model, batch, seeds, normalizers, training)`: the forward composition (masking with
  `model.mask`, the generator, sampling, the main model), the loss partials (sums divided by global counts,
  `normalizers` when given) and the metric inputs; `global_normalizers(model, batch, seeds)`: those counts for a
  whole batch, all-reduced over replicas (the step's `step_context`);
* `create_metrics()` (names → Keras metrics, `loss` and `grad_norm` among them), `update_metrics(model, batch,
  out, add_partial)`, `step_output_names` (the loss partials a step returns);
* `forward_flops_per_sequence(config, seq_length)` (`model/flops.py` counts the parts) and `encoder_roles(config)`
  (the encoders whose activations a step keeps, `training/cost.py`);
* `call(model, batch, training)`: the unmasked forward pass; `finetuning_role(config)` and
  `encoder_for_finetuning(model)`: the encoder fine-tuning keeps;
* `conversion`: what the converters can hold (`WHOLE`, `ENCODER_ONLY` or None) and `conversion_refusal(target)`.

The config-level fact, what its generator is, is its registry line's (`register(name, objective, generator)`,
`electra_tf.objective_registry`), read by `ElectraConfig`'s validation without building anything.

Example:

>>> from electra_tf.config import get_config
>>> names()[:3]
('rtd', 'mlm', 'rtd_masked_only')
>>> get("mlm").step_output_names, get("mlm").finetuning_role(get_config("tiny", objective="mlm", mlm_encoder="generator"))
(('loss', 'gen_loss', 'grad_norm'), 'generator')
"""

from __future__ import annotations

import keras

from electra_tf.objective_registry import (NO_GENERATOR, OWN_GENERATOR, SHAPED_GENERATOR, get, names,  # noqa: F401
                                           register, unregister)

WHOLE = "whole"  # the converters' generator + discriminator model holds it (every format)
ENCODER_ONLY = "encoder_only"  # only its fine-tuning encoder has a standard form (a keras-hub backbone)


class Objective:
    """One pre-training objective: networks, forward composition, losses, metrics, FLOPs, fine-tuning encoder."""

    conversion: str | None = None
    step_output_names: tuple = ("loss", "grad_norm")

    def build_networks(self, config, execution):
        """`networks.PretrainingNetworks` of `config`, computing with `execution` (resolved), in a fixed order."""
        raise NotImplementedError

    def compute_losses(self, model, batch, seeds, normalizers, training: bool) -> dict:
        """Loss partials (a scalar `"loss"` among them) and metric inputs of `batch` (int32 `input_ids`,
        `input_mask`, `segment_ids`); `normalizers`: a whole batch's `global_normalizers`, or None (this batch's)."""
        raise NotImplementedError

    def global_normalizers(self, model, batch, seeds) -> dict:
        """The whole batch's counts the losses divide by, all-reduced over replicas."""
        return model.global_counts(batch, seeds)

    def create_metrics(self) -> dict:
        mean = keras.metrics.Mean
        return {"loss": mean(name="loss"), "grad_norm": mean(name="grad_norm")}

    def update_metrics(self, model, batch, out: dict, add_partial) -> None:
        """Running metrics of one replica's (micro-)batch outputs; `add_partial(name, value)` adds a loss partial."""
        add_partial("loss", out["loss"])

    def call(self, model, batch, training=False):
        """The unmasked forward pass of the main model."""
        raise NotImplementedError

    def forward_flops_per_sequence(self, config, seq_length: int) -> int:
        raise NotImplementedError

    def encoder_roles(self, config) -> list[str]:
        """The config's encoders (`config.encoder(role)`) one step runs and keeps activations of."""
        return ["generator", "discriminator"]

    def finetuning_role(self, config) -> str:
        """Which encoder of the config fine-tuning takes (`ElectraEncoder.from_config_object(config, role)`)."""
        return "discriminator"

    def encoder_for_finetuning(self, model):
        return model.discriminator

    def conversion_refusal(self, config, target: str) -> str:
        """Why `target` cannot hold this objective's model (a `ConversionError`'s one line)."""
        return (f"objective={config.objective!r}: {target} holds a generator + discriminator model; the converters "
                f"take objective='rtd' (or an objective whose conversion is {WHOLE!r})")
