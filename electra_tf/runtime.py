"""Process set-up for the entry points: which TensorFlow CPU kernels run.

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

import os

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"


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
