"""The serving encoder (`serving.forward.ServingEncoder`) computes the trained encoder's function in fewer ops, and
every serving export computes with it."""

import numpy as np
import pytest

from electra_tf.config import get_config
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.serving.forward import ServingEncoder
from electra_tf.serving.portable import copy_weights
from test_serving_portable import XLA_CPU, classifier, functions, squad, tagger  # noqa: F401 (fixtures)

SEQ = 12


def encoders(activation="gelu"):
    """A trained-looking encoder (embeddings narrower than the hidden size, two layers; the XLA:CPU kernels a CPU
    run trains with, which take the exact GELU only, else the reference kernels) and its serving encoder holding
    the same weights."""
    config = get_config("tiny", vocab_size=40, num_layers=2, hidden_act=activation)
    trained = ElectraEncoder.from_config_object(config, execution=XLA_CPU if activation == "gelu" else None)
    served = ServingEncoder.from_config_object(config)
    for encoder in (trained, served):
        encoder.build()
    rng = np.random.RandomState(0)
    for variable in trained.weights:  # away from the initial values: non-zero biases, LayerNorm parameters
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    copy_weights(trained, served)
    return trained, served


def inputs(batch=3, length=SEQ):
    rng = np.random.RandomState(1)
    lengths = np.array([length, 1, length // 2])[:batch]
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    return {"token_ids": rng.randint(5, 40, size=(batch, length)).astype("int32") * mask,
            "segment_ids": (rng.rand(batch, length) < 0.5).astype("int32") * mask, "padding_mask": mask}


@pytest.mark.parametrize("output_length", [None, 1, 3])
def test_the_serving_encoder_equals_the_trained_encoder(output_length):
    trained, served = encoders()
    features = inputs()
    expected = trained(features, training=False, output_length=output_length).numpy()
    got = served(features, training=False, output_length=output_length).numpy()
    assert got.shape == expected.shape == (3, output_length or SEQ, trained.hidden_size)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_the_serving_encoder_applies_the_trained_activation():
    trained, served = encoders(activation="gelu_approximate")
    features = inputs()
    np.testing.assert_allclose(served(features).numpy(), trained(features, training=False).numpy(), atol=1e-5,
                               rtol=0)


@pytest.mark.parametrize("call", [{"training": True}, {"attention_mask": np.ones((1, SEQ, SEQ), "int32")}])
def test_the_serving_encoder_refuses_training_and_attention_masks(call):
    _, served = encoders()
    with pytest.raises(ValueError, match="inference only"):
        served(inputs(), **call)


def op_types(path) -> set:
    return {node.op for function in functions(path) for node in function.node_def}


@pytest.mark.parametrize("fixture", ["classifier", "tagger", "squad"])
def test_every_export_computes_with_the_serving_encoder(fixture, request):
    """No `Einsum` (the reference kernels' projections and attention) in the exported graph, and the serving
    encoder's 2-D matmuls, attention matmuls and int32 transposes of float bits (`forward.transpose_bits`)."""
    path = [value for value in request.getfixturevalue(fixture) if isinstance(value, str)][0]
    ops = op_types(path)
    assert {"MatMul", "BatchMatMulV2", "Bitcast"} <= ops
    assert "Einsum" not in ops
