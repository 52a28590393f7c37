"""The exports under oneDNN, TensorFlow's x86 CPU kernels: which kernels a short and a long request run, and
oneDNN's frozen-weights setting, through both loaders (`tf.saved_model.load` and TF Serving's TF1 session)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.serving.forward import FEW_TOKENS
from test_serving_portable import SEQ, classifier  # noqa: F401 (fixture)
from test_serving_speed import TEXTS, deep_classifier, session_logits, trained_logits


def executed_ops(path, texts) -> set:
    """The op types TF Serving's loader (a TF1 session) runs for one request of `texts`."""
    from tensorflow.core.protobuf import config_pb2

    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["serving_default"]
        options, metadata = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE), config_pb2.RunMetadata()
        session.run(signature.outputs["logits"].name, {signature.inputs["text"].name: texts}, options=options,
                    run_metadata=metadata)
    labels = [node.timeline_label for device in metadata.step_stats.dev_stats for node in device.node_stats]
    return {label.split(" = ")[1].split("(")[0] for label in labels if " = " in label}


def test_attention_runs_tensorflow_kernels_on_few_tokens_and_onednns_on_many(classifier):  # noqa: F811
    """A batch of at most `FEW_TOKENS` tokens runs attention as `BatchMatMulV3` and `exp(log_softmax)`, which oneDNN
    leaves to TensorFlow's kernels; a longer one as `BatchMatMulV2` and `Softmax` (oneDNN's `_Mkl` kernels where it
    is on); the logits are the trained model's either way."""
    model, tokenizer, path, _ = classifier
    few, many = ["good movie"], [" ".join(["bad"] * (SEQ + 8))] * (FEW_TOKENS // SEQ + 1)
    assert 4 <= FEW_TOKENS < len(many) * SEQ
    for texts, present, absent in ((few, {"BatchMatMulV3", "LogSoftmax"}, {"BatchMatMulV2"}),  # the head: Softmax
                                   (many, {"BatchMatMulV2"}, {"BatchMatMulV3", "LogSoftmax"})):
        ops = {op.removeprefix("_Mkl") for op in executed_ops(path, texts)}
        assert present <= ops and not absent & ops, (len(texts), " ".join(sorted(ops)))
        np.testing.assert_allclose(session_logits(path, texts), trained_logits(model, tokenizer, texts), atol=1e-5,
                                   rtol=0)


def numpy_attention(q, k, v, padding):
    """Scaled dot-product attention in numpy, padded keys left out of each softmax."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(padding[:, None, None, :], -np.inf, scores)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


def test_both_attention_kernels_compute_attention():
    from electra_tf.serving.forward import MASKED_SCORE, few_tokens_attention, many_tokens_attention

    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal([3, 2, 7, 8]).astype(np.float32) for _ in range(3))
    padding = np.arange(7)[None, :] >= np.array([7, 4, 1])[:, None]  # rows of 7, 4 and 1 real tokens
    mask_bias = tf.constant(padding[:, None, None, :] * MASKED_SCORE, tf.float32)
    expected = numpy_attention(q, k, v, padding)
    for kernels in (few_tokens_attention, many_tokens_attention):
        got = kernels(tf.constant(q), tf.constant(k), tf.constant(v), mask_bias, tf.constant(1 / np.sqrt(8.0), tf.float32))
        np.testing.assert_allclose(got.numpy(), expected, atol=2e-6, rtol=0, err_msg=kernels.__name__)


# Both loaders' logits of `texts` in a process of its own, whose environment the test sets.
BOTH_LOADERS = """
import json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401 (registers the tokenizer ops)
path, texts = sys.argv[1], json.loads(sys.argv[2])
tf2 = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(texts))["logits"].numpy()
with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["serving_default"]
    tf1 = session.run(signature.outputs["logits"].name, {signature.inputs["text"].name: texts})
print(json.dumps({"tf2": tf2.tolist(), "tf1": tf1.tolist()}))
"""


def test_exports_serve_the_trained_model_where_onednn_assumes_frozen_weights(tmp_path):
    """`TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1`, oneDNN's setting for inference, makes each fused matmul (grappler's
    `MatMul` + `BiasAdd`) keep the weights it first saw: in a `While` over the layers' weights, every iteration
    would compute with layer 0's, silently (a 4-layer loop of that kind: outputs off by about 2). The exports' layer
    loop is in the pruned graph, which runs with grappler off in both loaders (`compact.GRAPPLER_OFF`), so its
    matmuls are not fused and both serve the trained model under that setting; with grappler on for the pruned
    graph this fails."""
    from electra_tf.runtime import onednn_enabled

    if not onednn_enabled():
        pytest.skip("TensorFlow runs no oneDNN kernels here (TF_ENABLE_ONEDNN_OPTS=0, or not an x86 build)")
    model, tokenizer, path = deep_classifier(tmp_path, 3)  # two layers in the loop, the last one on [CLS]
    result = subprocess.run([sys.executable, "-c", BOTH_LOADERS, path, json.dumps(TEXTS)], capture_output=True,
                            text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    expected = trained_logits(model, tokenizer, TEXTS)
    for loader in ("tf2", "tf1"):
        np.testing.assert_allclose(np.array(served[loader]), expected, atol=1e-5, rtol=0, err_msg=loader)
