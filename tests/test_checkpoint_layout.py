"""The pre-training checkpoint layout is a contract: runs resume across code changes.

A long run (the objectives experiment spans sittings) is resumed by newer code. TF's
object-based checkpoints key model variables by attribute path and optimizer slots by the
*order* of `model.trainable_variables`, so renaming an attribute or reordering layers would
make old checkpoints fail to load, or worse, load Adam moments into the wrong variables.
This test pins both against `tests/fixtures/pretrain_checkpoint_layout.json`. After an
intentional change, regenerate it with `ELECTRA_UPDATE_LAYOUT=1 pytest tests/test_checkpoint_layout.py`
and say in the change that old checkpoints no longer load.
"""

import json
import os

import pytest
import tensorflow as tf

from electra_tf.training import pretraining
from pretrain_testutil import SPECIAL_IDS, tiny_config

LAYOUT_FILE = os.path.join(os.path.dirname(__file__), "fixtures", "pretrain_checkpoint_layout.json")


def current_layout(tmp_path, objective):
    config = tiny_config(objective=objective, num_layers=2, generator_num_layers=2)
    model, optimizer = pretraining.build_model(config, tf.distribute.get_strategy(), SPECIAL_IDS, 0, "none")
    path = tf.train.Checkpoint(model=model, optimizer=optimizer, dropout_rng=pretraining.rng_states(model)).write(
        str(tmp_path / objective / "ckpt"))
    keys = {name: shape for name, shape in tf.train.list_variables(path) if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}
    return {"checkpoint_keys": keys, "trainable_variable_order": [v.path for v in model.trainable_variables]}


@pytest.mark.parametrize("objective", ["rtd", "mlm"])
def test_checkpoint_layout_is_unchanged(tmp_path, objective):
    layout = current_layout(tmp_path, objective)
    if os.environ.get("ELECTRA_UPDATE_LAYOUT"):
        stored = json.load(open(LAYOUT_FILE)) if os.path.exists(LAYOUT_FILE) else {}
        stored[objective] = layout
        with open(LAYOUT_FILE, "w") as f:
            json.dump(stored, f, indent=1, sort_keys=True)
    expected = json.load(open(LAYOUT_FILE))[objective]
    assert layout["trainable_variable_order"] == expected["trainable_variable_order"]
    missing = sorted(set(expected["checkpoint_keys"]) - set(layout["checkpoint_keys"]))
    added = sorted(set(layout["checkpoint_keys"]) - set(expected["checkpoint_keys"]))
    assert not missing and not added, {"missing": missing[:10], "added": added[:10]}
    assert layout["checkpoint_keys"] == expected["checkpoint_keys"]
