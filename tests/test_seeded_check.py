"""bench.seeded_check's comparison: model scalars only, every step, a missing step is a failure."""

import math

import pytest

from bench import seeded_check


def test_timings_are_not_compared_and_every_step_is():
    rows = [{"step": 1, "loss": 2.0, "examples_per_second": 40.0, "disc_auc": 0.5},
            {"step": 2, "loss": 1.5, "examples_per_second": 55.0, "disc_auc": 0.6}]
    assert seeded_check.model_scalars(rows) == {"disc_auc": [0.5, 0.6], "loss": [2.0, 1.5]}
    slower = [dict(row, examples_per_second=1.0) for row in rows]
    assert seeded_check.max_difference(seeded_check.model_scalars(rows), seeded_check.model_scalars(slower)) == 0.0


def test_the_largest_difference_and_a_missing_step():
    before = {"loss": [2.0, 1.5], "gen_loss": [1.0, 1.0]}
    assert seeded_check.max_difference(before, {"loss": [2.0, 1.5 + 3e-6], "gen_loss": [1.0, 1.0]}) == \
        pytest.approx(3e-6)
    assert math.isinf(seeded_check.max_difference(before, {"loss": [2.0], "gen_loss": [1.0, 1.0]}))


def test_the_dropout_option_sets_the_runs_hparams_and_nothing_else():
    assert seeded_check.recipe() == seeded_check.RECIPE
    changed = seeded_check.recipe(0.0)
    assert changed[1] == '--hparams={"num_layers": 2, "dropout_rate": 0.0}'
    assert [f for f in changed if not f.startswith("--hparams")] == [f for f in seeded_check.RECIPE
                                                                      if not f.startswith("--hparams")]
