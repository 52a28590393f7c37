"""Integrity checks of a pre-training data directory's shards (no TensorFlow needed).

``verify_shards(data_dir)`` checks every shard the manifest lists: it exists,
its size and SHA-256 equal what the manifest (``shard_size_bytes``,
``shard_sha256``) or the shard's ``<shard>.done.json`` sidecar records, every
TFRecord record's framing is intact and the record count equals
``examples_per_shard``.  It returns a list of ``Problem``; empty means the
data is sound.  ``python -m data_prep.inspect_shards --verify DIR`` prints
them; training uses ``check_shard_sizes`` (cheap, before the first step; under
``--skip_corrupt_records`` a truncated shard passes it and its lost records are counted) and
``find_corrupt_records`` (after a ``DataLossError``).

TFRecord framing, per record: ``uint64`` length (little-endian), ``uint32``
masked CRC-32C of those 8 bytes, ``length`` data bytes, ``uint32`` masked
CRC-32C of the data.  The mask is ``((crc >> 15) | (crc << 17)) + 0xa282ead8``
modulo 2**32, as TensorFlow writes it.

Example:

>>> hex(crc32c(b"123456789"))
'0xe3069283'
>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> verify_shards(d)[0].what
'no manifest.json (an unfinished or missing build?)'
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from typing import Iterator, Optional

from electra_tf.text.manifest import MANIFEST_NAME, eval_view, sha256_file

_CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected


def _make_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC32C_POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _make_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``crc``."""
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TensorFlow's masked CRC-32C, as stored in TFRecord framing."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a data directory: ``path``, ``what``, and where in the file if known."""

    path: str
    what: str
    record: Optional[int] = None  # index of the record (0-based) where the problem is
    offset: Optional[int] = None  # byte offset of that record's header

    def __str__(self) -> str:
        where = []
        if self.record is not None:
            where.append(f"record {self.record}")
        if self.offset is not None:
            where.append(f"byte offset {self.offset}")
        return f"{self.path}: {', '.join(where) + ': ' if where else ''}{self.what}"


def scan_records(path: str, chunk_size: int = 1 << 20) -> tuple[int, list[Problem]]:
    """``(number of intact records, problems)`` of a TFRecord file, reading its framing.

    Reading stops at the first broken length header (what follows cannot be
    framed); a data CRC mismatch is reported and reading goes on.
    """
    problems: list[Problem] = []
    count = 0
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        offset = 0
        while offset < size:
            header = f.read(12)
            if len(header) < 12:
                problems.append(Problem(path, f"truncated record header ({len(header)} of 12 bytes)", count, offset))
                break
            (length,), (length_crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if masked_crc32c(header[:8]) != length_crc:
                problems.append(Problem(path, "length CRC mismatch (corrupt record header)", count, offset))
                break
            if offset + 12 + length + 4 > size:
                problems.append(Problem(path, f"truncated record: {length} data bytes announced, "
                                              f"{max(0, size - offset - 16)} present", count, offset))
                break
            crc, left = 0, length
            while left:
                chunk = f.read(min(left, chunk_size))
                crc = crc32c(chunk, crc)
                left -= len(chunk)
            (data_crc,) = struct.unpack("<I", f.read(4))
            masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
            if masked != data_crc:
                problems.append(Problem(path, "data CRC mismatch (corrupt record)", count, offset))
            else:
                count += 1
            offset += 12 + length + 4
    return count, problems


def _read_manifest(data_dir: str) -> tuple[Optional[dict], list[Problem]]:
    path = os.path.join(data_dir, MANIFEST_NAME)
    if not os.path.isfile(path):
        return None, [Problem(path, "no manifest.json (an unfinished or missing build?)")]
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        return None, [Problem(path, f"not readable JSON ({e})")]
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list):
        return None, [Problem(path, "not a manifest (no list of shards)")]
    return manifest, []


def _sidecar(shard_path: str) -> dict:
    try:
        with open(shard_path + ".done.json", encoding="utf-8") as f:
            record = json.load(f)
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}


def _recorded(manifest: dict, key: str, index: int):
    values = manifest.get(key)
    return values[index] if isinstance(values, list) and index < len(values) else None


def recorded_shard(data_dir: str, manifest: dict, index: int) -> dict:
    """What the build recorded of shard ``index``: ``size_bytes``, ``sha256``, ``num_examples`` (None if not)."""
    side = None

    def sidecar():
        nonlocal side
        if side is None:
            side = _sidecar(os.path.join(data_dir, manifest["shards"][index]))
        return side

    size = _recorded(manifest, "shard_size_bytes", index)
    sha = _recorded(manifest, "shard_sha256", index)
    return {"size_bytes": size if size is not None else sidecar().get("size_bytes"),
            "sha256": sha if sha is not None else sidecar().get("sha256"),
            "num_examples": _recorded(manifest, "examples_per_shard", index)}


def verify_shards(data_dir: str, records: bool = True) -> list[Problem]:
    """Every problem of the shards ``data_dir``'s manifest lists (see the module docstring).

    ``records=False`` skips the SHA-256 and the record scan (size checks only).
    """
    manifest, problems = _read_manifest(data_dir)
    if manifest is None:
        return problems
    views = [manifest] + ([eval_view(manifest)] if isinstance(manifest.get("eval_shards"), list) else [])
    for view in views:
        problems.extend(_shard_problems(data_dir, view, records))
    return problems


def _shard_problems(data_dir: str, manifest: dict, records: bool) -> list[Problem]:
    """The problems of the shards `manifest` lists (the training shards, or the held-out ones of `eval_view`)."""
    problems = []
    for index, name in enumerate(manifest["shards"]):
        path = os.path.join(data_dir, name)
        if not os.path.isfile(path):
            problems.append(Problem(path, "missing"))
            continue
        expected = recorded_shard(data_dir, manifest, index)
        size = os.path.getsize(path)
        if expected["size_bytes"] is not None and size != expected["size_bytes"]:
            problems.append(Problem(path, f"size {size} bytes, the build recorded {expected['size_bytes']}"))
        if not records:
            continue
        if expected["sha256"] is not None and sha256_file(path) != expected["sha256"]:
            problems.append(Problem(path, "sha256 differs from the one the build recorded"))
        count, framing = scan_records(path)
        problems.extend(framing)
        if not framing and expected["num_examples"] is not None and count != expected["num_examples"]:
            problems.append(Problem(path, f"{count} records, the manifest records {expected['num_examples']}"))
    return problems


def check_shard_sizes(data_dir: str, manifest: dict, allow_truncated: bool = False) -> list[str]:
    """Raises ValueError naming the first shard that is missing or not the size its build recorded.

    With ``allow_truncated`` (``--skip_corrupt_records``) a shard shorter than recorded is no error:
    the reader loses its records past the cut, which the run counts; the returned lines name each such
    shard. Shards with no recorded size (older builds) are not checked.
    """
    import tensorflow as tf

    truncated = []
    for index, name in enumerate(manifest["shards"]):
        expected = recorded_shard(data_dir, manifest, index)["size_bytes"]
        if expected is None:
            continue
        path = os.path.join(data_dir, name)
        try:
            actual = tf.io.gfile.stat(path).length
        except tf.errors.NotFoundError:
            actual = None
        if actual == expected:
            continue
        if allow_truncated and actual is not None and actual < expected:
            truncated.append(f"shard {path} has {actual} bytes, the build recorded {expected} bytes (truncated?): "
                             "--skip_corrupt_records: its records past the cut are not read, and are counted")
            continue
        what = "is missing" if actual is None else f"has {actual} bytes"
        raise ValueError(
            f"shard {path} {what}, the build recorded {expected} bytes (truncated or replaced?): rebuild it "
            f"with `python -m data_prep.build_pretraining_dataset` (same flags; complete shards are kept) or "
            f"see `python -m data_prep.inspect_shards --verify {data_dir}`")
    return truncated


def find_corrupt_records(data_dir: str, manifest: dict) -> Iterator[Problem]:
    """The framing problems of the manifest's shards, shard by shard (for a failure path: it reads everything)."""
    for name in manifest["shards"]:
        path = os.path.join(data_dir, name)
        if os.path.isfile(path):
            yield from scan_records(path)[1]
        else:
            yield Problem(path, "missing")
