"""A run's recorded recipe (issue #38, items 1 and 2): `run_config.json` holds the whole config and the
options that decide what the run learns or its data order (seed included); a resume that changes one is
refused in one line naming the field and both values; phase 2 takes phase 1's recorded config and changes
only its length, batch, steps and schedule."""

import json
import logging
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from electra_tf.config import get_config
from electra_tf.options import ExecutionOptions, TrainOptions
from electra_tf.text.manifest import sha256_file
from electra_tf.training import pretraining, restore, run_record
from electra_tf.training.optimization import WarmupLinearDecay
from pretrain_testutil import fake_checkpoint, tiny_config, write_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED, SHUFFLE_BUFFER = 5, 16  # not the defaults, so a record of the defaults would not pass


def small(**overrides):
    """One layer per encoder (tracing dominates the time); batch 8, length 32, 4 steps, linear decay."""
    return tiny_config(**{"num_layers": 1, "generator_num_layers": 1, "num_train_steps": 4, **overrides})


def train_options(data_dir, model_dir, **overrides):
    return TrainOptions(data_dir=data_dir, model_dir=model_dir, **{
        "seed": SEED, "shuffle_buffer": SHUFFLE_BUFFER, "log_steps": 1, "steps_per_loop": 1,
        "save_checkpoints_steps": 1, "export": False, **overrides})


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A 4-step run stopped at step 1 (its checkpoint), the one real training run of this file."""
    root = tmp_path_factory.mktemp("recipe")
    data_dir, model_dir = str(root / "data"), str(root / "run")
    manifest = write_shards(data_dir, num_examples=32, num_shards=1, seq_length=32)
    pretraining.train(small(), train_options(data_dir, model_dir, stop_after_steps=1),
                      tf.distribute.OneDeviceStrategy("/cpu:0"))
    options = run_record.recipe_options(train_options(data_dir, model_dir), manifest)
    return dict(root=root, data_dir=data_dir, model_dir=model_dir, manifest=manifest, options=options,
                path=os.path.join(model_dir, "run_config.json"))


def read_run_config(path) -> dict:
    with open(path) as f:
        return json.load(f)


def test_run_config_records_the_seed_data_order_precision_and_vocabulary(stopped_run):
    stored = read_run_config(stopped_run["path"])
    data, execution = stored["training"].pop("data"), stored["training"].pop("execution")
    assert stored["training"] == {"seed": SEED, "shuffle_buffer": SHUFFLE_BUFFER, "input_sharding": "batch",
                                  "mixed_precision": "float32", "vocab_sha256": stopped_run["manifest"]["vocab_sha256"]}
    # One record file (#55): the data's identity and the execution choices that change the random streams.
    assert data == {"source": "shards", "vocab_file": stopped_run["manifest"]["vocab_file"], "vocab_size": 64,
                    "manifest_sha256": sha256_file(os.path.join(stopped_run["data_dir"], "manifest.json"))}
    resolved = ExecutionOptions().resolve({"CPU"})  # what `auto` is on this CPU-only run
    assert {name: execution[name] for name in ("kernels", "dropout_masks", "sampling", "adam_kernel")} == \
        {name: getattr(resolved, name) for name in ("kernels", "dropout_masks", "sampling", "adam_kernel")}
    assert (execution["gradient_accumulation_steps"], execution["replicas"], execution["workers"],
            execution["data_service"]) == (1, 1, 1, False)
    assert sorted(os.listdir(stopped_run["model_dir"])) == ["checkpoints", "run_config.json", "train",
                                                             "train_log.jsonl"]  # no execution.json
    assert stored["mask_prob"] == 0.15 and stored["train_batch_size"] == 8  # the whole config, as before


def test_resume_with_another_batch_size_is_refused_in_one_line_before_anything_is_built(stopped_run):
    """The issue's repro: it died inside the compiled loop ("Incompatible shapes ... [16,64] ... [8,64]")."""
    before = open(stopped_run["path"]).read()
    with pytest.raises(ValueError) as refused:
        pretraining.train(small(train_batch_size=4), train_options(stopped_run["data_dir"], stopped_run["model_dir"]),
                          tf.distribute.OneDeviceStrategy("/cpu:0"))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"--model_dir {stopped_run['model_dir']} holds a run with another recipe "
                              "(train_batch_size (--train_batch_size): 8 there vs 4 now)"), message
    assert open(stopped_run["path"]).read() == before
    assert run_record.steps_taken(stopped_run["model_dir"]) == 1


@pytest.mark.parametrize("config_changes, option_changes, named", [
    ({}, {"seed": 6}, f"seed (--seed): {SEED} there vs 6 now"),
    ({}, {"shuffle_buffer": 0}, f"shuffle_buffer (--shuffle_buffer): {SHUFFLE_BUFFER} there vs 0 now"),
    ({}, {"input_sharding": "file"}, "input_sharding (--input_sharding): batch there vs file now"),
    ({}, {"mixed_precision": "mixed_bfloat16"}, "mixed_precision (--mixed_precision): float32 there vs mixed_bfloat16"),
    ({"mask_prob": 0.25}, {}, "mask_prob (--hparams): 0.15 there vs 0.25 now"),
    ({"disallow_correct": True}, {}, "disallow_correct (--hparams): False there vs True now"),
    ({"disc_weight": 30.0}, {}, "disc_weight (--hparams): 50.0 there vs 30.0 now"),
    ({"objective": "rtd_masked_only"}, {}, "objective (--objective): rtd there vs rtd_masked_only now"),
    ({"optimizer": "lamb"}, {}, "optimizer (--optimizer): adamw there vs lamb now"),
    ({"learning_rate": 2e-3}, {}, "learning_rate (--learning_rate): "),
    ({"num_warmup_steps": 3}, {}, "num_warmup_steps (--num_warmup_steps): 2 there vs 3 now"),
    ({"lr_decay_power": 0.5}, {}, "lr_decay_power (--hparams): 1.0 there vs 0.5 now"),
    ({"max_seq_length": 16}, {}, "max_seq_length (--max_seq_length): 32 there vs 16 now"),
    ({"vocab_size": 80}, {}, "vocab_size (--hparams): 64 there vs 80 now"),
    ({"num_train_steps": 8}, {}, "num_train_steps (--num_train_steps): 4 there vs 8 now, refused at step 1: the "
                                 "learning rate decays to 0 at num_train_steps"),
])
def test_a_resume_that_changes_the_recipe_is_refused_naming_the_field_and_both_values(
        stopped_run, config_changes, option_changes, named):
    with pytest.raises(ValueError) as refused:
        run_record.check_start(stopped_run["model_dir"], small(**config_changes), write=False,
                                 options={**stopped_run["options"], **option_changes})
    message = str(refused.value)
    assert "\n" not in message and named in message, message
    assert message.startswith(f"--model_dir {stopped_run['model_dir']} holds a run with another recipe (")
    assert message.endswith(f"re-run with the values recorded in {stopped_run['path']} to resume it, or use a new "
                            "--model_dir")


def test_a_resume_on_another_vocabulary_is_refused_by_the_vocabulary_rule_naming_both_digests(stopped_run):
    with pytest.raises(ValueError) as refused:
        run_record.check_start(stopped_run["model_dir"], small(), write=False,
                               options={**stopped_run["options"], "vocab_sha256": "0" * 64})
    message = str(refused.value)
    assert "\n" not in message
    assert f"(sha256 {'0' * 64}) is not the vocabulary --model_dir {stopped_run['model_dir']} recorded" in message
    assert stopped_run["manifest"]["vocab_sha256"] in message and "--data_dir's vocabulary must be" in message


def test_a_resume_may_change_paths_cadence_fault_handling_and_execution_options(stopped_run, tmp_path):
    moved = str(tmp_path / "moved_data")  # the same shards elsewhere: the same vocabulary
    changed = train_options(
        moved, str(tmp_path / "elsewhere"), log_steps=7, steps_per_loop=3, save_checkpoints_steps=5,
        keep_checkpoint_max=1, stop_after_steps=2, skip_nonfinite_steps=True, skip_corrupt_records=True,
        eval_data_dir=moved, eval_every_steps=0, eval_batches=1, eval_batch_size=2, mixed_precision="fp32",
        execution=ExecutionOptions(kernels="reference", jit_compile=True, gradient_accumulation_steps=2))
    options = run_record.recipe_options(changed, stopped_run["manifest"])
    assert options == stopped_run["options"]  # fp32 and none are one precision
    run_record.check_start(stopped_run["model_dir"], small(), write=False, options=options)


def test_num_train_steps_changes_only_where_the_learning_rate_of_the_steps_taken_stays(tmp_path, stopped_run):
    """Linear decay depends on the total from step 1 on; with lr_decay_power=0 only the end moves."""
    assert float(WarmupLinearDecay(1e-3, 4, 2)(1)) != float(WarmupLinearDecay(1e-3, 8, 2)(1))
    assert [float(WarmupLinearDecay(1e-3, 4, 2, power=0.0)(s)) for s in range(4)] == \
        [float(WarmupLinearDecay(1e-3, 8, 2, power=0.0)(s)) for s in range(4)]
    options = stopped_run["options"]

    def run_dir(name, steps_taken, **config):
        model_dir = str(tmp_path / name)
        run_record.check_start(model_dir, small(**config), options=options)
        if steps_taken:
            fake_checkpoint(model_dir, steps_taken)
        return model_dir

    for name, steps, power in (("not_started", 0, 1.0), ("constant_rate", 3, 0.0)):
        allowed = run_dir(name, steps, lr_decay_power=power)
        run_record.check_start(allowed, small(num_train_steps=8, lr_decay_power=power), options=options)
        assert read_run_config(os.path.join(allowed, "run_config.json"))["num_train_steps"] == 8
    decaying = run_dir("decaying", 3)
    with pytest.raises(ValueError, match=r"num_train_steps \(--num_train_steps\): 4 there vs 8 now, refused at step 3"):
        run_record.check_start(decaying, small(num_train_steps=8), options=options)


def test_a_run_folder_from_before_the_record_resumes_with_one_note_and_is_recorded_from_then_on(
        stopped_run, tmp_path, caplog):
    old = read_run_config(stopped_run["path"])
    del old["training"]
    model_dir = tmp_path / "old_run"
    model_dir.mkdir()
    (model_dir / "run_config.json").write_text(json.dumps(old))
    fake_checkpoint(str(model_dir))
    with pytest.raises(ValueError, match=r"train_batch_size \(--train_batch_size\): 8 there vs 4 now"):
        run_record.check_start(str(model_dir), small(train_batch_size=4), options=stopped_run["options"])
    caplog.set_level(logging.WARNING)
    caplog.clear()
    run_record.check_start(str(model_dir), small(), options=stopped_run["options"])
    notes = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert notes == [f"--model_dir {model_dir} was written before runs recorded seed, shuffle_buffer, "
                     "input_sharding, mixed_precision, vocab_sha256: this resume cannot check them (the config "
                     "is checked; these are recorded from now on)"]
    assert read_run_config(model_dir / "run_config.json")["training"] == stopped_run["options"]
    caplog.clear()
    run_record.check_start(str(model_dir), small(), options=stopped_run["options"])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    run_record.check_start(str(model_dir), small())  # a caller without options keeps the record
    assert read_run_config(model_dir / "run_config.json")["training"] == stopped_run["options"]


PHASE2_FLAGS = dict(max_seq_length=64, train_batch_size=4, num_train_steps=3, num_warmup_steps=1, learning_rate=2e-3)
UNSET = dict(model_size=None, objective=None, optimizer=None)


@pytest.fixture
def phase1_dir(tmp_path):
    """The config a phase-1 run with --hparams='{"disallow_correct": true, "disc_weight": 30}' --optimizer=lamb
    records (position table 64; no options, as before they were recorded)."""
    model_dir = str(tmp_path / "phase1")
    run_record.check_start(model_dir, small(disallow_correct=True, disc_weight=30.0, optimizer="lamb"))
    return model_dir


def test_phase2_is_phase1s_recorded_config_with_only_length_batch_steps_and_schedule_changed(phase1_dir):
    phase1 = restore.phase1_config(phase1_dir)
    config = restore.phase2_config(phase1_dir, {}, {**UNSET, **PHASE2_FLAGS})
    assert config == phase1.replace(**PHASE2_FLAGS)
    assert config.disallow_correct is True and config.disc_weight == 30.0 and config.optimizer == "lamb"
    # Phase 1's own values may be repeated; --hparams may set the schedule.
    repeated = restore.phase2_config(phase1_dir, {"disc_weight": 30, "lr_decay_power": 0.5, "generator.num_layers": 1},
                                     {**PHASE2_FLAGS, "model_size": "tiny", "objective": "rtd", "optimizer": "lamb"})
    assert repeated == phase1.replace(lr_decay_power=0.5, **PHASE2_FLAGS)


@pytest.mark.parametrize("hparams, flags, named", [
    ({"disc_weight": 50}, {}, "--hparams disc_weight=50 (phase 1: 30.0)"),
    ({"disallow_correct": False}, {}, "--hparams disallow_correct=False (phase 1: True)"),
    ({"mask_prob": 0.2}, {}, "--hparams mask_prob=0.2 (phase 1: 0.15)"),
    ({"generator": {"num_layers": 2}}, {}, "--hparams generator.num_layers=2 (phase 1: 1)"),
    ({}, {"objective": "rtd_masked_only"}, "--objective=rtd_masked_only (phase 1: rtd)"),
    ({}, {"optimizer": "adamw"}, "--optimizer=adamw (phase 1: lamb)"),
    ({}, {"model_size": "small"}, "--model_size=small (phase 1: tiny)"),
])
def test_phase2_refuses_a_flag_that_contradicts_phase1_in_one_line(phase1_dir, hparams, flags, named):
    with pytest.raises(ValueError) as refused:
        restore.phase2_config(phase1_dir, hparams, {**UNSET, **PHASE2_FLAGS, **flags})
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"--phase2: {named} contradicts phase 1's config in "
                              f"{os.path.join(phase1_dir, 'run_config.json')}; phase 2 keeps phase 1's model, "
                              "objective and optimizer and changes only max_seq_length, train_batch_size, "
                              "num_train_steps, num_warmup_steps, learning_rate, lr_decay_power"), message


def test_phase2_start_refuses_a_config_whose_objective_options_are_not_phase1s(phase1_dir, tmp_path):
    config = small(disallow_correct=True, disc_weight=50.0, optimizer="lamb", **PHASE2_FLAGS)
    with pytest.raises(ValueError, match=r"^--phase2: disc_weight is 30.0 in phase 1 .* but 50.0 now"):
        restore.phase2_start(phase1_dir, str(tmp_path / "phase2"), config)


def test_phase2_cli_without_hparams_keeps_phase1s_objective_options(tmp_path):
    """The issue's repro: phase 1 `--model_size=tiny --hparams='{"disallow_correct": true, "disc_weight": 30}'`,
    then the same size with --phase2 and no --hparams. Phase 1 here is its recorded config alone (no
    checkpoint), so the command stops (exit 2) right after logging the config it built."""
    phase1_dir, data64 = str(tmp_path / "phase1"), str(tmp_path / "data64")
    run_record.check_start(phase1_dir, get_config("tiny", {"disallow_correct": True, "disc_weight": 30}))
    write_shards(data64, num_examples=8, num_shards=1, seq_length=64)
    result = subprocess.run(
        [sys.executable, "run_pretraining.py", "--model_size=tiny", f"--data_dir={data64}",
         f"--model_dir={phase1_dir}", "--phase2", "--train_batch_size=4", "--num_train_steps=3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("run_pretraining.py: error: --phase2: no checkpoint in")
    logged = result.stderr[result.stderr.index("Config (float32): ") + len("Config (float32): "):]
    config, _ = json.JSONDecoder().raw_decode(logged)
    assert (config["disallow_correct"], config["disc_weight"]) == (True, 30)
    assert (config["max_seq_length"], config["train_batch_size"], config["num_train_steps"]) == (64, 4, 3)


def test_a_run_folder_with_execution_json_resumes_with_its_micro_batches_and_one_note(stopped_run, tmp_path, caplog):
    """Folders written before the one record kept the micro-batches in execution.json: still read, and the
    execution choices they did not record are named as unchecked, once, then recorded."""
    old = read_run_config(stopped_run["path"])
    del old["training"]["execution"]
    model_dir = tmp_path / "old_run"
    model_dir.mkdir()
    (model_dir / "run_config.json").write_text(json.dumps(old))
    (model_dir / run_record.LEGACY_EXECUTION_FILE).write_text(json.dumps({"gradient_accumulation_steps": 3}))
    assert run_record.recorded_micro_batches(str(model_dir)) is None  # no checkpoint yet: a retry chooses again
    fake_checkpoint(str(model_dir))
    assert run_record.recorded_micro_batches(str(model_dir)) == 3
    execution = dict(read_run_config(stopped_run["path"])["training"]["execution"], gradient_accumulation_steps=3)
    caplog.set_level(logging.WARNING)
    run_record.check_start(str(model_dir), small(), options=stopped_run["options"], execution=execution)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"--model_dir {model_dir} was written before runs recorded their execution choices: this resume cannot "
        "check them (recorded from now on)"]
    assert read_run_config(model_dir / "run_config.json")["training"]["execution"] == execution
    assert run_record.recorded_micro_batches(str(model_dir)) == 3
