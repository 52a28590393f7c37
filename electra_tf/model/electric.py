"""Electric (Clark et al., 2020, "Pre-Training Transformers as Energy-Based Cloze Models").

The main model (the discriminator encoder and its one-unit head) outputs an energy E(x)_t per
token: p(x_t | context) ∝ exp(−E(x)_t). It is trained by noise-contrastive estimation against a
cloze model q, the *two-tower generator*: a left-to-right and a right-to-left transformer (each of
the config's `generator` shape, sharing the embeddings), whose states at t − 1 and t + 1 are
concatenated, so q(· | x_\\t) at position t sees every token but x_t. Per step:

1. q runs on the uncorrupted input; its cloze loss (softmax cross-entropy of x_t) covers every
   candidate token (not [CLS]/[SEP]/[PAD]/[MASK]);
2. k ≈ mask_prob · n positions are drawn as in ELECTRA's masking, and each gets a sample of q at
   that position (no gradient): the noise tokens. Every drawn position is labelled noise, even
   where the sample equals the original token;
3. the main model reads the corrupted sequence x̃; at every real token its noise logit is

       s_t = E(x̃)_t + log q(x̃_t | x_\\t) + log(mask_prob / (1 − mask_prob)),

   i.e. sigmoid(s_t) = k·q / (k·q + (n − k)·exp(−E)), the posterior that x̃_t is one of the k
   noise tokens rather than one of the n − k data tokens. log q is a constant (stop-gradient);
4. loss = gen_weight · cloze loss + disc_weight · mean over real tokens of the sigmoid
   cross-entropy of s_t with the noise labels.

As in the official code, log q(x̃_t | ·) is read from the cloze model run on the *uncorrupted*
context (one generator pass serves both the samples and the NCE term).

This module holds the networks and the arithmetic; the objective that composes them per step (its losses,
metrics, FLOPs) is `electra_tf/model/objectives/electric.py`.

Example:

>>> import numpy as np
>>> nce_logits(np.zeros(2, "float32"), np.log(np.array([0.5, 0.1], "float32")), mask_prob=0.5).numpy().round(3)
array([-0.693, -2.303], dtype=float32)
"""

import dataclasses
import math

import keras
import tensorflow as tf

from electra_tf.model import masking
from electra_tf.model.encoder import ElectraEncoder

TOWERS = ("ltr", "rtl")


def directional_attention_mask(seq_length, direction: str):
    """`[1, S, S]` int: query i may attend to keys j ≤ i ("ltr") or j ≥ i ("rtl")."""
    queries = tf.range(seq_length)[:, None]
    keys = tf.range(seq_length)[None, :]
    allowed = keys <= queries if direction == "ltr" else keys >= queries
    return tf.cast(allowed, tf.int32)[None]


def shift_towers(ltr, rtl):
    """`[B, S, 2H]`: at t, the ltr state of t − 1 (tokens < t) and the rtl state of t + 1 (tokens > t).

    A roll, as the official code's: the first and last positions wrap around and so see their own
    token, but they hold [CLS] and [SEP]/[PAD], which are never sampled or in the cloze loss.
    """
    return tf.concat([tf.roll(ltr, 1, axis=1), tf.roll(rtl, -1, axis=1)], axis=-1)


class TwoTowerGenerator(keras.Model):
    """Electric's cloze model body: two one-directional encoders of the `generator` shape.

    Both towers share `embeddings` (the discriminator's block) and each has its own projection
    and layers. Output: `[batch, seq, 2 · generator.hidden_size]`, no position seeing its own token.
    """

    def __init__(self, config, embeddings, execution, name="generator"):
        super().__init__(name=name)
        # The towers need attention masks, which only the reference layers take.
        execution = dataclasses.replace(execution, kernels="reference")
        self.ltr = ElectraEncoder.from_config_object(config, "generator", embeddings=embeddings,
                                                     name="generator_ltr", execution=execution)
        self.rtl = ElectraEncoder.from_config_object(config, "generator", embeddings=embeddings,
                                                     name="generator_rtl", execution=execution)

    @property
    def embeddings(self):
        return self.ltr.embeddings

    @property
    def towers(self) -> tuple:
        return self.ltr, self.rtl

    def build(self, input_shape=None):
        for tower in self.towers:
            tower.build()
        self.built = True

    def call(self, inputs, training=None):
        seq_length = tf.shape(inputs["token_ids"])[1]
        states = [tower(inputs, training=training, attention_mask=directional_attention_mask(seq_length, direction))
                  for tower, direction in zip(self.towers, TOWERS)]
        return shift_towers(*states)


def nce_logits(energy, log_q, mask_prob: float):
    """The noise logit s = E + log q + log(k / (n − k)), with k / n = `mask_prob` (official constant)."""
    return tf.cast(energy, tf.float32) + log_q + math.log(mask_prob / (1.0 - mask_prob))


def noise_labels(masked: masking.MaskedBatch, seq_length):
    """`[B, S]` float: 1 at every drawn position (a sample of q, whatever token it is), else 0."""
    _, drawn = masking.scatter_to_sequence(tf.ones_like(masked.positions), masked.positions, masked.weights,
                                           seq_length)
    return tf.cast(drawn, tf.float32)
