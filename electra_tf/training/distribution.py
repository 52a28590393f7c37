"""`tf.distribute` in one place: choosing a strategy and precision, and the replica/worker helpers.

Everything that asks a strategy about replicas or workers goes through the
functions here, so private `strategy.extended` attributes are read in one place.

`MultiWorkerMirroredStrategy` must exist before TensorFlow runs its first op
(it configures collective ops at start-up): `create_strategy` touches nothing
that initialises the runtime, and `run_pretraining.py` calls it first.

Example:

>>> from electra_tf.training.distribution import create_strategy
>>> create_strategy("one_device").num_replicas_in_sync
1
"""

import dataclasses
import json
import os
import weakref

import keras
import tensorflow as tf
from absl import logging

from electra_tf.options import PRECISIONS, STRATEGIES, ExecutionOptions, only_cpus
from electra_tf.runtime import FROZEN_WEIGHTS_ENV, frozen_weights_assumed, onednn_enabled

# Strategies whose input iterators yield the whole global batch on every worker (see `split_for_replicas`).
_GLOBAL_BATCH_INPUT = weakref.WeakSet()


def split_cpu(num_devices: int):
    """Splits the CPU into `num_devices` logical devices (for testing MirroredStrategy)."""
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_devices)


def _tpu_strategy(tpu_address):
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def tf_config_from_hosts(worker_hosts: str, task_index: int) -> str:
    """The `TF_CONFIG` JSON for worker `task_index` of `worker_hosts` ("host:port,host:port,...").

    Worker 0 is the chief. Every worker gets the same list, in the same order.

    >>> json.loads(tf_config_from_hosts("10.0.0.1:2222,10.0.0.2:2222", 1))["task"]
    {'type': 'worker', 'index': 1}
    """
    hosts = [h.strip() for h in worker_hosts.split(",") if h.strip()]
    bad = [h for h in hosts if h.count(":") < 1 or not h.rsplit(":", 1)[1].isdigit()]
    if not hosts or bad:
        raise ValueError(f"--worker_hosts: expected host:port,host:port,...; got {worker_hosts!r}")
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"--worker_hosts lists an address twice: {worker_hosts!r}")
    if task_index is None or not 0 <= task_index < len(hosts):
        raise ValueError(f"--task_index must be in [0, {len(hosts)}) for {len(hosts)} --worker_hosts; "
                         f"got {task_index}")
    return json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": task_index}})


def create_strategy(name: str = "auto", tpu_address: str | None = None,
                    collective_timeout_seconds: float | None = None,
                    cpu_devices: int | None = None) -> tf.distribute.Strategy:
    """`auto`: TPU if `tpu_address` is given, all GPUs mirrored if several (or the `cpu_devices` logical CPUs
    the entry point made with `split_cpu`, if several), else one device.

    `multi_worker` reads the cluster from `TF_CONFIG` and must be created before any
    TensorFlow op runs. `collective_timeout_seconds` (multi_worker only; None or 0: off)
    makes a collective that waits longer than that for another worker raise
    `DeadlineExceededError` instead of hanging on a stuck worker (a dead one is detected
    anyway, by the coordination service's heartbeats). TensorFlow keeps a thread per
    collective for that long, so it is a debugging aid, not a default.
    """
    if name not in STRATEGIES:
        raise ValueError(f"--strategy: unknown strategy {name!r}; choose from {STRATEGIES}")
    # Physical, not logical, devices: listing logical ones initialises the runtime, after
    # which MultiWorkerMirroredStrategy can no longer configure its collective ops.
    gpus = tf.config.list_physical_devices("GPU")
    if name == "auto":
        name = "tpu" if tpu_address else "mirrored" if len(gpus) > 1 or (cpu_devices or 1) > 1 else "one_device"
    if name == "tpu":
        strategy = _tpu_strategy(tpu_address)
    elif name == "multi_worker":
        if not os.environ.get("TF_CONFIG"):
            logging.warning("--strategy=multi_worker without TF_CONFIG (or --worker_hosts): one worker")
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=collective_timeout_seconds or None)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    elif name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    logging.info("Strategy %s with %d replica(s) on %d worker(s)", type(strategy).__name__,
                 strategy.num_replicas_in_sync, num_workers(strategy))
    return strategy


def set_mixed_precision(name: str | None) -> str:
    """Sets Keras' global dtype policy from `none|bf16|fp16`; returns the policy name."""
    name = name or "none"
    if name not in PRECISIONS:
        raise ValueError(f"--mixed_precision: unknown value {name!r}; choose from {sorted(PRECISIONS)}")
    keras.mixed_precision.set_global_policy(PRECISIONS[name])
    return PRECISIONS[name]


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """Worker processes (hosts) in the cluster; 1 for single-host strategies."""
    return getattr(strategy.extended, "_num_workers", 1) or 1


def worker_index(strategy: tf.distribute.Strategy) -> int:
    """This process's index among the workers (0 = chief for MultiWorkerMirroredStrategy)."""
    return getattr(strategy.extended, "_id_in_cluster", 0) or 0


def device_types(strategy) -> set:
    """The kinds of device ("CPU", "GPU", "TPU") that `strategy`'s replicas run on."""
    try:
        devices = [tf.DeviceSpec.from_string(device).device_type for device in strategy.extended.worker_devices]
    except RuntimeError:  # the default strategy places ops on an accelerator if there is one
        return {device.device_type for device in tf.config.list_logical_devices()}
    return set(devices)


def all_cpu(strategy) -> bool:
    """Whether every device `strategy` runs on is a CPU."""
    return only_cpus(device_types(strategy))


@dataclasses.dataclass(frozen=True)
class MicroBatches:
    """How many micro-batches a replica's batch runs as, who chose it ("flag", "memory", "recorded"),
    and, when a resumed run departs from its recorded choice, the one line that says so."""

    count: int
    chosen_by: str
    note: str | None = None


def choose_micro_batches(requested: int | None, devices: set, config, replicas: int,
                         recorded: int | None = None) -> MicroBatches:
    """--gradient_accumulation_steps, else the run's recorded choice, else (CPUs only) the fewest
    micro-batches whose activations fit the memory free now; 1 elsewhere."""
    fitted = 1
    per_replica = max(config.train_batch_size // max(replicas, 1), 1)
    if only_cpus(devices) and requested is None:
        from electra_tf.training import cost

        available = cost.available_memory_bytes()
        if available:
            fitted = cost.micro_batches_to_fit(config, per_replica, available // max(replicas, 1))
    if requested is not None:
        note = None if recorded in (None, requested) else (
            f"resuming with {requested} micro-batch(es) per replica batch (--gradient_accumulation_steps) instead "
            f"of the {recorded} this run recorded: gradients are summed in another order, so the losses differ "
            "from an uninterrupted run's in the last bits")
        return MicroBatches(requested, "flag", note)
    if recorded is None:
        return MicroBatches(fitted, "memory" if fitted > 1 else "flag")
    if fitted > recorded:
        return MicroBatches(fitted, "memory", (
            f"the memory free now does not fit the {recorded} micro-batch(es) this run recorded: resuming with "
            f"{fitted} (gradients are summed in another order, so the losses differ from an uninterrupted run's "
            "in the last bits)"))
    return MicroBatches(recorded, "recorded" if recorded > 1 else "flag")


def check_batch_split(batch_size: int, replicas: int, micro_batches: int) -> None:
    """Refuses, in one line, a global batch that replicas × micro-batches does not divide."""
    if batch_size % (replicas * micro_batches):
        raise ValueError(f"--train_batch_size={batch_size} must be a multiple of {replicas} replica(s) × "
                         f"{micro_batches} micro-batch(es) (--gradient_accumulation_steps) = "
                         f"{replicas * micro_batches}")


def check_frozen_weights(devices) -> None:
    """Refuses, in one line, a run on CPUs whose oneDNN kernels assume frozen weights
    (`TF_ONEDNN_ASSUME_FROZEN_WEIGHTS`): a fused matmul (grappler's matmul + bias, in every function it optimises:
    the evaluations' always, the training loop's with --graph_optimizer=on) then keeps the weights of its first call
    while the run changes them: evaluations score stale weights, and with grappler on so do the training steps
    (`bench/results/frozen-weights-finetuning.json`)."""
    if "CPU" in devices and frozen_weights_assumed() and onednn_enabled():
        raise ValueError(f"{FROZEN_WEIGHTS_ENV}={os.environ[FROZEN_WEIGHTS_ENV]}: oneDNN's fused matmuls would keep "
                         "the weights of their first call while this run trains or evaluates changing ones; unset it "
                         "(it is for serving a fixed model)")


def resolve_execution(requested: ExecutionOptions, strategy, config, recorded_micro_batches: int | None = None,
                      batch_size: int | None = None) -> tuple[ExecutionOptions, MicroBatches]:
    """The run's execution options, decided once, here, for `strategy`'s devices, the Keras backend,
    the model's activation and (its micro-batches) the memory; logged in one line. Every layer
    and loop of the run takes the result explicitly. Raises ValueError for a batch the replicas and
    micro-batches do not divide (`batch_size`, default the config's), before anything is built."""
    devices = device_types(strategy)
    replicas = strategy.num_replicas_in_sync
    micro = choose_micro_batches(requested.gradient_accumulation_steps, devices, config, replicas,
                                 recorded_micro_batches)
    resolved = requested.resolve(devices, keras.backend.backend(), config.hidden_act, micro.count)
    check_batch_split(batch_size or config.train_batch_size, replicas, resolved.gradient_accumulation_steps)
    check_frozen_weights(devices)
    logging.info("Execution on %s: %s", "+".join(sorted(devices)), resolved.describe())
    if micro.note:
        logging.warning("%s", micro.note)
    return resolved, micro


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes checkpoints, summaries and exports (worker 0)."""
    return worker_index(strategy) == 0


def barrier(strategy: tf.distribute.Strategy):
    """Returns once every worker has called it (a one-number all-reduce); a no-op with one worker."""
    if num_workers(strategy) == 1:
        return

    def one():
        return tf.constant(1.0)

    def sync():
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(one), axis=None)

    tf.function(sync, autograph=False)()


def feed_global_batches(strategy: tf.distribute.Strategy):
    """Declares that this strategy's input iterators yield the whole global batch on every worker.

    `split_for_replicas` then hands replica r (global id) the r-th consecutive slice of it,
    as one process would; without it each worker's batch is split among its local replicas.
    """
    _GLOBAL_BATCH_INPUT.add(strategy)


def split_for_replicas(strategy: tf.distribute.Strategy, worker_batch):
    """Per-replica values: replica r gets the r-th consecutive slice.

    `worker_batch` is this worker's rows (sliced among its local replicas) or, after
    `feed_global_batches(strategy)`, the global batch (sliced among all replicas).
    """
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        return worker_batch
    whole = strategy in _GLOBAL_BATCH_INPUT
    parts = replicas if whole else replicas // num_workers(strategy)

    def slice_for(context):
        index = context.replica_id_in_sync_group % parts
        return tf.nest.map_structure(lambda t: tf.split(t, parts)[index], worker_batch)

    return strategy.experimental_distribute_values_from_function(slice_for)
