"""End-to-end tests of data_prep.build_pretraining_dataset on tiny corpora."""

import bz2
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from data_prep.builder import BuildOptions, make_plan, run_build
from data_prep.corpus.errors import CorpusError
from data_prep.corpus.sentences import split_sentences
from electra_tf.text.manifest import FEATURE_NAMES, FORMAT_VERSION, load_manifest, validate_manifest
from electra_tf.text.reference_tokenizer import BasicTokenizer, ReferenceTokenizer

try:
    from tests.data_prep_testutil import (REPO_ROOT, TINY_VOCAB, read_examples, run_module,
                                          write_text, write_vocab)
except ImportError:  # tests/ is not a package
    from data_prep_testutil import (REPO_ROOT, TINY_VOCAB, read_examples, run_module, write_text,
                                    write_vocab)

QUIET = lambda message: None  # noqa: E731

ONE_LINE_DOCS = [
    "The cat sat on the mat, and the dog ran!",
    "Hello World; unaffable cafés run",
    "我爱中国。中国人，文学的是",
    "mixed 中文 and ENGLISH words: naïve résumé zebra",
    "an unknown glyph ☃ and a rare word qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq",
]


def build(tmp_path, inputs, name="out", log=QUIET, **overrides):
    options = dict(inputs=str(inputs), output_dir=str(tmp_path / name),
                   vocab_file=str(write_vocab(tmp_path)), max_seq_length=64, num_shards=1)
    options.update(overrides)
    plan = make_plan(BuildOptions(**options))
    return plan, run_build(plan, num_processes=1, log=log)


def shard_bytes(directory):
    manifest = load_manifest(str(directory))
    return [(Path(directory) / s).read_bytes() for s in manifest["shards"]]


def test_round_trip_ids_and_text(tmp_path):
    corpus = write_text(tmp_path / "c.txt", "\n\n".join(ONE_LINE_DOCS) + "\n")
    plan, manifest = build(tmp_path, corpus)
    examples = read_examples(tmp_path / "out")
    reference = ReferenceTokenizer(TINY_VOCAB)
    basic = BasicTokenizer()
    unk = TINY_VOCAB.index("[UNK]")
    assert len(examples) == len(ONE_LINE_DOCS)
    for text, example in zip(ONE_LINE_DOCS, examples):
        ids = reference.tokenize_to_ids(text)
        length = len(ids) + 2
        assert example["input_ids"] == [2] + ids + [3] + [0] * (64 - length)
        assert example["input_mask"] == [1] * length + [0] * (64 - length)
        assert example["segment_ids"] == [0] * 64
        # Decoding gives the normalised text, with [UNK] for words the vocab lacks.
        words = [w if reference.wordpiece.tokenize_word(w) != ["[UNK]"] else "[UNK]"
                 for w in basic.tokenize(text)]
        from electra_tf.text.tokenization import WordPieceTokenizer
        decoded = WordPieceTokenizer(plan.options.vocab_file).decode(example["input_ids"][1:length - 1])
        assert decoded == " ".join(words)
    assert manifest["num_unk_tokens"] == sum(e["input_ids"].count(unk) for e in examples) > 0
    assert manifest["num_examples"] == 5 and manifest["num_documents"] == 5


def test_manifest_contract(tmp_path):
    corpus = write_text(tmp_path / "c.txt", "\n\n".join(ONE_LINE_DOCS * 3) + "\n")
    _, manifest = build(tmp_path, corpus, num_shards=2)
    on_disk = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk == manifest
    for key in ("format_version", "max_seq_length", "vocab_file", "vocab_size", "vocab_sha256",
                "do_lower_case", "strip_accents", "special_token_ids", "shards", "num_shards",
                "num_documents", "num_examples", "num_tokens", "num_unk_tokens", "unk_rate",
                "examples_per_shard", "shard_sha256", "shard_size_bytes", "inputs", "created_by", "num_skipped_lines",
                "num_nul_bytes_removed", "num_truncated_tokens", "truncated_token_rate",
                "num_long_sentences"):
        assert key in manifest, key
    assert manifest["format_version"] == FORMAT_VERSION == 1  # new keys are additive
    assert manifest["shards"] == ["pretrain_data.tfrecord-00000-of-00002",
                                  "pretrain_data.tfrecord-00001-of-00002"]
    assert manifest["special_token_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert manifest["vocab_size"] == len(TINY_VOCAB)
    assert sum(manifest["examples_per_shard"]) == manifest["num_examples"] == 15
    assert manifest["created_by"] == "data_prep.build_pretraining_dataset"
    assert os.path.isabs(manifest["vocab_file"])
    examples = read_examples(tmp_path / "out")
    assert manifest["num_tokens"] == sum(sum(e["input_mask"]) for e in examples)
    assert all(sorted(e) == sorted(FEATURE_NAMES) for e in examples)


def _docs_text(num_docs=30, sentences=12):
    """Documents whose words come from a per-document group (to spot mixing)."""
    groups = [["the", "cat", "sat"], ["dog", "ran", "on"], ["hello", "world", "mat"]]
    docs = []
    for d in range(num_docs):
        words = groups[d % 3]
        sentences_text = " ".join(
            f"{words[(d + s) % 3].capitalize()} {words[s % 3]} {words[(s + 1) % 3]} {words[(s * d) % 3]}."
            for s in range(sentences))
        docs.append(sentences_text)
    return docs


def test_formats_and_compression_give_identical_shards(tmp_path):
    docs = _docs_text()
    text = "\n\n".join(docs) + "\n"
    wiki = "".join(f'<doc id="{i}" url="x" title="T{i}">\nTitle {i}\n\n{d}\n</doc>\n'
                   f'<doc id="s{i}" title="stub">\nStub title\n\n</doc>\n' for i, d in enumerate(docs))
    jsonl = "".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs))
    inputs = {
        "text": write_text(tmp_path / "in" / "corpus.txt", text),
        "wiki": write_text(tmp_path / "in" / "wiki_00", wiki),
        "jsonl": write_text(tmp_path / "in" / "docs.jsonl", jsonl),
    }
    gz = tmp_path / "in" / "corpus2.txt.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    bz = tmp_path / "in" / "wiki_01.bz2"
    bz.write_bytes(bz2.compress(wiki.encode()))
    inputs.update(gz=gz, bz=bz)
    results = {}
    for name, path in inputs.items():
        _, manifest = build(tmp_path, path, name=name)
        results[name] = shard_bytes(tmp_path / name)
        assert manifest["num_documents"] == len(docs), name
        # Cut into several shards, no document is lost or read twice.
        _, manifest = build(tmp_path, path, name=name + "-sharded", num_shards=3)
        assert manifest["num_documents"] == len(docs), name
    assert all(r == results["text"] for r in results.values())
    # Every example holds words of one document group only.
    groups = [{"the", "cat", "sat"}, {"dog", "ran", "on"}, {"hello", "world", "mat"}]
    ids = {TINY_VOCAB.index(w): g for g, ws in enumerate(groups) for w in ws}
    for example in read_examples(tmp_path / "text"):
        seen = {ids[i] for i in example["input_ids"] if i in ids}
        assert len(seen) == 1


def test_invalid_utf8_lines_are_skipped_and_counted(tmp_path):
    good = "The cat sat on the mat.\n"
    raw = (good * 5).encode() + b"\xff\xfe broken \xc3\x28 line\n" + (good * 5).encode() + b"\x80\n"
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(raw)
    _, manifest = build(tmp_path, corpus, max_seq_length=128)
    assert manifest["num_skipped_lines"] == 2
    assert manifest["num_text_tokens"] == 10 * 7


def test_stray_nul_bytes_are_removed_and_counted(tmp_path):
    filler = "\n\n".join(["The cat sat on the mat."] * 3000)  # ~75 KB: past the 64 KiB sniff
    clean = f"The cat sat on the mat.\n\n{filler}\n\nHello World; the dog ran!\n"
    dirty = (f"The c\x00at sat on the\x00 mat.\n\n{filler}\n\n"
             f"Hello\x00\x00\x00 World; the dog ran!\x00\n")
    assert dirty.replace("\x00", "") == clean and dirty.index("Hello") > 64 * 1024
    messages = []
    _, reference = build(tmp_path, write_text(tmp_path / "clean.txt", clean), name="clean")
    _, manifest = build(tmp_path, write_text(tmp_path / "dirty.txt", dirty), name="dirty",
                        log=messages.append)
    assert manifest["num_nul_bytes_removed"] == 6 and reference["num_nul_bytes_removed"] == 0
    assert "6 NUL bytes removed" in messages[-1], messages[-1]
    assert manifest["num_skipped_lines"] == 0
    # The shards hold the text without the NULs ("c\0at" is "cat", not two words).
    assert shard_bytes(tmp_path / "dirty") == shard_bytes(tmp_path / "clean")
    first = read_examples(tmp_path / "dirty")[0]
    words = [TINY_VOCAB[i] for i in first["input_ids"] if i > 4]
    assert words == ["the", "cat", "sat", "on", "the", "mat", "."]
    # JSON Lines: a raw NUL inside a string would make the record invalid JSON.
    records = [json.dumps({"text": d}) for d in clean.strip().split("\n\n")]
    records[0], records[-1] = records[0].replace("c", "c\x00"), records[-1].replace("W", "\x00W")
    jsonl = write_text(tmp_path / "dirty.jsonl", "\n".join(records) + "\n")
    _, manifest = build(tmp_path, jsonl, name="jsonl")
    assert manifest["num_skipped_lines"] == 0 and manifest["num_nul_bytes_removed"] == 2
    assert shard_bytes(tmp_path / "jsonl") == shard_bytes(tmp_path / "clean")
    # A tiny file may hold a few (up to 10) NULs although they are over 1 % of it.
    _, manifest = build(tmp_path, write_text(tmp_path / "tiny.txt", "The\x00 cat\x00\x00 sat.\n"),
                        name="tiny")
    assert manifest["num_nul_bytes_removed"] == 3 and manifest["num_text_tokens"] == 4


def test_mostly_nul_file_is_still_rejected_as_binary(tmp_path):
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes(("The cat sat on the mat.\n\n" * 100).encode("utf-16-le"))
    with pytest.raises(CorpusError, match=r"utf16.txt: looks like a binary file \(2500 NUL bytes "
                                          r"in its first 5000 bytes\), not UTF-8 text"):
        build(tmp_path, utf16)
    many = write_text(tmp_path / "many.txt", "The cat sat.\x00" * 11 + "\n")
    with pytest.raises(CorpusError, match="many.txt: looks like a binary file"):
        build(tmp_path, many)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _tokens_per_sentence(docs):
    reference = ReferenceTokenizer(TINY_VOCAB)
    return [len(reference.tokenize_to_ids(s)) for d in docs for s in split_sentences(d)]


def test_truncated_tokens_are_counted(tmp_path):
    docs = ["the cat sat on the mat the dog ran on",   # 1 sentence of 10 tokens
            "The cat sat. The dog ran.",              # 4 + 4 tokens
            "A cat."]                                 # 3 tokens
    assert _tokens_per_sentence(docs) == [10, 4, 4, 3]
    corpus = write_text(tmp_path / "c.txt", "\n\n".join(docs) + "\n")
    messages = []
    _, manifest = build(tmp_path, corpus, max_seq_length=8, single_segment_prob=1.0,
                        short_seq_prob=0.0, log=messages.append)
    # By hand, with room for 8 - 2 = 6 text tokens per example (one segment):
    # doc 1: 10 tokens >= 8 -> an example of 6, 4 dropped (a sentence longer than 6);
    # doc 2: 4 + 4 = 8 >= 8 -> an example of 6, 2 dropped; doc 3: 3 tokens, none dropped.
    assert manifest["num_examples"] == 3
    assert manifest["num_text_tokens"] == 6 + 6 + 3
    assert manifest["num_truncated_tokens"] == 4 + 2
    assert manifest["num_long_sentences"] == 1
    assert manifest["truncated_token_rate"] == pytest.approx(6 / 21)
    assert ("6 tokens dropped by truncation to max_seq_length=8 (28.57% of the text's tokens, "
            "1 sentences longer than 6 tokens)") in messages[-1], messages[-1]
    # Two segments and random short targets: kept + dropped = every token of the text.
    docs = _docs_text()
    corpus = write_text(tmp_path / "d.txt", "\n\n".join(docs) + "\n")
    _, manifest = build(tmp_path, corpus, name="two", max_seq_length=16, short_seq_prob=0.3)
    assert manifest["num_truncated_tokens"] > 0 and manifest["num_long_sentences"] == 0
    assert manifest["num_text_tokens"] + manifest["num_truncated_tokens"] == \
        sum(_tokens_per_sentence(docs))


def test_ten_megabyte_single_line_is_cut_not_fatal(tmp_path):
    corpus = tmp_path / "long.txt"
    corpus.write_bytes(b"the cat sat on the mat " * 460_000)  # ~10.6 MB, no newline
    _, manifest = build(tmp_path, corpus, max_seq_length=128)
    # 256 KiB pieces -> one over-long sentence each -> one full example each.
    assert 35 <= manifest["num_examples"] <= 50
    assert manifest["num_tokens"] == 128 * manifest["num_examples"]


def test_empty_documents_only_is_an_error_and_leaves_nothing(tmp_path):
    wiki = write_text(tmp_path / "wiki_00", '<doc id="1" title="a">\nA\n\n</doc>\n' * 3)
    with pytest.raises(CorpusError, match="wiki_00: contains no text"):
        build(tmp_path, wiki)
    assert not any((tmp_path / "out").iterdir())


def test_unchanged_rerun_is_a_no_op_and_changed_options_rebuild(tmp_path):
    corpus = write_text(tmp_path / "c.txt", "\n\n".join(_docs_text()) + "\n")
    build(tmp_path, corpus, num_shards=2)
    shard = tmp_path / "out" / "pretrain_data.tfrecord-00000-of-00002"
    mtime = shard.stat().st_mtime_ns
    build(tmp_path, corpus, num_shards=2)
    assert shard.stat().st_mtime_ns == mtime
    _, manifest = build(tmp_path, corpus, num_shards=3, seed=7)
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert manifest["num_shards"] == 3 and manifest["seed"] == 7
    assert not any("of-00002" in n for n in names)


def test_manifest_validation_names_the_field(tmp_path):
    corpus = write_text(tmp_path / "c.txt", "\n\n".join(ONE_LINE_DOCS) + "\n")
    build(tmp_path, corpus)
    manifest = load_manifest(str(tmp_path / "out"))
    validate_manifest(manifest, max_seq_length=64, vocab_size=len(TINY_VOCAB))
    with pytest.raises(ValueError) as info:
        validate_manifest(manifest, max_seq_length=128, data_dir="d")
    message = str(info.value)
    assert "max_seq_length=64" in message and "max_seq_length=128" in message
    assert "--max_seq_length=128" in message and "--max_seq_length=64" in message
    with pytest.raises(ValueError) as info:
        validate_manifest(manifest, vocab_size=30522)
    message = str(info.value)
    assert f"vocab_size={len(TINY_VOCAB)}" in message and "vocab_size=30522" in message
    with pytest.raises(ValueError, match="no pre-training manifest at"):
        load_manifest(str(tmp_path))
    (tmp_path / "out" / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="manifest.json is not readable JSON"):
        load_manifest(str(tmp_path / "out"))


def test_tfds_source_with_mock_data(tmp_path):
    import tensorflow_datasets as tfds
    with tfds.testing.mock_data(num_examples=40):
        plan, manifest = build(tmp_path, "", tfds_name="imdb_reviews", tfds_split="train",
                               tfds_text_field="text", num_shards=2)
    assert manifest["inputs"] == ["tfds:imdb_reviews/train"]
    assert manifest["num_documents"] == 40
    assert manifest["num_examples"] >= 40
    with tfds.testing.mock_data(num_examples=5):
        with pytest.raises(CorpusError, match="no feature 'body'"):
            build(tmp_path, "", name="o2", tfds_name="imdb_reviews", tfds_text_field="body")


# --------------------------------------------------------------------------
# The command line: bad inputs, SIGKILL + resume
# --------------------------------------------------------------------------

def _cli_args(tmp_path, inputs, out="cli_out", vocab=None, *extra):
    vocab = vocab or write_vocab(tmp_path)
    return ["--input", str(inputs), "--output_dir", str(tmp_path / out), "--vocab_file", str(vocab),
            *extra]


def _assert_clean_failure(result, tmp_path, needle, out="cli_out"):
    assert result.returncode != 0
    lines = [l for l in result.stderr.strip().splitlines() if l.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0], lines[0]
    out_dir = tmp_path / out
    leftovers = [p.name for p in out_dir.iterdir()] if out_dir.exists() else []
    assert not [n for n in leftovers if n.startswith("pretrain_data") or n.startswith("manifest")]


def test_cli_bad_inputs(tmp_path):
    module = "data_prep.build_pretraining_dataset"
    good = write_text(tmp_path / "good.txt", "The cat sat.\n")
    cases = []
    missing = tmp_path / "missing.txt"
    cases.append((_cli_args(tmp_path, missing), str(missing)))
    empty = write_text(tmp_path / "empty.txt", "\n\n  \n")
    cases.append((_cli_args(tmp_path, empty), "empty.txt: is empty"))
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 200_000, dtype=np.uint8).tobytes())
    cases.append((_cli_args(tmp_path, garbage), "garbage.bin: looks like a binary file"))
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes("The cat sat.\n".encode("utf-16"))
    cases.append((_cli_args(tmp_path, utf16), "utf16.txt: looks like a binary file (13 NUL bytes"))
    no_mask = write_vocab(tmp_path, [t for t in TINY_VOCAB if t != "[MASK]"], name="nomask.txt")
    cases.append((_cli_args(tmp_path, good, "cli_out", no_mask), "nomask.txt: missing special token(s) [MASK]"))
    cases.append((_cli_args(tmp_path, good, "cli_out", None, "--max_seq_length=1024"),
                  "--max_seq_length=1024 exceeds --max_position_embeddings=512"))
    for args, needle in cases:
        _assert_clean_failure(run_module(module, *args), tmp_path, needle)


def test_binary_region_midway_fails_cleanly(tmp_path):
    corpus = tmp_path / "mixed.txt"
    noise = np.random.default_rng(1).integers(0, 256, 2_000_000, dtype=np.uint8).tobytes()
    corpus.write_bytes(b"The cat sat.\n" * 6000 + noise)
    with pytest.raises(CorpusError, match="mixed.txt: looks like a binary file"):
        build(tmp_path, corpus, num_shards=1)
    assert not [p for p in (tmp_path / "out").iterdir()]


def _wait_for(path_glob_dir, pattern, process, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if list(Path(path_glob_dir).glob(pattern)) if Path(path_glob_dir).exists() else []:
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def test_sigkill_then_rerun_is_byte_identical(tmp_path):
    corpus = write_text(tmp_path / "c.txt", "\n\n".join(_docs_text(num_docs=300)) + "\n")
    vocab = write_vocab(tmp_path)
    args = ["--input", str(corpus), "--vocab_file", str(vocab), "--num_shards", "4",
            "--max_seq_length", "32"]
    killed = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2",
               DATA_PREP_TEST_PAUSE_AFTER_SHARD="30")
    process = subprocess.Popen(
        [sys.executable, "-m", "data_prep.build_pretraining_dataset", *args,
         "--output_dir", str(killed)], cwd=REPO_ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for(killed, "*.done.json", process), "first shard never finished"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert not (killed / "manifest.json").exists()
    done = sorted(p.name for p in killed.glob("*.done.json"))
    assert done == ["pretrain_data.tfrecord-00000-of-00004.done.json"]
    # Simulate a kill in the middle of writing: a temp file and a torn shard.
    (killed / "pretrain_data.tfrecord-00001-of-00004.tmp-99999").write_bytes(b"partial")
    (killed / "pretrain_data.tfrecord-00002-of-00004").write_bytes(b"torn")
    first_shard = killed / "pretrain_data.tfrecord-00000-of-00004"
    first_mtime = first_shard.stat().st_mtime_ns
    # The resumed run uses 2 worker processes, the clean one 1: same bytes regardless.
    resumed = run_module("data_prep.build_pretraining_dataset", *args, "--output_dir", str(killed),
                         "--num_processes", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming: 1 of 4 shards already built" in resumed.stderr
    assert "MB/s" in resumed.stderr and "examples/s" in resumed.stderr
    assert first_shard.stat().st_mtime_ns == first_mtime
    assert not list(killed.glob("*.tmp-*"))
    clean = tmp_path / "clean"
    plan = make_plan(BuildOptions(inputs=str(corpus), output_dir=str(clean), vocab_file=str(vocab),
                                  num_shards=4, max_seq_length=32))
    run_build(plan, num_processes=1, log=QUIET)
    assert shard_bytes(killed) == shard_bytes(clean)
    assert load_manifest(str(killed))["shard_sha256"] == load_manifest(str(clean))["shard_sha256"]
