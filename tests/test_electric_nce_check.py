"""experiments/electric_nce_check.py: the NCE decomposition against NumPy and the model's own loss."""

import doctest
import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model.networks import pretrainer_from_config
from electra_tf.training import evaluation, run_record
from experiments import electric_nce_check
from pretrain_testutil import SPECIAL_IDS, tiny_config, write_shards


def test_docstring_example_runs():
    assert doctest.testmod(electric_nce_check).failed == 0


def test_decompose_equals_a_direct_computation():
    rng = np.random.RandomState(0)
    labels = (rng.rand(400) < 0.2).astype(np.float64)
    energy, log_q = rng.randn(400) + 2 * labels, -5 + rng.randn(400)
    d = electric_nce_check.decompose(energy, log_q, labels, mask_prob=0.15)
    p = labels.mean()
    assert d["constant_predictor_loss"] == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)))
    prob = 1 / (1 + np.exp(-(energy + log_q + math.log(0.15 / 0.85))))
    assert d["loss"] == pytest.approx(-np.mean(labels * np.log(prob) + (1 - labels) * np.log(1 - prob)))
    # AUC as the fraction of (noise, data) pairs ordered right.
    noise, data = energy[labels > 0.5], energy[labels < 0.5]
    assert d["auc_energy_alone"] == pytest.approx(np.mean(noise[:, None] > data[None, :]))
    assert d["auc_energy_alone"] > 0.8 and 0.35 < d["auc_log_q_alone"] < 0.65
    assert d["corr_energy_log_q"] == pytest.approx(np.corrcoef(energy, log_q)[0, 1])
    assert d["tokens"] == 400 and d["mean_energy"]["noise"] > d["mean_energy"]["data"]


@pytest.fixture(scope="module")
def electric_run(tmp_path_factory):
    """A data directory and an electric run folder as run_pretraining.py leaves them (config + checkpoint)."""
    data_dir = str(tmp_path_factory.mktemp("shards"))
    write_shards(data_dir, num_examples=32, num_shards=2)
    model_dir = str(tmp_path_factory.mktemp("electric"))
    config = tiny_config(objective="electric", num_layers=1, generator_num_layers=1)
    run_record.check_start(model_dir, config)
    model = pretrainer_from_config(config, special_token_ids=SPECIAL_IDS).build_all()
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), os.path.join(model_dir, "checkpoints"), 1)
    manager.save(checkpoint_number=2)
    return data_dir, model_dir


def test_record_loss_is_the_models_own_disc_loss(electric_run, tmp_path):
    data_dir, model_dir = electric_run
    output = tmp_path / "check.json"
    assert electric_nce_check.main([f"--pretrain_dir={model_dir}", f"--data_dir={data_dir}", "--num_batches=2",
                                    "--batch_size=8", f"--output={output}"]) == 0
    record = json.loads(output.read_text())
    # The same batches, masks and samples through the model's loss (TF's sigmoid cross-entropy).
    model, _, manifest, held_out = electric_nce_check.load(model_dir, data_dir, None)
    evaluator = evaluation.Evaluator(model, (data_dir, manifest), 8, 2, None)
    parts = evaluator.collect()
    metrics = evaluation.metrics_from_outputs(parts, 1.0, 50.0)
    assert record["loss"] == pytest.approx(metrics["disc_loss"], rel=1e-5)
    assert record["tokens"] == sum(int(np.sum(b["input_mask"])) for b in evaluator.batches)
    drawn = sum(float(np.sum(part["mlm_weights"])) for part in parts)
    assert record["noise_fraction"] * record["tokens"] == pytest.approx(drawn)  # every drawn position is noise
    assert not held_out and record["data"].startswith("training shards")
    assert record["checkpoint"] == "ckpt-2" and record["command"].startswith("python -m experiments.")


def test_a_run_of_another_objective_is_refused_in_one_line(electric_run, tmp_path, capsys):
    data_dir, model_dir = electric_run
    other = tmp_path / "rtd"
    other.mkdir()
    with open(os.path.join(model_dir, "run_config.json")) as f:
        values = json.load(f)
    (other / "run_config.json").write_text(json.dumps({**values, "objective": "rtd"}))
    output = tmp_path / "check.json"
    assert electric_nce_check.main([f"--pretrain_dir={other}", f"--data_dir={data_dir}",
                                    f"--output={output}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--pretrain_dir" in err and "'rtd'" in err
    assert not output.exists()
