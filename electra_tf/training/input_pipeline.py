"""tf.data input pipeline over the TFRecord shards written by `data_prep`.

The shards' `manifest.json` is checked against the model before anything is
read, so a sequence-length or vocabulary mismatch stops the run with a
message instead of the official code's "Can't parse serialized Example".

The pipeline is deterministic for a given seed (file order, interleave,
shuffle), so its iterator can be checkpointed and a resumed run sees exactly
the batches an uninterrupted one would.

The feature names are `electra_tf.text.manifest.FEATURE_NAMES`, the contract's.

With `skip_corrupt=True` a corrupt record does not end the run. TensorFlow's
TFRecord reader cannot re-frame a file after a bad record, so it gives up on the
rest of that shard (a corrupt frame at byte 5000 of a 100-record shard loses
records 28-99). Each shard is read with `ignore_errors` and followed by a marker
holding its expected count (`examples_per_shard`) minus the records read; the
marker's loss rides on the next record through the shuffle and the batch
(`skipped_records`, `skipped_shard`), so the count reaches the training loop
exactly when the records it replaces would have, and it is part of the
checkpointed iterator state. `SkipReport` takes those fields off the batch.

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

import dataclasses
import json
import os
import struct

import tensorflow as tf
from absl import logging

from electra_tf.training import data_service, distribution
from electra_tf.config import ElectraConfig
from electra_tf.options import DEFAULT_SHUFFLE_BUFFER, INPUT_SHARDINGS
from electra_tf.model import masking
from electra_tf.text.manifest import FEATURE_NAMES, load_manifest, validate_manifest
from electra_tf.text.vocabulary import Vocabulary, check_vocabulary

SKIP_FIELDS = ("skipped_records", "skipped_shard")  # in-band with each example under skip_corrupt


def load_checked_manifest(data_dir: str, config: ElectraConfig) -> dict:
    """The manifest of `data_dir`, refused (ValueError) if it disagrees with `config`.

    `load_manifest` refuses a manifest whose shards are not all on disk.
    """
    manifest = load_manifest(data_dir)
    validate_manifest(manifest, max_seq_length=config.max_seq_length, vocab_size=config.vocab_size,
                      data_dir=data_dir)
    check_tokenizer(manifest, data_dir)
    return manifest


def check_tokenizer(manifest: dict, data_dir: str, tokenizer_file: str | None = None) -> None:
    """Refuses (ValueError, one line naming the file and both digests) data whose manifest records another
    tokenizer digest than that of `tokenizer_file` (default: the manifest's own `vocab_file`): the same number
    of ids, other pieces (the vocabulary rule, `text.vocabulary.check_vocabulary`). Nothing to compare (an older
    manifest without a digest, a tokenizer file no longer there) is no refusal."""
    recorded = Vocabulary.of_manifest(manifest, "the tokenizer its manifest.json records")
    now = Vocabulary("tokenizer", tokenizer_file or recorded.path)
    try:
        check_vocabulary(dataclasses.replace(recorded, path=None), now, allow_extension=False)
    except ValueError as e:
        raise ValueError(f"data in {data_dir} was built with a different tokenizer: {e}; rebuild the data or pass "
                         "the tokenizer it was built with") from None


def _parser(seq_length: int):
    spec = {name: tf.io.FixedLenFeature([seq_length], tf.int64) for name in FEATURE_NAMES}

    def parse(element):
        serialized = element["record"] if isinstance(element, dict) else element
        parsed = tf.io.parse_example(serialized, spec)
        batch = {name: tf.cast(parsed[name], tf.int32) for name in FEATURE_NAMES}
        if isinstance(element, dict):
            batch.update({name: element[name] for name in SKIP_FIELDS})
        return batch

    return parse


def shard_record_counts(data_dir: str, manifest: dict) -> list[int]:
    """Each shard's record count as its build recorded it (manifest, else `<shard>.done.json`);
    ValueError if a shard has none (skipped records could not be counted)."""
    counts = manifest.get("examples_per_shard") or [None] * len(manifest["shards"])
    result = []
    for name, count in zip(manifest["shards"], counts):
        if count is None:
            count = _sidecar_count(os.path.join(data_dir, name))
        if count is None:
            raise ValueError(f"--skip_corrupt_records needs each shard's record count, and {data_dir}/manifest.json "
                             f"(examples_per_shard) and {name}.done.json record none for {name}: rebuild the data "
                             "with `python -m data_prep.build_pretraining_dataset`")
        result.append(int(count))
    return result


def _sidecar_count(shard_path: str):
    try:
        with open(shard_path + ".done.json", encoding="utf-8") as f:
            return json.load(f).get("num_examples")
    except (OSError, ValueError, AttributeError):
        return None


def record_offset(path: str, index: int):
    """The byte offset of record `index` of a TFRecord file, walking the length headers (None if unreadable)."""
    offset = 0
    try:
        with open(path, "rb") as f:
            for _ in range(index):
                f.seek(offset)
                header = f.read(8)
                if len(header) < 8:
                    return None
                offset += 16 + struct.unpack("<Q", header)[0]
    except OSError:
        return None
    return offset


def _read_shard_skipping(path, index, expected):
    """The shard's records, each `{"record", "end": False, ...}`, then, if the reader gave up early
    (a corrupt or unreadable record), one marker `{"end": True, "lost": expected - read}`."""
    records = tf.data.TFRecordDataset(path).ignore_errors()
    marked = records.map(lambda record: (record, False)).concatenate(
        tf.data.Dataset.from_tensors((tf.constant(""), True)))

    def count(read, item):
        record, end = item
        lost = tf.where(end, expected - read, tf.constant(0, tf.int64))
        return read + 1, {"record": record, "end": end, "lost": lost, "shard": index}

    return marked.scan(tf.constant(0, tf.int64), count).filter(
        lambda item: tf.logical_or(tf.logical_not(item["end"]), item["lost"] > 0))


def _attach_markers(dataset):
    """Moves each marker's loss onto the next record (`skipped_records`, `skipped_shard`), drops the markers.

    Two markers with no record between them (rare) add up under the second's shard: the total stays exact.
    """
    zero = tf.constant(0, tf.int64)

    def attach(pending, item):
        lost = pending["lost"] + item["lost"]
        shard = tf.where(item["end"], item["shard"], pending["shard"])
        out = {"record": item["record"], "skipped_records": tf.where(item["end"], zero, lost),
               "skipped_shard": shard}
        return {"lost": tf.where(item["end"], lost, zero), "shard": shard}, (item["end"], out)

    def is_record(end, out):
        return tf.logical_not(end)

    def record(end, out):
        return out

    return dataset.scan({"lost": zero, "shard": zero}, attach).filter(is_record).map(record)


class SkipReport:
    """Takes the in-band skip fields off a batch, summed per shard (for `loop.make_step_driver`)."""

    def __init__(self, num_shards: int):
        self.num_shards = num_shards

    def zeros(self) -> dict:
        return {name: tf.zeros([self.num_shards], tf.int64) for name in ("skipped_by_shard", "skip_events_by_shard")}

    def split(self, element: dict) -> tuple[dict, dict]:
        batch = {name: value for name, value in element.items() if name not in SKIP_FIELDS}
        lost, shard = element["skipped_records"], element["skipped_shard"]
        events = tf.cast(lost > 0, tf.int64)
        return batch, {"skipped_by_shard": tf.math.unsorted_segment_sum(lost, shard, self.num_shards),
                       "skip_events_by_shard": tf.math.unsorted_segment_sum(events, shard, self.num_shards)}


def files_of_this_pipeline(dataset: tf.data.Dataset, num_files: int, *, seed: int, input_context=None,
                           repeat: bool = True) -> tuple[tf.data.Dataset, bool]:
    """The file-level reading rules of every input (shards and `--train_text`): with several input pipelines
    and at least as many files, pipeline i takes files i, i+N, ...; `repeat` reshuffles the files each epoch
    (seeded). Returns the dataset and whether the files were sharded (else the caller shards by example)."""
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    shard_files = num_pipelines > 1 and num_files >= num_pipelines
    if shard_files:
        dataset = dataset.shard(num_pipelines, input_context.input_pipeline_id)
    if repeat:
        dataset = dataset.shuffle(num_files, seed=seed, reshuffle_each_iteration=True).repeat()
    return dataset, shard_files


def pretraining_dataset(data_dir: str, manifest: dict, batch_size: int, *, seed: int = 0,
                        input_context: tf.distribute.InputContext | None = None,
                        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, repeat: bool = True,
                        skip_corrupt: bool = False) -> tf.data.Dataset:
    """Batches of `{input_ids, input_mask, segment_ids}` (int32 `[batch, seq]`).

    `batch_size` is per input pipeline: with a strategy pass the per-replica
    size and an `input_context` (see `distributed_dataset`). `skip_corrupt`: go on
    past corrupt records, adding the `SKIP_FIELDS` (int64 `[batch]`) to each batch.
    Without skipped records both pipelines give the same examples in the same order.
    """
    files = [os.path.join(data_dir, shard) for shard in manifest["shards"]]
    if skip_corrupt:
        counts = shard_record_counts(data_dir, manifest)
        dataset = tf.data.Dataset.from_tensor_slices(
            (files, tf.range(len(files), dtype=tf.int64), tf.constant(counts, tf.int64)))
    else:
        dataset = tf.data.Dataset.from_tensor_slices(files)
    dataset, shard_files = files_of_this_pipeline(dataset, len(files), seed=seed, input_context=input_context,
                                                  repeat=repeat)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    read = _read_shard_skipping if skip_corrupt else tf.data.TFRecordDataset
    dataset = dataset.interleave(
        read, cycle_length=min(len(files), 8), block_length=16,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
    )
    if skip_corrupt:
        dataset = _attach_markers(dataset)
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
                   sharding: str = "batch", skip_corrupt: bool = False, make_dataset=None,
                   files: list[str] | None = None, service: tuple[str, str] | None = None) -> tf.data.Dataset:
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

    `make_dataset(batch_size, input_context)`: another reader following these rules over `files` (instead
    of the shards; `text_input.text_dataset` for --train_text).

    `service=(address, job_name)`: the tf.data service's workers run the pipeline (`data_service`), and each
    worker's trainer reads its own batches of the shared job (any `sharding`); not checkpointable.
    """
    if make_dataset is None:
        def make_dataset(batch_size, input_context):
            return pretraining_dataset(data_dir, manifest, batch_size, seed=seed, input_context=input_context,
                                       shuffle_buffer=shuffle_buffer, skip_corrupt=skip_corrupt)
    shards = manifest["shards"] if files is None else files
    if sharding not in INPUT_SHARDINGS:
        raise ValueError(f"--input_sharding: unknown value {sharding!r}; choose from {INPUT_SHARDINGS}")
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(f"--train_batch_size={global_batch_size} is not divisible by the {replicas} replicas")
    workers, worker = distribution.num_workers(strategy), distribution.worker_index(strategy)
    if service is not None:
        address, job_name = service
        logging.info("Input of worker %d/%d: batches of %d from the tf.data service at %s, job %s (%s sharding: "
                     "each input file is read by one service worker per epoch, in an order that is not reproducible; "
                     "the input position is not checkpointed, so a resume will not be exact)",
                     worker, workers, global_batch_size // workers, address, job_name, data_service.PROCESSING_MODE)
        return data_service.distribute(make_dataset(global_batch_size // workers, None), address, job_name=job_name)
    if workers == 1 or sharding == "batch":
        if workers > 1:
            distribution.feed_global_batches(strategy)
            rows = global_batch_size // workers
            logging.info("Input of worker %d/%d: all %d shard(s); rows %d-%d of every global batch of %d", worker,
                         workers, len(shards), worker * rows, (worker + 1) * rows - 1, global_batch_size)
        return make_dataset(global_batch_size, None)
    logging.info("Input of worker %d/%d: %s", worker, workers,
                 f"shards {shards[worker::workers]}" if len(shards) >= workers else
                 f"example {worker}, {worker + workers}, ... of all {len(shards)} shard(s)")
    context = tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=worker,
                                         num_replicas_in_sync=replicas)
    return make_dataset(global_batch_size // workers, context)


def whole_words_table(config, manifest: dict):
    """The tokenizer's `continuation_table()` of the data's vocabulary (a `.model` or a WordPiece vocab), when
    `mask_whole_words` needs it."""
    if not config.mask_whole_words:
        return None
    vocab_file = manifest.get("vocab_file")
    if not vocab_file or not os.path.isfile(vocab_file):
        raise ValueError(f"mask_whole_words=True reads the data's vocab file, but the manifest's vocab_file "
                         f"{vocab_file!r} is not there: rebuild the data or restore that file")
    try:  # the vocabulary rule: the file must be the one the data was built with
        check_tokenizer(manifest, "the manifest's folder", vocab_file)
    except ValueError as e:
        raise ValueError(f"mask_whole_words=True: {vocab_file} is not the vocab the data was built with ({e})") \
            from None
    return masking.read_continuation_table(vocab_file)
