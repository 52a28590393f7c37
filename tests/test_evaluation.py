"""Held-out evaluation: fixed batches and masks, metrics against numpy, no effect on training, CLI, bad input."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.text.manifest import eval_shard_name, load_manifest
from electra_tf.options import ExecutionOptions
from electra_tf.training import evaluation, pretraining
from pretrain_testutil import SPECIAL_IDS, tiny_config, write_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CPU_DEFAULTS = ExecutionOptions(gradient_accumulation_steps=1).resolve({"CPU"})


def add_eval_shards(data_dir, tmp, num_examples=24):
    """Gives `data_dir` held-out shards (other random examples), as data_prep --eval_fraction records them."""
    other = write_shards(str(tmp), num_examples=num_examples, num_shards=2, seed=7)
    path = os.path.join(data_dir, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    names = [eval_shard_name(i, 2) for i in range(2)]
    for source, name in zip(other["shards"], names):
        shutil.copy(os.path.join(tmp, source), os.path.join(data_dir, name))
    manifest.update(eval_fraction=0.2, eval_shards=names, eval_num_shards=2, eval_num_examples=num_examples,
                    eval_examples_per_shard=other["examples_per_shard"], eval_shard_sha256=other["shard_sha256"],
                    eval_shard_size_bytes=other["shard_size_bytes"])
    with open(path, "w") as f:
        json.dump(manifest, f)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=64, num_shards=2)
    add_eval_shards(path, tmp_path_factory.mktemp("held"))
    return path


def small(**overrides):
    return tiny_config(**{"num_layers": 1, "generator_num_layers": 1, **overrides})


def run(config, data_dir, model_dir, **options):
    options = {"log_steps": 1, "steps_per_loop": 2, "save_checkpoints_steps": 2, "export": False,
               "eval_batch_size": 8, "eval_batches": 2, **options}
    return pretraining.train(config, pretraining.TrainOptions(data_dir=data_dir, model_dir=model_dir, **options),
                             tf.distribute.OneDeviceStrategy("/cpu:0"))


def read_log(model_dir):
    with open(os.path.join(model_dir, evaluation.LOG_FILE)) as f:
        return [json.loads(line) for line in f]


def test_evaluating_leaves_training_unchanged_and_writes_each_evaluation(data_dir, tmp_path):
    config = small(num_train_steps=2)  # dropout on: evaluation must not draw from its RNG
    plain = run(config, data_dir, str(tmp_path / "plain"), eval_batches=0)
    evaluated = run(config, data_dir, str(tmp_path / "eval"), eval_every_steps=1, steps_per_loop=1)
    names = ("step_loss", "gen_loss", "disc_loss", "gen_accuracy", "disc_auc", "grad_norm")
    assert [[h[n] for n in names] for h in plain] == [[h[n] for n in names] for h in evaluated]
    reader = {name: tf.train.load_checkpoint(str(tmp_path / name / "checkpoints")) for name in ("plain", "eval")}
    for key in reader["plain"].get_variable_to_shape_map():
        if key.startswith("model/"):
            np.testing.assert_array_equal(reader["plain"].get_tensor(key), reader["eval"].get_tensor(key), key)
    assert not os.path.exists(tmp_path / "plain" / evaluation.LOG_FILE)
    log = read_log(str(tmp_path / "eval"))
    assert [r["step"] for r in log] == [1, 2]
    assert {"loss", "gen_loss", "gen_accuracy", "gen_sampled_accuracy", "disc_loss", "disc_auc", "disc_accuracy",
            "disc_precision", "disc_recall"} <= set(log[0])
    assert os.listdir(tmp_path / "eval" / "eval")  # TensorBoard events
    # --do_eval of the last checkpoint gives what training wrote at that step: the same batches and masks.
    manifest = load_manifest(data_dir)
    model = evaluation.build_model(config, manifest, CPU_DEFAULTS)  # what training resolved: the same sampling
    source = evaluation.resolve_source(None, data_dir, manifest, config)
    again = evaluation.evaluate_checkpoints(model, source, str(tmp_path / "eval"), 8, 2, all_checkpoints=True)
    assert [r["step"] for r in again] == [2]  # the checkpoints (every 2 steps)
    for before, after in zip(log[1:], again):
        for name, value in before.items():
            assert after[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name


def pairwise_auc(labels, scores):
    positives, negatives = scores[labels == 1], scores[labels == 0]
    greater = (positives[:, None] > negatives[None, :]).mean()
    ties = (positives[:, None] == negatives[None, :]).mean()
    return greater + 0.5 * ties


def test_metrics_equal_an_independent_numpy_computation_and_repeat_exactly(data_dir):
    config = small()
    manifest = load_manifest(data_dir)
    model = evaluation.build_model(config, {"special_token_ids": SPECIAL_IDS})
    evaluator = evaluation.Evaluator(model, evaluation.resolve_source(None, data_dir, manifest, config), 8, 3, None)
    parts = evaluator.collect()
    metrics = evaluator.evaluate(0)
    assert evaluator.evaluate(0) == metrics  # the same masks, samples and batches every time
    weights = np.concatenate([p["disc_weights"].ravel() for p in parts]) > 0
    labels = np.concatenate([p["labels"].ravel() for p in parts])[weights]
    probs = np.concatenate([p["disc_probs"].ravel() for p in parts])[weights]
    predicted = (probs > 0.5).astype(float)
    assert 0 < labels.sum() < labels.size
    assert metrics["disc_auc"] == pytest.approx(pairwise_auc(labels, probs), abs=1e-9)
    assert metrics["disc_accuracy"] == pytest.approx((predicted == labels).mean())
    tp = (predicted * labels).sum()
    assert metrics["disc_precision"] == pytest.approx(tp / max(predicted.sum(), 1))
    assert metrics["disc_recall"] == pytest.approx(tp / labels.sum())
    mlm_weights = np.concatenate([p["mlm_weights"].ravel() for p in parts])
    correct = np.concatenate([p["gen_correct"].ravel() for p in parts])
    assert metrics["gen_accuracy"] == pytest.approx((correct * mlm_weights).sum() / mlm_weights.sum())
    # Losses are token-weighted over all batches; the total as in training (gen_weight, disc_weight).
    assert metrics["loss"] == pytest.approx(config.gen_weight * metrics["gen_loss"]
                                            + config.disc_weight * metrics["disc_loss"])
    # The same checkpoint's loss on one batch, computed by the training code's own normalisation.
    out = model.compute_losses(evaluator.batches[0], training=False, seeds=evaluator.seeds[0])
    one = evaluation.metrics_from_outputs(parts[:1], config.gen_weight, config.disc_weight)
    assert one["gen_loss"] == pytest.approx(float(out["gen_loss"]), rel=1e-5)
    assert one["disc_loss"] == pytest.approx(float(out["disc_loss"]), rel=1e-5)


@pytest.mark.parametrize("objective", ["mlm", "electric"])
def test_held_out_losses_are_normalised_as_the_training_losses(objective, data_dir):
    # Electric's generator loss is over every candidate position, not the masked ones.
    config = small(objective=objective)
    model = evaluation.build_model(config, {"special_token_ids": SPECIAL_IDS})
    evaluator = evaluation.Evaluator(model, evaluation.resolve_source(None, data_dir, load_manifest(data_dir),
                                                                      config), 8, 1, None)
    metrics = evaluation.metrics_from_outputs(evaluator.collect(), config.gen_weight, config.disc_weight)
    out = model.compute_losses(evaluator.batches[0], training=False, seeds=evaluator.seeds[0])
    for name in ("gen_loss", "disc_loss", "loss"):
        if name in out and name in metrics:
            assert metrics[name] == pytest.approx(float(out[name]), rel=1e-5), name


@pytest.mark.parametrize("objective,present,absent", [
    ("mlm", {"gen_loss", "gen_accuracy", "loss"}, {"disc_auc", "disc_loss", "gen_sampled_accuracy", "main_loss"}),
    ("replace_mlm", {"main_loss", "main_accuracy", "gen_sampled_accuracy"}, {"disc_auc"}),
    # At the masked positions an untrained generator's samples are all replacements: no AUC (one class).
    ("rtd_masked_only", {"disc_loss", "disc_recall"}, {"main_loss"}),
])
def test_each_objective_reports_the_metrics_it_has(objective, present, absent, data_dir):
    config = small(objective=objective)
    manifest = load_manifest(data_dir)
    model = evaluation.build_model(config, {"special_token_ids": SPECIAL_IDS})
    metrics = evaluation.Evaluator(model, evaluation.resolve_source(None, data_dir, manifest, config), 8, 1,
                                   None).evaluate(0)
    assert present <= set(metrics) and not absent & set(metrics)
    assert all(np.isfinite(v) for v in metrics.values())


def test_exact_auc_counts_ties_half():
    labels = np.array([1, 0, 1, 0], bool)
    assert evaluation.exact_auc(labels, np.array([0.5, 0.5, 0.9, 0.1])) == pytest.approx(0.875)
    assert evaluation.exact_auc(np.ones(3, bool), np.arange(3.0)) is None


def test_eval_data_that_does_not_fit_is_refused_naming_the_flag(data_dir, tmp_path):
    config = small()
    manifest = load_manifest(data_dir)
    with pytest.raises(ValueError, match=r"^--eval_data_dir .*empty: no pre-training manifest"):
        evaluation.resolve_source(str(tmp_path / "empty"), data_dir, manifest, config)
    other = str(tmp_path / "long")
    write_shards(other, num_examples=8, num_shards=1, seq_length=64)
    with pytest.raises(ValueError, match=r"^--eval_data_dir .*long: data in .* has max_seq_length=64"):
        evaluation.resolve_source(other, data_dir, manifest, config)
    assert evaluation.resolve_source(data_dir, data_dir, manifest, config)[1]["shards"] == manifest["eval_shards"]


def test_cli_bad_eval_data_dir_is_one_line_and_writes_nothing(data_dir, tmp_path):
    model_dir = tmp_path / "run"
    hparams = json.dumps({k: v for k, v in small().to_dict().items() if k in (
        "vocab_size", "embedding_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
        "generator_hidden_size", "generator_num_heads", "generator_intermediate_size", "generator_num_layers",
        "max_position_embeddings", "max_seq_length")})
    result = subprocess.run(
        [sys.executable, "run_pretraining.py", "--model_size=tiny", f"--data_dir={data_dir}", f"--hparams={hparams}",
         f"--model_dir={model_dir}", f"--eval_data_dir={tmp_path / 'nothing'}", "--num_train_steps=2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("run_pretraining.py: error:")]
    assert len(errors) == 1 and "--eval_data_dir" in errors[0] and "nothing" in errors[0], result.stderr[-2000:]
    assert not model_dir.exists() or not any(p.is_file() for p in model_dir.rglob("*"))


def test_checkpoint_paths_of_a_relative_model_dir_point_at_the_checkpoints(tmp_path, monkeypatch):
    """--do_eval with a relative --model_dir: the checkpoint file may hold paths relative to the working directory."""
    monkeypatch.chdir(tmp_path)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), "runs/r/checkpoints", max_to_keep=3)
    manager.save(checkpoint_number=1)
    manager.save(checkpoint_number=2)
    paths = evaluation.checkpoint_paths("runs/r", all_checkpoints=True)
    assert paths == [os.path.join("runs/r/checkpoints", f"ckpt-{n}") for n in (1, 2)]
    assert all(os.path.exists(p + ".index") for p in paths)
    assert evaluation.checkpoint_paths("runs/r", all_checkpoints=False) == [paths[-1]]
