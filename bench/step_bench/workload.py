"""The measured workload: model sizes, batch sizes, the synthetic batch and its masked positions.

Every implementation of a group runs on the same batch; the peers apply the masked positions our
masking draws for it at step 0 (`masked_positions`).
"""

import numpy as np
import tensorflow as tf

from electra_tf.model import flops, masking
from electra_tf.training import distribution
from electra_tf.config import get_config

SPECIAL_IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
BATCH = {"small": 32, "base": 8, "tiny": 8, "mini": 32}  # pre-training batch per size, × 128 tokens
SEQ_LENGTH = 128
FINETUNE_BATCH = 32


def batch_size(size: str) -> int:
    return BATCH.get(size, 8)


def bench_config(size: str):
    return get_config(size, max_seq_length=SEQ_LENGTH)


def synthetic_batch(rows, seq_length, vocab_size, seed=0) -> dict:
    """[CLS] a [SEP] b [SEP] rows: 90 % full length, 10 % shorter (as packed pre-training data)."""
    rng = np.random.RandomState(seed)
    ids = np.zeros((rows, seq_length), np.int32)
    mask = np.zeros_like(ids)
    segments = np.zeros_like(ids)
    for row in range(rows):
        length = seq_length if rng.rand() < 0.9 else rng.randint(16, seq_length)
        split = rng.randint(2, length - 1)
        ids[row, :length] = rng.randint(5, vocab_size, length)
        ids[row, 0], ids[row, split], ids[row, length - 1] = SPECIAL_IDS["cls"], SPECIAL_IDS["sep"], SPECIAL_IDS["sep"]
        mask[row, :length] = 1
        segments[row, split + 1:length] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def pretraining_batch(config, size: str) -> dict:
    return synthetic_batch(batch_size(size), config.max_seq_length, config.vocab_size)


def finetuning_batch(config) -> dict:
    """Sequence classification, two labels."""
    batch = synthetic_batch(FINETUNE_BATCH, SEQ_LENGTH, config.vocab_size, seed=1)
    batch["label_ids"] = np.random.RandomState(1).randint(0, 2, FINETUNE_BATCH).astype(np.int32)
    return batch


def masked_positions(config, batch) -> dict:
    """What our masking draws for this batch at step 0 (seed 0): the peers' masked positions."""
    rows = batch["input_ids"].shape[0]
    out = masking.mask_inputs(
        tf.constant(batch["input_ids"]), tf.constant(batch["input_mask"]),
        masking.example_seeds(0, 0, tf.range(rows)), mask_id=SPECIAL_IDS["mask"],
        special_ids=(SPECIAL_IDS["pad"], SPECIAL_IDS["cls"], SPECIAL_IDS["sep"], SPECIAL_IDS["mask"]),
        mask_prob=config.mask_prob,
        max_predictions=masking.max_predictions_per_seq(config.mask_prob, config.max_seq_length),
        mask_token_prob=config.mask_token_prob)
    return {"masked_ids": out.input_ids.numpy(), "positions": out.positions.numpy(),
            "original_ids": out.original_ids.numpy(), "weights": out.weights.numpy()}


def pretraining_flops(config, size: str) -> int:
    """Matmul FLOPs × 3 of one pre-training step: the same for every implementation."""
    return flops.train_flops_per_step(config, batch_size=batch_size(size))


def finetuning_flops(config) -> int:
    encoder = flops.encoder_forward_flops(SEQ_LENGTH, config.embedding_size, config.discriminator.hidden_size,
                                          config.discriminator.num_layers, config.discriminator.intermediate_size)
    return flops.BACKWARD_FACTOR * FINETUNE_BATCH * encoder


def set_policy(precision: str):
    """The Keras dtype policy for `precision` ("fp32" or "bf16")."""
    distribution.set_mixed_precision("bf16" if precision == "bf16" else "none")
