"""Reading pre-training corpora: input discovery, formats, shard plans, documents.

Formats (``--input_format``, ``auto`` detects them per file):

* ``text``: one sentence or paragraph per line, a blank line ends a document.
* ``wikiextractor``: ``<doc ...>`` ... ``</doc>`` blocks; the title line right
  after ``<doc>`` is dropped, documents with no text after it (stubs) are
  skipped.
* ``jsonl``: one JSON object per line, the document is its ``--text_field``
  (newlines inside it separate paragraphs).

Any of them may be ``.gz`` or ``.bz2`` compressed.

Policies (decided here, documented in docs/data_prep.md):

* **Invalid UTF-8**: a line that is not valid UTF-8 is skipped and counted
  (``num_skipped_lines`` in the manifest); the same for a JSON Lines line that
  is not valid JSON.  A file in which more than 20 % of the lines of a block
  are invalid is rejected as binary.
* **NUL bytes**: a text file with stray NUL (``\\x00``) bytes is cleaned, not
  rejected: every NUL byte is deleted while reading (UTF-8 never uses the
  byte 0 inside a character, so this cannot break one) and counted
  (``num_nul_bytes_removed`` in the manifest and the build's last line).
  BERT's tokenizer deletes NUL characters anyway, so the ids are those of the
  text without them.  A file is rejected as binary when NUL bytes make up
  more than 1 % (``BINARY_NUL_FRACTION``) of its first 64 KiB (and number
  more than ``MAX_STRAY_NULS``, so that a tiny file may hold a few): UTF-16
  text, images, archives and executables are far above that, text with a
  stray NUL far below.
* **Very long lines**: lines longer than ``MAX_LINE_BYTES`` (256 KiB) are cut
  into pieces at the last space before the limit (or at a character boundary
  if there is none), each piece acting as a paragraph of the same document.
  Memory and time stay bounded for a 10 MB single-line file; the text is not
  lost (a sentence longer than ``max_seq_length`` tokens is truncated by the
  packer anyway, as in the official code).  JSON Lines records are never cut;
  one larger than 64 MiB is rejected.
* **Sentence splitting** (``split_sentences``) is a regex: a break after
  ``.``, ``!`` or ``?`` (plus closing quotes/brackets) followed by whitespace
  and an upper-case letter, digit or opening quote; and after CJK ``。！？``
  (plus closing quotes).  Abbreviations such as "Dr. Smith" are split too;
  for ELECTRA this only moves a segment boundary.

Sharding: the inputs are concatenated (sorted order) into one virtual byte
stream which is cut into ``num_shards`` equal byte ranges; each cut is moved
forward to the next document boundary of its file (compressed files are never
cut).  A shard is thus a fixed list of ``(file, start, end)`` ranges that
depends only on the inputs and ``num_shards`` - not on the number of
processes - and can be re-read independently by any worker.

Example:

>>> from data_prep.corpus import split_sentences
>>> split_sentences("It rained. Then it stopped! 然后呢？好的。")
['It rained.', 'Then it stopped!', '然后呢？', '好的。']
"""

from __future__ import annotations

import bz2
import dataclasses
import glob
import gzip
import json
import os
import re
from typing import Iterable, Iterator, Optional

FORMATS = ("auto", "text", "wikiextractor", "jsonl")
TEXT, WIKI, JSONL = "text", "wikiextractor", "jsonl"
MAX_LINE_BYTES = 256 * 1024
MAX_JSON_LINE_BYTES = 64 << 20
BLOCK_BYTES = 4 << 20
SNIFF_BYTES = 64 * 1024
BINARY_LINE_FRACTION = 0.2
BINARY_NUL_FRACTION = 0.01
MAX_STRAY_NULS = 10  # up to this many NULs never make a file binary
NUL = b"\x00"
_COMPRESSED_SUFFIXES = (".gz", ".bz2")


class CorpusError(ValueError):
    """Bad input; the message is one line naming the file and the problem."""


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class InputFile:
    path: str
    size: int
    mtime_ns: int
    format: str

    @property
    def compressed(self) -> bool:
        return self.path.endswith(_COMPRESSED_SUFFIXES)

    def fingerprint(self) -> dict:
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns,
                "format": self.format}


def _files_under(directory: str, exclude: Optional[str]) -> list[str]:
    found = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and not (exclude and os.path.abspath(os.path.join(root, d)) == exclude))
        found.extend(os.path.join(root, n) for n in names if not n.startswith("."))
    return sorted(found)


def expand_inputs(spec: str, exclude_dir: Optional[str] = None) -> list[str]:
    """Absolute paths of the comma-separated files, globs and directories.

    Directories are walked recursively (hidden entries and ``exclude_dir``,
    normally the output directory, are skipped).
    """
    exclude = os.path.abspath(exclude_dir) if exclude_dir else None
    paths: list[str] = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        item = os.path.expanduser(item)
        if glob.has_magic(item):
            matches = sorted(p for p in glob.glob(item, recursive=True) if os.path.isfile(p))
            if not matches:
                raise CorpusError(f"input {item}: no file matches this pattern")
            paths.extend(matches)
        elif os.path.isdir(item):
            found = _files_under(item, exclude)
            if not found:
                raise CorpusError(f"input directory {item}: contains no files")
            paths.extend(found)
        elif os.path.isfile(item):
            paths.append(item)
        else:
            raise CorpusError(f"input path {item}: does not exist")
    if not paths:
        raise CorpusError("no input given: pass --input=FILE[,FILE|GLOB|DIR...] or --tfds_name")
    return list(dict.fromkeys(os.path.abspath(p) for p in paths))


def open_binary(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith(".bz2"):
        return bz2.open(path, "rb")
    return open(path, "rb")


def _read_head(path: str) -> bytes:
    try:
        with open_binary(path) as f:
            return f.read(SNIFF_BYTES)
    except (OSError, EOFError, ValueError) as e:
        raise CorpusError(f"input {path}: cannot be read ({e})") from None


def _invalid_line_count(lines: list[bytes]) -> int:
    bad = 0
    for line in lines:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            bad += 1
    return bad


def remove_nuls(data: bytes) -> tuple[bytes, int]:
    """``data`` without NUL bytes and how many there were."""
    if NUL not in data:  # memchr: the common case costs almost nothing
        return data, 0
    count = data.count(NUL)
    return data.replace(NUL, b""), count


def check_not_binary(path: str, head: bytes) -> bytes:
    """Reject a file whose first bytes ``head`` look binary; return them without NULs.

    Binary: NUL bytes are more than ``BINARY_NUL_FRACTION`` of ``head`` (and
    more than ``MAX_STRAY_NULS``), or many lines are not valid UTF-8.
    """
    size = len(head)
    head, nuls = remove_nuls(head)
    if nuls > max(MAX_STRAY_NULS, BINARY_NUL_FRACTION * size):
        raise CorpusError(f"input {path}: looks like a binary file ({nuls} NUL bytes in its first "
                          f"{size} bytes), not UTF-8 text")
    lines = head.split(b"\n")
    if size == SNIFF_BYTES and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut in the middle of a character
    bad = _invalid_line_count(lines)
    if bad and bad >= max(2, BINARY_LINE_FRACTION * len(lines)):
        raise CorpusError(f"input {path}: looks like a binary file ({bad} of the first "
                          f"{len(lines)} lines are not valid UTF-8)")
    return head


def detect_format(path: str, head: bytes) -> str:
    """Guess text / wikiextractor / jsonl from the name and the first bytes."""
    name = path
    for suffix in _COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return JSONL
    for line in head.split(b"\n"):
        line = line.strip()
        if not line:
            continue
        if line.startswith(b"<doc ") or line == b"<doc>":
            return WIKI
        if line.startswith(b"{"):
            try:
                if isinstance(json.loads(line), dict):
                    return JSONL
            except ValueError:
                pass
        return TEXT
    return TEXT


def inspect_inputs(paths: list[str], input_format: str = "auto") -> list[InputFile]:
    """Stat, sniff and classify each input; reject missing/binary/empty corpora."""
    if input_format not in FORMATS:
        raise CorpusError(f"--input_format={input_format}: must be one of {', '.join(FORMATS)}")
    files, empty = [], []
    for path in paths:
        stat = os.stat(path)
        head = check_not_binary(path, _read_head(path))
        if not head.strip():
            empty.append(path)
            if len(head) < SNIFF_BYTES:
                continue  # all whitespace: contributes nothing
        fmt = detect_format(path, head) if input_format == "auto" else input_format
        files.append(InputFile(path, stat.st_size, stat.st_mtime_ns, fmt))
    if not files:
        raise CorpusError(f"input {empty[0] if len(empty) == 1 else ', '.join(empty[:3])}: "
                          "is empty (no text to build examples from)")
    return files


# --------------------------------------------------------------------------
# Shard plan
# --------------------------------------------------------------------------

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
    with open(path, "rb") as f:
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


# --------------------------------------------------------------------------
# Reading lines
# --------------------------------------------------------------------------

def _cut_long_line(line: bytes, limit: int = MAX_LINE_BYTES) -> list[bytes]:
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


def iter_line_blocks(path: str, start: int = 0, end: Optional[int] = None,
                     cut_long_lines: bool = True) -> Iterator[tuple[list[bytes], int, int]]:
    """Yield (lines without '\\n', raw bytes consumed, NULs removed) for bytes [start, end).

    NUL bytes are deleted from the lines (see the module docstring).
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
                    pieces = _cut_long_line(pending)
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
                lines = [piece for line in lines for piece in _cut_long_line(line)]
            yield lines, consumed, nuls
        if pending:
            yield (_cut_long_line(pending) if cut_long_lines else [pending]), 0, 0


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


# --------------------------------------------------------------------------
# Documents
# --------------------------------------------------------------------------

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
                       for p in _cut_long_line(line.encode("utf-8", "ignore")))
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


# --------------------------------------------------------------------------
# Sentences
# --------------------------------------------------------------------------

_CLOSERS = "\"'\u201d\u2019\u00bb)\\]"
_LATIN_BREAK = re.compile(
    r"([.!?][" + _CLOSERS + r"]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9\u00c0-\u00d6\u00d8-\u00de"
    r"\u0391-\u03a9\u0410-\u042f\u3040-\u30ff\u4e00-\u9fff])")
_CJK_BREAK = re.compile("([\u3002\uff01\uff1f][\u201d\u2019\u300d\u300f\uff09)\"']*)\\s*")


def _break_after(pattern: re.Pattern, text: str) -> str:
    """Put a newline after each ``pattern`` match's group 1, dropping the rest.

    ``re.split`` with one capturing group plus a join is faster in CPython
    3.11 than ``re.sub`` with a ``\\1`` template (expanded in Python per match).
    """
    parts = pattern.split(text)
    if len(parts) == 1:
        return text
    return "\n".join([a + b for a, b in zip(parts[0::2], parts[1::2])] + [parts[-1]])


def split_sentences(paragraph: str) -> list[str]:
    """Regex sentence splitter (see the module docstring)."""
    text = _break_after(_LATIN_BREAK, paragraph)
    if not text.isascii():
        text = _break_after(_CJK_BREAK, text)
    return [s for s in text.split("\n") if s]


def document_sentences(paragraphs: list[str]) -> list[str]:
    """All sentences of a document, in order."""
    return split_sentences("\n".join(paragraphs))
