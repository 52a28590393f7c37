"""Process set-up for the entry points: which TensorFlow CPU kernels run, and where compiled XLA kernels persist.

Importing `electra_tf` changes no process state. Each entry point (`run_pretraining.py`,
`run_finetuning.py`, `python -m electra_tf.detect`, `python -m electra_tf.convert`, the bench and
experiments scripts, the tests' conftest) calls `use_onednn_kernels()` first, before TensorFlow is
imported. Importing this module imports neither TensorFlow nor anything else of ours.

Example:

>>> import os
>>> from unittest import mock
>>> from electra_tf.runtime import use_onednn_kernels
>>> with mock.patch.dict(os.environ):  # restored afterwards
...     _ = os.environ.pop("TF_ENABLE_ONEDNN_OPTS", None)
...     use_onednn_kernels(), os.environ["TF_ENABLE_ONEDNN_OPTS"]
('1', '1')
>>> with mock.patch.dict(os.environ, {"TF_ENABLE_ONEDNN_OPTS": "0"}):
...     use_onednn_kernels()  # the environment's choice wins
'0'
"""

import hashlib
import os
import platform
import sys

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
# oneDNN's setting for serving a fixed model: each fused matmul keeps the weights of its first call.
FROZEN_WEIGHTS_ENV = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"
XLA_ENV = "TF_XLA_FLAGS"
XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory"
XLA_CACHE_HELP = ("Where compiled XLA:CPU kernels persist between runs, so a run after the first (a resume, the "
                  "same model again) loads them instead of compiling (docs/performance.md, the first step). auto = "
                  "$XDG_CACHE_HOME/electra_tf/xla (default ~/.cache/electra_tf/xla), a directory = under it, off = "
                  "none. Under a subdirectory per TensorFlow version, CPU and XLA_FLAGS; CPU kernels only (GPU and "
                  "TPU compilation is untouched); a TF_XLA_FLAGS that names " + XLA_CACHE_FLAG + " wins.")


def use_onednn_kernels() -> str:
    """Turns TensorFlow's oneDNN CPU kernels on unless the environment chose; returns the setting.

    TensorFlow enables oneDNN by itself only on CPUs with AVX512-VNNI, AVX512-BF16 or AMX; on
    AVX2-only x86 CPUs (AMD EPYC among them) it falls back to Eigen kernels, with which the Small
    pre-training step ran 1.27-1.42x slower (`bench/README_step_bench.md`, "oneDNN on AVX2-only
    CPUs"). TensorFlow reads the variable once, when it is imported, so this must run before the
    first `import tensorflow` of the process; afterwards it changes nothing. A value already in the
    environment wins: `TF_ENABLE_ONEDNN_OPTS=0` keeps the Eigen kernels.
    """
    return os.environ.setdefault(ONEDNN_ENV, "1")


def onednn_enabled() -> bool:
    """Whether the imported TensorFlow runs its oneDNN kernels (False if TF is not importable)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return False
    return bool(_pywrap_util_port.IsMklEnabled())


def frozen_weights_assumed() -> bool:
    """Whether `TF_ONEDNN_ASSUME_FROZEN_WEIGHTS` is on, as TensorFlow reads it ("1" or "true", any case)."""
    return os.environ.get(FROZEN_WEIGHTS_ENV, "").strip().lower() in ("1", "true")


def xla_cache_root(setting: str) -> str | None:
    """The cache root `setting` (`--xla_cache_dir`: auto, off or a directory) names; None for off."""
    if setting == "off":
        return None
    if setting != "auto":
        return os.path.abspath(os.path.expanduser(setting))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "electra_tf", "xla")


def xla_cache_key() -> str:
    """This process's subdirectory of the cache: TensorFlow's version, the CPU and XLA_FLAGS.

    TensorFlow keys an entry by the function's signature and HLO (and compares the HLO in full on loading), not by
    what the machine code was built for: a kernel compiled for AVX-512 on one host, read from a home directory
    shared with an AVX2 host, would crash there, and a TensorFlow upgrade may not read an older entry (an entry
    that does not load fails the step rather than being compiled again). So each (version, CPU model and features,
    XLA_FLAGS) has a directory of its own.
    """
    from importlib import metadata

    try:
        version = metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        version = "unknown"
    cpu = cpu_description()
    digest = hashlib.sha256("\n".join([version, cpu, os.environ.get("XLA_FLAGS", "")]).encode()).hexdigest()
    return f"tf{version}-{platform.machine() or 'cpu'}-{digest[:16]}"


def cpu_description() -> str:
    """The CPU's model and instruction-set flags (Linux: /proc/cpuinfo's first processor), else the platform's."""
    try:
        with open("/proc/cpuinfo") as f:
            fields = {}
            for line in f:
                if not line.strip():
                    break
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
        return " ".join(fields.get(k, "") for k in ("vendor_id", "model name", "flags", "Features", "CPU part"))
    except OSError:
        return f"{platform.processor()} {platform.machine()}"


def use_xla_cache(setting: str = "auto") -> str | None:
    """Makes compiled XLA:CPU kernels persist in the cache `setting` names; returns the directory (None: none).

    Like `use_onednn_kernels`, before TensorFlow creates its devices (TensorFlow reads TF_XLA_FLAGS then; the
    entry points call this first in `main`). The setting goes into TF_XLA_FLAGS, so the processes the run starts
    (tf.data service workers, re-launched workers) share it. Only CPU kernels are kept
    (`--tf_xla_persistent_cache_device_types=CPU`): the saving is measured on CPUs (`bench/xla_cache_first_step.py`).
    An entry holds the machine code XLA built, so a loaded kernel computes what a compiled one does, bit for bit.
    A TF_XLA_FLAGS that already names a directory wins (the test suite's per-session cache). A directory that cannot
    be created: `auto` goes without a cache (one line on stderr), a named one is an error naming the flag.
    """
    flags = os.environ.get(XLA_ENV, "")
    if XLA_CACHE_FLAG in flags:
        return xla_cache_in_use()
    root = xla_cache_root(setting)
    if root is None:
        return None
    directory = os.path.join(root, xla_cache_key())
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        if setting != "auto":
            raise ValueError(f"--xla_cache_dir={setting}: cannot create {directory} ({e.strerror})") from e
        print(f"electra_tf: no XLA kernel cache ({directory}: {e.strerror}); pass --xla_cache_dir=DIR or off",
              file=sys.stderr)
        return None
    os.environ[XLA_ENV] = f"{flags} {XLA_CACHE_FLAG}={directory} --tf_xla_persistent_cache_device_types=CPU".strip()
    return directory


def xla_cache_in_use() -> str | None:
    """The persistent XLA cache directory TF_XLA_FLAGS names (None: none), for the logs."""
    words = os.environ.get(XLA_ENV, "").split()
    return next((word.split("=", 1)[1] for word in words if word.startswith(XLA_CACHE_FLAG + "=")), None)
