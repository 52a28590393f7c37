"""ELECTRA's replaced-token detection (`rtd`) and the paper's three ablations (section 3.2).

All four share one composition: dynamic masking → the generator's MLM at the masked slots → a sample of its
softmax there (no gradient) → the main model (the discriminator encoder) on the corrupted input, and the loss
`gen_weight × MLM loss + the main model's loss`. They differ only in what the main model's loss covers:

* `rtd`: `disc_weight ×` sigmoid CE of "replaced?" over every real token;
* `rtd_masked_only`: the same at the masked positions only (ELECTRA 15 %);
* `replace_mlm`: MLM of the original tokens at the (corrupted) masked positions, with a head of its own;
* `all_tokens_mlm`: MLM over every real token with the paper's copy mechanism (the one-unit head is the gate).

The generator is what the generator options make it (`networks.rtd_generator`: an encoder of its own, the
discriminator itself when tied, or none for the uniform generator), and under GDES the fine-tuning encoder is the
discriminator with its embedding deltas folded in.

Example:

>>> from electra_tf.config import get_config
>>> config = get_config("tiny", {"discriminator.num_layers": 1, "generator.num_layers": 1}, vocab_size=64,
...                     max_seq_length=16)
>>> built = RTD.build_networks(config, None)
>>> built.generator.name, built.discriminator.name, type(built.discriminator_head).__name__
('generator', 'discriminator', 'DiscriminatorHead')
>>> REPLACE_MLM.step_output_names, ALL_TOKENS_MLM.build_networks(config, None).discriminator_mlm_head.name
(('loss', 'gen_loss', 'grad_norm', 'main_loss'), 'discriminator_mlm_head')
"""

from __future__ import annotations

import keras
import tensorflow as tf

from electra_tf.model import flops, masking, networks
from electra_tf.model.embeddings import GdesEmbeddings
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.model.execution import layer_execution
from electra_tf.model.heads import gather_positions, vocabulary_log_probs
from electra_tf.model.objectives.base import WHOLE, Objective
from electra_tf.model.objectives.mlm import generator_forward_flops, generator_loss, generator_metrics, \
    update_generator_metrics


def sample(model, gen_logits, masked, seeds, softmax):
    """The generator's (or the uniform generator's) samples at the masked slots."""
    config = model.config
    if model.generator is None:
        return masking.uniform_sample(seeds, config.vocab_size, masked.original_ids, config.disallow_correct)
    disallow = masked.original_ids if config.disallow_correct else None
    return masking.sample_tokens(gen_logits, seeds, config.temperature, model.execution.sampling, softmax,
                                 disallow=disallow)


def detection_metrics() -> dict:
    """The replaced-token detector's metrics (rtd, rtd_masked_only; Electric's noise detector)."""
    mean = keras.metrics.Mean
    return {"disc_loss": mean(name="disc_loss"), "disc_accuracy": keras.metrics.BinaryAccuracy(name="disc_accuracy"),
            "disc_precision": keras.metrics.Precision(name="disc_precision"),
            "disc_recall": keras.metrics.Recall(name="disc_recall"),
            "disc_auc": keras.metrics.AUC(num_thresholds=500, name="disc_auc"),
            "replaced_fraction": mean(name="replaced_fraction")}


def update_detection_metrics(model, out, add_partial) -> None:
    add_partial("disc_loss", out["disc_loss"])
    probs = tf.sigmoid(out["disc_logits"])
    for name in ("disc_accuracy", "disc_precision", "disc_recall", "disc_auc"):
        model.tracked[name].update_state(out["labels"], probs, sample_weight=out["disc_weights"])
    update_replaced_fraction(model, out)


def update_replaced_fraction(model, out) -> None:
    masked = out["masked"]
    replaced = tf.gather(out["labels"], masked.positions, batch_dims=1)
    model.tracked["replaced_fraction"].update_state(replaced, sample_weight=masked.weights)


def folded_discriminator(model) -> ElectraEncoder:
    """GDES: a plain copy of the discriminator with the embedding deltas folded in."""
    source = model.discriminator
    encoder = ElectraEncoder.from_config_object(model.config, "discriminator",
                                                embeddings=source.embeddings.fold(), execution=model.execution)
    encoder.build()
    pairs = list(zip(encoder.transformer_layers, source.transformer_layers))
    if source.embeddings_projection is not None:
        pairs.append((encoder.embeddings_projection, source.embeddings_projection))
    for target, layer in pairs:
        target.set_weights(layer.get_weights())
    return encoder


class GeneratorCorruption(Objective):
    """generator → sample → discriminator; subclasses say what the main model's loss covers (`main_loss`)."""

    discriminator_head = True  # a one-unit head on the discriminator (the detector, or the copy gate)
    discriminator_mlm_head = False  # an MLM head of the main model's own

    def build_networks(self, config, execution):
        execution = layer_execution(execution)
        generator, discriminator = self._encoders(config, execution)
        generator_head = None if generator is None else networks.mlm_head(config, generator, "generator_head",
                                                                          execution)
        discriminator_head = networks.discriminator_head(config, execution) if self.discriminator_head else None
        mlm_head = None
        if self.discriminator_mlm_head:
            mlm_head = networks.mlm_head(config, discriminator, "discriminator_mlm_head", execution)
        return networks.PretrainingNetworks(generator, discriminator, generator_head, discriminator_head, mlm_head)

    @staticmethod
    def _encoders(config, execution):
        """(generator, discriminator): under GDES the generator first (the discriminator's embeddings add deltas to
        its), otherwise the discriminator first (it owns the shared embeddings, created under its name)."""
        if config.embedding_sharing == "gdes":
            generator = ElectraEncoder.from_config_object(config, "generator", execution=execution)
            generator.build()
            discriminator = ElectraEncoder.from_config_object(
                config, "discriminator", embeddings=GdesEmbeddings(generator.embeddings, name="embeddings"),
                execution=execution)
            discriminator.build()
            return generator, discriminator
        discriminator = networks.built_discriminator(config, execution)
        return networks.rtd_generator(config, discriminator, execution), discriminator

    def compute_losses(self, model, batch, seeds, normalizers, training):
        input_ids = batch["input_ids"]
        masked = model.mask(input_ids, batch["input_mask"], seeds)
        out, (gen_logits, softmax), counts = generator_loss(model, batch, masked, normalizers, training)
        sampled = sample(model, gen_logits, masked, seeds, softmax)
        fake_ids, labels = masking.corrupt(input_ids, masked, sampled)
        disc_hidden = model.discriminator(model.encoder_inputs(fake_ids, batch), training=training)
        out.update(fake_ids=fake_ids, labels=labels, sampled=sampled)
        self.main_loss(model, batch, out, disc_hidden, counts)
        return out

    def main_loss(self, model, batch, out: dict, disc_hidden, counts: tuple) -> None:
        """Adds the main model's loss to `out` (and to `out["loss"]`); `counts`: (masked, tokens), ≥ 1."""
        raise NotImplementedError

    def create_metrics(self):
        return {**generator_metrics(), **self.main_metrics()}

    def main_metrics(self) -> dict:
        return detection_metrics()

    def update_metrics(self, model, batch, out, add_partial):
        update_generator_metrics(model, out, add_partial)
        update_detection_metrics(model, out, add_partial)

    def call(self, model, batch, training=False):
        """The main model's logits on the unmasked input: `[B, S]` (a one-unit head) or `[B, S, V]` (MLM)."""
        hidden = model.discriminator(model.encoder_inputs(batch["input_ids"], batch), training=training)
        if model.discriminator_head is not None:
            return model.discriminator_head(hidden)
        return model.discriminator_mlm_head(hidden)

    def forward_flops_per_sequence(self, config, seq_length):
        masked = masking.max_predictions_per_seq(config.mask_prob, seq_length)
        discriminator, width = flops.encoder_of(config, "discriminator", seq_length)
        return (generator_forward_flops(config, seq_length, masked) + discriminator
                + self.main_head_flops(config, seq_length, masked, width))

    def main_head_flops(self, config, seq_length, masked, width) -> int:
        return flops.discriminator_head_forward_flops(seq_length, width)

    def encoder_for_finetuning(self, model):
        if isinstance(model.discriminator.embeddings, GdesEmbeddings):
            return folded_discriminator(model)
        return model.discriminator


class ReplacedTokenDetection(GeneratorCorruption):
    """rtd (`masked_only=False`) and rtd_masked_only: `disc_weight ×` the detector's sigmoid CE."""

    step_output_names = ("loss", "gen_loss", "grad_norm", "disc_loss")

    def __init__(self, masked_only: bool = False):
        self.masked_only = masked_only
        self.conversion = None if masked_only else WHOLE

    def main_loss(self, model, batch, out, disc_hidden, counts):
        num_masked, num_tokens = counts
        if self.masked_only:
            masked = out["masked"]
            _, covered = masking.scatter_to_sequence(tf.ones_like(masked.positions), masked.positions,
                                                     masked.weights, tf.shape(batch["input_ids"])[1])
            disc_weights, num_covered = tf.cast(covered, tf.float32), num_masked
        else:
            disc_weights, num_covered = tf.cast(batch["input_mask"], tf.float32), num_tokens
        disc_logits = tf.cast(model.discriminator_head(disc_hidden), tf.float32)
        disc_losses = tf.nn.sigmoid_cross_entropy_with_logits(out["labels"], disc_logits)
        out.update(disc_logits=disc_logits, disc_weights=disc_weights,
                   disc_loss=tf.reduce_sum(disc_losses * disc_weights) / num_covered)
        out["loss"] += model.config.disc_weight * out["disc_loss"]


class MainModelMLM(GeneratorCorruption):
    """The ablations whose main model predicts the original tokens: `loss += main_loss`."""

    step_output_names = ("loss", "gen_loss", "grad_norm", "main_loss")
    discriminator_mlm_head = True

    def main_metrics(self):
        mean = keras.metrics.Mean
        return {"main_loss": mean(name="main_loss"), "main_accuracy": mean(name="main_accuracy"),
                "replaced_fraction": mean(name="replaced_fraction")}

    def update_metrics(self, model, batch, out, add_partial):
        update_generator_metrics(model, out, add_partial)
        add_partial("main_loss", out["main_loss"])
        model.tracked["main_accuracy"].update_state(out["main_correct"], sample_weight=out["main_weights"])
        update_replaced_fraction(model, out)


class ReplaceMLM(MainModelMLM):
    """replace_mlm: predict the original tokens at the (corrupted) masked positions."""

    discriminator_head = False

    def main_loss(self, model, batch, out, disc_hidden, counts):
        masked, num_masked = out["masked"], counts[0]
        logits = model.discriminator_mlm_head(gather_positions(disc_hidden, masked.positions))
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(masked.original_ids, logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), masked.original_ids), tf.float32)
        out.update(main_loss=tf.reduce_sum(losses * masked.weights) / num_masked, main_logits=logits,
                   main_correct=correct, main_weights=masked.weights)
        out["loss"] += out["main_loss"]

    def main_head_flops(self, config, seq_length, masked, width):
        return flops.mlm_head_forward_flops(masked, width, config.embedding_size, config.vocab_size)


class AllTokensMLM(MainModelMLM):
    """all_tokens_mlm: p(x_t) = D_t·1[x_t = input_t] + (1 − D_t)·softmax_t(x_t) at every real token.

    D_t = sigmoid(copy logit) is the paper's copy mechanism; without it the model could lower most of its loss
    by learning the identity map.
    """

    def main_loss(self, model, batch, out, disc_hidden, counts):
        input_ids, fake_ids, num_tokens = batch["input_ids"], out["fake_ids"], counts[1]
        token_mask = tf.cast(batch["input_mask"], tf.float32)
        logits = model.discriminator_mlm_head(disc_hidden)  # [B, S, V], float32
        copy_logit = tf.cast(model.discriminator_head(disc_hidden), tf.float32)
        log_probs = vocabulary_log_probs(logits, input_ids, model.execution.kernels)
        log_keep, log_change = tf.math.log_sigmoid(copy_logit), tf.math.log_sigmoid(-copy_logit)
        is_copy = tf.equal(fake_ids, input_ids)
        log_p_change = log_change + log_probs.at_labels
        log_p = tf.where(is_copy, tf.math.reduce_logsumexp(tf.stack([log_keep, log_p_change]), 0), log_p_change)
        # Predicted token: the input (copy) unless some other word is more probable under the mixture.
        copy_score = tf.math.reduce_logsumexp(tf.stack([log_keep, log_change + log_probs.at(logits, fake_ids)]), 0)
        log_p_best = log_probs.top - log_probs.log_norm
        prediction = tf.where(copy_score >= log_change + log_p_best, fake_ids, log_probs.predictions)
        correct = tf.cast(tf.equal(prediction, input_ids), tf.float32)
        out.update(main_loss=-tf.reduce_sum(log_p * token_mask) / num_tokens, main_correct=correct,
                   main_weights=token_mask, main_logits=logits, copy_logit=copy_logit)
        out["loss"] += out["main_loss"]

    def main_head_flops(self, config, seq_length, masked, width):
        return (flops.mlm_head_forward_flops(seq_length, width, config.embedding_size, config.vocab_size)
                + flops.discriminator_head_forward_flops(seq_length, width))


RTD = ReplacedTokenDetection()
RTD_MASKED_ONLY = ReplacedTokenDetection(masked_only=True)
REPLACE_MLM = ReplaceMLM()
ALL_TOKENS_MLM = AllTokensMLM()
