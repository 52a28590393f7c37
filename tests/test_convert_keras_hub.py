"""Our discriminator → keras-hub ElectraBackbone preset (+ ElectraTokenizer), loaded with from_preset."""

import json
from pathlib import Path

import keras_hub
import numpy as np
import pytest

from electra_tf.convert import cli, keras_model, load_hf_checkpoint, save_keras_hub_preset
import parity  # tests/parity.py

HF_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hf_electra"
FIXTURE_OUTPUTS = HF_DIR.parent / "hf_outputs.npz"


@pytest.fixture(scope="module")
def exact():
    return load_hf_checkpoint(str(HF_DIR))


@pytest.fixture(scope="module")
def feed():
    return parity.encoder_inputs(dict(np.load(FIXTURE_OUTPUTS)))


def test_approximate_gelu_preset_reproduces_our_discriminator(exact, feed, tmp_path):
    config, pretrainer, vocab = exact
    config = config.replace(hidden_act="gelu_approximate")
    approximate = keras_model.build_pretrainer(config)
    keras_model.assign_weights(approximate, keras_model.read_weights(pretrainer))
    note = save_keras_hub_preset(approximate, config, str(tmp_path), vocab)
    assert note["max_abs_sequence_output_deviation"] <= 1e-5 and "warning" not in note
    backbone = keras_hub.models.ElectraBackbone.from_preset(str(tmp_path))
    ours = np.asarray(approximate.discriminator(feed, training=False))
    np.testing.assert_allclose(np.asarray(backbone(feed)["sequence_output"]), ours, atol=1e-5, rtol=0)
    tokenizer = keras_hub.models.ElectraTokenizer.from_preset(str(tmp_path))
    vocab_tokens = open(vocab).read().split("\n")
    assert [vocab_tokens[i] for i in np.asarray(tokenizer("Hello the QUICK fox"))] == ["hello", "the", "quick", "fox"]


def test_exact_gelu_export_reports_its_deviation(exact, feed, tmp_path, capsys):
    config, pretrainer, vocab = exact
    note = save_keras_hub_preset(pretrainer, config, str(tmp_path / "preset"), vocab)
    assert "tanh-approximate GELU" in note["warning"]
    assert 1e-6 < note["max_abs_sequence_output_deviation"] < 1e-2
    metadata = json.loads((tmp_path / "preset" / "metadata.json").read_text())
    assert metadata["electra_tf"] == note and metadata["keras_hub_version"] == keras_hub.__version__
    backbone = keras_hub.models.ElectraBackbone.from_preset(str(tmp_path / "preset"))
    difference = np.abs(np.asarray(backbone(feed)["sequence_output"]) - np.asarray(pretrainer.discriminator(feed)))
    assert 0 < difference.max() < 1e-2
    assert cli.main(["--to=keras_hub", f"--input={HF_DIR}", f"--output={tmp_path / 'cli'}"]) == 0
    assert (tmp_path / "cli" / "assets" / "tokenizer" / "vocabulary.txt").is_file()
