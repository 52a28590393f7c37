"""The encoder a serving export computes with: `ElectraEncoder`'s inference forward in few standard TensorFlow ops.

A served request is short (SST-2: ~25 tokens at batch 1), so each of the encoder's matmuls is a few microseconds of
work, about what TensorFlow's executor spends dispatching one op. The reference kernels' forward, traced, runs
Keras' ops one by one: `EinsumDense` projections whose bias adds sit under custom gradients (`IdentityN`),
attention through `einsum` and a masked softmax built of `where`, casts and shape arithmetic around each: several
times the ops this forward runs for the same function. The per-request effect is in
`bench/results/inference-batch1-breakdown.json`.

`ServingEncoder` is an `ElectraEncoder` (the same layers, weights and order: `serving.portable.copy_weights` fills
it) whose call computes, per transformer layer, on `[batch · tokens, hidden]` rows:

* query, key and value as `MatMul` + `BiasAdd` (the projection kernels `[hidden, heads, size]` read as
  `[hidden, heads · size]`), split into heads by one reshape and transpose each; with `COLUMN_BLOCKS` (below),
  per group of heads;
* scores as one batch matmul, scaled by 1/√size, plus the padding mask as an additive bias of
  −0.7 · float32's max on padded keys (what Keras' masked softmax puts there), softmax, one batch matmul; on a
  batch of at most `FEW_TOKENS` tokens in ops oneDNN leaves to TensorFlow's kernels, which run small work on the
  calling thread instead of handing it to the intra-op threads (`attention`; the two kernel sets timed against each
  other in `bench/results/inference-attention-crossover.json`);
* the output projection, the residual and LayerNorm (Keras' formula: `x · inv + (β − mean · inv)`,
  `inv = rsqrt(var + ε) · γ`), the feed-forward with the dense layer's own activation, residual, LayerNorm;
* each dense layer (query, key, value, output, the feed-forward's two) as `COLUMN_BLOCKS` dense layers on column
  blocks of its kernel and bias (`compact.Stack.column_blocks`; `blocked_dense`): query, key and value to context
  per group of `heads / COLUMN_BLOCKS` heads, the groups' contexts side by side (`ConcatV2`), and the output
  projection's and feed-forward's blocks' outputs side by side. TensorFlow's CPU matmul (oneDNN's sgemm) runs a product of a few rows on one thread, and its time then goes
  mostly to reading the kernel, whatever the rows: on a block it reads that block only, and the executor runs the
  blocks, which take none of each other's outputs, on two threads at once. Each output is the same dot product as
  before, so the outputs are unchanged. What the blocks change, on two cores and on one:
  `bench/results/inference-batch1-feedforward-blocks.json` (the feed-forward's alone) and
  `bench/results/inference-batch1-column-blocks.json`.

The layers run as one `tf.while_loop` (`loop_layers`), iteration i on layer i's weights: each kind of weight is one
`[layers, ...]` tensor (`compact.stacked_weights`: under `FlatWeights`, rows of its variable, read without a copy),
so the graph a loader imports, optimises and instantiates holds one layer whatever the depth (ELECTRA-Small's
classifier: its pruned graph 1,291 nodes unrolled, 389 + a 94-node loop body). A [CLS] head's last layer, which
computes fewer queries, runs after the loop.

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
import tensorflow as tf

from electra_tf.model.encoder import ElectraEncoder
from electra_tf.serving.compact import Stack, stacked_weights

# What Keras' masked softmax (`_apply_masks`) puts at a masked score: −0.7 × float32's largest value.
MASKED_SCORE = -0.7 * float(tf.float32.max)

# Up to this many tokens in a request's batch (batch × longest row), attention runs on TensorFlow's own kernels,
# above it on oneDNN's (`attention`): about where the two cross at batch 1 to 16 on ELECTRA-Small
# (`bench.inference_bench_breakdown --parts attention`).
FEW_TOKENS = 80
ATTENTION_KERNELS = "attention_kernels"  # the name of the `tf.cond` that chooses
# Column blocks of each dense layer's kernel (`blocked_dense`): two, the cores of the smallest machine that serves.
COLUMN_BLOCKS = 2
# The `LayerWeights` kernels held in those blocks: how many of their leading axes are the matmul's inputs.
BLOCKED_KERNELS = {"query_kernel": 1, "key_kernel": 1, "value_kernel": 1, "output_kernel": 2,
                   "intermediate_kernel": 1, "ffn_kernel": 1}


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
    `column_blocks`: the column blocks of each dense layer's kernel (1: one matmul each)."""

    def __init__(self, *args, few_tokens: int = FEW_TOKENS, column_blocks: int = COLUMN_BLOCKS, **kwargs):
        super().__init__(*args, **kwargs)
        if column_blocks < 1:
            raise ValueError(f"ServingEncoder: column_blocks={column_blocks}, expected 1 or more")
        self.few_tokens = few_tokens
        self.column_blocks = column_blocks

    def get_config(self):
        return {**super().get_config(), "few_tokens": self.few_tokens, "column_blocks": self.column_blocks}

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
        form = LayerForm(batch, length, layers[0], self.few_tokens, self.blocks())  # every layer's the same
        stacks = LayerWeights(*map(stacked_weights, self.weight_stacks()))
        looped = len(layers) - (output_length is not None)  # the last layer computes n queries only
        if looped:
            rows = loop_layers(stacks, looped, rows, form, mask_bias)
        if output_length is not None:
            rows = transformer_layer(stacks.at(len(layers) - 1), rows, form, mask_bias, output_length)
        return tf.reshape(rows, [batch, -1, self.hidden_size])

    def weight_stacks(self) -> list:
        """Each kind of layer weight, all layers' variables of it in order (a `Stack`: what `stacked_weights`
        stacks), the kernels in `blocks()` column blocks."""
        kinds = zip(LayerWeights._fields, zip(*map(LayerWeights.of, self.transformer_layers)))
        blocks = self.blocks()
        return [Stack(kind, blocks, BLOCKED_KERNELS[name]) if name in BLOCKED_KERNELS else Stack(kind)
                for name, kind in kinds]

    def blocks(self) -> int:
        """The kernels' column blocks: `column_blocks` where it divides the heads and every kernel's columns, else
        1."""
        parts = self.transformer_layers[0].sublayers()
        sizes = (parts["attention"].num_heads, self.hidden_size, parts["intermediate"].kernel.shape[-1])
        return self.column_blocks if all(size % self.column_blocks == 0 for size in sizes) else 1


def loop_layers(stacks, count: int, rows, form, mask_bias):
    """The first `count` layers as one `tf.while_loop`, iteration i on layer i's weights (`stacks.at(i)`): the
    graph holds one layer, which a loader instantiates and optimises once, not once per layer."""
    def body(i, rows):
        return i + 1, transformer_layer(stacks.at(i), rows, form, mask_bias)

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
    """LayerNorm of `x` over the last axis, Keras' formula (`keras.ops.layer_normalization`)."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    inv = tf.math.rsqrt(variance + epsilon) * gamma
    return x * inv + (beta - mean * inv)


def dense(rows, kernel, bias, activation=None):
    """`rows @ kernel + bias`, then `activation` (if any)."""
    out = tf.nn.bias_add(tf.matmul(rows, kernel), bias)
    return out if activation is None or activation is keras.activations.linear else activation(out)


class LayerWeights(NamedTuple):
    """One transformer layer's weights (variables, or tensors) in the shapes its sub-layers hold them; or, stacked,
    every layer's, `[layers, ...]` (`at(i)`: layer i's)."""
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

    def at(self, i) -> "LayerWeights":
        return LayerWeights(*[stack[i] for stack in self])


class LayerForm:
    """What every layer shares: its activations and LayerNorm epsilons, and the shape and permutation tensors it
    reuses, made once per trace (a traced graph holds one node for each instead of one per use)."""

    def __init__(self, batch, length, layer, few_tokens: int, blocks: int):
        parts = layer.sublayers()
        attention = parts["attention"]
        heads, size = attention.num_heads, attention.key_dim
        self.activations = (parts["intermediate"].activation, parts["output"].activation)
        self.epsilons = (parts["attention_norm"].epsilon, parts["feedforward_norm"].epsilon)
        self.size, self.width = size, heads * size
        self.hidden = attention.output_dense.kernel.shape[-1]
        self.blocks, self.group_heads = blocks, heads // blocks  # heads per group (`transformer_layer`)
        # A group's projections [batch · length, width / blocks] → these, then transposed:
        self.by_heads = tf.stack([batch, length, self.group_heads, size])
        self.sequences = tf.stack([batch, length, self.hidden])
        self.rows = tf.constant([-1, self.width // blocks])  # a group's context
        self.swap = tf.constant([0, 2, 1, 3])  # [batch, tokens, heads, size] ↔ [batch, heads, tokens, size]
        self.scale = tf.constant(1.0 / math.sqrt(size))
        self.batch = batch
        self.has_few_tokens = batch * length <= few_tokens if few_tokens else None  # None: no choice


def transformer_layer(weights: LayerWeights, rows, form: LayerForm, mask_bias, query_length=None):
    """One post-LN `ElectraTransformerEncoder` at inference on `[batch · length, hidden]` rows, computing with
    `weights` (tensors; the kernels in `form.blocks` column blocks, `compact.Stack`); with `query_length=n`, only each
    sequence's first n positions are computed (keys and values span all)."""
    queries, query_shape = rows, form.by_heads
    if query_length is not None:
        queries = tf.reshape(tf.reshape(rows, form.sequences)[:, :query_length], [-1, form.hidden])
        query_shape = tf.stack([form.batch, query_length, form.group_heads, form.size])
    projections = [blocked_dense(x, kernel, bias, form.blocks) for x, kernel, bias in (
        (queries, weights.query_kernel, weights.query_bias), (rows, weights.key_kernel, weights.key_bias),
        (rows, weights.value_kernel, weights.value_bias))]

    def by_heads(x, shape):  # [batch · tokens, group heads · size] → [batch, group heads, tokens, size]
        return transpose_bits(tf.reshape(x, shape), form.swap)

    groups = [(by_heads(q, query_shape), by_heads(k, form.by_heads), by_heads(v, form.by_heads))
              for q, k, v in zip(*projections)]  # a group of heads each: `form.group_heads`
    contexts = [tf.reshape(transpose_bits(context, form.swap), form.rows)
                for context in attention(groups, mask_bias, form)]
    attended = side_by_side(blocked_dense(side_by_side(contexts), weights.output_kernel, weights.output_bias,
                                          form.blocks))
    hidden_rows = layer_norm(attended + queries, weights.attention_gamma, weights.attention_beta, form.epsilons[0])
    intermediate = side_by_side(blocked_dense(hidden_rows, weights.intermediate_kernel, weights.intermediate_bias,
                                              form.blocks, form.activations[0]))
    output = side_by_side(blocked_dense(intermediate, weights.ffn_kernel, weights.ffn_bias, form.blocks,
                                        form.activations[1]))
    return layer_norm(output + hidden_rows, weights.ffn_gamma, weights.ffn_beta, form.epsilons[1])


def blocked_dense(rows, kernel, bias, blocks: int, activation=None) -> list:
    """`dense(rows, kernel, bias, activation)` as the outputs of its `blocks` column blocks (`kernel`:
    `[blocks, inputs, outputs / blocks]`, `compact.Stack`; `bias`: any shape of `outputs` values): each block's
    matmul, bias and activation, independent of the others' (so the activation, exact GELU's `erf`, runs on both
    threads too)."""
    kernels = [tf.reshape(kernel, [-1, tf.size(bias)])] if blocks == 1 else [kernel[j] for j in range(blocks)]
    biases = tf.reshape(bias, [blocks, -1])
    return [dense(rows, kernels[j], biases[j], activation) for j in range(blocks)]


def side_by_side(blocks: list):
    """Column blocks `[rows, columns]` as one tensor."""
    return blocks[0] if len(blocks) == 1 else tf.concat(blocks, axis=1)


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
