"""Dropout keyed by the example: every mask a function of (run seed, step, the example's index in the
global batch, site, position, unit), so one device, N replicas, K micro-batches and N×K draw the same
mask for the same example, and a resumed run (on any number of devices) draws what an uninterrupted
one would.

A model's `compute_losses` makes each example's *stream* outside any compiled part (`streams`:
int64 `[B, 3]`, two key words from the run seed and the step, and the global example index; sliced
with the batch into micro-batches, as the masking seeds are) and runs its layers inside
`keyed_by(streams)`. There every `ElectraDropout` takes the next *site* number (the order of the
dropout calls in one forward pass, the same however the batch is split) and draws its keep decisions
from `ops.random_bits.example_keyed_bits`. Outside that scope (a layer called on its own, Keras' `fit`)
dropout draws from the layer's seed generator as Keras' does.

Example:

>>> import numpy as np, tensorflow as tf
>>> from electra_tf.model.layers import ElectraDropout
>>> layer = ElectraDropout(0.5)
>>> x = np.ones((4, 3, 8), "float32")
>>> streams = example_streams(seed=1, step=0, global_indices=tf.range(4))
>>> with keyed_by(streams):
...     whole = layer(x, training=True).numpy()
>>> with keyed_by(streams[2:]):  # examples 2 and 3 alone: the same masks
...     part = layer(x[2:], training=True).numpy()
>>> bool(np.array_equal(whole[2:], part)), sorted(set(whole.ravel().tolist()))
(True, [0.0, 2.0])
"""

import contextlib
import contextvars

import tensorflow as tf

from electra_tf.ops.replicas import replica_context_info

# The dropout stream's version: a checkpoint trained under another stream (before this module: each
# layer's seed generator, per replica) continues on different masks.
DROPOUT_STREAM = "per-example-philox-v1"
_STREAM_SALT = 0xD80  # keeps dropout's key apart from the masking seeds of the same (seed, step)

_ACTIVE = contextvars.ContextVar("example_dropout", default=None)


class _Scope:
    """The streams of one forward pass and the next site number (`first_site` + the sites taken: a Python
    int, or a tensor inside a loop over layers, `sites_from`)."""

    def __init__(self, streams, first_site=0):
        self.streams = streams
        self.first_site = first_site
        self.taken = 0

    @property
    def next_site(self):
        return self.first_site + self.taken

    def take_site(self):
        site = self.next_site
        self.taken += 1
        return site


def example_streams(seed, step, global_indices):
    """int64 `[B, 3]`: per example, the dropout key of (seed, step) (two 32-bit words) and its global index."""
    key = tf.random.experimental.stateless_fold_in(tf.constant([seed, _STREAM_SALT], tf.int64),
                                                   tf.cast(step, tf.int64), alg="philox")
    key = tf.bitwise.bitwise_and(key, tf.constant(0xFFFFFFFF, tf.int64))
    indices = tf.cast(global_indices, tf.int64)
    return tf.concat([tf.broadcast_to(key[None, :], [tf.shape(indices)[0], 2]), indices[:, None]], axis=1)


def global_indices(batch_size):
    """int64 `[batch_size]`: the global batch indices of this replica's examples (replica r holds
    examples r·B … r·B + B − 1, as `training.distribution` splits a global batch)."""
    replica_id, _ = replica_context_info()
    size = tf.cast(batch_size, tf.int64)
    return tf.cast(replica_id, tf.int64) * size + tf.range(size)


@contextlib.contextmanager
def keyed_by(streams):
    """Dropout inside draws per example from `streams` (see the module); sites numbered from 0."""
    token = _ACTIVE.set(_Scope(streams))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def sites_from(first_site):
    """Inside: the current scope's streams, sites numbered from `first_site` (an int32 tensor: one
    iteration of a loop over identical layers, iteration i from first + i × the sites one layer takes).
    Yields that scope, whose `taken` is the sites the body took. Outside any scope: does nothing."""
    outer = active_scope()
    if outer is None:
        yield None
        return
    token = _ACTIVE.set(_Scope(outer.streams, first_site))
    try:
        yield _ACTIVE.get()
    finally:
        _ACTIVE.reset(token)


def skip_sites(count: int) -> None:
    """Advances the current scope (if any) past `count` sites (those a loop's iterations took)."""
    scope = active_scope()
    if scope is not None:
        scope.taken += count


def active_scope():
    """The current `keyed_by` scope, or None."""
    return _ACTIVE.get()


def keyed_keep_words(x, halves: bool = True):
    """The next site's keep draws for `x` `[B, …, U]` in the current scope before their interleave
    (`random_bits.KeyedWords`: what a fused kernel takes), or None outside a scope."""
    from electra_tf.ops.random_bits import example_keyed_words

    scope = active_scope()
    if scope is None:
        return None
    return example_keyed_words(x, scope.streams, scope.take_site(), halves=halves)


def keyed_keep_bits(x, halves: bool = True):
    """The next site's keep bits for `x`, shaped like it, in the current scope (None outside one)."""
    from electra_tf.ops.random_bits import interleave

    words = keyed_keep_words(x, halves)
    return None if words is None else interleave(words, x)


def batch_size_of_scope():
    """The number of examples of the current scope (its streams' rows)."""
    return tf.shape(active_scope().streams)[0]
