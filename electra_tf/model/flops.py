"""Training FLOPs of one pre-training step, for equal-compute comparisons.

Counted as in the ELECTRA paper's compute comparisons: matrix-multiply FLOPs of
the forward pass (2 FLOPs per multiply-add), times 3 for forward + backward
(the backward pass costs about twice the forward). Embedding look-ups,
softmaxes, layer norms and the like are left out: they are a few percent at
these sizes. Per sequence of length S:

* encoder of width H, L layers, FFN I, embedding size E:
  `2·S·E·H` (embedding projection, when E ≠ H) `+ L · 2·S·(4·H² + 2·S·H + 2·H·I)`
  (Q, K, V and output projections; attention scores and context; the FFN);
* MLM head at P positions: `2·P·(H·E + E·V)` (dense to E, tied output to V);
* discriminator head (also the copy gate of `all_tokens_mlm`): `2·S·(H² + H)`.

Each objective counts its own composition (`forward_flops_per_sequence` asks
the config's objective, `model/objectives/`) from the parts below. RTD-style
objectives run the generator (MLM head at the `max_predictions`
masked slots) and the discriminator; `mlm` runs one encoder and its MLM head;
`replace_mlm` adds the main model's MLM head at the masked slots;
`all_tokens_mlm` its MLM head at all S positions plus the copy gate. The
generator is included in full (×3: it is trained by its own MLM loss).
`electric` runs two generator-shaped towers (their one-directional attention is
computed over all S keys and masked, so each costs a full encoder), the cloze
head at all S positions on the towers' concatenated `2·H_gen` states, the
discriminator and its (energy) head.

The generator options change only the generator's part: `untied_generator=False`
runs the discriminator's encoder as the generator (a discriminator-size
generator: its FLOPs are counted again, it runs twice), `untied_generator_embeddings`
makes the generator's embedding size its width (no projection, head to H_gen),
and `uniform_generator` has no generator forward or backward at all.

Example:

>>> from electra_tf.config import get_config
>>> from electra_tf.model.flops import train_flops_per_step
>>> round(train_flops_per_step(get_config("mini")) / 1e12, 2)  # TFLOPs, batch 128 × 128
0.43
"""

from electra_tf import objective_registry
from electra_tf.config import ElectraConfig

BACKWARD_FACTOR = 3  # forward + backward ≈ 3 × forward


def encoder_forward_flops(seq_length, embedding_size, hidden_size, num_layers, intermediate_size) -> int:
    projection = 2 * seq_length * embedding_size * hidden_size if embedding_size != hidden_size else 0
    per_layer = 2 * seq_length * (4 * hidden_size ** 2 + 2 * seq_length * hidden_size
                                  + 2 * hidden_size * intermediate_size)
    return projection + num_layers * per_layer


def mlm_head_forward_flops(num_positions, hidden_size, embedding_size, vocab_size) -> int:
    return 2 * num_positions * (hidden_size * embedding_size + embedding_size * vocab_size)


def discriminator_head_forward_flops(seq_length, hidden_size) -> int:
    return 2 * seq_length * (hidden_size ** 2 + hidden_size)


def encoder_of(config: ElectraConfig, role: str, seq_length: int, embedding_size=None) -> tuple[int, int]:
    """(forward FLOPs, width) of the `role` encoder."""
    encoder = config.encoder(role)
    flops = encoder_forward_flops(seq_length, embedding_size or config.embedding_size, encoder.hidden_size,
                                  encoder.num_layers, encoder.intermediate_size)
    return flops, encoder.hidden_size


def forward_flops_per_sequence(config: ElectraConfig, seq_length=None) -> int:
    """Forward matmul FLOPs for one sequence under `config.objective` (the objective's count)."""
    seq = seq_length or config.max_seq_length
    return objective_registry.get(config.objective).forward_flops_per_sequence(config, seq)


def train_flops_per_step(config: ElectraConfig, batch_size=None, seq_length=None) -> int:
    """Training FLOPs of one step: 3 × forward × global batch."""
    batch = batch_size or config.train_batch_size
    return BACKWARD_FACTOR * batch * forward_flops_per_sequence(config, seq_length)


def steps_for_flops(config: ElectraConfig, total_flops: float) -> int:
    """The number of steps of `config` that spends `total_flops` (rounded up)."""
    per_step = train_flops_per_step(config)
    return int(-(-total_flops // per_step))
