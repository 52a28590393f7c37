"""What every serving export shares: the in-graph tokeniser, whitespace words with their offsets, and
writing the SavedModel.

`graph_tokenizer(tokenizer)` wraps the run's tokenizer's own in-graph path (`tokenize_in_graph`, the one
implementation that `--train_text` and the tf.data service run too):

* a SentencePiece model: tensorflow-text's `SentencepieceTokenizer` built from the model proto's bytes, which
  the SavedModel holds (it needs no file once written); the normalisation is the model's own, so its ids are
  the Python tokenizer's;
* a WordPiece vocab: the `WordPieceTokenizer`'s normalisation as TF ops, then tensorflow-text's
  `FastWordpieceTokenizer` over the same vocabulary. Two deliberate gaps, both rare: lower-casing is ICU's
  (`tf.strings.lower`) rather than Python's `str.lower`, and a word longer than 100 characters is split by
  byte count rather than becoming `[UNK]`.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401 (registers the ops a loaded SavedModel runs)

from electra_tf.text import normalization


def graph_tokenizer(tokenizer) -> "GraphTokenizer":
    """The in-graph tokeniser of `tokenizer` (from `tokenizers.load_tokenizer`): ids of a string batch, ragged."""
    return GraphTokenizer(tokenizer)


class GraphTokenizer(tf.Module):
    """`tokenizer.tokenize_in_graph` for a SavedModel. It tracks the tensorflow-text op that method runs
    (`tokenizer.in_graph_op()`), so the vocabulary or model proto is saved inside the SavedModel."""

    def __init__(self, tokenizer):
        super().__init__()
        self.op = tokenizer.in_graph_op()
        self._tokenizer = tokenizer

    def __call__(self, texts):
        return self._tokenizer.tokenize_in_graph(texts, op=self.op)

    def tokenize_with_offsets(self, texts):
        """Ids and each piece's `(begin, end)` bytes in its text, ragged `[batch, pieces]` (a SentencePiece
        model's op only: WordPiece answers are cut by words, see `electra_tf.serving.squad`)."""
        return self.op.tokenize_with_offsets(texts)


@functools.lru_cache(maxsize=None)
def python_whitespace() -> str:
    """What Python's `str.split()` splits on (`str.isspace`), as an RE2 class run."""
    spaces = np.array([chr(cp).isspace() for cp in range(0x110000)])
    return normalization._re2_class(normalization._mask_ranges(spaces)) + "+"


def char_offsets(texts, byte_offsets):
    """Byte offsets into `texts` (ragged `[batch, n]`, each at a character boundary or the end) → character
    offsets, what Python's `str` indexes."""
    _, char_bytes = tf.strings.unicode_decode_with_offsets(texts, "UTF-8", errors="replace")
    char_bytes = char_bytes.to_tensor(np.iinfo(np.int64).max)
    return tf.searchsorted(char_bytes, byte_offsets.to_tensor(0), side="left", out_type=tf.int64)


def row_ids(row_splits):
    """Each value's row under `row_splits` (`RaggedTensor.value_rowids()`): how many rows end at or before its
    position, one `UpperBound` over the splits. TensorFlow's own goes through `tf.repeat`, about 30 nodes, and each
    ragged reduction, mask, join or `from_tensor` traces it again; a loader converts, rewrites and instantiates
    every node of an export on its first request, so the exports' ragged steps are written with this instead."""
    positions = tf.range(row_splits[-1], dtype=row_splits.dtype)
    return tf.searchsorted(row_splits[1:], positions, side="right", out_type=row_splits.dtype)


def splits_of(lengths):
    """Row splits of rows of `lengths` (int64)."""
    return tf.concat([tf.zeros([1], tf.int64), tf.cumsum(tf.cast(lengths, tf.int64))], 0)


def positions_in_rows(row_splits, rows):
    """Each value's position in its row (`tf.ragged.range(row_lengths).flat_values`), `rows` its `row_ids`."""
    return tf.range(row_splits[-1], dtype=row_splits.dtype) - tf.gather(row_splits, rows)


def flat_of(dense, lengths):
    """The first `lengths[i]` entries of each row of `dense` `[batch, n]`, flat
    (`tf.RaggedTensor.from_tensor(dense, lengths=lengths).flat_values`)."""
    splits = splits_of(lengths)
    rows = row_ids(splits)
    return tf.gather_nd(dense, tf.stack([rows, positions_in_rows(splits, rows)], 1))


def masked(ragged, keep):
    """`tf.ragged.boolean_mask(ragged, keep)` of a 2-D `ragged` (`keep`: a ragged bool of its shape)."""
    kept = tf.cast(keep.flat_values, tf.int64)
    lengths = tf.math.unsorted_segment_sum(kept, row_ids(ragged.row_splits), ragged.nrows())
    values = tf.gather(ragged.flat_values, tf.where(keep.flat_values)[:, 0])
    return tf.RaggedTensor.from_row_lengths(values, lengths, validate=False)


def join_rows(ragged, separator: str):
    """`tf.strings.reduce_join(ragged, axis=1, separator=separator)` of a 2-D string `ragged`."""
    return tf.strings.unsorted_segment_join(ragged.flat_values, row_ids(ragged.row_splits), ragged.nrows(),
                                            separator=separator)


def rows_within(ragged, low=None, high=None):
    """A ragged boolean shaped like `ragged` (`[batch, (n)]`): whether position p of row i lies in
    `[low[i], high[i]]` (per-row int bounds; None: unbounded).

    Computed on the flat values, each value's position against its row's bounds (gathered): the same comparison
    written `tf.ragged.range(lengths) >= low[:, None]` broadcasts a ragged against a dense tensor through
    `DynamicRaggedShape`, which traces about 20 `tf.cond`s per comparison; a loader imports and instantiates their
    branch functions on the first request."""
    splits = tf.cast(ragged.row_splits, tf.int64)
    rows = row_ids(splits)
    positions = positions_in_rows(splits, rows)
    inside = tf.ones_like(positions, tf.bool)
    if low is not None:
        inside &= positions >= tf.gather(tf.cast(low, tf.int64), rows)
    if high is not None:
        inside &= positions <= tf.gather(tf.cast(high, tf.int64), rows)
    return ragged.with_flat_values(inside)


def pad_to_longest(ids, segment_ids, pad_id: int) -> dict:
    """The model's inputs of ragged `[batch, tokens]` rows, padded to the batch's longest row (int32).

    Not to `max_seq_length`: a request computes on its own length, as attention and the feed-forward cost grow
    with the padded length (SST-2's sentences average ~25 tokens of 128). The outputs at the real positions do
    not depend on the padding, which the mask hides from every key, so they equal the model's on any longer
    padding (to float rounding; `tests/test_serving_speed.py` holds them to 1e-5)."""
    return {"input_ids": tf.cast(ids.to_tensor(pad_id), tf.int32),
            "input_mask": tf.cast(tf.ones_like(ids).to_tensor(0), tf.int32),
            "segment_ids": tf.cast(segment_ids.to_tensor(0), tf.int32)}


# Serving computes no gradient: the functions of the model's custom gradients (which TensorFlow saves by
# default) stay out of the SavedModel.
SAVE_OPTIONS = tf.saved_model.SaveOptions(experimental_custom_gradients=False)


def serving_archive(tokenizer: GraphTokenizer):
    """The `keras.export.ExportArchive` an export adds its endpoint to; it tracks the tokeniser's op (its vocabulary
    or model proto) and, once the endpoint is added, the variables the endpoint reads.

    ExportArchive stores the variables the way TF Serving's and saved_model_cli's TF1 session loader expect (a plain
    `tf.saved_model.save` of the module loads in TF2 only). The model itself is not `track`ed: that would store
    each weight a second time, as its Keras variable beside the captured `tf.Variable` (twice the bytes to
    restore at load)."""
    archive = keras.export.ExportArchive()
    archive.track(tokenizer)
    return archive


def add_serving_endpoint(archive, function, input_signature) -> None:
    """Adds `function` (on `input_signature`, named `TensorSpec`s) as the archive's `serving_default`, its graph
    pruned once at export (`serving.compact.pruned_endpoint`), and the variables it reads."""
    from electra_tf.serving.compact import pruned_endpoint

    endpoint, variables = pruned_endpoint(function, input_signature)
    archive.add_variable_collection("weights", variables)
    archive.add_endpoint("serving_default", endpoint, input_signature)


def write_archive(archive, path: str) -> str:
    """Writes `archive` to `path` through a temporary sibling directory, so `path` is never half-written."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".saved_model_", dir=parent)
    try:
        archive.write_out(tmp, options=SAVE_OPTIONS, verbose=False)
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path
