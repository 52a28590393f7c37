"""Tiny synthetic pre-training shards written to the data_prep contract, and reading back a run's weights (for unit
tests)."""

import hashlib
import json
import os

import numpy as np
import tensorflow as tf

from electra_tf.text.manifest import sha256_file

SPECIAL_IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def write_vocab(path, vocab_size):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"tok{i}" for i in range(vocab_size - 5)]
    with open(path, "w") as f:
        f.write("\n".join(tokens) + "\n")
    return path


def random_example(rng, seq_length, vocab_size, min_length=8):
    length = rng.randint(min_length, seq_length + 1)
    split = rng.randint(2, length - 1)
    ids = rng.randint(5, vocab_size, size=length)
    ids[0], ids[split], ids[length - 1] = SPECIAL_IDS["cls"], SPECIAL_IDS["sep"], SPECIAL_IDS["sep"]
    input_ids = np.zeros(seq_length, np.int64)
    input_ids[:length] = ids
    input_mask = (np.arange(seq_length) < length).astype(np.int64)
    segment_ids = ((np.arange(seq_length) > split) & (input_mask > 0)).astype(np.int64)
    return input_ids, input_mask, segment_ids


def write_shards(data_dir, *, num_examples=64, num_shards=2, seq_length=32, vocab_size=64, seed=0,
                 record_shards=True):
    """Writes shards + manifest.json; returns the manifest.

    `record_shards`: the manifest records each shard's size and sha256, as data_prep's builds do
    (older builds recorded neither).
    """
    os.makedirs(data_dir, exist_ok=True)
    vocab_file = write_vocab(os.path.join(data_dir, "vocab.txt"), vocab_size)
    rng = np.random.RandomState(seed)
    shards, counts, num_tokens = [], [], 0
    for shard in range(num_shards):
        name = f"pretrain_data.tfrecord-{shard:05d}-of-{num_shards:05d}"
        count = num_examples // num_shards
        with tf.io.TFRecordWriter(os.path.join(data_dir, name)) as writer:
            for _ in range(count):
                features = dict(zip(("input_ids", "input_mask", "segment_ids"),
                                    random_example(rng, seq_length, vocab_size)))
                num_tokens += int(features["input_mask"].sum())
                example = tf.train.Example(features=tf.train.Features(feature={
                    k: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in features.items()}))
                writer.write(example.SerializeToString())
        shards.append(name)
        counts.append(count)
    with open(vocab_file, "rb") as f:
        vocab_sha = hashlib.sha256(f.read()).hexdigest()
    manifest = {
        "format_version": 1, "max_seq_length": seq_length, "vocab_file": os.path.abspath(vocab_file),
        "vocab_size": vocab_size, "vocab_sha256": vocab_sha, "do_lower_case": True, "strip_accents": None,
        "special_token_ids": SPECIAL_IDS, "shards": shards, "num_shards": num_shards, "num_documents": sum(counts),
        "num_examples": sum(counts), "num_tokens": num_tokens, "num_unk_tokens": 0, "unk_rate": 0.0,
        "examples_per_shard": counts, "inputs": [], "created_by": "tests.pretrain_testutil",
    }
    if record_shards:
        paths = [os.path.join(data_dir, name) for name in shards]
        manifest["shard_size_bytes"] = [os.path.getsize(p) for p in paths]
        manifest["shard_sha256"] = [sha256_file(p) for p in paths]
    with open(os.path.join(data_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return manifest


def tiny_config(**overrides):
    from electra_tf.config import get_config

    values = dict(vocab_size=64, embedding_size=16, hidden_size=32, num_layers=2, num_heads=2,
                  intermediate_size=64, generator_hidden_size=16, generator_num_heads=1,
                  generator_intermediate_size=32, generator_num_layers=2, max_position_embeddings=64,
                  max_seq_length=32, train_batch_size=8, num_train_steps=6, num_warmup_steps=2,
                  dropout_rate=0.1)
    values.update(overrides)
    return get_config("tiny", **values)


def mirrored_cpus():
    """MirroredStrategy over the two logical CPUs of tests/conftest.py, with no collective ops: another test's
    MirroredStrategy in the same process would clash on their instance keys."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


def fake_checkpoint(model_dir, step=1):
    """A checkpoint at `step` in run directory `model_dir` (a variable only): what a record check sees of a run
    that has taken `step` steps."""
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)),
                                         os.path.join(model_dir, "checkpoints"), max_to_keep=1)
    return manager.save(checkpoint_number=step)


def h5_arrays(path) -> dict:
    """Every array of a Keras `.weights.h5` file (an export's, a fine-tuning run's), by its path in the file."""
    import h5py

    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: arrays.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None)
    return arrays
