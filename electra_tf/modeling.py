"""ELECTRA encoders and heads in backend-agnostic Keras 3.

The discriminator is laid out exactly like `keras_hub.models.ElectraBackbone`
(same layer classes, names and weight order), so its weights copy into that
class one layer at a time (see `electra_tf.convert.keras_hub_preset`). The generator reuses the
discriminator's whole `ElectraEmbeddings` block (word, position and segment
embeddings plus their LayerNorm: the same variable objects) and adds its own
projection and narrower transformer layers, as in the official code.

How the layers compute is an execution choice (`electra_tf.options.ExecutionOptions`), never part of
a layer's config: `kernels="xla_cpu"` runs the transformer layers and the heads' bias + GELU as the
XLA-fused kernels of `electra_tf.fused`; `kernels="reference"` runs keras-hub's layer call with
Keras' LayerNorm and GELU. Either way dense layers sum bias gradients in float32 (`add_bias`), and
`dropout_masks="16bit"` drops out with `ElectraDropout`. `resolve_execution` picks the device's
defaults when none is given.

Example:

>>> import numpy as np
>>> from electra_tf.config import get_config
>>> from electra_tf.modeling import ElectraEncoder
>>> config = get_config("tiny")
>>> encoder = ElectraEncoder.from_config_object(config, role="discriminator")
>>> inputs = {
...     "token_ids": np.array([[2, 10, 11, 3, 0]], "int32"),
...     "segment_ids": np.zeros((1, 5), "int32"),
...     "padding_mask": np.array([[1, 1, 1, 1, 0]], "int32"),
... }
>>> tuple(encoder(inputs).shape)
(1, 5, 128)
"""

import dataclasses
import math

import keras
from keras import layers, ops
from keras.src.backend import AutocastScope  # a variable in its own dtype inside an autocasting call
from keras_hub.layers import PositionEmbedding, TransformerEncoder

from electra_tf.config import ACTIVATIONS, ElectraConfig
from electra_tf.options import LEGACY_EXECUTION_FIELDS, ExecutionOptions
from electra_tf.numerics import DROPOUT_LEVELS, INV_SQRT_2PI, SQRT_HALF, dropout_scale, dropout_threshold

PACKAGE = "electra_tf"


def truncated_normal(stddev: float):
    return keras.initializers.TruncatedNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package=PACKAGE)
def gelu_exact(x):
    """x · Φ(x) with the erf CDF, as the official code's `gelu`; see `gelu_erf`."""
    return gelu_erf(x)


@ops.custom_gradient
def gelu_erf(x):
    """`x · ½(1 + erf(x/√2))` (the official formula) with the closed-form gradient `Φ(x) + x·φ(x)`.

    Autodiff through Keras' GELU differentiates each elementwise op of the formula in
    turn; the closed form reuses the forward's Φ(x), about a third of the ops (part of the
    XLA:CPU kernels' path; the reference path uses Keras' GELU).
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
    """Keras' exact GELU, differentiated op by op (the reference path's activation)."""
    return keras.activations.gelu(x, approximate=False)


def get_activation(name: str, kernels: str | None = None):
    """Maps `ElectraConfig.hidden_act` (one of `config.ACTIVATIONS`) to a serialisable activation:
    the exact GELU with its closed-form gradient under the XLA:CPU kernels, Keras' otherwise."""
    exact = gelu_exact if (kernels or resolve_execution().kernels) == "xla_cpu" else gelu_keras
    activations = dict(zip(ACTIVATIONS, (exact, gelu_approximate)))
    if name not in activations:
        raise ValueError(f"hidden_act must be one of {ACTIVATIONS}, got {name!r}")
    return activations[name]


def visible_device_types() -> set:
    """The kinds of device ("CPU", "GPU", "TPU") the Keras backend can place work on."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return {device.device_type for device in tf.config.list_logical_devices()}
    if backend == "jax":
        import jax

        return {device.platform.upper() for device in jax.devices()}
    return {"CPU"}


_default_execution: tuple | None = None  # (requested ExecutionOptions, device types or None)


def set_default_execution(execution: ExecutionOptions | None, device_types=None) -> None:
    """The execution options of layers built from now on without `execution=` (as Keras' global
    dtype policy is for dtypes), resolved per model (its activation decides whether the XLA:CPU
    kernels apply) for `device_types` (default: the visible devices). An entry point sets what
    its flags ask for and its strategy's devices. None: the visible devices' defaults."""
    global _default_execution
    _default_execution = None if execution is None else (execution, device_types)


def resolve_execution(execution: ExecutionOptions | None = None, hidden_act: str = "gelu") -> ExecutionOptions:
    """`execution` (else the default set by `set_default_execution`) with its "auto" values resolved
    for the devices, the Keras backend and the model's activation."""
    device_types = None
    if execution is None and _default_execution is not None:
        execution, device_types = _default_execution
    execution = execution or ExecutionOptions()
    if execution.resolved:
        return execution
    return execution.resolve(device_types or visible_device_types(), keras.backend.backend(), hidden_act)


def layer_norm(epsilon: float, kernels: str, **kwargs):
    """A LayerNormalization for `kernels`: the closed-form backward under xla_cpu, Keras' otherwise."""
    cls = ElectraLayerNormalization if kernels == "xla_cpu" else layers.LayerNormalization
    return cls(epsilon=epsilon, **kwargs)


LEGACY_LAYER_FIELDS = ("fused", "attention_dropout_rate", *LEGACY_EXECUTION_FIELDS)


def without_legacy_fields(config: dict) -> dict:
    """A layer config without the execution fields that configs saved before held."""
    return {key: value for key, value in config.items() if key not in LEGACY_LAYER_FIELDS}


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


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraLayerNormalization(layers.LayerNormalization):
    """`keras.layers.LayerNormalization` computed by `layer_norm_last_axis`: same weights, same outputs.

    Example:

    >>> import numpy as np
    >>> layer = ElectraLayerNormalization(epsilon=1e-12)
    >>> x = np.array([[1.0, 2.0, 3.0, 6.0]], "float32")
    >>> [round(float(v), 4) for v in np.asarray(layer(x))[0]]
    [-1.069, -0.5345, 0.0, 1.6036]
    """

    def call(self, inputs):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        rank = len(inputs.shape)
        if self.rms_scaling or not (self.center and self.scale) or [a % rank for a in axes] != [rank - 1]:
            return super().call(inputs)
        # Values, not variables: TF's custom gradient would otherwise ask for variable gradients.
        outputs = layer_norm_last_axis(inputs, ops.copy(self.gamma), ops.copy(self.beta), self.epsilon)
        return ops.cast(outputs, self.compute_dtype)


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


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraDense(layers.Dense):
    """`keras.layers.Dense` (same weights) whose bias gradient is summed in float32 (`add_bias`).

    `fused=True` with the exact GELU computes bias + GELU as one `electra_tf.fused` kernel on
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

    fused = False  # a keras Dense switched to this class in place (`use_electra_dense`) runs unfused

    def __init__(self, *args, fused=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused = fused

    def call(self, inputs, training=None):
        if not _plain_bias(self):
            return super().call(inputs)
        x = ops.matmul(inputs, self.kernel)
        bias = own_dtype_value(self.bias)
        if self.fused and self.activation is gelu_exact and keras.backend.backend() == "tensorflow":
            from electra_tf import fused

            return fused.bias_gelu(x, bias)
        x = add_bias(x, bias)
        return x if self.activation is None else self.activation(x)

    @classmethod
    def from_config(cls, config):
        return super().from_config(without_legacy_fields(config))


def _plain_bias(layer) -> bool:
    """A biased layer outside Keras' quantized and LoRA paths (those keep Keras' call)."""
    return layer.bias is not None and not layer.quantization_mode and not getattr(layer, "lora_enabled", False)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraEinsumDense(layers.EinsumDense):
    """`keras.layers.EinsumDense` (same weights) whose bias gradient is summed in float32 (`add_bias`)."""

    def call(self, inputs, training=None):
        if not _plain_bias(self):
            return super().call(inputs, training=training)
        x = add_bias(ops.einsum(self.equation, inputs, self.kernel), own_dtype_value(self.bias))
        return x if self.activation is None else self.activation(x)


def use_electra_dense(layer: TransformerEncoder):
    """Makes a built keras-hub `TransformerEncoder`'s dense layers sum bias gradients in float32.

    Its feed-forward `Dense` and attention `EinsumDense` layers change class in place to
    `ElectraDense` / `ElectraEinsumDense` (same objects, names and weights).
    """
    attention = getattr(layer, "_self_attention_layer", None)
    for dense in (getattr(layer, "_feedforward_intermediate_dense", None),
                  getattr(layer, "_feedforward_output_dense", None)):
        if type(dense) is layers.Dense:
            dense.__class__ = ElectraDense
    for name in ("_query_dense", "_key_dense", "_value_dense", "_output_dense"):
        dense = getattr(attention, name, None)
        if type(dense) is layers.EinsumDense:
            dense.__class__ = ElectraEinsumDense


def _random_uint16(count, seed):
    """At least `count` uniform 16-bit integers (flat), two per 32-bit draw; None if the backend
    has no raw-bits generator (then `ElectraDropout` falls back to Keras' dropout)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        from electra_tf import fused

        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)  # as Keras' TF backend
        return fused.random_uint16(count, seed)
    if backend == "jax":
        import jax

        bits = jax.random.bits(seed, ((count + 1) // 2,), dtype="uint32")
        return jax.lax.bitcast_convert_type(bits, "uint16").reshape(-1)
    return None


def dropout_keep_bits(x, seed):
    """uint16 random integers shaped like `x`, two per 32-bit draw from `seed` (what `dropout16`
    compares with its threshold); None where `_random_uint16` is."""
    static_size = None not in x.shape and math.prod(x.shape)
    size = static_size or ops.size(x)
    bits = _random_uint16(size, seed)
    if bits is None:
        return None
    if not static_size or size % 2:
        bits = bits[:size]
    return ops.reshape(bits, ops.shape(x))


def dropout16(x, rate: float, seed):
    """Inverted dropout whose keep decisions use 16 random bits each (two per 32-bit draw).

    An element is dropped iff its 16-bit number is below `round(rate × 65536)`: the drop
    probability is that threshold / 65536, within 0.5 / 65536 < 1e-5 of `rate` (0.1 → 0.100006).
    Kept elements are scaled by 1 / (1 − that probability), so `E[y] = x` (up to the scale's
    rounding in x's dtype, as in Keras). Half the random-number work of Keras' one float per
    element. Deterministic in `seed` (a `SeedGenerator` draw), like Keras' dropout.
    Returns None where `_random_uint16` does.
    """
    threshold = dropout_threshold(rate)
    if threshold <= 0:
        return x
    if threshold >= DROPOUT_LEVELS:
        return ops.zeros_like(x)
    bits = dropout_keep_bits(x, seed)
    if bits is None:
        return None
    keep = bits >= threshold
    return x * ops.where(keep, ops.cast(dropout_scale(threshold), x.dtype), ops.cast(0, x.dtype))


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraDropout(layers.Dropout):
    """`keras.layers.Dropout` with `dropout16` masks: same seed generator, advanced once per call.

    Example:

    >>> import numpy as np
    >>> layer = ElectraDropout(0.5, seed=0)
    >>> y = np.asarray(layer(np.ones((4, 1000), "float32"), training=True))
    >>> sorted(set(np.round(y.ravel(), 3).tolist())), bool(0.45 < (y == 0).mean() < 0.55)
    ([0.0, 2.0], True)
    """

    def call(self, inputs, training=False):
        if training and 0 < self.rate < 1 and self.noise_shape is None:
            outputs = dropout16(inputs, self.rate, self.seed_generator.next())
            if outputs is not None:
                return outputs
        return super().call(inputs, training=training)


def use_electra_dropout(layer: TransformerEncoder):
    """Makes a built keras-hub `TransformerEncoder` drop out with `ElectraDropout`.

    Its three `Dropout` layers (attention probabilities, attention output, feed-forward
    output) change class in place: the same objects, names and seed generators, so
    checkpoints and the dropout RNG state list are unchanged.
    """
    attention = getattr(layer, "_self_attention_layer", None)
    for dropout in (getattr(layer, "_self_attention_dropout", None), getattr(layer, "_feedforward_dropout", None),
                    getattr(attention, "_dropout_layer", None)):
        if type(dropout) is layers.Dropout:
            dropout.__class__ = ElectraDropout


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraEmbeddings(layers.Layer):
    """Word + position + segment embeddings, LayerNorm and dropout.

    Layer names match `keras_hub.models.ElectraBackbone`. Call with
    `(token_ids, segment_ids)`; returns `[batch, seq, embedding_size]`.
    """

    def __init__(
        self,
        vocab_size,
        embedding_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        dropout_rate=0.1,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        kernels=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        kernels = kernels or resolve_execution().kernels
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.dropout_rate = dropout_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        init = truncated_normal(initializer_range)
        self.token_embedding = layers.ReversibleEmbedding(
            vocab_size, embedding_size, embeddings_initializer=init,
            # The MLM logits' vocabulary matmul runs in float32 under mixed precision, as the
            # official code computes its logits; it only runs at the masked positions.
            reverse_dtype="float32", dtype=self.dtype_policy, name="token_embedding",
        )
        self.position_embedding = PositionEmbedding(
            sequence_length=max_position_embeddings, initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy, name="position_embedding",
        )
        self.segment_embedding = layers.Embedding(
            type_vocab_size, embedding_size, embeddings_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy, name="segment_embedding",
        )
        self.embeddings_layer_norm = layer_norm(layer_norm_epsilon, kernels, dtype=self.dtype_policy,
                                                name="embeddings_layer_norm")
        self.embeddings_dropout = layers.Dropout(dropout_rate, dtype=self.dtype_policy, name="embeddings_dropout")

    def build(self, token_ids_shape, segment_ids_shape=None):
        self.token_embedding.build(token_ids_shape)
        embedded_shape = tuple(token_ids_shape) + (self.embedding_size,)
        self.position_embedding.build(embedded_shape)
        self.segment_embedding.build(token_ids_shape)
        self.embeddings_layer_norm.build(embedded_shape)
        self.built = True

    def call(self, token_ids, segment_ids, training=None):
        tokens = self.token_embedding(token_ids)
        x = tokens + self.position_embedding(tokens) + self.segment_embedding(segment_ids)
        x = self.embeddings_layer_norm(x)
        return self.embeddings_dropout(x, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embedding_size=self.embedding_size,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            dropout_rate=self.dropout_rate,
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**without_legacy_fields(config))


@keras.saving.register_keras_serializable(package=PACKAGE)
class GdesEmbeddings(layers.Layer):
    """Gradient-disentangled embedding sharing (DeBERTaV3): the discriminator's view of shared embeddings.

    Every parameter θ of the generator's `ElectraEmbeddings` block (word, position
    and segment tables, LayerNorm) is used as `stop_gradient(θ) + Δθ`, with Δθ
    zero-initialised and owned by the discriminator. The generator's MLM loss
    alone trains the shared θ; the discriminator's loss trains only the deltas,
    so the two losses no longer pull the shared table in opposite directions
    ("tug of war"). `fold()` returns the plain block `θ + Δθ` for fine-tuning.
    Same call signature as `ElectraEmbeddings`.
    """

    def __init__(self, base: ElectraEmbeddings, **kwargs):
        super().__init__(**kwargs)
        self.base = base

    def build(self, token_ids_shape=None, segment_ids_shape=None):
        if not self.base.built:
            self.base.build((None, None))
        self.deltas = {
            name: self.add_weight(name=delta_name, shape=tuple(variable.shape), initializer="zeros")
            for name, delta_name, variable in self._shared()
        }
        self.built = True

    def _shared(self):
        """(key, delta variable name, shared variable); LayerNorm deltas keep the names
        `gamma`/`beta` so the optimizer excludes them from weight decay like their bases."""
        base = self.base
        return [
            ("token", "token_embedding_delta", base.token_embedding.embeddings),
            ("position", "position_embedding_delta", base.position_embedding.position_embeddings),
            ("segment", "segment_embedding_delta", base.segment_embedding.embeddings),
            ("gamma", "gamma", base.embeddings_layer_norm.gamma),
            ("beta", "beta", base.embeddings_layer_norm.beta),
        ]

    def _table(self, key, variable):
        return ops.stop_gradient(ops.convert_to_tensor(variable)) + ops.convert_to_tensor(self.deltas[key])

    def call(self, token_ids, segment_ids, training=None):
        tables = {key: ops.cast(self._table(key, variable), self.compute_dtype)
                  for key, _, variable in self._shared()}
        tokens = ops.take(tables["token"], token_ids, axis=0)
        length = ops.shape(token_ids)[1]
        positions = ops.expand_dims(tables["position"][:length], 0)
        x = tokens + positions + ops.take(tables["segment"], segment_ids, axis=0)
        x = layer_norm_last_axis(x, tables["gamma"], tables["beta"], self.base.layer_norm_epsilon)
        return self.base.embeddings_dropout(x, training=training)

    def fold(self) -> ElectraEmbeddings:
        """A plain `ElectraEmbeddings` holding θ + Δθ (what the discriminator computes)."""
        base = self.base
        folded = ElectraEmbeddings(**{k: v for k, v in base.get_config().items()
                                      if k not in ("name", "trainable", "dtype")},
                                   dtype=base.dtype_policy, name="embeddings")
        folded.build((None, None))
        for (key, _, variable), (_, _, target) in zip(self._shared(), _shared_variables(folded)):
            target.assign(ops.convert_to_tensor(variable) + ops.convert_to_tensor(self.deltas[key]))
        return folded

    def get_config(self):
        raise NotImplementedError("GdesEmbeddings wraps a live embeddings block; export folds it (fold())")


def _shared_variables(embeddings: ElectraEmbeddings):
    return GdesEmbeddings(embeddings)._shared()


def transformer_layer_at_first(layer, x, padding_mask, length, training=None):
    """keras-hub `TransformerEncoder` (post-LN) `layer(x, padding_mask)[:, :length]`, computed
    at those positions only: attention from the first `length` queries to every key, then the
    residuals, LayerNorms and feed-forward on `[batch, length, hidden]`. Same sub-layers and
    order as `TransformerEncoder.call`."""
    if layer.normalize_first:
        raise ValueError("transformer_layer_at_first supports post-LN layers (normalize_first=False)")
    query = x[:, :length]
    attention_mask = ops.expand_dims(ops.cast(padding_mask, "int32"), axis=1)  # [batch, 1, keys]
    attended = layer._self_attention_layer(query=query, value=x, attention_mask=attention_mask,
                                           training=training)
    hidden = layer._self_attention_layer_norm(
        layer._self_attention_dropout(attended, training=training) + query)
    feedforward = layer._feedforward_output_dense(layer._feedforward_intermediate_dense(hidden))
    return layer._feedforward_layer_norm(layer._feedforward_dropout(feedforward, training=training) + hidden)


def _dropout_bits(dropout, training):
    """`bits(x)` for `fused.LayerDropout`: the 16-bit keep draws `dropout` (an `ElectraDropout`)
    would make for `x`, from its seed generator, or None when it does not drop out."""
    def bits(x):
        if not training or dropout.rate <= 0:
            return None
        return dropout_keep_bits(x, dropout.seed_generator.next())

    return bits


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraTransformerEncoder(TransformerEncoder):
    """keras-hub's `TransformerEncoder` (same sub-layers, weights and names), computed by `kernels`.

    `kernels="xla_cpu"` (TensorFlow backend, post-LN, exact GELU, 16-bit dropout masks): the bias
    adds, GELU, masked softmax, dropouts, residual adds and LayerNorms between the layer's matmuls
    run as `electra_tf.fused` kernels, and query, key and value come from one matmul; the dropout
    masks are the ones `ElectraDropout` draws from the same seed generators. A call those kernels
    cannot compute (an attention mask, attention scores) raises. `kernels="reference"`: keras-hub's
    call. Both sum dense layers' bias gradients in float32 (`ElectraDense`/`ElectraEinsumDense`
    swapped in); `dropout_masks="16bit"` swaps in `ElectraDropout`.
    `call(..., query_length=n)` computes the first n positions only
    (see `transformer_layer_at_first`).

    Example:

    >>> import numpy as np
    >>> layer = ElectraTransformerEncoder(intermediate_dim=16, num_heads=2, activation=gelu_exact)
    >>> x = np.random.RandomState(0).normal(size=(2, 5, 8)).astype("float32")
    >>> mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    >>> fused, unfused = layer(x, padding_mask=mask), TransformerEncoder.call(layer, x, padding_mask=mask)
    >>> bool(np.allclose(fused, unfused, atol=1e-5)), tuple(fused.shape)
    (True, (2, 5, 8))
    """

    def __init__(self, *args, kernels=None, dropout_masks=None, **kwargs):
        if kernels is None or dropout_masks is None:  # built alone, not by an encoder: the devices' choice
            exact = keras.activations.get(kwargs.get("activation", "relu")) in (gelu_exact, gelu_keras)
            execution = resolve_execution(hidden_act="gelu" if exact else "other")
            kernels, dropout_masks = kernels or execution.kernels, dropout_masks or execution.dropout_masks
        # The fused call reads biases and LayerNorm parameters in their variable dtype and casts
        # the matmuls' operands itself.
        super().__init__(*args, autocast=kernels != "xla_cpu", **without_legacy_fields(kwargs))
        self.kernels = kernels
        self.dropout_masks = dropout_masks
        if kernels == "xla_cpu":
            problems = [why for why, broken in (
                ("the TensorFlow backend", keras.backend.backend() != "tensorflow"),
                ("post-LayerNorm layers", self.normalize_first),
                ("the exact GELU", self.activation not in (gelu_exact, gelu_keras)),
                ("16-bit dropout masks", dropout_masks != "16bit")) if broken]
            if problems:
                raise ValueError(f"kernels='xla_cpu' needs {', '.join(problems)}; use kernels='reference'")

    def build(self, inputs_shape):
        super().build(inputs_shape)
        use_electra_dense(self)
        if self.dropout_masks == "16bit":
            use_electra_dropout(self)

    def call(self, inputs, padding_mask=None, attention_mask=None, training=None, return_attention_scores=False,
             query_length=None):
        x = ops.cast(inputs, self.compute_dtype)
        if self.kernels != "xla_cpu":
            if query_length is not None:
                return transformer_layer_at_first(self, x, padding_mask, query_length, training)
            return super().call(x, padding_mask=padding_mask, attention_mask=attention_mask, training=training,
                                return_attention_scores=return_attention_scores)
        if attention_mask is not None or return_attention_scores:
            raise ValueError("the XLA:CPU kernels take a padding mask only and return no attention scores; "
                             "build the layer with kernels='reference' for those")
        from electra_tf import fused

        key_mask = None if padding_mask is None else ops.cast(padding_mask, "bool")[:, None, None, :]
        dropout = fused.LayerDropout(
            attention_bits=_dropout_bits(self._self_attention_layer._dropout_layer, training),
            attention_output_bits=_dropout_bits(self._self_attention_dropout, training),
            ffn_bits=_dropout_bits(self._feedforward_dropout, training), rate=self.dropout)
        return fused.transformer_layer(x, key_mask, self._fused_weights(), dropout, query_length)

    def _fused_weights(self):
        from electra_tf import fused

        attention = self._self_attention_layer
        hidden = attention._output_dense.kernel.shape[-1]
        projections = (attention._query_dense, attention._key_dense, attention._value_dense)
        norms = (self._self_attention_layer_norm, self._feedforward_layer_norm)
        intermediate, output = self._feedforward_intermediate_dense, self._feedforward_output_dense

        def matrix(variable, rows=None, columns=None):
            shape = tuple(variable.shape) if rows is columns is None else (rows or -1, columns or -1)
            return ops.cast(ops.reshape(variable, shape), self.compute_dtype)

        def value(variable):  # a tensor, not the variable: the fused kernels' custom gradients take tensors
            return ops.copy(variable)

        return fused.LayerWeights(
            num_heads=attention._num_heads,
            qkv_kernel=ops.concatenate([matrix(d.kernel, rows=hidden) for d in projections], axis=1),
            qkv_bias=ops.concatenate([ops.reshape(d.bias, (-1,)) for d in projections], axis=0),
            output_kernel=matrix(attention._output_dense.kernel, columns=hidden),
            output_bias=value(attention._output_dense.bias),
            attention_gamma=value(norms[0].gamma), attention_beta=value(norms[0].beta),
            intermediate_kernel=matrix(intermediate.kernel), intermediate_bias=value(intermediate.bias),
            ffn_output_kernel=matrix(output.kernel), ffn_output_bias=value(output.bias),
            ffn_gamma=value(norms[1].gamma), ffn_beta=value(norms[1].beta),
            epsilon=self.layer_norm_epsilon,
        )


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraEncoder(keras.Model):
    """Embeddings → optional projection → post-LN transformer layers.

    Inputs: a dict with int `token_ids`, `segment_ids` and `padding_mask`
    (1 = real token), each `[batch, seq]`. Output: `[batch, seq, hidden_size]`.
    Pass `embeddings=` to share an existing `ElectraEmbeddings` block. `execution`
    (`electra_tf.options.ExecutionOptions`, default: the visible devices' choice) says how the
    layers compute; it is not part of the encoder's config.
    """

    def __init__(
        self,
        vocab_size,
        embedding_size,
        hidden_size,
        num_layers,
        num_heads,
        intermediate_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        dropout_rate=0.1,
        hidden_act="gelu",
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        embeddings=None,
        execution: ExecutionOptions | None = None,
        **kwargs,
    ):
        super().__init__(**without_legacy_fields(kwargs))
        self.execution = execution = resolve_execution(execution, hidden_act)
        self.embeddings = embeddings or ElectraEmbeddings(
            vocab_size, embedding_size, max_position_embeddings, type_vocab_size,
            dropout_rate, layer_norm_epsilon, initializer_range, kernels=execution.kernels,
            dtype=self.dtype_policy, name="embeddings",
        )
        self.embeddings_projection = None
        if hidden_size != embedding_size:
            # glorot-uniform: the official `embeddings_project` is a tf.layers.dense with no initializer.
            self.embeddings_projection = ElectraDense(
                hidden_size, kernel_initializer="glorot_uniform",
                dtype=self.dtype_policy, name="embeddings_projection",
            )
        # Named attributes, not a list: TF's object-based checkpoints cannot see
        # inside Keras' TrackedList, so listed layers would silently not be saved.
        for i in range(num_layers):
            setattr(self, f"transformer_layer_{i}", ElectraTransformerEncoder(
                intermediate_dim=intermediate_size,
                num_heads=num_heads,
                dropout=dropout_rate,
                activation=get_activation(hidden_act, execution.kernels),
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=truncated_normal(initializer_range),
                kernels=execution.kernels,
                dropout_masks=execution.dropout_masks,
                dtype=self.dtype_policy,
                name=f"transformer_layer_{i}",
            ))
        self._config = dict(
            vocab_size=vocab_size, embedding_size=embedding_size, hidden_size=hidden_size,
            num_layers=num_layers, num_heads=num_heads, intermediate_size=intermediate_size,
            max_position_embeddings=max_position_embeddings, type_vocab_size=type_vocab_size,
            dropout_rate=dropout_rate, hidden_act=hidden_act, layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range,
        )

    @classmethod
    def from_config_object(cls, config: ElectraConfig, role="discriminator", embeddings=None,
                           dtype=None, name=None, execution: ExecutionOptions | None = None):
        return cls(
            vocab_size=config.vocab_size,
            embedding_size=config.embedding_size,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            dropout_rate=config.dropout_rate,
            hidden_act=config.hidden_act,
            layer_norm_epsilon=config.layer_norm_epsilon,
            initializer_range=config.initializer_range,
            execution=execution,
            embeddings=embeddings,
            dtype=dtype,
            name=name or role,
            **dataclasses.asdict(config.encoder(role)),
        )

    @property
    def hidden_size(self) -> int:
        return self._config["hidden_size"]

    @property
    def num_layers(self) -> int:
        return self._config["num_layers"]

    @property
    def transformer_layers(self) -> list:
        return [getattr(self, f"transformer_layer_{i}") for i in range(self.num_layers)]

    def build(self, input_shape=None):
        shape = (None, None)
        if not self.embeddings.built:
            self.embeddings.build(shape)
        width = self._config["embedding_size"]
        if self.embeddings_projection is not None:
            self.embeddings_projection.build(shape + (width,))
            width = self.hidden_size
        for layer in self.transformer_layers:
            layer.build(shape + (width,))
        self.built = True

    def call(self, inputs, training=None, output_length=None):
        """`output_length=n`: the last layer runs its queries, residuals and feed-forward only at
        the first n positions (keys and values still span the sequence) and the output is
        `[batch, n, hidden]`. Those n positions equal the full output's; a [CLS] head passes 1
        and skips (L − 1)/L of the last layer's work, forward and backward."""
        x = self.embeddings(inputs["token_ids"], inputs["segment_ids"], training=training)
        if self.embeddings_projection is not None:
            x = self.embeddings_projection(x)
        padding_mask = ops.cast(inputs["padding_mask"], "bool")
        transformer_layers = self.transformer_layers
        if output_length is not None:
            *transformer_layers, last = transformer_layers
        for layer in transformer_layers:
            x = layer(x, padding_mask=padding_mask, training=training)
        if output_length is None:
            return x
        return last(x, padding_mask=padding_mask, training=training, query_length=output_length)

    def get_config(self):
        # A shared embeddings block is re-created (not shared) on deserialisation.
        return {"name": self.name, "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
                **self._config}

    @classmethod
    def from_config(cls, config):
        return cls(**without_legacy_fields(config))


@keras.saving.register_keras_serializable(package=PACKAGE)
class DiscriminatorHead(layers.Layer):
    """dense(H) → GELU → dense(1): one replaced-token logit per position (`kernels`: see `ElectraDense`)."""

    def __init__(self, hidden_size, hidden_act="gelu", initializer_range=0.02, kernels=None, **kwargs):
        super().__init__(**without_legacy_fields(kwargs))
        kernels = kernels or resolve_execution().kernels
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.dense = ElectraDense(
            hidden_size, activation=get_activation(hidden_act, kernels), fused=kernels == "xla_cpu",
            kernel_initializer=truncated_normal(initializer_range), dtype=self.dtype_policy, name="dense",
        )
        # glorot-uniform: the official discriminator's last dense has no initializer.
        self.logits = ElectraDense(1, kernel_initializer="glorot_uniform", dtype=self.dtype_policy, name="logits")

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.logits.build(tuple(input_shape[:-1]) + (self.hidden_size,))
        self.built = True

    def call(self, hidden):
        return ops.squeeze(self.logits(self.dense(hidden)), axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, hidden_act=self.hidden_act,
                      initializer_range=self.initializer_range)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedLMHead(layers.Layer):
    """dense(E) → GELU → LayerNorm → logits tied to the word embeddings + bias (`kernels`: see `ElectraDense`).

    Call it on hidden states already gathered at the masked positions
    (`[batch, num_masked, hidden]`): at a 30k vocabulary the output projection
    is most of the generator's cost, so it must not run at every position.
    """

    def __init__(self, token_embedding, embedding_size, hidden_act="gelu", layer_norm_epsilon=1e-12,
                 initializer_range=0.02, kernels=None, **kwargs):
        super().__init__(**kwargs)
        kernels = kernels or resolve_execution().kernels
        self.token_embedding = token_embedding
        self.embedding_size = embedding_size
        self.hidden_act = hidden_act
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.dense = ElectraDense(
            embedding_size, activation=get_activation(hidden_act, kernels), fused=kernels == "xla_cpu",
            kernel_initializer=truncated_normal(initializer_range), dtype=self.dtype_policy, name="dense",
        )
        self.layer_norm = layer_norm(layer_norm_epsilon, kernels, dtype=self.dtype_policy, name="layer_norm")

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.layer_norm.build(tuple(input_shape[:-1]) + (self.embedding_size,))
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.token_embedding.input_dim,), initializer="zeros"
        )
        self.built = True

    def call(self, hidden):
        x = self.layer_norm(self.dense(hidden))
        logits = self.token_embedding(x, reverse=True)
        return ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")

    def get_config(self):
        raise NotImplementedError(
            "MaskedLMHead ties its output to an embedding layer; build it with MaskedLMHead(token_embedding, ...)"
        )


def gather_positions(sequence, positions):
    """`sequence[b, positions[b, i]]` for `[B, S, H]` and int `[B, N]` → `[B, N, H]`."""
    return ops.take_along_axis(sequence, ops.expand_dims(positions, -1), axis=1)
