"""The pre-training loop: distribution equivalence, exact resume, data checks, export, CLI."""

import json
import logging
import os
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import convert
from electra_tf.training import pretraining
from electra_tf.convert import export_dir as export_format
from electra_tf.options import ExecutionOptions
from electra_tf.model.networks import pretrainer_from_config
from pretrain_testutil import SPECIAL_IDS, tiny_config, write_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=96, num_shards=3)
    return path


def small(**overrides):
    """One layer per encoder: tracing dominates these tests' time, not compute."""
    return tiny_config(**{"num_layers": 1, "generator_num_layers": 1, **overrides})


def run(config, data_dir, model_dir, strategy=None, **options):
    options = {"log_steps": 1, "steps_per_loop": 2, "save_checkpoints_steps": 2, **options}
    strategy = strategy or tf.distribute.OneDeviceStrategy("/cpu:0")
    return pretraining.train(config, pretraining.TrainOptions(data_dir=data_dir, model_dir=model_dir, **options), strategy)


def checkpoint_values(model_dir):
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith(("model/", "optimizer/"))]
    return {n: reader.get_tensor(n) for n in names}


def assert_same_training(one, two, dir_one, dir_two, names):
    """Two runs' logged values (≤ 1e-5, relative) and final model weights (≤ 1e-5) agree."""
    assert [h["step"] for h in one] == [h["step"] for h in two]
    for a, b in zip(one, two):
        for name in names:
            assert abs(a[name] - b[name]) <= 1e-5 * max(1.0, abs(a[name])), (name, a[name], b[name])
    one_values, two_values = checkpoint_values(dir_one), checkpoint_values(dir_two)
    model_keys = [k for k in one_values if k.startswith("model/")]
    assert model_keys
    for key in model_keys:
        np.testing.assert_allclose(one_values[key], two_values[key], atol=1e-5, err_msg=key)


@pytest.mark.slow  # ~8 s; test_device_option_sets checks two replicas x two micro-batches against one device by default
def test_mirrored_two_devices_match_one_device(data_dir, tmp_path):
    config = small(dropout_rate=0.0, num_train_steps=3)
    one = run(config, data_dir, str(tmp_path / "one"), export=False)
    # No collective ops: another test's MirroredStrategy in this process would clash on their instance keys.
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    two = run(config, data_dir, str(tmp_path / "two"), strategy=mirrored, export=False)
    assert [h["step"] for h in one] == [1, 2, 3]
    assert_same_training(one, two, str(tmp_path / "one"), str(tmp_path / "two"),
                         ("step_loss", "gen_loss", "disc_loss", "gen_accuracy", "disc_auc", "grad_norm"))


def test_stopped_and_resumed_run_equals_uninterrupted_run(data_dir, tmp_path):
    config = small(num_train_steps=4)  # dropout on: its RNG state must survive the restart too
    run(config, data_dir, str(tmp_path / "full"), export=False)
    partial = run(config, data_dir, str(tmp_path / "resumed"), stop_after_steps=2, export=False)
    assert partial[-1]["step"] == 2
    resumed = run(config, data_dir, str(tmp_path / "resumed"), export=False)
    assert [h["step"] for h in resumed] == [3, 4]
    full_values = checkpoint_values(str(tmp_path / "full"))
    resumed_values = checkpoint_values(str(tmp_path / "resumed"))
    assert set(full_values) == set(resumed_values)
    for key, value in full_values.items():
        np.testing.assert_array_equal(value, resumed_values[key], err_msg=key)


def test_shards_that_disagree_with_the_model_are_refused(data_dir, tmp_path):
    with pytest.raises(ValueError, match="max_seq_length"):
        run(tiny_config(max_seq_length=48), data_dir, str(tmp_path / "a"))
    with pytest.raises(ValueError, match="vocab"):
        run(tiny_config(vocab_size=80), data_dir, str(tmp_path / "b"))
    assert not os.path.exists(tmp_path / "a" / "checkpoints")


def test_model_dir_of_another_architecture_is_refused(data_dir, tmp_path):
    run(small(num_train_steps=2), data_dir, str(tmp_path / "m"), export=False)
    with pytest.raises(ValueError, match="hidden_size"):
        run(small(num_train_steps=2, hidden_size=64, num_heads=2), data_dir, str(tmp_path / "m"))


@pytest.mark.slow  # ~15 s; test_finetuning_run loads an export into fine-tuning by default
def test_export_loads_the_pretrained_encoder(data_dir, tmp_path):
    model_dir = str(tmp_path / "run")
    run(small(num_train_steps=2), data_dir, model_dir)
    export_dir = os.path.join(model_dir, "export")
    meta = export_format.read_export_metadata(export_dir)
    assert meta["step"] == 2 and meta["finetuning_role"] == "discriminator"
    encoder, config, vocab = convert.load_encoder(export_dir)
    assert vocab and open(vocab).read().startswith("[PAD]\n[UNK]")
    # The exported weights are the final checkpoint's discriminator weights.
    restored = pretrainer_from_config(config, special_token_ids=SPECIAL_IDS).build_all()
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    tf.train.Checkpoint(model=restored).restore(latest).expect_partial()
    assert len(encoder.weights) == len(restored.discriminator.weights)
    for ours, saved in zip(encoder.weights, restored.discriminator.weights):
        np.testing.assert_array_equal(ours.numpy(), saved.numpy(), err_msg=ours.path)
    fresh = pretrainer_from_config(config, special_token_ids=SPECIAL_IDS).build_all()
    assert not np.array_equal(fresh.discriminator.weights[-3].numpy(), encoder.weights[-3].numpy())
    reloaded = keras.saving.load_model(os.path.join(export_dir, "discriminator.keras"))
    inputs = {"token_ids": np.array([[2, 7, 9, 3]], "int32"), "segment_ids": np.zeros((1, 4), "int32"),
              "padding_mask": np.ones((1, 4), "int32")}
    np.testing.assert_allclose(reloaded(inputs), encoder(inputs), atol=1e-6)


@pytest.mark.parametrize("hidden_act", ["gelu_approximate", "gelu"])
def test_keras_hub_export_reproduces_sequence_output(hidden_act, tmp_path):
    model = pretrainer_from_config(tiny_config(hidden_act=hidden_act), special_token_ids=SPECIAL_IDS).build_all()
    for variable in model.discriminator.weights:  # move off the init so GELU variants differ measurably
        variable.assign(variable + tf.random.normal(variable.shape, stddev=0.3, seed=1))
    export_format.save_ours(model, str(tmp_path / "export"))
    backbone = keras_hub.models.ElectraBackbone.from_preset(str(tmp_path / "export" / "keras_hub"))
    inputs = {"token_ids": np.array([[2, 7, 9, 11, 3, 0]], "int32"),
              "segment_ids": np.array([[0, 0, 0, 1, 1, 0]], "int32"),
              "padding_mask": np.array([[1, 1, 1, 1, 1, 0]], "int32")}
    ours = model.discriminator(inputs).numpy()
    theirs = backbone(inputs)["sequence_output"].numpy()
    note = json.load(open(tmp_path / "export" / "keras_hub" / "electra_export.json"))
    if hidden_act == "gelu_approximate":
        np.testing.assert_allclose(theirs, ours, atol=1e-5)
        assert "warning" not in note
    else:
        assert np.abs(theirs - ours).max() > 1e-5
        assert "warning" in note and note["max_abs_sequence_output_deviation"] > 1e-5


def test_cli_trains_exports_and_reports_bad_data_in_one_line(data_dir, tmp_path):
    hparams = json.dumps({k: v for k, v in tiny_config().to_dict().items() if k in (
        "vocab_size", "embedding_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
        "generator_hidden_size", "generator_num_heads", "generator_intermediate_size", "generator_num_layers",
        "max_position_embeddings", "max_seq_length")})
    base = [sys.executable, "run_pretraining.py", "--model_size=tiny", f"--data_dir={data_dir}",
            f"--hparams={hparams}", "--train_batch_size=8", "--log_steps=1"]
    ok = subprocess.run(base + [f"--model_dir={tmp_path / 'cli'}", "--num_train_steps=2"], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "disc_auc" in ok.stdout and os.path.isdir(tmp_path / "cli" / "export" / "keras_hub")
    bad = subprocess.run(base + [f"--model_dir={tmp_path / 'bad'}", "--max_seq_length=64"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    error_lines = [line for line in bad.stderr.splitlines() if line.startswith("run_pretraining.py: error:")]
    assert len(error_lines) == 1 and "max_seq_length" in error_lines[0], bad.stderr[-2000:]
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_with_float32_losses(precision, data_dir, tmp_path):
    from electra_tf.training.distribution import set_mixed_precision

    set_mixed_precision(precision)
    try:
        history = run(small(num_train_steps=2), data_dir, str(tmp_path / precision), mixed_precision=precision,
                      export=False)
        model, optimizer = pretraining.build_model(small(), tf.distribute.get_strategy(), SPECIAL_IDS, 0, precision)
    finally:
        set_mixed_precision("none")
    assert [h["step"] for h in history] == [1, 2]
    assert all(np.isfinite(h["step_loss"]) and h["step_loss"] > 0 for h in history)
    assert model.discriminator.transformer_layers[0].compute_dtype == ("bfloat16" if precision == "bf16" else "float16")
    assert model.discriminator.weights[0].dtype == "float32"  # master weights stay float32
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer) == (precision == "fp16")


@pytest.mark.slow  # ~19 s; test_continued_pretraining.py tests the HF and official starts by default
def test_continued_pretraining_from_a_hugging_face_checkpoint(tmp_path):
    from safetensors.numpy import load_file

    hf_dir = os.path.join(ROOT, "tests", "fixtures", "hf_electra")
    data = str(tmp_path / "data")
    write_shards(data, num_examples=16, num_shards=1, seq_length=32, vocab_size=1000)
    result = subprocess.run(
        [sys.executable, "run_pretraining.py", f"--data_dir={data}", f"--model_dir={tmp_path / 'run'}",
         f"--init_checkpoint={hf_dir}", "--max_seq_length=32", "--train_batch_size=4", "--num_train_steps=1",
         "--log_steps=1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # The architecture came from the checkpoint, not from --model_size's defaults.
    meta = export_format.read_export_metadata(str(tmp_path / "run" / "export"))
    hf_config = json.load(open(os.path.join(hf_dir, "discriminator", "config.json")))
    assert meta["config"]["discriminator"]["hidden_size"] == hf_config["hidden_size"]
    assert meta["config"]["discriminator"]["num_layers"] == hf_config["num_hidden_layers"]
    # Step 1 has learning rate 0 (warm-up starts at 0), so the export holds the HF weights.
    encoder, _, _ = convert.load_encoder(str(tmp_path / "run" / "export"))
    hf = load_file(os.path.join(hf_dir, "discriminator", "model.safetensors"))
    np.testing.assert_array_equal(encoder.embeddings.token_embedding.embeddings.numpy(),
                                  hf["electra.embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(encoder.transformer_layers[0]._feedforward_output_dense.kernel.numpy(),
                                  hf["electra.encoder.layer.0.output.dense.weight"].T)


def test_tensorboard_shows_what_the_discriminator_sees(tmp_path):
    """On data of 5 examples: fewer than the preview's 8 (a preview batched by 8 once found none and crashed)."""
    data_dir, model_dir = str(tmp_path / "shards"), str(tmp_path / "run")
    write_shards(data_dir, num_examples=5, num_shards=1)
    run(small(num_train_steps=2), data_dir, model_dir, export=False, log_steps=2)
    found = {}
    for name in os.listdir(os.path.join(model_dir, "train")):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(model_dir, "train", name)):
            for value in event.summary.value:
                found[value.tag] = (value.metadata.plugin_data.plugin_name, value.tensor)
    assert found["rtd/p_replaced/original"][0] == "histograms"
    assert found["rtd/p_replaced/replaced"][0] == "histograms"
    plugin, tensor = found["rtd/example"]
    text = tf.make_ndarray(tensor).item().decode()
    assert plugin == "text" and "| position | original | discriminator input | p(replaced) |" in text
    assert "(replaced)" in text and "tok" in text  # tokens shown by name from the manifest's vocab
    assert found["disc_auc"][0] == "scalars"  # the held-out run tags it alike (tests/test_tensorboard_tags.py)


@pytest.mark.slow  # ~9 s; test_finetuning_init_checkpoint carries the flag to the fine-tuning loop by default
def test_graph_optimizer_option_reaches_the_loop_and_leaves_the_training_unchanged(data_dir, tmp_path, caplog):
    """--graph_optimizer=on runs grappler, the CPU default does not; the log says which, the losses and
    weights agree (grappler only rewrites the graph)."""
    caplog.set_level(logging.INFO)
    config = small(num_train_steps=3)
    runs = {}
    for mode in ("auto", "on"):
        caplog.clear()
        runs[mode] = run(config, data_dir, str(tmp_path / mode), export=False,
                         execution=ExecutionOptions(graph_optimizer=mode))
        expected = "graph optimizer (grappler) " + ("off" if mode == "auto" else "on")
        assert expected in caplog.text, caplog.text[-2000:]
    assert_same_training(runs["auto"], runs["on"], str(tmp_path / "auto"), str(tmp_path / "on"),
                         ("step_loss", "gen_loss", "disc_loss", "grad_norm"))


def test_steps_looped_on_the_host_or_in_the_graph_train_the_same_run_bit_for_bit(data_dir, tmp_path, caplog):
    """--step_loop=host (the CPU default: one traced step, looped in Python) and graph (the steps in one
    tf.while_loop) run the same steps: with calls of two steps and one, dropout on and the corrupt-record report
    summed over each call's steps, the logs and every weight and optimizer slot are equal bit for bit."""
    caplog.set_level(logging.INFO)
    config = small(num_train_steps=3)
    runs = {}
    for mode, where in (("auto", "on the host"), ("graph", "in the graph")):
        caplog.clear()
        runs[mode] = run(config, data_dir, str(tmp_path / mode), export=False, skip_corrupt_records=True,
                         execution=ExecutionOptions(step_loop=mode))
        assert f"steps looped {where}" in caplog.text, caplog.text[-2000:]
    timing = ("per_second", "seconds", "eta")
    logged = [{k: v for k, v in h.items() if not any(t in k for t in timing)} for h in runs["auto"]]
    assert logged == [{k: v for k, v in h.items() if not any(t in k for t in timing)} for h in runs["graph"]]
    assert [h["step"] for h in logged] == [1, 2, 3] and "loss" in logged[0]
    host, graph = checkpoint_values(str(tmp_path / "auto")), checkpoint_values(str(tmp_path / "graph"))
    assert set(host) == set(graph) and any(k.startswith("optimizer/") for k in host)
    for key in host:
        np.testing.assert_array_equal(host[key], graph[key], err_msg=key)
