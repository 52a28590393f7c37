"""Checkpoint conversion parity on the project's own fixtures (no torch, no transformers).

tests/fixtures/ is made by tools/make_parity_fixtures.py: small random Hugging
Face ELECTRA checkpoints with the ELECTRA-Small widths and what transformers
computed on fixed inputs. The official TF1 checkpoint is derived from them here.
"""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from electra_tf.convert import (ConversionError, detect_format, initialize_pretrainer, load_any, load_encoder,
                                load_hf_checkpoint, load_official_checkpoint, save_hf, save_ours)
from electra_tf.convert import cli, keras_model, tensor_io
import parity  # tests/parity.py

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
HF_DIR = FIXTURES / "hf_electra"
ATOL = 1e-4


def fixture_tool():
    """tools/make_parity_fixtures.py (its TF-only helpers; torch is imported only to make fixtures)."""
    spec = importlib.util.spec_from_file_location("make_parity_fixtures", ROOT / "tools" / "make_parity_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def expected():
    return dict(np.load(FIXTURES / "hf_outputs.npz"))


@pytest.fixture(scope="module")
def from_hf():
    return load_hf_checkpoint(str(HF_DIR))


@pytest.fixture(scope="module")
def official_dir(tmp_path_factory):
    """An official-format checkpoint (+ adam slots, global_step) of the fixture weights, and its vocab."""
    directory = tmp_path_factory.mktemp("official")
    tool = fixture_tool()
    tool.write_official_checkpoint(tool.official_variables(str(HF_DIR)), str(directory / "model.ckpt-1000"))
    shutil.copy(HF_DIR / "discriminator" / "vocab.txt", directory)
    return directory


def assert_matches_hf(pretrainer, expected):
    got = parity.pretrainer_outputs(pretrainer, expected)
    differences = parity.max_differences(got, expected)
    assert max(differences.values()) <= ATOL, differences
    np.testing.assert_array_equal(got["gen_top1"], expected["gen_top1"])


def test_hf_safetensors_matches_transformers_outputs(from_hf, expected):
    config, pretrainer, vocab = from_hf
    assert (config.discriminator.hidden_size, config.embedding_size, config.discriminator.num_heads, config.discriminator.num_layers) == (256, 128, 4, 1)
    assert (config.generator.hidden_size, config.generator.num_heads, config.generator.num_layers) == (64, 1, 2)
    assert config.hidden_act == "gelu" and os.path.basename(vocab) == "vocab.txt"
    assert pretrainer.generator.embeddings is pretrainer.discriminator.embeddings
    assert_matches_hf(pretrainer, expected)


def test_official_checkpoint_matches_transformers_outputs(official_dir, expected):
    assert detect_format(str(official_dir)) == "official"
    config, pretrainer, _ = load_official_checkpoint(str(official_dir / "model.ckpt-1000"))
    assert (config.discriminator.num_heads, config.generator.num_heads, config.hidden_act) == (4, 1, "gelu")
    assert_matches_hf(pretrainer, expected)


def test_round_trip_ours_hf_ours_is_exact(from_hf, expected, tmp_path):
    config, pretrainer, vocab = from_hf
    dirs = save_hf(pretrainer, config, str(tmp_path / "hf"), vocab)
    for role, directory in dirs.items():
        original = tensor_io.read_safetensors(str(HF_DIR / role / "model.safetensors"))
        written = tensor_io.read_safetensors(os.path.join(directory, "model.safetensors"))
        assert set(written) == set(original) - {"generator_lm_head.weight"}  # tied: not stored, as in HF
        for name, value in written.items():
            np.testing.assert_array_equal(value, original[name], err_msg=name)
        with open(os.path.join(directory, "config.json")) as f:
            hf_config = json.load(f)
        assert hf_config["architectures"] == [{"discriminator": "ElectraForPreTraining",
                                               "generator": "ElectraForMaskedLM"}[role]]
        assert os.path.isfile(os.path.join(directory, "vocab.txt"))
    _, reloaded, _ = load_any(str(tmp_path / "hf"))
    assert_matches_hf(reloaded, expected)


def test_round_trip_through_our_export(from_hf, expected, tmp_path):
    config, pretrainer, vocab = from_hf
    save_ours(pretrainer, str(tmp_path / "export"), vocab)
    assert detect_format(str(tmp_path / "export")) == "ours"
    reloaded_config, reloaded, reloaded_vocab = load_any(str(tmp_path / "export"))
    assert reloaded_config == config and reloaded_vocab.endswith("vocab.txt")
    assert_matches_hf(reloaded, expected)


def test_load_encoder_gives_the_discriminator(expected):
    encoder, config, vocab = load_encoder(str(HF_DIR), name="encoder")
    hidden = np.asarray(encoder(parity.encoder_inputs(expected)))
    assert encoder.name == "encoder" and config.discriminator.hidden_size == 256 and vocab
    np.testing.assert_allclose(hidden, expected["disc_hidden"], atol=ATOL)


def test_initialize_existing_pretrainer(from_hf, official_dir, expected):
    config, _, _ = from_hf
    model = keras_model.build_pretrainer(config)
    assert initialize_pretrainer(model, str(official_dir)) == (
        "discriminator", "discriminator_head", "generator", "generator_head")
    assert_matches_hf(model, expected)
    approximate = keras_model.build_pretrainer(config.replace(hidden_act="gelu_approximate"))
    with pytest.raises(ConversionError, match="hidden_act: run 'gelu_approximate', checkpoint 'gelu'"):
        initialize_pretrainer(approximate, str(HF_DIR))


def test_discriminator_alone_and_separate_generator_dir(expected):
    _, pretrainer, _ = load_hf_checkpoint(str(HF_DIR / "discriminator"), generator_path=str(HF_DIR / "generator"))
    assert_matches_hf(pretrainer, expected)
    _, pretrainer, _ = load_hf_checkpoint(str(HF_DIR / "discriminator"))
    disc = parity.pretrainer_outputs(pretrainer, expected)["disc_logits"]
    np.testing.assert_allclose(disc, expected["disc_logits"], atol=ATOL)


def test_hf_activation_names_map_to_ours(tmp_path, expected):
    for role in ("discriminator", "generator"):
        shutil.copytree(HF_DIR / role, tmp_path / role)
        path = tmp_path / role / "config.json"
        hf_config = json.loads(path.read_text())
        path.write_text(json.dumps({**hf_config, "hidden_act": "gelu_new"}))
    config, pretrainer, _ = load_any(str(tmp_path))
    assert config.hidden_act == "gelu_approximate"
    disc = parity.pretrainer_outputs(pretrainer, expected)["disc_logits"]
    assert 0 < np.max(np.abs(disc - expected["disc_logits"])) < 1e-2  # tanh GELU: close, not equal


def test_cli_hf_to_hf_and_official_to_ours(official_dir, tmp_path, capsys):
    assert cli.main(["--to=hf", f"--input={HF_DIR}", f"--output={tmp_path / 'hf'}"]) == 0
    assert "hf → hf" in capsys.readouterr().out
    assert cli.main(["--from=official", "--to=ours", f"--input={official_dir}", f"--output={tmp_path / 'ours'}",
                     f"--config_json={HF_DIR / 'discriminator' / 'config.json'}"]) == 0
    assert os.path.isfile(tmp_path / "ours" / "electra_config.json")


def test_torch_bin_reader_needs_no_torch():
    state = tensor_io.read_torch_bin(str(FIXTURES / "torch_state_dict.bin"))
    reference = np.load(FIXTURES / "torch_state_dict.npz")
    assert sorted(state) == sorted(reference.files)
    for name in reference.files:
        np.testing.assert_array_equal(state[name].astype(reference[name].dtype), reference[name], err_msg=name)


def test_sharded_safetensors(tmp_path, expected):
    for role in ("discriminator", "generator"):
        shutil.copytree(HF_DIR / role, tmp_path / role, ignore=shutil.ignore_patterns("model.safetensors"))
        tensors = tensor_io.read_safetensors(str(HF_DIR / role / "model.safetensors"))
        names = sorted(tensors)
        shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
        for shard, shard_names in shards.items():
            tensor_io.write_safetensors(str(tmp_path / role / shard), {n: tensors[n] for n in shard_names})
        index = {"weight_map": {n: shard for shard, shard_names in shards.items() for n in shard_names}}
        (tmp_path / role / "model.safetensors.index.json").write_text(json.dumps(index))
    _, pretrainer, _ = load_any(str(tmp_path))
    assert_matches_hf(pretrainer, expected)


def test_config_json_completes_and_checks_our_export(from_hf, tmp_path):
    config, pretrainer, vocab = from_hf
    save_ours(pretrainer, str(tmp_path / "export"), vocab)
    loaded, _, _ = load_any(str(tmp_path / "export"), overrides={"hidden_size": 256, "learning_rate": 1e-4})
    assert loaded == config.replace(learning_rate=1e-4)
    with pytest.raises(ConversionError, match="num_layers: config 3, export 1"):
        load_any(str(tmp_path / "export"), overrides={"num_layers": 3})


def test_read_config_builds_no_model_and_agrees_with_loading(from_hf, official_dir, tmp_path, monkeypatch):
    from electra_tf.convert import api, export_dir as export_format
    from electra_tf.model.encoder import ElectraEncoder

    config, pretrainer, vocab = from_hf
    export_dir = save_ours(pretrainer, str(tmp_path / "export"), vocab, keras_hub=False)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / api.RUN_CONFIG).write_text(config.to_json())

    def refuse(*args, **kwargs):
        raise AssertionError("read_config built a model")

    monkeypatch.setattr(keras_model, "build_pretrainer", refuse)
    monkeypatch.setattr(ElectraEncoder, "__init__", refuse)
    assert api.read_config(str(HF_DIR))[0] == config
    assert api.read_config(export_dir) == (config, {k: v for k, v in config.to_dict().items()
                                                     if k.startswith("finetune_")})
    assert api.read_config(str(run_dir))[0] == config
    assert api.read_config(str(official_dir))[0].discriminator == config.discriminator
    assert api.checkpoint_vocab(export_dir) == os.path.join(export_dir, "vocab.txt")
    assert export_format.read_ours_config(export_dir)[0] == config


def test_run_directories_of_older_runs_keep_their_flat_config(tmp_path):
    from electra_tf.config import get_config
    from electra_tf.convert import api

    config = get_config("mini", num_train_steps=10)
    flat = {k: v for k, v in config.to_dict().items() if k not in ("discriminator", "generator")}
    flat.update({f"generator_{k}": v for k, v in config.to_dict()["generator"].items()})
    flat.update(config.to_dict()["discriminator"])
    (tmp_path / "electra_config.json").write_text(json.dumps(flat))
    assert api.run_config_path(str(tmp_path)).endswith("electra_config.json")
    assert api.read_config(str(tmp_path))[0] == config
