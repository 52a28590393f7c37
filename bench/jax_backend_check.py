"""Runs the model code's closed-form GELU / LayerNorm gradients, 16-bit dropout and an encoder under Keras' JAX backend.

The model code (`electra_tf/model/`, `electra_tf/ops/reference.py`) is backend-agnostic Keras 3; the project's
requirements install TensorFlow only, so this check needs an environment with JAX,
Keras and keras-hub (no TensorFlow needed), e.g.:

    python -m venv /tmp/jaxenv && /tmp/jaxenv/bin/pip install "jax[cpu]" keras==3.15.1 \\
        tokenizers sentencepiece kagglehub && /tmp/jaxenv/bin/pip install --no-deps keras-hub==0.32.0
    /tmp/jaxenv/bin/python -m bench.jax_backend_check   # from the repository root

It prints the largest differences against references (JAX's own autodiff for the gradients) and exits non-zero
if any exceeds its tolerance.
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "jax"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from electra_tf.model.encoder import ElectraEncoder  # noqa: E402
from electra_tf.model.layers import ElectraDropout  # noqa: E402
from electra_tf.ops.reference import gelu_erf, layer_norm_last_axis  # noqa: E402
from electra_tf.config import get_config  # noqa: E402


def reference_layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(variance + 1e-12) * gamma + beta


def main():
    failures = []

    def check(name, got, want, tol):
        diff = float(jnp.max(jnp.abs(got - want)))
        print(f"{name}: max |ours - reference| = {diff:.3g} (tolerance {tol:g})")
        if not diff <= tol:
            failures.append(name)

    x = jnp.linspace(-6.0, 6.0, 101)
    check("gelu_erf gradient", jax.grad(lambda t: jnp.sum(gelu_erf(t) ** 2))(x),
          jax.grad(lambda t: jnp.sum(jax.nn.gelu(t, approximate=False) ** 2))(x), 1e-5)
    xs = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 8))
    gamma, beta = jnp.linspace(0.5, 1.5, 8), jnp.linspace(-1.0, 1.0, 8)

    def grads(fn):
        return jax.grad(lambda *a: jnp.sum(jnp.sin(fn(*a))), argnums=(0, 1, 2))(xs, gamma, beta)

    ours = grads(lambda *a: layer_norm_last_axis(*a, 1e-12))
    for name, got, want in zip(("x", "gamma", "beta"), ours, grads(reference_layer_norm)):
        check(f"layer_norm_last_axis gradient d/d{name}", got, want, 1e-5)
    y = np.asarray(ElectraDropout(0.1, seed=0)(jnp.ones((500, 1001)), training=True))
    kept = np.unique(y[y != 0])
    print(f"dropout16: dropped {(y == 0).mean():.5f} (expected {6554 / 65536:.5f}), kept values {kept}")
    if not (abs((y == 0).mean() - 6554 / 65536) < 0.002 and np.allclose(kept, 65536 / (65536 - 6554))):
        failures.append("dropout16")
    encoder = ElectraEncoder.from_config_object(get_config("tiny", hparams={"dropout_rate": 0.1}), "discriminator")
    inputs = {"token_ids": np.array([[2, 10, 11, 3, 0]], "int32"), "segment_ids": np.zeros((1, 5), "int32"),
              "padding_mask": np.array([[1, 1, 1, 1, 0]], "int32")}
    out = encoder(inputs)
    training_difference = float(jnp.max(jnp.abs(encoder(inputs, training=True) - encoder(inputs, training=True))))
    layer = encoder.transformer_layers[0]
    print(f"encoder under {jax.default_backend()} JAX {jax.__version__}: output {tuple(out.shape)}, "
          f"LayerNorm class {type(layer._feedforward_layer_norm).__name__}, dropout class "
          f"{type(layer._feedforward_dropout).__name__}, two training calls differ by {training_difference:.3g}")
    if not training_difference > 0:
        failures.append("encoder dropout under training")
    check("encoder last layer at [CLS] only (output_length=1) vs full output", encoder(inputs, output_length=1),
          out[:, :1], 2e-5)
    if failures:
        sys.exit(f"jax_backend_check: failed: {', '.join(failures)}")


if __name__ == "__main__":
    main()
