"""Wrong inputs to the converters fail with errors that list the variables concerned."""

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from electra_tf.config import get_config
from electra_tf.convert import (ConversionError, detect_format, load_any, load_hf_checkpoint,
                                load_official_checkpoint)
from electra_tf.convert import cli, tensor_io

ROOT = Path(__file__).resolve().parents[1]
HF_DIR = ROOT / "tests" / "fixtures" / "hf_electra"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("make_parity_fixtures", ROOT / "tools" / "make_parity_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_hf(tmp_path, without=()):
    """The HF fixture in tmp_path, minus the files named in `without`."""
    for role in ("discriminator", "generator"):
        shutil.copytree(HF_DIR / role, tmp_path / role, ignore=shutil.ignore_patterns(*without))
    return tmp_path


def rewrite_weights(directory, edit):
    path = directory / "model.safetensors"
    tensors = tensor_io.read_safetensors(str(path))
    tensor_io.write_safetensors(str(path), edit(tensors))


def small_config(**overrides):
    values = dict(vocab_size=1000, max_position_embeddings=128, num_layers=1, generator_num_layers=2)
    return get_config("small", **{**values, **overrides})


def test_bert_official_checkpoint_lists_missing_electra_variables(tool, tmp_path):
    variables = tool.official_variables(str(HF_DIR), optimizer_slots=False)
    bert = {name.replace("electra/", "bert/"): value for name, value in variables.items()
            if name.startswith("electra/")}
    bert["cls/predictions/output_bias"] = np.zeros(1000, np.float32)
    prefix = tool.write_official_checkpoint(bert, str(tmp_path / "bert_model.ckpt"))
    with pytest.raises(ConversionError, match="looks like a BERT checkpoint") as error:
        load_official_checkpoint(prefix)
    assert "electra/embeddings/word_embeddings" in error.value.missing
    assert "discriminator_predictions/dense/kernel" in error.value.missing
    assert "bert/embeddings/word_embeddings" in error.value.unexpected
    assert "electra/embeddings/word_embeddings" in str(error.value)


def test_bert_hf_directory_lists_missing_electra_variables(tmp_path):
    bert_dir = tmp_path / "bert"
    shutil.copytree(HF_DIR / "discriminator", bert_dir)
    (bert_dir / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertForPreTraining"],
                                                      "num_attention_heads": 4}))
    rewrite_weights(bert_dir, lambda t: {k.replace("electra.", "bert."): v for k, v in t.items()
                                         if not k.startswith("discriminator_predictions")})
    with pytest.raises(ConversionError, match="model_type 'bert'") as error:
        load_any(str(bert_dir))
    assert "electra.embeddings.word_embeddings.weight" in error.value.missing
    assert "discriminator_predictions.dense.weight" in error.value.missing
    assert "bert.embeddings.word_embeddings.weight (discriminator)" in error.value.unexpected


def test_hidden_size_mismatch_with_given_config_lists_variables():
    config = small_config(hidden_size=128, num_heads=2, intermediate_size=512)
    with pytest.raises(ConversionError, match="does not match the given config") as error:
        load_hf_checkpoint(str(HF_DIR), config=config)
    message = str(error.value)
    assert "hidden_size: config 128, checkpoint 256" in message
    assert ("electra.encoder.layer.0.attention.self.query.weight: checkpoint (256, 256), config expects (128, 128)"
            in error.value.mismatched)


def test_layer_count_mismatch_lists_missing_layers(tmp_path, tool):
    variables = tool.official_variables(str(HF_DIR), optimizer_slots=False)
    prefix = tool.write_official_checkpoint(variables, str(tmp_path / "model.ckpt-1"))
    with pytest.raises(ConversionError) as error:
        load_official_checkpoint(prefix, config=small_config(num_layers=2))
    assert "electra/encoder/layer_1/attention/self/query/kernel" in error.value.missing


def test_cli_config_json_mismatch_exits_with_listing(tmp_path, capsys):
    config_json = tmp_path / "config.json"
    config_json.write_text(json.dumps({"hidden_size": 128, "num_heads": 2}))
    code = cli.main(["--to=ours", f"--input={HF_DIR}", f"--output={tmp_path / 'out'}",
                     f"--config_json={config_json}"])
    err = capsys.readouterr().err
    assert code == 2 and "hidden_size: config 128, checkpoint 256" in err
    assert "layer.0.attention.self.query.weight: checkpoint (256, 256), config expects (128, 128)" in err
    assert "unexpected:\n    electra.embeddings_project.bias\n" in err  # hidden 128 = embedding 128: no projection


def test_missing_vocab_is_named(tmp_path):
    copy_hf(tmp_path, without=("vocab.txt", "tokenizer.json"))
    with pytest.raises(ConversionError, match="missing vocabulary: pass --vocab_file") as error:
        load_any(str(tmp_path))
    assert str(tmp_path / "discriminator" / "vocab.txt") in error.value.missing


def test_vocab_of_wrong_size_is_refused(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    with pytest.raises(ConversionError, match="has 5 tokens but the checkpoint's word embeddings have 1000 rows"):
        load_hf_checkpoint(str(HF_DIR), vocab_file=str(vocab))


def test_vocab_from_tokenizer_json_when_no_vocab_txt(tmp_path):
    copy_hf(tmp_path, without=("vocab.txt",))
    _, _, vocab = load_any(str(tmp_path))
    assert open(vocab).read() == (HF_DIR / "discriminator" / "vocab.txt").read_text()


def test_missing_tensor_is_listed(tmp_path):
    copy_hf(tmp_path)
    rewrite_weights(tmp_path / "discriminator",
                    lambda t: {k: v for k, v in t.items() if k != "electra.encoder.layer.0.output.LayerNorm.bias"})
    with pytest.raises(ConversionError) as error:
        load_any(str(tmp_path))
    assert error.value.missing == ["electra.encoder.layer.0.output.LayerNorm.bias"]


def test_untied_generator_embeddings_are_refused(tmp_path):
    copy_hf(tmp_path)
    rewrite_weights(tmp_path / "generator", lambda t: {
        k: v + 1.0 if k == "electra.embeddings.position_embeddings.weight" else v for k, v in t.items()})
    with pytest.raises(ConversionError, match="generator's embeddings differ") as error:
        load_any(str(tmp_path))
    assert error.value.mismatched == ["electra.embeddings.position_embeddings.weight: "
                                      "max |generator - discriminator| = 1"]


def test_unrecognised_path():
    with pytest.raises(ConversionError, match="unrecognised checkpoint"):
        detect_format(str(ROOT / "tests"))
