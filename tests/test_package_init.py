"""`import electra_tf` turns TensorFlow's oneDNN kernels on unless the environment chose."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import json, os
import electra_tf
import tensorflow
print(json.dumps({"env": os.environ.get("TF_ENABLE_ONEDNN_OPTS"), "onednn": electra_tf.onednn_enabled()}))
"""


def probe(onednn_env):
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if onednn_env is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn_env
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_onednn_turned_on_when_the_environment_is_silent():
    assert probe(None) == {"env": "1", "onednn": True}


def test_user_choice_to_keep_onednn_off_is_respected():
    assert probe("0") == {"env": "0", "onednn": False}
