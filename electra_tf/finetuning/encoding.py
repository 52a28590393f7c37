"""Sentence(-pair) features: `[CLS] a [SEP] (b [SEP])`, padded, the longer segment truncated first.

Example:

>>> a, b = [1, 2, 3, 4], [5, 6]
>>> truncate_pair(a, b, 4)
>>> a, b
([1, 2], [5, 6])
>>> class CharTokenizer:  # one id per character
...     pad_id, cls_id, sep_id = 0, 1, 2
...     def tokenize(self, texts):
...         return [[ord(c) for c in text] for text in texts]
>>> features = encode_pairs(CharTokenizer(), ["ab"], ["c"], max_seq_length=8)
>>> features["input_ids"].tolist(), features["segment_ids"].tolist()
([[1, 97, 98, 2, 99, 2, 0, 0]], [[0, 0, 0, 0, 1, 1, 0, 0]])
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def truncate_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """Official `_truncate_seq_pair`: pop from the longer list (b on ties) in place."""
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def encode_pairs(tokenizer, texts_a: Sequence[str], texts_b: Optional[Sequence[Optional[str]]],
                 max_seq_length: int) -> dict[str, np.ndarray]:
    """`[CLS] a [SEP] (b [SEP])` ids, mask and segment ids, int32 `[N, max_seq_length]`.

    Tokenisation is one batched call per segment.
    """
    n = len(texts_a)
    ids_a = tokenizer.tokenize(list(texts_a))
    has_b = texts_b is not None and any(t is not None for t in texts_b)
    ids_b = tokenizer.tokenize([t or "" for t in texts_b]) if has_b else [None] * n
    input_ids = np.full((n, max_seq_length), tokenizer.pad_id, np.int32)
    input_mask = np.zeros((n, max_seq_length), np.int32)
    segment_ids = np.zeros((n, max_seq_length), np.int32)
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    for i in range(n):
        a = list(ids_a[i])
        b = list(ids_b[i]) if (has_b and texts_b[i] is not None) else None
        if b is not None:
            truncate_pair(a, b, max_seq_length - 3)
            row = [cls] + a + [sep] + b + [sep]
            segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        else:
            a = a[:max_seq_length - 2]
            row = [cls] + a + [sep]
            segments = [0] * len(row)
        input_ids[i, :len(row)] = row
        input_mask[i, :len(row)] = 1
        segment_ids[i, :len(row)] = segments
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
