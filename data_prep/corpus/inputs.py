"""The inputs: files, globs and directories expanded, each file sniffed (binary files rejected) and its
format detected (``--input_format``)."""

from __future__ import annotations

import bz2
import dataclasses
import glob
import gzip
import json
import os
from typing import Optional

from data_prep import fs
from data_prep.corpus.cleaning import BINARY_LINE_FRACTION, remove_nuls
from data_prep.corpus.errors import CorpusError

FORMATS = ("auto", "text", "wikiextractor", "jsonl")
TEXT, WIKI, JSONL = "text", "wikiextractor", "jsonl"
SNIFF_BYTES = 64 * 1024
BINARY_NUL_FRACTION = 0.01
MAX_STRAY_NULS = 10  # up to this many NULs never make a file binary
_COMPRESSED_SUFFIXES = (".gz", ".bz2")


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
    exclude = os.path.abspath(exclude_dir) if exclude_dir and not fs.is_url(exclude_dir) else None
    paths: list[str] = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        if fs.is_url(item):
            paths.extend(_expand_url(item))
            continue
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
    return list(dict.fromkeys(p if fs.is_url(p) else os.path.abspath(p) for p in paths))


def _expand_url(item: str) -> list[str]:
    """``expand_inputs`` for one URL (``gs://bucket/dir``, ``gs://bucket/*.txt``), via ``tf.io.gfile``."""
    if glob.has_magic(item):
        found = fs.glob_url(item)
        if not found:
            raise CorpusError(f"input {item}: no file matches this pattern")
    elif fs.isdir_url(item):
        found = fs.files_under_url(item)
        if not found:
            raise CorpusError(f"input directory {item}: contains no files")
    elif fs.isfile_url(item):
        found = [item]
    else:
        raise CorpusError(f"input path {item}: does not exist")
    return found


def open_binary(path: str):
    """The input file's bytes, decompressed (.gz, .bz2); local paths or URLs (``tf.io.gfile``)."""
    source = fs.open_url(path) if fs.is_url(path) else path
    if path.endswith(".gz"):
        return gzip.open(source, "rb")
    if path.endswith(".bz2"):
        return bz2.open(source, "rb")
    return source if fs.is_url(path) else open(path, "rb")


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


def _stat(path: str) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


def inspect_inputs(paths: list[str], input_format: str = "auto") -> list[InputFile]:
    """Stat, sniff and classify each input; reject missing/binary/empty corpora."""
    if input_format not in FORMATS:
        raise CorpusError(f"--input_format={input_format}: must be one of {', '.join(FORMATS)}")
    files, empty = [], []
    for path in paths:
        size, mtime_ns = fs.stat_url(path) if fs.is_url(path) else _stat(path)
        head = check_not_binary(path, _read_head(path))
        if not head.strip():
            empty.append(path)
            if len(head) < SNIFF_BYTES:
                continue  # all whitespace: contributes nothing
        fmt = detect_format(path, head) if input_format == "auto" else input_format
        files.append(InputFile(path, size, mtime_ns, fmt))
    if not files:
        raise CorpusError(f"input {empty[0] if len(empty) == 1 else ', '.join(empty[:3])}: "
                          "is empty (no text to build examples from)")
    return files
