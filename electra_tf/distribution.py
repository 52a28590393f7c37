"""Choosing a `tf.distribute` strategy and a mixed-precision policy from flags.

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
