"""The serving SavedModel: raw text in, labels out, the Keras model's predictions in a fresh process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from electra_tf.finetuning.tasks import encode_pairs
from electra_tf.text.tokenization import WordPieceTokenizer
from test_finetuning_run import TINY, VOCAB, _common, _read_tsv, glue_dir, run_main, vocab_file  # noqa: F401
from test_serving_portable import xla_marked

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOAD_AND_PREDICT = """
import json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401 (registers the tokenizer ops)
args = json.loads(sys.argv[1])
serve = tf.saved_model.load(args["path"]).signatures["serving_default"]
out = serve(**{k: tf.constant(v) for k, v in args["inputs"].items()})
print(json.dumps({k: (v.numpy().astype(str) if v.dtype == tf.string else v.numpy()).tolist() for k, v in out.items()}))
"""


def fresh_process_predictions(path, inputs):
    result = subprocess.run([sys.executable, "-c", LOAD_AND_PREDICT, json.dumps({"path": str(path), "inputs": inputs})],
                            capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def keras_outputs(weights, num_labels, features):
    from electra_tf.config import get_config
    from electra_tf.finetuning.heads import ClassificationHead
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.predict import predict
    from electra_tf.model.encoder import ElectraEncoder

    encoder = ElectraEncoder.from_config_object(get_config("tiny", TINY, vocab_size=len(VOCAB)))
    model = FinetuningModel(encoder, ClassificationHead(num_labels, name="classification_head")).build_all(16)
    model.load_weights(str(weights))
    return predict(model, features, 4)


@pytest.mark.parametrize("task,pair", [("SST-2", False), pytest.param("STS-B", True, marks=pytest.mark.slow)])  # STS-B: ~10 s
def test_saved_model_predicts_like_the_keras_model_in_a_fresh_process(tmp_path, vocab_file, glue_dir, task, pair):
    export = tmp_path / "serving"
    run_main(_common(tmp_path, vocab_file) + [f"--task={task}", f"--data_dir={glue_dir}", "--max_train_steps=3",
                                              "--kernels=xla_cpu", f"--export_saved_model={export}"])
    rows = _read_tsv(glue_dir / task / "dev.tsv")[1:]
    texts_a = [r[-3] if pair else r[0] for r in rows]
    texts_b = [r[-2] for r in rows] if pair else None
    inputs = {"text": texts_a, **({"text_b": texts_b} if pair else {})}
    assert xla_marked(export) == []  # trained with the XLA:CPU kernels, served without
    served = fresh_process_predictions(export, inputs)
    features = encode_pairs(WordPieceTokenizer(vocab_file), texts_a, texts_b, 16)
    expected = keras_outputs(tmp_path / "out" / "final.weights.h5", 1 if pair else 2, features)
    if pair:  # STS-B: regression
        np.testing.assert_allclose(served["score"], expected["predictions"], atol=1e-5)
    else:
        logits = expected["logits"]
        probabilities = np.exp(logits - logits.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        np.testing.assert_allclose(served["probabilities"], probabilities, atol=1e-5)
        assert served["label"] == [str(i) for i in probabilities.argmax(-1)]


def test_tasks_without_a_serving_export_are_refused(tmp_path):
    from electra_tf.serving.export import export_serving
    from electra_tf.finetuning.task import Task
    from electra_tf.options import RunOptions

    class Ranking(Task):  # a task that names no serving labels
        build_head = train_features = eval_sets = predict_sets = score = write_predictions = None

    options = RunOptions(output_dir=str(tmp_path), learning_rate=1e-4, train_batch_size=2, eval_batch_size=2,
                         num_train_epochs=1, warmup_fraction=0.1, weight_decay=0.0, layerwise_lr_decay=1.0,
                         max_seq_length=16, export_saved_model=str(tmp_path / "x"))
    with pytest.raises(ValueError, match="sentence classification and regression, SQuAD and tagging, not ranking"):
        export_serving(None, Ranking("ranking"), None, options, {})


@pytest.mark.data
def test_chinese_classifier_exports_and_predicts_chinese_text(shared_data, tmp_path):
    data = shared_data / "chinese" / "ChnSentiCorp"
    vocab = shared_data / "vocab" / "zh" / "vocab.txt"
    small_train = tmp_path / "train.tsv"  # the first 200 examples: the test is about serving, not accuracy
    small_train.write_text("".join(open(data / "train.tsv", encoding="utf-8").readlines()[:201]), encoding="utf-8")
    export = tmp_path / "serving"
    hparams = json.dumps({**json.loads(TINY), "max_position_embeddings": 64})
    run_main([f"--output_dir={tmp_path / 'out'}", "--model_size=tiny", f"--hparams={hparams}",
              f"--vocab_file={vocab}", "--max_seq_length=64", "--train_batch_size=8", "--max_train_steps=2",
              "--task=text_classification", f"--data_dir={data}", f"--train_file={small_train}",
              "--text_column=text_a", "--label_column=label", "--do_eval=false", f"--export_saved_model={export}"])
    rows = _read_tsv(data / "dev.tsv")[1:101]
    texts = [r[2] for r in rows]
    served = fresh_process_predictions(export, {"text": texts})

    from electra_tf.config import get_config
    from electra_tf.finetuning.heads import ClassificationHead
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.predict import predict
    from electra_tf.model.encoder import ElectraEncoder

    tokenizer = WordPieceTokenizer(str(vocab))
    encoder = ElectraEncoder.from_config_object(get_config("tiny", hparams, vocab_size=tokenizer.vocab_size))
    model = FinetuningModel(encoder, ClassificationHead(2, name="classification_head")).build_all(64)
    model.load_weights(str(tmp_path / "out" / "final.weights.h5"))
    logits = predict(model, encode_pairs(tokenizer, texts, None, 64), 8)["logits"]
    assert served["label"] == [["0", "1"][i] for i in np.argmax(logits, -1)]  # ChnSentiCorp's sorted labels
    np.testing.assert_allclose(np.log(served["probabilities"]) - np.log(served["probabilities"]).mean(-1, keepdims=True),
                               logits - logits.mean(-1, keepdims=True), atol=1e-4)
