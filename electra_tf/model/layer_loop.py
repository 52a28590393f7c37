"""An encoder's identical transformer layers as one `tf.while_loop` over their stacked weights.

Why: Python traces a graph op by op (about half a millisecond each), and TensorFlow instantiates
the traced graph op by op; unrolled, every layer of both towers is traced forward and backward. In
a loop one layer is traced and one layer's gradient, whatever the depth (docs/performance.md, "The
first step, measured"). The function is the same: iteration i computes layer i's weights with the same kernels
(`ops.xla_cpu.transformer_layer`), and its dropout draws come from the sites layer i would take
unrolled (`example_dropout.sites_from`), so losses, gradients and masks equal the unrolled layers'.

Used for the XLA:CPU kernels (the CPU default), where nothing else differs between the layers; a
model that calls its layers one by one (reference kernels, attention masks, dropout from each
layer's seed generator outside `example_dropout.keyed_by`) keeps them unrolled. Each weight tensor
enters as a `TensorArray` of the layers' values, read per iteration: its gradient is written per
iteration into a gradient array and stacked once (a sliced stacked tensor would add a full-size
gradient per iteration).
"""

import tensorflow as tf

from electra_tf.model import example_dropout


def applies(layers, training, attention_mask=None) -> bool:
    """Whether `layers` (one encoder's, all alike) can run as one loop: XLA:CPU kernels, more than one
    layer, no attention mask, and dropout (if it drops out) keyed by the example."""
    if len(layers) < 2 or attention_mask is not None or any(layer.kernels != "xla_cpu" for layer in layers):
        return False
    return not _drops_out(layers, training) or example_dropout.active_scope() is not None


def _drops_out(layers, training) -> bool:
    return bool(training) and layers[0].dropout > 0


# The dropout sites one XLA:CPU layer takes when it drops out: the attention probabilities, the
# attention block's output, the feed-forward output (`ElectraTransformerEncoder._xla_cpu_call`).
SITES_PER_LAYER = 3


def run(layers, x, padding_mask, training):
    """`x` through `layers` in order (each `ElectraTransformerEncoder` with the XLA:CPU kernels), as one loop."""
    count = len(layers)
    x = tf.cast(x, layers[0].compute_dtype)  # what each layer's `call` does first
    template = layers[0].xla_cpu_weights(stacked_over=layers)
    arrays = {name: _layer_array(value) for name, value in template._asdict().items() if isinstance(value, tf.Tensor)}
    outer = example_dropout.active_scope()
    sites = SITES_PER_LAYER if outer is not None and _drops_out(layers, training) else 0

    def body(i, x):
        weights = template._replace(**{name: array.read(i) for name, array in arrays.items()})
        first_site = outer.next_site + i * sites if outer is not None else 0
        with example_dropout.sites_from(first_site) as scope:
            y = layers[0]._xla_cpu_call(x, padding_mask, training, None, weights=weights)  # noqa: SLF001
        if scope is not None and scope.taken != sites:
            raise AssertionError(f"an XLA:CPU layer took {scope.taken} dropout sites, the loop keyed {sites}")
        return i + 1, y

    _, x = tf.while_loop(lambda i, _: i < count, body, (tf.constant(0), x), maximum_iterations=count)
    example_dropout.skip_sites(count * sites)
    return x


def _layer_array(stacked):
    """A `TensorArray` holding one tensor per layer, from their stack `[layers, ...]` (read inside the loop)."""
    return tf.TensorArray(stacked.dtype, size=stacked.shape[0], element_shape=stacked.shape[1:],
                          clear_after_read=False).unstack(stacked)
