"""Dynamic padding: batches cut to their longest example compute what fixed padding computes."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import get_config
from electra_tf.finetuning.heads import ClassificationHead, SpanHead
from electra_tf.finetuning.data import Padding, sequence_lengths, train_dataset, trim_batch
from electra_tf.finetuning.evaluate import FINAL_WEIGHTS
from electra_tf.finetuning.model import FinetuningModel, build_model, new_encoder_fn
from electra_tf.finetuning.predict import PADDED_LOGIT, _predict_fn, predict
from electra_tf.finetuning.runner import run_single
from electra_tf.finetuning.tasks import get_task
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.options import RunOptions
from electra_tf.text.tokenization import WordPieceTokenizer
from test_finetuning_run import TINY, VOCAB, glue_dir, vocab_file  # noqa: F401

SEQ = 128
TOLERANCE = 1e-5


def _model(head):
    config = get_config("tiny", vocab_size=40, num_layers=2, hidden_size=16, embedding_size=8, num_heads=2,
                        intermediate_size=32, dropout_rate=0.0)
    keras.utils.set_random_seed(0)
    return FinetuningModel(ElectraEncoder.from_config_object(config), head).build_all(SEQ)


def _features(num, max_length, seed=0, span=False):
    """`num` examples of random real lengths up to `max_length`, padded to SEQ (segment B after 4 tokens)."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(6, max_length + 1, size=num)
    mask = (np.arange(SEQ)[None] < lengths[:, None]).astype("int32")
    features = {"input_ids": rng.randint(5, 40, size=(num, SEQ)).astype("int32") * mask, "input_mask": mask,
                "segment_ids": ((np.arange(SEQ)[None] >= 4) * mask).astype("int32"),
                "label_ids": rng.randint(0, 3, size=num).astype("int32")}
    if span:
        features["start_positions"] = rng.randint(4, lengths - 1).astype("int32")
        features["end_positions"] = np.minimum(features["start_positions"] + 1, lengths - 1).astype("int32")
        features["is_impossible"] = (rng.rand(num) < 0.3).astype("int32")
    return features


def test_padded_lengths():
    dynamic = Padding.dynamic(128)
    assert [dynamic.length(n) for n in (1, 16, 17, 100, 128)] == [16, 16, 32, 112, 128]
    assert Padding.dynamic(512).multiple == 64 and Padding.dynamic(512, min_length=64).length(3) == 64
    assert Padding.fixed(128).length(3) == 128 and Padding.fixed(128).is_fixed
    assert [int(dynamic.tf_length(n)) for n in (1, 16, 17, 100, 128)] == [16, 16, 32, 112, 128]
    np.testing.assert_array_equal(sequence_lengths([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]), [2, 4, 0])


@pytest.mark.parametrize("head", ["classification", "span"])
def test_trimmed_batch_gives_the_same_loss_and_gradients(head):
    span = head == "span"
    model = _model(SpanHead(beam_size=3, joint_hidden_size=8, answerable_hidden_size=8) if span
                   else ClassificationHead(3, dropout_rate=0.0))
    full = {k: tf.constant(v) for k, v in _features(6, 40, span=span).items()}
    trimmed = trim_batch(full, 48)
    assert trimmed["input_ids"].shape == (6, 48) and trimmed["label_ids"].shape == (6,)

    def loss_and_grads(batch):
        with tf.GradientTape() as tape:
            loss = model.head.per_example_loss(batch, model(batch, training=True))
        grads = tape.gradient(tf.reduce_sum(loss), model.trainable_variables)
        return loss.numpy(), [np.zeros(v.shape) if g is None else tf.convert_to_tensor(g).numpy()
                              for g, v in zip(grads, model.trainable_variables)]

    (full_loss, full_grads), (short_loss, short_grads) = loss_and_grads(full), loss_and_grads(trimmed)
    np.testing.assert_allclose(short_loss, full_loss, atol=TOLERANCE, rtol=TOLERANCE)
    for variable, a, b in zip(model.trainable_variables, full_grads, short_grads):
        np.testing.assert_allclose(b, a, atol=TOLERANCE, rtol=1e-4, err_msg=variable.path)


def test_classification_predictions_equal_fixed_padding():
    model = _model(ClassificationHead(3, dropout_rate=0.0))
    features = _features(11, 60, seed=1)
    fixed = predict(model, features, 3, padding=Padding.fixed(SEQ))
    dynamic = predict(model, features, 3, padding=Padding.dynamic(SEQ))
    np.testing.assert_allclose(dynamic["logits"], fixed["logits"], atol=TOLERANCE)
    fn, _ = _predict_fn(model, tf.distribute.get_strategy(), True)
    assert fn.experimental_get_tracing_count() == 1  # one trace for every batch length


def test_span_predictions_equal_fixed_padding():
    """Start logits agree on the real tokens (the cut positions read PADDED_LOGIT, below every real
    score), the answerability logit everywhere, and the beam on every valid (unpenalised) entry."""
    model = _model(SpanHead(beam_size=4, joint_hidden_size=8, answerable_hidden_size=8))
    features = _features(7, 50, seed=2)
    fixed = predict(model, features, 3, padding=Padding.fixed(SEQ))
    dynamic = predict(model, features, 3, padding=Padding.dynamic(SEQ, min_length=64))
    lengths = sequence_lengths(features["input_mask"])
    real = np.arange(SEQ)[None] < lengths[:, None]
    np.testing.assert_allclose(dynamic["start_logits"][real], fixed["start_logits"][real], atol=TOLERANCE)
    assert (dynamic["start_logits"][:, 64:] == PADDED_LOGIT).all() and (fixed["start_logits"][~real] < -900).all()
    np.testing.assert_allclose(dynamic["answerable_logit"], fixed["answerable_logit"], atol=TOLERANCE)
    valid = fixed["start_top_log_probs"] > -500
    assert valid.any()
    np.testing.assert_allclose(dynamic["start_top_log_probs"][valid], fixed["start_top_log_probs"][valid],
                               atol=TOLERANCE)
    np.testing.assert_array_equal(dynamic["start_top_index"][valid], fixed["start_top_index"][valid])
    valid_end = (fixed["end_top_log_probs"] > -500) & valid[..., None]
    np.testing.assert_allclose(dynamic["end_top_log_probs"][valid_end], fixed["end_top_log_probs"][valid_end],
                               atol=TOLERANCE)
    np.testing.assert_array_equal(dynamic["end_top_index"][valid_end], fixed["end_top_index"][valid_end])


def test_predict_on_two_replicas_equals_one_device():
    if len(tf.config.list_logical_devices("CPU")) < 2:
        pytest.skip("needs the two logical CPUs set up by conftest.py")
    from test_finetuning_distributed import two_cpu_strategy

    strategy = two_cpu_strategy()
    with strategy.scope():
        mirrored = _model(ClassificationHead(3, dropout_rate=0.0))
    single = _model(ClassificationHead(3, dropout_rate=0.0))
    mirrored.set_weights(single.get_weights())
    features = _features(7, 60, seed=3)  # batch 3 → 4 rows (2 per replica), the last batch padded
    ours = predict(mirrored, features, 3, strategy, Padding.dynamic(SEQ))["logits"]
    np.testing.assert_allclose(ours, predict(single, features, 7)["logits"], atol=TOLERANCE)
    assert ours.shape == (7, 3)


def _batches(dataset, count):
    return [{k: v.numpy() for k, v in batch.items()} for batch in dataset.take(count)]


def test_train_batches_are_trimmed_bucketed_and_deterministic():
    features = _features(64, SEQ, seed=4)
    padding = Padding.dynamic(SEQ)
    dataset = train_dataset(features, 8, seed=7, padding=padding, bucketing=True)
    assert dataset.element_spec["input_ids"].shape.as_list() == [8, None]  # one trace for all lengths
    batches = _batches(dataset, 24)
    for batch in batches:
        lengths = sequence_lengths(batch["input_mask"])
        buckets = {padding.length(n) for n in lengths}
        assert buckets == {batch["input_ids"].shape[1]}  # one length bucket per batch, cut to it
        rows = [np.flatnonzero((features["input_ids"] == np.pad(r, (0, SEQ - len(r)))).all(1)) for r in
                batch["input_ids"]]
        assert all(len(r) >= 1 for r in rows)  # real examples, unchanged but for the cut padding
    again = _batches(train_dataset(features, 8, seed=7, padding=padding, bucketing=True), 24)
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(batches, again))
    other = _batches(train_dataset(features, 8, seed=8, padding=padding, bucketing=True), 24)
    assert not all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(batches, other))
    plain = _batches(train_dataset(features, 8, seed=7, padding=padding), 3)
    fixed = _batches(train_dataset(features, 8, seed=7), 3)
    for a, b in zip(plain, fixed):  # without bucketing: the fixed batches, cut
        assert a["input_ids"].shape[1] == padding.length(sequence_lengths(b["input_mask"]).max())
        np.testing.assert_array_equal(a["input_ids"], b["input_ids"][:, :a["input_ids"].shape[1]])


def test_training_with_dynamic_padding_equals_fixed(tmp_path, glue_dir, vocab_file):
    """Same batches (no bucketing), cut or not: the same weights and dev scores."""
    weights = {}
    for name, dynamic in (("fixed", False), ("dynamic", True)):
        tokenizer = WordPieceTokenizer(vocab_file)
        config = get_config("tiny", TINY, vocab_size=len(VOCAB), max_seq_length=64, max_position_embeddings=64,
                            dropout_rate=0.0)
        task = get_task("SST-2", data_dir=str(glue_dir))
        options = RunOptions(output_dir=str(tmp_path / name), learning_rate=1e-2, train_batch_size=4,
                             eval_batch_size=3, num_train_epochs=1, warmup_fraction=0.0, weight_decay=0.01,
                             layerwise_lr_decay=0.8, max_seq_length=64, max_train_steps=4, log_steps=1,
                             dynamic_padding=dynamic, length_bucketing=False)
        result = run_single(task, config, new_encoder_fn(config), tokenizer, options, tf.distribute.get_strategy(),
                            options.output_dir, {})
        model = build_model(task, config, new_encoder_fn(config), tf.distribute.get_strategy(), 64)
        model.load_weights(str(tmp_path / name / FINAL_WEIGHTS))
        weights[name] = (result, {v.path: v.numpy() for v in model.weights})
    (fixed_result, fixed), (dynamic_result, dynamic) = weights["fixed"], weights["dynamic"]
    assert dynamic_result["final"]["accuracy"] == pytest.approx(fixed_result["final"]["accuracy"])
    for path, value in fixed.items():
        np.testing.assert_allclose(dynamic[path], value, atol=TOLERANCE, err_msg=path)


@pytest.mark.slow  # ~8 s; test_training_with_dynamic_padding_equals_fixed and test_span_predictions_equal_fixed_padding run by default
def test_squad_v2_dynamic_padding_equals_fixed(tmp_path):
    """SQuAD 2.0 end to end (training, beam search, decoding), batches cut from 96 to 64 tokens or not."""
    import json

    from test_finetuning_run import _common, run_main
    from test_squad_features import VOCAB as SQUAD_VOCAB, squad_json

    data_dir = tmp_path / "squad"
    data_dir.mkdir()
    for split in ("train", "dev"):
        (data_dir / f"{split}-v2.0.json").write_text(json.dumps(squad_json(True)), encoding="utf-8")
    vocab = tmp_path / "squad_vocab.txt"
    vocab.write_text("\n".join(SQUAD_VOCAB) + "\n", encoding="utf-8")
    outputs = {}
    for name, flag in (("fixed", "--nodynamic_padding"), ("dynamic", "--dynamic_padding")):
        args = [a for a in _common(tmp_path, str(vocab), name) if not a.startswith("--hparams")]
        hparams = json.dumps({**json.loads(TINY), "max_position_embeddings": 96, "dropout_rate": 0.0})
        run_main(args + [f"--hparams={hparams}", "--task=squad_v2", f"--data_dir={data_dir}", "--max_train_steps=2",
                         "--max_seq_length=96", "--doc_stride=32", "--max_query_length=16", "--nolength_bucketing",
                         "--do_eval=false", "--do_predict", flag])
        outputs[name] = {f: json.loads((tmp_path / name / f).read_text())
                         for f in ("predictions.json", "null_odds.json", "nbest_predictions.json")}
    fixed, dynamic = outputs["fixed"], outputs["dynamic"]
    assert dynamic["predictions.json"] == fixed["predictions.json"] and len(fixed["predictions.json"]) == 5
    assert dynamic["null_odds.json"] == pytest.approx(fixed["null_odds.json"], abs=1e-4)
    for qid, candidates in fixed["nbest_predictions.json"].items():
        assert [c["text"] for c in dynamic["nbest_predictions.json"][qid]] == [c["text"] for c in candidates]
