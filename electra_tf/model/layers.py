"""Keras layers with the same weights as Keras' own, computed by the ops of `electra_tf.ops`.

`ElectraDense` / `ElectraEinsumDense` sum bias gradients in float32 (`ops.reference.add_bias`);
`ElectraDense(fused=True)` computes bias + exact GELU as one XLA:CPU kernel;
`ElectraLayerNormalization` has a closed-form backward; `ElectraDropout` draws masks keyed by the example
(`model.example_dropout`) in training, 16-bit or Keras' masks outside it.
`get_activation` and `layer_norm` pick the activation and LayerNorm for a `kernels` choice.

Example:

>>> import numpy as np
>>> layer = ElectraLayerNormalization(epsilon=1e-12)
>>> x = np.array([[1.0, 2.0, 3.0, 6.0]], "float32")
>>> [round(float(v), 4) for v in np.asarray(layer(x))[0]]
[-1.069, -0.5345, 0.0, 1.6036]
"""

import keras
from keras import layers, ops

from electra_tf.config import ACTIVATIONS
from electra_tf.model import example_dropout
from electra_tf.model.execution import without_legacy_fields
from electra_tf.ops.random_bits import dropout_keep_bits
from electra_tf.ops.reference import (PACKAGE, add_bias, dropout16, dropout_with_bits, dropout_with_words,
                                      gelu_approximate, gelu_exact, gelu_keras, layer_norm_last_axis,
                                      own_dtype_value)


def truncated_normal(stddev: float):
    return keras.initializers.TruncatedNormal(stddev=stddev)


def get_activation(name: str, kernels: str = "reference"):
    """Maps `ElectraConfig.hidden_act` (one of `config.ACTIVATIONS`) to a serialisable activation:
    the exact GELU with its closed-form gradient under the XLA:CPU kernels, Keras' otherwise."""
    exact = gelu_exact if kernels == "xla_cpu" else gelu_keras
    activations = dict(zip(ACTIVATIONS, (exact, gelu_approximate)))
    if name not in activations:
        raise ValueError(f"hidden_act must be one of {ACTIVATIONS}, got {name!r}")
    return activations[name]


def is_exact_gelu(activation) -> bool:
    """Whether `activation` (a name or function) is one of the exact (erf) GELUs."""
    return keras.activations.get(activation) in (gelu_exact, gelu_keras)


def layer_norm(epsilon: float, kernels: str, **kwargs):
    """A LayerNormalization for `kernels`: the closed-form backward under xla_cpu, Keras' otherwise."""
    cls = ElectraLayerNormalization if kernels == "xla_cpu" else layers.LayerNormalization
    return cls(epsilon=epsilon, **kwargs)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraLayerNormalization(layers.LayerNormalization):
    """`keras.layers.LayerNormalization` computed by `layer_norm_last_axis`: same weights, same outputs."""

    def call(self, inputs):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        rank = len(inputs.shape)
        if self.rms_scaling or not (self.center and self.scale) or [a % rank for a in axes] != [rank - 1]:
            return super().call(inputs)
        # Values, not variables: TF's custom gradient would otherwise ask for variable gradients.
        outputs = layer_norm_last_axis(inputs, ops.copy(self.gamma), ops.copy(self.beta), self.epsilon)
        return ops.cast(outputs, self.compute_dtype)


def _plain_bias(layer) -> bool:
    """A biased layer outside Keras' quantized and LoRA paths (those keep Keras' call)."""
    return layer.bias is not None and not layer.quantization_mode and not getattr(layer, "lora_enabled", False)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraDense(layers.Dense):
    """`keras.layers.Dense` (same weights) whose bias gradient is summed in float32 (`add_bias`).

    `fused=True` with the exact GELU computes bias + GELU as one `ops.xla_cpu` kernel on
    TensorFlow (the XLA:CPU kernels' heads). The bias enters in its variable dtype, so under
    mixed precision its gradient stays float32 all the way to the variable.

    Example:

    >>> import numpy as np
    >>> layer = ElectraDense(1, kernel_initializer="ones", dtype="mixed_bfloat16")
    >>> x = np.ones((4096, 2), "float32")
    >>> with __import__("tensorflow").GradientTape() as tape:
    ...     y = layer(x)
    >>> gradient = tape.gradient(y, layer.bias)
    >>> float(gradient[0]), gradient.dtype.name  # Keras' Dense gives 256 here
    (4096.0, 'float32')
    """

    def __init__(self, *args, fused=False, **kwargs):
        super().__init__(*args, **kwargs)
        if fused and (self.activation is not gelu_exact or keras.backend.backend() != "tensorflow"):
            raise ValueError("ElectraDense(fused=True) is the XLA:CPU bias + exact GELU kernel: it needs "
                             "activation=gelu_exact and the TensorFlow backend; use kernels='reference'")
        self.fused = fused

    def call(self, inputs, training=None):
        if not _plain_bias(self):
            return super().call(inputs)
        x = ops.matmul(inputs, self.kernel)
        bias = own_dtype_value(self.bias)
        if self.fused:
            from electra_tf.ops import xla_cpu

            return xla_cpu.bias_gelu(x, bias)
        x = add_bias(x, bias)
        return x if self.activation is None else self.activation(x)

    @classmethod
    def from_config(cls, config):
        return super().from_config(without_legacy_fields(config))


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraEinsumDense(layers.EinsumDense):
    """`keras.layers.EinsumDense` (same weights) whose bias gradient is summed in float32 (`add_bias`)."""

    def call(self, inputs, training=None):
        if not _plain_bias(self):
            return super().call(inputs, training=training)
        x = add_bias(ops.einsum(self.equation, inputs, self.kernel), own_dtype_value(self.bias))
        return x if self.activation is None else self.activation(x)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraDropout(layers.Dropout):
    """`keras.layers.Dropout` whose masks are keyed by the example inside `example_dropout.keyed_by`
    (what training runs); outside it, `masks="16bit"` draws `dropout16` masks from the seed generator
    (advanced once per call) and `masks="keras"` is Keras' dropout.

    Keyed, `masks` says how many bits decide an element: "16bit" compares 16 (`dropout16`'s
    threshold), "keras" makes a uniform float from 32 (Keras' comparison with the rate).

    Example:

    >>> import numpy as np
    >>> layer = ElectraDropout(0.5, seed=0)
    >>> y = np.asarray(layer(np.ones((4, 1000), "float32"), training=True))
    >>> sorted(set(np.round(y.ravel(), 3).tolist())), bool(0.45 < (y == 0).mean() < 0.55)
    ([0.0, 2.0], True)
    """

    def __init__(self, rate, masks="16bit", **kwargs):
        super().__init__(rate, **kwargs)
        if masks not in ("16bit", "keras"):
            raise ValueError(f"ElectraDropout masks must be '16bit' or 'keras', got {masks!r}")
        self.masks = masks

    def call(self, inputs, training=False):
        if not (training and 0 < self.rate < 1 and self.noise_shape is None):
            return super().call(inputs, training=training)
        if example_dropout.active_scope() is not None:
            if self.masks == "keras":
                return dropout_with_words(inputs, self.rate, example_dropout.keyed_keep_bits(inputs, halves=False))
            return dropout_with_bits(inputs, self.rate, lambda: example_dropout.keyed_keep_bits(inputs))
        if self.masks == "16bit":
            return dropout16(inputs, self.rate, self.seed_generator.next())
        return super().call(inputs, training=training)

    def keep_bits(self, x):
        """The uint16 keep draws this layer's next call would compare, for the XLA:CPU kernels:
        keyed by the example inside `keyed_by`, as `random_bits.KeyedWords` (the kernel interleaves
        them, `random_bits.bits_like`); from the seed generator outside, shaped like `x`."""
        keyed = example_dropout.keyed_keep_words(x)
        return keyed if keyed is not None else dropout_keep_bits(x, self.seed_generator.next())

    def get_config(self):
        return {**super().get_config(), "masks": self.masks}


def dropout_layer(rate: float, dropout_masks: str, **kwargs):
    """The Dropout of a `dropout_masks` choice ("16bit" or "keras"): an `ElectraDropout` either way."""
    return ElectraDropout(rate=rate, masks=dropout_masks, **kwargs)
