"""`import electra_tf` changes no process state; the entry points turn oneDNN on unless the environment chose."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = "TF_ENABLE_ONEDNN_OPTS"

IMPORT_PROBE = """
import json, os, sys
before = dict(os.environ)
import electra_tf, electra_tf.runtime, electra_tf.text.manifest, electra_tf.config, electra_tf.options
print(json.dumps({"changed": sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)),
                  "tensorflow": "tensorflow" in sys.modules}))
"""

ENTRY_PROBE = """
import json, os
from electra_tf.runtime import onednn_enabled, use_onednn_kernels
returned = use_onednn_kernels()
import tensorflow
print(json.dumps({"returned": returned, "env": os.environ.get("TF_ENABLE_ONEDNN_OPTS"), "onednn": onednn_enabled()}))
"""

# Where each entry point starts; each calls `use_onednn_kernels()` before TensorFlow is imported.
ENTRY_POINTS = ("run_pretraining.py", "run_finetuning.py", "electra_tf/detect/__main__.py",
                "electra_tf/convert/__main__.py", "electra_tf/ask.py", "electra_tf/tag.py",
                "bench/step_bench/__main__.py", "bench/startup_bench.py", "bench/data_prep_bench.py", "experiments/compare_objectives.py", "tests/conftest.py")


def probe(code, onednn_env=None):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if onednn_env is not None:
        env[ENV] = onednn_env
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("onednn_env", [None, "0"])
def test_importing_the_package_leaves_the_environment_unchanged(onednn_env):
    assert probe(IMPORT_PROBE, onednn_env) == {"changed": [], "tensorflow": False}


def test_entry_point_turns_onednn_on_when_the_environment_is_silent():
    assert probe(ENTRY_PROBE) == {"returned": "1", "env": "1", "onednn": True}


def test_entry_point_respects_the_choice_to_keep_onednn_off():
    assert probe(ENTRY_PROBE, "0") == {"returned": "0", "env": "0", "onednn": False}


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_every_entry_point_calls_it(path):
    assert "use_onednn_kernels()" in (REPO / path).read_text(encoding="utf-8"), path


@pytest.mark.parametrize("package", ["electra_tf.convert", "electra_tf.detect"])
def test_python_dash_m_entry_points_run_before_tensorflow_is_imported(package):
    """`python -m` imports the package first: it must not import TensorFlow before the entry point's call."""
    code = f"import json, sys\nimport {package}\nprint(json.dumps('tensorflow' in sys.modules))"
    assert probe(code) is False
