"""Two-replica MirroredStrategy fine-tuning equals one device; bf16 runs."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import get_config
from electra_tf.finetuning.heads import ClassificationHead
from electra_tf.finetuning.model import FinetuningModel, new_encoder_fn
from electra_tf.finetuning.runner import run_single
from electra_tf.finetuning.tasks import get_task
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.options import RunOptions
from electra_tf.text.tokenization import WordPieceTokenizer
from test_finetuning_run import TINY, VOCAB, glue_dir, run_main, vocab_file, _common  # noqa: F401


def two_cpu_strategy():
    """MirroredStrategy over the two logical CPUs, reducing without collective ops: two strategies
    with collectives in one process (other test files make theirs) clash on their instance keys."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


def _train(tmp_path, glue_dir, vocab_file, strategy, name, dropout_rate=0.0):
    tokenizer = WordPieceTokenizer(vocab_file)
    config = get_config("tiny", TINY, vocab_size=len(VOCAB), dropout_rate=dropout_rate,
                        max_seq_length=64)
    task = get_task("SST-2", data_dir=str(glue_dir))
    # Sentences of ~7 tokens in 64: length-bucketed batches cut to 16 tokens, then split over the replicas.
    options = RunOptions(output_dir=str(tmp_path / name), learning_rate=1e-2, train_batch_size=8,
                         eval_batch_size=5, num_train_epochs=1, warmup_fraction=0.0, weight_decay=0.01,
                         layerwise_lr_decay=0.8, max_seq_length=64, max_train_steps=3, log_steps=1)
    result = run_single(task, config, new_encoder_fn(config), tokenizer, options, strategy, options.output_dir, {})
    model = FinetuningModel(ElectraEncoder.from_config_object(config), ClassificationHead(2, name="classification_head"))
    model.build_all(16)
    model.load_weights(str(tmp_path / name / "final.weights.h5"))
    return result, {v.path: v.numpy() for v in model.weights}


@pytest.mark.slow  # ~16 s; by default test_finetuning_loss_clip sums over two replicas and test_finetuning_padding predicts on two
def test_two_replicas_match_one_device(tmp_path, glue_dir, vocab_file):
    if len(tf.config.list_logical_devices("CPU")) < 2:
        pytest.skip("needs the two logical CPUs set up by conftest.py")
    one_result, one = _train(tmp_path, glue_dir, vocab_file, tf.distribute.OneDeviceStrategy("/cpu:0"), "one")
    two_result, two = _train(tmp_path, glue_dir, vocab_file,
                             two_cpu_strategy(), "two")
    assert one_result["final"]["accuracy"] == pytest.approx(two_result["final"]["accuracy"])
    for path, value in one.items():
        np.testing.assert_allclose(two[path], value, atol=2e-5, err_msg=path)
    keras.utils.set_random_seed(0)  # the initial weights of both runs
    initial = new_encoder_fn(get_config("tiny", TINY, vocab_size=len(VOCAB)))()
    token_path = "discriminator/embeddings/token_embedding/embeddings"
    trained = next(value for path, value in one.items() if path.endswith(token_path))
    assert np.abs(trained - initial.embeddings.token_embedding.embeddings.numpy()).max() > 1e-3  # encoder trained


def test_two_replicas_match_one_device_with_dropout_in_the_encoder_and_the_head(tmp_path, glue_dir, vocab_file):
    """Dropout 0.1 (encoder; the classification head's is 0.1 always) keyed by the example: two replicas
    draw one device's masks. Before, each replica drew its own (the weights differed by ~1e-3)."""
    _, one = _train(tmp_path, glue_dir, vocab_file, tf.distribute.OneDeviceStrategy("/cpu:0"), "one", 0.1)
    _, two = _train(tmp_path, glue_dir, vocab_file, two_cpu_strategy(), "two", 0.1)
    for path, value in one.items():
        np.testing.assert_allclose(two[path], value, atol=2e-5, err_msg=path)


def test_bf16_run(tmp_path, vocab_file, glue_dir):
    try:
        run_main(_common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}", "--max_train_steps=2",
                                                  "--mixed_precision=bf16"])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    final = json.loads((tmp_path / "out" / "metrics.json").read_text())["runs"][0]["final"]
    assert 0.0 <= final["accuracy"] <= 100.0
