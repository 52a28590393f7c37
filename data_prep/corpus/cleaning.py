"""Cleaning while reading (the package docstring states the policies): NUL bytes deleted, very long lines
cut, invalid UTF-8 lines dropped and counted."""

from __future__ import annotations

from data_prep.corpus.errors import CorpusError

MAX_LINE_BYTES = 256 * 1024
BINARY_LINE_FRACTION = 0.2
NUL = b"\x00"


def remove_nuls(data: bytes) -> tuple[bytes, int]:
    """``data`` without NUL bytes and how many there were."""
    if NUL not in data:  # memchr: the common case costs almost nothing
        return data, 0
    count = data.count(NUL)
    return data.replace(NUL, b""), count


def cut_long_line(line: bytes, limit: int = MAX_LINE_BYTES) -> list[bytes]:
    """Pieces of at most ``limit`` bytes, cut at spaces or character boundaries."""
    pieces = []
    while len(line) > limit:
        cut = line.rfind(b" ", limit // 2, limit)
        if cut <= 0:
            cut = limit
            while cut > 0 and 0x80 <= line[cut] < 0xC0:  # UTF-8 continuation byte
                cut -= 1
            cut = cut or limit
        pieces.append(line[:cut])
        line = line[cut:]
    pieces.append(line)
    return pieces


def decode_lines(path: str, lines: list[bytes]) -> tuple[list[str], int]:
    """Decode UTF-8 lines, dropping (and counting) invalid ones."""
    if not lines:
        return [], 0
    try:
        return b"\n".join(lines).decode("utf-8").split("\n"), 0
    except UnicodeDecodeError:
        pass
    decoded, bad = [], 0
    for line in lines:
        try:
            decoded.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            bad += 1
    if bad >= 10 and bad > BINARY_LINE_FRACTION * len(lines):
        raise CorpusError(f"input {path}: looks like a binary file ({bad} of {len(lines)} lines "
                          "in a block are not valid UTF-8)")
    return decoded, bad
