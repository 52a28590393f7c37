"""`--skip_corrupt_records`: the records a run lost, each counted once, over every worker.

TensorFlow's TFRecord reader gives up on the rest of a shard at a corrupt (or truncated) record, and a
shard is the same file every pass over the data, so each pass loses the same tail of it: the records
lost are `expected - read` at the end, and the distinct ones over the run are the largest tail any
pass lost, not the sum over passes. `SkippedRecords` keeps that largest tail per shard (a checkpointed
variable), logs a shard when its loss first appears (or grows), and writes the run's summary line.

With `--input_sharding=file` each worker reads its own shards and counts only those; at every log step
`gather` takes the element-wise maximum over the workers (a collective, so every worker calls it at the
same steps), and the chief's scalar and summary line count every shard. The maximum, not the sum: when
there are fewer shards than workers every worker reads every shard, and a pass's loss rides on one
record, which reaches one worker or another.
"""

import os

import numpy as np
import tensorflow as tf
from absl import logging

from electra_tf.training import distribution, input_pipeline


class SkippedRecords:
    """Records lost per shard (`by_shard`, checkpointed with the input), their log lines and the summary line."""

    def __init__(self, data_dir: str, manifest: dict):
        self.paths = [os.path.join(data_dir, name) for name in manifest["shards"]]
        self.data_dir = data_dir
        self.expected = input_pipeline.shard_record_counts(data_dir, manifest)
        self.report = input_pipeline.SkipReport(len(self.paths))
        self.by_shard = tf.Variable(tf.zeros([len(self.paths)], tf.int64), trainable=False, name="skipped_records")
        self.all_workers = None  # the last `gather`'s counts (None: this worker's own are all there is)
        self._max_over_workers = None

    def counts(self) -> np.ndarray:
        """Per shard, the records lost: over every worker as of the last `gather`, else this worker's."""
        return self.by_shard.numpy() if self.all_workers is None else self.all_workers

    @property
    def total(self) -> int:
        return int(self.counts().sum())

    def add(self, outputs: dict, step: int) -> None:
        """Takes in the skips a call of the step driver (or a replay) reported; logs the shards whose loss is new."""
        lost, passes = outputs["skipped_by_shard"].numpy(), outputs["skip_events_by_shard"].numpy()
        per_pass = lost // np.maximum(passes, 1)  # a call may span several passes over a shard: each lost the same
        before = self.by_shard.numpy()
        after = np.maximum(before, per_pass)
        if (after == before).all():
            return
        self.by_shard.assign(after)
        if self.all_workers is not None:
            self.all_workers = np.maximum(self.all_workers, after)
        for index in np.flatnonzero(after > before):
            logging.warning("%s", self.event_line(index, int(after[index]), step))

    def gather(self, strategy, step: int) -> None:
        """Takes in every worker's counts (collective: every worker calls it at the same steps); the chief
        logs the shards whose loss another worker met."""
        if self._max_over_workers is None:
            self._max_over_workers = max_over_workers_fn(strategy)
        seen_here = self.counts()
        self.all_workers = np.maximum(self._max_over_workers(self.by_shard).numpy(), self.by_shard.numpy())
        if distribution.is_chief(strategy):
            for index in np.flatnonzero(self.all_workers > seen_here):
                logging.warning("%s", self.event_line(index, int(self.all_workers[index]), step, "another worker"))

    def event_line(self, index: int, lost: int, step: int, reader: str = "") -> str:
        at = self.expected[index] - lost  # the reader stops at the same record every pass
        offset = input_pipeline.record_offset(self.paths[index], at)
        where = f"record {at}" + (f", byte offset {offset}" if offset is not None else "")
        by = f" (read by {reader})" if reader else ""
        return (f"skipped corrupt data by step {step}{by}: {self.paths[index]}: {where}: not readable, the reader "
                f"gave up on the rest of the shard: {lost} of its {self.expected[index]} records not read; "
                f"{self.total} skipped so far")

    def summary(self) -> str:
        lost = self.counts()
        if not lost.any():
            return "--skip_corrupt_records: no corrupt records met; none skipped"
        shards = ", ".join(f"{self.paths[i]} ({lost[i]})" for i in np.flatnonzero(lost))
        return (f"--skip_corrupt_records: skipped {lost.sum()} record(s) not readable in "
                f"{np.count_nonzero(lost)} shard(s): {shards}; check them with `python -m data_prep.inspect_shards "
                f"--verify {self.data_dir}`")


def max_over_workers_fn(strategy):
    """`fn(vector)`: the element-wise maximum of the vector each worker passes, over all workers (collective)."""

    def replica_value(value):
        return tf.expand_dims(tf.identity(value), 0)

    def max_over_workers(value):
        return max_over_replicas(strategy, strategy.run(replica_value, args=(value,)))

    return tf.function(max_over_workers, autograph=False)


def max_over_replicas(strategy, per_replica):
    """The element-wise maximum of per-replica `[1, n]` vectors: an all-gather (`tf.distribute` reduces by sum or
    mean only, and a sum would count a shard every worker read once per worker)."""
    return tf.reduce_max(strategy.gather(per_replica, axis=0), axis=0)
