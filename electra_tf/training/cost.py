"""What one pre-training step costs on this machine: memory, time and the run's ETA.

Used where every device is a CPU, so that a user who types `--model_size=base` on a laptop sees
the price before paying it: the activations a batch keeps for the backward pass (the batch is then
split into micro-batches that fit, the same update), a rough step time from the training FLOPs
(`electra_tf.model.flops`) and a matmul probe, then the measured time of the first steps.

The memory model counts float32 tensors kept for the backward pass per example and per layer:
attention scores, probabilities and the dropped probabilities (`12·A·S²` bytes), about ten
`S·H` tensors (Q, K, V, context, projections, residuals, LayerNorm) and three `S·I` ones (FFN
pre- and post-activation, dropout). It is an upper bound of what TensorFlow holds, not a
measurement; the margin in `micro_batches_to_fit` covers the rest.

Example:

>>> from electra_tf.config import get_config
>>> config = get_config("base")
>>> round(activation_bytes_per_example(config) / 2**30, 2)  # GiB per 512-token example
1.08
>>> micro_batches_to_fit(config, per_replica_batch=256, budget_bytes=20 * 2**30)
32
>>> format_duration(90), format_duration(7200), format_duration(3e8)
('1.5 min', '2.0 h', '9.5 years')
"""

from __future__ import annotations

import functools
import os
import time

from electra_tf import objective_registry
from electra_tf.config import ElectraConfig
from electra_tf.model.flops import train_flops_per_step

FLOAT_BYTES = 4
# Fraction of the available memory a micro-batch's activations may take: the rest holds the
# weights, gradients, optimizer state, the input pipeline and what the model leaves out.
MEMORY_MARGIN = 0.5


def _encoder_bytes(seq: int, hidden: int, heads: int, intermediate: int, layers: int) -> int:
    attention = 3 * heads * seq * seq  # scores, probabilities, dropped probabilities
    return FLOAT_BYTES * layers * (attention + 10 * seq * hidden + 3 * seq * intermediate)


def activation_bytes_per_example(config: ElectraConfig, seq_length: int | None = None) -> int:
    """Bytes of activations one example keeps for the backward pass (both encoders, float32)."""
    seq = seq_length or config.max_seq_length
    roles = objective_registry.get(config.objective).encoder_roles(config)
    total = 0
    for role in roles:
        encoder = config.encoder(role)
        total += _encoder_bytes(seq, encoder.hidden_size, encoder.num_heads, encoder.intermediate_size,
                                encoder.num_layers)
    return total + FLOAT_BYTES * seq * config.embedding_size * 4  # embeddings, their sum and LayerNorm


def parameter_count(config: ElectraConfig) -> int:
    """Trainable parameters of both encoders and the shared embeddings (biases and norms included)."""
    embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * config.embedding_size
    total = embeddings
    for role in ("generator", "discriminator"):
        e = config.encoder(role)
        layer = 4 * e.hidden_size ** 2 + 2 * e.hidden_size * e.intermediate_size + 9 * e.hidden_size
        total += e.num_layers * layer + config.embedding_size * e.hidden_size
    return total


def state_bytes(config: ElectraConfig) -> int:
    """Weights, gradients and Adam's two moments, float32."""
    return 4 * FLOAT_BYTES * parameter_count(config)


def micro_batches_to_fit(config: ElectraConfig, per_replica_batch: int, budget_bytes: int) -> int:
    """The fewest micro-batches K (a divisor of the batch) whose activations fit `budget_bytes`.

    `budget_bytes` is the memory available; K's micro-batch keeps its activations under
    `MEMORY_MARGIN` of what is left after the weights and optimizer state.
    """
    room = max(budget_bytes - state_bytes(config), 0) * MEMORY_MARGIN
    per_example = activation_bytes_per_example(config)
    for k in range(1, per_replica_batch + 1):
        if per_replica_batch % k == 0 and per_example * (per_replica_batch // k) <= room:
            return k
    return per_replica_batch


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else the physical memory, else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@functools.cache
def matmul_flops_per_second(size: int = 1024, repeats: int = 5) -> float:
    """This machine's float32 matmul rate as TensorFlow runs it (a probe of a few tenths of a second, taken
    once per process: every CPU run's `pretraining.train` logs its cost with it)."""
    import tensorflow as tf

    a = tf.random.stateless_uniform([size, size], seed=[1, 2])
    tf.linalg.matmul(a, a).numpy()  # warm-up
    started = time.perf_counter()
    for _ in range(repeats):
        b = tf.linalg.matmul(a, a)
    b.numpy()
    return repeats * 2 * size ** 3 / max(time.perf_counter() - started, 1e-9)


def format_duration(seconds: float) -> str:
    """A duration a person reads at a glance: seconds, minutes, hours, days or years."""
    for unit, length in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 1.5 * length or (unit == "min" and seconds >= 60):
            return f"{seconds / length:.1f} {unit}"
    return f"{seconds:.1f} s"


# Who chose a run's micro-batches (`cpu_cost_lines`' `chosen_by`).
MICRO_BATCH_CHOOSERS = ("flag", "memory", "recorded")


def cpu_cost_lines(config: ElectraConfig, flops_per_second: float, micro_batches: int = 1,
                   chosen_by: str = "flag") -> list[str]:
    """The log lines of a CPU-only run before its first step: batch, memory, rough time per step, ETA.

    `micro_batches` per replica batch, chosen by "flag" (--gradient_accumulation_steps), "memory"
    (`micro_batches_to_fit` at the start) or "recorded" (the run's own choice, reused on resume).
    """
    flops = train_flops_per_step(config)
    step_seconds = flops / max(flops_per_second, 1.0)
    lines = [f"Only CPUs here: {config.model_size}'s recipe runs as it is, global batch {config.train_batch_size} "
             f"x {config.max_seq_length} tokens, {flops:.2g} training FLOPs per step."]
    if micro_batches > 1:
        batch_gib = activation_bytes_per_example(config) * config.train_batch_size / 2**30
        split = (f"each batch runs as {micro_batches} micro-batches with their gradients summed (the same "
                 "update)")
        why = {"flag": "as --gradient_accumulation_steps asks",
               "memory": f"since its activations (about {batch_gib:.0f} GiB) exceed the memory free at the start "
                         "(--gradient_accumulation_steps sets it)",
               "recorded": "as the run chose at its start (recorded in the run, so the resumed steps are computed "
                           "as before)"}[chosen_by]
        lines.append(f"{split[0].upper()}{split[1:]}, {why}.")
    lines.append(f"Rough estimate before the first step, at this CPU's matmul rate of {flops_per_second / 1e9:.0f} "
                 f"GFLOP/s: {format_duration(step_seconds)} per step, {format_duration(step_seconds * config.num_train_steps)}"
                 f" for the run's {config.num_train_steps:,} steps. The first steps are timed and the ETA follows; "
                 "--train_batch_size and --num_train_steps make a shorter run, a GPU or TPU a faster one.")
    return lines
