"""Ablations: our step under other `ExecutionOptions`, interleaved with the unchanged step.

Each ablation switches options of the code under test, as the scripts' flags do: nothing is
patched, so the variant is a step a user can run. An ablation names the fields it changes; its
options are the baseline (the scripts' defaults on the bench's devices) with those fields
replaced, validated by `ExecutionOptions.resolve` (an impossible combination raises ValueError).
The ratio "ours ÷ this" of an ablation is its time per step ÷ the baseline's: how much the option
it switches off is worth.
"""

import dataclasses

from electra_tf.options import ExecutionOptions

# The defaults where there is a GPU or TPU: Keras ops, Keras dropout, Gumbel-max,
# per-op Adam, whole-step XLA, grappler on, the steps looped in the graph.
ACCELERATOR_DEFAULTS = ExecutionOptions().resolve({"CPU", "GPU"})


@dataclasses.dataclass(frozen=True)
class Ablation:
    """`changes`: the `ExecutionOptions` fields this ablation sets; `undoes`: what it measures."""

    name: str
    changes: tuple  # ((field, value), ...)
    undoes: str
    finetuning: bool = True  # whether it applies to the fine-tuning step

    def options(self, baseline: ExecutionOptions, device_types) -> ExecutionOptions:
        return dataclasses.replace(baseline, **dict(self.changes)).resolve(device_types)

    def describe(self) -> str:
        return " ".join(f"{field}={value}" for field, value in self.changes)


ABLATIONS = (
    Ablation("reference_kernels", (("kernels", "reference"),),
             "the XLA:CPU element-wise kernels (keras-hub's layer call, Keras' LayerNorm and GELU instead)"),
    Ablation("keras_dropout", (("kernels", "reference"), ("dropout_masks", "keras")),
             "the 16-bit dropout masks (compare with reference_kernels, which keeps them)"),
    Ablation("gumbel_sampling", (("sampling", "gumbel"),),
             "the two-level inverse-CDF sampling (Gumbel-max: one uniform per vocabulary entry instead)",
             finetuning=False),
    Ablation("ops_adam", (("adam_kernel", "ops"),),
             "the fused ResourceApplyAdam kernel (AdamW as separate ops instead)"),
    Ablation("grappler_on", (("graph_optimizer", "on"),),
             "running the training loop without TF's graph optimizer"),
    Ablation("graph_loop", (("step_loop", "graph"),),
             "looping the steps on the host (each call's steps in one tf.while_loop instead)"),
    Ablation("xla", (("kernels", "reference"), ("dropout_masks", "keras"), ("sampling", "gumbel"),
                     ("jit_compile", True)),
             "the CPU path: the accelerators' whole-step XLA with their layer ops, dropout and sampling"),
    Ablation("accelerator_defaults", tuple(dataclasses.asdict(ACCELERATOR_DEFAULTS).items()),
             "every CPU default: the options a GPU or TPU run resolves to, run on this CPU"),
)
BY_NAME = {ablation.name: ablation for ablation in ABLATIONS}
PRETRAINING = tuple(ablation.name for ablation in ABLATIONS)
FINETUNING = tuple(ablation.name for ablation in ABLATIONS if ablation.finetuning)


def parse(names: str, allowed: tuple) -> list:
    """The ablations of a comma-separated list; ValueError for a name not in `allowed`."""
    chosen = [name for name in names.split(",") if name]
    unknown = [name for name in chosen if name not in allowed]
    if unknown:
        raise ValueError(f"unknown ablations {unknown}; choose from {', '.join(allowed)}")
    return [BY_NAME[name] for name in chosen]


def variants(chosen: list, baseline: ExecutionOptions, device_types, notes: list) -> dict:
    """{name: options} of the chosen ablations; one that cannot run here, or runs the baseline's
    options on these devices, is left out with a note."""
    out = {}
    for ablation in chosen:
        try:
            options = ablation.options(baseline, device_types)
        except ValueError as e:
            notes.append(f"ablation {ablation.name}: cannot run ({e})")
            continue
        if options == baseline:
            notes.append(f"ablation {ablation.name}: the baseline's options on these devices; left out")
            continue
        out[ablation.name] = options
    return out
