"""`python -m electra_tf.convert --to=onnx|hf` of fine-tuned models: ONNX Runtime and transformers compute what our
Keras model computes, on tiny models with every weight drawn at random (LayerNorm scales and biases too)."""

import json
import os

import numpy as np
import pytest

from electra_tf.config import get_config
from electra_tf.convert import cli, finetuned
from electra_tf.convert.errors import ConversionError
from electra_tf.finetuning import finetuned_run
from test_finetuning_run import VOCAB as RUN_VOCAB, _common, glue_dir, run_main, vocab_file  # noqa: F401

onnx = pytest.importorskip("onnx", reason="pip install -r requirements-onnx.txt")
ort = pytest.importorskip("onnxruntime", reason="pip install -r requirements-onnx.txt")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
SPECS = {
    "classifier": finetuned.HeadSpec("classifier", num_labels=3),
    "regression": finetuned.HeadSpec("regression", num_labels=1),
    "tagger": finetuned.HeadSpec("tagger", num_labels=5),
    "squad": finetuned.HeadSpec("squad", answerable=True, joint_prediction=True, joint_hidden_size=24,
                                answerable_hidden_size=12),
    "squad_independent": finetuned.HeadSpec("squad", answerable=False, joint_prediction=False),
}
TASKS = {"classifier": "MNLI", "regression": "STS-B", "tagger": "ner", "squad": "squad_v2",
         "squad_independent": "squad"}


def tiny_config(hidden_act="gelu", embedding_size=16):
    return get_config("tiny", vocab_size=len(VOCAB), num_layers=2, hidden_size=32, embedding_size=embedding_size,
                      num_heads=4, intermediate_size=48, max_position_embeddings=32, max_seq_length=32, hidden_act=hidden_act,
                      squad_beam_size=4)


def write_run(run_dir, kind, config, seed=0):
    """A run folder as `run_finetuning.py` leaves it: finetune_config.json, final.weights.h5 (random), vocab."""
    spec = SPECS[kind]
    model = _random_model(config, spec, seed)
    os.makedirs(run_dir, exist_ok=True)
    model.save_weights(os.path.join(run_dir, finetuned.FINAL_WEIGHTS))
    vocab = os.path.join(run_dir, "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")
    record = {"task": TASKS[kind], "task_settings": {"tagging_segment_id": 1} if kind == "tagger" else {},
              "config": config.to_dict(), "options": {"max_seq_length": 24, "select_best_epoch": False},
              "init_checkpoint": None, "vocab_file": vocab}
    with open(os.path.join(run_dir, finetuned.CONFIG_FILE), "w") as f:
        json.dump(record, f)
    if kind == "tagger":
        with open(os.path.join(run_dir, finetuned.TAGGING_LABELS), "w") as f:
            json.dump({"labels": ["O", "B-PER", "E-PER", "S-PER", "I-PER"], "segment_id": 1}, f)
    return str(run_dir)


def _random_model(config, spec, seed):
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.model.encoder import ElectraEncoder

    model = FinetuningModel(ElectraEncoder.from_config_object(config), finetuned_run.build_head(spec, config))
    model.build_all(16)
    rng = np.random.RandomState(seed)
    for variable in model.weights:
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    return model


def batch(seed=1, size=3, length=12, vocab=len(VOCAB)):
    """Ids with padding (rows of 12, 8 and 3 real tokens) and a second segment."""
    rng = np.random.RandomState(seed)
    ids = rng.randint(5, vocab, size=(size, length))
    ids[:, 0] = 2
    mask = np.ones((size, length), np.int64)
    mask[1, 8:], mask[2, 3:] = 0, 0
    segments = np.zeros((size, length), np.int64)
    segments[:, 5:] = 1
    ids[mask == 0], segments[mask == 0] = 0, 0
    return ids.astype(np.int64), mask, segments


def onnx_outputs(path, ids, mask, segments):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments})))


@pytest.mark.parametrize("kind,hidden_act", [("classifier", "gelu"), ("regression", "gelu"),
                                             ("tagger", "gelu_approximate"), ("squad", "gelu"),
                                             ("squad_independent", "gelu")])
def test_onnx_runtime_equals_our_model(tmp_path, kind, hidden_act):
    run = write_run(tmp_path / "run", kind, tiny_config(hidden_act))
    assert cli.main(["--to=onnx", f"--input={run}", f"--output={tmp_path / 'onnx'}"]) == 0
    ids, mask, segments = batch()
    got = onnx_outputs(tmp_path / "onnx" / "model.onnx", ids, mask, segments)
    expected = finetuned_run.load_finetuned(run).outputs(ids, mask, segments)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        assert got[name].shape == value.shape, name
        if name.endswith("_index"):
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:  # masked SQuAD logits sit near -1000, where float32's spacing is 6e-5
            np.testing.assert_allclose(got[name], value, atol=1e-4, rtol=1e-6, err_msg=name)
    described = json.loads((tmp_path / "onnx" / "onnx_config.json").read_text())
    assert described["outputs"] == [o.name for o in onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph.output]
    assert (tmp_path / "onnx" / "vocab.txt").read_text().split("\n")[:5] == VOCAB[:5]


def test_a_projection_free_encoder_and_one_sequence_length(tmp_path):
    """Embedding size = width (no projection), a batch of one unpadded row: the graph's other branches."""
    run = write_run(tmp_path / "run", "classifier", tiny_config(embedding_size=32), seed=3)
    assert cli.main(["--to=onnx", f"--input={run}", f"--output={tmp_path / 'onnx'}"]) == 0
    ids = np.array([[2, 7, 8, 9, 3]], np.int64)
    ones, zeros = np.ones_like(ids), np.zeros_like(ids)
    got = onnx_outputs(tmp_path / "onnx" / "model.onnx", ids, ones, zeros)["logits"]
    np.testing.assert_allclose(got, finetuned_run.load_finetuned(run).outputs(ids, ones, zeros)["logits"], atol=1e-4)


def test_a_real_run_converts_with_its_labels_and_an_int8_copy(tmp_path, vocab_file, glue_dir):
    run_main(_common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}", "--max_train_steps=2",
                                              "--nodo_eval"])
    out = tmp_path / "onnx"
    assert cli.main(["--to=onnx", f"--input={tmp_path / 'out'}", f"--output={out}", "--quantize=int8"]) == 0
    assert sorted(os.listdir(out)) == ["model.int8.onnx", "model.onnx", "onnx_config.json", "special_tokens_map.json",
                                       "tokenizer_config.json", "vocab.txt"]
    described = json.loads((out / "onnx_config.json").read_text())
    assert (described["task"], described["kind"], described["labels"]) == ("SST-2", "classifier", ["0", "1"])
    ids, mask, segments = batch(vocab=len(RUN_VOCAB), length=10)
    expected = finetuned_run.load_finetuned(str(tmp_path / "out")).outputs(ids, mask, segments)["logits"]
    np.testing.assert_allclose(onnx_outputs(out / "model.onnx", ids, mask, segments)["logits"], expected, atol=1e-4)
    int8 = onnx_outputs(out / "model.int8.onnx", ids, mask, segments)["logits"]
    assert int8.shape == expected.shape and np.all(np.isfinite(int8))
    assert any(node.op_type == "DynamicQuantizeLinear" for node in onnx.load(str(out / "model.int8.onnx")).graph.node)


def test_tagger_to_hf_equals_transformers(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    run = write_run(tmp_path / "run", "tagger", tiny_config(), seed=5)
    assert cli.main(["--to=hf", f"--input={run}", f"--output={tmp_path / 'hf'}"]) == 0
    model = transformers.ElectraForTokenClassification.from_pretrained(str(tmp_path / "hf")).eval()
    assert model.config.id2label[1] == "B-PER"
    ids, mask, segments = batch()
    with torch.no_grad():
        got = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                    token_type_ids=torch.tensor(segments)).logits.numpy()
    expected = finetuned_run.load_finetuned(run).outputs(ids, mask, segments)["logits"]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert tokenizer("w3 w4")["input_ids"] == [2, 8, 9, 3]


@pytest.mark.parametrize("kind,says", [("classifier", "dense → GELU → dense"), ("regression", "dense → GELU → dense"),
                                       ("squad", "ElectraForQuestionAnswering")])
def test_heads_transformers_cannot_compute_are_refused_in_one_line(tmp_path, capsys, kind, says):
    run = write_run(tmp_path / "run", kind, tiny_config())
    assert cli.main(["--to=hf", f"--input={run}", f"--output={tmp_path / 'hf'}"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: --to=hf:") and says in error and "\n" not in error
    assert not (tmp_path / "hf").exists()


def test_what_onnx_does_not_take_is_one_line(tmp_path, capsys):
    assert cli.main(["--to=onnx", "--input=tests/fixtures/hf_electra", f"--output={tmp_path / 'x'}"]) == 2
    assert "--to=onnx converts a fine-tuned model" in capsys.readouterr().err
    run = write_run(tmp_path / "run", "classifier", tiny_config())
    assert cli.main(["--to=ours", f"--input={run}", f"--output={tmp_path / 'x'}"]) == 2
    assert "converts --to=onnx or --to=hf, not --to=ours" in capsys.readouterr().err
    os.remove(os.path.join(run, finetuned.FINAL_WEIGHTS))
    with pytest.raises(ConversionError, match="not a fine-tuning run|no final.weights.h5"):
        finetuned_run.load_finetuned(run)


def test_a_missing_onnx_package_names_the_requirements_file(tmp_path, monkeypatch, capsys):
    run = write_run(tmp_path / "run", "classifier", tiny_config())
    monkeypatch.setitem(__import__("sys").modules, "onnx", None)  # import onnx raises ImportError
    assert cli.main(["--to=onnx", f"--input={run}", f"--output={tmp_path / 'onnx'}"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == "error: --to=onnx needs the onnx package: pip install -r requirements-onnx.txt"
    assert not (tmp_path / "onnx").exists() and not (tmp_path / "onnx.partial").exists()


def test_a_fine_tuning_run_is_detected_and_its_encoder_loads(tmp_path):
    from electra_tf.convert import api

    config = tiny_config()
    run = write_run(tmp_path / "run", "tagger", config)
    assert api.detect_format(run) == "finetuned"
    assert api.read_config(run) == (config, {}) and api.checkpoint_vocab(run) == os.path.join(run, "vocab.txt")
    encoder, _, vocab = finetuned_run.load_finetuned_encoder(run)
    assert vocab == os.path.join(run, "vocab.txt")
    ids, mask, segments = batch()
    model = finetuned_run.load_finetuned(run)
    inputs = {"token_ids": ids, "padding_mask": mask, "segment_ids": segments}
    np.testing.assert_allclose(encoder(inputs), model.model.encoder(inputs), atol=1e-6)
    with pytest.raises(ConversionError, match="a fine-tuned model .* --init_checkpoint, convert it .* --to=onnx"):
        api.load_any(run)


def test_convert_loads_no_fine_tuned_encoder_and_says_which_function_does(tmp_path):
    """`electra_tf.convert` does not import fine-tuning (which imports it): `load_encoder` names the loader."""
    from electra_tf.convert import api

    run = write_run(tmp_path / "run", "classifier", tiny_config())
    with pytest.raises(ConversionError) as raised:
        api.load_encoder(run)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{run} is a fine-tuning run")
    assert "electra_tf.finetuning.finetuned_run.load_finetuned_encoder" in message


@pytest.mark.data
def test_onnx_equals_our_model_on_the_sst2_dev_set(tmp_path, shared_data):
    """All 872 SST-2 dev sentences through our tokenizer (en_uncased), each batch of 64 cut to its longest: ONNX
    Runtime's logits equal the Keras model's (a tiny model of random weights on the real vocabulary)."""
    from bench import onnx_sst2
    from electra_tf.convert.onnx_export import save_onnx
    from electra_tf.text.tokenizers import load_tokenizer

    glue, vocab = shared_data / "glue", shared_data / "vocab" / "en_uncased" / "vocab.txt"
    if not (glue / "SST-2" / "dev.tsv").is_file() or not vocab.is_file():
        pytest.skip("no SST-2 dev set or en_uncased vocab in the shared data")
    tokens = vocab.read_text(encoding="utf-8").splitlines()
    config = get_config("tiny", vocab_size=len(tokens), num_layers=2, hidden_size=32, embedding_size=16, num_heads=4,
                        intermediate_size=48, max_position_embeddings=128, max_seq_length=128)
    run = write_run(tmp_path / "run", "classifier", config, seed=7)
    model = finetuned_run.load_finetuned(run)
    paths = save_onnx(model, str(tmp_path / "onnx"), str(vocab))
    features, labels = onnx_sst2.dev_features(load_tokenizer(str(vocab)), str(glue), 128)
    result = onnx_sst2.parity_and_accuracy(model, {"onnx_fp32": onnx_sst2.session(paths["model"], 2)}, features, labels)
    assert result["sentences"] == 872
    assert result["max_abs_logit_difference"]["onnx_fp32_vs_keras"] <= 1e-4
    assert result["accuracy"]["onnx_fp32"] == result["accuracy"]["keras"]
