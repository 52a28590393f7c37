"""Training batches and their padding: each batch cut to its longest example.

Unlike the official code, batches are not padded to `max_seq_length`: each is
cut to its longest real example, rounded up to a multiple of 16 per 128 tokens
(`Padding`), and training draws its batches from length buckets, so short
tasks (STS-B pairs average about 30 tokens) do not pay for 128-token attention.
Results are unchanged: padded positions are masked out of attention and carry
no loss. The order of the training batches is drawn per epoch from the seed
(`batch_plan`), so a resumed run goes on with exactly the batches an
uninterrupted one would have drawn.

Example:

>>> import numpy as np
>>> Padding.dynamic(128).length(30), Padding.fixed(128).length(30)
(32, 128)
>>> sequence_lengths(np.array([[1, 1, 1, 0], [1, 0, 0, 0]]))
array([3, 1], dtype=int32)
>>> features = {"input_ids": np.ones((8, 32), "int32"), "input_mask": np.ones((8, 32), "int32"),
...             "segment_ids": np.zeros((8, 32), "int32"), "label_ids": np.zeros(8, "int32")}
>>> batch = next(iter(train_dataset(features, batch_size=4, seed=0, padding=Padding.dynamic(128))))
>>> tuple(batch["input_ids"].shape), tuple(batch["label_ids"].shape)
((4, 32), (4,))
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import tensorflow as tf

from electra_tf.training import distribution
from electra_tf.finetuning.task import Task
from electra_tf.options import RunOptions


@dataclasses.dataclass(frozen=True)
class Padding:
    """The sequence length of a batch: its longest real example rounded up to `multiple`.

    Rounding bounds the number of distinct shapes (XLA and TPUs compile once
    per shape), here to at most 8 for any `max_length`; `min_length` keeps
    span heads' top-k/beam search over enough positions. `Padding.fixed(n)`
    pads every batch to `n`, as the official code does.
    """

    max_length: int
    multiple: int
    min_length: int = 1

    @classmethod
    def fixed(cls, max_length: int) -> "Padding":
        return cls(max_length, max_length, max_length)

    @classmethod
    def dynamic(cls, max_length: int, min_length: int = 1) -> "Padding":
        return cls(max_length, 16 * math.ceil(max_length / 128), min(min_length, max_length))

    @property
    def is_fixed(self) -> bool:
        return self.min_length >= self.max_length

    def length(self, longest: int) -> int:
        rounded = -(-int(longest) // self.multiple) * self.multiple
        return min(self.max_length, max(self.min_length, rounded))

    def tf_length(self, longest):
        longest = tf.cast(longest, tf.int32)
        rounded = (longest + self.multiple - 1) // self.multiple * self.multiple
        return tf.minimum(self.max_length, tf.maximum(self.min_length, rounded))


def padding_for(task: Task, config, options: RunOptions) -> Padding:
    """The task's padding: fixed when `options.dynamic_padding` is off."""
    if not options.dynamic_padding:
        return Padding.fixed(options.max_seq_length)
    return Padding.dynamic(options.max_seq_length, task.min_sequence_length(config))


def sequence_lengths(input_mask) -> np.ndarray:
    """Per example, the position after its last real token (0 for an all-padding row)."""
    mask = np.asarray(input_mask) > 0
    return (mask * np.arange(1, mask.shape[1] + 1)).max(axis=1).astype(np.int32)


def trim_batch(batch: dict, length) -> dict:
    """Cuts every per-token feature (dim 1 == the sequence length) of `batch` to `length`."""
    seq = batch["input_ids"].shape[1]
    return {k: v[:, :length] if v.shape.rank >= 2 and v.shape[1] == seq else v for k, v in batch.items()}


def length_keys(lengths: np.ndarray, padding: Optional[Padding], bucketing: bool) -> np.ndarray:
    """Each example's bucket: its padded length with `bucketing` (and a dynamic padding), else one bucket."""
    if not bucketing or padding is None or padding.is_fixed:
        return np.zeros(len(lengths), np.int64)
    return np.array([padding.length(n) for n in lengths], np.int64)


def _epoch_batches(perm: np.ndarray, keys: np.ndarray, batch_size: int, carry: dict) -> np.ndarray:
    """The batches one pass over `perm` completes: per bucket, examples in order, a batch whenever one
    has `batch_size`, ordered by where they were completed. A bucket's unfinished batch goes on in the
    next epoch (`carry`, updated), as if epochs were one stream, so no example is dropped."""
    batches, ends = [], []
    epoch_keys = keys[perm]
    for key in np.unique(keys):
        positions = np.flatnonzero(epoch_keys == key)
        pending = carry.get(key, perm[:0])
        items = np.concatenate([pending, perm[positions]])
        full = len(items) // batch_size
        if full:
            batches.append(items[:full * batch_size].reshape(full, batch_size))
            ends.append(positions[np.arange(1, full + 1) * batch_size - 1 - len(pending)])
        carry[key] = items[full * batch_size:]
    if not batches:
        return np.zeros((0, batch_size), np.int64)
    return np.concatenate(batches)[np.argsort(np.concatenate(ends), kind="stable")]


def batch_plan(keys: np.ndarray, batch_size: int, seed: int, start_step: int = 0, num_shards: int = 1,
               shard_index: int = 0):
    """Endless example-index batches from batch `start_step` on.

    Epoch e's order is a permutation drawn from (seed, e), so the batches are a
    function of the seed alone: a resumed run recomputes the earlier epochs'
    orders (cheap, no data is read) and skips the batches it already consumed.
    """
    indices = np.arange(shard_index, len(keys), num_shards)
    carry, step, epoch = {}, 0, 0
    while True:
        rng = np.random.default_rng([epoch, seed & 0xFFFFFFFF])
        batches = _epoch_batches(rng.permutation(indices), keys, batch_size, carry)
        for batch in batches[max(0, start_step - step):]:
            yield batch
        step, epoch = step + len(batches), epoch + 1


def train_dataset(features: dict, batch_size: int, seed: int, num_shards: int = 1, shard_index: int = 0,
                  padding: Optional[Padding] = None, bucketing: bool = False, start_step: int = 0) -> tf.data.Dataset:
    """Shuffled, endless batches of `batch_size` from batch `start_step` on (see `batch_plan`).

    With a dynamic `padding` each batch is cut to its longest example; with
    `bucketing` a batch is filled from examples of one padded length, so little
    padding is left. Both are deterministic for a seed. With several workers
    each reads its own shard and `batch_size` is its share.
    """
    lengths = sequence_lengths(features["input_mask"])
    keys = length_keys(lengths, padding, bucketing)
    plan = tf.data.Dataset.from_generator(
        lambda: batch_plan(keys, batch_size, seed, start_step, num_shards, shard_index),
        output_signature=tf.TensorSpec([batch_size], tf.int64))
    tensors = {k: tf.constant(v) for k, v in features.items()}
    lengths = tf.constant(lengths)
    dataset = plan.map(lambda idx: ({k: tf.gather(v, idx) for k, v in tensors.items()}, tf.gather(lengths, idx)))
    if padding is None or padding.is_fixed:
        dataset = dataset.map(lambda batch, _: batch)
    else:
        dataset = dataset.map(lambda batch, n: trim_batch(batch, padding.tf_length(tf.reduce_max(n))))
    return dataset.prefetch(tf.data.AUTOTUNE)


def worker_train_dataset(strategy, features: dict, global_batch_size: int, seed: int,
                         padding: Optional[Padding] = None, bucketing: bool = False,
                         start_step: int = 0) -> tf.data.Dataset:
    """This worker's batches; `split_for_replicas` hands each local replica its slice.

    A plain iterator, not `experimental_distribute_dataset`, whose multi-device
    iterator is slow to tear down on CPU. A batch is trimmed before it is
    split, so all local replicas get the same shape.
    """
    workers = distribution.num_workers(strategy)
    return train_dataset(features, global_batch_size // workers, seed, workers,
                         distribution.worker_index(strategy), padding, bucketing, start_step)
