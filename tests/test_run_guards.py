"""run_pretraining.py's guards: a corrupt record mid-run, one writer per --model_dir (run.lock)."""

import json
import os
import re
import socket
import struct
import subprocess

import pytest

from pretrain_testutil import write_shards
from test_preemption import ROOT, checkpoint_steps, cli_args, quiet_env


def record_offsets(path):
    offsets, offset, size = [], 0, os.path.getsize(path)
    with open(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            offsets.append(offset)
            offset += 16 + struct.unpack("<Q", f.read(8))[0]
    return offsets


def run_cli(data_dir, model_dir, steps, **flags):
    return subprocess.run(cli_args(data_dir, model_dir, steps, **flags), cwd=ROOT, env=quiet_env(),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=96, num_shards=3)
    return path


def test_a_corrupt_record_ends_the_run_with_one_line_naming_it_and_the_last_good_checkpoint(tmp_path):
    data = str(tmp_path / "data")
    manifest = write_shards(data, num_examples=96, num_shards=3)
    shard = os.path.join(data, manifest["shards"][2])
    offsets = record_offsets(shard)
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:  # the last record's data; the size stays, so the start-up check passes
        f.seek(offsets[-1] + 12 + 8)
        f.write(b"\xa5" * 64)
    assert os.path.getsize(shard) == size
    model_dir = str(tmp_path / "run")
    # No example shuffle: the corrupt record is read after 16 records of every shard, i.e. a few steps in.
    result = run_cli(data, model_dir, 40, shuffle_buffer=1, steps_per_loop=1, save_checkpoints_steps=2,
                     log_steps=1)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    saved = checkpoint_steps(model_dir)
    assert saved, result.stderr[-3000:]
    good = os.path.join(model_dir, "checkpoints", f"ckpt-{saved[-1]}")
    match = re.fullmatch(
        re.escape(f"run_pretraining.py: error: corrupt training data: {shard}: record {len(offsets) - 1}, "
                  f"byte offset {offsets[-1]}: data CRC mismatch (corrupt record); stopped at step ")
        + r"(\d+)" + re.escape(f", last good checkpoint: {good}. Check every shard with `python -m "
                               f"data_prep.inspect_shards --verify {data}`, delete the corrupt shard and its "
                               ".done.json and rebuild it with `python -m data_prep.build_pretraining_dataset` "
                               "(same flags), then re-run to resume"), last)
    assert match, last
    reached = int(match.group(1))
    assert saved[-1] <= reached < 40 and saved[-1] >= reached - 2  # every 2 steps until the error, none after
    names = os.listdir(os.path.join(model_dir, "checkpoints"))
    assert not [n for n in names if "tmp" in n], names  # nothing half-written
    assert not os.path.exists(os.path.join(model_dir, "export"))
