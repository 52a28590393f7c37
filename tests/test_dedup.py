"""--dedup_documents on the pool engine: the known copies go, the first of each stays.

(Both engines against each other: tests/test_beam_pipeline.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.builder import BuildOptions, make_plan, run_build
from data_prep.dedup import document_key, duplicate_positions, later_occurrences, shard_document_keys
from tests.data_prep_testutil import build_options, write_text, write_vocab

SHARD = "pretrain_data.tfrecord-00000-of-00001"
UNIQUE = [f"{w} cat sat on the mat. the dog ran {w}." for w in
          ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "it", "is", "hello"]]
# Copies: UNIQUE[0] twice more (once in each later file), UNIQUE[3] once more in file 0, UNIQUE[7] in file 2.
FILES = [UNIQUE[:5] + [UNIQUE[3], UNIQUE[0]], UNIQUE[5:9] + [UNIQUE[0]], UNIQUE[9:] + [UNIQUE[7]]]
NUM_COPIES = 4


def quiet(message: str) -> None:
    pass


def build(tmp_path: Path, inputs, name: str, num_processes: int = 1, **overrides) -> dict:
    options = build_options(tmp_path, inputs, name, **{"num_shards": 4, **overrides})
    return run_build(make_plan(options), num_processes=num_processes, log=quiet)


def corpus(tmp_path: Path) -> list[Path]:
    return [write_text(tmp_path / "in" / f"f{i}.txt", "\n\n".join(docs) + "\n") for i, docs in enumerate(FILES)]


def test_the_rule_keeps_the_first_in_shard_then_position_order():
    assert later_occurrences([(2, 0), (0, 7), (1, 3), (0, 9)]) == [(0, 9), (1, 3), (2, 0)]
    keys = {0: [b"a", b"b", b"a"], 1: [b"b", None, None], 2: [b"c", b"a"]}
    assert duplicate_positions(keys.items()) == {0: frozenset({2}), 1: frozenset({0}), 2: frozenset({1})}
    assert document_key(["  ", ""]) is None  # blank documents are never duplicates
    assert document_key(["x y"]) != document_key(["x", "y"])  # paragraphs joined by "\n", as held_out does


def test_the_pool_engine_drops_the_known_copies(tmp_path):
    inputs = corpus(tmp_path)
    plan = make_plan(BuildOptions(inputs=",".join(map(str, inputs)), output_dir=str(tmp_path / "p"),
                                  vocab_file=str(write_vocab(tmp_path)), num_shards=4))
    keys = [shard_document_keys(plan, shard) for shard in range(plan.num_shards)]
    assert sum(len(k) for k in keys) == len(UNIQUE) + NUM_COPIES
    deduped = build(tmp_path, inputs, "dedup", dedup_documents=True)
    assert deduped["num_duplicate_documents"] == NUM_COPIES and deduped["dedup_documents"] is True
    assert deduped["num_documents"] == len(UNIQUE)
    plain = build(tmp_path, inputs, "plain")
    assert plain["num_documents"] == len(UNIQUE) + NUM_COPIES
    assert "num_duplicate_documents" not in plain and "dedup_documents" not in plain
    assert plain["fingerprint"] != deduped["fingerprint"]
    sidecars = [json.loads(p.read_text()) for p in sorted((tmp_path / "dedup").glob("*.done.json"))]
    assert sum(s["num_duplicate_documents"] for s in sidecars) == NUM_COPIES
    assert not any("num_duplicate_documents" in json.loads(p.read_text())
                   for p in (tmp_path / "plain").glob("*.done.json"))


def test_dedup_equals_removing_the_copies_by_hand(tmp_path):
    """One shard over all documents: the dedup build's shard is the hand-deduplicated corpus's."""
    together = write_text(tmp_path / "a" / "all.txt", "\n\n".join(sum(FILES, [])) + "\n")
    by_hand = write_text(tmp_path / "b" / "all.txt", "\n\n".join(UNIQUE) + "\n")
    build(tmp_path, [together], "dedup", num_shards=1, dedup_documents=True)
    build(tmp_path, [by_hand], "reference", num_shards=1)
    assert (tmp_path / "dedup" / SHARD).read_bytes() == (tmp_path / "reference" / SHARD).read_bytes()


@pytest.mark.slow  # ~17 s: spawned workers import TensorFlow
def test_worker_processes_drop_the_same_documents(tmp_path):
    inputs = corpus(tmp_path)
    serial = build(tmp_path, inputs, "serial", dedup_documents=True, eval_fraction=0.3)
    parallel = build(tmp_path, inputs, "parallel", num_processes=2, dedup_documents=True, eval_fraction=0.3)
    for key in ("shard_sha256", "eval_shard_sha256", "num_duplicate_documents", "fingerprint"):
        assert serial[key] == parallel[key]
