"""End-to-end `run_finetuning` on tiny synthetic data (a few steps each)."""

import json
import os
import random

import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver

import run_finetuning
from test_squad_features import VOCAB as SQUAD_VOCAB, squad_json

FLAGS = flags.FLAGS
WORDS = ["good", "great", "fine", "bad", "awful", "poor", "movie", "plot", "the", "a", "is", "was"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?"] + WORDS
TINY = json.dumps({"num_layers": 1, "hidden_size": 16, "embedding_size": 8, "num_heads": 2,
                   "intermediate_size": 32, "max_position_embeddings": 64, "max_seq_length": 16})


def _sentence(rng, positive):
    words = ["good", "great", "fine"] if positive else ["bad", "awful", "poor"]
    return " ".join([rng.choice(["the", "a"]), rng.choice(["movie", "plot"]), rng.choice(["is", "was"]),
                     rng.choice(words), "."])


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture
def glue_dir(tmp_path):
    rng = random.Random(0)
    root = tmp_path / "glue"
    sst, sts, mnli = root / "SST-2", root / "STS-B", root / "MNLI"
    for d in (sst, sts, mnli, root / "diagnostic"):
        d.mkdir(parents=True)
    labels = [i % 2 for i in range(40)]
    _write(sst / "train.tsv", ["sentence\tlabel"] + [f"{_sentence(rng, y)}\t{y}" for y in labels])
    _write(sst / "dev.tsv", ["sentence\tlabel"] + [f"{_sentence(rng, y)}\t{y}" for y in labels[:10]])
    _write(sst / "test.tsv", ["index\tsentence"] + [f"{i}\t{_sentence(rng, i % 2)}" for i in range(7)])
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    row = "{i}\tg\tf\t2012\t0\tnone\tnone\t{a}\t{b}"
    _write(sts / "train.tsv", [head + "\tscore"] + [
        row.format(i=i, a=_sentence(rng, 1), b=_sentence(rng, i % 2)) + f"\t{(i % 6) * 1.0:.3f}" for i in range(20)])
    _write(sts / "dev.tsv", [head + "\tscore"] + [
        row.format(i=i, a=_sentence(rng, 1), b=_sentence(rng, i % 2)) + f"\t{i % 5 + 0.5:.3f}" for i in range(8)])
    _write(sts / "test.tsv", [head] + [row.format(i=i, a=_sentence(rng, 1), b=_sentence(rng, 0)) for i in range(5)])
    mhead = "\t".join(["index", "promptID", "pairID", "genre", "a", "b", "c", "d", "sentence1", "sentence2",
                       "label1", "gold_label"])
    nli = ["contradiction", "entailment", "neutral"]

    def mrow(i, with_label=True):
        cells = [str(i), "0", "0", "g", "", "", "", "", _sentence(rng, 1), _sentence(rng, i % 2)]
        return "\t".join(cells + ([nli[i % 3], nli[i % 3]] if with_label else []))

    _write(mnli / "train.tsv", [mhead] + [mrow(i) for i in range(24)])
    for split in ("dev_matched", "dev_mismatched"):
        _write(mnli / f"{split}.tsv", [mhead] + [mrow(i) for i in range(6)])
    for split in ("test_matched", "test_mismatched"):
        _write(mnli / f"{split}.tsv", ["\t".join(mhead.split("\t")[:10])] + [mrow(i, False) for i in range(4)])
    _write(root / "diagnostic" / "diagnostic.tsv", ["index\tsentence1\tsentence2"] + [
        f"{i}\t{_sentence(rng, 1)}\t{_sentence(rng, 0)}" for i in range(3)])
    return root


def run_main(args):
    with flagsaver.flagsaver():
        FLAGS.unparse_flags()
        FLAGS(["run_finetuning.py"] + args)
        run_finetuning.main(["run_finetuning.py"])


def _common(tmp_path, vocab_file, out="out"):
    return [f"--output_dir={tmp_path / out}", "--model_size=tiny", f"--hparams={TINY}",
            f"--vocab_file={vocab_file}", "--max_seq_length=16", "--train_batch_size=4", "--log_steps=1"]


def _read_tsv(path):
    return [line.split("\t") for line in open(path, encoding="utf-8").read().splitlines()]


def test_sst2_two_steps_with_predictions(tmp_path, vocab_file, glue_dir):
    run_main(_common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}", "--max_train_steps=2",
                                              "--do_predict"])
    out = tmp_path / "out"
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["main_metric"] == "accuracy"
    assert summary["runs"][0]["train_steps"] == 2 and 0 <= summary["median"]["accuracy"] <= 100
    assert summary["selection"] == "final" and summary["median"] == summary["runs"][0]["final"]
    assert (out / "final.weights.h5").exists() and not (out / "best.weights.h5").exists()
    assert any(name.startswith("events") for name in os.listdir(out / "tensorboard"))
    logged = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in logged if "train" in e] == [1, 2]
    assert {"loss", "learning_rate"} <= set(logged[0]["train"]) and "dev" in logged[-1]
    rows = _read_tsv(out / "SST-2.tsv")
    assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == [str(i) for i in range(7)]
    assert {r[1] for r in rows[1:]} <= {"0", "1"}


def test_stsb_regression_and_two_seeds(tmp_path, vocab_file, glue_dir):
    run_main(_common(tmp_path, vocab_file) + ["--task=sts-b", f"--data_dir={glue_dir}", "--max_train_steps=2",
                                              "--do_predict", "--num_seeds=2", "--seed=5"])
    out = tmp_path / "out"
    summary = json.loads((out / "metrics.json").read_text())
    assert [r["seed"] for r in summary["runs"]] == [5, 6]
    assert set(summary["median"]) == {"pearson", "spearman"}
    values = [r["final"]["spearman"] for r in summary["runs"]]
    assert summary["median"]["spearman"] == pytest.approx(np.median(values))
    rows = _read_tsv(out / "seed_5" / "STS-B.tsv")
    assert rows[0] == ["index", "prediction"] and len(rows) == 6
    assert all(0.0 <= float(r[1]) <= 5.0 for r in rows[1:])
    config = json.loads((out / "finetune_config.json").read_text())
    assert config["options"]["num_train_epochs"] == 10  # the official STS-B default
    assert config["config"]["vocab_size"] == len(VOCAB)  # taken from the vocab file


def test_mnli_two_dev_sets_and_ax(tmp_path, vocab_file, glue_dir):
    run_main(_common(tmp_path, vocab_file) + ["--task=MNLI", f"--data_dir={glue_dir}", "--max_train_steps=2",
                                              "--do_predict", "--layerwise_lr_decay=0.8",
                                              "--official_layerwise_lr_bug"])
    out = tmp_path / "out"
    final = json.loads((out / "metrics.json").read_text())["runs"][0]["final"]
    assert set(final) == {"matched_accuracy", "mismatched_accuracy"}
    for name, count in (("MNLI-m.tsv", 4), ("MNLI-mm.tsv", 4), ("AX.tsv", 3)):
        rows = _read_tsv(out / name)
        assert len(rows) == count + 1 and {r[1] for r in rows[1:]} <= {"contradiction", "entailment", "neutral"}


def test_squad_end_to_end(tmp_path, tmp_path_factory):
    data_dir = tmp_path / "squad"
    data_dir.mkdir()
    for v2, suffix in ((False, "v1.1"), (True, "v2.0")):
        for split in ("train", "dev"):
            (data_dir / f"{split}-{suffix}.json").write_text(json.dumps(squad_json(v2)), encoding="utf-8")
    vocab = tmp_path / "squad_vocab.txt"
    vocab.write_text("\n".join(SQUAD_VOCAB) + "\n", encoding="utf-8")
    for task in ("squad", "squad_v2"):
        out = tmp_path / task
        run_main(_common(tmp_path, str(vocab), task) + [
            f"--task={task}", f"--data_dir={data_dir}", "--max_train_steps=2", "--max_seq_length=32",
            "--doc_stride=8", "--max_query_length=8", "--do_predict"])
        predictions = json.loads((out / "predictions.json").read_text())
        ids = {"q1", "q2", "q3", "q4"} | ({"q5"} if task == "squad_v2" else set())
        assert set(predictions) == ids and all(isinstance(v, str) for v in predictions.values())
        assert (out / "nbest_predictions.json").exists()
        assert (out / "null_odds.json").exists() == (task == "squad_v2")
        final = json.loads((out / "metrics.json").read_text())["runs"][0]["final"]
        assert ("best_f1" in final) == (task == "squad_v2") and "f1" in final


@pytest.mark.parametrize("args, message", [
    (["--task=NOPE"], "--task: unknown task 'NOPE'"),
    (["--task=SST-2", "--dev_file=/no/such/dev.tsv"], "--dev_file: /no/such/dev.tsv does not exist"),
    (["--task=RTE"], "RTE/train.tsv"),
    (["--task=SST-2", "--max_seq_length=1000"], "--max_seq_length=1000 exceeds"),
    (["--task=SST-2", "--init_checkpoint=/no/such/export"], "--init_checkpoint"),
])
def test_errors_are_one_line(tmp_path, vocab_file, glue_dir, args, message):
    (glue_dir / "RTE").mkdir()
    with pytest.raises(SystemExit) as info:
        run_main(_common(tmp_path, vocab_file) + [f"--data_dir={glue_dir}"] + args)
    text = str(info.value.code)
    assert message in text and "\n" not in text


def test_init_checkpoint_loads_the_exported_encoder(tmp_path, vocab_file, glue_dir):
    from electra_tf.convert import export_dir as export_format
    from electra_tf.config import get_config
    from electra_tf.finetuning.heads import ClassificationHead
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.model.encoder import ElectraEncoder
    from electra_tf.model.networks import pretrainer_from_config

    config = get_config("tiny", TINY, vocab_size=len(VOCAB), generator_num_layers=1, generator_hidden_size=8,
                        generator_num_heads=1, generator_intermediate_size=16, max_seq_length=16)
    pretrainer = pretrainer_from_config(config, special_token_ids={"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4})
    pretrainer.build_all()
    export_dir = str(tmp_path / "export")
    export_format.save_ours(pretrainer, export_dir, vocab_file=vocab_file, keras_hub=False)
    exported = {v.path: v.numpy() for v in pretrainer.discriminator.weights}

    # A learning rate of 0 keeps the encoder as loaded; the final weights then hold it unchanged.
    run_main(_common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}", "--max_train_steps=1",
                                              f"--init_checkpoint={export_dir}", "--learning_rate=0"])
    encoder = ElectraEncoder.from_config_object(get_config("tiny", TINY, vocab_size=len(VOCAB)))
    encoder.build()
    model = FinetuningModel(encoder, ClassificationHead(2, name="classification_head"))
    model.build_all(16)
    model.load_weights(str(tmp_path / "out" / "final.weights.h5"))
    assert len(encoder.weights) == len(exported)
    for variable in encoder.weights:
        np.testing.assert_array_equal(variable.numpy(), exported[variable.path], err_msg=variable.path)


def test_model_and_heads_serialise(tmp_path):
    import keras

    from electra_tf.config import get_config
    from electra_tf.finetuning.heads import ClassificationHead, SpanHead
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.model.encoder import ElectraEncoder

    config = get_config("tiny", TINY, vocab_size=len(VOCAB))
    for head in (ClassificationHead(3, dropout_rate=0.2, name="classification_head"),
                 SpanHead(answerable=True, answerable_hidden_size=8, name="span_head")):
        model = FinetuningModel(ElectraEncoder.from_config_object(config), head).build_all(16)
        clone = FinetuningModel.from_config(model.get_config()).build_all(16)
        assert clone.get_config() == model.get_config()
        assert type(clone.head).from_config(head.get_config()).get_config() == head.get_config()
        clone.set_weights(model.get_weights())
        ids = np.array([[2, 7, 8, 3, 9, 3, 0, 0]], "int32")
        batch = {"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
                 "segment_ids": np.array([[0, 0, 0, 0, 1, 1, 0, 0]], "int32")}
        for key, value in model(batch).items():
            np.testing.assert_allclose(keras.ops.convert_to_numpy(clone(batch)[key]),
                                       keras.ops.convert_to_numpy(value), rtol=1e-5, atol=1e-5)


def test_tfds_end_to_end(tmp_path, vocab_file):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=8):  # never downloads
        run_main(_common(tmp_path, vocab_file) + ["--task=RTE", "--use_tfds", f"--tfds_data_dir={tmp_path}",
                                                  "--max_train_steps=2", "--do_predict"])
    rows = _read_tsv(tmp_path / "out" / "RTE.tsv")
    assert rows[0] == ["index", "prediction"] and len(rows) == 9
    assert {r[1] for r in rows[1:]} <= {"entailment", "not_entailment"}


@pytest.fixture
def first_evaluation_is_best(monkeypatch):
    """The task's main metric falls with every evaluation, so the best dev epoch is the first."""
    from electra_tf.finetuning import tasks

    original, calls = tasks.GlueTask.score, []

    def score(self, eval_set, outputs, output_dir=None):
        result = original(self, eval_set, outputs, output_dir)
        calls.append(step := len(calls))
        result[self.main_metric_key()] = 100.0 - step
        return result

    monkeypatch.setattr(tasks.GlueTask, "score", score)


@pytest.fixture
def written_outputs(monkeypatch):
    """The model outputs each `write_predictions` call receives (what the test predictions come from)."""
    from electra_tf.finetuning import tasks

    original, captured = tasks.GlueTask.write_predictions, []

    def write_predictions(self, eval_set, outputs, output_dir):
        captured.append((eval_set.features, {k: np.array(v) for k, v in outputs.items()}))
        return original(self, eval_set, outputs, output_dir)

    monkeypatch.setattr(tasks.GlueTask, "write_predictions", write_predictions)
    return captured


def _stsb_predictions(weights_path, features):
    from electra_tf.config import get_config
    from electra_tf.finetuning.heads import ClassificationHead
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.predict import predict
    from electra_tf.model.encoder import ElectraEncoder

    encoder = ElectraEncoder.from_config_object(get_config("tiny", TINY, vocab_size=len(VOCAB)))
    model = FinetuningModel(encoder, ClassificationHead(1, name="classification_head")).build_all(16)
    model.load_weights(str(weights_path))
    return predict(model, features, 4)["predictions"]


def test_final_weights_by_default_best_epoch_on_request(tmp_path, vocab_file, glue_dir, first_evaluation_is_best,
                                                        written_outputs):
    """Two epochs (evaluations at steps 10 and 20); the first scores best. By default the summary and the
    test predictions use the final weights; --select_best_epoch uses the step-10 weights and says so."""
    args = ["--task=STS-B", f"--data_dir={glue_dir}", "--num_train_epochs=2", "--do_predict", "--log_steps=5"]
    run_main(_common(tmp_path, vocab_file, "final") + args)
    run_main(_common(tmp_path, vocab_file, "best") + args + ["--select_best_epoch"])
    final_dir, best_dir = tmp_path / "final", tmp_path / "best"
    by_final, by_best = (json.loads((d / "metrics.json").read_text()) for d in (final_dir, best_dir))
    key = by_final["main_metric"]
    for summary in (by_final, by_best):  # both runs log both per-epoch dev scores
        run = summary["runs"][0]
        assert run["best_step"] == 10 and run["train_steps"] == 20
        assert run["best"][key] > run["final"][key] and summary["median_best"] == run["best"]
        assert summary["median_final"] == run["final"]
    for d in (final_dir, best_dir):
        dev_steps = [e["step"] for e in map(json.loads, (d / "log.jsonl").read_text().splitlines()) if "dev" in e]
        assert dev_steps == [10, 20]
    assert by_final["selection"] == "final" and by_final["median"] == by_final["runs"][0]["final"]
    assert by_best["selection"] == "best_epoch" and by_best["median"] == by_best["runs"][0]["best"]
    assert not (final_dir / "best.weights.h5").exists() and (best_dir / "best.weights.h5").exists()

    (features, final_outputs), (_, best_outputs) = written_outputs
    final_weights = _stsb_predictions(final_dir / "final.weights.h5", features)
    best_weights = _stsb_predictions(best_dir / "best.weights.h5", features)  # the same training, step 10
    assert np.abs(final_weights - best_weights).max() > 1e-3  # the choice matters here
    np.testing.assert_allclose(final_outputs["predictions"], final_weights, atol=1e-5)
    np.testing.assert_allclose(best_outputs["predictions"], best_weights, atol=1e-5)
    np.testing.assert_allclose(_stsb_predictions(best_dir / "final.weights.h5", features), final_weights, atol=1e-5)


def test_layerwise_bug_default_comes_from_the_config(tmp_path, vocab_file, glue_dir):
    base = ["--task=SST-2", f"--data_dir={glue_dir}", "--max_train_steps=1", "--do_eval=false"]
    for out, extra, expected in (("default", [], True), ("corrected", ["--noofficial_layerwise_lr_bug"], False)):
        run_main(_common(tmp_path, vocab_file, out) + base + extra)
        config = json.loads((tmp_path / out / "finetune_config.json").read_text())
        assert config["options"]["official_layerwise_lr_bug"] is expected, out
        assert config["config"]["finetune_official_layerwise_lr_bug"] is expected, out


def test_fp16_with_a_diverging_learning_rate_stops_instead_of_finishing_with_no_update(tmp_path, vocab_file, glue_dir):
    """Fine-tuning counted a step the loss-scale optimizer skipped as done: a diverged fp16 run "finished"
    having applied nothing. Now a skipped step does not count, and a run of them stops it in one line."""
    import keras

    from electra_tf.training.loop import NonFiniteError

    try:
        with pytest.raises(NonFiniteError, match=r"fine-tuning step \d+: \d+ fine-tuning steps in a row were skipped"):
            run_main(_common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}", "--max_train_steps=400",
                                                      "--mixed_precision=fp16", "--learning_rate=1e6", "--do_eval=false"])
    finally:
        keras.mixed_precision.set_global_policy("float32")
