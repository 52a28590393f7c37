"""The execution options a model's layers compute with (`electra_tf.options.ExecutionOptions`).

Execution options are never part of a layer's config. A run decides them once, for its strategy's
devices (`electra_tf.training.distribution.resolve_execution`), and passes the result to every model
and layer it builds. A layer or model built without options (a `.keras` file loaded, a user's own
code) computes with `ExecutionOptions.portable()`: TensorFlow's standard ops and no XLA, correct on
every device. Options with "auto" left in are refused: resolving them is the run's decision.

Example:

>>> from electra_tf.model.execution import layer_execution
>>> layer_execution(None).kernels
'reference'
>>> from electra_tf.options import ExecutionOptions
>>> layer_execution(ExecutionOptions())
Traceback (most recent call last):
...
ValueError: execution options with 'auto' left (kernels=auto dropout_masks=auto sampling=auto adam_kernel=auto jit_compile=auto graph_optimizer=auto step_loop=auto gradient_accumulation_steps=auto): resolve them for the run's devices first (electra_tf.training.distribution.resolve_execution)
"""

from electra_tf.options import LEGACY_EXECUTION_FIELDS, ExecutionOptions


def layer_execution(execution: ExecutionOptions | None) -> ExecutionOptions:
    """`execution`, resolved, or the portable options when None."""
    if execution is None:
        return ExecutionOptions.portable()
    if not execution.resolved:
        raise ValueError(f"execution options with 'auto' left ({execution.describe()}): resolve them for the run's "
                         "devices first (electra_tf.training.distribution.resolve_execution)")
    return execution


LEGACY_LAYER_FIELDS = ("fused", "attention_dropout_rate", *LEGACY_EXECUTION_FIELDS)


def without_legacy_fields(config: dict) -> dict:
    """A layer config without the execution fields that configs saved before held."""
    return {key: value for key, value in config.items() if key not in LEGACY_LAYER_FIELDS}
