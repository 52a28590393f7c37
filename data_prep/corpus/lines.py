"""A byte range of an input read as lines, in blocks: NUL bytes deleted and very long lines cut on the way."""

from __future__ import annotations

from typing import Iterator, Optional

from data_prep.corpus.cleaning import MAX_LINE_BYTES, cut_long_line, remove_nuls
from data_prep.corpus.errors import CorpusError
from data_prep.corpus.inputs import open_binary

MAX_JSON_LINE_BYTES = 64 << 20
BLOCK_BYTES = 4 << 20


def iter_line_blocks(path: str, start: int = 0, end: Optional[int] = None,
                     cut_long_lines: bool = True) -> Iterator[tuple[list[bytes], int, int]]:
    """Yield (lines without '\\n', raw bytes consumed, NULs removed) for bytes [start, end).

    NUL bytes are deleted from the lines (see the package docstring).
    """
    with open_binary(path) as f:
        if start:
            f.seek(start)
        remaining = None if end is None else end - start
        pending = b""
        while remaining is None or remaining > 0:
            size = BLOCK_BYTES if remaining is None else min(BLOCK_BYTES, remaining)
            try:
                block = f.read(size)
            except (OSError, EOFError, ValueError) as e:
                raise CorpusError(f"input {path}: read error ({e})") from None
            if not block:
                break
            if remaining is not None:
                remaining -= len(block)
            consumed = len(block)
            block, nuls = remove_nuls(block)
            data = pending + block
            last_newline = data.rfind(b"\n")
            if last_newline < 0:
                pending = data
                if len(pending) > MAX_LINE_BYTES and cut_long_lines:
                    pieces = cut_long_line(pending)
                    pending = pieces.pop()
                    yield pieces, consumed, nuls
                elif len(pending) > MAX_JSON_LINE_BYTES:
                    raise CorpusError(f"input {path}: a line near byte {start} is longer than "
                                      f"{MAX_JSON_LINE_BYTES >> 20} MiB")
                else:
                    yield [], consumed, nuls
                continue
            pending = data[last_newline + 1:]
            lines = data[:last_newline].split(b"\n")
            if cut_long_lines and any(len(line) > MAX_LINE_BYTES for line in lines):
                lines = [piece for line in lines for piece in cut_long_line(line)]
            yield lines, consumed, nuls
        if pending:
            yield (cut_long_line(pending) if cut_long_lines else [pending]), 0, 0
