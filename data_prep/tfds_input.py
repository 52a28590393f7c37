"""TFDS text datasets as builder input (``--tfds_name``; offline only).

The data must already be prepared in ``--tfds_data_dir`` (or be
``tfds.testing.mock_data``): this tool never downloads.  Each shard reads a
fixed ``[lo, hi)`` slice of the split (``(-1, -1)``: ``Dataset.shard`` when
the split size is unknown), so shards are independent of the parallelism.
Records are cleaned like files: NUL bytes removed and counted, records that
are not valid UTF-8 skipped and counted.

Example:

>>> from data_prep.tfds_input import slice_ranges
>>> slice_ranges(total=2500, num_shards=None, min_shards=8)
((0, 833), (833, 1666), (1666, 2500))
"""

from __future__ import annotations

import math
from typing import Optional

from data_prep.corpus.cleaning import remove_nuls
from data_prep.corpus.documents import RangeStats, batched, text_to_paragraphs
from data_prep.corpus.errors import CorpusError

BATCH_DOCUMENTS = 2000
EXAMPLES_PER_SHARD = 200_000


def tfds_builder(options):
    """The ``tfds`` builder of ``options.tfds_name`` (never downloads)."""
    import tensorflow_datasets as tfds
    try:
        return tfds.builder(options.tfds_name, data_dir=options.tfds_data_dir, try_gcs=False)
    except Exception as e:  # unknown name, bad config ...
        raise CorpusError(f"TFDS dataset {options.tfds_name}: {str(e).splitlines()[0]}") from None


def slice_ranges(total: int, num_shards: Optional[int], min_shards: int) -> tuple:
    """Per shard ``(lo, hi)`` example ranges covering ``total`` examples.

    Default count: one shard per 1000 examples up to ``min_shards``, and one
    per ``EXAMPLES_PER_SHARD`` beyond.
    """
    count = num_shards or max(min(min_shards, math.ceil(total / 1000)),
                              math.ceil(total / EXAMPLES_PER_SHARD), 1)
    return tuple(((total * k) // count, (total * (k + 1)) // count) for k in range(count))


def plan_tfds(options, min_shards: int) -> tuple:
    """Per shard (lo, hi) example ranges; (-1, -1) = use Dataset.shard()."""
    builder = tfds_builder(options)
    features = getattr(builder.info, "features", None)
    if features is not None and options.tfds_text_field not in features:
        raise CorpusError(f"TFDS dataset {options.tfds_name}: no feature {options.tfds_text_field!r} "
                          f"(has: {', '.join(features.keys())}); set --tfds_text_field")
    try:
        total = builder.info.splits[options.tfds_split].num_examples
    except Exception:
        total = None
    if not total:
        return tuple((-1, -1) for _ in range(options.num_shards or 1))
    return slice_ranges(total, options.num_shards, min_shards)


def iter_tfds_documents(plan, shard: int, stats: RangeStats):
    """Batches of documents (lists of paragraphs) of shard ``shard`` of ``plan``."""
    import tensorflow_datasets as tfds
    options = plan.options
    builder = tfds_builder(options)
    lo, hi = plan.shard_ranges[shard]
    try:
        if lo < 0:
            dataset = builder.as_dataset(split=options.tfds_split, shuffle_files=False)
            dataset = dataset.shard(plan.num_shards, shard)
        else:
            dataset = builder.as_dataset(split=f"{options.tfds_split}[{lo}:{hi}]",
                                         shuffle_files=False)
    except Exception as e:
        raise CorpusError(f"TFDS dataset {options.tfds_name} split {options.tfds_split}: "
                          f"{str(e).splitlines()[0]} (this tool never downloads: prepare the "
                          "data first)") from None
    yield from batched(_documents(tfds.as_numpy(dataset), options.tfds_text_field, stats), BATCH_DOCUMENTS)


def _documents(records, text_field: str, stats: RangeStats):
    """Documents (lists of paragraphs) of TFDS records; cleaning counted in ``stats``."""
    for record in records:
        raw = record[text_field]
        stats.bytes_read += len(raw)
        if isinstance(raw, bytes):
            raw, nuls = remove_nuls(raw)
            stats.nul_bytes += nuls
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        except UnicodeDecodeError:
            stats.skipped_lines += 1
            continue
        paragraphs = text_to_paragraphs(text)
        if paragraphs:
            yield paragraphs
