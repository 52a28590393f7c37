"""Run options and the choices the scripts' flags offer: their only definition.

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
from typing import Optional

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
# --mixed_precision value → Keras dtype policy.
PRECISIONS = {"none": "float32", "fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# Several workers: "batch" = every worker reads all shards and takes its slice of each global batch
# (exact, any worker count); "file" = worker i reads shards i, i+N, ... (the order depends on N).
INPUT_SHARDINGS = ("batch", "file")
DEFAULT_SHUFFLE_BUFFER = 1000  # examples; the shuffle state is saved in checkpoints
# --graph_optimizer (see loop.grappler_enabled).
GRAPH_OPTIMIZERS = ("auto", "on", "off")
GRAPH_OPTIMIZER_HELP = ("TF's graph optimizer (grappler) for the training loop: auto = off when every device is a "
                        "CPU (there it costs ~5 s of start-up and saves no resolvable step time; "
                        "bench/README_step_bench.md), on elsewhere.")


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
    graph_optimizer: str = "auto"  # one of GRAPH_OPTIMIZERS
    mixed_precision: str = "none"
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    init_checkpoint: str | None = None
    stop_after_steps: int | None = None  # stop this invocation early (like a pre-emption)
    export: bool = True
    skip_nonfinite_steps: bool = False  # False: stop at a NaN/Inf loss or gradient norm
    input_sharding: str = "batch"  # one of INPUT_SHARDINGS
    stop_signals: tuple = ()  # e.g. (signal.SIGTERM,): checkpoint at the step reached and return


@dataclasses.dataclass
class RunOptions:
    """What one fine-tuning run needs besides the config and the task (`run_finetuning.py`).

    `official_layerwise_lr_bug=None` takes `config.finetune_official_layerwise_lr_bug`.
    """

    output_dir: str
    learning_rate: float
    train_batch_size: int
    eval_batch_size: int
    num_train_epochs: float
    warmup_fraction: float
    weight_decay: float
    layerwise_lr_decay: float
    max_seq_length: int
    seed: int = 0
    official_layerwise_lr_bug: Optional[bool] = None
    max_train_steps: Optional[int] = None
    do_train: bool = True
    do_eval: bool = True
    do_predict: bool = False
    select_best_epoch: bool = False
    export_saved_model: Optional[str] = None  # a text-in / label-out SavedModel of the selected weights
    dynamic_padding: bool = True
    length_bucketing: bool = True
    mixed_precision: str = "none"
    log_steps: int = 50
    steps_per_loop: int = 50
    jit_compile: bool = False
    graph_optimizer: str = "auto"  # one of GRAPH_OPTIMIZERS


@dataclasses.dataclass(frozen=True)
class SquadOptions:
    """SQuAD windowing and decoding, as the official code (`configure_finetuning.py`)."""

    doc_stride: int = 128  # tokens between the starts of a document's windows
    max_query_length: int = 64  # question tokens kept
    n_best_size: int = 20  # candidates decoded per question
    max_answer_length: int = 30  # longest answer, in tokens


def default(options_class, name: str):
    """The default of field `name` of dataclass `options_class` (what a flag left unset means)."""
    return {f.name: f.default for f in dataclasses.fields(options_class)}[name]
