"""Run options of pre-training and the choices its flags offer: their only definition.

This module imports no TensorFlow, so scripts define their flags from it
before the runtime starts (`MultiWorkerMirroredStrategy` must be created first).

Example:

>>> from electra_tf.options import TrainOptions, default
>>> default(TrainOptions, "shuffle_buffer")
1000
>>> TrainOptions(data_dir="shards", model_dir="run", log_steps=10).steps_per_loop
100
"""

import dataclasses

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
# --mixed_precision value → Keras dtype policy.
PRECISIONS = {"none": "float32", "fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# Several workers: "batch" = every worker reads all shards and takes its slice of each global batch
# (exact, any worker count); "file" = worker i reads shards i, i+N, ... (the order depends on N).
INPUT_SHARDINGS = ("batch", "file")


@dataclasses.dataclass
class TrainOptions:
    """How one pre-training run runs (the model and recipe are the `ElectraConfig`)."""

    data_dir: str
    model_dir: str
    seed: int = 0
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_steps: int = 100
    steps_per_loop: int = 100
    jit_compile: bool = False
    mixed_precision: str = "none"
    shuffle_buffer: int = 1000
    init_checkpoint: str | None = None
    stop_after_steps: int | None = None  # stop this invocation early (like a pre-emption)
    export: bool = True
    skip_nonfinite_steps: bool = False  # False: stop at a NaN/Inf loss or gradient norm
    input_sharding: str = "batch"  # one of INPUT_SHARDINGS
    stop_signals: tuple = ()  # e.g. (signal.SIGTERM,): checkpoint at the step reached and return


def default(options_class, name: str):
    """The default of field `name` of dataclass `options_class` (what a flag left unset means)."""
    return {f.name: f.default for f in dataclasses.fields(options_class)}[name]
