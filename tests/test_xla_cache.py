"""The persistent XLA:CPU kernel cache the entry points turn on (`electra_tf.runtime.use_xla_cache`).

A run after the first loads its kernels instead of compiling them; what it trains must not change by a bit, and a
cache must never be read by a TensorFlow or a CPU that did not write it.
"""

import json
import os
import subprocess
import sys
from unittest import mock

import numpy as np
import pytest

from conftest import UNOPTIMISED_KERNELS
from electra_tf import runtime
from electra_tf.convert.export_dir import PRETRAINER_WEIGHTS
from pretrain_testutil import h5_arrays, write_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def clean_env(monkeypatch):
    """No TF_XLA_FLAGS (the suite's own session cache is in it) and no XLA_FLAGS."""
    monkeypatch.delenv(runtime.XLA_ENV, raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    return monkeypatch


def test_a_named_directory_gets_a_subdirectory_per_version_and_cpu_for_cpu_kernels_only(clean_env, tmp_path):
    directory = runtime.use_xla_cache(str(tmp_path / "cache"))
    assert directory == str(tmp_path / "cache" / runtime.xla_cache_key()) and os.path.isdir(directory)
    assert os.environ[runtime.XLA_ENV].split() == [f"--tf_xla_persistent_cache_directory={directory}",
                                                  "--tf_xla_persistent_cache_device_types=CPU"]


def test_the_default_is_under_the_users_cache_and_off_is_none(clean_env, tmp_path):
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert runtime.use_xla_cache("auto") == str(tmp_path / "electra_tf" / "xla" / runtime.xla_cache_key())
    clean_env.delenv(runtime.XLA_ENV)
    assert runtime.use_xla_cache("off") is None and runtime.XLA_ENV not in os.environ


def test_a_cache_already_in_the_environment_wins(clean_env, tmp_path):
    flags = f"--tf_xla_min_cluster_size=2 --tf_xla_persistent_cache_directory={tmp_path}/mine"
    clean_env.setenv(runtime.XLA_ENV, flags)
    assert runtime.use_xla_cache(str(tmp_path / "other")) == f"{tmp_path}/mine"
    assert os.environ[runtime.XLA_ENV] == flags and not (tmp_path / "other").exists()


def test_the_key_changes_with_the_cpu_the_tensorflow_and_xla_flags(clean_env):
    key = runtime.xla_cache_key()
    clean_env.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
    assert runtime.xla_cache_key() != key
    clean_env.delenv("XLA_FLAGS")
    clean_env.setattr(runtime, "cpu_description", lambda: "GenuineIntel Some Xeon flags sse avx2")
    assert runtime.xla_cache_key() != key
    clean_env.undo()
    from importlib import metadata

    real = metadata.version
    clean_env.setattr(metadata, "version", lambda name: "9.9.9" if name == "tensorflow" else real(name))
    assert runtime.xla_cache_key().startswith("tf9.9.9-")


def test_a_directory_that_cannot_be_made(clean_env, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match=r"--xla_cache_dir=.*file/sub: cannot create"):
        runtime.use_xla_cache(str(blocker / "sub"))
    clean_env.setenv("XDG_CACHE_HOME", str(blocker))  # auto: goes without, and says so
    assert runtime.use_xla_cache("auto") is None and runtime.XLA_ENV not in os.environ
    assert "no XLA kernel cache" in capsys.readouterr().err


def test_the_script_refuses_a_cache_it_cannot_make_in_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    env = {k: v for k, v in os.environ.items() if k != runtime.XLA_ENV}
    result = subprocess.run([sys.executable, os.path.join(ROOT, "run_pretraining.py"), "--model_size=tiny",
                             f"--model_dir={tmp_path / 'run'}", f"--xla_cache_dir={blocker / 'sub'}"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "--xla_cache_dir=" in result.stderr and "cannot create" in result.stderr
    assert not (tmp_path / "run").exists()


def users_environment() -> dict:
    """This process's environment as a user's run gets it: no TF_XLA_FLAGS (the suite's session cache), and
    XLA_FLAGS without the optimisation level the suite compiles its kernels at (conftest), so the run compiles at
    XLA's default level."""
    env = {k: v for k, v in os.environ.items() if k != runtime.XLA_ENV}
    flags = [flag for flag in env.pop("XLA_FLAGS", "").split() if flag != UNOPTIMISED_KERNELS]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    return env


def pretrain(tmp_path, name, data_dir, cache_setting):
    """A tiny CPU-default run of 2 steps in a process of its own, compiled as a user's; returns its exported
    weights."""
    env = users_environment()
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    model_dir = tmp_path / name
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "run_pretraining.py"), "--model_size=tiny", f"--data_dir={data_dir}",
         f"--model_dir={model_dir}", '--hparams={"num_layers": 1, "vocab_size": 64, "max_seq_length": 32}',
         "--train_batch_size=8", "--num_train_steps=2", "--log_steps=1", "--eval_batches=0",
         f"--xla_cache_dir={cache_setting}"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with mock.patch.dict(os.environ, {"XLA_FLAGS": env.get("XLA_FLAGS", "")}):  # the key names the run's flags
        named = "off" if cache_setting == "off" else os.path.join(cache_setting, runtime.xla_cache_key())
    assert f"XLA:CPU kernel cache {named}" in result.stderr  # the run's log says which
    assert json.loads((model_dir / "export" / "electra_config.json").read_text())["step"] == 2
    return h5_arrays(model_dir / "export" / PRETRAINER_WEIGHTS)


def entries(directory):
    return {path: os.stat(os.path.join(directory, path)).st_mtime_ns for path in os.listdir(directory)}


def test_a_second_run_loads_the_kernels_and_trains_the_same_bits(tmp_path):
    """Two runs of the same command: the first compiles and writes the kernels, the second loads every one (none is
    compiled and written again) and ends on the first's weights bit for bit."""
    data_dir = tmp_path / "shards"
    write_shards(str(data_dir), num_examples=64, num_shards=2)
    cache = tmp_path / "cache"
    first = pretrain(tmp_path, "first", data_dir, str(cache))
    [subdirectory] = os.listdir(cache)
    written = entries(cache / subdirectory)
    assert len(written) >= 5 and all(name.endswith("XLA_CPU_JIT.pb") for name in written)
    second = pretrain(tmp_path, "second", data_dir, str(cache))
    assert entries(cache / subdirectory) == written  # loaded, not compiled and saved again
    assert first.keys() == second.keys() and len(first) > 10
    for name in first:
        np.testing.assert_array_equal(second[name], first[name], err_msg=name)
