"""`mlm`: BERT's masked LM alone (the paper's baseline), and the generator's MLM part every generator objective shares.

The one network is an encoder of `config.mlm_encoder`'s shape (named `generator`, its checkpoint key) and its MLM
head; `generator_outputs` is its loss at the masked slots (also the generator of rtd and its ablations, or the
uniform generator's constant log V).

Example:

>>> from electra_tf.config import get_config
>>> from electra_tf.model.objectives.base import get
>>> config = get_config("tiny", {"discriminator.num_layers": 1}, vocab_size=64, max_seq_length=16, objective="mlm")
>>> networks = get("mlm").build_networks(config, None)
>>> networks.discriminator is None, networks.generator.name
(True, 'generator')
"""

from __future__ import annotations

import keras
import tensorflow as tf

from electra_tf.model import flops, masking, networks
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.model.execution import layer_execution
from electra_tf.model.heads import gather_positions
from electra_tf.model.objectives.base import Objective
from electra_tf.ops import xla_cpu
from electra_tf.ops.replicas import all_reduce_sum


def generator_outputs(model, masked, batch, training):
    """(logits or None, per-position losses, predictions, `VocabularySoftmax` or None) at the masked slots."""
    if model.generator is None:
        # The official uniform generator's all-zero logits: loss log V everywhere, argmax id 0.
        log_vocab = tf.math.log(tf.cast(model.config.vocab_size, tf.float32))
        return None, tf.fill(tf.shape(masked.original_ids), log_vocab), tf.zeros_like(masked.original_ids), None
    gen_hidden = model.generator(model.encoder_inputs(masked.input_ids, batch), training=training)
    gen_logits = model.generator_head(gather_positions(gen_hidden, masked.positions))
    if model.execution.kernels == "xla_cpu":
        softmax = xla_cpu.vocabulary_softmax(gen_logits, masked.original_ids)
        return gen_logits, softmax.losses, softmax.predictions, softmax
    gen_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(masked.original_ids, gen_logits)
    return gen_logits, gen_losses, tf.argmax(gen_logits, -1, output_type=tf.int32), None


def masked_counts(batch, masked, normalizers) -> tuple:
    """(masked positions, real tokens), ≥ 1: this batch's all-reduced over replicas, or the whole batch's."""
    if normalizers is None:
        num_masked, num_tokens = all_reduce_sum(
            [tf.reduce_sum(masked.weights), tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32))])
    else:
        num_masked, num_tokens = normalizers["num_masked"], normalizers["num_tokens"]
    return tf.maximum(num_masked, 1.0), tf.maximum(num_tokens, 1.0)


def generator_loss(model, batch, masked, normalizers, training) -> tuple[dict, tuple, tuple]:
    """The generator's part of the outputs (`gen_loss` weighted into `loss`), (logits, softmax) for sampling and
    the counts (masked, tokens)."""
    gen_logits, gen_losses, gen_predictions, softmax = generator_outputs(model, masked, batch, training)
    num_masked, num_tokens = masked_counts(batch, masked, normalizers)
    out = {"masked": masked, "gen_logits": gen_logits, "gen_predictions": gen_predictions,
           "gen_loss": tf.reduce_sum(gen_losses * masked.weights) / num_masked}
    out["loss"] = model.config.gen_weight * out["gen_loss"]
    return out, (gen_logits, softmax), (num_masked, num_tokens)


def generator_metrics() -> dict:
    mean = keras.metrics.Mean
    return {"loss": mean(name="loss"), "gen_loss": mean(name="gen_loss"), "gen_accuracy": mean(name="gen_accuracy"),
            "grad_norm": mean(name="grad_norm")}


def update_generator_metrics(model, out, add_partial) -> None:
    masked = out["masked"]
    add_partial("loss", out["loss"])
    add_partial("gen_loss", out["gen_loss"])
    gen_correct = tf.cast(tf.equal(out["gen_predictions"], masked.original_ids), tf.float32)
    model.tracked["gen_accuracy"].update_state(gen_correct, sample_weight=masked.weights)


def generator_forward_flops(config, seq_length: int, masked: int) -> int:
    """The generator's encoder and MLM head (none for `uniform_generator`)."""
    if config.uniform_generator:
        return 0
    embed = config.generator.hidden_size if config.untied_generator_embeddings else config.embedding_size
    encoder, width = flops.encoder_of(config, "generator", seq_length, embed)
    return encoder + flops.mlm_head_forward_flops(masked, width, embed, config.vocab_size)


class MaskedLM(Objective):
    """The masked LM alone: `gen_weight × MLM loss` of one encoder of `config.mlm_encoder`'s shape."""

    step_output_names = ("loss", "gen_loss", "grad_norm")

    def build_networks(self, config, execution):
        execution = layer_execution(execution)
        generator = ElectraEncoder.from_config_object(config, config.mlm_encoder, name="generator", execution=execution)
        return networks.PretrainingNetworks(generator, None,
                                            networks.mlm_head(config, generator, "generator_head", execution))

    def compute_losses(self, model, batch, seeds, normalizers, training):
        masked = model.mask(batch["input_ids"], batch["input_mask"], seeds)
        return generator_loss(model, batch, masked, normalizers, training)[0]

    def create_metrics(self):
        return generator_metrics()

    def update_metrics(self, model, batch, out, add_partial):
        update_generator_metrics(model, out, add_partial)

    def call(self, model, batch, training=False):
        """The MLM logits `[B, S, V]`."""
        inputs = model.encoder_inputs(batch["input_ids"], batch)
        return model.generator_head(model.generator(inputs, training=training))

    def forward_flops_per_sequence(self, config, seq_length):
        masked = masking.max_predictions_per_seq(config.mask_prob, seq_length)
        encoder, width = flops.encoder_of(config, config.mlm_encoder, seq_length)
        return encoder + flops.mlm_head_forward_flops(masked, width, config.embedding_size, config.vocab_size)

    def encoder_roles(self, config):
        return [config.mlm_encoder]

    def finetuning_role(self, config):
        return config.mlm_encoder

    def encoder_for_finetuning(self, model):
        return model.generator


MLM = MaskedLM()
