"""Test set-up: quiet TensorFlow, two logical CPU devices (for MirroredStrategy tests), data paths."""

import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def share_xla_kernels_in_the_session() -> str | None:
    """Before TensorFlow is imported: one persistent XLA cache for the session, created here in the first process
    (pytest-xdist's controller, or the one process of `-n 0`) and inherited through the environment by the xdist
    workers and the tests' subprocesses. A command run again (a stopped run resumed, test_multi_worker's re-launched
    workers) traces the same functions as its first run and loads their XLA:CPU kernels instead of compiling them:
    a tiny `run_pretraining.py` run again took 15.0 s instead of 20.4 (bench/startup_bench.py measures the same
    cache). An entry is keyed by the function's signature and HLO, and its HLO is compared in full on loading.
    A fresh directory per session, so no kernel of another checkout is ever read. Returns the directory this
    process created (None: inherited, or the user's own cache in TF_XLA_FLAGS, which is kept)."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "--tf_xla_persistent_cache_directory" in flags:
        return None
    directory = tempfile.mkdtemp(prefix="electra_tf_tests_xla_cache_")
    os.environ["TF_XLA_FLAGS"] = f"{flags} --tf_xla_persistent_cache_directory={directory}".strip()
    return directory


XLA_CACHE_CREATED_HERE = share_xla_kernels_in_the_session()

import pytest  # noqa: E402

from electra_tf.runtime import use_onednn_kernels  # noqa: E402

use_onednn_kernels()  # before TensorFlow: the tests run with the kernels the entry points get

import tensorflow as tf  # noqa: E402

NUM_LOGICAL_CPUS = 2
_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def absl_level_as_at_start():
    """Each test starts with absl's logger as the session did (level unset: `caplog.at_level` decides). A CLI
    test's flag parsing sets absl's verbosity, which would otherwise hide INFO lines from later tests' caplog."""
    import logging

    logging.getLogger("absl").setLevel(logging.NOTSET)
    yield


def pytest_unconfigure(config):
    """The process that created the session's XLA cache removes it, after its workers have ended."""
    if XLA_CACHE_CREATED_HERE:
        shutil.rmtree(XLA_CACHE_CREATED_HERE, ignore_errors=True)
