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

from electra_tf.runtime import XLA_CACHE_HELP

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
# --mixed_precision value → Keras dtype policy.
PRECISIONS = {"none": "float32", "fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# Several workers: "batch" = every worker reads all shards and takes its slice of each global batch
# (exact, any worker count); "file" = worker i reads shards i, i+N, ... (the order depends on N).
INPUT_SHARDINGS = ("batch", "file")
DEFAULT_SHUFFLE_BUFFER = 1000  # examples; the shuffle state is saved in checkpoints
# Execution options: how the model is computed (kernels, random-bit layout, compilation), never what it
# learns; not stored in configs or exports. "auto" resolves per device kind in `ExecutionOptions.resolve`:
# what was tuned and measured only on CPUs is on only where every device is a CPU.
KERNELS = ("auto", "xla_cpu", "reference")
DROPOUT_MASKS = ("auto", "16bit", "keras")
SAMPLING_METHODS = ("auto", "inverse_cdf", "gumbel")
ADAM_KERNELS = ("auto", "fused", "ops")
GRAPH_OPTIMIZERS = ("auto", "on", "off")
STEP_LOOPS = ("auto", "graph", "host")
# The execution options chosen from a list, with their choices: what `ExecutionOptions` checks and the flags offer.
EXECUTION_CHOICES = (("kernels", KERNELS), ("dropout_masks", DROPOUT_MASKS), ("sampling", SAMPLING_METHODS),
                     ("adam_kernel", ADAM_KERNELS), ("graph_optimizer", GRAPH_OPTIMIZERS), ("step_loop", STEP_LOOPS))
EXECUTION_HELP = {
    "kernels": "Encoder layers' element-wise chains and the MLM loss: xla_cpu = XLA-compiled kernels with "
               "hand-written backward passes between TF's matmuls (tuned on CPUs); reference = Keras "
               "ops. auto = xla_cpu where every device is a CPU (TensorFlow backend), else reference.",
    "dropout_masks": "16bit = two 16-bit keep decisions per 32-bit random number; keras = one uniform float per "
                     "element, compared with the rate as Keras does. Either way keyed by (seed, step, example) "
                     "in training, so replicas and micro-batches draw one device's masks. "
                     "auto = 16bit where every device is a CPU, else keras.",
    "sampling": "Generator sampling: inverse_cdf = two-level inverse CDF (2 uniforms per draw); gumbel = the "
                "official Gumbel-max (one per vocabulary entry); the same distribution. auto = inverse_cdf where "
                "every device is a CPU, else gumbel.",
    "adam_kernel": "AdamW as TF's fused ResourceApplyAdam kernel per variable (fused) or separate ops (ops); the "
                   "same update. auto = fused where every device is a CPU, else ops.",
    "jit_compile": "XLA-compile the whole train step. Unset = auto: off where every device is a CPU, on for "
                   "GPUs and TPUs.",
    "graph_optimizer": "TF's graph optimizer (grappler) for the training loop: auto = off where every device "
                       "is a CPU (start-up seconds, no step time saved: bench/startup_bench.py), on elsewhere.",
    "step_loop": "Where a call's steps (up to --steps_per_loop) loop: graph = inside one tf.function (what TPUs "
                 "need; no host round trip between steps); host = one step per call of a step function, looped in "
                 "Python (only the step is traced: a shorter first step, docs/performance.md). The same steps "
                 "either way. auto = host where every device is a CPU, else graph.",
    "gradient_accumulation_steps": "Split each replica's batch into K micro-batches and sum their gradients before "
                                   "one update (the same update, less memory). Unset = auto: on CPUs the fewest "
                                   "micro-batches whose activations fit the memory free at the run's start "
                                   "(recorded in the run and reused on resume), elsewhere 1.",
}
# Execution fields that configs written before they became options may hold (dropped on load).
LEGACY_EXECUTION_FIELDS = {"fused_kernels": "kernels", "dropout_masks": "dropout_masks", "sampling": "sampling",
                           "adam_fused_kernel": "adam_kernel",
                           "gradient_accumulation_steps": "gradient_accumulation_steps"}


def only_cpus(device_types) -> bool:
    """Whether every device kind in `device_types` ("CPU", "GPU", "TPU") is a CPU."""
    return set(device_types) == {"CPU"}


@dataclasses.dataclass(frozen=True)
class ExecutionOptions:
    """How a run computes its steps; `resolve` turns "auto" (and None) into the device's choice.

    Example:

    >>> ExecutionOptions().resolve({"CPU"})
    ExecutionOptions(kernels='xla_cpu', dropout_masks='16bit', sampling='inverse_cdf', adam_kernel='fused', jit_compile=False, graph_optimizer='off', step_loop='host', gradient_accumulation_steps=1)
    >>> ExecutionOptions(sampling="inverse_cdf").resolve({"GPU", "CPU"}).describe()
    'kernels=reference dropout_masks=keras sampling=inverse_cdf adam_kernel=ops jit_compile=on graph_optimizer=on step_loop=graph gradient_accumulation_steps=1'
    """

    kernels: str = "auto"
    dropout_masks: str = "auto"
    sampling: str = "auto"
    adam_kernel: str = "auto"
    jit_compile: Optional[bool] = None  # None: auto
    graph_optimizer: str = "auto"
    step_loop: str = "auto"
    gradient_accumulation_steps: Optional[int] = None  # None: auto (see `resolve`'s fitted_micro_batches)

    def __post_init__(self):
        steps = self.gradient_accumulation_steps
        if steps is not None and (not isinstance(steps, int) or steps < 1):
            raise ValueError(f"--gradient_accumulation_steps must be a positive integer, got {steps!r}")
        for name, choices in EXECUTION_CHOICES:
            if getattr(self, name) not in choices:
                raise ValueError(f"--{name} must be one of {choices}, got {getattr(self, name)!r}")

    def resolve(self, device_types, backend: str = "tensorflow", hidden_act: str = "gelu",
                fitted_micro_batches: int = 1) -> "ExecutionOptions":
        """The concrete options for a run whose replicas are on `device_types` ("CPU", "GPU", "TPU"),
        of a model whose activation is `hidden_act`; `fitted_micro_batches` is what an unset
        `gradient_accumulation_steps` becomes (the caller's memory fit, or a run's recorded value).

        Raises ValueError for a requested combination that cannot run (the XLA:CPU kernels need the
        TensorFlow backend, the exact GELU and 16-bit dropout masks) instead of falling back silently.
        """
        cpu = only_cpus(device_types)
        kernels = self.kernels if self.kernels != "auto" else (
            "xla_cpu" if cpu and backend == "tensorflow" and hidden_act == "gelu" else "reference")
        dropout_masks = self.dropout_masks if self.dropout_masks != "auto" else (
            "16bit" if cpu or kernels == "xla_cpu" else "keras")
        resolved = ExecutionOptions(
            kernels=kernels, dropout_masks=dropout_masks,
            sampling=self.sampling if self.sampling != "auto" else ("inverse_cdf" if cpu else "gumbel"),
            adam_kernel=self.adam_kernel if self.adam_kernel != "auto" else ("fused" if cpu else "ops"),
            jit_compile=self.jit_compile if self.jit_compile is not None else not cpu,
            graph_optimizer=self.graph_optimizer if self.graph_optimizer != "auto" else ("off" if cpu else "on"),
            step_loop=self.step_loop if self.step_loop != "auto" else ("host" if cpu else "graph"),
            gradient_accumulation_steps=self.gradient_accumulation_steps or fitted_micro_batches)
        if resolved.kernels == "xla_cpu" and backend != "tensorflow":
            raise ValueError(f"--kernels=xla_cpu needs the TensorFlow backend, not {backend}; use --kernels=reference")
        if resolved.kernels == "xla_cpu" and hidden_act != "gelu":
            raise ValueError(f"--kernels=xla_cpu computes the exact GELU, not hidden_act={hidden_act!r}; use "
                             "--kernels=reference")
        if resolved.kernels == "xla_cpu" and resolved.dropout_masks != "16bit":
            raise ValueError("--kernels=xla_cpu draws 16-bit dropout masks; --dropout_masks=keras needs "
                             "--kernels=reference")
        return resolved

    @classmethod
    def portable(cls) -> "ExecutionOptions":
        """TensorFlow's standard ops and no XLA, on any device: what serving SavedModels are built with
        (TF Serving compiles no XLA on CPU and fails on XLA-marked functions on GPU) and what a layer
        built without options computes."""
        return cls(kernels="reference", dropout_masks="keras", sampling="gumbel", adam_kernel="ops",
                   jit_compile=False, graph_optimizer="on", step_loop="graph", gradient_accumulation_steps=1)

    @property
    def resolved(self) -> bool:
        return "auto" not in (self.kernels, self.dropout_masks, self.sampling, self.adam_kernel,
                              self.graph_optimizer, self.step_loop) and None not in (
            self.jit_compile, self.gradient_accumulation_steps)

    def describe(self) -> str:
        """One line for the log: every option as resolved."""
        values = dataclasses.asdict(self)
        values["jit_compile"] = {None: "auto", True: "on", False: "off"}[self.jit_compile]
        values["gradient_accumulation_steps"] = self.gradient_accumulation_steps or "auto"
        return " ".join(f"{name}={value}" for name, value in values.items())


def define_execution_flags(flags) -> None:
    """The execution options as absl flags (`flags`: the `absl.flags` module), for both scripts."""
    for name, choices in EXECUTION_CHOICES:
        flags.DEFINE_enum(name, "auto", list(choices), EXECUTION_HELP[name])
    flags.DEFINE_bool("jit_compile", None, EXECUTION_HELP["jit_compile"])
    # The process's, not the run's: where compiled kernels persist changes no result (electra_tf.runtime).
    flags.DEFINE_string("xla_cache_dir", "auto", XLA_CACHE_HELP)


def execution_from_flags(values) -> ExecutionOptions:
    """The `ExecutionOptions` the parsed flags (`absl.flags.FLAGS`) ask for."""
    # --gradient_accumulation_steps is run_pretraining.py's alone (fine-tuning takes one batch per step).
    return ExecutionOptions(**{field.name: getattr(values, field.name, None)
                               for field in dataclasses.fields(ExecutionOptions)})


@dataclasses.dataclass
class TrainOptions:
    """How one pre-training run runs (the model and recipe are the `ElectraConfig`)."""

    data_dir: str | None  # None with train_text
    model_dir: str
    seed: int = 0
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_steps: int = 100
    steps_per_loop: int = 100
    execution: ExecutionOptions = ExecutionOptions()
    mixed_precision: str = "none"
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    init_checkpoint: str | None = None
    # A phase-1 run directory: this run is its phase 2 (model and optimizer state from it, step 0; see
    # electra_tf/training/restore.py). `model_dir` must be another directory (the CLI: <model_dir>/phase2).
    phase2_from: str | None = None
    stop_after_steps: int | None = None  # stop this invocation early (like a pre-emption)
    export: bool = True
    skip_nonfinite_steps: bool = False  # False: stop at a NaN/Inf loss or gradient norm
    skip_corrupt_records: bool = False  # False: stop at a corrupt input record; True: count it and go on
    input_sharding: str = "batch"  # one of INPUT_SHARDINGS
    # grpc://host:port of a tf.data service dispatcher: its workers run the input (training.data_service);
    # the input position is then not checkpointed, so a resume is not exact.
    data_service: str | None = None
    stop_signals: tuple = ()  # e.g. (signal.SIGTERM,): checkpoint at the step reached and return
    # Held-out evaluation (training.evaluation): the data dir's held-out shards unless eval_data_dir is set.
    eval_data_dir: str | None = None
    eval_every_steps: int | None = None  # None: every save_checkpoints_steps; 0: only at the end
    eval_batches: int = 20  # 0: no evaluation
    eval_batch_size: int | None = None  # None: train_batch_size
    # Data options of --train_text (electra_tf/training/text_input.py): raw text files instead of data_dir's
    # shards (data_dir None), tokenised with vocab_file and packed as data_prep does; eval_fraction: documents
    # held out by electra_tf.text.held_out (not trained on; evaluated on unless eval_data_dir is set).
    train_text: str | None = None  # comma-separated globs
    vocab_file: str | None = None
    do_lower_case: bool = True
    short_seq_prob: float = 0.05
    single_segment_prob: float = 0.1
    eval_fraction: float = 0.0


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
    save_checkpoints_steps: Optional[int] = None  # None: once per epoch (there is one at each epoch end anyway)
    execution: ExecutionOptions = ExecutionOptions()


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
