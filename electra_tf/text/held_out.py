"""Which documents are held out for evaluation: one rule for data_prep and the raw-text pipeline.

A document is held out when the FarmHash Fingerprint64 of its text (its paragraphs joined by
"\\n"), reduced to ``HASH_BUCKETS`` buckets by ``tf.strings.to_hash_bucket_fast``, falls below
``fraction * HASH_BUCKETS``.  The choice depends on the text alone (not on shards, seeds, engines
or re-runs), and it is one TensorFlow op, so ``data_prep`` (a batch of Python strings) and the
``--train_text`` tf.data pipeline (a string tensor inside a graph) compute the very same answer.

Example:

>>> from electra_tf.text.held_out import held_out_flags, document_text
>>> held_out_flags([document_text(["a b c."]), "x"], 0.0)
[False, False]
>>> held_out_flags(["x", "y"], 1.0)
[True, True]
"""

from __future__ import annotations

from typing import Sequence

HASH_BUCKETS = 1 << 62


def document_text(paragraphs: Sequence[str]) -> str:
    """The string whose hash decides a document (its paragraphs, one per line)."""
    return "\n".join(paragraphs)


def threshold(fraction: float) -> int:
    """Buckets below this number are held out (exact integer arithmetic in both paths)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"eval fraction {fraction} must be in [0, 1]")
    return int(fraction * HASH_BUCKETS)


def held_out_mask(texts, fraction: float):
    """A boolean tensor: which of the string tensor ``texts`` are held out (graph-safe)."""
    import tensorflow as tf
    buckets = tf.strings.to_hash_bucket_fast(texts, HASH_BUCKETS)
    return buckets < tf.constant(threshold(fraction), tf.int64)


def held_out_flags(texts: Sequence[str], fraction: float) -> list[bool]:
    """``held_out_mask`` for a batch of Python strings (one eager call per batch)."""
    if fraction <= 0 or not texts:
        return [False] * len(texts)
    import tensorflow as tf
    return held_out_mask(tf.constant(list(texts), tf.string), fraction).numpy().tolist()
