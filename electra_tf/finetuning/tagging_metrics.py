"""Entity (chunk) precision, recall and F1 as the CoNLL `conlleval` script computes them.

Chunks come from `conlleval`'s rules over each pair of neighbouring tags,
split into a prefix (`B`, `I`, `O`) and a type (`B-PER` → `B`, `PER`):

* a chunk starts at `B-X`, at `I-X` after `O`, and at any `B-`/`I-` whose
  type differs from the previous tag's type (`startOfChunk`);
* a chunk ends before `B-` or `O`, and before any tag whose type differs
  from its own (`endOfChunk`); sentence boundaries end every chunk.

These rules read IOB1 and IOB2 alike: in IOB2 every chunk begins with `B-`,
in IOB1 `B-` only separates adjacent chunks of the same type, and an `I-`
without a `B-` (IOB2's "error") simply starts a chunk, as in `conlleval`.
A predicted chunk is correct only if its start, end and type all equal a
gold chunk's. Scores are in percent: precision = correct / predicted,
recall = correct / gold, F1 their harmonic mean, each 0 when undefined;
token accuracy counts tags equal as strings. Per type, the same over the
chunks of that type (every type that occurs in gold or predictions).

Example: 3 gold chunks, 2 predicted, 1 of them correct.

>>> gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG"]]
>>> pred = [["B-PER", "I-PER", "O", "O"], ["B-LOC"]]
>>> chunks(gold[0])
[('PER', 0, 1), ('LOC', 3, 3)]
>>> scores = evaluate(gold, pred)
>>> round(scores.precision, 2), round(scores.recall, 2), round(scores.f1, 2), round(scores.accuracy, 2)
(50.0, 33.33, 40.0, 60.0)
>>> scores.per_type["PER"]
ChunkCounts(gold=1, predicted=1, correct=1)
>>> sorted(scores.as_dict())[:4]
['LOC_f1', 'LOC_precision', 'LOC_recall', 'ORG_f1']
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Sequence

OUTSIDE = "O"


def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type) of an IOB tag: `O` → ('O', ''), `B-X` → ('B', 'X'); anything else raises."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, _, chunk_type = tag.partition("-")
    if prefix not in ("B", "I") or not chunk_type:
        raise ValueError(f"tag {tag!r} is not IOB (O, B-TYPE or I-TYPE)")
    return prefix, chunk_type


def chunk_starts(previous: tuple[str, str], current: tuple[str, str]) -> bool:
    """`startOfChunk` for IOB: does a chunk start at `current`, given the tag before it?"""
    (prev_prefix, prev_type), (prefix, chunk_type) = previous, current
    if prefix == OUTSIDE:
        return False
    return prefix == "B" or prev_prefix == OUTSIDE or prev_type != chunk_type


def chunk_ends(previous: tuple[str, str], current: tuple[str, str]) -> bool:
    """`endOfChunk` for IOB: does a chunk end at `previous`, given the tag after it?"""
    (prev_prefix, prev_type), (prefix, chunk_type) = previous, current
    if prev_prefix == OUTSIDE:
        return False
    return prefix in ("B", OUTSIDE) or prev_type != chunk_type


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first index, last index) of each chunk of one sentence, in order."""
    found = []
    previous = (OUTSIDE, "")
    start = None
    for index, tag in enumerate(list(tags) + [OUTSIDE]):  # the trailing O is the sentence boundary
        current = split_tag(tag)
        if start is not None and chunk_ends(previous, current):
            found.append((previous[1], start, index - 1))
            start = None
        if chunk_starts(previous, current):
            start = index
        previous = current
    return found


@dataclasses.dataclass
class ChunkCounts:
    """Chunk counts of one type (or all): gold, predicted, and predicted ones that are correct."""

    gold: int = 0
    predicted: int = 0
    correct: int = 0

    @property
    def precision(self) -> float:
        return 100.0 * self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclasses.dataclass
class TaggingScores:
    """`conlleval`'s numbers: overall and per-type chunk counts, token counts."""

    overall: ChunkCounts
    per_type: dict[str, ChunkCounts]
    tokens: int
    correct_tags: int

    precision = property(lambda self: self.overall.precision)
    recall = property(lambda self: self.overall.recall)
    f1 = property(lambda self: self.overall.f1)

    @property
    def accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.tokens if self.tokens else 0.0

    def as_dict(self) -> dict[str, float]:
        """Flat scores in percent: precision, recall, f1, accuracy, and `<TYPE>_<score>` per type."""
        result = {"precision": self.precision, "recall": self.recall, "f1": self.f1, "accuracy": self.accuracy}
        for chunk_type, counts in sorted(self.per_type.items()):
            for name in ("precision", "recall", "f1"):
                result[f"{chunk_type}_{name}"] = getattr(counts, name)
        return result


def evaluate(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> TaggingScores:
    """Score predicted tag sequences against gold ones, sentence by sentence (equal lengths)."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(predicted)} predicted sentences for {len(gold)} gold sentences")
    per_type: dict[str, ChunkCounts] = collections.defaultdict(ChunkCounts)
    tokens = correct_tags = 0
    for index, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"sentence {index}: {len(predicted_tags)} predicted tags "
                             f"for {len(gold_tags)} gold tags")
        gold_chunks, predicted_chunks = set(chunks(gold_tags)), set(chunks(predicted_tags))
        for chunk in gold_chunks:
            per_type[chunk[0]].gold += 1
        for chunk in predicted_chunks:
            per_type[chunk[0]].predicted += 1
        for chunk in gold_chunks & predicted_chunks:
            per_type[chunk[0]].correct += 1
        tokens += len(gold_tags)
        correct_tags += sum(g == p for g, p in zip(gold_tags, predicted_tags))
    overall = ChunkCounts(*(sum(getattr(c, f) for c in per_type.values()) for f in ("gold", "predicted", "correct")))
    return TaggingScores(overall, dict(sorted(per_type.items())), tokens, correct_tags)
