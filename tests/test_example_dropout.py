"""Dropout keyed by the example (`model.example_dropout`): one trajectory however the batch is split.

At `dropout_rate` 0.1 a run on one device, on 2 mirrored replicas, with K = 2 micro-batches and with
both (2 × 2) logs the same losses at every step (1e-5 relative) and ends with the same weights (1e-5
absolute), under the CPU option set and the accelerator option set (`--jit_compile`, Keras-style
masks); bf16's first step agrees within a tolerance that another seed exceeds. Before, each replica
advanced its own copy of every dropout layer's seed generator, so the layouts drew different masks.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model import example_dropout
from electra_tf.model.layers import ElectraDropout
from electra_tf.ops import random_bits
from electra_tf.options import ExecutionOptions
from pretrain_testutil import mirrored_cpus, write_shards
from test_training import assert_same_training, run, small

CPU_SET = ExecutionOptions().resolve({"CPU"})
ACCELERATOR_SET = ExecutionOptions().resolve({"GPU"})
OPTION_SETS = {"cpu": CPU_SET, "accelerator": ACCELERATOR_SET}
LOGGED = ("step_loss", "gen_loss", "disc_loss", "gen_accuracy", "grad_norm")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=64, num_shards=2)
    return path


def streams_for(indices, seed=1, step=3):
    return example_dropout.example_streams(seed, step, tf.constant(indices, tf.int64))


@pytest.mark.parametrize("halves", [True, False])
@pytest.mark.parametrize("shape", [(6, 3, 20, 11), (6, 20, 11), (6, 11)])
def test_an_elements_bits_depend_on_its_example_and_coordinates_not_the_batch(shape, halves):
    """Examples 2…4 alone, trimmed to fewer positions and units, get the whole batch's bits there."""
    whole = random_bits.example_keyed_bits(tf.zeros(shape), streams_for(range(6)), 5, halves).numpy()
    cut = (slice(2, 5),) + tuple(slice(0, d - 3) for d in shape[1:])
    part = random_bits.example_keyed_bits(tf.zeros(whole[cut].shape), streams_for(range(2, 5)), 5, halves).numpy()
    np.testing.assert_array_equal(whole[cut], part)
    assert whole.dtype == (np.uint16 if halves else np.uint32)
    other_site = random_bits.example_keyed_bits(tf.zeros(shape), streams_for(range(6)), 6, halves).numpy()
    other_step = random_bits.example_keyed_bits(tf.zeros(shape), streams_for(range(6), step=4), 5, halves).numpy()
    for other in (other_site, other_step):
        assert np.mean(other == whole) < 0.01
    assert np.mean(whole[0] == whole[1]) < 0.01  # two examples: two streams


def test_keyed_bits_are_uniform():
    bits = random_bits.example_keyed_bits(tf.zeros([4, 2, 64, 64]), streams_for(range(4)), 0).numpy()
    counts = np.bincount(bits.ravel() >> 12, minlength=16)  # 16 bins of 4096 values each
    expected = bits.size / 16
    assert np.sum((counts - expected) ** 2 / expected) < 40  # χ², 15 degrees of freedom: p ≈ 5e-4


@pytest.mark.parametrize("masks", ["16bit", "keras"])
def test_the_layer_drops_the_same_elements_of_an_example_in_any_batch(masks):
    layer = ElectraDropout(0.3, masks=masks)
    x = tf.ones([4, 5, 16])
    with example_dropout.keyed_by(streams_for(range(4))):
        whole = layer(x, training=True).numpy()
    with example_dropout.keyed_by(streams_for([1, 2])):
        part = layer(x[1:3], training=True).numpy()
    np.testing.assert_array_equal(whole[1:3], part)
    assert abs((whole == 0).mean() - 0.3) < 0.05
    np.testing.assert_allclose(whole[whole != 0], 1 / 0.7, rtol=1e-4)


def test_sites_are_numbered_in_call_order_in_each_scope():
    layer = ElectraDropout(0.5)
    x = tf.ones([2, 3, 32])
    with example_dropout.keyed_by(streams_for([0, 1])):
        first, second = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    with example_dropout.keyed_by(streams_for([0, 1])):
        again = layer(x, training=True).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, second)


def train(data_dir, model_dir, execution, k=1, mirrored=False, precision="none", seed=0, steps=3):
    config = small(dropout_rate=0.1, train_batch_size=8, num_train_steps=steps)
    execution = dataclasses.replace(execution, gradient_accumulation_steps=k)
    return run(config, data_dir, str(model_dir), strategy=mirrored_cpus() if mirrored else None, export=False,
               execution=execution, mixed_precision=precision, seed=seed)


def assert_same_trajectory(data_dir, tmp_path, execution, layouts):
    one = train(data_dir, tmp_path / "one", execution)
    assert [h["step"] for h in one] == [1, 2, 3]
    for k, mirrored in layouts:
        name = f"k{k}_{'mirrored' if mirrored else 'one'}"
        other = train(data_dir, tmp_path / name, execution, k=k, mirrored=mirrored)
        assert_same_training(one, other, str(tmp_path / "one"), str(tmp_path / name), LOGGED)


@pytest.mark.parametrize("option_set", ["cpu", "accelerator"])
def test_two_replicas_times_two_micro_batches_follow_one_devices_trajectory_with_dropout(
        data_dir, tmp_path, option_set):
    """2 × 2 (mirrored and accumulated at once): every step's losses and the weights after 3 steps."""
    assert_same_trajectory(data_dir, tmp_path, OPTION_SETS[option_set], [(2, True)])


@pytest.mark.slow  # ~2 min per option set on 2 cores; the default suite runs 2 × 2, which needs both
@pytest.mark.parametrize("option_set", ["cpu", "accelerator"])
def test_two_replicas_and_two_micro_batches_each_follow_one_devices_trajectory_with_dropout(
        data_dir, tmp_path, option_set):
    assert_same_trajectory(data_dir, tmp_path, OPTION_SETS[option_set], [(1, True), (2, False)])



# Relative, step 1: the same masks leave only the order of sums (measured 1e-7 under the CPU set); the per-replica
# masks before this stream moved the losses by 7e-4 to 1.7e-3, another seed by far more.
BF16_TOLERANCE = 1e-4


def first_step_losses(data_dir, model_dir, execution, seed=0, **layout):
    (first,) = train(data_dir, model_dir, execution, precision="bf16", seed=seed, steps=1, **layout)
    return first


@pytest.mark.parametrize("option_set", ["cpu", pytest.param("accelerator", marks=pytest.mark.slow)])
def test_bf16_first_step_agrees_within_a_tolerance_another_seed_exceeds(data_dir, tmp_path, option_set):
    execution = OPTION_SETS[option_set]
    one = first_step_losses(data_dir, tmp_path / "one", execution)
    split = first_step_losses(data_dir, tmp_path / "split", execution, k=2, mirrored=True)
    other_seed = first_step_losses(data_dir, tmp_path / "seed1", execution, seed=1)
    names = ("gen_loss", "disc_loss")
    for name in names:
        assert abs(split[name] - one[name]) <= BF16_TOLERANCE * abs(one[name]), (name, split[name], one[name])
    assert any(abs(other_seed[name] - one[name]) > BF16_TOLERANCE * abs(one[name]) for name in names), \
        (other_seed, one)
