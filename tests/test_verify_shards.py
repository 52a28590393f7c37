"""`electra_tf.text.verify` and `python -m data_prep.inspect_shards --verify`: sizes, sha256, record CRCs, counts."""

import json
import os
import random
import struct
import subprocess
import sys

import pytest
import tensorflow as tf

from electra_tf.text.verify import crc32c, masked_crc32c, scan_records, verify_shards
from pretrain_testutil import write_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def verify_cli(data_dir):
    return subprocess.run([sys.executable, "-m", "data_prep.inspect_shards", "--verify", data_dir], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def test_crc32c_known_values():
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c(b"\x00" * 32) == 0x8A9136AA  # RFC 3720 B.4
    assert crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")


def test_the_framing_matches_what_tensorflow_writes(tmp_path):
    path = str(tmp_path / "records")
    rng = random.Random(0)
    payloads = [bytes(rng.randrange(256) for _ in range(n)) for n in (0, 1, 7, 300, 5000)]
    with tf.io.TFRecordWriter(path) as writer:
        for payload in payloads:
            writer.write(payload)
    with open(path, "rb") as f:
        raw = f.read()
    offset = 0
    for payload in payloads:
        header = raw[offset:offset + 8]
        assert struct.unpack("<Q", header)[0] == len(payload)
        assert struct.unpack("<I", raw[offset + 8:offset + 12])[0] == masked_crc32c(header)
        end = offset + 12 + len(payload)
        assert raw[offset + 12:end] == payload
        assert struct.unpack("<I", raw[end:end + 4])[0] == masked_crc32c(payload)
        offset = end + 4
    assert scan_records(path) == (len(payloads), [])


@pytest.fixture
def data_dir(tmp_path):
    path = str(tmp_path / "data")
    write_shards(path, num_examples=24, num_shards=3)
    return path


def shard(data_dir, index):
    with open(os.path.join(data_dir, "manifest.json")) as f:
        return os.path.join(data_dir, json.load(f)["shards"][index])


def record_offsets(path):
    offsets, offset, size = [], 0, os.path.getsize(path)
    with open(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            offsets.append(offset)
            offset += 16 + struct.unpack("<Q", f.read(8))[0]
    return offsets


def test_sound_data_has_no_problems_and_the_cli_exits_0(data_dir):
    assert verify_shards(data_dir) == []
    result = verify_cli(data_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == f"verify {data_dir}: 3 shard(s) OK"


def test_a_corrupt_record_is_named_with_its_index_and_offset(data_dir):
    path = shard(data_dir, 1)
    offsets = record_offsets(path)
    with open(path, "r+b") as f:  # the size stays; the data of record 3 changes
        f.seek(offsets[3] + 20)
        f.write(b"\xff" * 64)
    problems = verify_shards(data_dir)
    assert [str(p) for p in problems] == [
        f"{path}: sha256 differs from the one the build recorded",
        f"{path}: record 3, byte offset {offsets[3]}: data CRC mismatch (corrupt record)",
    ]
    result = verify_cli(data_dir)
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert lines[:2] == [str(p) for p in problems]
    assert lines[2].startswith(f"verify {data_dir}: 2 problem(s) in 1 file(s) of 3 shard(s); rebuild")


def test_a_truncated_a_missing_and_a_short_shard(data_dir):
    truncated, missing = shard(data_dir, 0), shard(data_dir, 2)
    offsets = record_offsets(truncated)
    size = os.path.getsize(truncated)
    with open(truncated, "r+b") as f:
        f.truncate(offsets[-1] + 30)  # inside the last record's data
    os.unlink(missing)
    last_length = size - offsets[-1] - 16
    problems = [str(p) for p in verify_shards(data_dir)]
    assert problems == [
        f"{truncated}: size {offsets[-1] + 30} bytes, the build recorded {size}",
        f"{truncated}: sha256 differs from the one the build recorded",
        f"{truncated}: record {len(offsets) - 1}, byte offset {offsets[-1]}: truncated record: "
        f"{last_length} data bytes announced, 14 present",
        f"{missing}: missing",
    ]
    assert verify_cli(data_dir).returncode == 1


def test_a_count_mismatch_and_an_unrecorded_build(tmp_path):
    path = str(tmp_path / "old")
    write_shards(path, num_examples=8, num_shards=1, record_shards=False)
    assert verify_shards(path) == []  # nothing recorded: only the framing and the count are checked
    manifest_path = os.path.join(path, "manifest.json")
    with open(manifest_path) as f:
        manifest = json.load(f)
    manifest["examples_per_shard"] = [9]
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    assert [str(p) for p in verify_shards(path)] == [
        f"{os.path.join(path, manifest['shards'][0])}: 8 records, the manifest records 9"]


def test_no_manifest(tmp_path):
    result = verify_cli(str(tmp_path))
    assert result.returncode == 1
    assert "manifest.json: no manifest.json" in result.stdout
