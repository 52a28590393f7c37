"""The objectives experiment's bookkeeping: equal compute, caching, learning-rate choice, the report."""

import json

import pytest

from experiments import compare_objectives as co


def test_equal_compute_steps_never_fewer_than_rtd():
    budget = co.BUDGETS["cpu"]
    assert co.arm_steps(budget, "rtd") == 1500
    mlm = co.arm_compute(budget, "mlm")
    rtd = co.arm_compute(budget, "rtd")
    assert mlm["steps"] > 1500 and rtd["pretrain_flops"] <= mlm["pretrain_flops"] < rtd["pretrain_flops"] * 1.001
    assert co.arm_steps(budget, "all_tokens_mlm") == 1500  # costlier per step: same examples, more FLOPs
    assert co.arm_compute(budget, "none")["pretrain_flops"] == 0
    assert rtd["examples"] == 192_000


def write_result(work_dir, arm, task, lr, seed, value):
    done = co.finetune_dir(work_dir, arm, task, lr, seed) / "result.json"
    co.write_json_atomic(done, {"metric": value})


def test_cached_runs_are_collected_and_the_better_stsb_median_picks_the_lr(tmp_path):
    budget = co.BUDGETS["cpu"]
    for seed, (low, high) in enumerate([(60.0, 70.0), (62.0, 50.0), (61.0, 71.0)]):
        write_result(tmp_path, "rtd", "STS-B", 1e-4, seed, low)
        write_result(tmp_path, "rtd", "STS-B", 3e-4, seed, high)
    results = co.collect_finetune(budget, "rtd", tmp_path)
    assert results["STS-B"] == {"0.0001": [60.0, 62.0, 61.0], "0.0003": [70.0, 50.0, 71.0]}
    assert co.chosen_lr(results) == 3e-4  # medians 61 vs 70
    assert co.finetune(budget, "rtd", None, "STS-B", 1e-4, 1, tmp_path) == 62.0  # cached: no subprocess
    with pytest.raises(ValueError, match="no STS-B results"):
        co.chosen_lr({})


def test_report_writes_the_table_and_the_json_schema(tmp_path):
    budget = co.BUDGETS["cpu"]
    for arm, base in (("rtd", 70.0), ("mlm", 60.0), ("none", 50.0)):
        for task in co.TASKS:
            for seed in budget.seeds:
                write_result(tmp_path / "work", arm, task, 1e-4, seed, base + seed)
    out = tmp_path / "results"
    out.mkdir()
    results = co.report(budget, tmp_path / "work", ("rtd", "mlm", "none"), out, "python -m experiments.compare_objectives")
    saved = json.loads((out / "compare_objectives.json").read_text())
    assert set(saved["arms"]) == {"rtd", "mlm", "none"}
    rtd = saved["arms"]["rtd"]
    assert rtd["finetune"]["STS-B"]["0.0001"] == [70.0, 71.0, 72.0] and rtd["chosen_lr"] == 1e-4
    assert {"pretrain_flops", "examples", "finetune", "chosen_lr"} <= set(rtd)
    assert co.headline(results["arms"]["rtd"], "STS-B") == 71.0
    table = (out / "compare_objectives.md").read_text()
    assert "| rtd |" in table and "**71.0** [70.0, 71.0, 72.0]" in table


def test_schedule_fine_tunes_no_pretraining_right_after_the_first_arm():
    assert co.schedule(("rtd", "mlm", "none")) == ["rtd", "none", "mlm"]
    assert co.schedule(("mlm", "gdes")) == ["mlm", "gdes"]
    assert co.schedule(("none",)) == ["none"]


def test_progress_counts_each_run_once(capsys):
    progress = co.Progress(total_runs=2)
    assert progress("rtd", "STS-B", 1e-4, 0, lambda: 1.5) == 1.5
    progress("rtd", "STS-B", 1e-4, 0, lambda: 1.5)  # asked again (cached): not a new run
    progress("rtd", "MRPC", 1e-4, 0, lambda: 2.5)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and "(1/2 runs" in lines[0] and "(2/2 runs" in lines[1]


def test_run_all_runs_side_by_side_shares_the_cores_and_reports_every_run(capsys, monkeypatch):
    import threading
    import time

    monkeypatch.setattr(co.os, "cpu_count", lambda: 4)
    running, peak, seen = [0], [0], []
    lock = threading.Lock()

    def fake_run(value, threads):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            seen.append(threads)
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return value

    runs = [("rtd", "MRPC", 1e-4, seed, lambda threads, v=seed: fake_run(float(v), threads)) for seed in range(4)]
    co.run_all(runs, co.Progress(total_runs=4, jobs=2), jobs=2)
    assert peak[0] == 2 and seen == [2, 2, 2, 2]  # two at once, 4 cores // 2 jobs each
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and sorted(line.split("(")[1][:8] for line in lines) == [f"{i}/4 runs" for i in range(1, 5)]
    seen.clear()
    co.run_all(runs[:2], co.Progress(total_runs=2), jobs=1)
    assert seen == [None, None]  # one at a time: TensorFlow's default threads


def test_run_all_finishes_the_other_runs_before_raising_the_failure():
    finished = []

    def ok(threads):
        finished.append(threads)
        return 1.0

    def broken(threads):
        raise RuntimeError("[rtd] MRPC lr 0.0001 seed 0 failed")

    runs = [("rtd", "MRPC", 1e-4, 0, broken), ("rtd", "MRPC", 1e-4, 1, ok), ("rtd", "MRPC", 1e-4, 2, ok)]
    with pytest.raises(RuntimeError, match="seed 0 failed"):
        co.run_all(runs, co.Progress(total_runs=3, jobs=2), jobs=2)
    assert len(finished) == 2


def test_thread_env_limits_tensorflow_threads_only_when_asked():
    assert co.thread_env(None) is None
    env = co.thread_env(1)
    assert env["TF_NUM_INTRAOP_THREADS"] == "1" and env["TF_NUM_INTEROP_THREADS"] == "1" and "PATH" in env


def test_jobs_below_one_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit):
        co.parse_args(["--jobs=0"])
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
