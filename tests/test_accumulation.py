"""Gradient accumulation: K micro-batches give the update of one K× larger batch."""

import pytest

from pretrain_testutil import write_shards
from test_training import assert_same_training, run, small


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=96, num_shards=3)
    return path


@pytest.mark.parametrize("objective", ["rtd", "mlm"])
def test_accumulated_micro_batches_equal_one_large_batch(data_dir, tmp_path, objective):
    common = dict(objective=objective, train_batch_size=8, num_train_steps=3, num_warmup_steps=0,
                  dropout_rate=0.0)
    whole = run(small(**common), data_dir, str(tmp_path / "whole"), export=False)
    accumulated = run(small(gradient_accumulation_steps=4, **common), data_dir, str(tmp_path / "acc"), export=False)
    assert_same_training(whole, accumulated, str(tmp_path / "whole"), str(tmp_path / "acc"),
                         ("step_loss", "gen_loss", "gen_accuracy", "grad_norm"))


def test_batch_must_split_into_the_micro_batches():
    with pytest.raises(ValueError, match="multiple of gradient_accumulation_steps=3"):
        small(train_batch_size=8, gradient_accumulation_steps=3)
