"""How the model's layers compute (`electra_tf.options.ExecutionOptions`) when none is passed.

Execution options are never part of a layer's config. An entry point sets the default its flags ask
for (`set_default_execution`); a layer built without options resolves that default, or the visible
devices' choice, for its model (`resolve_execution`).

Example:

>>> from electra_tf.model.execution import resolve_execution
>>> from electra_tf.options import ExecutionOptions
>>> resolve_execution(ExecutionOptions(kernels="reference")).kernels
'reference'
"""

import keras

from electra_tf.options import LEGACY_EXECUTION_FIELDS, ExecutionOptions


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


LEGACY_LAYER_FIELDS = ("fused", "attention_dropout_rate", *LEGACY_EXECUTION_FIELDS)


def without_legacy_fields(config: dict) -> dict:
    """A layer config without the execution fields that configs saved before held."""
    return {key: value for key, value in config.items() if key not in LEGACY_LAYER_FIELDS}
