"""ELECTRA pre-training and fine-tuning for TensorFlow 2 / Keras 3.

Importing the package turns TensorFlow's oneDNN CPU kernels on (`TF_ENABLE_ONEDNN_OPTS=1`)
unless the environment already says otherwise. TensorFlow enables them by itself only on CPUs
with AVX512-VNNI, AVX512-BF16 or AMX; on AVX2-only x86 CPUs (AMD EPYC among them) it falls back
to Eigen kernels, with which the Small pre-training step took 1.27–1.42× as long on an AMD EPYC
(`bench/README_step_bench.md`, "oneDNN on AVX2-only CPUs"). The variable is read once, when
TensorFlow is imported, so it only takes effect when `electra_tf` is imported first, as every
entry point here does; `TF_ENABLE_ONEDNN_OPTS=0` keeps the Eigen kernels.
"""

import os

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def onednn_enabled() -> bool:
    """Whether the imported TensorFlow runs its oneDNN kernels (False if TF is not importable)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return False
    return bool(_pywrap_util_port.IsMklEnabled())
