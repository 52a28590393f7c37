"""Gradient accumulation: K micro-batches give the update of one K× larger batch; K is how a step is
computed (an execution option, recorded in the run), not a hyper-parameter."""

import json
import logging

import pytest

from electra_tf.config import ElectraConfig, get_config
from electra_tf.options import ExecutionOptions
from electra_tf.training import cost, distribution
from pretrain_testutil import write_shards
from test_training import assert_same_training, run, small


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=96, num_shards=3)
    return path


def micro_batches(k: int) -> ExecutionOptions:
    return ExecutionOptions(gradient_accumulation_steps=k)


@pytest.mark.parametrize("objective", ["rtd", "mlm"])
def test_accumulated_micro_batches_equal_one_large_batch(data_dir, tmp_path, objective):
    config = small(objective=objective, train_batch_size=8, num_train_steps=3, num_warmup_steps=0, dropout_rate=0.0)
    whole = run(config, data_dir, str(tmp_path / "whole"), export=False, execution=micro_batches(1))
    accumulated = run(config, data_dir, str(tmp_path / "acc"), export=False, execution=micro_batches(4))
    assert_same_training(whole, accumulated, str(tmp_path / "whole"), str(tmp_path / "acc"),
                         ("step_loss", "gen_loss", "gen_accuracy", "grad_norm"))


def test_micro_batches_are_an_execution_option_not_a_hyper_parameter():
    with pytest.raises(ValueError, match="'gradient_accumulation_steps' is an execution option now"):
        small(gradient_accumulation_steps=2)
    stored = {**get_config("tiny").to_dict(), "gradient_accumulation_steps": 4}  # a run config written before
    assert ElectraConfig.from_dict(stored) == get_config("tiny")
    with pytest.raises(ValueError, match="--gradient_accumulation_steps must be a positive integer"):
        ExecutionOptions(gradient_accumulation_steps=0)


def test_who_chose_the_micro_batches(monkeypatch):
    config = get_config("tiny", train_batch_size=8)
    monkeypatch.setattr(cost, "micro_batches_to_fit", lambda config, batch, budget: 2)
    choose = distribution.choose_micro_batches
    assert choose(None, {"GPU"}, config, 1) == distribution.MicroBatches(1, "flag")  # memory is a CPU decision
    assert choose(None, {"CPU"}, config, 1) == distribution.MicroBatches(2, "memory")
    assert choose(4, {"CPU"}, config, 1) == distribution.MicroBatches(4, "flag")
    assert choose(None, {"CPU"}, config, 1, recorded=4) == distribution.MicroBatches(4, "recorded")
    grown = choose(None, {"CPU"}, config, 1, recorded=1)  # less memory free now than at the start
    assert (grown.count, grown.chosen_by) == (2, "memory") and "does not fit the 1 micro-batch(es)" in grown.note
    changed = choose(1, {"CPU"}, config, 1, recorded=2)
    assert changed.count == 1 and "instead of the 2 this run recorded" in changed.note and "\n" not in changed.note


def test_the_cost_lines_say_who_chose_the_micro_batches():
    config = get_config("tiny", train_batch_size=8)
    by_flag = " ".join(cost.cpu_cost_lines(config, 1e10, 2, "flag"))
    assert "as --gradient_accumulation_steps asks" in by_flag and "exceed" not in by_flag
    assert "exceed the memory free at the start" in " ".join(cost.cpu_cost_lines(config, 1e10, 2, "memory"))
    assert "micro-batches" not in " ".join(cost.cpu_cost_lines(config, 1e10, 1, "flag"))


def test_a_resume_reuses_the_micro_batches_the_run_chose_from_memory(data_dir, tmp_path, monkeypatch, caplog):
    """On CPUs K is chosen from the memory free at the start: a resume with more memory free must not
    change it (the resumed steps would sum their gradients in another order)."""
    config = small(objective="mlm", train_batch_size=8, num_train_steps=3, num_warmup_steps=0)  # mlm: quicker
    model_dir = tmp_path / "run"
    monkeypatch.setattr(cost, "micro_batches_to_fit", lambda config, batch, budget: 2)
    run(config, data_dir, str(model_dir), stop_after_steps=1, export=False)
    assert json.loads((model_dir / "run_config.json").read_text())["training"]["execution"]["gradient_accumulation_steps"] == 2
    monkeypatch.setattr(cost, "micro_batches_to_fit", lambda config, batch, budget: 1)  # more memory now
    with caplog.at_level(logging.INFO):
        run(config, data_dir, str(model_dir), stop_after_steps=2, export=False)
    assert json.loads((model_dir / "run_config.json").read_text())["training"]["execution"]["gradient_accumulation_steps"] == 2
    assert "as the run chose at its start" in caplog.text and "this run recorded" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        run(config, data_dir, str(model_dir), export=False, execution=micro_batches(4))
    assert "resuming with 4 micro-batch(es) per replica batch (--gradient_accumulation_steps) instead of the 2 " \
           "this run recorded" in caplog.text
    assert json.loads((model_dir / "run_config.json").read_text())["training"]["execution"]["gradient_accumulation_steps"] == 4
