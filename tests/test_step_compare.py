"""bench/step_compare.py reads our step's rate and first step out of a step_bench report (the rest runs step_bench
itself)."""

import pytest

from bench import step_compare


def test_our_rate_and_first_step_are_read_from_the_one_group_that_holds_ours():
    report = {"groups": [{"name": "pipeline", "results": {}},
                         {"name": "small/fp32", "results": {"ours": {"first_step_s": 21.5,
                                                                     "rounds": [{"seq_s": 6.25, "wall_s": 1.0}]}}}]}
    assert step_compare.ours_timings(report) == (6.25, 21.5)
    with pytest.raises(ValueError):  # two rounds: the comparison times one per run
        step_compare.ours_timings({"groups": [{"results": {"ours": {"first_step_s": 1,
                                                                    "rounds": [{"seq_s": 1}, {"seq_s": 2}]}}}]})


def test_each_run_is_the_step_bench_of_our_small_fp32_step():
    command = step_compare.bench_command(3, "out.json")
    assert command[1:4] == ["-m", "bench.step_bench", "--sizes=small"] and "--only=ours" in command
    assert "--rounds=1" in command and "--steps=3" in command and command[-1] == "--json_out=out.json"


def test_the_precision_option_reaches_each_run():
    assert "--precisions=bf16" in step_compare.bench_command(3, "out.json", "bf16")
    assert "--precisions=fp32" in step_compare.bench_command(3, "out.json")
