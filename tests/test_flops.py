"""Training FLOPs per step: equal a hand computation, and order the objectives sensibly."""

import pytest

from electra_tf.config import get_config
from electra_tf.model.flops import forward_flops_per_sequence, steps_for_flops, train_flops_per_step


def hand_count_rtd_tiny():
    """ELECTRA `tiny` (S=128, E=64, H=128, L=2, I=512; generator 32 wide, 1 layer, I=128; V=8192)."""
    s, e, v, p = 128, 64, 8192, 19  # p = int((0.15 + 0.005) × 128) masked slots
    disc_layer = 2 * s * (4 * 128 * 128 + 2 * s * 128 + 2 * 128 * 512)  # 2·S·(4H² + 2SH + 2HI)
    gen_layer = 2 * s * (4 * 32 * 32 + 2 * s * 32 + 2 * 32 * 128)
    disc = 2 * s * e * 128 + 2 * disc_layer  # projection 64 → 128, two layers
    gen = 2 * s * e * 32 + 1 * gen_layer  # projection 64 → 32, one layer
    gen_head = 2 * p * (32 * e + e * v)  # dense to E, then the tied output over the vocabulary
    disc_head = 2 * s * (128 * 128 + 128)  # dense(H) + the logit
    return disc + gen + gen_head + disc_head


def test_rtd_tiny_equals_the_hand_computation():
    config = get_config("tiny")
    assert forward_flops_per_sequence(config) == hand_count_rtd_tiny() == 149_532_672
    assert train_flops_per_step(config) == 3 * 32 * hand_count_rtd_tiny()


def test_objectives_differ_only_by_their_heads():
    rtd = forward_flops_per_sequence(get_config("mini"))
    assert forward_flops_per_sequence(get_config("mini", objective="rtd_masked_only")) == rtd
    mlm = forward_flops_per_sequence(get_config("mini", objective="mlm"))
    replace = forward_flops_per_sequence(get_config("mini", objective="replace_mlm"))
    all_tokens = forward_flops_per_sequence(get_config("mini", objective="all_tokens_mlm"))
    assert mlm < rtd < replace < all_tokens


@pytest.mark.parametrize("objective", ["mlm", "all_tokens_mlm"])
def test_steps_for_flops_spends_at_least_the_budget(objective):
    config = get_config("mini", objective=objective)
    budget = train_flops_per_step(get_config("mini")) * 1500
    steps = steps_for_flops(config, budget)
    assert train_flops_per_step(config) * steps >= budget > train_flops_per_step(config) * (steps - 1)


def test_electric_counts_two_generator_towers_and_the_cloze_head_at_every_position():
    s, e, v = 128, 64, 8192
    tower = 2 * s * e * 32 + 2 * s * (4 * 32 * 32 + 2 * s * 32 + 2 * 32 * 128)  # one 1-layer generator encoder
    disc = 2 * s * e * 128 + 2 * 2 * s * (4 * 128 * 128 + 2 * s * 128 + 2 * 128 * 512)
    cloze_head = 2 * s * (2 * 32 * e + e * v)  # on the towers' concatenated 2 × 32 states, all S positions
    energy_head = 2 * s * (128 * 128 + 128)
    electric = get_config("tiny", objective="electric")
    assert forward_flops_per_sequence(electric) == 2 * tower + cloze_head + disc + energy_head
    assert forward_flops_per_sequence(electric) > forward_flops_per_sequence(get_config("tiny"))
