"""The element-wise ops of the encoder layers and the generator's output, in two implementations.

`reference`: backend-agnostic Keras ops (GELU, LayerNorm, bias add, 16-bit dropout) with closed-form
gradients where autodiff would repeat the forward's work. `xla_cpu`: the same ops as XLA-compiled
TensorFlow kernels with hand-written backward passes, selected by `ExecutionOptions.kernels`.
`random_bits`: the 16-bit dropout decisions both draw. `numerics`: the constants they share.

Import the module you need (`from electra_tf.ops import reference`); this package imports nothing.
"""
