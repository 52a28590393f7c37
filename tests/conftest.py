"""Test set-up: quiet TensorFlow, two logical CPU devices (for MirroredStrategy tests), data paths."""

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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
