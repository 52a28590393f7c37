"""SIGTERM (schedulers, pre-emptible VMs): a checkpoint at the step reached, exit 0, and an exact resume."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from pretrain_testutil import tiny_config, write_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHITECTURE = ("vocab_size", "embedding_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                "generator_hidden_size", "generator_num_heads", "generator_intermediate_size",
                "generator_num_layers", "max_position_embeddings", "max_seq_length", "dropout_rate")


def cli_args(data_dir, model_dir, num_train_steps, **flags) -> list[str]:
    """`run_pretraining.py` on the 1-layer tiny model of tests/pretrain_testutil.py (seq 32, batch 8)."""
    dropout = flags.pop("dropout", 0.1)
    config = tiny_config(num_layers=1, generator_num_layers=1, dropout_rate=dropout)
    hparams = {k: v for k, v in config.to_dict().items() if k in ARCHITECTURE}
    flags = {"model_size": "tiny", "data_dir": data_dir, "model_dir": model_dir, "hparams": json.dumps(hparams),
             "train_batch_size": 8, "num_train_steps": num_train_steps, "num_warmup_steps": 2, **flags}
    return [sys.executable, os.path.join(ROOT, "run_pretraining.py")] + [f"--{k}={v}" for k, v in flags.items()]


def quiet_env(**extra) -> dict:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **extra}


def logged_steps(model_dir) -> list[int]:
    path = os.path.join(model_dir, "train_log.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line)["step"] for line in f if line.endswith("\n")]


def wait_for_step(model_dir, step, processes, timeout):
    """Waits until train_log.jsonl reaches `step`; fails if a process ends first or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if max(logged_steps(model_dir), default=0) >= step:
            return
        ended = [p for p in processes if p.poll() is not None]
        assert not ended, f"exited early with {ended[0].returncode}: {ended[0].communicate()[1][-3000:]}"
        time.sleep(0.05)
    pytest.fail(f"no step {step} in {model_dir}/train_log.jsonl after {timeout} s")


def checkpoint_values(model_dir, step=None):
    directory = os.path.join(model_dir, "checkpoints")
    reader = tf.train.load_checkpoint(os.path.join(directory, f"ckpt-{step}") if step else directory)
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith(("model/", "optimizer/"))]
    return {n: reader.get_tensor(n) for n in names}


def checkpoint_steps(model_dir) -> list[int]:
    directory = os.path.join(model_dir, "checkpoints")
    return sorted(int(name[len("ckpt-"):-len(".index")]) for name in os.listdir(directory)
                  if name.startswith("ckpt-") and name.endswith(".index"))


def optimizer_step(values) -> int:
    return int(values["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"])


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=96, num_shards=3)
    return path


@pytest.mark.slow  # ~70 s of two CLI runs; by default test_multi_worker stops two workers by SIGTERM and resumes them exactly
def test_sigterm_checkpoints_the_step_reached_exits_0_and_the_rerun_equals_an_uninterrupted_run(data_dir, tmp_path):
    total = 300  # a few seconds of steps, so SIGTERM lands mid-run; dropout on: its RNG state must resume too
    flags = dict(log_steps=25, steps_per_loop=100, save_checkpoints_steps=1000)
    stopped_dir, full_dir = str(tmp_path / "stopped"), str(tmp_path / "full")
    full = subprocess.Popen(cli_args(data_dir, full_dir, total, **flags), cwd=ROOT, env=quiet_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = subprocess.Popen(cli_args(data_dir, stopped_dir, total, **flags), cwd=ROOT, env=quiet_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_step(stopped_dir, 25, [run], timeout=240)
        run.send_signal(signal.SIGTERM)
        sent = time.time()
        out, err = run.communicate(timeout=60)
        elapsed = time.time() - sent
    finally:
        run.kill()
    assert run.returncode == 0, f"exit {run.returncode} {elapsed:.1f} s after SIGTERM: {err[-3000:]}"
    # Promptness is asserted by steps, not seconds (the machine's load sets the seconds): the run
    # stopped short of its 300 steps and says where, rather than finishing or dying of the signal.
    (reached,) = checkpoint_steps(stopped_dir)  # no save_checkpoints_steps multiple was reached
    assert 25 <= reached < total and f"Stopped at step {reached} of {total} (SIGTERM)" in out, out[-2000:]
    assert optimizer_step(checkpoint_values(stopped_dir)) == reached
    assert not os.path.exists(os.path.join(stopped_dir, "export"))

    rerun = subprocess.run(cli_args(data_dir, stopped_dir, total, **flags), cwd=ROOT, env=quiet_env(),
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"from step {reached} to {total}" in rerun.stderr
    full_out, full_err = full.communicate(timeout=300)
    assert full.returncode == 0, full_err[-3000:]
    assert checkpoint_steps(stopped_dir) == [reached, total] and checkpoint_steps(full_dir) == [total]
    resumed, uninterrupted = checkpoint_values(stopped_dir), checkpoint_values(full_dir)
    assert set(resumed) == set(uninterrupted) and optimizer_step(resumed) == total
    for key, value in uninterrupted.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)
    assert os.path.isdir(os.path.join(stopped_dir, "export"))
