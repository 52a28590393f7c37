"""The ragged steps the serving exports are written with (`electra_tf.serving.text`) against TensorFlow's own ops,
on raggeds with empty rows, an empty batch and rows of nothing but empties."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.serving import text

RNG = np.random.default_rng(0)
LENGTH_SETS = [[2, 0, 3, 1], [0, 0, 0], [], [5], [0, 4, 0, 0, 2, 0], list(RNG.integers(0, 6, size=40))]


def ragged_of(lengths, dtype=tf.int64):
    values = RNG.integers(0, 100, size=int(sum(lengths)))
    return tf.RaggedTensor.from_row_lengths(tf.constant(values, dtype), tf.constant(lengths, tf.int64))


@pytest.mark.parametrize("lengths", LENGTH_SETS)
def test_row_ids_and_positions_equal_tensorflows(lengths):
    ragged = ragged_of(lengths)
    rows = text.row_ids(ragged.row_splits)
    np.testing.assert_array_equal(rows.numpy(), ragged.value_rowids().numpy())
    np.testing.assert_array_equal(text.positions_in_rows(ragged.row_splits, rows).numpy(),
                                  tf.ragged.range(ragged.row_lengths()).flat_values.numpy())
    np.testing.assert_array_equal(text.splits_of(tf.constant(lengths, tf.int32)).numpy(), ragged.row_splits.numpy())


@pytest.mark.parametrize("lengths", LENGTH_SETS)
def test_flat_of_equals_from_tensor(lengths):
    dense = tf.constant(RNG.integers(0, 100, size=(len(lengths), 7)), tf.int64)
    lengths = tf.constant(lengths, tf.int64)
    np.testing.assert_array_equal(text.flat_of(dense, lengths).numpy(),
                                  tf.RaggedTensor.from_tensor(dense, lengths=lengths).flat_values.numpy())


@pytest.mark.parametrize("lengths", LENGTH_SETS)
def test_masked_equals_ragged_boolean_mask(lengths):
    ragged = ragged_of(lengths)
    keep = ragged.with_flat_values(tf.constant(RNG.random(int(sum(lengths))) < 0.5))
    got, want = text.masked(ragged, keep), tf.ragged.boolean_mask(ragged, keep)
    np.testing.assert_array_equal(got.row_splits.numpy(), want.row_splits.numpy())
    np.testing.assert_array_equal(got.flat_values.numpy(), want.flat_values.numpy())


@pytest.mark.parametrize("lengths", LENGTH_SETS)
def test_join_rows_equals_reduce_join(lengths):
    words = tf.strings.as_string(ragged_of(lengths))
    np.testing.assert_array_equal(text.join_rows(words, " ").numpy(),
                                  tf.strings.reduce_join(words, axis=1, separator=" ").numpy())


@pytest.mark.parametrize("lengths", LENGTH_SETS)
def test_rows_within_equals_comparing_positions_with_the_bounds(lengths):
    ragged = ragged_of(lengths)
    low = tf.constant(RNG.integers(-1, 4, size=len(lengths)), tf.int64)
    high = tf.constant(RNG.integers(-1, 5, size=len(lengths)), tf.int64)
    positions = tf.ragged.range(ragged.row_lengths())
    want = (positions >= low[:, None]) & (positions <= high[:, None])
    got = text.rows_within(ragged, low, high)
    assert got.to_list() == want.to_list()
    assert text.rows_within(ragged, high=high).to_list() == (positions <= high[:, None]).to_list()


def test_the_steps_trace_no_tf_repeat():
    """The point of them: in a traced graph each is a few nodes, none of TensorFlow's `tf.repeat`."""
    spec = tf.RaggedTensorSpec([None, None], tf.string, row_splits_dtype=tf.int64)

    @tf.function(input_signature=[spec])
    def steps(words):
        keep = text.rows_within(words, high=tf.fill([words.nrows()], tf.constant(1, tf.int64)))
        joined = text.join_rows(text.masked(words, keep), " ")
        return joined, text.flat_of(words.to_tensor(""), words.row_lengths())

    names = [node.name for node in steps.get_concrete_function().graph.as_graph_def().node]
    assert not [n for n in names if "Repeat" in n or "RaggedSplitsToSegmentIds" in n], names
    words = tf.ragged.constant([["a", "b", "c"], [], ["d"]], row_splits_dtype=tf.int64)
    joined, flat = steps(words)
    assert joined.numpy().tolist() == [b"a b", b"", b"d"]
    assert flat.numpy().tolist() == [b"a", b"b", b"c", b"d"]
