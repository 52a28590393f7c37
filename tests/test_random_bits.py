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
