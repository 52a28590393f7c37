"""Training batches and their padding: each batch cut to its longest example.

Unlike the official code, batches are not padded to `max_seq_length`: each is
cut to its longest real example, rounded up to a multiple of 16 per 128 tokens
(`Padding`), and training draws its batches from length buckets, so short
tasks (STS-B pairs average about 30 tokens) do not pay for 128-token attention.
Results are unchanged: padded positions are masked out of attention and carry
no loss.

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


def train_dataset(features: dict, batch_size: int, seed: int, num_shards: int = 1, shard_index: int = 0,
                  padding: Optional[Padding] = None, bucketing: bool = False) -> tf.data.Dataset:
    """Shuffled, repeated batches of `batch_size` (drop_remainder keeps replicas even).

    With a dynamic `padding` each batch is cut to its longest example; with
    `bucketing` a batch is filled from examples of one padded length
    (`group_by_window`), so little padding is left. Both are deterministic for
    a seed. With several workers each reads its own shard and `batch_size` is
    its share.
    """
    lengths = sequence_lengths(features["input_mask"])
    dataset = tf.data.Dataset.from_tensor_slices((features, lengths))
    if num_shards > 1:
        dataset = dataset.shard(num_shards, shard_index)
    dataset = dataset.shuffle(len(lengths), seed=seed, reshuffle_each_iteration=True).repeat()
    if padding is None or padding.is_fixed:
        dataset = dataset.batch(batch_size, drop_remainder=True).map(lambda batch, _: batch)
        return dataset.prefetch(tf.data.AUTOTUNE)
    if bucketing:
        dataset = dataset.group_by_window(
            key_func=lambda _, length: tf.cast(padding.tf_length(length), tf.int64),
            reduce_func=lambda _, window: window.batch(batch_size, drop_remainder=True),
            window_size=batch_size)
    else:
        dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(lambda batch, n: trim_batch(batch, padding.tf_length(tf.reduce_max(n))))
    return dataset.prefetch(tf.data.AUTOTUNE)


def worker_train_dataset(strategy, features: dict, global_batch_size: int, seed: int,
                         padding: Optional[Padding] = None, bucketing: bool = False) -> tf.data.Dataset:
    """This worker's batches; `split_for_replicas` hands each local replica its slice.

    A plain iterator, not `experimental_distribute_dataset`, whose multi-device
    iterator is slow to tear down on CPU. A batch is trimmed before it is
    split, so all local replicas get the same shape.
    """
    workers = distribution.num_workers(strategy)
    return train_dataset(features, global_batch_size // workers, seed, workers,
                         distribution.worker_index(strategy), padding, bucketing)
