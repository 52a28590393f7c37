"""Test set-up: quiet TensorFlow, one XLA kernel cache per session, XLA kernels compiled unoptimised, two logical
CPU devices (for MirroredStrategy tests), data paths, the long files scheduled first."""

import collections
import os
import shutil
import tempfile
from pathlib import Path

from electra_tf import runtime  # the standard library only: TensorFlow is not imported yet

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
    flags = os.environ.get(runtime.XLA_ENV, "")
    if runtime.XLA_CACHE_FLAG in flags:
        return None
    directory = tempfile.mkdtemp(prefix="electra_tf_tests_xla_cache_")
    os.environ[runtime.XLA_ENV] = f"{flags} {runtime.XLA_CACHE_FLAG}={directory}".strip()
    return directory


XLA_CACHE_CREATED_HERE = share_xla_kernels_in_the_session()

# XLA's flag (XLA_FLAGS) for LLVM's optimisation level of the kernels it compiles; the tests' level.
XLA_LEVEL_FLAG = "--xla_backend_optimization_level"
UNOPTIMISED_KERNELS = f"{XLA_LEVEL_FLAG}=0"


def compile_kernels_unoptimised(environ=os.environ) -> str:
    """Before TensorFlow is imported: XLA compiles the session's kernels without LLVM's optimisations (level 0)
    unless XLA_FLAGS names a level already; inherited, like the cache above, by the xdist workers and the tests'
    subprocesses. Returns XLA_FLAGS as it then is.

    The tests' models are tiny: their steps run in milliseconds, and compiling their XLA:CPU kernels at XLA's
    default level took about a seventh of the default suite's time (CHANGELOG). The level changes how fast a kernel
    runs and its float rounding (fused multiply-adds, vectorised sums), not the function it computes: a test
    compares runs of one session, or holds results to a tolerance. tests/test_xla_cache.py runs its processes at
    XLA's default level, the one users compile at."""
    flags = environ.get("XLA_FLAGS", "")
    if not any(flag.startswith(XLA_LEVEL_FLAG + "=") for flag in flags.split()):
        environ["XLA_FLAGS"] = f"{flags} {UNOPTIMISED_KERNELS}".strip()
    return environ["XLA_FLAGS"]


compile_kernels_unoptimised()

import pytest  # noqa: E402

runtime.use_onednn_kernels()  # before TensorFlow: the tests run with the kernels the entry points get

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


# The files of the longest default tests, longest first (durations of a full run on 2 cores, 2026-11). Under
# `--dist loadfile` pytest-xdist hands files out in the order of its queue, which by default
# (`--loadscope-reorder`) puts the files with the fewest tests last: test_multi_worker's and test_elastic_resume's
# two tests (about 100 s and 80 s) were among the last nine of 107 files, where one worker could be left running
# them alone. First in line, a long file overlaps the short ones. A file missing here only keeps xdist's place.
LONG_FILES_FIRST = ("test_device_option_sets.py", "test_example_dropout.py", "test_run_combinations.py",
                    "test_multi_worker.py", "test_elastic_resume.py", "test_training.py", "test_accumulation.py",
                    "test_data_service.py", "test_finetuning_distributed.py", "test_pre_objectives_fixture.py",
                    "test_sentencepiece_pretraining.py")


def scheduled_order(nodeids: list[str]) -> list[str]:
    """`nodeids` with LONG_FILES_FIRST's files first, then xdist's default order (files of more tests first, ties
    in collection order). Stable: each file's tests stay together and in their order."""
    files = [nodeid.split("::")[0] for nodeid in nodeids]
    tests_per_file = collections.Counter(files)

    def place(index):
        name = os.path.basename(files[index])
        rank = LONG_FILES_FIRST.index(name) if name in LONG_FILES_FIRST else len(LONG_FILES_FIRST)
        return rank, -tests_per_file[files[index]]

    return [nodeids[index] for index in sorted(range(len(nodeids)), key=place)]


def pytest_configure(config):
    """xdist's work queue follows the collection's order, as `pytest_collection_modifyitems` leaves it."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after `-m 'not slow'` deselected: the counts are of the tests that run
def pytest_collection_modifyitems(config, items):
    position = {nodeid: index for index, nodeid in enumerate(scheduled_order([item.nodeid for item in items]))}
    items.sort(key=lambda item: position[item.nodeid])  # a duplicate (--keep-duplicates) stays, beside its twin
