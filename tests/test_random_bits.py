"""The 16-bit random integers of the dropout masks (`electra_tf.ops.random_bits`)."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.ops import random_bits


@pytest.mark.parametrize("count", [8 * 1000, 8 * 1000 + 3])
def test_random_uint16_is_tensorflows_philox_stream_plane_by_plane(count):
    seed = tf.constant([7, -3], tf.int32)
    groups = (count + 7) // 8
    words = tf.random.stateless_uniform([4 * groups], seed=seed, minval=None, maxval=None, dtype=tf.uint32,
                                        alg="philox").numpy()
    expected = words.reshape(groups, 4).T.reshape(-1).view(np.uint16)[:count]
    np.testing.assert_array_equal(random_bits.random_uint16(count, seed).numpy(), expected)
    dynamic = tf.function(lambda n: random_bits.random_uint16(n, seed), input_signature=[tf.TensorSpec([], tf.int32)])
    np.testing.assert_array_equal(dynamic(tf.constant(count)).numpy(), expected)
    assert not np.array_equal(random_bits.random_uint16(count, tf.constant([7, -2], tf.int32)).numpy(), expected)


@pytest.mark.parametrize("halves", [True, False])
def test_example_keyed_bits_are_philox_at_the_elements_key_and_counter(halves):
    """Element (b, head, row, unit) is plane row % P of TensorFlow's Philox-4x32-10 with example b's key
    at counter (unit, head << 16 | row // P, its global index, site), P = 8 halves (low halves of the
    four words, then high) or 4 words: the stream `DROPOUT_STREAM` names, pinned against TensorFlow's kernel."""
    from electra_tf.model.example_dropout import example_streams

    shape, site = (3, 2, 11, 4), 6
    streams = example_streams(seed=5, step=9, global_indices=tf.constant([4, 0, 7])).numpy()
    got = random_bits.example_keyed_bits(tf.zeros(shape), streams, site, halves).numpy()
    planes = 8 if halves else 4
    for b, head, row, unit in np.ndindex(*shape):
        if unit not in (0, shape[-1] - 1):  # every plane, first and last unit
            continue
        key = np.uint64(streams[b, 0]) | (np.uint64(streams[b, 1]) << np.uint64(32))
        counter = [np.uint64(unit) | (np.uint64(head << 16 | row // planes) << np.uint64(32)),
                   np.uint64(streams[b, 2]) | (np.uint64(site) << np.uint64(32))]
        words = tf.raw_ops.StatelessRandomUniformFullIntV2(
            shape=[4], key=tf.constant([key], tf.uint64), counter=tf.constant(counter, tf.uint64),
            alg=tf.constant(1), dtype=tf.uint32).numpy()
        plane = row % planes
        want = words.view(np.uint16).reshape(4, 2).T.reshape(-1)[plane] if halves else words[plane]
        assert got[b, head, row, unit] == want, (b, head, row, unit)


def test_keyed_words_interleaved_inside_a_compiled_function_are_the_keyed_bits():
    from electra_tf.model.example_dropout import example_streams

    streams = example_streams(seed=1, step=2, global_indices=tf.range(2))
    interleave = tf.function(random_bits.bits_like, jit_compile=True)
    for shape in [(2, 3, 13, 5), (2, 13, 6), (2, 6), (2, 16, 4)]:
        x = tf.zeros(shape)
        words = random_bits.example_keyed_words(x, streams, 4)
        np.testing.assert_array_equal(interleave(words, x).numpy(),
                                      random_bits.example_keyed_bits(x, streams, 4).numpy())
        if len(shape) == 3:  # the kernels' [B·S, H] rows
            rows = tf.zeros([shape[0] * shape[1], shape[-1]])
            np.testing.assert_array_equal(interleave(words, rows).numpy().reshape(shape),
                                          random_bits.example_keyed_bits(x, streams, 4).numpy())


def test_keyed_words_are_traced_once_per_rank_whatever_the_shape():
    """A step draws words for several shapes of one rank (either encoder's hidden states, attention probabilities):
    the Philox rounds are traced once per rank and dtype, and each shape still gets its own, correct bits."""
    streams = tf.constant([[1, 2, 0], [1, 2, 1]], tf.int64)
    shapes = [(2, 5, 8), (2, 7, 16), (2, 3, 4)]
    traced = random_bits._keyed_words_jit(True, 3, tf.float32)
    before = traced.experimental_get_tracing_count()
    bits = [random_bits.example_keyed_bits(tf.zeros(shape), streams, site=4) for shape in shapes]
    assert traced.experimental_get_tracing_count() - before <= 1
    assert [tuple(b.shape) for b in bits] == shapes
    # an example's bits at a position do not depend on the batch's other dimensions (the keyed-bits contract)
    np.testing.assert_array_equal(bits[0].numpy()[:, :3, :4], bits[2].numpy())
