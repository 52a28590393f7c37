"""The reference implementation of the encoder's element-wise ops, in backend-agnostic Keras ops.

GELU (Keras' and the official erf formula with its closed-form gradient), LayerNorm over the last
axis with a closed-form gradient, a bias add whose bias gradient is summed in float32, and 16-bit
inverted dropout. The XLA:CPU kernels (`ops.xla_cpu`) compute the same functions.

Example:

>>> import numpy as np
>>> from electra_tf.ops.reference import gelu_erf
>>> [round(float(v), 4) for v in np.asarray(gelu_erf(np.array([-1.0, 0.0, 2.0], "float32")))]
[-0.1587, 0.0, 1.9545]
"""

import keras
from keras import ops
from keras.src.backend import AutocastScope  # a variable in its own dtype inside an autocasting call

from electra_tf.ops.numerics import DROPOUT_LEVELS, INV_SQRT_2PI, SQRT_HALF, dropout_scale, dropout_threshold
from electra_tf.ops.random_bits import dropout_keep_bits

PACKAGE = "electra_tf"


@keras.saving.register_keras_serializable(package=PACKAGE)
def gelu_exact(x):
    """x · Φ(x) with the erf CDF, as the official code's `gelu`; see `gelu_erf`."""
    return gelu_erf(x)


@ops.custom_gradient
def gelu_erf(x):
    """`x · ½(1 + erf(x/√2))` (the official formula) with the closed-form gradient `Φ(x) + x·φ(x)`.

    Autodiff through Keras' GELU differentiates each elementwise op of the formula in
    turn; the closed form reuses the forward's Φ(x), about a third of the ops (the activation
    under the XLA:CPU kernels; the reference kernels use Keras' GELU).
    Values agree with `keras.activations.gelu(x, approximate=False)` within 2e-6.
    """
    cdf = 0.5 * (1.0 + ops.erf(x * SQRT_HALF))

    def grad(*args, upstream=None):
        upstream = args[0] if upstream is None else upstream
        pdf = ops.exp(-0.5 * ops.square(x)) * INV_SQRT_2PI
        return upstream * (cdf + x * pdf)

    return x * cdf, grad


@keras.saving.register_keras_serializable(package=PACKAGE)
def gelu_approximate(x):
    return keras.activations.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package=PACKAGE)
def gelu_keras(x):
    """Keras' exact GELU, differentiated op by op (the reference kernels' activation)."""
    return keras.activations.gelu(x, approximate=False)


def layer_norm_last_axis(x, gamma, beta, epsilon):
    """LayerNorm over the last axis: Keras' forward formula, a hand-written backward.

    The forward pass is `keras.ops.layer_normalization`'s, op for op (statistics in
    float32, `x · inv + (β − mean · inv)` with `inv = rsqrt(var + ε) · γ`), so outputs
    are bit-identical to `keras.layers.LayerNormalization`. The gradient is the closed
    form `inv0 · (g − mean(g) − x̂ · mean(g · x̂))` with `g = dy · γ`,
    `inv0 = rsqrt(var + ε)` and `x̂ = (x − mean) · inv0`, instead of autodiff through
    `moments` (about a third of the ops; equal to it within float32 round-off).
    """
    x_dtype, gamma_dtype, beta_dtype = x.dtype, gamma.dtype, beta.dtype
    batch_axes = tuple(range(len(x.shape) - 1))

    @ops.custom_gradient
    def forward(x, gamma, beta):
        x32, g32, b32 = (ops.cast(t, "float32") for t in (x, gamma, beta))
        mean, variance = ops.moments(x32, axes=[-1], keepdims=True)
        inv0 = ops.rsqrt(variance + epsilon)
        inv = inv0 * g32
        outputs = ops.cast(x32 * inv + (-mean * inv + b32), x_dtype)

        def grad(*args, upstream=None):
            dy32 = ops.cast(args[0] if upstream is None else upstream, "float32")
            xhat = (x32 - mean) * inv0
            g = dy32 * g32
            dx = inv0 * (g - ops.mean(g, axis=-1, keepdims=True)
                         - xhat * ops.mean(g * xhat, axis=-1, keepdims=True))
            return (ops.cast(dx, x_dtype), ops.cast(ops.sum(dy32 * xhat, axis=batch_axes), gamma_dtype),
                    ops.cast(ops.sum(dy32, axis=batch_axes), beta_dtype))

        return outputs, grad

    return forward(x, gamma, beta)


def add_bias(x, bias):
    """`x + bias` (bias over the last axes) whose bias gradient is summed in float32.

    Keras' TensorFlow backend turns `ops.add(x, bias)` into `tf.nn.bias_add`, whose CPU gradient
    kernel (`BiasAddGrad`) sums bfloat16 in bfloat16: under mixed_bfloat16, 4096 gradients of 1
    sum to 256, so every bias over a 32 × 128 batch would get a truncated gradient. The bias keeps
    its variable dtype (the layers calling this do not autocast their variables), so its float32
    gradient reaches the variable without a round trip through bfloat16.
    """
    rows = tuple(range(len(x.shape) - len(bias.shape)))

    @ops.custom_gradient
    def forward(x, bias):
        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return upstream, ops.cast(ops.sum(ops.cast(upstream, "float32"), axis=rows), bias.dtype)

        return ops.add(x, ops.cast(bias, x.dtype)), grad

    return forward(x, bias)


def own_dtype_value(variable):
    """`variable` as a tensor of its own dtype, also inside an autocasting layer's call (mixed
    precision casts variables to the compute dtype there). A tensor, not the variable: custom
    gradients take no variables."""
    with AutocastScope(None):
        return ops.copy(variable)


def dropout16(x, rate: float, seed):
    """Inverted dropout whose keep decisions use 16 random bits each (two per 32-bit draw).

    An element is dropped iff its 16-bit number is below `round(rate × 65536)`: the drop
    probability is that threshold / 65536, within 0.5 / 65536 < 1e-5 of `rate` (0.1 → 0.100006).
    Kept elements are scaled by 1 / (1 − that probability), so `E[y] = x` (up to the scale's
    rounding in x's dtype, as in Keras). Half the random-number work of Keras' one float per
    element. Deterministic in `seed` (a `SeedGenerator` draw), like Keras' dropout.
    """
    return dropout_with_bits(x, rate, lambda: dropout_keep_bits(x, seed))


def dropout_with_bits(x, rate: float, draw_bits):
    """`dropout16`'s masks from the uint16 `draw_bits()` (shaped like `x`; drawn only when needed)."""
    threshold = dropout_threshold(rate)
    if threshold <= 0:
        return x
    if threshold >= DROPOUT_LEVELS:
        return ops.zeros_like(x)
    keep = draw_bits() >= threshold
    return x * ops.where(keep, ops.cast(dropout_scale(threshold), x.dtype), ops.cast(0, x.dtype))


def dropout_with_words(x, rate: float, words):
    """Keras' inverted dropout (keep where a uniform [0, 1) float ≥ rate, scale 1 / (1 − rate)) with the
    uniform floats made from the uint32 `words` (shaped like `x`) as TensorFlow's kernels make them."""
    from electra_tf.ops.random_bits import uniform_from_words

    keep = uniform_from_words(words) >= rate
    return x * ops.where(keep, ops.cast(1.0 / (1.0 - rate), x.dtype), ops.cast(0, x.dtype))
