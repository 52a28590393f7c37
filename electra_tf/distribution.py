"""`tf.distribute` in one place: choosing a strategy and precision, and the replica/worker helpers.

Everything that asks a strategy about replicas or workers goes through the
functions here, so private `strategy.extended` attributes are read in one place.

Example:

>>> from electra_tf.distribution import create_strategy
>>> create_strategy("one_device").num_replicas_in_sync
1
"""

import keras
import tensorflow as tf
from absl import logging

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
PRECISIONS = {"none": "float32", "fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def split_cpu(num_devices: int):
    """Splits the CPU into `num_devices` logical devices (for testing MirroredStrategy)."""
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_devices)


def _tpu_strategy(tpu_address):
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def create_strategy(name: str = "auto", tpu_address: str | None = None) -> tf.distribute.Strategy:
    """`auto`: TPU if `tpu_address` is given, all GPUs mirrored if several, else one device."""
    if name not in STRATEGIES:
        raise ValueError(f"--strategy: unknown strategy {name!r}; choose from {STRATEGIES}")
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        name = "tpu" if tpu_address else "mirrored" if len(gpus) > 1 else "one_device"
    if name == "tpu":
        strategy = _tpu_strategy(tpu_address)
    elif name == "multi_worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    logging.info("Strategy %s with %d replica(s)", type(strategy).__name__, strategy.num_replicas_in_sync)
    return strategy


def set_mixed_precision(name: str | None) -> str:
    """Sets Keras' global dtype policy from `none|bf16|fp16`; returns the policy name."""
    name = name or "none"
    if name not in PRECISIONS:
        raise ValueError(f"--mixed_precision: unknown value {name!r}; choose from {sorted(PRECISIONS)}")
    keras.mixed_precision.set_global_policy(PRECISIONS[name])
    return PRECISIONS[name]


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


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """Worker processes (hosts) in the cluster; 1 for single-host strategies."""
    return getattr(strategy.extended, "_num_workers", 1) or 1


def worker_index(strategy: tf.distribute.Strategy) -> int:
    """This process's index among the workers (0 = chief for MultiWorkerMirroredStrategy)."""
    return getattr(strategy.extended, "_task_id", 0) or 0


def split_for_replicas(strategy: tf.distribute.Strategy, worker_batch):
    """Per-replica values: replica r of this worker gets the r-th consecutive slice."""
    local_replicas = strategy.num_replicas_in_sync // num_workers(strategy)
    if local_replicas == 1 and strategy.num_replicas_in_sync == 1:
        return worker_batch

    def slice_for(context):
        index = context.replica_id_in_sync_group % local_replicas
        return tf.nest.map_structure(lambda t: tf.split(t, local_replicas)[index], worker_batch)

    return strategy.experimental_distribute_values_from_function(slice_for)
