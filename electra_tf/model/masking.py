"""Dynamic masking and generator sampling for ELECTRA, in TensorFlow graph ops.

Every random draw is *per example*: it comes from a stateless generator keyed
by (run seed, training step, global example index, purpose). The same example
at the same step is therefore masked and sampled identically however the
global batch is split across replicas or workers, and a resumed run repeats
an uninterrupted one exactly.

Masking follows the official `pretrain_helpers.mask`: `round(mask_prob ×
real tokens)` positions per sequence (at least 1, at most
`max_predictions`), never [CLS]/[SEP]/[MASK]/[PAD]; of those, a
`mask_token_prob` share become [MASK] and the rest keep the original token
(no random replacement). Unlike the official code, positions are drawn
without replacement (its `tf.random.categorical` can pick one twice).

Example:

>>> import tensorflow as tf
>>> from electra_tf.model.masking import mask_inputs, example_seeds
>>> ids = tf.constant([[2, 7, 8, 9, 10, 11, 3, 0]])
>>> seeds = example_seeds(seed=0, step=0, global_indices=tf.constant([0]))
>>> out = mask_inputs(ids, tf.cast(ids > 0, tf.int32), seeds, mask_id=4,
...                   special_ids=(0, 2, 3, 4), mask_prob=0.3, max_predictions=3)
>>> int(tf.reduce_sum(out.weights))  # round(0.3 × 7 real tokens) = 2
2
"""

from typing import NamedTuple, Sequence

import tensorflow as tf

from electra_tf.ops import xla_cpu

# Purposes: independent random streams for one example at one step.
_MASK_POSITIONS, _MASK_TOKEN, _GUMBEL, _SAMPLE = 0, 1, 2, 3


def max_predictions_per_seq(mask_prob: float, max_seq_length: int) -> int:
    """The official bound on masked positions per sequence."""
    return int((mask_prob + 0.005) * max_seq_length)


def example_seeds(seed, step, global_indices):
    """Stateless seeds `[B, 2]` for examples `global_indices` at `step`."""
    base = tf.random.experimental.stateless_fold_in(tf.constant([seed, 0x5EED], tf.int64), tf.cast(step, tf.int64))
    return tf.map_fn(
        lambda index: tf.random.experimental.stateless_fold_in(base, index),
        tf.cast(global_indices, tf.int64),
        fn_output_signature=tf.TensorSpec([2], tf.int64),
    )


def per_example_uniform(seeds, purpose: int, shape: Sequence):
    """`[B, *shape]` uniform [0, 1) floats, row b drawn from `seeds[b]` and `purpose`; `shape`'s
    entries are ints or scalar tensors (dynamic sizes)."""
    static = [d if isinstance(d, int) else None for d in shape]
    dims = list(shape) if None not in static else tf.stack([tf.cast(d, tf.int32) for d in shape])
    return tf.map_fn(
        lambda s: tf.random.stateless_uniform(dims, seed=tf.random.experimental.stateless_fold_in(s, purpose)),
        seeds,
        fn_output_signature=tf.TensorSpec(static, tf.float32),
    )


def trailing_dims(t, first: int) -> list:
    """`t`'s sizes from axis `first` on: ints where static, scalar tensors where dynamic."""
    return [t.shape[axis] if t.shape[axis] is not None else tf.shape(t)[axis] for axis in range(first, len(t.shape))]


class MaskedBatch(NamedTuple):
    input_ids: tf.Tensor  # [B, S] with [MASK] at the masked-and-shown positions
    positions: tf.Tensor  # [B, N] masked positions (0 where weights is 0)
    original_ids: tf.Tensor  # [B, N] the tokens at `positions`
    weights: tf.Tensor  # [B, N] float, 1 for real masked positions
    shown_as_mask: tf.Tensor  # [B, N] bool, position shows [MASK]


def candidate_positions(input_ids, input_mask, special_ids):
    is_special = tf.reduce_any(input_ids[..., None] == tf.constant(list(special_ids), input_ids.dtype), axis=-1)
    return tf.logical_and(tf.cast(input_mask, tf.bool), tf.logical_not(is_special))


def scatter_to_sequence(values, positions, weights, seq_length):
    """Dense `[B, S]` holding `values[b, i]` at `positions[b, i]` where `weights > 0`.

    Returns the scattered values and a boolean `[B, S]` of the written positions.
    Positions are distinct per row, so a sum over one-hots is a scatter.
    """
    one_hot = tf.one_hot(positions, seq_length, dtype=tf.int32) * tf.cast(weights > 0, tf.int32)[..., None]
    written = tf.reduce_sum(one_hot, axis=1)
    scattered = tf.reduce_sum(one_hot * tf.cast(values, tf.int32)[..., None], axis=1)
    return tf.cast(scattered, values.dtype), written > 0


def num_predictions(input_mask, candidates, mask_prob, max_predictions):
    """`[B]` masked positions per sequence: round(mask_prob × real tokens), in [1, max], ≤ candidates.

    Known before any random draw, so a loss normaliser over a whole batch can be
    computed before the batch is split into micro-batches.
    """
    num_tokens = tf.reduce_sum(tf.cast(input_mask, tf.float32), axis=-1)
    count = tf.clip_by_value(tf.cast(tf.round(num_tokens * mask_prob), tf.int32), 1, max_predictions)
    return tf.minimum(count, tf.reduce_sum(tf.cast(candidates, tf.int32), axis=-1))


def mask_inputs(input_ids, input_mask, seeds, *, mask_id, special_ids, mask_prob=0.15,
                max_predictions=None, mask_token_prob=0.85) -> MaskedBatch:
    """Masks `[B, S]` inputs as described in the module docstring; `seeds` from `example_seeds`.

    `max_predictions` defaults to the official bound for the sequence length
    (`max_predictions_per_seq`); `special_ids` are never masked.
    """
    seq_length = input_ids.shape[1] or tf.shape(input_ids)[1]
    if max_predictions is None:
        max_predictions = max_predictions_per_seq(mask_prob, input_ids.shape[1])
    candidates = candidate_positions(input_ids, input_mask, special_ids)
    num_to_predict = num_predictions(input_mask, candidates, mask_prob, max_predictions)

    noise = per_example_uniform(seeds, _MASK_POSITIONS, [input_ids.shape[1]])
    scores = tf.where(candidates, noise, -1.0)
    _, positions = tf.math.top_k(scores, k=max_predictions, sorted=True)
    weights = tf.sequence_mask(num_to_predict, max_predictions, dtype=tf.float32)
    positions = positions * tf.cast(weights, positions.dtype)
    original_ids = tf.gather(input_ids, positions, batch_dims=1)

    shown_as_mask = per_example_uniform(seeds, _MASK_TOKEN, [max_predictions]) < mask_token_prob
    shown_as_mask = tf.logical_and(shown_as_mask, weights > 0)
    _, mask_here = scatter_to_sequence(tf.zeros_like(positions), positions, tf.cast(shown_as_mask, tf.float32),
                                       seq_length)
    masked_ids = tf.where(mask_here, tf.cast(mask_id, input_ids.dtype), input_ids)
    return MaskedBatch(masked_ids, positions, original_ids, weights, shown_as_mask)


def gumbel_sample(logits, seeds, temperature=1.0):
    """Gumbel-max samples from `softmax(logits / temperature)`, `[B, N, V]` → `[B, N]` (the official
    code's `sample_from_softmax`: one uniform per vocabulary entry)."""
    logits = tf.stop_gradient(tf.cast(logits, tf.float32)) / temperature
    uniform = per_example_uniform(seeds, _GUMBEL, trailing_dims(logits, 1))
    gumbel = -tf.math.log(-tf.math.log(uniform + 1e-9) + 1e-9)
    return tf.argmax(logits + gumbel, axis=-1, output_type=tf.int32)


def inverse_cdf_sample(logits, seeds, temperature=1.0, softmax=None):
    """Samples from `softmax(logits / temperature)`, `[B, N, V]` → `[B, N]`, two uniforms per draw.

    `xla_cpu.sample_from_logits`: a block of the vocabulary by its mass, then a token within
    it; the same distribution as `gumbel_sample` from 2 instead of V random numbers per draw.
    `softmax`: the logits' `xla_cpu.vocabulary_softmax`, if computed already.
    """
    uniforms = per_example_uniform(seeds, _SAMPLE, trailing_dims(logits, 1)[:-1] + [2])
    return xla_cpu.sample_from_logits(tf.cast(logits, tf.float32), uniforms, temperature, softmax)


def sample_tokens(logits, seeds, temperature=1.0, method="inverse_cdf", softmax=None):
    """The generator's samples at the masked positions by `method`, "inverse_cdf" or "gumbel"
    (`ExecutionOptions.sampling`, resolved)."""
    if method == "inverse_cdf":
        return inverse_cdf_sample(logits, seeds, temperature, softmax)
    if method == "gumbel":
        return gumbel_sample(logits, seeds, temperature)
    raise ValueError(f"sampling must be 'inverse_cdf' or 'gumbel', got {method!r}")


def corrupt(input_ids, masked: MaskedBatch, sampled_ids):
    """Puts generator samples at the masked positions; labels are 1 where a token changed."""
    sampled_ids = tf.cast(sampled_ids, input_ids.dtype)
    values, written = scatter_to_sequence(sampled_ids, masked.positions, masked.weights,
                                          input_ids.shape[1] or tf.shape(input_ids)[1])
    fake_ids = tf.where(written, values, input_ids)
    labels = tf.cast(tf.not_equal(fake_ids, input_ids), tf.float32)
    return fake_ids, labels
