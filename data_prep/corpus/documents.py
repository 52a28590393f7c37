"""Documents (lists of paragraphs) of one byte range, per input format (text, wikiextractor, jsonl)."""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable, Iterator

from data_prep.corpus.byte_ranges import ByteRange
from data_prep.corpus.cleaning import MAX_LINE_BYTES, cut_long_line, decode_lines
from data_prep.corpus.errors import CorpusError
from data_prep.corpus.inputs import JSONL, TEXT, WIKI, InputFile
from data_prep.corpus.lines import iter_line_blocks


class DocumentParser:
    """Turns decoded lines of one format into documents (lists of paragraphs).

    Feed it blocks with ``feed``; call ``finish`` at the end of a range.
    ``skipped`` counts JSON Lines records that were not valid JSON.
    """

    def __init__(self, path: str, fmt: str, text_field: str = "text"):
        self.path, self.format, self.text_field = path, fmt, text_field
        self.skipped = 0
        self._current: list[str] = []
        self._in_doc = False
        self._expect_title = False

    def feed(self, lines: list[str]) -> list[list[str]]:
        if self.format == TEXT:
            return self._feed_text(lines)
        if self.format == WIKI:
            return self._feed_wiki(lines)
        return self._feed_jsonl(lines)

    def finish(self) -> list[list[str]]:
        docs = [self._current] if self._current else []
        self._current, self._in_doc = [], False
        return docs

    def _feed_text(self, lines):
        docs, current = [], self._current
        for line in lines:
            line = line.strip()
            if line:
                current.append(line)
            elif current:
                docs.append(current)
                current = []
        self._current = current
        return docs

    def _feed_wiki(self, lines):
        docs, current = [], self._current
        for line in lines:
            line = line.strip()
            if line.startswith("<doc"):
                if current:
                    docs.append(current)
                current, self._in_doc, self._expect_title = [], True, True
            elif line == "</doc>":
                if current:
                    docs.append(current)
                current, self._in_doc = [], False
            elif not line or not self._in_doc:
                continue
            elif self._expect_title:
                self._expect_title = False
            else:
                current.append(line)
        self._current = current
        return docs

    def _feed_jsonl(self, lines):
        docs = []
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                self.skipped += 1
                continue
            if not isinstance(record, dict) or self.text_field not in record:
                keys = ", ".join(sorted(record)[:8]) if isinstance(record, dict) else type(record).__name__
                raise CorpusError(f"input {self.path}: a JSON Lines record has no "
                                  f"{self.text_field!r} field (has: {keys}); set --text_field")
            text = record[self.text_field]
            if not isinstance(text, str):
                raise CorpusError(f"input {self.path}: field {self.text_field!r} is "
                                  f"{type(text).__name__}, not a string")
            paragraphs = text_to_paragraphs(text)
            if paragraphs:
                docs.append(paragraphs)
        return docs


def text_to_paragraphs(text: str) -> list[str]:
    """Non-blank lines of a document string, long ones cut."""
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        if len(line) > MAX_LINE_BYTES:
            out.extend(p.decode("utf-8", "ignore").strip()
                       for p in cut_long_line(line.encode("utf-8", "ignore")))
        else:
            out.append(line)
    return out


@dataclasses.dataclass
class RangeStats:
    """What reading cost and cleaned: raw bytes, invalid lines dropped, NUL bytes deleted."""
    bytes_read: int = 0
    skipped_lines: int = 0
    nul_bytes: int = 0


def batched(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of ``size`` items (the last may be shorter)."""
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def iter_documents(file: InputFile, byte_range: ByteRange, stats: RangeStats,
                   text_field: str = "text") -> Iterator[list[list[str]]]:
    """Yield batches of documents of one byte range."""
    parser = DocumentParser(file.path, file.format, text_field)
    cut = file.format != JSONL
    for raw_lines, consumed, nuls in iter_line_blocks(file.path, byte_range.start, byte_range.end,
                                                      cut):
        lines, bad = decode_lines(file.path, raw_lines)
        stats.bytes_read += consumed
        stats.skipped_lines += bad
        stats.nul_bytes += nuls
        docs = parser.feed(lines)
        if docs:
            yield docs
    docs = parser.finish()
    stats.skipped_lines += parser.skipped
    if docs:
        yield docs
