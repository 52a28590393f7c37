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

With `whole_words` (a boolean "continues the word before it" table over the vocabulary,
the tokenizer's `continuation_table()`: `##` pieces of a WordPiece vocab, pieces without a leading
'▁' of a SentencePiece model; CJK characters are words of their own), masking picks whole words
instead, BERT's whole-word masking: words in random order, each taken whole if it still fits the same
token budget and skipped otherwise, so a sequence is masked as close to the
budget as its word lengths allow and never beyond it.

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

import numpy as np
import tensorflow as tf

from electra_tf.ops import xla_cpu
from electra_tf.ops.random_bits import uniform_from_words
from electra_tf.text.tokenizers import load_tokenizer

# Every draw names its algorithm and makes its floats from Philox words itself (`uniform_from_words`):
# XLA converts words to floats another way, so a compiled step (the GPU/TPU default) would otherwise
# mask other positions and sample other tokens than the same step run by TensorFlow's kernels.
RNG_ALG = "philox"
# Purposes: independent random streams for one example at one step.
_MASK_POSITIONS, _MASK_TOKEN, _GUMBEL, _SAMPLE = 0, 1, 2, 3
# What the official `sample_from_softmax(..., disallow=...)` subtracts from a disallowed logit.
DISALLOW_PENALTY = 1000.0


def max_predictions_per_seq(mask_prob: float, max_seq_length: int) -> int:
    """The official bound on masked positions per sequence."""
    return int((mask_prob + 0.005) * max_seq_length)


def example_seeds(seed, step, global_indices):
    """Stateless seeds `[B, 2]` for examples `global_indices` at `step`."""
    base = tf.random.experimental.stateless_fold_in(tf.constant([seed, 0x5EED], tf.int64), tf.cast(step, tf.int64),
                                                    alg=RNG_ALG)
    return tf.map_fn(
        lambda index: tf.random.experimental.stateless_fold_in(base, index, alg=RNG_ALG),
        tf.cast(global_indices, tf.int64),
        fn_output_signature=tf.TensorSpec([2], tf.int64),
    )


def per_example_uniform(seeds, purpose: int, shape: Sequence):
    """`[B, *shape]` uniform [0, 1) floats, row b drawn from `seeds[b]` and `purpose`; `shape`'s
    entries are ints or scalar tensors (dynamic sizes)."""
    static = [d if isinstance(d, int) else None for d in shape]
    dims = list(shape) if None not in static else tf.stack([tf.cast(d, tf.int32) for d in shape])
    return tf.map_fn(
        lambda s: uniform_from_words(tf.random.stateless_uniform(
            dims, seed=tf.random.experimental.stateless_fold_in(s, purpose, alg=RNG_ALG), minval=None, maxval=None,
            dtype=tf.uint32, alg=RNG_ALG)),
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


def read_continuation_table(vocab_file: str) -> np.ndarray:
    """`[V]` bool "continues the word before it" of a WordPiece vocab or SentencePiece `.model`: the
    tokenizer's `continuation_table()` (`##x` pieces; pieces without '▁' but for CJK ones)."""
    return load_tokenizer(vocab_file).continuation_table()


def word_ids(input_ids, candidates, whole_words):
    """`[B, S]` index of each candidate position's word (-1 elsewhere) and `[B]` word counts.

    A word starts at a candidate that is no continuation, or whose left neighbour is no
    candidate (a `##` piece right after [CLS] or [SEP] has no word to continue).
    """
    is_continuation = tf.gather(tf.convert_to_tensor(whole_words, tf.bool), input_ids)
    previous = tf.pad(candidates[:, :-1], [[0, 0], [1, 0]])
    starts = tf.logical_and(candidates, tf.logical_not(tf.logical_and(is_continuation, previous)))
    index = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
    return tf.where(candidates, index, -1), tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)


def _take_in_order(lengths, budget):
    """`[B, W]` bool: walking each row in order, take a word if it still fits `budget[b]`."""
    def step(total, length):
        take = tf.logical_and(length > 0, total + length <= budget)
        return total + tf.where(take, length, 0), take

    _, taken = tf.scan(lambda state, length: step(state[0], length), tf.transpose(lengths),
                       initializer=(tf.zeros_like(budget), tf.zeros_like(budget, tf.bool)))
    return tf.transpose(taken)


def whole_word_positions(input_ids, candidates, whole_words, budget, seeds):
    """`[B, S]` bool: the tokens of whole words in random order, each taken while it fits `budget`."""
    seq_length = input_ids.shape[1]
    words, num_words = word_ids(input_ids, candidates, whole_words)
    batch = tf.shape(input_ids)[0]
    flat = tf.where(words >= 0, words + tf.range(batch)[:, None] * seq_length, batch * seq_length)
    flat = tf.reshape(flat, [-1])
    lengths = tf.reshape(tf.math.unsorted_segment_sum(tf.ones_like(flat), flat, batch * seq_length + 1)[:-1],
                         [batch, seq_length])
    noise = per_example_uniform(seeds, _MASK_POSITIONS, [seq_length])
    scores = tf.where(tf.range(seq_length)[None] < num_words[:, None], noise, -1.0)
    _, order = tf.math.top_k(scores, k=seq_length, sorted=True)
    taken_in_order = _take_in_order(tf.gather(lengths, order, batch_dims=1), budget)
    taken = tf.gather(taken_in_order, tf.argsort(order, axis=1), batch_dims=1)
    return tf.logical_and(candidates, tf.gather(taken, tf.maximum(words, 0), batch_dims=1))


def _token_positions(candidates, num_to_predict, max_predictions, seeds):
    """`[B, max_predictions]` random distinct candidate positions and their weights."""
    noise = per_example_uniform(seeds, _MASK_POSITIONS, [candidates.shape[1]])
    _, positions = tf.math.top_k(tf.where(candidates, noise, -1.0), k=max_predictions, sorted=True)
    return positions, tf.sequence_mask(num_to_predict, max_predictions, dtype=tf.float32)


def _word_positions(input_ids, candidates, whole_words, num_to_predict, max_predictions, seeds):
    """`[B, max_predictions]` positions of whole words (in sequence order) and their weights."""
    chosen = whole_word_positions(input_ids, candidates, whole_words, num_to_predict, seeds)
    order = tf.cast(input_ids.shape[1] - tf.range(input_ids.shape[1]), tf.float32)[None]
    _, positions = tf.math.top_k(tf.where(chosen, order, -1.0), k=max_predictions, sorted=True)
    count = tf.reduce_sum(tf.cast(chosen, tf.int32), axis=1)
    return positions, tf.sequence_mask(count, max_predictions, dtype=tf.float32)


def mask_inputs(input_ids, input_mask, seeds, *, mask_id, special_ids, mask_prob=0.15,
                max_predictions=None, mask_token_prob=0.85, whole_words=None) -> MaskedBatch:
    """Masks `[B, S]` inputs as described in the module docstring; `seeds` from `example_seeds`.

    `max_predictions` defaults to the official bound for the sequence length
    (`max_predictions_per_seq`); `special_ids` are never masked. `whole_words`: the
    vocabulary's `continuation_table` for whole-word masking (None: token masking).
    """
    seq_length = input_ids.shape[1] or tf.shape(input_ids)[1]
    if max_predictions is None:
        max_predictions = max_predictions_per_seq(mask_prob, input_ids.shape[1])
    candidates = candidate_positions(input_ids, input_mask, special_ids)
    num_to_predict = num_predictions(input_mask, candidates, mask_prob, max_predictions)
    if whole_words is None:
        positions, weights = _token_positions(candidates, num_to_predict, max_predictions, seeds)
    else:
        positions, weights = _word_positions(input_ids, candidates, whole_words, num_to_predict, max_predictions,
                                             seeds)
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


def sample_tokens(logits, seeds, temperature=1.0, method="inverse_cdf", softmax=None, disallow=None):
    """The generator's samples at the masked positions by `method`, "inverse_cdf" or "gumbel"
    (`ExecutionOptions.sampling`, resolved).

    `disallow` (`[B, N]` ids, e.g. the originals): as the official `sample_from_softmax`, those
    tokens' logits get −1000 after the temperature, so they are (numerically) never drawn.
    """
    if disallow is not None:
        logits = disallowed(logits, disallow, temperature)
        temperature, softmax = 1.0, None  # the penalised logits need their own normaliser
    if method == "inverse_cdf":
        return inverse_cdf_sample(logits, seeds, temperature, softmax)
    if method == "gumbel":
        return gumbel_sample(logits, seeds, temperature)
    raise ValueError(f"sampling must be 'inverse_cdf' or 'gumbel', got {method!r}")


def disallowed(logits, disallow, temperature=1.0):
    """`logits / temperature` with `DISALLOW_PENALTY` subtracted at the `disallow` ids."""
    penalty = tf.one_hot(disallow, tf.shape(logits)[-1], on_value=DISALLOW_PENALTY, off_value=0.0)
    return tf.stop_gradient(tf.cast(logits, tf.float32)) / temperature - penalty


def uniform_sample(seeds, vocab_size: int, original_ids, disallow_original=False):
    """`uniform_generator`: `[B, N]` ids (`original_ids`' shape) uniform over the vocabulary.

    The official code samples from all-zero logits, a uniform draw; with `disallow_correct` the
    −1000 penalty leaves the other V − 1 ids equally likely. The same distributions, drawn here
    from one uniform per position instead of V: with `disallow_original` the original is skipped.
    """
    uniforms = per_example_uniform(seeds, _SAMPLE, trailing_dims(original_ids, 1))
    choices = vocab_size - 1 if disallow_original else vocab_size
    ids = tf.minimum(tf.cast(tf.floor(uniforms * choices), tf.int32), choices - 1)
    if not disallow_original:
        return ids
    return ids + tf.cast(ids >= tf.cast(original_ids, tf.int32), tf.int32)


def corrupt(input_ids, masked: MaskedBatch, sampled_ids):
    """Puts generator samples at the masked positions; labels are 1 where a token changed."""
    sampled_ids = tf.cast(sampled_ids, input_ids.dtype)
    values, written = scatter_to_sequence(sampled_ids, masked.positions, masked.weights,
                                          input_ids.shape[1] or tf.shape(input_ids)[1])
    fake_ids = tf.where(written, values, input_ids)
    labels = tf.cast(tf.not_equal(fake_ids, input_ids), tf.float32)
    return fake_ids, labels
