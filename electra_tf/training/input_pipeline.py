"""tf.data input pipeline over the TFRecord shards written by `data_prep`.

The shards' `manifest.json` is checked against the model before anything is
read, so a sequence-length or vocabulary mismatch stops the run with a
message instead of the official code's "Can't parse serialized Example".

The pipeline is deterministic for a given seed (file order, interleave,
shuffle), so its iterator can be checkpointed and a resumed run sees exactly
the batches an uninterrupted one would.

The feature names are `electra_tf.text.manifest.FEATURE_NAMES`, the contract's.

Example (a two-example shard in the format `data_prep` writes, and its manifest):

>>> import tempfile
>>> import tensorflow as tf
>>> from electra_tf.training.input_pipeline import pretraining_dataset
>>> from electra_tf.text.manifest import FEATURE_NAMES, load_manifest, shard_name, write_json_atomic
>>> d = tempfile.mkdtemp()
>>> row = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * 16)) for name in FEATURE_NAMES}
>>> with tf.io.TFRecordWriter(f"{d}/{shard_name(0, 1)}") as writer:
...     for _ in range(2):
...         writer.write(tf.train.Example(features=tf.train.Features(feature=row)).SerializeToString())
>>> write_json_atomic(d + "/manifest.json", {"format_version": 1, "max_seq_length": 16, "vocab_size": 14,
...     "shards": [shard_name(0, 1)], "num_shards": 1, "num_examples": 2})
>>> batch = next(iter(pretraining_dataset(d, load_manifest(d), batch_size=2, seed=0)))
>>> sorted(batch), batch["input_ids"].shape, batch["input_ids"].dtype.name
(['input_ids', 'input_mask', 'segment_ids'], TensorShape([2, 16]), 'int32')
"""

import os

import tensorflow as tf
from absl import logging

from electra_tf.training import distribution
from electra_tf.config import ElectraConfig
from electra_tf.options import DEFAULT_SHUFFLE_BUFFER, INPUT_SHARDINGS
from electra_tf.text.manifest import FEATURE_NAMES, load_manifest, validate_manifest


def load_checked_manifest(data_dir: str, config: ElectraConfig) -> dict:
    """The manifest of `data_dir`, refused (ValueError) if it disagrees with `config`.

    `load_manifest` refuses a manifest whose shards are not all on disk.
    """
    manifest = load_manifest(data_dir)
    validate_manifest(manifest, max_seq_length=config.max_seq_length, vocab_size=config.vocab_size,
                      data_dir=data_dir)
    return manifest


def _parser(seq_length: int):
    spec = {name: tf.io.FixedLenFeature([seq_length], tf.int64) for name in FEATURE_NAMES}

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        return {name: tf.cast(parsed[name], tf.int32) for name in FEATURE_NAMES}

    return parse


def pretraining_dataset(data_dir: str, manifest: dict, batch_size: int, *, seed: int = 0,
                        input_context: tf.distribute.InputContext | None = None,
                        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, repeat: bool = True) -> tf.data.Dataset:
    """Batches of `{input_ids, input_mask, segment_ids}` (int32 `[batch, seq]`).

    `batch_size` is per input pipeline: with a strategy pass the per-replica
    size and an `input_context` (see `distributed_dataset`).
    """
    files = [os.path.join(data_dir, shard) for shard in manifest["shards"]]
    dataset = tf.data.Dataset.from_tensor_slices(files)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    shard_files = num_pipelines > 1 and len(files) >= num_pipelines
    if shard_files:
        dataset = dataset.shard(num_pipelines, input_context.input_pipeline_id)
    if repeat:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    dataset = dataset.interleave(
        tf.data.TFRecordDataset, cycle_length=min(len(files), 8), block_length=16,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
    )
    if num_pipelines > 1 and not shard_files:
        dataset = dataset.shard(num_pipelines, input_context.input_pipeline_id)
    if shuffle_buffer > 1:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(_parser(manifest["max_seq_length"]), num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)




def worker_dataset(strategy: tf.distribute.Strategy, data_dir: str, manifest: dict, global_batch_size: int,
                   *, seed: int = 0, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
                   sharding: str = "batch") -> tf.data.Dataset:
    """This worker's input; `distribution.split_for_replicas` hands each replica its slice.

    With several workers (MultiWorkerMirroredStrategy), `sharding`:

    * `"batch"`: every worker runs the single-process pipeline (reading every shard) and
      its replicas take their consecutive slices of each global batch. The batches are
      those of one process, so losses match it, and the iterator state is the same on
      every worker, so the chief's checkpoint resumes all of them (with any number of workers).
    * `"file"`: worker i reads only shards i, i+N, ... (by example if there are fewer
      shards than workers): 1/N of the reading, but the data order depends on N and
      each worker's iterator state is its own (see `training.train`).

    A plain `tf.data` iterator over this dataset is checkpointable (a
    `tf.distribute` distributed iterator is not), which is what exact resume needs.
    """
    if sharding not in INPUT_SHARDINGS:
        raise ValueError(f"--input_sharding: unknown value {sharding!r}; choose from {INPUT_SHARDINGS}")
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(f"--train_batch_size={global_batch_size} is not divisible by the {replicas} replicas")
    workers, worker = distribution.num_workers(strategy), distribution.worker_index(strategy)
    if workers == 1 or sharding == "batch":
        if workers > 1:
            distribution.feed_global_batches(strategy)
            rows = global_batch_size // workers
            logging.info("Input of worker %d/%d: all %d shard(s); rows %d-%d of every global batch of %d", worker,
                         workers, len(manifest["shards"]), worker * rows, (worker + 1) * rows - 1, global_batch_size)
        return pretraining_dataset(data_dir, manifest, global_batch_size, seed=seed, shuffle_buffer=shuffle_buffer)
    shards = manifest["shards"]
    logging.info("Input of worker %d/%d: %s", worker, workers,
                 f"shards {shards[worker::workers]}" if len(shards) >= workers else
                 f"example {worker}, {worker + workers}, ... of all {len(shards)} shard(s)")
    context = tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=worker,
                                         num_replicas_in_sync=replicas)
    return pretraining_dataset(data_dir, manifest, global_batch_size // workers, seed=seed,
                               input_context=context, shuffle_buffer=shuffle_buffer)
