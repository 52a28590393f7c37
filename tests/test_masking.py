"""Dynamic masking and the generator-sampling statistics (Gumbel-max and the two-level inverse CDF)."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model import masking
from pretrain_testutil import SPECIAL_IDS, random_example

SPECIALS = (SPECIAL_IDS["pad"], SPECIAL_IDS["cls"], SPECIAL_IDS["sep"], SPECIAL_IDS["mask"])
graph_sample = tf.function(masking.sample_tokens)
METHODS = ["inverse_cdf", "gumbel"]
graph_seeds = tf.function(masking.example_seeds)
# As training runs it, in a graph: run eagerly, each of the statistics test's 20 batches took about a second of
# per-op dispatch (the same ops and stateless seeds, so the same positions and tokens).
graph_mask_inputs = tf.function(masking.mask_inputs)


def random_batch(rng, batch_size=64, seq_length=128, vocab_size=1000):
    rows = [random_example(rng, seq_length, vocab_size, min_length=20) for _ in range(batch_size)]
    ids, mask, _ = (np.stack(x) for x in zip(*rows))
    return tf.constant(ids, tf.int32), tf.constant(mask, tf.int32)


def mask_batch(ids, mask, step, mask_prob=0.15):
    seeds = masking.example_seeds(0, step, tf.range(ids.shape[0]))
    return graph_mask_inputs(ids, mask, seeds, mask_id=SPECIAL_IDS["mask"], special_ids=SPECIALS,
                             mask_prob=mask_prob, max_predictions=masking.max_predictions_per_seq(mask_prob, 128))


def test_masking_statistics_over_many_batches():
    rng = np.random.RandomState(0)
    masked_total = real_total = shown_mask = 0
    for step in range(20):
        ids, mask = random_batch(rng)
        out = mask_batch(ids, mask, step)
        ids_np, masked_ids = ids.numpy(), out.input_ids.numpy()
        weights = out.weights.numpy()
        positions = out.positions.numpy()
        for row in range(ids_np.shape[0]):
            chosen = positions[row][weights[row] > 0]
            assert len(set(chosen)) == len(chosen), "a position was masked twice"
            assert not np.isin(ids_np[row, chosen], SPECIALS).any(), "special or pad token masked"
            assert (mask.numpy()[row, chosen] == 1).all()
            assert len(chosen) == max(1, round(0.15 * mask.numpy()[row].sum()))
            np.testing.assert_array_equal(out.original_ids.numpy()[row][weights[row] > 0], ids_np[row, chosen])
        changed = masked_ids != ids_np
        # No random replacement: every changed token became [MASK], only at chosen positions.
        assert (masked_ids[changed] == SPECIAL_IDS["mask"]).all()
        assert changed.sum() == out.shown_as_mask.numpy().sum()
        masked_total += weights.sum()
        real_total += mask.numpy().sum()
        shown_mask += out.shown_as_mask.numpy().sum()
    assert abs(masked_total / real_total - 0.15) <= 0.005
    assert abs(shown_mask / masked_total - 0.85) <= 0.02


def test_masking_is_per_example_and_reproducible():
    rng = np.random.RandomState(1)
    ids, mask = random_batch(rng, batch_size=8)
    full = mask_batch(ids, mask, step=3)
    seeds = masking.example_seeds(0, 3, tf.range(4, 8))
    second_half = masking.mask_inputs(ids[4:], mask[4:], seeds, mask_id=SPECIAL_IDS["mask"], special_ids=SPECIALS,
                                      max_predictions=19)
    np.testing.assert_array_equal(full.input_ids.numpy()[4:], second_half.input_ids.numpy())
    other_step = mask_batch(ids, mask, step=4)
    assert not np.array_equal(full.positions.numpy(), other_step.positions.numpy())


def test_short_sequences_mask_at_least_one_and_never_more_than_candidates():
    ids = tf.constant([[2, 9, 3, 0, 0], [2, 3, 0, 0, 0]], tf.int32)  # second row has no candidate
    mask = tf.cast(ids > 0, tf.int32)
    out = masking.mask_inputs(ids, mask, masking.example_seeds(0, 0, tf.range(2)), mask_id=4,
                              special_ids=SPECIALS, max_predictions=2)
    np.testing.assert_array_equal(out.weights.numpy().sum(-1), [1, 0])
    assert out.positions.numpy()[0, 0] == 1


@pytest.mark.parametrize("method", METHODS)
def test_sampling_matches_softmax(method):
    logits = tf.constant([[1.0, 2.0, 0.5, -1.0, 3.0]])
    batch = 4000
    tiled = tf.tile(logits[None], [batch, 5, 1])  # [B, N=5, V=5]
    samples = graph_sample(tiled, graph_seeds(7, 0, tf.range(batch)), 1.0, method).numpy().ravel()
    frequencies = np.bincount(samples, minlength=5) / samples.size
    expected = tf.nn.softmax(logits)[0].numpy()
    np.testing.assert_allclose(frequencies, expected, atol=0.01)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_sampling_respects_temperature(temperature, method):
    logits = tf.constant([[[0.0, 1.0, 2.0]]])
    batch = 6000
    samples = graph_sample(tf.tile(logits, [batch, 1, 1]), graph_seeds(1, 0, tf.range(batch)),
                           temperature, method).numpy().ravel()
    expected = tf.nn.softmax(logits[0, 0] / temperature).numpy()
    np.testing.assert_allclose(np.bincount(samples, minlength=3) / batch, expected, atol=0.02)


def test_inverse_cdf_sampling_over_many_blocks_passes_a_chi_squared_test():
    """A 700-word vocabulary spans three 256-entry blocks (the last one padded): every word's
    frequency over 120 000 draws must fit the softmax (chi-squared at p > 0.001)."""
    from scipy.stats import chi2

    vocab = 700
    logits = np.random.RandomState(3).normal(0, 2, size=vocab).astype("float32")
    logits[:256] -= 4.0  # an unlikely first block
    logits[400] = -1e30  # a word with no mass is never drawn
    batch, draws = 6000, 20
    samples = graph_sample(tf.tile(tf.constant(logits)[None, None], [batch, draws, 1]),
                           graph_seeds(5, 0, tf.range(batch)), 1.0, "inverse_cdf").numpy().ravel()
    counts = np.bincount(samples, minlength=vocab)
    assert counts.size == vocab and counts[400] == 0
    expected = samples.size * tf.nn.softmax(logits).numpy()
    keep = expected > 5  # the chi-squared approximation's usual condition
    statistic = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    assert chi2.sf(statistic, keep.sum() - 1) > 1e-3, statistic


def test_inverse_cdf_draws_follow_each_example_not_its_batch():
    logits = tf.constant(np.random.RandomState(4).normal(size=(6, 3, 300)), tf.float32)
    seeds = graph_seeds(2, 11, tf.range(6))
    whole = graph_sample(logits, seeds, 1.0, "inverse_cdf").numpy()
    halves = [graph_sample(logits[i:i + 3], seeds[i:i + 3], 1.0, "inverse_cdf").numpy() for i in (0, 3)]
    np.testing.assert_array_equal(whole, np.concatenate(halves))
    assert not np.array_equal(whole, graph_sample(logits, graph_seeds(2, 12, tf.range(6)), 1.0, "inverse_cdf"))


def test_sampling_method_is_validated():
    with pytest.raises(ValueError, match="sampling must be 'inverse_cdf' or 'gumbel'"):
        masking.sample_tokens(tf.zeros((1, 1, 3)), graph_seeds(0, 0, tf.range(1)), method="categorical")


def test_labels_are_zero_where_generator_reproduces_the_original():
    ids = tf.constant([[2, 10, 11, 12, 13, 14, 15, 3]], tf.int32)
    mask = tf.ones_like(ids)
    seeds = masking.example_seeds(0, 0, tf.range(1))
    out = masking.mask_inputs(ids, mask, seeds, mask_id=4, special_ids=SPECIALS, mask_prob=0.5, max_predictions=4)
    vocab = 20
    # Logits that put (almost) all mass on the original token at each masked position.
    logits = tf.one_hot(out.original_ids, vocab) * 100.0
    sampled = masking.gumbel_sample(logits, seeds)
    fake, labels = masking.corrupt(ids, out, sampled)
    np.testing.assert_array_equal(fake.numpy(), ids.numpy())
    assert labels.numpy().sum() == 0
    # And where it samples something else, exactly those positions are labelled 1.
    other = tf.one_hot((out.original_ids + 1) % vocab, vocab) * 100.0
    fake, labels = masking.corrupt(ids, out, masking.gumbel_sample(other, seeds))
    chosen = out.positions.numpy()[0][out.weights.numpy()[0] > 0]
    expected = np.zeros(8)
    expected[chosen] = 1
    np.testing.assert_array_equal(labels.numpy()[0], expected)
