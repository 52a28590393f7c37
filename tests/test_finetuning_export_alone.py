"""`run_finetuning.py --nodo_train --nodo_eval --export_saved_model=DIR`: a fine-tuning run's weights in, a serving
SavedModel out, with nothing else to do (refused as "nothing to do" before 2026-11-28)."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 (registers the tokenizer ops of the serving graph)

from electra_tf.finetuning.tasks import encode_pairs
from electra_tf.text.tokenization import WordPieceTokenizer
from test_finetuning_run import _common, _read_tsv, glue_dir, run_main, vocab_file  # noqa: F401
from test_serving import keras_outputs

EXPORT_ALONE = ["--nodo_train", "--nodo_eval"]


def _serve(export, inputs):
    serve = tf.saved_model.load(str(export)).signatures["serving_default"]
    return {k: v.numpy() for k, v in serve(**{k: tf.constant(v) for k, v in inputs.items()}).items()}


def test_export_alone_writes_the_fine_tuned_model(tmp_path, vocab_file, glue_dir):
    run_main(_common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}", "--max_train_steps=3"])
    export = tmp_path / "serving"
    assert not export.exists()
    run_main(_common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}", *EXPORT_ALONE,
                                              f"--export_saved_model={export}"])
    texts = [r[0] for r in _read_tsv(glue_dir / "SST-2" / "dev.tsv")[1:]]
    served = _serve(export, {"text": texts})
    logits = keras_outputs(tmp_path / "out" / "final.weights.h5", 2,
                           encode_pairs(WordPieceTokenizer(vocab_file), texts, None, 16))["logits"]
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)


@pytest.mark.slow  # STS-B's serving export: ~15 s
def test_export_alone_of_a_pair_task_reads_two_texts(tmp_path, vocab_file, glue_dir):
    run_main(_common(tmp_path, vocab_file) + ["--task=STS-B", f"--data_dir={glue_dir}", "--max_train_steps=1"])
    export = tmp_path / "serving"
    run_main(_common(tmp_path, vocab_file) + ["--task=STS-B", f"--data_dir={glue_dir}", *EXPORT_ALONE,
                                              f"--export_saved_model={export}"])
    signature = tf.saved_model.load(str(export)).signatures["serving_default"]
    assert set(signature.structured_input_signature[1]) == {"text", "text_b"}


def test_export_alone_without_fine_tuned_weights_is_one_line(tmp_path, vocab_file, glue_dir):
    with pytest.raises(SystemExit) as raised:
        run_main(_common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}", *EXPORT_ALONE,
                                                  f"--export_saved_model={tmp_path / 'serving'}"])
    message = str(raised.value.code)
    assert "--export_saved_model with --nodo_train" in message and "final.weights.h5" in message
    assert "\n" not in message and not (tmp_path / "serving").exists()


def test_nothing_to_do_names_the_export_flag(tmp_path, vocab_file, glue_dir):
    with pytest.raises(SystemExit) as raised:
        run_main(_common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}", *EXPORT_ALONE])
    assert "nothing to do" in str(raised.value.code) and "--export_saved_model is unset" in str(raised.value.code)


def test_a_fine_tuning_run_as_init_checkpoint_exports_alone(tmp_path, vocab_file, glue_dir):
    """A checkpoint in (the fine-tuning run as --init_checkpoint), a SavedModel out (--output_dir another folder)."""
    run_main(_common(tmp_path, vocab_file, out="finetuned") + ["--task=SST-2", f"--data_dir={glue_dir}",
                                                               "--max_train_steps=3", "--nodo_eval"])
    export = tmp_path / "serving"
    run_main(_common(tmp_path, vocab_file, out="export_run") + [
        "--task=SST-2", f"--data_dir={glue_dir}", f"--init_checkpoint={tmp_path / 'finetuned'}", *EXPORT_ALONE,
        f"--export_saved_model={export}"])
    texts = [r[0] for r in _read_tsv(glue_dir / "SST-2" / "dev.tsv")[1:]]
    logits = keras_outputs(tmp_path / "finetuned" / "final.weights.h5", 2,
                           encode_pairs(WordPieceTokenizer(vocab_file), texts, None, 16))["logits"]
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(_serve(export, {"text": texts})["probabilities"], expected, atol=1e-5)


def test_the_encoder_factory_starts_from_a_fine_tuning_runs_encoder(tmp_path):
    """`--init_checkpoint=<a fine-tuning run>`: prepare routes it to `finetuned_run.load_finetuned_encoder` (convert's
    `load_encoder` refuses it, as convert does not import fine-tuning), so the encoder is the run's, weight for weight."""
    import json
    import os

    from electra_tf.config import get_config
    from electra_tf.convert import finetuned
    from electra_tf.finetuning import finetuned_run
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.prepare import ModelOptions, encoder_factory
    from electra_tf.model.encoder import ElectraEncoder

    config = get_config("tiny", vocab_size=40, num_layers=1, hidden_size=16, embedding_size=8, num_heads=2,
                        intermediate_size=24, max_position_embeddings=16, max_seq_length=16)
    spec = finetuned.HeadSpec("classifier", num_labels=2)
    model = FinetuningModel(ElectraEncoder.from_config_object(config), finetuned_run.build_head(spec, config))
    model.build_all(16)
    rng = np.random.RandomState(0)
    for variable in model.weights:
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    model.save_weights(os.path.join(tmp_path, finetuned.FINAL_WEIGHTS))
    record = {"task": "SST-2", "config": config.to_dict(), "options": {"max_seq_length": 16}, "vocab_file": None}
    (tmp_path / finetuned.CONFIG_FILE).write_text(json.dumps(record))

    encoder = encoder_factory(config, ModelOptions(init_checkpoint=str(tmp_path)))()
    # The same architecture creates its variables in the same order (their paths differ in the encoder's name).
    expected, got = model.encoder.weights, encoder.weights
    assert [v.shape for v in got] == [v.shape for v in expected] and len(got) > 10
    for mine, theirs in zip(got, expected):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=theirs.path)
