"""`ElectraTransformerEncoder`: the post-LayerNorm BERT transformer layer, computed by the chosen kernels.

Its weights are `keras_hub.layers.TransformerEncoder`'s (post-LN) — the same sub-layer names,
shapes and order — so checkpoints, the converters and keras-hub's `ElectraBackbone` read them
unchanged. `kernels` (`ExecutionOptions.kernels`) picks one implementation of the same function:

* `"reference"`: the sub-layers' calls (Keras ops; `SelfAttention`, Keras' LayerNorm and GELU);
* `"xla_cpu"`: the matmuls on TensorFlow's kernels and the element-wise chains between them as the
  XLA-compiled kernels of `electra_tf.ops.xla_cpu` (`transformer_layer`), query, key and value from
  one matmul. It needs the TensorFlow backend, the exact GELU and 16-bit dropout masks, and takes a
  padding mask only; anything else raises instead of falling back.

Both sum dense layers' bias gradients in float32 and drop out with `ElectraDropout`, whose keep
draws (keyed by the example in training, `model.example_dropout`; else its seed generator's) the
XLA:CPU call takes too: with 16-bit masks the same keys give the same masks either way. `call(..., query_length=n)` computes the first n positions only (a [CLS]
head's last layer): keys and values still span the sequence.

Example:

>>> import numpy as np
>>> from electra_tf.ops.reference import gelu_exact
>>> layer = ElectraTransformerEncoder(intermediate_dim=16, num_heads=2, activation=gelu_exact,
...                                   kernels="xla_cpu", dropout_masks="16bit")
>>> x = np.random.RandomState(0).normal(size=(2, 5, 8)).astype("float32")
>>> mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
>>> fused = layer(x, padding_mask=mask)
>>> layer.kernels = "reference"
>>> reference, first = layer(x, padding_mask=mask), layer(x, padding_mask=mask, query_length=1)
>>> bool(np.allclose(fused, reference, atol=1e-5)), bool(np.allclose(first, reference[:, :1], atol=1e-5))
(True, True)
>>> tuple(fused.shape), tuple(first.shape)
((2, 5, 8), (2, 1, 8))
"""

import keras
from keras import layers, ops

from electra_tf.model.attention import SelfAttention, clone_initializer
from electra_tf.model.execution import layer_execution, without_legacy_fields
from electra_tf.model import example_dropout
from electra_tf.model.layers import ElectraDense, dropout_layer, is_exact_gelu
from electra_tf.ops.reference import PACKAGE, own_dtype_value as value


def _dropout_bits(dropout, training, rows=False):
    """`bits(x)` for `xla_cpu.LayerDropout`: the 16-bit keep draws `dropout` (an `ElectraDropout`)
    would make for `x`, or None when it does not drop out. `rows`: `x` is `[B·S, H]` (the kernels'
    rows), drawn as `[B, S, H]` when keyed by the example (by position, as the reference path)."""
    def bits(x):
        if not training or dropout.rate <= 0:
            return None
        if rows and example_dropout.active_scope() is not None:  # the kernel reshapes them to `x`'s rows
            batch = example_dropout.batch_size_of_scope()
            return dropout.keep_bits(ops.reshape(x, (batch, -1, x.shape[-1])))
        return dropout.keep_bits(x)

    return bits


@keras.saving.register_keras_serializable(package=PACKAGE)
class ElectraTransformerEncoder(layers.Layer):
    """Self-attention → dropout → residual → LayerNorm → dense(I) → activation → dense(H) → dropout →
    residual → LayerNorm, on `[batch, seq, H]` with a `[batch, seq]` padding mask (1 = real token).

    `kernels` / `dropout_masks`: how it computes (see the module); default: the devices' choice
    for its activation. Neither is part of the config. The class name is part of `.keras` files'
    weight paths (Keras keys a model's layers by class name): renaming it breaks loading them.
    """

    def __init__(self, intermediate_dim, num_heads, dropout=0.0, activation="relu", layer_norm_epsilon=1e-5,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", kernels=None, dropout_masks=None,
                 **kwargs):
        if kernels is None or dropout_masks is None:  # built alone, not by an encoder: the portable options
            portable = layer_execution(None)
            kernels, dropout_masks = kernels or portable.kernels, dropout_masks or portable.dropout_masks
        # The XLA:CPU call reads biases and LayerNorm parameters in their variable dtype and casts
        # the matmuls' operands itself.
        super().__init__(autocast=kernels != "xla_cpu", **kwargs)
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self.kernels = kernels
        self.dropout_masks = dropout_masks
        if kernels == "xla_cpu":
            problems = [why for why, broken in (
                ("the TensorFlow backend", keras.backend.backend() != "tensorflow"),
                ("the exact GELU", not is_exact_gelu(self.activation)),
                ("16-bit dropout masks", dropout_masks != "16bit")) if broken]
            if problems:
                raise ValueError(f"kernels='xla_cpu' needs {', '.join(problems)}; use kernels='reference'")

    def build(self, inputs_shape):
        # Sub-layers are created here, in keras-hub's TransformerEncoder's order, not in __init__: the
        # hidden size comes from the input, and each sub-layer draws its initializer's and dropout's
        # seed from Python's `random` when created, so this order keeps a seeded model's initial
        # weights and dropout streams.
        hidden_dim = inputs_shape[-1]
        key_dim = int(hidden_dim // self.num_heads)
        if key_dim == 0:
            raise ValueError(f"hidden size {hidden_dim} is smaller than num_heads={self.num_heads}")
        dtype = self.dtype_policy
        self._self_attention_layer = SelfAttention(
            num_heads=self.num_heads, key_dim=key_dim, dropout=self.dropout, dropout_masks=self.dropout_masks,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer), dtype=dtype, name="self_attention_layer")
        self._self_attention_layer.build(inputs_shape, inputs_shape)
        self._self_attention_layer_norm = layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=dtype, name="self_attention_layer_norm")
        self._self_attention_layer_norm.build(inputs_shape)
        self._self_attention_dropout = dropout_layer(self.dropout, self.dropout_masks, dtype=dtype,
                                                     name="self_attention_dropout")
        self._feedforward_layer_norm = layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=dtype, name="feedforward_layer_norm")
        self._feedforward_layer_norm.build(inputs_shape)
        self._feedforward_intermediate_dense = ElectraDense(
            self.intermediate_dim, activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer), dtype=dtype,
            name="feedforward_intermediate_dense")
        self._feedforward_intermediate_dense.build(inputs_shape)
        self._feedforward_output_dense = ElectraDense(
            hidden_dim, kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer), dtype=dtype, name="feedforward_output_dense")
        self._feedforward_output_dense.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self._feedforward_dropout = dropout_layer(self.dropout, self.dropout_masks, dtype=dtype,
                                                  name="feedforward_dropout")
        self.built = True

    def call(self, inputs, padding_mask=None, attention_mask=None, training=None, return_attention_scores=False,
             query_length=None):
        x = ops.cast(inputs, self.compute_dtype)
        if self.kernels == "xla_cpu":
            if attention_mask is not None or return_attention_scores:
                raise ValueError("the XLA:CPU kernels take a padding mask only and return no attention scores; "
                                 "build the layer with kernels='reference' for those")
            return self._xla_cpu_call(x, padding_mask, training, query_length)
        return self._reference_call(x, padding_mask, attention_mask, training, return_attention_scores, query_length)

    def _reference_call(self, x, padding_mask, attention_mask, training, return_attention_scores, query_length):
        mask = None if padding_mask is None else ops.cast(ops.expand_dims(padding_mask, axis=1), "int32")
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "int32")
            mask = attention_mask if mask is None else ops.minimum(mask, attention_mask)
        query = x if query_length is None else x[:, :query_length]
        attended = self._self_attention_layer(query, x, attention_mask=mask, training=training,
                                              return_attention_scores=return_attention_scores)
        if return_attention_scores:
            attended, scores = attended
        hidden = self._self_attention_layer_norm(self._self_attention_dropout(attended, training=training) + query)
        feedforward = self._feedforward_output_dense(self._feedforward_intermediate_dense(hidden))
        output = self._feedforward_layer_norm(self._feedforward_dropout(feedforward, training=training) + hidden)
        return (output, scores) if return_attention_scores else output

    def _xla_cpu_call(self, x, padding_mask, training, query_length, weights=None):
        """`weights`: another layer's `xla_cpu_weights()` of the same shapes (a loop over identical
        layers computes them all with this one's code and dropout rate); default: this layer's."""
        from electra_tf.ops import xla_cpu

        key_mask = None if padding_mask is None else ops.cast(padding_mask, "bool")[:, None, None, :]
        dropout = xla_cpu.LayerDropout(
            attention_bits=_dropout_bits(self._self_attention_layer.dropout_layer, training),
            attention_output_bits=_dropout_bits(self._self_attention_dropout, training, rows=True),
            ffn_bits=_dropout_bits(self._feedforward_dropout, training, rows=True), rate=self.dropout)
        weights = weights if weights is not None else self.xla_cpu_weights()
        return xla_cpu.transformer_layer(x, key_mask, weights, dropout, query_length)

    def xla_cpu_weights(self, stacked_over=None):
        """This layer's weights as the XLA:CPU kernels take them (`ops.xla_cpu.LayerWeights` of tensors).

        `stacked_over` (layers of this one's shapes, in order): each weight of all of them on a new first
        axis, `[layers, ...]`, what a loop over the layers reads layer i from (`layer_loop`). One stack, one
        reshape and one concatenation per kind of weight, not per layer: the traced step, forward and
        backward, is that much smaller; the values are the same bits.
        """
        from electra_tf.ops import xla_cpu

        layers = stacked_over or [self]
        lead = (len(layers),) if stacked_over else ()
        hidden = self._self_attention_layer.output_dense.kernel.shape[-1]
        projections = ("query_dense", "key_dense", "value_dense")

        def stacked(get, read):
            values = [read(get(layer.sublayers())) for layer in layers]
            return ops.stack(values) if stacked_over else values[0]

        # Kernels are cast to the compute dtype either way; biases and LayerNorm parameters are read with
        # `value`, in their own dtype also where an autocasting caller reads them (a loop over the layers,
        # `layer_loop`), as tensors: the kernels' custom gradients take no variables.
        def matrix(get, shape):
            return ops.reshape(stacked(get, lambda variable: ops.cast(variable, self.compute_dtype)), lead + shape)

        def vector(get):
            return stacked(get, value)

        def projection(name, part):
            return lambda parts: getattr(getattr(parts["attention"], name), part)

        return xla_cpu.LayerWeights(
            num_heads=self._self_attention_layer.num_heads,
            qkv_kernel=ops.concatenate([matrix(projection(p, "kernel"), (hidden, -1)) for p in projections], -1),
            qkv_bias=ops.concatenate([ops.reshape(vector(projection(p, "bias")), lead + (-1,))
                                      for p in projections], -1),
            output_kernel=matrix(projection("output_dense", "kernel"), (-1, hidden)),
            output_bias=vector(projection("output_dense", "bias")),
            attention_gamma=vector(lambda parts: parts["attention_norm"].gamma),
            attention_beta=vector(lambda parts: parts["attention_norm"].beta),
            intermediate_kernel=matrix(lambda parts: parts["intermediate"].kernel,
                                       tuple(self._feedforward_intermediate_dense.kernel.shape)),
            intermediate_bias=vector(lambda parts: parts["intermediate"].bias),
            ffn_output_kernel=matrix(lambda parts: parts["output"].kernel,
                                     tuple(self._feedforward_output_dense.kernel.shape)),
            ffn_output_bias=vector(lambda parts: parts["output"].bias),
            ffn_gamma=vector(lambda parts: parts["feedforward_norm"].gamma),
            ffn_beta=vector(lambda parts: parts["feedforward_norm"].beta),
            epsilon=self.layer_norm_epsilon,
        )

    def sublayers(self) -> dict:
        """The sub-layers that hold the weights, by role (what another forward of the same function, such
        as `serving.forward.ServingEncoder`, reads): "attention" (`SelfAttention`: query, key, value and
        output dense layers), "attention_norm", "intermediate", "output", "feedforward_norm"."""
        return {"attention": self._self_attention_layer, "attention_norm": self._self_attention_layer_norm,
                "intermediate": self._feedforward_intermediate_dense, "output": self._feedforward_output_dense,
                "feedforward_norm": self._feedforward_layer_norm}

    def get_config(self):
        config = super().get_config()
        config.update(
            intermediate_dim=self.intermediate_dim, num_heads=self.num_heads, dropout=self.dropout,
            activation=keras.activations.serialize(self.activation), layer_norm_epsilon=self.layer_norm_epsilon,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer))
        return config

    @classmethod
    def from_config(cls, config):
        config = without_legacy_fields(config)
        if config.pop("normalize_first", False):
            raise ValueError("ElectraTransformerEncoder is post-LayerNorm; normalize_first=True is not supported")
        return cls(**config)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape
