"""Phase 2 (BERT's 128-then-512 recipe, here 32 then 64): phase 1's model and optimizer state, step 0,
its own schedule and folder, resume, and the refusals."""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.training import pretraining, restore
from electra_tf.training.optimization import WarmupLinearDecay
from pretrain_testutil import SPECIAL_IDS, tiny_config, write_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASE2 = dict(max_seq_length=64, train_batch_size=4, num_train_steps=4, num_warmup_steps=2, learning_rate=2e-3)


def small(**overrides):
    """One layer per encoder (tracing dominates the time); the position table holds 64."""
    return tiny_config(**{"num_layers": 1, "generator_num_layers": 1, **overrides})


def run(config, data_dir, model_dir, **options):
    options = {"log_steps": 1, "steps_per_loop": 2, "save_checkpoints_steps": 2, "export": False, **options}
    return pretraining.train(config, pretraining.TrainOptions(data_dir=data_dir, model_dir=model_dir, **options),
                             tf.distribute.OneDeviceStrategy("/cpu:0"))


def files_of(model_dir, with_phase2=False):
    """Every file of a run directory (its phase2/ aside unless `with_phase2`) with its content's hash."""
    found = {}
    for folder, subfolders, names in os.walk(model_dir):
        if not with_phase2:
            subfolders[:] = [d for d in subfolders if os.path.join(folder, d) != restore.phase2_dir(model_dir)]
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                found[os.path.relpath(os.path.join(folder, name), model_dir)] = hashlib.sha256(f.read()).hexdigest()
    return found


def variables(checkpoint, prefix):
    reader = tf.train.load_checkpoint(checkpoint)
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if n.startswith(prefix)}


@pytest.fixture(scope="module")
def phase1(tmp_path_factory):
    """A finished 4-step phase-1 run at length 32, and shards at 64 for phase 2."""
    root = tmp_path_factory.mktemp("phases")
    data32, data64 = str(root / "data32"), str(root / "data64")
    write_shards(data32, num_examples=32, num_shards=1, seq_length=32)
    write_shards(data64, num_examples=32, num_shards=1, seq_length=64)
    model_dir = str(root / "run")
    run(small(num_train_steps=4), data32, model_dir)
    return dict(dir=model_dir, data64=data64, root=root, files=files_of(model_dir),
                checkpoint=tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")))


def test_phase2_starts_from_phase1_model_and_optimizer_slots_at_step_0(phase1, tmp_path):
    config = small(**PHASE2)
    start = restore.phase2_start(phase1["dir"], str(tmp_path / "p2"), config)
    assert start.checkpoint == phase1["checkpoint"] and start.step == 4
    model, optimizer = pretraining.build_model(config, tf.distribute.get_strategy(), SPECIAL_IDS, 1, "none")
    start.restore(model, optimizer)
    assert int(optimizer.iterations.numpy()) == 0
    saved = tf.train.Checkpoint(model=model, optimizer=optimizer)
    path = saved.write(str(tmp_path / "restored" / "ckpt"))
    ours = variables(path, ("model/", "optimizer/"))
    theirs = variables(phase1["checkpoint"], ("model/", "optimizer/"))
    weights = [n for n in theirs if n.startswith("model/")]
    assert len(theirs) - len(weights) > 2 * len(model.trainable_variables)  # Adam's m and v of every weight
    for name, value in theirs.items():
        if "iterations" in name:
            assert value == 4 and ours[name] == 0
        else:
            np.testing.assert_array_equal(ours[name], value, err_msg=name)
    assert not os.path.exists(tmp_path / "p2")


@pytest.mark.slow  # three command-line runs; the library-level phase-2 tests stay in the default suite
def test_phase2_cli_writes_its_own_folder_with_its_own_schedule_and_resumes_phase2(phase1):
    """`--phase2` for one step (a kill), then the same run again: phase 2 goes on, phase 1 is untouched."""
    config = small(**PHASE2)
    shape = {k: v for k, v in config.to_dict().items() if k in (
        "vocab_size", "embedding_size", "max_position_embeddings", "discriminator", "generator", "dropout_rate")}
    cli = subprocess.run(
        [sys.executable, "run_pretraining.py", "--model_size=tiny", f"--hparams={json.dumps(shape)}",
         f"--data_dir={phase1['data64']}", f"--model_dir={phase1['dir']}", "--phase2", "--train_batch_size=4",
         "--num_train_steps=4", "--num_warmup_steps=2", "--learning_rate=2e-3", "--log_steps=1",
         "--stop_after_steps=1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr[-3000:]
    phase2_dir = restore.phase2_dir(phase1["dir"])
    stored = json.load(open(os.path.join(phase2_dir, "run_config.json")))
    assert stored["max_seq_length"] == 64 and stored["train_batch_size"] == 4  # the length from the shards
    assert stored["phase"]["phase1_checkpoint"] == os.path.abspath(phase1["checkpoint"])
    assert stored["phase"]["phase1_step"] == 4
    schedule = WarmupLinearDecay(2e-3, num_train_steps=4, num_warmup_steps=2)
    logged = [json.loads(line) for line in open(os.path.join(phase2_dir, "train_log.jsonl"))]
    assert [entry["step"] for entry in logged] == [1]
    assert logged[0]["learning_rate"] == pytest.approx(float(schedule(1)))  # 7.5e-4: warm-up from 0
    first = tf.train.latest_checkpoint(os.path.join(phase2_dir, "checkpoints"))
    assert first.endswith("ckpt-1")
    # Step 1 ran at the schedule's step 0 (learning rate 0): phase 1's weights, unchanged.
    for name, value in variables(phase1["checkpoint"], "model/").items():
        np.testing.assert_array_equal(tf.train.load_variable(first, name), value, err_msg=name)

    resumed = run(config, phase1["data64"], phase2_dir, phase2_from=phase1["dir"])
    assert [h["step"] for h in resumed] == [2, 3, 4]
    for h in resumed:
        assert h["learning_rate"] == pytest.approx(float(schedule(h["step"])))
    iterations = [v for n, v in variables(os.path.join(phase2_dir, "checkpoints", "ckpt-4"), "optimizer/").items()
                  if "iterations" in n]
    assert iterations == [4]
    assert json.load(open(os.path.join(phase2_dir, "run_config.json")))["phase"] == stored["phase"]
    assert files_of(phase1["dir"]) == phase1["files"]  # phase 1's checkpoints, logs and config untouched


def test_phase2_refuses_another_architecture_a_run_without_checkpoints_and_init_checkpoint(phase1, tmp_path):
    target = str(tmp_path / "p2")
    with pytest.raises(ValueError, match=r"--phase2: discriminator.hidden_size is 32 in phase 1 .* but 64 now"):
        run(small(hidden_size=64, **PHASE2), phase1["data64"], target, phase2_from=phase1["dir"])
    with pytest.raises(ValueError, match="--phase2: optimizer is adamw in phase 1"):
        run(small(optimizer="lamb", **PHASE2), phase1["data64"], target, phase2_from=phase1["dir"])
    with pytest.raises(ValueError, match="--init_checkpoint cannot be used with --phase2"):
        run(small(**PHASE2), phase1["data64"], target, phase2_from=phase1["dir"], init_checkpoint=phase1["dir"])
    assert not os.path.exists(target)  # refused before anything is written
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "run_config.json").write_text(small().to_json())
    with pytest.raises(ValueError, match="--phase2: no checkpoint in .*; run phase 1 there first"):
        restore.phase2_start(str(empty), target, small(**PHASE2))
    with pytest.raises(ValueError, match="its own directory"):
        restore.phase2_start(phase1["dir"], phase1["dir"], small(**PHASE2))


def test_max_seq_length_above_the_position_table_is_refused_in_one_line_before_anything_is_written(phase1):
    data128 = str(phase1["root"] / "data128")
    write_shards(data128, num_examples=4, num_shards=1, seq_length=128)
    shape = json.dumps({"max_position_embeddings": 64, "vocab_size": 64})
    before = files_of(phase1["dir"], with_phase2=True)
    result = subprocess.run(
        [sys.executable, "run_pretraining.py", "--model_size=tiny", f"--hparams={shape}", f"--data_dir={data128}",
         f"--model_dir={phase1['dir']}", "--phase2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("run_pretraining.py: error:")]
    assert errors == ["run_pretraining.py: error: --max_seq_length (unset: the shards' length in --data_dir, 128) "
                      "exceeds the model's position table, max_position_embeddings=64: use shards of at most 64 "
                      "tokens"], result.stderr[-2000:]
    assert files_of(phase1["dir"], with_phase2=True) == before
    # Any run, phase 2 or not, asking for more positions than the table holds (the same check in main()).
    with pytest.raises(ValueError, match=r"^--max_seq_length=128 exceeds .* max_position_embeddings=64"):
        restore.requested_sequence_length(128, None, 64)


def test_requested_sequence_length_defaults_to_the_shards_only_in_phase2(phase1):
    assert restore.requested_sequence_length(None, None, 64) is None
    assert restore.requested_sequence_length(48, phase1["data64"], 64) == 48
    assert restore.requested_sequence_length(None, phase1["data64"], 64) == 64
