"""The serving encoder (`serving.forward.ServingEncoder`) computes the trained encoder's function in fewer ops, and
every serving export computes with it."""

import numpy as np
import pytest

from electra_tf.config import get_config
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.serving.forward import COLUMN_BLOCKS, ServingEncoder
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


def test_column_blocks_compute_what_one_matmul_does():
    """The served encoder's dense layers in column blocks (the default, `COLUMN_BLOCKS`; attention per group of
    heads) and in one matmul each: each output is the same dot product, and the blocks' kernels are the weights'
    columns in order."""
    _, served = encoders()
    config = served.get_config()
    assert config["column_blocks"] == COLUMN_BLOCKS == served.blocks() == 2
    one_matmul = ServingEncoder.from_config({**config, "column_blocks": 1})
    one_matmul.build()
    copy_weights(served, one_matmul)
    features = inputs()
    for output_length in (None, 1):
        np.testing.assert_allclose(served(features, output_length=output_length).numpy(),
                                   one_matmul(features, output_length=output_length).numpy(), atol=1e-6, rtol=0)
    odd = ServingEncoder.from_config({**config, "column_blocks": 3})  # divides neither the heads nor the columns
    odd.build()
    assert odd.blocks() == 1
    with pytest.raises(ValueError, match="column_blocks=0, expected 1 or more"):
        ServingEncoder.from_config({**config, "column_blocks": 0})


def products_of(nodes: dict, name: str, depth: int = 16) -> set:
    """The `MatMul`s whose products the node `name` computes from through element-wise ops (no other matmul)."""
    node = nodes.get(name.split(":")[0])
    if node is None or depth == 0:
        return set()
    if node.op == "MatMul":
        return {node.name}
    return set().union(*(products_of(nodes, i, depth - 1) for i in node.input if not i.startswith("^")))


def shared_rows(function) -> list[list[str]]:
    """`function`'s `MatMul`s grouped by the rows they multiply (their first input)."""
    groups = {}
    for node in function.node_def:
        if node.op == "MatMul":
            groups.setdefault(node.input[0], []).append(node.name)
    return list(groups.values())


def matmul_blocks(function) -> list[list[str]]:
    """For each `ConcatV2` of `function` that joins matmuls' outputs (one matmul behind each part): the rows each of
    those matmuls multiplies."""
    nodes = {node.name: node for node in function.node_def}
    blocks = []
    for node in function.node_def:
        if node.op == "ConcatV2":
            parts = [products_of(nodes, name) for name in node.input[:-1]]
            if all(len(matmuls) == 1 for matmuls in parts):
                blocks.append([nodes[matmul].input[0] for matmuls in parts for matmul in matmuls])
    return blocks


@pytest.mark.parametrize("fixture", ["classifier", "tagger", "squad"])
def test_every_export_computes_its_dense_layers_in_independent_column_blocks(fixture, request):
    """In every export, the output projection and each feed-forward matmul are two matmuls on the same rows (column
    blocks of the kernel), neither taking the other's product, and query, key and value two each (a group of heads
    each): the executor can run them on two threads at once. Before, one matmul read each whole kernel on one
    thread."""
    path = [value for value in request.getfixturevalue(fixture) if isinstance(value, str)][0]
    blocks = [rows for function in functions(path) for rows in matmul_blocks(function)]
    assert len(blocks) >= 3  # the output, intermediate and feed-forward output kernels, in the loop's body or after
    assert all(len(rows) == COLUMN_BLOCKS and len(set(rows)) == 1 for rows in blocks), blocks
    keys_and_values = [rows for function in functions(path) for rows in shared_rows(function) if len(rows) >= 4]
    assert keys_and_values  # a layer's keys and values: two matmuls each on its rows (with the queries, six)
