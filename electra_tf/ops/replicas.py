"""Cross-replica helpers a step needs inside `strategy.run`: which replica this is, and sums over replicas.

Both are no-ops outside a strategy and with one replica, so the model and the training loop call them
unconditionally.

Example:

>>> from electra_tf.ops.replicas import all_reduce_sum, replica_context_info
>>> replica_context_info()
(0, 1)
>>> all_reduce_sum([1.0, 2.0])
[1.0, 2.0]
"""

from __future__ import annotations

import tensorflow as tf


def replica_context_info() -> tuple[int, int]:
    """(replica id, number of replicas) of the current replica, (0, 1) outside any strategy."""
    context = tf.distribute.get_replica_context()
    if context is None:
        return 0, 1
    return context.replica_id_in_sync_group, context.num_replicas_in_sync


def all_reduce_sum(values):
    """Sums `values` (a nest of tensors) over the replicas; a no-op with one replica."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return values
    return context.all_reduce(tf.distribute.ReduceOp.SUM, values)
