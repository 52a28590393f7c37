"""Packing tokenised sentences into ELECTRA pre-training examples.

``ExamplePacker`` follows the ``ExampleBuilder`` of google-research/electra
``build_pretraining_dataset.py`` decision for decision:

* sentences of a document are accumulated until their token count reaches the
  current *target length* (``max_seq_length``; with probability
  ``short_seq_prob`` the next target is a random length in [5, max]);
  the end of a document flushes what is left: documents never share an example;
* with probability ``single_segment_prob`` (0.1) the example has one segment;
  otherwise a sentence goes to segment A while A is empty or the sentence fits
  into A's budget ``(target - 3) // 2`` (or, 50 % of the time, when B is still
  empty and A is under budget), else to B;
* A is truncated to ``max - 2`` tokens, B to ``max - len(A) - 3``; the cut-off
  tokens are lost, as in the official code (a sentence longer than the
  example is never split over two examples).  ``ExampleSpec`` holds the kept
  lengths, so the builder counts the loss (``num_truncated_tokens``);
* the example is ``[CLS] A [SEP] B [SEP]`` (``[CLS] A [SEP]`` if B is empty),
  segment ids 0 up to and including the first [SEP], 1 after; padded with 0.

Randomness comes from a ``random.Random`` owned by the caller (one per shard,
seeded from ``(seed, shard index)``), so output is reproducible.

The dense ``[n, max_seq_length]`` arrays are assembled with numpy and turned
into serialised ``tf.train.Example`` protos by ``serialize_examples``, a
vectorised protobuf encoder (byte-identical to
``Example.SerializeToString(deterministic=True)``).

Example:

>>> import random, numpy as np
>>> from data_prep.packing import ExamplePacker, assemble, SpecialIds
>>> packer = ExamplePacker(max_seq_length=8, rng=random.Random(0), single_segment_prob=0.0)
>>> specs = packer.pack_document(sentence_starts=[0, 3], sentence_lengths=[3, 2])
>>> batch = assemble(np.arange(10, 15, dtype=np.int32), specs, 8, SpecialIds(cls=2, sep=3, pad=0))
>>> batch.input_ids.tolist(), batch.segment_ids.tolist()
([[2, 10, 11, 12, 3, 13, 14, 3]], [[0, 0, 0, 0, 0, 1, 1, 1]])
"""

from __future__ import annotations

import dataclasses
import random
from typing import NamedTuple, Sequence

import numpy as np

from electra_tf.text.manifest import INPUT_IDS, INPUT_MASK, MIN_SHORT_TARGET, SEGMENT_IDS, SINGLE_SEGMENT_TARGET



class SpecialIds(NamedTuple):
    cls: int
    sep: int
    pad: int


@dataclasses.dataclass
class ExampleSpec:
    """Token pieces ``(start, length)`` in the flat id array for A and B."""
    a_pieces: list
    b_pieces: list
    a_length: int
    b_length: int


class ExamplePacker:
    """Official ELECTRA sentence packing with an explicit RNG."""

    def __init__(self, max_seq_length: int, rng: random.Random, short_seq_prob: float = 0.05,
                 single_segment_prob: float = 0.1):
        if max_seq_length < MIN_SHORT_TARGET:
            raise ValueError(f"max_seq_length={max_seq_length} is below {MIN_SHORT_TARGET}")
        self.max_seq_length = max_seq_length
        self.rng = rng
        self.short_seq_prob = short_seq_prob
        self.single_segment_prob = single_segment_prob
        self.target_length = max_seq_length

    def pack_document(self, sentence_starts: Sequence[int],
                      sentence_lengths: Sequence[int]) -> list[ExampleSpec]:
        """Examples of one document, given its sentences' token spans."""
        examples = []
        current: list[int] = []
        current_length = 0
        for index, length in enumerate(sentence_lengths):
            current.append(index)
            current_length += length
            if current_length >= self.target_length:
                examples.append(self._make_example(current, sentence_starts, sentence_lengths))
                current, current_length = [], 0
        if current_length:
            examples.append(self._make_example(current, sentence_starts, sentence_lengths))
        return examples

    def _make_example(self, sentences, starts, lengths) -> ExampleSpec:
        rng = self.rng
        if rng.random() < self.single_segment_prob:
            first_target = SINGLE_SEGMENT_TARGET
        else:
            first_target = (self.target_length - 3) // 2
        first, second = [], []
        first_length = second_length = 0
        for index in sentences:
            length = lengths[index]
            if (first_length == 0 or first_length + length < first_target
                    or (second_length == 0 and first_length < first_target and rng.random() < 0.5)):
                first.append(index)
                first_length += length
            else:
                second.append(index)
                second_length += length
        a_length = min(first_length, self.max_seq_length - 2)
        b_length = min(second_length, max(0, self.max_seq_length - a_length - 3))
        if rng.random() < self.short_seq_prob:
            self.target_length = rng.randint(MIN_SHORT_TARGET, self.max_seq_length)
        else:
            self.target_length = self.max_seq_length
        return ExampleSpec(_pieces(first, starts, lengths, a_length),
                           _pieces(second, starts, lengths, b_length), a_length, b_length)


def _pieces(sentences, starts, lengths, budget: int) -> list[tuple[int, int]]:
    """(start, length) spans of ``sentences`` cut to ``budget`` tokens in total."""
    out = []
    for index in sentences:
        if budget <= 0:
            break
        take = min(lengths[index], budget)
        if take:
            out.append((starts[index], take))
        budget -= take
    return out


class ExampleBatch(NamedTuple):
    input_ids: np.ndarray    # [n, max_seq_length] int32
    input_mask: np.ndarray   # [n, max_seq_length] uint8
    segment_ids: np.ndarray  # [n, max_seq_length] uint8
    lengths: np.ndarray      # [n] real tokens incl. specials


def assemble(flat_ids: np.ndarray, specs: list[ExampleSpec], max_seq_length: int,
             special: SpecialIds) -> ExampleBatch:
    """Dense padded arrays for ``specs`` whose pieces index ``flat_ids``."""
    n = len(specs)
    a_len = np.fromiter((s.a_length for s in specs), np.int64, n)
    b_len = np.fromiter((s.b_length for s in specs), np.int64, n)
    src, rows, cols, lens = [], [], [], []
    for row, spec in enumerate(specs):
        column = 1
        for start, length in spec.a_pieces:
            src.append(start), rows.append(row), cols.append(column), lens.append(length)
            column += length
        column = spec.a_length + 2
        for start, length in spec.b_pieces:
            src.append(start), rows.append(row), cols.append(column), lens.append(length)
            column += length
    ids = np.full((n, max_seq_length), special.pad, np.int32)
    if lens:
        lens_arr = np.asarray(lens, np.int64)
        piece = np.repeat(np.arange(len(lens_arr)), lens_arr)
        offset = np.arange(lens_arr.sum()) - np.repeat(np.cumsum(lens_arr) - lens_arr, lens_arr)
        ids[np.asarray(rows)[piece], np.asarray(cols)[piece] + offset] = \
            flat_ids[np.asarray(src)[piece] + offset]
    row_index = np.arange(n)
    has_b = b_len > 0
    ids[:, 0] = special.cls
    ids[row_index, a_len + 1] = special.sep
    ids[row_index[has_b], (a_len + b_len + 2)[has_b]] = special.sep
    lengths = a_len + 2 + np.where(has_b, b_len + 1, 0)
    column = np.arange(max_seq_length)[None, :]
    input_mask = (column < lengths[:, None]).astype(np.uint8)
    segment_ids = ((column >= (a_len + 2)[:, None]) & (column < lengths[:, None])
                   & has_b[:, None]).astype(np.uint8)
    return ExampleBatch(ids, input_mask, segment_ids, lengths)


# --------------------------------------------------------------------------
# Vectorised tf.train.Example serialisation
# --------------------------------------------------------------------------

def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def _int64_feature(payload: bytes) -> bytes:
    """Feature{int64_list: Int64List{value: packed payload}}."""
    return _field(0x1A, _field(0x0A, payload))


def _map_entry(key: str, feature: bytes) -> bytes:
    return _field(0x0A, _field(0x0A, key.encode()) + _field(0x12, feature))


class ExampleSerializer:
    """Serialises {input_ids, input_mask, segment_ids} rows to Example bytes.

    The feature names are ``electra_tf.text.manifest``'s; protobuf's deterministic
    serialisation writes map entries in key order, which is this order.
    """

    MAX_ID = (1 << 28) - 1  # ids are encoded with at most 4 varint bytes

    def __init__(self, max_seq_length: int):
        self.max_seq_length = max_seq_length
        zeros = bytes(max_seq_length)
        mask_entry = _map_entry(INPUT_MASK, _int64_feature(zeros))
        seg_entry = _map_entry(SEGMENT_IDS, _int64_feature(zeros))
        self._mask_entry_len, self._seg_entry_len = len(mask_entry), len(seg_entry)
        self._mask_head = mask_entry[:-max_seq_length]
        self._seg_head = seg_entry[:-max_seq_length]
        self._prefix_cache: dict[int, bytes] = {}

    def _prefix(self, payload_length: int) -> bytes:
        """Example/Features/entry/Feature/Int64List headers for an ids payload."""
        prefix = self._prefix_cache.get(payload_length)
        if prefix is None:
            dummy = bytes(payload_length)
            entry = _map_entry(INPUT_IDS, _int64_feature(dummy))
            features_len = len(entry) + self._mask_entry_len + self._seg_entry_len
            prefix = bytes([0x0A]) + _varint(features_len) + entry[:-payload_length]
            self._prefix_cache[payload_length] = prefix
        return prefix

    def serialize(self, batch: ExampleBatch) -> list[bytes]:
        """Serialised Example protos, one per row of ``batch``."""
        payload, payload_lengths = _encode_varints(batch.input_ids)
        ends = np.cumsum(payload_lengths).tolist()
        masks = batch.input_mask.astype(np.uint8, copy=False)
        segments = batch.segment_ids.astype(np.uint8, copy=False)
        mask_head, seg_head, prefix = self._mask_head, self._seg_head, self._prefix
        out = []
        start = 0
        for row, end in enumerate(ends):
            out.append(b"".join((prefix(end - start), payload[start:end],
                                 mask_head, masks[row].tobytes(),
                                 seg_head, segments[row].tobytes())))
            start = end
        return out


def _encode_varints(ids: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Concatenated protobuf varints of each row and the byte count per row."""
    if ids.size == 0:
        return b"", np.zeros([len(ids)], np.int64)
    if ids.min() < 0 or ids.max() > ExampleSerializer.MAX_ID:
        raise ValueError("token ids must be in [0, 2**28)")
    values = ids.astype(np.uint32, copy=False)
    width = 1 + sum(int(ids.max() >= 1 << (7 * k)) for k in (1, 2, 3))
    num_bytes = np.ones(values.shape, np.uint8)
    for k in range(1, width):
        num_bytes += values >= (1 << (7 * k))
    groups = np.empty(values.shape + (width,), np.uint8)
    for k in range(width):
        group = ((values >> (7 * k)) & 0x7F).astype(np.uint8)
        if k < width - 1:
            group |= (num_bytes > k + 1).astype(np.uint8) << 7
        groups[..., k] = group
    keep = np.arange(width, dtype=np.uint8) < num_bytes[..., None]
    return groups[keep].tobytes(), num_bytes.sum(axis=1, dtype=np.int64)
