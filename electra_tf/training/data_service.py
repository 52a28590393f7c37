"""The input pipeline on a tf.data service: a dispatcher and N worker processes run it, trainers read from them.

When the trainers' CPUs cannot keep up with their accelerators (parsing, shuffling, tokenizing raw text),
`run_pretraining.py --data_service=grpc://host:port` hands the pipeline to a tf.data service
(`tf.data.experimental.service`): the trainer serialises its dataset graph, the dispatcher splits its
input files among the workers, the workers run it and stream batches back.

Processing mode: `ShardingPolicy.DYNAMIC`. The dispatcher hands the shard files, one at a time, to whichever
worker asks next, so within an epoch every file (every example) is read by exactly one worker, and a slow
worker simply reads fewer files. `ShardingPolicy.OFF` would run the whole pipeline on every worker: with the
same seed each of them would serve the same batches. What is lost: the order. Which worker reads which file,
and which worker's batch a trainer gets next, depend on timing; a batch holds examples of one worker's files
only; and the input position cannot be checkpointed, so a resumed run reads from a new job (see `job_name`),
not from where it stopped. Trainers of one run (several `--strategy=multi_worker` processes) share the job,
and each batch goes to one of them.

Workers and the dispatcher import tensorflow_text before they start: the dataset graphs they run (and the
dispatcher splits, in DYNAMIC mode) may hold its ops (`WordPieceTokenizer`, `regex_split`, and with a
SentencePiece `--vocab_file` its `SentencepieceOp`, the model's bytes inside the graph), and a process
without them fails with "Op type not registered 'RegexSplitWithOffsets'". The `--data_dir` paths inside
the graph must be readable at the same path by every worker (GCS, NFS).

Command line (each blocks until killed):

    python -m electra_tf.training.data_service dispatcher --port=5050 [--work_dir=gs://bucket/dispatcher]
    python -m electra_tf.training.data_service worker --dispatcher=host:5050 --port=5051 [--worker_address=host]

Example (a dispatcher and a worker in this process, an address check, a distributed dataset):

>>> import tensorflow as tf
>>> from electra_tf.training import data_service
>>> dispatcher = tf.data.experimental.service.DispatchServer()
>>> worker = tf.data.experimental.service.WorkerServer(tf.data.experimental.service.WorkerConfig(
...     dispatcher_address=dispatcher.target.split("://")[1]))
>>> address = data_service.check_address(dispatcher.target, timeout=5)
>>> dataset = data_service.distribute(tf.data.Dataset.range(6), address, job_name="doctest")
>>> sorted(int(x) for x in dataset)
[0, 1, 2, 3, 4, 5]
>>> data_service.check_address("localhost", timeout=5)
Traceback (most recent call last):
ValueError: --data_service='localhost': expected grpc://HOST:PORT of a tf.data service dispatcher
"""

import argparse
import hashlib
import os
import re
import socket
import sys
import time

PROTOCOL = "grpc"
PROCESSING_MODE = "DYNAMIC"  # a `ShardingPolicy` name: each file to one worker per epoch (module docstring)
CONNECT_TIMEOUT_S = 10.0
POLL_S = 1.0  # how often a server process checks what it serves (for its log lines)
_ADDRESS = re.compile(r"^(?:grpc://)?(?P<host>\[[^\]]+\]|[^:/\s]+):(?P<port>\d{1,5})$")


def check_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> str:
    """`address` as `grpc://host:port` once a TCP connection to it opens within `timeout` seconds;
    ValueError in one line otherwise (a client of a missing dispatcher would wait forever)."""
    match = _ADDRESS.match(address or "")
    if not match:
        raise ValueError(f"--data_service={address!r}: expected grpc://HOST:PORT of a tf.data service dispatcher")
    host, port = match.group("host").strip("[]"), int(match.group("port"))
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise ValueError(f"--data_service={address}: no dispatcher answers there within {timeout:g} s "
                         f"({e.strerror or e}); start one with `python -m electra_tf.training.data_service "
                         f"dispatcher --port={port}` on {host}") from None
    return f"{PROTOCOL}://{match.group('host')}:{port}"


def job_name(model_dir: str, step: int) -> str:
    """The service job of a run's (re)start at `step`: the same for every trainer of the run (they share
    its batches), another one for every resume (the service keeps no position to resume from)."""
    where = model_dir if "://" in model_dir else os.path.abspath(model_dir)
    return f"electra_{hashlib.sha256(where.encode()).hexdigest()[:12]}_from_step_{step}"


def distribute(dataset, address: str, *, job_name: str, processing_mode: str = PROCESSING_MODE):
    """`dataset`, run by the workers of the tf.data service at `address` (`grpc://host:port`) in the shared
    job `job_name`; `processing_mode` names a `tf.data.experimental.service.ShardingPolicy`."""
    import tensorflow as tf

    service = tf.data.experimental.service
    return dataset.apply(service.distribute(processing_mode=getattr(service.ShardingPolicy, processing_mode),
                                            service=address, job_name=job_name))


def import_custom_ops() -> None:
    """Registers the ops our input pipelines may use, in a server process (before it runs any graph)."""
    import tensorflow_text  # noqa: F401  (registers RegexSplitWithOffsets, WordpieceTokenizeWithOffsets,
    # SentencepieceOp, SentencepieceTokenizeOp, ...)


def run_dispatcher(port: int, work_dir: str | None = None):
    """Starts a dispatcher on `port`; with `work_dir` (shared storage) it journals its state there and a
    restarted dispatcher recovers its jobs (fault-tolerant mode)."""
    import_custom_ops()
    import tensorflow as tf

    service = tf.data.experimental.service
    config = service.DispatcherConfig(port=port, protocol=PROTOCOL, work_dir=work_dir,
                                      fault_tolerant_mode=bool(work_dir))
    server = service.DispatchServer(config)
    print(f"tf.data service dispatcher serving {server.target} (processing mode {PROCESSING_MODE}; "
          f"{'state journaled in ' + work_dir if work_dir else 'no --work_dir: its jobs are lost if it restarts'})",
          flush=True)
    return server


def run_worker(dispatcher: str, port: int, worker_address: str):
    """Starts a worker on `port` that registers with `dispatcher` (host:port) and tells trainers to reach
    it at `worker_address`:port."""
    import_custom_ops()
    import tensorflow as tf

    service = tf.data.experimental.service
    dispatcher = dispatcher.split("://", 1)[-1]
    config = service.WorkerConfig(dispatcher_address=dispatcher, port=port, protocol=PROTOCOL,
                                  worker_address=f"{worker_address}:%port%")
    server = service.WorkerServer(config)
    print(f"tf.data service worker serving {worker_address}:{port} for dispatcher {dispatcher} "
          "(tensorflow_text ops registered)", flush=True)
    return server


def serve_forever(server, name: str, count_name: str, unit: str) -> None:
    """Blocks while `server` runs, printing a line whenever its count `count_name` changes (a dispatcher's
    registered workers; a worker's tasks, one per job it reads for)."""
    count = getattr(server, count_name, None)  # private tf.data API: without it, just join
    if count is None:
        server.join()
        return
    served = 0
    while True:
        now = count()
        if now != served:
            print(f"{name} serving {now} {unit}", flush=True)
            served = now
        time.sleep(POLL_S)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m electra_tf.training.data_service",
                                     description="Run a tf.data service dispatcher or worker (blocks).")
    commands = parser.add_subparsers(dest="command", required=True)
    dispatcher = commands.add_parser("dispatcher", help="the service's coordinator (one per service)")
    dispatcher.add_argument("--port", type=int, default=5050)
    dispatcher.add_argument("--work_dir", default=None,
                            help="shared storage for the dispatcher's journal (fault tolerance)")
    worker = commands.add_parser("worker", help="runs input pipelines (as many as the trainers need)")
    worker.add_argument("--dispatcher", required=True, help="the dispatcher's host:port")
    worker.add_argument("--port", type=int, default=5051)
    worker.add_argument("--worker_address", default=socket.getfqdn(),
                        help="the host name trainers reach this worker at (default: this host's name)")
    args = parser.parse_args(argv)
    if args.command == "dispatcher":
        serve_forever(run_dispatcher(args.port, args.work_dir), f"dispatcher :{args.port}", "_num_workers",
                      "worker(s)")
    else:
        serve_forever(run_worker(args.dispatcher, args.port, args.worker_address), f"worker :{args.port}",
                      "_num_tasks", "task(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
