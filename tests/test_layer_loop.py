"""An encoder's XLA:CPU layers as one loop (`model.layer_loop`) against the same layers unrolled: the same
outputs, gradients and dropout sites, and a traced graph that holds one layer whatever the depth."""

import collections
import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import get_config
from electra_tf.model import example_dropout, layer_loop
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.options import ExecutionOptions

CPU_DEFAULTS = ExecutionOptions().resolve({"CPU"})
BATCH, SEQ = 4, 12


def _encoder(num_layers=3, policy="float32"):
    config = get_config("tiny")
    config = dataclasses.replace(config, dropout_rate=0.1,
                                 discriminator=dataclasses.replace(config.discriminator, num_layers=num_layers))
    keras.utils.set_random_seed(0)
    encoder = ElectraEncoder.from_config_object(config, execution=CPU_DEFAULTS, dtype=policy)
    encoder(_inputs())
    return encoder


def _inputs():
    rng = np.random.RandomState(0)
    lengths = np.array([12, 9, 4, 7])
    return {"token_ids": tf.constant(rng.randint(5, 100, (BATCH, SEQ)), tf.int32),
            "segment_ids": tf.zeros((BATCH, SEQ), tf.int32),
            "padding_mask": tf.constant(np.arange(SEQ)[None, :] < lengths[:, None])}


def _forward_and_gradients(encoder, loop: bool, training=True, output_length=None):
    """Outputs, gradients and the scope's next dropout site, with the layers looped or unrolled."""
    def unrolled(*args, **kwargs):
        return False

    @tf.function(autograph=False)
    def step():
        streams = example_dropout.example_streams(seed=3, step=5, global_indices=tf.range(BATCH))
        with tf.GradientTape() as tape:
            with example_dropout.keyed_by(streams):
                out = encoder(_inputs(), training=training, output_length=output_length)
                next_site = example_dropout.active_scope().next_site
            loss = tf.reduce_sum(tf.cast(out, tf.float32) ** 2)
        grads = tape.gradient(loss, encoder.trainable_variables)
        return out, [tf.convert_to_tensor(g) for g in grads], next_site

    applies = layer_loop.applies
    layer_loop.applies = applies if loop else unrolled
    try:
        out, grads, next_site = step()
    finally:
        layer_loop.applies = applies
    return out.numpy(), [g.numpy() for g in grads], int(next_site)


@pytest.mark.parametrize("policy,training,output_length", [
    ("float32", True, None), ("float32", False, None), ("float32", True, 1), ("mixed_bfloat16", True, None)])
def test_layers_as_one_loop_equal_the_unrolled_layers(policy, training, output_length):
    encoder = _encoder(policy=policy)
    looped = _forward_and_gradients(encoder, True, training, output_length)
    unrolled = _forward_and_gradients(encoder, False, training, output_length)
    np.testing.assert_array_equal(looped[0], unrolled[0])
    for a, b in zip(looped[1], unrolled[1]):
        np.testing.assert_array_equal(a, b)
    # embeddings 1 + 3 per layer when dropping out: the loop advanced the scope as the layers would
    assert looped[2] == unrolled[2] == (1 + 3 * 3 if training else 0)


def _traced_ops(encoder) -> collections.Counter:
    """The op types of the traced forward and backward pass (the XLA kernels' calls among them), counted."""
    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            with example_dropout.keyed_by(example_dropout.example_streams(1, 0, tf.range(BATCH))):
                loss = tf.reduce_sum(encoder(_inputs(), training=True))
        return tape.gradient(loss, encoder.trainable_variables)

    graph = step.get_concrete_function().graph.as_graph_def()
    return collections.Counter(n.op for n in list(graph.node) + [n for f in graph.library.function for n in f.node_def])


def test_the_traced_encoder_holds_one_layer_whatever_its_depth():
    """A deeper encoder adds its weights' handles, reads and identities to the traced step, nothing else: one
    layer's kernels are called, and each kind of weight is stacked, reshaped and concatenated once for all layers
    (`xla_cpu_weights(stacked_over=...)`), not once per layer."""
    shallow, deep = _traced_ops(_encoder(num_layers=2)), _traced_ops(_encoder(num_layers=5))
    grown = {op for op in shallow | deep if shallow[op] != deep[op]}
    assert grown == {"Placeholder", "ReadVariableOp", "Identity"}
    assert deep["PartitionedCall"] + deep["StatefulPartitionedCall"] > 0


def test_layers_stay_unrolled_where_each_would_draw_its_own_dropout():
    encoder = _encoder()
    layers = encoder.transformer_layers
    assert layer_loop.applies(layers, training=False)
    assert not layer_loop.applies(layers, training=True)  # outside `keyed_by`: each layer's seed generator
    with example_dropout.keyed_by(example_dropout.example_streams(1, 0, tf.range(BATCH))):
        assert layer_loop.applies(layers, training=True)
        assert not layer_loop.applies(layers, training=True, attention_mask=tf.ones((1, SEQ, SEQ)))
    assert not layer_loop.applies(layers[:1], training=False)
