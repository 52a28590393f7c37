"""The serving encoder (`serving.forward.ServingEncoder`) computes the trained encoder's function in fewer ops, and
every serving export computes with it."""

import numpy as np
import pytest

from electra_tf.config import get_config
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.serving.forward import BLOCKS, ServingEncoder
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


def test_blocks_compute_what_one_matmul_does():
    """The served encoder's layers in independent blocks (the default, `BLOCKS`: a group of heads and a block of the
    feed-forward's inner units each) and in one block (one matmul per dense layer) compute the same function to
    float rounding (the blocks' sums add partial dot products), with and without a [CLS] head's shortened last
    layer."""
    _, served = encoders()
    config = served.get_config()
    assert config["blocks"] == BLOCKS == served.used_blocks() == 2
    one_block = ServingEncoder.from_config({**config, "blocks": 1})
    one_block.build()
    copy_weights(served, one_block)
    features = inputs()
    for output_length in (None, 1):
        np.testing.assert_allclose(served(features, output_length=output_length).numpy(),
                                   one_block(features, output_length=output_length).numpy(), atol=1e-6, rtol=0)
    odd = ServingEncoder.from_config({**config, "blocks": 3})  # divides neither the heads nor the inner units
    odd.build()
    assert odd.used_blocks() == 1
    with pytest.raises(ValueError, match="blocks=0, expected 1 or more"):
        ServingEncoder.from_config({**config, "blocks": 0})


def products_of(nodes: dict, name: str, depth: int = 16) -> set:
    """The `MatMul`s whose products the node `name` computes from (walking its inputs back to the first matmul on
    each path)."""
    node = nodes.get(name.split(":")[0])
    if node is None or depth == 0:
        return set()
    if node.op == "MatMul":
        return {node.name}
    return set().union(*(products_of(nodes, i, depth - 1) for i in node.input if not i.startswith("^")))


def block_sums(function) -> list[list]:
    """For each `AddN` of `function` that sums matmuls' products: those matmuls' `(rows, kernel)` inputs."""
    nodes = {node.name: node for node in function.node_def}
    return [[tuple(nodes[i.split(":")[0]].input[:2]) for i in node.input] for node in function.node_def
            if node.op == "AddN" and all(nodes[i.split(":")[0]].op == "MatMul" for i in node.input)]


def head_splits(function) -> list[set]:
    """For each 3-way `Unpack` of `function` (a block's query, key and value): the matmuls it comes from."""
    nodes = {node.name: node for node in function.node_def}
    return [products_of(nodes, node.name) for node in function.node_def
            if node.op == "Unpack" and node.attr["num"].i == 3]


@pytest.mark.parametrize("fixture", ["classifier", "tagger", "squad"])
def test_every_export_computes_its_layers_in_independent_blocks(fixture, request):
    """In every export, each layer's query, key and value come from one matmul per block (its group of heads'
    columns side by side), and the output projection and the feed-forward's second dense layer are sums of one
    matmul per block, each on its own block's rows and kernel: between the sums the blocks take none of each
    other's outputs, so the executor can run them on two threads at once. Before, query, key and value were three
    matmuls per block, and every dense layer's blocks were joined side by side (`ConcatV2`) before the next."""
    path = [value for value in request.getfixturevalue(fixture) if isinstance(value, str)][0]
    sums = [matmuls for function in functions(path) for matmuls in block_sums(function)]
    assert len(sums) >= 2  # the output projection and the feed-forward's, in the loop's body or after
    for matmuls in sums:
        rows, kernels = zip(*matmuls)
        assert len(matmuls) == BLOCKS and len(set(rows)) == len(set(kernels)) == BLOCKS, matmuls
    splits = [matmuls for function in functions(path) for matmuls in head_splits(function)]
    assert len(splits) >= BLOCKS and all(len(matmuls) == 1 for matmuls in splits), splits
