"""The shard plan's byte ranges: the inputs cut into ``num_shards`` lists of ``(file, start, end)`` ranges,
each cut moved forward to a document boundary (see the package docstring)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from data_prep.corpus.cleaning import MAX_LINE_BYTES
from data_prep.corpus.inputs import JSONL, TEXT, WIKI, InputFile, open_binary


@dataclasses.dataclass(frozen=True)
class ByteRange:
    """Bytes [start, end) of input ``file_index``; end None = to EOF."""
    file_index: int
    start: int
    end: Optional[int]


def find_split_point(path: str, offset: int, fmt: str) -> Optional[int]:
    """First document boundary at or after ``offset`` (None: none before EOF).

    text: just after a blank line; wikiextractor: the start of a ``<doc`` line;
    jsonl: the start of a line.
    """
    with open_binary(path) as f:  # never compressed: compressed files are not split
        if offset > 0:
            f.seek(offset - 1)
            _skip_to_line_end(f)
        position = f.tell()
        if fmt == JSONL:
            return position if f.read(1) else None
        at_line_start = True
        while True:
            line = f.readline(MAX_LINE_BYTES)
            if not line:
                return None
            if fmt == WIKI and at_line_start and line.startswith(b"<doc"):
                return position
            position += len(line)
            complete = line.endswith(b"\n")
            if fmt == TEXT and at_line_start and complete and not line.strip():
                return position
            at_line_start = complete


def _skip_to_line_end(f) -> None:
    while True:
        piece = f.readline(MAX_LINE_BYTES)
        if not piece or piece.endswith(b"\n"):
            return


def plan_byte_ranges(files: list[InputFile], num_shards: int) -> list[list[ByteRange]]:
    """Cut the concatenated inputs into ``num_shards`` lists of byte ranges."""
    total = sum(f.size for f in files)
    starts = []
    offset = 0
    for f in files:
        starts.append(offset)
        offset += f.size
    cuts = [0]
    for k in range(1, num_shards):
        target = max(cuts[-1], (total * k) // num_shards)
        cuts.append(_snap_cut(files, starts, target))
    cuts.append(total)
    shards = []
    for k in range(num_shards):
        shards.append(_ranges_between(files, starts, cuts[k], cuts[k + 1]))
    return shards


def _snap_cut(files, starts, target: int) -> int:
    """Move a virtual offset forward to a document boundary."""
    for index, f in enumerate(files):
        if starts[index] <= target < starts[index] + f.size:
            local = target - starts[index]
            if local == 0:
                return target
            if f.compressed:
                return starts[index] + f.size
            point = find_split_point(f.path, local, f.format)
            return starts[index] + (f.size if point is None else point)
    return target


def _ranges_between(files, starts, lo: int, hi: int) -> list[ByteRange]:
    ranges = []
    for index, f in enumerate(files):
        begin, end = starts[index], starts[index] + f.size
        if end <= lo or begin >= hi or f.size == 0:
            continue
        local_lo, local_hi = max(lo, begin) - begin, min(hi, end) - begin
        if f.compressed:
            if local_lo == 0:
                ranges.append(ByteRange(index, 0, None))
            continue
        ranges.append(ByteRange(index, local_lo, local_hi))
    return ranges
