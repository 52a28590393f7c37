"""Tests for data_prep.packing: official ELECTRA packing, layout, serialisation."""

import random

import numpy as np
import pytest

from data_prep.packing import (ExampleBatch, ExamplePacker, ExampleSerializer, SpecialIds,
                               assemble)

CLS, SEP, PAD = 2, 3, 0


def official_pack(documents, max_length, rng, short_prob=0.05, single_prob=0.1):
    """A line-by-line transcription of ELECTRA's ExampleBuilder on token lists."""
    examples = []
    target = max_length
    for sentences in documents:
        current, current_length = [], 0
        for sentence in sentences + [None]:  # None = the blank line ending the document
            if sentence is None:
                if current_length == 0:
                    break
            else:
                current.append(sentence)
                current_length += len(sentence)
                if current_length < target:
                    continue
            first_target = 100000 if rng.random() < single_prob else (target - 3) // 2
            first, second = [], []
            for s in current:
                if (len(first) == 0 or len(first) + len(s) < first_target
                        or (len(second) == 0 and len(first) < first_target and rng.random() < 0.5)):
                    first += s
                else:
                    second += s
            first = first[:max_length - 2]
            second = second[:max(0, max_length - len(first) - 3)]
            current, current_length = [], 0
            target = rng.randint(5, max_length) if rng.random() < short_prob else max_length
            ids = [CLS] + first + [SEP]
            segments = [0] * len(ids)
            if second:
                ids += second + [SEP]
                segments += [1] * (len(second) + 1)
            mask = [1] * len(ids)
            pad = max_length - len(ids)
            examples.append((ids + [PAD] * pad, mask + [0] * pad, segments + [0] * pad))
    return examples


def random_documents(rng, count=300, vocab=1000):
    docs = []
    for _ in range(count):
        docs.append([[rng.randrange(5, vocab) for _ in range(rng.randint(0, 70))]
                     for _ in range(rng.randint(1, 25))])
    return docs


def pack_with_ours(documents, max_length, rng, **kwargs):
    flat, specs = [], []
    packer = ExamplePacker(max_length, rng, **kwargs)
    for sentences in documents:
        starts, lengths = [], []
        for s in sentences:
            starts.append(len(flat))
            lengths.append(len(s))
            flat.extend(s)
        specs.extend(packer.pack_document(starts, lengths))
    batch = assemble(np.array(flat, np.int32), specs, max_length, SpecialIds(CLS, SEP, PAD))
    return batch


@pytest.mark.parametrize("max_length,short,single", [(128, 0.05, 0.1), (32, 0.3, 0.5), (8, 0.0, 0.0)])
def test_packing_equals_official_algorithm(max_length, short, single):
    documents = random_documents(random.Random(7))
    expected = official_pack(documents, max_length, random.Random(1), short, single)
    batch = pack_with_ours(documents, max_length, random.Random(1), short_seq_prob=short,
                           single_segment_prob=single)
    assert len(expected) == len(batch.lengths) > 100
    assert batch.input_ids.tolist() == [e[0] for e in expected]
    assert batch.input_mask.tolist() == [e[1] for e in expected]
    assert batch.segment_ids.tolist() == [e[2] for e in expected]


def test_layout_invariants():
    documents = random_documents(random.Random(3), count=400)
    batch = pack_with_ours(documents, 64, random.Random(2))
    for ids, mask, seg, length in zip(*batch):
        assert 3 <= length <= 64 and mask.sum() == length
        assert mask[:length].all() and not mask[length:].any()
        assert ids[0] == CLS and (ids[length:] == PAD).all()
        seps = np.flatnonzero(ids[:length] == SEP)
        assert seps[-1] == length - 1 and len(seps) in (1, 2)
        if len(seps) == 2:   # [CLS] A [SEP] B [SEP]
            assert not seg[:seps[0] + 1].any() and seg[seps[0] + 1:length].all()
        else:                # [CLS] A [SEP]
            assert not seg.any()
        assert not seg[length:].any()


def test_single_segment_probability_is_about_ten_percent():
    rng = random.Random(5)
    # Many short sentences per document: two segments are always possible.
    documents = [[[rng.randrange(5, 100) for _ in range(10)] for _ in range(60)]
                 for _ in range(300)]
    batch = pack_with_ours(documents, 128, random.Random(0), short_seq_prob=0.0)
    full = batch.lengths == 128
    single = batch.segment_ids.max(axis=1) == 0
    share = single[full].mean()
    assert full.sum() > 1000
    assert 0.07 < share < 0.13, share


def test_short_targets_make_shorter_examples():
    rng = random.Random(9)
    documents = [[[rng.randrange(5, 100) for _ in range(6)] for _ in range(400)] for _ in range(20)]
    plain = pack_with_ours(documents, 128, random.Random(0), short_seq_prob=0.0)
    short = pack_with_ours(documents, 128, random.Random(0), short_seq_prob=0.5)
    assert np.median(short.lengths) < np.median(plain.lengths)
    assert short.lengths.min() >= 5


def test_documents_never_share_an_example():
    # Each document uses its own id range, so an example must hold one range only.
    documents = [[[1000 * (d + 1) + (i % 50) for i in range(j, j + 13)] for j in range(7)]
                 for d in range(40)]
    batch = pack_with_ours(documents, 64, random.Random(4))
    for ids, length in zip(batch.input_ids, batch.lengths):
        text = ids[1:length][ids[1:length] >= 1000]
        assert len(set((text // 1000).tolist())) == 1


def test_packer_rejects_tiny_length():
    with pytest.raises(ValueError):
        ExamplePacker(4, random.Random(0))


def test_serializer_matches_protobuf_byte_for_byte():
    import tensorflow as tf
    rng = np.random.default_rng(0)
    for length, high in [(16, 100), (128, 30522), (64, 1 << 27)]:
        ids = rng.integers(0, high, size=(50, length)).astype(np.int32)
        mask = (rng.random((50, length)) < 0.8).astype(np.uint8)
        seg = (rng.random((50, length)) < 0.3).astype(np.uint8)
        records = ExampleSerializer(length).serialize(ExampleBatch(ids, mask, seg, None))
        for i, record in enumerate(records):
            example = tf.train.Example(features=tf.train.Features(feature={
                name: tf.train.Feature(int64_list=tf.train.Int64List(value=values[i].tolist()))
                for name, values in (("input_ids", ids), ("input_mask", mask), ("segment_ids", seg))}))
            assert record == example.SerializeToString(deterministic=True)


def test_serializer_rejects_out_of_range_ids():
    ids = np.array([[1 << 28]], np.int64)
    with pytest.raises(ValueError):
        ExampleSerializer(1).serialize(ExampleBatch(ids, np.ones_like(ids), np.zeros_like(ids), None))
