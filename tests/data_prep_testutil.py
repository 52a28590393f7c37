"""Shared helpers for the data_prep tests: tiny vocabularies and corpora.

Example:

>>> from tests.data_prep_testutil import TINY_VOCAB
>>> TINY_VOCAB[:5]
['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
EN_VOCAB = SHARED_DATA / "vocab" / "en_uncased" / "vocab.txt"
ZH_VOCAB = SHARED_DATA / "vocab" / "zh" / "vocab.txt"
ENWIKI_DIR = SHARED_DATA / "pretrain" / "enwiki" / "AA"
ZHWIKI_FILE = SHARED_DATA / "chinese" / "zhwiki" / "AA" / "wiki_00"

requires_shared_data = pytest.mark.skipif(
    not SHARED_DATA.is_dir(),
    reason=f"shared data directory {SHARED_DATA} is absent (real-data tests need it)")

# Specials first, but [UNK] deliberately NOT at BERT's index 100.
TINY_VOCAB = list(dict.fromkeys(
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + list(".,!?;:'\"()-")
    + ["the", "cat", "sat", "on", "mat", "dog", "ran", "a", "an", "and", "is", "it",
       "he", "llo", "hello", "world", "wor", "##ld", "##s", "##ed", "##ing", "##e",
       "un", "##aff", "##able", "cafe", "naive", "resume", "##r", "##un",
       "中", "国", "人", "文", "学", "我", "爱", "的", "是", "。", "，"]
    + list("abcdefghijklmnopqrstuvwxyz")
    + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
))


def write_vocab(directory: Path, tokens=TINY_VOCAB, name: str = "vocab.txt") -> Path:
    """Write tokens one per line; return the path."""
    path = Path(directory) / name
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def write_text(path: Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def run_module(module: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` from the repo root; capture output."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def read_examples(data_dir: Path) -> list[dict]:
    """All examples of all shards (in shard order) as dicts of int lists."""
    import tensorflow as tf
    from electra_tf.text.manifest import load_manifest
    manifest = load_manifest(str(data_dir))
    out = []
    for shard in manifest["shards"]:
        for record in tf.data.TFRecordDataset(str(Path(data_dir) / shard)):
            example = tf.train.Example.FromString(record.numpy())
            out.append({k: list(v.int64_list.value) for k, v in example.features.feature.items()})
    return out


def build_options(tmp_path: Path, inputs, name: str, num_shards: int, **overrides):
    """`BuildOptions` over `inputs` into `tmp_path/name` with the tiny vocab (written once), seq 24."""
    from data_prep.plan import BuildOptions
    vocab = tmp_path / "vocab.txt"
    if not vocab.exists():
        write_vocab(tmp_path)
    values = dict(inputs=",".join(str(p) for p in inputs), output_dir=str(tmp_path / name),
                  vocab_file=str(vocab), max_seq_length=24, num_shards=num_shards)
    values.update(overrides)
    return BuildOptions(**values)
