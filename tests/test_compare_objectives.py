"""The objectives experiment's bookkeeping: equal compute, caching, learning-rate choice, the report."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import compare_objectives as co
from experiments import objectives_report
from experiments.lib import protocol, records, runner, workdir


def test_equal_compute_steps_never_fewer_than_rtd():
    budget = protocol.BUDGETS["cpu"]
    assert protocol.arm_steps(budget, "rtd") == 1500
    mlm = protocol.arm_compute(budget, "mlm")
    rtd = protocol.arm_compute(budget, "rtd")
    assert mlm["steps"] > 1500 and rtd["pretrain_flops"] <= mlm["pretrain_flops"] < rtd["pretrain_flops"] * 1.001
    assert protocol.arm_steps(budget, "all_tokens_mlm") == 1500  # costlier per step: same examples, more FLOPs
    assert protocol.arm_compute(budget, "none")["pretrain_flops"] == 0
    assert rtd["examples"] == 192_000


def write_result(work_dir, run, task, lr, seed, value):
    done = workdir.finetune_dir(work_dir, run, task, lr, seed) / "result.json"
    workdir.write_json_atomic(done, {"metric": value, "commit": "abc1234"})


def test_cached_runs_are_collected_and_the_better_stsb_median_picks_the_lr(tmp_path):
    budget, run = protocol.BUDGETS["cpu"], protocol.Run("rtd")
    for seed, (low, high) in enumerate([(60.0, 70.0), (62.0, 50.0), (61.0, 71.0)]):
        write_result(tmp_path, run, "STS-B", 1e-4, seed, low)
        write_result(tmp_path, run, "STS-B", 3e-4, seed, high)
    results = records.collect_finetune(budget, run, tmp_path)
    assert results["STS-B"] == {"0.0001": [60.0, 62.0, 61.0], "0.0003": [70.0, 50.0, 71.0]}
    assert records.chosen_lr(results) == 3e-4  # medians 61 vs 70
    assert runner.finetune(budget, run, None, "STS-B", 1e-4, 1, tmp_path) == 62.0  # cached: no subprocess
    with pytest.raises(ValueError, match="no STS-B results"):
        records.chosen_lr({})


def test_a_second_pretraining_seed_is_a_run_of_its_own():
    run = protocol.Run("rtd", 1)
    assert run.name == "rtd-pseed1" and protocol.Run("rtd").name == "rtd"  # seed 0 keeps the old work folder
    command = runner.pretrain_command(protocol.BUDGETS["cpu"], run, Path("d"), Path("m"))
    assert "--seed=1" in command
    assert records.run_file(Path("r"), run).name == "rtd-pseed1.json"


def test_generator_size_arms_run_rtds_steps_with_their_generator():
    budget = protocol.BUDGETS["cpu"]
    for arm, width, heads in (("gen32", 32, 1), ("gen128", 128, 2), ("gen256", 256, 4)):
        config = protocol.arm_config(budget, arm)
        assert (config.generator.hidden_size, config.generator.num_heads, config.generator.intermediate_size) == \
            (width, heads, 4 * width)
        assert protocol.arm_steps(budget, arm) == budget.rtd_steps and protocol.generator_width(arm) == width
    assert protocol.generator_width("rtd") == 64 and protocol.generator_width("mlm") is None


def test_run_record_is_what_the_report_needs_and_the_report_needs_no_work_folder(tmp_path):
    budget, work, results_dir = protocol.BUDGETS["cpu"], tmp_path / "work", tmp_path / "results"
    for run, base in ((protocol.Run("rtd"), 70.0), (protocol.Run("rtd", 1), 66.0), (protocol.Run("mlm"), 60.0), (protocol.Run("none"), 50.0)):
        for task in protocol.TASKS:
            for seed in budget.seeds:
                write_result(work, run, task, 1e-4, seed, base + seed)
        if run.pretrained:
            log = workdir.pretrain_dir(work, run) / "train_log.jsonl"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("\n".join(json.dumps({"step": s, "loss": 1.0 / s, "disc_auc": 0.5, "examples_per_second": 40.0,
                                                  "ignored": 1}) for s in (25, 50)) + "\n")
        workdir.write_json_atomic(records.run_file(records.runs_dir_of(results_dir, budget), run), records.run_record(budget, run, work))
    record = json.loads(records.run_file(records.runs_dir_of(results_dir, budget), protocol.Run("rtd", 1)).read_text())
    assert record["pretrain_seed"] == 1 and record["finetune_commits"] == ["abc1234"]
    assert record["pretrain_curve"] == [{"step": 25, "loss": 0.04, "disc_auc": 0.5, "examples_per_second": 40.0},
                                        {"step": 50, "loss": 0.02, "disc_auc": 0.5, "examples_per_second": 40.0}]
    import shutil

    shutil.rmtree(work)  # the report reads the run files alone
    results = objectives_report.report(budget, results_dir, "python -m experiments.compare_objectives --stage=report")
    saved = json.loads((results_dir / "compare_objectives.json").read_text())
    assert set(saved["runs"]) == {"rtd-pseed0", "rtd-pseed1", "mlm-pseed0", "none-pseed0"}
    assert saved["arm_order"] == ["rtd", "mlm", "none"]  # ARMS order, though the JSON's keys are sorted
    assert saved["arms"]["rtd"]["tasks"]["STS-B"] == {"median": 69.0, "per_seed": [71.0, 67.0], "spread": 4.0}
    assert records.headline(results["runs"]["rtd-pseed0"], "STS-B") == 71.0
    table = (results_dir / "compare_objectives.md").read_text()
    assert "| rtd | 1 | `abc1234` |" in table and "**71.0** [70.0, 71.0, 72.0]" in table
    assert "largest STS-B spread between pre-training seeds of one arm is 4.0" in table
    assert "ELECTRA 85.0 > All-Tokens MLM 84.3" in table
    assert "- NER (CoNLL-2003 dev entity F1, median over pre-training seeds): rtd 69.0 > mlm 61.0 > none 51.0." in table


def test_generator_sizes_get_their_own_ordering_line_by_width():
    def arm(median, width=None):
        return {"tasks": {"STS-B": {"median": median, "per_seed": [median], "spread": 0.0}}, "generator_width": width}

    results = {"arms": {"rtd": arm(34.0, 64), "mlm": arm(21.0), "gen256": arm(25.5, 256), "gen32": arm(30.0, 32)}}
    lines = objectives_report.ordering_lines(results)
    assert lines[1].startswith("- Ours (STS-B, median over pre-training seeds): rtd 34.0 > mlm 21.0;")
    assert lines[2].endswith("STS-B by generator hidden size (÷ the discriminator's 256): 32 (0.125): 30.0, "
                             "64 (0.25): 34.0, 256 (1): 25.5.")


def test_schedule_fine_tunes_no_pretraining_right_after_the_first_arm():
    rtd, mlm, none, gdes = protocol.Run("rtd"), protocol.Run("mlm"), protocol.Run("none"), protocol.Run("gdes")
    assert co.schedule((rtd, mlm, none)) == [rtd, none, mlm]
    assert co.schedule((mlm, gdes)) == [mlm, gdes]
    assert co.schedule((none,)) == [none]


def test_progress_counts_each_run_once(capsys):
    progress = runner.Progress(total_runs=2)
    assert progress("rtd", "STS-B", 1e-4, 0, lambda: 1.5) == 1.5
    progress("rtd", "STS-B", 1e-4, 0, lambda: 1.5)  # asked again (cached): not a new run
    progress("rtd", "MRPC", 1e-4, 0, lambda: 2.5)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and "(1/2 runs" in lines[0] and "(2/2 runs" in lines[1]


def test_run_all_runs_side_by_side_shares_the_cores_and_reports_every_run(capsys, monkeypatch):
    import threading
    import time

    monkeypatch.setattr(runner.os, "cpu_count", lambda: 4)
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
    runner.run_all(runs, runner.Progress(total_runs=4, jobs=2), jobs=2)
    assert peak[0] == 2 and seen == [2, 2, 2, 2]  # two at once, 4 cores // 2 jobs each
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and sorted(line.split("(")[1][:8] for line in lines) == [f"{i}/4 runs" for i in range(1, 5)]
    seen.clear()
    runner.run_all(runs[:2], runner.Progress(total_runs=2), jobs=1)
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
        runner.run_all(runs, runner.Progress(total_runs=3, jobs=2), jobs=2)
    assert len(finished) == 2


def test_thread_env_limits_tensorflow_threads_only_when_asked():
    assert runner.thread_env(None) is None
    env = runner.thread_env(1)
    assert env["TF_NUM_INTRAOP_THREADS"] == "1" and env["TF_NUM_INTEROP_THREADS"] == "1" and "PATH" in env


def test_jobs_below_one_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit):
        co.parse_args(["--jobs=0"])
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err


def test_electric_is_an_arm_with_more_flops_per_step_than_rtd():
    budget = protocol.BUDGETS["cpu"]
    assert protocol.arm_config(budget, "electric").objective == "electric"
    assert protocol.arm_steps(budget, "electric") == budget.rtd_steps  # never fewer examples than rtd
    assert protocol.arm_compute(budget, "electric")["flops_per_step"] > protocol.arm_compute(budget, "rtd")["flops_per_step"]
    assert co.parse_args(["--arms=rtd,electric"]).arms == "rtd,electric"


def test_generator_option_arms_are_valid_configs_costed_by_what_they_run():
    budget = protocol.BUDGETS["cpu"]
    configs = {arm: protocol.arm_config(budget, arm) for arm in
               ("tied_generator", "untied_embeddings", "disallow_correct", "uniform_generator", "wwm")}
    assert not configs["tied_generator"].untied_generator and configs["wwm"].mask_whole_words
    assert configs["tied_generator"].generator == configs["tied_generator"].discriminator
    rtd = protocol.arm_compute(budget, "rtd")["flops_per_step"]
    assert protocol.arm_compute(budget, "disallow_correct")["flops_per_step"] == rtd
    assert protocol.arm_compute(budget, "uniform_generator")["flops_per_step"] < rtd  # no generator to run
    assert protocol.arm_steps(budget, "uniform_generator") > budget.rtd_steps
    assert protocol.arm_compute(budget, "tied_generator")["flops_per_step"] > rtd


def test_ner_fine_tunes_conll_and_stays_out_of_the_glue_average():
    command = runner.finetune_command(protocol.BUDGETS["cpu"], Path("export"), "NER", 1e-4, 2, Path("out"))
    assert "--task=ner" in command and f"--data_dir={protocol.CONLL}" in command and "--seed=2" in command
    assert co.runs_per_arm(protocol.BUDGETS["cpu"]) == co.runs_per_arm(protocol.BUDGETS["cpu"], protocol.GLUE_TASKS)  # opt-in
    assert co.runs_per_arm(protocol.BUDGETS["cpu"], ("NER",)) == (2 * 2 + 2) * 3  # NER runs the whole lr grid
    entry = {"chosen_lr": 1e-4, "finetune": {task: {"0.0001": [10.0 * (i + 1)]} for i, task in enumerate(protocol.TASKS)}}
    assert records.glue_average(entry) == 30.0  # 10..50 over the five GLUE tasks, not NER's 60
    entry["finetune"]["NER"]["0.0003"] = [70.0, 65.0, 71.0]
    entry["finetune"]["SST-2"]["0.0003"] = [90.0]
    # NER at its own best lr of the grid; the other tasks at the run's chosen lr (1e-4)
    assert (records.headline(entry, "NER"), records.headline_lr(entry, "NER")) == (70.0, "0.0003")
    assert records.headline(entry, "SST-2") == 30.0


def test_a_new_work_folder_takes_the_committed_results_and_going_on_keeps_them(tmp_path):
    budget, run = protocol.BUDGETS["cpu"], protocol.Run("rtd", 1)
    old_work, new_work, runs_dir = tmp_path / "old", tmp_path / "new", tmp_path / "runs"
    for seed in budget.seeds:
        write_result(old_work, run, "STS-B", 1e-4, seed, 30.0 + seed)
        write_result(old_work, run, "STS-B", 3e-4, seed, 40.0 + seed)
    write_result(old_work, run, "MRPC", 1e-4, 0, 65.0)  # one seed of three: cannot be matched to its seed
    log = workdir.pretrain_dir(old_work, run) / "train_log.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text(json.dumps({"step": 25, "loss": 2.0, "examples_per_second": 40.0}) + "\n")
    (workdir.pretrain_dir(old_work, run) / "commits.txt").write_text("pre1234\n")
    co.Recorder(budget, old_work, runs_dir)(run)
    committed = json.loads(records.run_file(runs_dir, run).read_text())

    recorder = co.Recorder(budget, new_work, runs_dir)  # the machine was replaced: an empty work folder
    recorder.restore(run)
    assert records.collect_finetune(budget, run, new_work) == {"STS-B": committed["finetune"]["STS-B"]}
    assert runner.finetune(budget, run, None, "STS-B", 3e-4, 2, new_work) == 42.0  # cached: no subprocess
    write_result(new_work, run, "NER", 3e-4, 0, 80.0)  # a new task run on the new machine
    recorder(run)
    record = json.loads(records.run_file(runs_dir, run).read_text())
    assert record["finetune"]["STS-B"] == committed["finetune"]["STS-B"] and record["finetune"]["NER"] == {
        "0.0003": [80.0]}
    for key in records.PRETRAIN_FIELDS:
        assert record[key] == committed[key], key
    assert record["finetune_commits"] == ["abc1234"] and record["finetune_seconds"] == committed["finetune_seconds"]
    recorder.restore(run)  # once only: a second call adds nothing
    assert records.collect_finetune(budget, run, new_work)["STS-B"] == committed["finetune"]["STS-B"]


def test_ner_runs_the_whole_grid_and_the_other_tasks_the_chosen_lr(tmp_path, monkeypatch):
    budget, run = protocol.BUDGETS["cpu"], protocol.Run("rtd", 1)
    for seed in budget.seeds:
        for task in protocol.TUNING_TASKS:
            write_result(tmp_path, run, task, 1e-4, seed, 30.0)
            write_result(tmp_path, run, task, 3e-4, seed, 40.0)  # chosen: 3e-4
    scheduled = []
    monkeypatch.setattr(runner, "run_all", lambda runs, progress, jobs=1: scheduled.extend(r[1:4] for r in runs))
    co.finetune_run(co.Recorder(budget, tmp_path, tmp_path / "runs"), run, None, None, tasks=("RTE", "NER"))
    later = [(task, lr) for task, lr, _ in scheduled if task not in protocol.TUNING_TASKS]
    assert sorted(set(later)) == [("NER", 1e-4), ("NER", 3e-4), ("RTE", 3e-4)]
    assert len(later) == 3 * len(budget.seeds)


STAND_IN_PRETRAINING = """
import json, pathlib, signal, sys, time
model_dir, stop = pathlib.Path(sys.argv[1]), []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
for step in range(5, 1005, 5):
    if stop:
        (model_dir / "checkpointed").write_text(str(step - 5))  # run_pretraining: checkpoint the step, exit 0
        break
    with open(model_dir / "train_log.jsonl", "a") as f:
        f.write(json.dumps({"step": step, "loss": 1.0, "disc_auc": 0.5, "examples_per_second": 64.0}) + "\\n")
    time.sleep(0.05)
"""


def test_the_pretraining_watcher_says_progress_and_passes_a_stop_on_as_sigterm(tmp_path):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN_PRETRAINING)
    said = []
    reached = lambda: (workdir.read_train_log(tmp_path) or [{"step": 0}])[-1]["step"]
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
    reason = runner.watch_pretraining(process, tmp_path, "mlm", 1000, 0, say=said.append, poll_seconds=0.01,
                                  stop_reason=lambda: "SIGTERM received" if reached() >= 20 else None)
    assert reason == "SIGTERM received" and process.returncode == 0  # it exited by itself, after a checkpoint
    assert int((tmp_path / "checkpointed").read_text()) == reached() < 1000
    assert said.count("[mlm] SIGTERM received: the pre-training checkpoints the step it reached and stops") == 1
    progress = [line for line in said if line.startswith("[mlm] step ")]
    assert len(progress) + 1 == len(said) and progress[-1].startswith(f"[mlm] step {reached()}/1000 ")
    assert all("/1000  64.0 ex/s  disc_auc 0.500  loss 1.000  ETA 0:00:" in line for line in progress)

    process = subprocess.Popen([sys.executable, "-c", "pass"])  # ends by itself: no reason, nothing stopped
    assert runner.watch_pretraining(process, tmp_path, "mlm", 1000, 0, say=said.append, poll_seconds=0.01) is None


def test_progress_lines_give_the_eta_from_the_steps_per_second_this_run_made():
    row = {"step": 400, "loss": 5.25, "gen_accuracy": 0.125, "examples_per_second": 32.0}
    assert runner.progress_line("mlm", row, 1000, 0.5) == (
        "[mlm] step 400/1000  32.0 ex/s  gen_accuracy 0.125  loss 5.250  ETA 0:20:00")
    assert runner.progress_line("mlm", row, 1000, 0.0).endswith("ETA ?")  # no step made yet in this run
