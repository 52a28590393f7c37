"""Uniform 16-bit random integers: the keep decisions of 16-bit dropout masks (two per 32-bit draw).

On TensorFlow the bits are TensorFlow's stateless Philox stream, computed by an XLA kernel (XLA's own
CPU random-number generator is slow); both kernel implementations (`ops.reference.dropout16` and the
XLA:CPU layer) draw from here, so the same seed gives the same masks either way. On JAX they are
`jax.random.bits`; other backends have no raw-bits generator (16-bit masks are refused there).

Example:

>>> import numpy as np
>>> from electra_tf.ops.random_bits import dropout_keep_bits
>>> bits = dropout_keep_bits(np.zeros((2, 3), "float32"), np.array([1, 2], "int32"))
>>> tuple(bits.shape), bits.dtype.name
((2, 3), 'uint16')
"""

import functools
import math
from typing import NamedTuple

import keras
from keras import ops

_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


def _split64(word):
    """uint64 → (low, high) uint32."""
    import tensorflow as tf

    low32, shift = tf.constant(0xFFFFFFFF, tf.uint64), tf.constant(32, tf.uint64)
    return tf.cast(word & low32, tf.uint32), tf.cast(tf.bitwise.right_shift(word, shift), tf.uint32)


def _philox_rounds(k0, k1, c0, c1, c2, c3):
    """Philox-4x32-10 (Salmon et al., 2011) of key (k0, k1) at counter (c0, c1, c2, c3), uint32 tensors
    of broadcastable shapes: the four output words, as separate tensors."""
    import tensorflow as tf

    u64, u32 = tf.uint64, tf.uint32
    for round_ in range(10):
        hi0, lo0 = _split64(tf.cast(c0, u64) * tf.constant(_PHILOX_M0, u64))[::-1]
        hi1, lo1 = _split64(tf.cast(c2, u64) * tf.constant(_PHILOX_M1, u64))[::-1]
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        if round_ < 9:
            k0, k1 = k0 + tf.constant(_PHILOX_W0, u32), k1 + tf.constant(_PHILOX_W1, u32)
    return c0, c1, c2, c3


def _philox_planes(key, counter, groups: int):
    """Philox-4x32-10 at `counter + g`, g = 0 … groups − 1: four uint32 planes
    `[groups]`, word j of call g in plane j. TensorFlow's `StatelessRandomUniformFullIntV2` returns
    the same words interleaved (call g's words at 4g … 4g + 3) from the same key and counter."""
    import tensorflow as tf

    u64 = tf.uint64
    k0, k1 = _split64(key[0])
    low = counter[0] + tf.cast(tf.range(groups, dtype=tf.int64), u64)
    high = counter[1] + tf.cast(low < counter[0], u64)  # the carry of the 128-bit counter
    (c0, c1), (c2, c3) = _split64(low), _split64(high)
    return _philox_rounds(k0, k1, c0, c1, c2, c3)  # separate outputs: XLA vectorises them; stacking does not


@functools.cache
def _philox_planes_jit():
    from electra_tf.ops import precompile

    return precompile.jit(_philox_planes, autograph=False, reduce_retracing=False)


def uniform_from_words(words):
    """Uniform [0, 1) float32 from uint32 words, as TensorFlow's kernels make them (the low 23 bits as the
    mantissa of a number in [1, 2), minus 1). XLA converts words to floats another way, so a stateless
    uniform draw compiled by XLA differs from the same draw run by TensorFlow's kernels; the words
    themselves agree, and so do floats made from them here."""
    import tensorflow as tf

    mantissa = tf.bitwise.bitwise_and(words, tf.constant(0x7FFFFF, tf.uint32))
    return tf.bitcast(tf.bitwise.bitwise_or(mantissa, tf.constant(0x3F800000, tf.uint32)), tf.float32) - 1.0


def random_uint16(count, seed):
    """`count` uniform uint16 (flat) from an int `[2]` seed: TensorFlow's stateless Philox stream
    (`tf.random.stateless_uniform(..., alg="philox")`), its words taken plane by plane (word j of
    every Philox call, then word j + 1) and split in two 16-bit halves each.

    A fixed permutation of TensorFlow's stream, computed by XLA in under half the CPU time of
    TensorFlow's kernel where `count` is static; a dynamic `count` takes TensorFlow's stream
    and permutes it.
    """
    import tensorflow as tf

    static = isinstance(count, int)
    groups = (count + 7) // 8  # Philox calls: 4 words, 8 halves each
    key, counter, _ = tf.raw_ops.StatelessRandomGetKeyCounterAlg(seed=seed)
    if static:
        planes = tf.concat(_philox_planes_jit()(key, counter, groups), axis=0)
    else:
        words = tf.raw_ops.StatelessRandomUniformFullIntV2(
            shape=[4 * groups], key=key, counter=counter, alg=tf.constant(1), dtype=tf.uint32)  # 1: Philox
        planes = tf.reshape(tf.transpose(tf.reshape(words, [groups, 4])), [-1])
    halves = tf.reshape(tf.bitcast(planes, tf.uint16), [-1])
    return halves if static and count == 8 * groups else halves[:count]


def backend_uint16(count, seed):
    """At least `count` uniform 16-bit integers (flat) from a Keras seed (a `SeedGenerator` draw) on
    the current backend. Raises ValueError on a backend with no raw-bits generator (no silent
    switch to other masks: a run's random streams are its execution options' choice)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)  # as Keras' TF backend
        return random_uint16(count, seed)
    if backend == "jax":
        import jax

        bits = jax.random.bits(seed, ((count + 1) // 2,), dtype="uint32")
        return jax.lax.bitcast_convert_type(bits, "uint16").reshape(-1)
    raise ValueError(f"16-bit dropout masks need the TensorFlow or JAX backend, not {backend}; use "
                     "--dropout_masks=keras")


def dropout_keep_bits(x, seed):
    """uint16 random integers shaped like `x`, two per 32-bit draw from `seed` (what 16-bit dropout
    compares with its threshold)."""
    static_size = None not in x.shape and math.prod(x.shape)
    size = static_size or ops.size(x)
    bits = backend_uint16(size, seed)
    if not static_size or size % 2:
        bits = bits[:size]
    return ops.reshape(bits, ops.shape(x))


# Keyed bits. Element (b, head, row, unit) of `[B, heads, rows, units]` comes from the Philox call keyed
# by example b's stream (run seed, step) at counter (unit, (head << 16) | row // P, index of b, site),
# its output plane row % P (P = 8 uint16 halves, low halves of words 0…3 then high halves, or 4 uint32
# words): a function of the element's coordinates only, not of the batch's size, split or sequence
# length. The four words are computed whole, as separate outputs of one XLA function (XLA vectorises
# that; stacked or interleaved outputs make it recompute the rounds), and interleaved by another: a copy
# where the bits are wanted on their own (`example_keyed_bits`), or no pass at all inside the kernel that
# consumes them (`KeyedWords`, `bits_like`).
_HEAD_SHIFT = 16


class KeyedWords(NamedTuple):
    """Example-keyed draws before their interleave: Philox's four uint32 output words, each
    `[B, heads, blocks, units]`, for some `x`; `bits_like(words, x)` makes them the uint16 (`halves`) or
    uint32 integers shaped like `x` that `example_keyed_bits` returns."""

    w0: "tf.Tensor"
    w1: "tf.Tensor"
    w2: "tf.Tensor"
    w3: "tf.Tensor"
    halves: bool


def _keyed_words(template, streams, site, halves: bool):
    import tensorflow as tf

    u32 = tf.uint32
    shape = tf.shape(template)
    batch, heads, rows, units = {2: lambda: (shape[0], 1, 1, shape[1]), 3: lambda: (shape[0], 1, shape[1], shape[2]),
                                 4: lambda: tf.unstack(shape)}[template.shape.rank]()
    planes = 8 if halves else 4
    blocks = (rows + planes - 1) // planes
    lanes = tf.cast(tf.bitwise.bitwise_and(streams, tf.constant(0xFFFFFFFF, tf.int64)), u32)  # [B, 3]
    k0, k1, index = (tf.reshape(lanes[:, i], [-1, 1, 1, 1]) for i in range(3))
    unit = tf.reshape(tf.cast(tf.range(units), u32), [1, 1, 1, -1])
    head = tf.bitwise.left_shift(tf.reshape(tf.cast(tf.range(heads), u32), [1, -1, 1, 1]), tf.constant(_HEAD_SHIFT, u32))
    row_block = tf.bitwise.bitwise_or(head, tf.reshape(tf.cast(tf.range(blocks), u32), [1, 1, -1, 1]))
    full = tf.stack([batch, heads, blocks, units])
    return tuple(tf.broadcast_to(w, full) for w in _philox_rounds(k0, k1, unit, row_block, index, tf.cast(site, u32)))


def bits_like(bits, x):
    """The integers shaped like `x` of `bits`: `KeyedWords` interleaved (row r of a block from plane
    r % P), anything else as it is. Inside an XLA function the interleave fuses into the consumer."""
    import tensorflow as tf

    if not isinstance(bits, KeyedWords):
        return bits
    words = tf.stack(bits[:4])  # [4, B, heads, blocks, units]
    if bits.halves:
        words = tf.concat([tf.cast(tf.bitwise.bitwise_and(words, tf.constant(0xFFFF, tf.uint32)), tf.uint16),
                           tf.cast(tf.bitwise.right_shift(words, tf.constant(16, tf.uint32)), tf.uint16)], 0)
    planes, batch, heads, blocks, units = tf.unstack(tf.shape(words))
    interleaved = tf.reshape(tf.transpose(words, [1, 2, 3, 0, 4]), tf.stack([batch, heads, blocks * planes, units]))
    rows = tf.size(x) // (batch * heads * units)
    return tf.reshape(interleaved[:, :, :rows], tf.shape(x))


@functools.cache
def _keyed_words_jit(halves: bool, rank: int, dtype):
    """One traced function per rank and dtype of the template, whatever its dimensions: a step draws words for
    several shapes of each rank (attention probabilities, hidden states of either encoder), and each trace
    builds the Philox rounds' few hundred ops again. XLA still compiles one kernel per shape."""
    import tensorflow as tf

    from electra_tf.ops import precompile

    signature = [tf.TensorSpec([None] * rank, dtype), tf.TensorSpec([None, 3], tf.int64), tf.TensorSpec([], tf.int32)]
    return precompile.jit(functools.partial(_keyed_words, halves=halves), input_signature=signature, autograph=False)


@functools.cache
def _bits_like_jit():
    from electra_tf.ops import precompile

    return precompile.jit(bits_like, autograph=False)


def interleave(words: KeyedWords, x):
    """`bits_like(words, x)` as an XLA function of its own: the bits shaped like `x`, where no fused kernel
    consumes them (one copy)."""
    return _bits_like_jit()(words, x)


def example_keyed_words(x, streams, site, halves: bool = True) -> KeyedWords:
    """`example_keyed_bits` before the interleave (`KeyedWords`): what a fused kernel takes, calling
    `bits_like` inside, so that the bits never take a pass over memory of their own."""
    import tensorflow as tf

    rank = len(x.shape)
    if rank not in (2, 3, 4):
        raise ValueError(f"example-keyed dropout takes [batch, (1 or 2 axes,) units], got shape {x.shape}")
    words = _keyed_words_jit(bool(halves), rank, x.dtype)(x, tf.convert_to_tensor(streams, tf.int64),
                                                          tf.cast(site, tf.int32))
    return KeyedWords(*words, halves=bool(halves))


def example_keyed_bits(x, streams, site: int, halves: bool = True):
    """Random integers shaped like `x` `[B, *middle, U]` (0 to 2 middle axes): uint16 (`halves`) or
    uint32. Element (b, …, u) is a function of `streams[b]` (int64 `[B, 3]`: two key words, from the
    run seed and the step, and the example's index in the global batch), `site` (which dropout of
    the step), its position (or head and query position) and `u` only: one example gets the same
    bits in any batch, at any sequence length. Philox-4x32-10, computed by XLA (also when called
    outside a compiled function: TensorFlow's uint64 kernels are slow on CPU)."""
    return interleave(example_keyed_words(x, streams, site, halves), x)
