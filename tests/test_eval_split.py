"""--eval_fraction: held-out documents in eval shards of their own, recorded in the manifest and verified."""

import json
import os
from pathlib import Path

import pytest

from data_prep.builder import BuildOptions, make_plan, run_build
from data_prep.corpus.errors import CorpusError
from data_prep.shard_writer import held_out
from electra_tf.text.manifest import eval_view, load_manifest
from electra_tf.text.verify import verify_shards

try:
    from tests.data_prep_testutil import run_module, write_text, write_vocab
except ImportError:  # tests/ is not a package
    from data_prep_testutil import run_module, write_text, write_vocab

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "a", "and", "is", "it", "he", "hello", "world"]


def corpus_text(num_docs=60):
    """Documents with a unique first word pair, so each document's examples can be traced back to it."""
    docs = []
    for d in range(num_docs):
        tag = f"{WORDS[d % len(WORDS)]} {WORDS[(d // len(WORDS)) % len(WORDS)]}"
        body = " ".join(WORDS[(d * 7 + k) % len(WORDS)] for k in range(12))
        docs.append(f"{tag} {body}.\n{body} {tag}.")
    return "\n\n".join(docs) + "\n", docs


def build(tmp_path, name, fraction, num_shards=3, num_processes=1):
    text, _ = corpus_text()
    corpus = write_text(tmp_path / "c.txt", text)
    plan = make_plan(BuildOptions(inputs=str(corpus), output_dir=str(tmp_path / name),
                                  vocab_file=str(write_vocab(tmp_path)), max_seq_length=64, num_shards=num_shards,
                                  eval_fraction=fraction))
    return run_build(plan, num_processes=num_processes, log=lambda m: None)


def records(directory, names):
    import tensorflow as tf
    return [r.numpy() for name in names for r in tf.data.TFRecordDataset(os.path.join(directory, name))]


def test_held_out_documents_are_never_in_the_training_shards(tmp_path):
    manifest = build(tmp_path, "out", 0.3)
    out = tmp_path / "out"
    train, held = records(out, manifest["shards"]), records(out, manifest["eval_shards"])
    assert train and held and not set(train) & set(held)
    assert manifest["eval_num_examples"] == len(held) == sum(manifest["eval_examples_per_shard"])
    assert manifest["num_examples"] == len(train)
    _, docs = corpus_text()
    expected_held = sum(held_out(doc.split("\n"), 0.3) for doc in docs)
    assert manifest["eval_num_documents"] == expected_held
    assert manifest["num_documents"] + manifest["eval_num_documents"] == len(docs)
    assert manifest["eval_fraction"] == 0.3 and manifest["eval_num_shards"] == 3
    assert verify_shards(str(out)) == []
    assert load_manifest(str(out))["eval_shards"] == manifest["eval_shards"]
    assert eval_view(manifest)["shards"] == manifest["eval_shards"]


def test_the_split_is_deterministic_whatever_the_shards(tmp_path):
    one = build(tmp_path, "one", 0.3, num_shards=3)
    two = build(tmp_path, "two", 0.3, num_shards=2)
    held_one = set(records(tmp_path / "one", one["eval_shards"]))
    held_two = set(records(tmp_path / "two", two["eval_shards"]))
    assert one["eval_num_documents"] == two["eval_num_documents"]
    # Re-running the same build is a no-op; the held-out set itself depends only on the documents.
    again = build(tmp_path, "one", 0.3, num_shards=3)
    assert again["eval_shard_sha256"] == one["eval_shard_sha256"]
    assert len(held_one) and len(held_two)


def test_no_eval_fraction_writes_what_it_always_wrote(tmp_path):
    manifest = build(tmp_path, "plain", 0.0)
    assert not any(key.startswith("eval_") for key in manifest)
    assert not list((tmp_path / "plain").glob("eval_data*"))


def test_verify_and_load_check_the_eval_shards(tmp_path):
    manifest = build(tmp_path, "out", 0.3)
    out = tmp_path / "out"
    shard = out / next(name for name, n in zip(manifest["eval_shards"], manifest["eval_examples_per_shard"]) if n)
    shard.write_bytes(shard.read_bytes()[:-3])
    problems = verify_shards(str(out))
    assert problems and all(p.path == str(shard) for p in problems)
    result = run_module("data_prep.inspect_shards", "--verify", str(out))
    assert result.returncode == 1 and "eval_data.tfrecord" in result.stdout
    shard.unlink()
    with pytest.raises(ValueError, match="missing on disk: eval_data"):
        load_manifest(str(out))


def test_a_resumed_build_rebuilds_a_lost_eval_shard_identically(tmp_path):
    manifest = build(tmp_path, "out", 0.3)
    out = tmp_path / "out"
    before = (out / manifest["eval_shards"][1]).read_bytes()
    (out / manifest["eval_shards"][1]).unlink()
    (out / "manifest.json").unlink()
    again = build(tmp_path, "out", 0.3)
    assert (out / again["eval_shards"][1]).read_bytes() == before
    assert again["eval_shard_sha256"] == manifest["eval_shard_sha256"]


def test_bad_eval_fraction_is_refused(tmp_path):
    with pytest.raises(CorpusError, match="--eval_fraction=1.0 must be in"):
        build(tmp_path, "bad", 1.0)


def test_the_held_out_rule_gives_the_same_answer_in_python_and_inside_a_tf_data_graph():
    """data_prep decides on Python strings, the raw-text pipeline inside tf.data: one rule, one answer."""
    import tensorflow as tf

    from electra_tf.text.held_out import HASH_BUCKETS, document_text, held_out_flags, held_out_mask
    _, docs = corpus_text(200)
    texts = [document_text(doc.split("\n")) for doc in docs]
    in_python = held_out_flags(texts, 0.3)
    in_graph = [bool(x) for x in tf.data.Dataset.from_tensor_slices(texts).map(
        lambda text: held_out_mask(text, 0.3)).as_numpy_iterator()]
    assert in_python == in_graph
    assert 0.15 < sum(in_python) / len(texts) < 0.45  # the fraction is roughly honoured
    # FarmHash Fingerprint64 reduced to buckets, computed independently of the rule's module.
    buckets = tf.strings.to_hash_bucket_fast(texts, HASH_BUCKETS).numpy()
    assert in_python == [int(b) < 0.3 * 2 ** 62 for b in buckets]
