"""The encoder a serving export computes with: `ElectraEncoder`'s inference forward in few standard TensorFlow ops.

A served request is short (SST-2: ~25 tokens at batch 1), so each of the encoder's matmuls is a few microseconds of
work, about what TensorFlow's executor spends dispatching one op. The reference kernels' forward, traced, runs
Keras' ops one by one: `EinsumDense` projections whose bias adds sit under custom gradients (`IdentityN`),
attention through `einsum` and a masked softmax built of `where`, casts and shape arithmetic around each: several
times the ops this forward runs for the same function. The per-request effect is in
`bench/results/inference-batch1-breakdown.json`.

`ServingEncoder` is an `ElectraEncoder` (the same layers, weights and order: `serving.portable.copy_weights` fills
it) whose call computes, per transformer layer, on `[batch · tokens, hidden]` rows, in `BLOCKS` independent blocks
(below):

* per block, a group of `heads / BLOCKS` heads: its query, key and value as one `MatMul` + `BiasAdd` (a kernel
  `[hidden, 3 · group width]`, the group's query, key and value columns side by side), split into heads by one
  reshape, one transpose and one unstack; scores as one batch matmul, scaled by 1/√size, plus the padding mask as
  an additive bias of −0.7 · float32's max on padded keys (what Keras' masked softmax puts there), softmax, one
  batch matmul; on a batch of at most `FEW_TOKENS` tokens in ops oneDNN leaves to TensorFlow's kernels, which run
  small work on the calling thread instead of handing it to the intra-op threads (`attention`; the two kernel sets
  timed against each other in `bench/results/inference-attention-crossover.json`); the group's context times its
  rows of the output projection's kernel;
* the blocks' products summed, the bias, the residual and LayerNorm (`layer_norm`);
* per block, a block of the feed-forward's inner units: the first dense layer's columns for them, with the layer's
  own activation, times the second dense layer's rows for them;
* the blocks' products summed, the bias, the residual, LayerNorm.

TensorFlow's CPU matmul (oneDNN's sgemm) runs a product of a few rows on one thread. The blocks take none of each
other's outputs between the two sums, so the executor runs them on two threads at once, and each matmul reads its
block of a kernel only. The sums add the blocks' partial dot products: the outputs equal one matmul's to float
rounding. Each layer's weights are stored in that layout (`LayerLayout`, a `compact.Pack`). What the blocks
change: `bench/results/inference-batch1-column-blocks.json`; the layout, the sums and `layer_norm`:
`bench/results/inference-batch1-layer-pack.json` (the classifier) and `…-layer-pack-tagger.json` (the tagger).

The layers run as one `tf.while_loop` (`loop_layers`), iteration i on layer i's weights: all layers' weights are one
`[layers, rows, 16]` tensor (`compact.stacked_weights`: under `FlatWeights`, rows of its variable, read without a
copy), split into a layer's `LayerParts` in the loop, so the graph a loader imports, optimises and instantiates
holds one layer whatever the depth. A [CLS] head's last layer, which computes fewer queries, runs after the loop.

Inference only: no dropout, and no `attention_mask` (Electric's one-directional towers are a pre-training model);
`training=True` or an attention mask raise. `output_length=n` computes the last layer's queries at the first n
positions only, as `ElectraEncoder.call` does (a [CLS] head). The outputs equal the reference kernels' to float
rounding (`tests/test_serving_portable.py` and `tests/test_serving_speed.py` hold the served outputs to the trained
model's within 1e-5).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from electra_tf.model.encoder import ElectraEncoder
from electra_tf.serving.compact import Pack, parts_of, stacked_weights

# What Keras' masked softmax (`_apply_masks`) puts at a masked score: −0.7 × float32's largest value.
MASKED_SCORE = -0.7 * float(tf.float32.max)

# Up to this many tokens in a request's batch (batch × longest row), attention runs on TensorFlow's own kernels,
# above it on oneDNN's (`attention`): about where the two cross at batch 1 to 16 on ELECTRA-Small
# (`bench.inference_bench_breakdown --parts attention`).
FEW_TOKENS = 80
ATTENTION_KERNELS = "attention_kernels"  # the name of the `tf.cond` that chooses
# The independent blocks of each layer's work (`transformer_layer`): two, the cores of the smallest machine that
# serves.
BLOCKS = 2


def transpose_bits(x, perm):
    """`tf.transpose(x, perm)` of a float32 `x`, moving its bits as int32 (`Bitcast` copies nothing).

    Where oneDNN is on (TensorFlow's x86 default), TensorFlow runs a float32 `Transpose` as oneDNN's, which cost
    about 66 µs a call on these [batch, tokens, heads, size] tensors at batch 1 against 4 µs for TensorFlow's own
    (`bench/results/inference-batch1-breakdown.json`, step stats); oneDNN takes int32 only on the CPUs where it
    says so (else it logs "oneDNN supports DT_INT32 only on platforms with AVX-512" and TensorFlow's kernel runs).
    Same bits out, either way."""
    return tf.bitcast(tf.transpose(tf.bitcast(x, tf.int32), perm), tf.float32)


class ServingEncoder(ElectraEncoder):
    """`ElectraEncoder` with the inference forward of this module (see the module docstring). `few_tokens`: up to
    how many tokens in a batch attention runs on `few_tokens_attention`'s kernels (0: never, and no `tf.cond`);
    `blocks`: the independent blocks of each layer's work (1: one matmul per dense layer)."""

    def __init__(self, *args, few_tokens: int = FEW_TOKENS, blocks: int = BLOCKS, **kwargs):
        super().__init__(*args, **kwargs)
        if blocks < 1:
            raise ValueError(f"ServingEncoder: blocks={blocks}, expected 1 or more")
        self.few_tokens = few_tokens
        self.blocks = blocks

    def get_config(self):
        return {**super().get_config(), "few_tokens": self.few_tokens, "blocks": self.blocks}

    def call(self, inputs, training=None, output_length=None, attention_mask=None):
        if training or attention_mask is not None:
            raise ValueError("ServingEncoder computes inference only (training=False) with a padding mask only")
        ids, segments = inputs["token_ids"], inputs["segment_ids"]
        batch, length = tf.shape(ids)[0], tf.shape(ids)[1]
        rows = embedded_rows(self.embeddings, ids, segments, length)
        if self.embeddings_projection is not None:
            rows = dense(rows, self.embeddings_projection.kernel, self.embeddings_projection.bias,
                         self.embeddings_projection.activation)
        mask_bias = (1.0 - tf.cast(inputs["padding_mask"], tf.float32))[:, None, None, :] * MASKED_SCORE
        layers = self.transformer_layers
        pack = self.weight_pack()
        form = LayerForm(batch, length, layers[0], self.few_tokens, pack.layout.blocks)  # every layer's the same
        stored = stacked_weights(pack)  # [layers, rows, 16]: layer i's parts in row block i

        def layer(i):
            return pack.layout.parts(parts_of(pack, stored[i]))

        looped = len(layers) - (output_length is not None)  # the last layer computes n queries only
        if looped:
            rows = loop_layers(layer, looped, rows, form, mask_bias)
        if output_length is not None:
            rows = transformer_layer(layer(len(layers) - 1), rows, form, mask_bias, output_length)
        return tf.reshape(rows, [batch, -1, self.hidden_size])

    def weight_pack(self) -> Pack:
        """The layers' weights as the forward reads them: a `Pack` in `LayerLayout`, in `used_blocks()` blocks."""
        layers = self.transformer_layers
        return Pack(tuple(tuple(LayerWeights.of(layer)) for layer in layers),
                    LayerLayout(layers[0], self.used_blocks()))

    def used_blocks(self) -> int:
        """`blocks` where it divides the heads and the feed-forward's inner units, else 1."""
        parts = self.transformer_layers[0].sublayers()
        sizes = (parts["attention"].num_heads, parts["intermediate"].kernel.shape[-1])
        return self.blocks if all(size % self.blocks == 0 for size in sizes) else 1


def loop_layers(layer, count: int, rows, form, mask_bias):
    """The first `count` layers as one `tf.while_loop`, iteration i on layer i's weights (`layer(i)`: its
    `LayerParts`): the graph holds one layer, which a loader instantiates and optimises once, not once per layer."""
    def body(i, rows):
        return i + 1, transformer_layer(layer(i), rows, form, mask_bias)

    _, rows = tf.while_loop(lambda i, _: i < count, body, (tf.constant(0), rows), maximum_iterations=count)
    return rows


def embedded_rows(embeddings, ids, segments, length):
    """`ElectraEmbeddings`' output at inference (no dropout) as `[batch · tokens, embedding]` rows."""
    x = (tf.gather(embeddings.token_embedding.embeddings, ids)
         + embeddings.position_embedding.position_embeddings[:length]
         + tf.gather(embeddings.segment_embedding.embeddings, segments))
    norm = embeddings.embeddings_layer_norm
    return tf.reshape(layer_norm(x, norm.gamma, norm.beta, norm.epsilon), [-1, embeddings.embedding_size])


def layer_norm(x, gamma, beta, epsilon):
    """LayerNorm of `x` over the last axis: `(x − mean) · rsqrt(variance + ε) · γ + β`, in 9 ops where Keras'
    formula (`keras.ops.layer_normalization`: `x · inv + (β − mean · inv)`, `inv = rsqrt(variance + ε) · γ`)
    takes 10, one of them TensorFlow's slower broadcast `SquaredDifference`; the two agree to float rounding."""
    centred = x - tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(centred * centred, axis=-1, keepdims=True)
    return tf.nn.bias_add(centred * tf.math.rsqrt(variance + epsilon) * gamma, beta)


def dense(rows, kernel, bias, activation=None):
    """`rows @ kernel + bias`, then `activation` (if any)."""
    return summed_dense([rows], [kernel], bias, activation)


class LayerWeights(NamedTuple):
    """One transformer layer's weights (variables, or tensors) in the shapes its sub-layers hold them."""
    query_kernel: Any  # EinsumDense [hidden, heads, size]
    query_bias: Any  # [heads, size]
    key_kernel: Any
    key_bias: Any
    value_kernel: Any
    value_bias: Any
    output_kernel: Any  # EinsumDense [heads, size, hidden]
    output_bias: Any
    attention_gamma: Any
    attention_beta: Any
    intermediate_kernel: Any
    intermediate_bias: Any
    ffn_kernel: Any
    ffn_bias: Any
    ffn_gamma: Any
    ffn_beta: Any

    @classmethod
    def of(cls, layer) -> "LayerWeights":
        """`layer`'s (an `ElectraTransformerEncoder`'s) variables."""
        parts = layer.sublayers()
        attention, norms = parts["attention"], (parts["attention_norm"], parts["feedforward_norm"])
        dense_layers = (attention.query_dense, attention.key_dense, attention.value_dense, attention.output_dense)
        projections = [w for d in dense_layers for w in (d.kernel, d.bias)]
        return cls(*projections, norms[0].gamma, norms[0].beta, parts["intermediate"].kernel,
                   parts["intermediate"].bias, parts["output"].kernel, parts["output"].bias, norms[1].gamma,
                   norms[1].beta)


class LayerParts(NamedTuple):
    """One layer's weights as `transformer_layer` computes with them, in `blocks` blocks (lists of `blocks` tensors;
    the others one-tuples and pairs). Block j holds heads j·heads/blocks to (j + 1)·heads/blocks and inner units
    j·inner/blocks to (j + 1)·inner/blocks: the first dense layers' columns for them, the second ones' rows."""
    qkv_kernels: list  # [hidden, 3 · width / blocks]: the query's, key's and value's columns side by side
    qkv_biases: list  # [3 · width / blocks]
    output_kernels: list  # [width / blocks, hidden]
    output_bias: tuple  # ([hidden],)
    attention_norm: tuple  # (gamma, beta)
    intermediate_kernels: list  # [hidden, inner / blocks]
    intermediate_biases: list  # [inner / blocks]
    ffn_kernels: list  # [inner / blocks, hidden]
    ffn_bias: tuple  # ([hidden],)
    ffn_norm: tuple  # (gamma, beta)

    def flat(self) -> list:
        return [w for field in self for w in field]


class LayerLayout:
    """What a serving export stores of each transformer layer of `layer`'s shapes (`compact.Pack`'s layout): its
    `LayerParts` in `blocks` blocks."""

    def __init__(self, layer, blocks: int):
        attention, intermediate = layer.sublayers()["attention"], layer.sublayers()["intermediate"]
        self.blocks = blocks
        self.hidden = attention.output_dense.kernel.shape[-1]
        self.width = attention.num_heads * attention.key_dim
        self.variable_shapes = [tuple(v.shape) for v in LayerWeights.of(layer)]
        hidden, group, inner = self.hidden, 3 * self.width // blocks, intermediate.kernel.shape[-1] // blocks
        self.part_shapes = LayerParts(
            [(hidden, group)] * blocks, [(group,)] * blocks, [(self.width // blocks, hidden)] * blocks, [(hidden,)],
            [(hidden,)] * 2, [(hidden, inner)] * blocks, [(inner,)] * blocks, [(inner, hidden)] * blocks,
            [(hidden,)], [(hidden,)] * 2)
        self.shapes = self.part_shapes.flat()

    def parts(self, flat: list) -> LayerParts:
        """A layer's `LayerParts` from their flat list (`arrange`'s, `compact.parts_of`'s): as many in each field as
        `part_shapes` has."""
        ends = np.cumsum([len(field) for field in self.part_shapes])
        return LayerParts(*[list(flat[end - len(field):end]) for field, end in zip(self.part_shapes, ends)])

    def arrange(self, values) -> list:
        """A layer's `LayerParts` (flat) from its `LayerWeights` values."""
        w = LayerWeights(*values)
        kernels = [tf.split(tf.reshape(x, [self.hidden, self.width]), self.blocks, axis=1)
                   for x in (w.query_kernel, w.key_kernel, w.value_kernel)]
        biases = [tf.split(tf.reshape(x, [self.width]), self.blocks) for x in (w.query_bias, w.key_bias, w.value_bias)]
        return LayerParts(
            [tf.concat(group, axis=1) for group in zip(*kernels)], [tf.concat(group, axis=0) for group in zip(*biases)],
            tf.split(tf.reshape(w.output_kernel, [self.width, self.hidden]), self.blocks), (w.output_bias,),
            (w.attention_gamma, w.attention_beta), tf.split(w.intermediate_kernel, self.blocks, axis=1),
            tf.split(w.intermediate_bias, self.blocks), tf.split(w.ffn_kernel, self.blocks), (w.ffn_bias,),
            (w.ffn_gamma, w.ffn_beta)).flat()

    def restore(self, flat: list) -> list:
        """A layer's `LayerWeights` values (in its sub-layers' shapes) from its `LayerParts` (flat)."""
        p = self.parts(flat)
        qkv_kernels = zip(*[tf.split(kernel, 3, axis=1) for kernel in p.qkv_kernels])  # (query's blocks, ...)
        qkv_biases = zip(*[tf.split(bias, 3) for bias in p.qkv_biases])
        projections = [w for kernels, biases in zip(qkv_kernels, qkv_biases)
                       for w in (tf.concat(kernels, axis=1), tf.concat(biases, axis=0))]
        values = LayerWeights(*projections, tf.concat(p.output_kernels, axis=0), *p.output_bias, *p.attention_norm,
                              tf.concat(p.intermediate_kernels, axis=1), tf.concat(p.intermediate_biases, axis=0),
                              tf.concat(p.ffn_kernels, axis=0), *p.ffn_bias, *p.ffn_norm)
        return [tf.reshape(value, shape) for value, shape in zip(values, self.variable_shapes)]


class LayerForm:
    """What every layer shares: its activations and LayerNorm epsilons, and the shape and permutation tensors it
    reuses, made once per trace (a traced graph holds one node for each instead of one per use)."""

    def __init__(self, batch, length, layer, few_tokens: int, blocks: int):
        parts = layer.sublayers()
        attention = parts["attention"]
        heads, size = attention.num_heads, attention.key_dim
        self.activations = (parts["intermediate"].activation, parts["output"].activation)
        self.epsilons = (parts["attention_norm"].epsilon, parts["feedforward_norm"].epsilon)
        self.hidden = attention.output_dense.kernel.shape[-1]
        # A block's query, key and value [batch · length, 3 · group width] → this, then `qkv_swap`ped to
        # [3, batch, group heads, length, size]:
        self.by_heads = tf.stack([batch, length, 3, heads // blocks, size])
        self.qkv_swap = tf.constant([2, 0, 3, 1, 4])
        self.sequences = tf.stack([batch, length, self.hidden])
        self.rows = tf.constant([-1, heads * size // blocks])  # a group's context
        self.swap = tf.constant([0, 2, 1, 3])  # [batch, heads, tokens, size] → [batch, tokens, heads, size]
        self.scale = tf.constant(1.0 / math.sqrt(size))
        self.has_few_tokens = batch * length <= few_tokens if few_tokens else None  # None: no choice


def transformer_layer(parts: LayerParts, rows, form: LayerForm, mask_bias, query_length=None):
    """One post-LN `ElectraTransformerEncoder` at inference on `[batch · length, hidden]` rows, computing with
    `parts` (tensors) in their blocks (see the module docstring); with `query_length=n`, only each sequence's first
    n positions are computed (keys and values span all)."""
    groups = [by_heads(dense(rows, kernel, bias), form, query_length)  # a group of heads each
              for kernel, bias in zip(parts.qkv_kernels, parts.qkv_biases)]
    contexts = [tf.reshape(transpose_bits(context, form.swap), form.rows)
                for context in attention(groups, mask_bias, form)]
    queries = rows
    if query_length is not None:
        queries = tf.reshape(tf.reshape(rows, form.sequences)[:, :query_length], [-1, form.hidden])
    attended = summed_dense(contexts, parts.output_kernels, *parts.output_bias)
    hidden_rows = layer_norm(attended + queries, *parts.attention_norm, form.epsilons[0])
    inner = [dense(hidden_rows, kernel, bias, form.activations[0])
             for kernel, bias in zip(parts.intermediate_kernels, parts.intermediate_biases)]
    output = summed_dense(inner, parts.ffn_kernels, *parts.ffn_bias, form.activations[1])
    return layer_norm(output + hidden_rows, *parts.ffn_norm, form.epsilons[1])


def by_heads(projected, form: LayerForm, query_length=None) -> tuple:
    """A block's query, key and value columns `[batch · tokens, 3 · group heads · size]` as `(q, k, v)`, each
    `[batch, group heads, tokens, size]` (one transpose for the three); with `query_length=n`, the queries of each
    sequence's first n positions."""
    q, k, v = tf.unstack(transpose_bits(tf.reshape(projected, form.by_heads), form.qkv_swap), num=3)
    return (q if query_length is None else q[:, :, :query_length]), k, v


def summed_dense(blocks: list, kernels: list, bias, activation=None):
    """`dense` of `blocks` (column blocks of its input) side by side, with `kernels` the matching row blocks of its
    kernel: the blocks' products summed, then the bias and `activation`."""
    out = tf.nn.bias_add(tf.add_n([tf.matmul(x, kernel) for x, kernel in zip(blocks, kernels)]), bias)
    return out if activation is None or activation is keras.activations.linear else activation(out)


def attention(groups: list, mask_bias, form) -> list:
    """Scaled dot-product attention of each group of heads' `(q, k, v)`, `[batch, heads, tokens, size]` queries,
    keys and values, the padding mask an additive bias: `few_tokens_attention` where the batch holds at most
    `ServingEncoder.few_tokens` tokens, else `many_tokens_attention` (one `tf.cond` on the batch's shape for all the
    groups; both compute the same function)."""
    def each(kernels):
        return [kernels(q, k, v, mask_bias, form.scale) for q, k, v in groups]

    if form.has_few_tokens is None:
        return each(many_tokens_attention)
    return tf.cond(form.has_few_tokens, lambda: each(few_tokens_attention), lambda: each(many_tokens_attention),
                   name=ATTENTION_KERNELS)


def many_tokens_attention(q, k, v, mask_bias, scale):
    """`BatchMatMulV2`, `Softmax`, `BatchMatMulV2`: oneDNN's kernels where oneDNN is on (TensorFlow's x86 default)."""
    scores = tf.matmul(q, k, transpose_b=True) * scale + mask_bias
    return tf.matmul(tf.nn.softmax(scores, axis=-1), v)


def few_tokens_attention(q, k, v, mask_bias, scale):
    """The same attention in ops oneDNN leaves to TensorFlow's kernels: `BatchMatMulV3`, and softmax as
    `exp(log_softmax)`.

    oneDNN's batch matmul and softmax hand their work to the intra-op threads even when it is a few microseconds
    of it, and a short request waits on those hand-offs; TensorFlow's kernels run such small work on the calling
    thread. On many tokens oneDNN's threaded kernels are the faster (the crossover is `FEW_TOKENS`)."""
    scores = tf.raw_ops.BatchMatMulV3(x=q, y=k, adj_y=True, Tout=tf.float32) * scale + mask_bias
    return tf.raw_ops.BatchMatMulV3(x=tf.exp(tf.nn.log_softmax(scores, axis=-1)), y=v, Tout=tf.float32)
