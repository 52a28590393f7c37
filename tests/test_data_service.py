"""`--data_service`: a dispatcher and two workers of our CLI (subprocesses on localhost) run the input.

The workers run in processes of their own, as in production, so a worker that failed to register the
tensorflow-text ops would fail here; a bare TensorFlow worker shows that it would.
"""

import os
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from pretrain_testutil import fake_checkpoint, tiny_config, write_shards
from test_preemption import cli_args, logged_steps, quiet_env

from electra_tf.options import TrainOptions
from electra_tf.text.manifest import load_manifest
from electra_tf.training import data_service, input_pipeline, pretraining, restore, run_record, run_setup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_TIMEOUT_S = 90
WHOAMI = "whoami.txt"  # in each worker's working directory: a relative read tells which worker ran an element


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


class Server:
    """One subprocess, its output in a file (a pipe nobody reads would fill up and block it)."""

    def __init__(self, command, log_path, cwd=ROOT):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(command, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                        env=quiet_env(PYTHONPATH=ROOT))

    def text(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def wait_for(self, needle: str, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.time() + timeout
        while needle not in self.text():
            assert self.process.poll() is None, f"exited with {self.process.returncode}: {self.text()[-3000:]}"
            assert time.time() < deadline, f"no {needle!r} after {timeout} s: {self.text()[-3000:]}"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def tasks_served(server: Server) -> list[int]:
    """The task counts a worker of our CLI logged, in order."""
    return [int(line.split(" serving ")[1].split()[0]) for line in server.text().splitlines()
            if line.startswith("worker :") and " serving " in line]


def module_command(*args) -> list[str]:
    return [sys.executable, "-m", "electra_tf.training.data_service", *args]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """`(address, [worker0, worker1])`: a dispatcher and two workers of our CLI, stopped at the end."""
    base = tmp_path_factory.mktemp("service")
    port = free_port()
    servers = [Server(module_command("dispatcher", f"--port={port}"), str(base / "dispatcher.log"))]
    try:
        for index in range(2):
            home = base / f"worker{index}"
            home.mkdir()
            (home / WHOAMI).write_text(f"worker{index}")
            servers.append(Server(module_command("worker", f"--dispatcher=localhost:{port}", f"--port={free_port()}",
                                                 "--worker_address=localhost"), str(home / "worker.log"), cwd=home))
        servers[0].wait_for("serving 2 worker(s)")
        yield f"grpc://localhost:{port}", servers[1:]
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def shards(tmp_path):
    data_dir = str(tmp_path / "shards")
    write_shards(data_dir, num_examples=64, num_shards=4)
    return data_dir


def tasks_started(server: Server) -> int:
    """How many tasks a worker of our CLI has taken so far: the rises of its logged task count. (A worker
    learns of new and released jobs by heartbeat, so one could hide the other; but a trainer's job lingers for
    minutes after it exits, and these tests come first, before the jobs of the tests below.)"""
    counts = [0] + tasks_served(server)
    return sum(max(0, now - before) for before, now in zip(counts, counts[1:]))


def wait_for_tasks(workers, expected, timeout=10 * data_service.POLL_S) -> list[int]:
    """The workers' `tasks_started`, once each reaches `expected` (or the time is up)."""
    deadline = time.time() + timeout
    while time.time() < deadline and any(tasks_started(w) < n for w, n in zip(workers, expected)):
        time.sleep(0.2)
    return [tasks_started(worker) for worker in workers]


def train_on_service(address, data_dir, model_dir, **flags):
    flags = dict(data_service=address, save_checkpoints_steps=2, log_steps=1, steps_per_loop=1, eval_batches=0,
                 **flags)
    result = subprocess.run(cli_args(data_dir, model_dir, 4, **flags), capture_output=True, text=True,
                            env=quiet_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def assert_trained_two_steps_on_the_service(result, model_dir, address, workers, before) -> None:
    """Two steps logged; one input line saying a resume will not be exact; a checkpoint without the input
    position; every worker took a task of the run's job (`before`: their task counts before the run)."""
    assert logged_steps(model_dir) == [1, 2]
    lines = [line for line in result.stderr.splitlines() if "from the tf.data service at " + address in line]
    assert len(lines) == 1 and "a resume will not be exact" in lines[0], result.stderr[-3000:]
    checkpoint = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    saved = {name.split("/")[0] for name, _ in tf.train.list_variables(checkpoint)}
    input_keys = {pretraining.input_checkpoint_key(skip) for skip in (False, True)}
    assert {"model", "optimizer", "dropout_rng"} <= saved and not saved & input_keys
    assert all(now >= n + 1 for now, n in zip(wait_for_tasks(workers, [n + 1 for n in before]), before))


@pytest.mark.slow  # ~17 s; test_raw_text_trains_on_the_service_workers trains on both workers by default
def test_pretraining_reads_from_both_workers_and_checkpoints_no_input_position(service, shards, tmp_path):
    address, workers = service
    model_dir = str(tmp_path / "run")
    before = [tasks_started(worker) for worker in workers]
    first = train_on_service(address, shards, model_dir, stop_after_steps=2)
    assert_trained_two_steps_on_the_service(first, model_dir, address, workers, before)


def test_raw_text_trains_on_the_service_workers(service, tmp_path):
    """--train_text over --data_service: the subprocess workers read, tokenise and pack the text
    (tensorflow-text ops in the graph they run) and the trainer takes its batches from them."""
    from test_text_input import PLAIN, WIKI, cli, write_text, write_vocab

    address, workers = service
    corpus = {"vocab": str(write_vocab(tmp_path)), "plain": str(write_text(tmp_path / "plain.txt", PLAIN)),
              "wiki": str(write_text(tmp_path / "wiki_00", WIKI))}
    model_dir = str(tmp_path / "run")
    before = [tasks_started(worker) for worker in workers]
    result = subprocess.run(cli(corpus, model_dir, 2, data_service=address, log_steps=1, steps_per_loop=1,
                                save_checkpoints_steps=2), capture_output=True, text=True, env=quiet_env(),
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained_two_steps_on_the_service(result, model_dir, address, workers, before)


@pytest.mark.slow
def test_a_resume_on_the_service_warns_once_that_it_is_not_exact_and_reads_a_new_job(service, shards, tmp_path):
    address, workers = service
    model_dir = str(tmp_path / "run")
    before = [tasks_started(worker) for worker in workers]
    first = train_on_service(address, shards, model_dir, stop_after_steps=2)
    assert "not exact" not in first.stderr.replace("a resume will not be exact", "")
    second = train_on_service(address, shards, model_dir)
    assert logged_steps(model_dir) == [1, 2, 3, 4]
    warnings = [line for line in second.stderr.splitlines() if "--data_service: this resume" in line]
    assert len(warnings) == 1 and "at step 2 is not exact" in warnings[0], second.stderr[-3000:]
    assert all(now >= n + 2 for now, n in zip(wait_for_tasks(workers, [n + 2 for n in before]), before))  # 2 jobs


@pytest.mark.slow  # two trainer processes (~90 s on 2 busy cores)
def test_two_trainers_of_a_run_share_one_job_each_with_its_share_of_the_batch(service, shards, tmp_path):
    from test_multi_worker import finish, start_workers

    address, _ = service
    model_dir = str(tmp_path / "run")
    trainers = start_workers(shards, model_dir, tmp_path, total=4, data_service=address, eval_batches=0)
    results = finish(trainers, timeout=400)
    assert [p.returncode for p in trainers] == [0, 0], results[1][1][-3000:] + results[0][1][-3000:]
    assert logged_steps(model_dir) == [1, 2, 3, 4]
    inputs = [[line.split("Input of worker ", 1)[1] for line in stderr.splitlines() if "Input of worker " in line]
              for _, stderr in results]
    job = data_service.job_name(model_dir, 0)
    for index, lines in enumerate(inputs):
        assert len(lines) == 1 and lines[0].startswith(f"{index}/2: batches of 4 from the tf.data service at "
                                                       f"{address}, job {job} "), lines


def tokenized_range(size: int) -> tf.data.Dataset:
    """`{index, tokens, worker}` per number: a tensorflow-text op (RegexSplitWithOffsets) runs on the worker,
    and `worker` is the content of WHOAMI in the working directory of the process that ran it."""
    def describe(index):
        text = tf.strings.join([tf.strings.as_string(index), "a b"], separator=" ")
        return {"index": index, "words": tf.size(tf_text.regex_split(text, r"\s")),
                "worker": tf.io.read_file(WHOAMI)}

    return tf.data.Dataset.range(size).map(describe)


def test_the_workers_run_a_tensorflow_text_pipeline_each_element_once(service):
    address, _ = service
    dataset = data_service.distribute(tokenized_range(200), address, job_name="test_tokenized_range")
    rows = list(dataset.as_numpy_iterator())
    assert sorted(int(row["index"]) for row in rows) == list(range(200))  # DYNAMIC: each element once
    assert {int(row["words"]) for row in rows} == {3}


def test_both_workers_serve_one_job(service):
    """Read until both have served an element of the job (the second may start a little later)."""
    address, _ = service
    dataset = data_service.distribute(tokenized_range(10**9), address, job_name="test_both_workers")
    seen, started, indices = set(), time.time(), []
    for row in dataset.as_numpy_iterator():
        seen.add(row["worker"].decode())
        indices.append(int(row["index"]))
        if len(seen) == 2 or time.time() - started > START_TIMEOUT_S:
            break
    print(f"both workers after {time.time() - started:.2f} s, {len(indices)} elements")
    assert seen == {"worker0", "worker1"}
    assert len(set(indices)) == len(indices)


def test_the_pretraining_pipeline_serves_each_example_once_per_epoch(service, shards):
    """The trainer's pipeline (less its endless repeat) through the service: the examples of one local pass."""
    address, _ = service
    manifest = load_manifest(shards)

    def rows(dataset):
        return sorted(tuple(row) for batch in dataset.as_numpy_iterator() for row in batch["input_ids"].tolist())

    local = input_pipeline.pretraining_dataset(shards, manifest, batch_size=4, seed=3, repeat=False)
    served = data_service.distribute(local, address, job_name="test_one_epoch")
    assert len(rows(local)) == manifest["num_examples"] and rows(served) == rows(local)


def test_a_worker_without_tensorflow_text_fails_on_the_op(tmp_path):
    """The negative control: a bare TensorFlow worker (its own dispatcher here, so that the tests' workers
    serve no job of it) cannot run the pipeline of the test above."""
    dispatcher = tf.data.experimental.service.DispatchServer()  # in this process, which imported tensorflow_text
    bare = Server([sys.executable, "-c",
                   "import tensorflow as tf; s = tf.data.experimental.service; "
                   f"w = s.WorkerServer(s.WorkerConfig(dispatcher_address={dispatcher.target.split('://')[1]!r})); "
                   "print('bare worker up', flush=True); import time; time.sleep(600)"], str(tmp_path / "bare.log"))
    try:
        bare.wait_for("bare worker up")
        dataset = data_service.distribute(tokenized_range(4), dispatcher.target, job_name="bare")
        with pytest.raises(tf.errors.NotFoundError, match="Op type not registered 'RegexSplitWithOffsets'"):
            list(dataset)
    finally:
        bare.stop()


def test_a_bad_address_is_refused_in_one_line_before_anything_is_written(tmp_path):
    """`run_pretraining.py` prints such a ValueError as its one error line (exit 2)."""
    data_dir, model_dir = str(tmp_path / "shards"), str(tmp_path / "run")
    write_shards(data_dir, num_examples=16, num_shards=2)
    port = free_port()  # closed again: nothing listens there
    options = TrainOptions(data_dir=data_dir, model_dir=model_dir, data_service=f"grpc://localhost:{port}")
    started = time.time()
    with pytest.raises(ValueError) as refusal:
        pretraining.train(tiny_config(), options, tf.distribute.get_strategy())
    assert time.time() - started < data_service.CONNECT_TIMEOUT_S  # refused at once, not after a timeout
    assert str(refusal.value) == (
        f"--data_service=grpc://localhost:{port}: no dispatcher answers there within "
        f"{data_service.CONNECT_TIMEOUT_S:g} s (Connection refused); start one with "
        f"`python -m electra_tf.training.data_service dispatcher --port={port}` on localhost")
    assert not os.path.exists(model_dir)


@pytest.mark.parametrize("address", ["localhost", "http://host:5050", "grpc://host", "grpc://host:port"])
def test_an_address_that_is_not_grpc_host_port_is_refused(address):
    with pytest.raises(ValueError, match=r"expected grpc://HOST:PORT"):
        data_service.check_address(address)


def test_skip_corrupt_records_is_refused_with_the_service():
    options = TrainOptions(data_dir="shards", model_dir="run", data_service="grpc://localhost:1",
                           skip_corrupt_records=True)
    with pytest.raises(ValueError, match="--data_service cannot be combined with --skip_corrupt_records"):
        run_setup.check_service_options(options)


def test_job_names_are_shared_by_a_run_and_new_at_each_resume(tmp_path):
    run = str(tmp_path / "run")
    assert data_service.job_name(run, 0) == data_service.job_name(run + "/", 0)
    assert len({data_service.job_name(run, 0), data_service.job_name(run, 2),
                data_service.job_name(str(tmp_path / "other"), 0)}) == 3


def test_the_recipe_accepts_another_service_address_but_not_another_vocabulary(tmp_path):
    model_dir, config = str(tmp_path / "run"), tiny_config()
    manifest = {"vocab_sha256": "a" * 64}

    def recipe(address, vocabulary=manifest):
        options = TrainOptions(data_dir="shards", model_dir=model_dir, data_service=address)
        return run_record.recipe_options(options, vocabulary)

    run_record.check_start(model_dir, config, options=recipe("grpc://a:5050"))
    fake_checkpoint(model_dir)  # a resume: the record binds
    run_record.check_start(model_dir, config, options=recipe("grpc://b:6060"))
    run_record.check_start(model_dir, config, options=recipe(None))
    with pytest.raises(ValueError, match=f"sha256 {'b' * 64}.* is not the vocabulary --model_dir .* recorded .*"
                                         f"sha256 {'a' * 64}"):
        run_record.check_start(model_dir, config, options=recipe("grpc://a:5050", {"vocab_sha256": "b" * 64}))
    with open(os.path.join(model_dir, "run_config.json")) as f:
        assert "grpc://" not in f.read()


@pytest.mark.parametrize("saved_by", ["data_service", "other_pipeline"])
def test_a_checkpoint_without_this_pipelines_input_says_why_it_replays(saved_by, tmp_path, caplog):
    """A --data_service checkpoint holds no input position: resumed without the service, the replay's line says so
    (it once called it a run with --skip_corrupt_records); the other pipeline's checkpoint keeps its line."""
    import logging

    input_key, other_key = pretraining.input_checkpoint_key(False), pretraining.input_checkpoint_key(True)
    dataset = tf.data.Dataset.range(10)
    state = {"step": tf.Variable(3)}
    if saved_by == "other_pipeline":
        state[other_key] = iter(dataset)
    path = tf.train.Checkpoint(**state).save(str(tmp_path / "ckpt"))
    iterator = iter(dataset)
    with caplog.at_level(logging.WARNING, logger="absl"):
        restore.replay_input(iterator, 3, None, False, path, other_key=other_key)
    assert int(next(iterator)) == 3  # three batches read again
    assert not restore.saves(path, input_key)
    line = {"data_service": "holds no input position (a run fed by --data_service saved it): reading the input's "
                            "first 3 batches again",
            "other_pipeline": "holds the input position of a run with --skip_corrupt_records: reading the input's "
                              "first 3 batches again"}[saved_by]
    assert line in caplog.text, caplog.text
