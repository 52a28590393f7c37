"""SpanHead (official joint start/end prediction, beam search, answerability) and head initialisers.

Every expected value is recomputed here in NumPy from the head's weights, the way the official
`qa_tasks.py` writes it (concatenation, one-hot gather, top-k), independently of the head's code.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf, log_softmax

from electra_tf.config import get_config
from electra_tf.finetuning.heads import ClassificationHead, SpanHead
from electra_tf.finetuning.squad.examples import read_examples
from electra_tf.finetuning.squad.features import convert_examples_to_features
from electra_tf.finetuning.tasks import get_task
from electra_tf.text.tokenization import WordPieceTokenizer
from test_squad_features import VOCAB, squad_json

B, L, H, J = 3, 9, 6, 5  # batch, sequence, hidden, joint hidden


def _batch(rng):
    """[CLS] q q [SEP] ctx... [SEP] pad: context (segment 1) at 4..7 in row 0, shorter rows after."""
    lengths = [9, 8, 7]
    mask = np.array([[1] * n + [0] * (L - n) for n in lengths], "int32")
    segments = np.array([[0] * 4 + [1] * (n - 4) + [0] * (L - n) for n in lengths], "int32")
    return {"input_mask": mask, "segment_ids": segments,
            "start_positions": np.array([5, 0, 4], "int32"), "end_positions": np.array([6, 0, 5], "int32"),
            "is_impossible": np.array([0, 1, 0], "int32")}


def _head(**kwargs):
    kwargs = dict(dict(beam_size=4, joint_hidden_size=J, answerable_hidden_size=J), **kwargs)
    head = SpanHead(**kwargs)
    head.build((None, None, H))
    # Larger weights than Glorot's so logits are well separated (no ties in any top-k).
    rng = np.random.RandomState(7)
    head.set_weights([rng.normal(scale=1.0, size=w.shape).astype("float32") for w in head.get_weights()])
    return head


def _weights(head, name):
    layer = getattr(head, name)
    return layer.kernel.numpy(), layer.bias.numpy()


def _gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _penalty(batch):
    allowed = batch["input_mask"] * batch["segment_ids"]
    allowed[:, 0] = 1
    return 1000.0 * (allowed - 1.0)


def _np_start_logits(head, hidden, batch):
    kernel, bias = _weights(head, "start_logits")
    return (hidden @ kernel + bias)[..., 0] + _penalty(batch)


def _np_end_logits(head, hidden, batch, start):
    """Official joint end logits of one example given one start: dense(GELU)(concat) → dense(1), masked."""
    k1, b1 = _weights(head, "joint_hidden")
    k2, b2 = _weights(head, "end_logits")
    b = start[0]
    concat = np.concatenate([np.tile(hidden[b, start[1]], (L, 1)), hidden[b]], axis=-1)  # [L, 2H]
    return (_gelu(concat @ k1 + b1) @ k2 + b2)[:, 0] + _penalty(batch)[b]


def _np_top_k(values, k):
    order = np.argsort(-values, kind="stable")[:k]
    return values[order], order


@pytest.fixture
def inputs():
    rng = np.random.RandomState(0)
    return rng.normal(size=(B, L, H)).astype("float32"), _batch(rng)


def test_training_end_logits_are_conditioned_on_the_gold_start(inputs):
    hidden, batch = inputs
    head = _head()
    outputs = head(hidden, batch, training=True)
    assert set(outputs) == {"start_logits", "end_logits", "answerable_logit"}
    np.testing.assert_allclose(outputs["start_logits"], _np_start_logits(head, hidden, batch), rtol=1e-5, atol=1e-4)
    for b in range(B):
        expected = _np_end_logits(head, hidden, batch, (b, batch["start_positions"][b]))
        np.testing.assert_allclose(outputs["end_logits"][b], expected, rtol=1e-5, atol=1e-4)
    moved = dict(batch, start_positions=np.array([6, 0, 5], "int32"))
    changed = head(hidden, moved, training=True)
    np.testing.assert_array_equal(changed["start_logits"], outputs["start_logits"])
    assert np.abs(changed["end_logits"][0] - outputs["end_logits"][0]).max() > 1e-3
    np.testing.assert_array_equal(changed["end_logits"][1], outputs["end_logits"][1])  # same gold start (0)
    with pytest.raises(ValueError, match="start_positions"):
        head(hidden, {k: batch[k] for k in ("input_mask", "segment_ids")}, training=True)


def test_inference_beam_matches_brute_force(inputs):
    hidden, batch = inputs
    head = _head()
    k = head.beam_size
    outputs = {key: np.asarray(v) for key, v in head(hidden, batch).items()}
    assert "end_logits" not in outputs
    assert outputs["start_top_index"].shape == (B, k) and outputs["end_top_index"].shape == (B, k, k)
    assert outputs["start_top_index"].dtype == np.int32 and outputs["end_top_log_probs"].dtype == np.float32
    start_log_probs = log_softmax(_np_start_logits(head, hidden, batch).astype(np.float64), axis=-1)
    for b in range(B):
        values, index = _np_top_k(start_log_probs[b], k)
        np.testing.assert_array_equal(outputs["start_top_index"][b], index)
        np.testing.assert_allclose(outputs["start_top_log_probs"][b], values, rtol=1e-5, atol=1e-4)
        for i, start in enumerate(index):
            end_log_probs = log_softmax(_np_end_logits(head, hidden, batch, (b, start)).astype(np.float64))
            values, end_index = _np_top_k(end_log_probs, k)
            np.testing.assert_array_equal(outputs["end_top_index"][b, i], end_index)
            np.testing.assert_allclose(outputs["end_top_log_probs"][b, i], values, rtol=1e-5, atol=1e-4)
    # The beam only visits allowed positions while there are enough of them (row 0: 4 context + [CLS]).
    allowed = set(np.nonzero(_penalty(batch)[0] == 0)[0])
    assert set(outputs["start_top_index"][0]) <= allowed


def test_beam_wider_than_the_sequence_is_padded_with_impossible_entries(inputs):
    hidden, batch = inputs
    head = _head(beam_size=L + 3)
    outputs = head(hidden, batch)
    starts = np.asarray(outputs["start_top_index"])
    assert starts.shape == (B, L + 3)
    assert sorted(starts[0, :L]) == list(range(L)) and (starts[:, L:] >= L).all()
    assert (np.asarray(outputs["start_top_log_probs"])[:, L:] < -1e8).all()
    assert (np.asarray(outputs["end_top_index"])[:, :, L:] >= L).all()


def test_independent_head_and_masking(inputs):
    hidden, batch = inputs
    head = _head(joint_prediction=False, answerable=False)
    assert not hasattr(head, "joint_hidden")
    outputs = head(hidden, batch)
    assert set(outputs) == {"start_logits", "end_logits"}
    kernel, bias = _weights(head, "end_logits")
    np.testing.assert_allclose(outputs["end_logits"], (hidden @ kernel + bias)[..., 0] + _penalty(batch),
                               rtol=1e-5, atol=1e-4)
    # Question, [SEP] of the question and padding can neither start nor end an answer.
    assert (np.asarray(outputs["start_logits"])[0, 1:4] < -500).all()
    assert (np.asarray(outputs["end_logits"])[2, 7:] < -500).all()
    loss = np.asarray(head.per_example_loss(batch, outputs))
    np.testing.assert_allclose(loss, _span_ce(outputs, batch), rtol=1e-5)


def test_loss_needs_training_outputs_for_the_joint_head(inputs):
    hidden, batch = inputs
    head = _head()
    with pytest.raises(ValueError, match="training=True"):
        head.per_example_loss(batch, head(hidden, batch))


def _squad_v1_features(tmp_path):
    """Real SQuAD 1.1 training features (every is_impossible is 0)."""
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    examples, _ = read_examples(squad_json()["data"], is_training=True, v2=False)
    features, _ = convert_examples_to_features(examples, WordPieceTokenizer(str(path)), 24, 6, 8,
                                               is_training=True)
    return features


def _span_ce(outputs, features):
    rows = np.arange(len(features["start_positions"]))
    start = log_softmax(np.asarray(outputs["start_logits"], np.float64), axis=-1)
    end = log_softmax(np.asarray(outputs["end_logits"], np.float64), axis=-1)
    return -(start[rows, features["start_positions"]] + end[rows, features["end_positions"]]) / 2


def test_answerability_classifier_trains_on_squad_v1(tmp_path):
    features = _squad_v1_features(tmp_path)
    assert features["is_impossible"].sum() == 0 and len(features["is_impossible"]) > 4
    head = get_task("squad").build_head(get_config("tiny", squad_beam_size=4))
    assert head.answerable and head.joint_prediction  # the official default: classifier on for 1.1 too
    n = len(features["input_ids"])
    hidden = tf.constant(np.random.RandomState(1).normal(size=(n, 24, H)).astype("float32"))
    head(hidden, features)
    variables = head.answerable_hidden.trainable_weights + head.answerable_logit.trainable_weights
    with tf.GradientTape() as tape:
        outputs = head(hidden, features, training=True)
        loss = head.per_example_loss(features, outputs)
        total = tf.reduce_sum(loss)
    logit = np.asarray(outputs["answerable_logit"], np.float64)
    bce = np.logaddexp(0.0, logit)  # label 0: −log(1 − sigmoid(x))
    np.testing.assert_allclose(np.asarray(loss), _span_ce(outputs, features) + 0.5 * bce, rtol=1e-4, atol=1e-5)
    grads = tape.gradient(total, variables)
    assert all(g is not None and float(tf.reduce_max(tf.abs(g))) > 0 for g in grads)
    # One SGD step on the answerability parameters lowers the "unanswerable" logit.
    for variable, grad in zip(variables, grads):
        variable.assign_sub(0.1 * grad)
    after = np.asarray(head(hidden, features, training=True)["answerable_logit"])
    assert after.mean() < logit.mean()


def test_build_head_follows_the_config():
    config = get_config("tiny", squad_joint_prediction=False, squad_beam_size=7, squad_answerable_classifier=False)
    head = get_task("squad_v2").build_head(config)
    assert (head.joint_prediction, head.beam_size, head.answerable) == (False, 7, False)
    head = get_task("squad_v2").build_head(get_config("tiny"))
    assert (head.joint_prediction, head.beam_size, head.answerable) == (True, 20, True)


def test_get_config_round_trip(inputs):
    hidden, batch = inputs
    head = _head(answerable_weight=0.3, hidden_act="gelu_approximate")
    clone = SpanHead.from_config(head.get_config())
    assert clone.get_config() == head.get_config()
    clone.build((None, None, H))
    clone.set_weights(head.get_weights())
    for key, value in head(hidden, batch).items():
        np.testing.assert_allclose(clone(hidden, batch)[key], value, rtol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: SpanHead(joint_hidden_size=64, answerable_hidden_size=64),
    lambda: ClassificationHead(64),
])
def test_dense_layers_are_glorot_uniform_as_in_the_official_code(make):
    head = make()
    head.build((None, None, 128))
    denses = [layer for layer in vars(head).values() if isinstance(layer, keras.layers.Dense)]
    assert len(denses) == (5 if isinstance(head, SpanHead) else 1)
    kernels = []
    for dense in denses:
        assert isinstance(dense.kernel_initializer, keras.initializers.GlorotUniform), dense.name
        fan_in, fan_out = dense.kernel.shape
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        kernel = dense.kernel.numpy()
        assert np.abs(kernel).max() <= limit and kernel.std() > 0.8 * limit / np.sqrt(3.0), dense.name
        np.testing.assert_array_equal(dense.bias.numpy(), 0.0)
        kernels.append(kernel.ravel()[:10])
    assert len({tuple(k) for k in kernels}) == len(kernels)  # independent draws


def test_mixed_precision_outputs_are_float32(inputs):
    hidden, batch = inputs
    head = SpanHead(beam_size=3, joint_hidden_size=J, answerable_hidden_size=J, dtype="mixed_bfloat16")
    outputs = head(hidden.astype("float32"), batch)
    assert {k: keras.backend.standardize_dtype(v.dtype) for k, v in outputs.items() if "index" not in k} == {
        k: "float32" for k in ("start_logits", "start_top_log_probs", "end_top_log_probs", "answerable_logit")}
    reference = SpanHead.from_config(dict(head.get_config(), dtype="float32"))
    reference.build((None, None, H))
    reference.set_weights(head.get_weights())
    np.testing.assert_allclose(outputs["start_top_log_probs"], reference(hidden, batch)["start_top_log_probs"],
                               atol=0.1)
