"""`python run_pretraining.py --model_size=SIZE` with no data trains every size on the demo corpus."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from electra_tf.training import cost
from electra_tf.config import MODEL_SIZES, get_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_pretraining(cwd, *flags):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, os.path.join(ROOT, "run_pretraining.py"), *flags], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


# tiny (the no-argument demo) is covered by the resume test below, by default. The other sizes (mini ~27 s,
# small ~30 s, base ~75 s of the 15-minute default budget; large a 335M-parameter model and gigabytes of export)
# run under `-m slow`; test_parameter_count_matches_the_model checks the sizes' tables by default.
SIZES = [pytest.param(size, marks=pytest.mark.slow) for size in MODEL_SIZES if size != "tiny"]


@pytest.mark.parametrize("size", SIZES)
def test_every_size_trains_on_the_demo_corpus_without_data(size, tmp_path):
    # --eval_batches=0: the held-out evaluation is not what this tests (test_evaluation.py covers it).
    result = run_pretraining(tmp_path, f"--model_size={size}", "--train_batch_size=2", "--stop_after_steps=1",
                             "--log_steps=1", "--eval_batches=0")
    assert result.returncode == 0, result.stderr[-3000:]
    seq = get_config(size).max_seq_length
    data_dir, model_dir = tmp_path / "electra_demo" / size / "data", tmp_path / "electra_demo" / size / "model"
    manifest = json.loads((data_dir / "manifest.json").read_text())
    assert manifest["max_seq_length"] == seq and manifest["vocab_size"] == 8192
    assert (model_dir / "checkpoints" / "ckpt-1.index").exists()
    exported = json.loads((model_dir / "export" / "electra_config.json").read_text())
    assert exported["config"]["vocab_size"] == 8192 and exported["config"]["model_size"] == size
    assert exported["step"] == 1
    rows = [json.loads(line) for line in (model_dir / "train_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1] and np.isfinite(rows[0]["loss"])
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(model_dir / "train"))
    log = result.stderr
    assert f"training `{size}` on the offline demo corpus" in log
    assert f"built at {size}'s sequence length {seq}; its 8192-word vocabulary replaces {size}'s 30522" in log
    assert "Only CPUs here" in log and "First step:" in log and "Your own text:" in log


@pytest.mark.slow  # ~32 s (two CLI runs); test_every_size_trains_on_the_demo_corpus_without_data (the demo) and
# test_training.py::test_stopped_and_resumed_run_equals_uninterrupted_run (resuming) run by default
def test_sizes_keep_their_own_folders_and_a_rerun_resumes(tmp_path):
    first = run_pretraining(tmp_path, "--train_batch_size=2", "--stop_after_steps=1")  # no size: the tiny demo
    assert first.returncode == 0, first.stderr[-3000:]
    assert "training `tiny` on the offline demo corpus" in first.stderr
    assert (tmp_path / "electra_demo" / "tiny" / "model" / "export" / "electra_config.json").exists()
    again = run_pretraining(tmp_path, "--model_size=tiny", "--train_batch_size=2", "--stop_after_steps=4")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Resumed from" in again.stderr and "ckpt-1" in again.stderr
    assert "Steps 3-4:" in again.stderr and "steps to go take" in again.stderr  # timed after the first step
    assert sorted(os.listdir(tmp_path / "electra_demo")) == ["tiny"]
    assert (tmp_path / "electra_demo" / "tiny" / "model" / "checkpoints" / "ckpt-4.index").exists()


@pytest.mark.slow  # ~10 s CLI run; test_training tests a bad --data_dir in one line by default
def test_a_data_dir_mismatch_stays_a_one_line_error(tmp_path):
    from data_prep.demo import build_demo_dataset

    data_dir = build_demo_dataset(str(tmp_path / "data"), log=lambda message: None)
    result = run_pretraining(tmp_path, "--model_size=small", f"--data_dir={data_dir}", f"--model_dir={tmp_path / 'm'}")
    assert result.returncode == 2
    assert "run_pretraining.py: error: data in" in result.stderr and "vocab_size=8192" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "m" / "checkpoints").exists()


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_parameter_count_matches_the_model(size):
    from electra_tf.model.networks import pretrainer_from_config

    config = get_config(size, objective="rtd")
    model = pretrainer_from_config(config, special_token_ids={"pad": 0, "cls": 2, "sep": 3, "mask": 4})
    model.build_all()
    encoders = model.generator.count_params() + model.discriminator.count_params() - \
        model.discriminator.embeddings.count_params()  # the embeddings block is shared
    # The estimate leaves out the heads, the embeddings' LayerNorm and the FFN's intermediate biases.
    assert abs(cost.parameter_count(config) - encoders) <= 0.01 * encoders


def test_micro_batches_fit_the_budget_and_divide_the_batch():
    config = get_config("base")
    per_example = cost.activation_bytes_per_example(config)
    budget = cost.state_bytes(config) + int(per_example * 20 / cost.MEMORY_MARGIN)  # room for 20 examples
    k = cost.micro_batches_to_fit(config, 256, budget)
    assert 256 % k == 0 and 256 // k <= 20 and 256 // (k // 2) > 20  # the fewest that fit: 16 per micro-batch
    assert cost.micro_batches_to_fit(get_config("tiny"), 32, 16 * 2**30) == 1
    assert cost.micro_batches_to_fit(config, 6, 0) == 6  # nothing fits: one example at a time


def test_activation_bytes_grow_with_the_square_of_the_length_in_attention():
    config = get_config("base", objective="mlm")
    short, long = (cost.activation_bytes_per_example(config, n) for n in (128, 512))
    encoder = config.discriminator
    attention = lambda s: 4 * encoder.num_layers * 3 * encoder.num_heads * s * s  # noqa: E731
    assert long - attention(512) == pytest.approx(4 * (short - attention(128)), rel=1e-9)


def test_format_duration_reads_at_a_glance():
    assert cost.format_duration(5) == "5.0 s"
    assert cost.format_duration(60) == "1.0 min"
    assert cost.format_duration(3 * 3600) == "3.0 h"
    assert cost.format_duration(10 * 86400) == "10.0 days"
