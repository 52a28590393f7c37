"""`electric`: Electric's noise-contrastive estimation (Clark et al., 2020), as one objective.

The networks and the arithmetic of the noise logit are `electra_tf/model/electric.py`'s (the two-tower cloze
generator, `nce_logits`, `noise_labels`, with the objective explained there); this object composes them per step:

1. the cloze model q on the uncorrupted input; its loss covers every candidate token (`num_candidates`);
2. samples of q at ELECTRA's masked positions (no gradient) corrupt the input;
3. the main model's energy on the corrupted input, turned into the noise logit with log q (a constant);
4. loss = gen_weight · cloze loss + disc_weight · mean over real tokens of the sigmoid CE with the noise labels.

Only its discriminator has a standard form: the converters write it alone (`conversion = ENCODER_ONLY`).

Example:

>>> from electra_tf.config import get_config
>>> config = get_config("tiny", {"discriminator.num_layers": 1, "generator.num_layers": 1}, vocab_size=64,
...                     max_seq_length=16, objective="electric")
>>> built = ELECTRIC.build_networks(config, None)
>>> type(built.generator).__name__, built.discriminator_mlm_head is None
('TwoTowerGenerator', True)
"""

from __future__ import annotations

import tensorflow as tf

from electra_tf.model import electric, flops, masking, networks
from electra_tf.model.execution import layer_execution
from electra_tf.model.heads import gather_positions, vocabulary_log_probs
from electra_tf.model.objectives.base import ENCODER_ONLY, Objective
from electra_tf.model.objectives.electra import detection_metrics, update_detection_metrics
from electra_tf.model.objectives.mlm import generator_metrics, update_generator_metrics


class Electric(Objective):
    """The two-tower cloze generator, the discriminator and its energy head, trained by NCE."""

    conversion = ENCODER_ONLY
    step_output_names = ("loss", "gen_loss", "grad_norm", "disc_loss")

    def build_networks(self, config, execution):
        execution = layer_execution(execution)
        discriminator = networks.built_discriminator(config, execution)
        generator = electric.TwoTowerGenerator(config, discriminator.embeddings, execution)
        generator_head = networks.mlm_head(config, generator, "generator_head", execution)
        return networks.PretrainingNetworks(generator, discriminator, generator_head,
                                            networks.discriminator_head(config, execution))

    def compute_losses(self, model, batch, seeds, normalizers, training):
        """`normalizers`: global `num_masked`, `num_tokens` and `num_candidates` (this batch's when None)."""
        config = model.config
        input_ids, input_mask = batch["input_ids"], batch["input_mask"]
        masked = model.mask(input_ids, input_mask, seeds)
        normalizers = normalizers or self.global_normalizers(model, batch, seeds)
        normalizers = {name: tf.maximum(count, 1.0) for name, count in normalizers.items()}
        # The uncorrupted input: the two towers never let position t see x_t.
        cloze_logits = model.generator_head(model.generator(model.encoder_inputs(input_ids, batch), training=training))
        candidates = tf.cast(masking.candidate_positions(input_ids, input_mask, model.special_id_tuple()), tf.float32)
        cloze = vocabulary_log_probs(cloze_logits, input_ids, model.execution.kernels)
        cloze_losses = -cloze.at_labels
        gen_logits = gather_positions(cloze_logits, masked.positions)
        out = {"masked": masked, "gen_logits": gen_logits, "gen_loss_weights": candidates,
               "gen_predictions": tf.argmax(gen_logits, -1, output_type=tf.int32),
               "gen_loss": tf.reduce_sum(cloze_losses * candidates) / normalizers["num_candidates"]}

        sampled = masking.sample_tokens(gen_logits, seeds, config.temperature, model.execution.sampling)
        fake_ids, _ = masking.corrupt(input_ids, masked, sampled)
        labels = electric.noise_labels(masked, tf.shape(input_ids)[1])
        energy = model.discriminator_head(model.discriminator(model.encoder_inputs(fake_ids, batch),
                                                              training=training))
        # q is the fixed noise distribution of the NCE problem: its own loss alone trains it.
        log_q = cloze.at(cloze_logits, fake_ids)
        disc_logits = electric.nce_logits(energy, log_q, config.mask_prob)
        token_mask = tf.cast(input_mask, tf.float32)
        disc_losses = tf.nn.sigmoid_cross_entropy_with_logits(labels, disc_logits)
        out.update(fake_ids=fake_ids, labels=labels, sampled=sampled, energy=energy, log_q=log_q,
                   disc_logits=disc_logits, disc_weights=token_mask,
                   disc_loss=tf.reduce_sum(disc_losses * token_mask) / normalizers["num_tokens"])
        out["loss"] = config.gen_weight * out["gen_loss"] + config.disc_weight * out["disc_loss"]
        return out

    def create_metrics(self):
        return {**generator_metrics(), **detection_metrics()}

    def update_metrics(self, model, batch, out, add_partial):
        update_generator_metrics(model, out, add_partial)
        update_detection_metrics(model, out, add_partial)

    def call(self, model, batch, training=False):
        """The energies `[B, S]` of the unmasked input."""
        hidden = model.discriminator(model.encoder_inputs(batch["input_ids"], batch), training=training)
        return model.discriminator_head(hidden)

    def forward_flops_per_sequence(self, config, seq_length):
        """Two generator-shaped towers (their one-directional attention is computed over all S keys and masked,
        so each costs a full encoder), the cloze head at all S positions on their concatenated 2·H_gen states,
        the discriminator and its energy head."""
        tower, gen_width = flops.encoder_of(config, "generator", seq_length)
        discriminator, width = flops.encoder_of(config, "discriminator", seq_length)
        cloze_head = flops.mlm_head_forward_flops(seq_length, 2 * gen_width, config.embedding_size, config.vocab_size)
        return 2 * tower + cloze_head + discriminator + flops.discriminator_head_forward_flops(seq_length, width)

    def conversion_refusal(self, config, target):
        return (f"objective='electric': {target} cannot hold its two-tower cloze generator (generator_ltr + "
                "generator_rtl); only its discriminator is a standard ELECTRA encoder: export it alone with "
                "python -m electra_tf.convert --to=keras_hub, or fine-tune from the run's export directory")


ELECTRIC = Electric()
