"""Opt-in accuracy checks on real data with a tiny random-init model (minutes each).

Run with `pytest -m slow tests/test_finetuning_slow.py`; the same commands are in
experiments/finetune_tiny_benchmarks.py.
"""

import importlib.util
import json
from pathlib import Path

import pytest

from test_finetuning_run import run_main

_spec = importlib.util.spec_from_file_location(
    "finetune_tiny_benchmarks", Path(__file__).resolve().parents[1] / "experiments" / "finetune_tiny_benchmarks.py")
benchmarks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(benchmarks)


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("name", sorted(benchmarks.EXPERIMENTS))
def test_tiny_model_learns(shared_data, tmp_path, name):
    run_main(benchmarks.flags_for(name, str(tmp_path / name)))
    summary = json.loads((tmp_path / name / "metrics.json").read_text())
    assert benchmarks.meets_target(name, summary["median"]), summary["median"]
    if name == "squad":
        predictions = json.loads((tmp_path / name / "predictions.json").read_text())
        assert len(predictions) == sum(len(p["qas"]) for a in json.load(open(benchmarks.SQUAD_DEV))["data"][40:48]
                                       for p in a["paragraphs"])
        assert all(isinstance(v, str) for v in predictions.values())
