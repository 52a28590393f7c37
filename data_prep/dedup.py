"""Exact-duplicate document removal (``--dedup_documents``): one rule for both engines.

A document's key is the BLAKE2b-128 hash of its text as ``electra_tf.text.held_out.document_text``
joins it.  Of the documents that share a key, the first in (shard, position) order is kept and the
others are dropped; ``position`` counts the documents of a shard in reading order (blank ones
included, they are never keys).  The pool engine applies the rule with an in-memory pass
(``duplicate_positions``); the Beam engine groups the same ``(key, (shard, position))`` pairs by
key and drops ``later_occurrences`` of each: both call the functions below, so both drop the same
documents.

Example:

>>> from data_prep.dedup import document_key, duplicate_positions
>>> document_key(["a b."]) == document_key(["a b."]), document_key(["a b."]) == document_key(["a", "b."])
(True, False)
>>> duplicate_positions([(1, [b"x", b"y"]), (0, [b"y", None, b"y"])])
{0: frozenset({2}), 1: frozenset({1})}
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Iterable, Optional, Sequence

from electra_tf.text.held_out import document_text

from data_prep.plan import DEDUP_RULE  # noqa: F401  (the rule's name, in the plan's fingerprint)


def document_key(paragraphs: Sequence[str]) -> Optional[bytes]:
    """The document's dedup key, or None for a blank document (nothing to deduplicate)."""
    text = document_text(paragraphs)
    if not text.strip():
        return None
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def shard_document_keys(plan, shard: int) -> list[Optional[bytes]]:
    """The keys of shard ``shard``'s documents, in reading order (index = position)."""
    from data_prep.corpus.documents import RangeStats
    from data_prep.shard_writer import iter_shard_documents
    return [document_key(doc) for docs in iter_shard_documents(plan, shard, RangeStats()) for doc in docs]


def later_occurrences(places: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """All but the first ``(shard, position)`` of one key: the copies to drop."""
    return sorted(places)[1:]


def duplicate_positions(shard_keys: Iterable[tuple[int, Sequence[Optional[bytes]]]]) -> dict[int, frozenset]:
    """``{shard: positions to drop}`` from ``(shard, keys)`` pairs (any order); shards without duplicates absent."""
    places = defaultdict(list)
    for shard, keys in shard_keys:
        for position, key in enumerate(keys):
            if key is not None:
                places[key].append((shard, position))
    drops = defaultdict(set)
    for occurrences in places.values():
        for shard, position in later_occurrences(occurrences):
            drops[shard].add(position)
    return {shard: frozenset(positions) for shard, positions in sorted(drops.items())}
