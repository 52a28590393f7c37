"""Runs and exports written before the objectives became objects (issue #57, main 7d0cb17) still resume and load.

tests/fixtures/pre_objectives/ (made by tests/fixtures/make_pre_objectives_fixture.py on 7d0cb17) holds, for rtd,
mlm and electric, a run stopped after step 2 of 4, what the uninterrupted run logged at steps 3 and 4, and that
run's export with its outputs on a fixed batch. Resuming the run with today's code must log the same losses and
metrics; loading the export must give the same outputs. The fixture is copied to a temporary folder first.
"""

import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "pre_objectives")
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))

import make_pre_objectives_fixture as made  # noqa: E402
from electra_tf.convert import export_dir  # noqa: E402
from electra_tf.training import pretraining  # noqa: E402

RELATIVE = 1e-6


def copied_data(tmp_path):
    """The fixture's shards in `tmp_path`, the manifest naming the copy's vocab file (as a data build would)."""
    data_dir = str(tmp_path / "data")
    shutil.copytree(os.path.join(FIXTURE, "data"), data_dir)
    manifest_file = os.path.join(data_dir, "manifest.json")
    with open(manifest_file) as f:
        manifest = json.load(f)
    manifest["vocab_file"] = os.path.join(data_dir, "vocab.txt")
    with open(manifest_file, "w") as f:
        json.dump(manifest, f)
    return data_dir


def assert_close(got: dict, expected: dict, where: str):
    assert sorted(got) == sorted(expected), where
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=RELATIVE, abs=1e-7), f"{where}: {name}"


@pytest.mark.parametrize("objective", made.OBJECTIVES)
def test_a_run_stopped_by_7d0cb17_resumes_to_the_losses_its_uninterrupted_run_logged(objective, tmp_path):
    data_dir = copied_data(tmp_path)
    model_dir = str(tmp_path / "run")
    shutil.copytree(os.path.join(FIXTURE, objective, "run"), model_dir)
    history = pretraining.train(made.config_for(objective), made.options(data_dir, model_dir),
                                tf.distribute.OneDeviceStrategy("/cpu:0"))
    with open(os.path.join(FIXTURE, objective, "expected.json")) as f:
        expected = json.load(f)["losses"]
    assert [h["step"] for h in history] == [3, 4]
    for logged in history:
        step = str(logged["step"])
        assert_close(made.logged_losses([logged], (logged["step"],))[step], expected[step], f"{objective} step {step}")


@pytest.mark.parametrize("objective", made.OBJECTIVES)
def test_an_export_written_by_7d0cb17_loads_to_the_same_outputs(objective, tmp_path):
    export = str(tmp_path / "export")
    shutil.copytree(os.path.join(FIXTURE, objective, "export"), export)
    saved = dict(np.load(os.path.join(FIXTURE, objective, "outputs.npz")))
    batch = {name: saved.pop(name) for name in ("input_ids", "input_mask", "segment_ids")}
    outputs = made.export_outputs(export, batch, objective)
    assert sorted(outputs) == sorted(saved)
    for name, value in saved.items():
        np.testing.assert_allclose(outputs[name], value, rtol=RELATIVE, atol=1e-6, err_msg=f"{objective} {name}")
    assert export_dir.read_ours_config(export)[0].objective == objective
