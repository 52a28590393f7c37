"""The efficiency curve: milestones at equal compute, kept milestones, and the report's compute ratio."""

import json
import os
import signal
import sys
import textwrap
import threading
import time

import pytest

from experiments import efficiency_curve as curve_run
from experiments import efficiency_milestones as plan
from experiments import efficiency_report as report
from experiments.lib import protocol, runner, workdir

CPU = protocol.BUDGETS["cpu"]


def test_milestones_are_the_objectives_budget_times_the_multiples_at_equal_flops():
    assert [plan.milestone_steps(CPU, "rtd", m) for m in plan.MULTIPLES] == [375, 750, 1500, 3000, 6000]
    assert plan.milestone_steps(CPU, "mlm", 1.0) == protocol.arm_steps(CPU, "mlm")  # the objectives' mlm run
    for multiple in plan.MULTIPLES:
        rtd, mlm = (plan.milestone_compute(CPU, arm, multiple) for arm in ("rtd", "mlm"))
        per_step = mlm["pretrain_flops"] / mlm["steps"]
        assert rtd["pretrain_flops"] <= mlm["pretrain_flops"] < rtd["pretrain_flops"] + per_step  # one step at most
        assert rtd["rtd_equivalent_examples"] == mlm["rtd_equivalent_examples"] == round(192_000 * multiple)


def test_a_kept_milestone_holds_the_export_and_checkpoint_of_its_step(tmp_path):
    curve = plan.Curve(CPU, tmp_path / "work", tmp_path / "results")
    model_dir = curve.model_dir("rtd")
    (model_dir / "checkpoints").mkdir(parents=True)
    (model_dir / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-375"\n')
    for name in ("ckpt-375.index", "ckpt-375.data-00000-of-00001", "ckpt-350.index"):
        (model_dir / "checkpoints" / name).write_text(name)
    (model_dir / "export").mkdir()
    (model_dir / "export" / "electra_config.json").write_text(json.dumps({"step": 375}))
    milestone = plan.Milestone("rtd", 0.25)
    export = curve_run.keep_milestone(curve, milestone, 375)
    assert json.loads((export / "electra_config.json").read_text())["step"] == 375
    kept = sorted(p.name for p in (curve.milestone_dir(milestone) / "checkpoint").iterdir())
    assert kept == ["checkpoint", "ckpt-375.data-00000-of-00001", "ckpt-375.index"]
    assert not (model_dir / "export").exists()  # the next piece of the run writes its own
    with pytest.raises(RuntimeError, match="holds no export and checkpoint at step 750"):
        curve_run.keep_milestone(curve, plan.Milestone("rtd", 0.5), 750)


def point(multiple, median):
    return {"multiple": multiple, "pretrain_flops": 1e15 * multiple, "median": median, "seeds": [median], "lr": "1e-4"}


def test_the_compute_ratio_is_the_bracket_where_rtd_first_reaches_mlms_largest_score():
    mlm = [point(m, s) for m, s in zip(plan.MULTIPLES, (15, 18, 21, 25, 30))]
    rtd = [point(m, s) for m, s in zip(plan.MULTIPLES, (20, 24, 27, 33, 36))]
    ratio = report.compute_ratio(rtd, mlm, 3.9)
    assert ratio["reached"] == 1.0 and ratio["flops_bracket"] == [0.5e15, 1e15]  # 27 ≥ 30 − 3.9, 24 is not
    assert ratio["ratio_bracket"] == [4.0, 8.0]
    assert report.compute_ratio(rtd[:1], mlm, 3.9)["reached"] is None
    first = report.compute_ratio([point(0.25, 40)], mlm, 3.9)
    assert first["flops_bracket"] == [0.0, 0.25e15] and first["ratio_bracket"] == [16.0, None]
    assert "mlm spent at least 16.0× rtd's compute" in report.ratio_line(first)
    assert "mlm spent 4.0× to 8.0× rtd's compute" in report.ratio_line(ratio)


def test_a_ratio_read_against_a_score_at_the_floor_says_so_and_where_rtd_clearly_passes_it():
    """mlm's 4× STS-B came out at the floor (19.5 against 18.1 unpre-trained): rtd's first milestone is "at" it
    only because both sit at the floor, so the line says that, and where rtd is above it by more than the spread."""
    mlm = [point(m, s) for m, s in zip(plan.MULTIPLES, (18.3, 19.9, 19.6, 21.1, 19.5))]
    rtd = [point(m, s) for m, s in zip(plan.MULTIPLES, (17.9, 29.9, 53.5, 66.6, 70.8))]
    ratio = report.compute_ratio(rtd, mlm, 3.9, floor=18.1)
    assert ratio["reached"] == 0.25 and ratio["ratio_bracket"] == [16.0, None]
    assert ratio["target_at_floor"] and ratio["clearly_above"] == {"multiple": 0.5, "median": 29.9, "ratio": 8.0}
    line = report.ratio_line(ratio)
    assert "within 3.9 points of the floor (no pre-training, 18.1): the bracket says how soon rtd reaches" in line
    assert line.endswith("rtd is above mlm's 4× score by more than 3.9 points first at its 0.5× milestone (29.9), "
                         "on 8.0× fewer pre-training FLOPs.")
    pretrained = report.compute_ratio(rtd, mlm[:-1] + [point(4.0, 40.0)], 3.9, floor=18.1)
    assert not pretrained["target_at_floor"] and pretrained["reached"] == 1.0
    assert pretrained["clearly_above"]["multiple"] == 1.0 and "floor" not in report.ratio_line(pretrained)
    never = report.compute_ratio([point(m, 20.0) for m in plan.MULTIPLES], mlm, 3.9, floor=18.1)
    assert never["clearly_above"] is None and "rtd is never above it by more than 3.9" in report.ratio_line(never)
    assert report.compute_ratio(rtd, mlm, 3.9)["target_at_floor"] is None  # no `none` record: not judged


def test_no_ratio_is_read_before_mlms_largest_milestone_is_scored():
    """While mlm's run is under way its largest scored milestone is a smaller one: a bracket read against it would
    be printed as the ratio the issue asks for (against mlm's 4× score)."""
    mlm = [point(m, s) for m, s in zip(plan.MULTIPLES, (15, 18, 21, 25, 30))]
    rtd = [point(m, s) for m, s in zip(plan.MULTIPLES, (20, 24, 27, 33, 36))]
    under_way = report.compute_ratio(rtd, mlm[:1], 3.9)
    assert under_way["reached"] is None and "4× milestone is not scored yet" in under_way["why"]
    assert report.ratio_line(under_way).startswith("Compute ratio: not read yet")


def record(arm, scores):
    """A committed record whose milestones have STS-B and MRPC grids (the 1e-4 lr better)."""
    milestones = {}
    for multiple, score in zip(plan.MULTIPLES, scores):
        compute = plan.milestone_compute(CPU, arm, multiple)
        grid = {"0.0001": [score - 1, score, score + 1], "0.0003": [score - 5] * 3}
        milestones[f"{multiple:g}"] = {**compute, "finetune": {"STS-B": grid, "MRPC": grid}}
    return {"arm": arm, "budget": CPU.name, "milestones": milestones, "total_steps": plan.total_steps(CPU, arm),
            "pretrain_curve": [{"step": 6000}], "pretrain_commits": ["abc1234"]}


def test_the_report_is_built_from_committed_records_alone(tmp_path):
    records = tmp_path / "efficiency_curve" / "cpu"
    records.mkdir(parents=True)
    (records / "rtd-pseed0.json").write_text(json.dumps(record("rtd", (20, 24, 27, 33, 36))))
    (records / "mlm-pseed0.json").write_text(json.dumps(record("mlm", (15, 18, 21, 25, 30))))
    decayed = tmp_path / "objectives" / "cpu"
    decayed.mkdir(parents=True)
    for arm, score in (("rtd", 34.0), ("mlm", 21.0), ("none", 18.0)):
        grid = {"0.0001": [score] * 3, "0.0003": [score - 1] * 3}
        (decayed / f"{arm}-pseed0.json").write_text(json.dumps({"arm": arm, "pretrain_seed": 0,
                                                                "finetune": {"STS-B": grid, "MRPC": grid}}))
    grid = {"0.0001": [36.0] * 3, "0.0003": [35.0] * 3}
    (decayed / "rtd-pseed1.json").write_text(json.dumps({"arm": "rtd", "pretrain_seed": 1,
                                                         "finetune": {"STS-B": grid, "MRPC": grid}}))
    results = report.report(plan.Curve(CPU, tmp_path / "no_work_folder", tmp_path))
    assert results["compute_ratio"]["reached"] == 1.0
    assert results["decayed_192k"]["rtd"]["STS-B"] == {"mid_run": 27, "decayed": {0: 34.0, 1: 36.0},
                                                       "mid_run_minus_decayed": -7.0}
    assert set(results["decayed_192k"]["rtd"]) == {"STS-B", "MRPC"}
    assert "mlm" in results["decayed_192k"] and "none" not in results["decayed_192k"]  # none has no milestones
    assert results["floor"]["STS-B"]["median"] == 18.0
    text = (tmp_path / "efficiency_curve.md").read_text()
    assert "**27.0** [26.0, 27.0, 28.0] (lr 0.0001)" in text and "mlm spent 4.0× to 8.0× rtd's compute" in text
    assert ("- rtd at 192k, STS-B: 27.0 mid-run; decayed to zero at 192k in the objectives experiment: 34.0 (same "
            "data, seed and initialisation), 36.0 (pre-training seed 1); mid-run minus decayed -7.0.") in text
    assert json.loads((tmp_path / "efficiency_curve.json").read_text())["compute_ratio"]["reached"] == 1.0


def test_a_milestone_is_scored_only_once_its_whole_grid_is_in_the_record():
    """Fine-tuning results are committed run by run: two STS-B seeds at one learning rate are no score yet (the
    report once showed such a milestone at "its chosen lr" with two values)."""
    full = record("rtd", (20, 24, 27, 33, 36))
    partial = json.loads(json.dumps(full))
    partial["milestones"]["1"]["finetune"] = {"STS-B": {"0.0001": [51.3, 53.5]}}
    assert [p["multiple"] for p in report.arm_points(full, "STS-B")] == list(plan.MULTIPLES)
    assert 1.0 not in [p["multiple"] for p in report.arm_points(partial, "STS-B")]
    partial["milestones"]["1"]["finetune"] = {"STS-B": full["milestones"]["1"]["finetune"]["STS-B"]}
    assert 1.0 in [p["multiple"] for p in report.arm_points(partial, "STS-B")]  # STS-B complete, MRPC to come
    assert 1.0 not in [p["multiple"] for p in report.arm_points(partial, "MRPC")]


def test_the_report_says_where_the_run_resumed_after_a_cut_and_where_it_restarted():
    """Only pieces that reach their stop are logged: a gap before a piece is a cut-off piece it resumed from (the
    checkpoint kept at its start), a piece starting before the last end is a restart (item 4: say which happened)."""
    pieces = [(0, 375), (375, 750), (900, 1500), (1700, 3000), (0, 750)]
    history = report.run_history([{"from_step": a, "to_step": b} for a, b in pieces])
    assert history == {"pieces": 5, "stopped_at": None, "runs": [
        {"restarted_at": None, "resumed_after_a_cut_at": [900, 1700], "logged_through_step": 3000},
        {"restarted_at": 0, "resumed_after_a_cut_at": [], "logged_through_step": 750}]}
    assert report.run_history([]) == {"pieces": 0, "runs": [], "stopped_at": None}
    assert report._history_text(history) == (
        "5 logged pieces: run 1 logged through step 3000, resumed after a cut-off piece at steps 900, 1700; run 2, "
        "restarted at step 0, logged through step 750, none cut off")
    assert report._history_text(report.run_history([{"from_step": 0, "to_step": 375}])) == (
        "1 logged piece, none cut off, never restarted")
    assert report._history_text(report.run_history([])) == "0 logged pieces, none cut off, never restarted"


def test_the_progress_line_counts_the_steps_the_last_piece_stopped_at_not_the_last_logged_point(tmp_path):
    """mlm's milestones fall between two training-curve logs (every 25 steps): the report said "400/6496" for a run
    kept at step 406, and would have said "6475/6496" for a finished one."""
    records = tmp_path / "efficiency_curve" / "cpu"
    records.mkdir(parents=True)
    kept = {**record("mlm", (15, 18, 21, 25, 30)), "pretrain_curve": [{"step": 375}, {"step": 400}],
            "pretrain_invocations": [{"from_step": 200, "to_step": 406}]}
    (records / "mlm-pseed0.json").write_text(json.dumps(kept))
    assert report.build_results(tmp_path)["progress"]["mlm"]["steps_done"] == 406
    finished = {"pretrain_curve": [{"step": 6450}, {"step": 6475}],
                "pretrain_invocations": [{"from_step": 0, "to_step": 3248}, {"from_step": 3248, "to_step": 6496}]}
    assert report.steps_done(finished) == 6496
    restarted = {"pretrain_curve": [{"step": 3225}],
                 "pretrain_invocations": [{"from_step": 0, "to_step": 3248}, {"from_step": 0, "to_step": 406}]}
    assert report.steps_done(restarted) == 406  # the newest piece, not the furthest
    assert report.steps_done({"pretrain_curve": [{"step": 175}]}) == 175
    assert report.steps_done({}) == 0


def test_stopped_pieces_are_resumed_where_they_stopped_and_a_lost_work_folder_restarts():
    """Pieces now log their stops: one stopped by a signal or found killed by the next run is where that run
    resumed, not a restart; a piece from step 0 after them is a restart; the last one stopped is where the next
    run resumes (the report said "3248/6496, never restarted" for a run restarted from step 0 on a new machine)."""
    pieces = [{"from_step": 0, "to_step": 375}, {"from_step": 375, "to_step": 750},
              {"from_step": 750, "to_step": 900, "stopped": "signal"}, {"from_step": 900, "to_step": 1500},
              {"from_step": 0, "to_step": 300, "stopped": "unlogged"}, {"from_step": 300, "to_step": 420,
                                                                         "stopped": "signal"}]
    history = report.run_history(pieces)
    assert history == {"pieces": 6, "stopped_at": 420, "runs": [
        {"restarted_at": None, "resumed_after_a_cut_at": [900], "logged_through_step": 1500},
        {"restarted_at": 0, "resumed_after_a_cut_at": [300], "logged_through_step": 420}]}
    assert report._history_text(history) == (
        "6 logged pieces: run 1 logged through step 1500, resumed after a cut-off piece at step 900; run 2, restarted "
        "at step 0, logged through step 420, resumed after a cut-off piece at step 300, the last piece stopped at "
        "step 420 (the next run resumes there)")
    assert report.steps_done({"pretrain_invocations": pieces}) == 420


FAKE_PRETRAINING = textwrap.dedent("""
    # run_pretraining's contract with the curve: resume from the newest checkpoint, log every 5 steps, and on
    # SIGTERM checkpoint the step reached and exit 0.
    import json, pathlib, signal, sys, time
    model_dir, stop_after = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    (model_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    state = model_dir / "checkpoints" / "checkpoint"
    step = int(state.read_text().split("-")[1].rstrip('"\\n')) if state.exists() else 0
    def keep(step):
        state.write_text(f'model_checkpoint_path: "ckpt-{step}"\\n')
    while step < stop_after and not stop:
        step += 1
        time.sleep(0.02)
        if step % 5 == 0:
            with open(model_dir / "train_log.jsonl", "a") as f:
                f.write(json.dumps({"step": step, "loss": 10.0 / step, "examples_per_second": 1.0}) + "\\n")
            keep(step)
    keep(step)
""")


def fake_pretraining(tmp_path, monkeypatch):
    script = tmp_path / "fake_pretraining.py"
    script.write_text(FAKE_PRETRAINING)
    monkeypatch.setattr(curve_run, "pretrain_command", lambda curve, arm, data_dir, eval_dir, stop: [
        sys.executable, str(script), str(curve.model_dir(arm)), str(stop)])


def sigterm_at_step(model_dir, step):
    """SIGTERM to this process (not the pre-training's) once the pre-training has logged `step`."""
    def send():
        while not any(r["step"] >= step for r in workdir.read_train_log(model_dir)):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=send, daemon=True).start()


def test_a_sigterm_stops_the_pretraining_at_a_checkpoint_logs_the_piece_and_the_next_run_resumes_there(
        tmp_path, monkeypatch):
    """A sitting's end (SIGTERM) used to kill the orchestrator at once: the pre-training still checkpointed, but
    the piece went unlogged, so a record committed at the end of the sitting did not say where the run stood."""
    fake_pretraining(tmp_path, monkeypatch)
    curve = plan.Curve(CPU, tmp_path / "work", tmp_path / "results")
    model_dir = curve.model_dir("mlm")
    sigterm_at_step(model_dir, 20)
    with pytest.raises(SystemExit) as stopped:
        curve_run.run_arm(curve, "mlm", tmp_path, tmp_path, stage="pretrain", jobs=1)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is the pre-training's alone
    reached = runner.checkpoint_step(model_dir)
    assert 20 <= reached < plan.milestone_steps(CPU, "mlm", 0.25)
    record = curve.read_record("mlm")  # written on the stop, ready to commit
    [piece] = record["pretrain_invocations"]
    assert (piece["from_step"], piece["to_step"], piece["stopped"]) == (0, reached, "signal")
    assert record["pretrain_curve"][-1]["step"] <= reached and record["pretrain_run"]

    assert curve_run.pretrain_to(curve, "mlm", 60, tmp_path, tmp_path)  # the next run resumes at the stop
    pieces = workdir.read_jsonl(curve_run.pieces_path(curve, "mlm"))
    assert [(p["from_step"], p["to_step"]) for p in pieces] == [(0, reached), (reached, 60)]
    assert "stopped" not in pieces[1] and report.run_history(pieces)["runs"] == [
        {"restarted_at": None, "resumed_after_a_cut_at": [reached], "logged_through_step": 60}]


def test_a_piece_killed_before_it_logged_itself_is_logged_by_the_next_run(tmp_path):
    curve = plan.Curve(CPU, tmp_path / "work", tmp_path / "results")
    checkpoints = curve.model_dir("mlm") / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "ckpt-150"\n')
    curve_run.log_unlogged_piece(curve, "mlm", 150)  # a new work folder: the killed piece ran from step 0
    curve_run.append_piece(curve, "mlm", {"from_step": 150, "to_step": 200})
    curve_run.log_unlogged_piece(curve, "mlm", 200)  # nothing unlogged: the run resumes where a piece ended
    curve_run.log_unlogged_piece(curve, "mlm", 275)
    pieces = workdir.read_jsonl(curve_run.pieces_path(curve, "mlm"))
    assert [(p["from_step"], p["to_step"], p.get("stopped")) for p in pieces] == [
        (0, 150, "unlogged"), (150, 200, None), (200, 275, "unlogged")]
    assert "commit" not in pieces[0]  # unknown: pretrain_commits leave it out


def curve_rows(steps, offset=0.0):
    return [{"step": s, "loss": round(10.0 / s + offset, 6)} for s in steps]


def test_a_restarted_run_is_compared_with_the_run_before_until_its_curves_replace_it():
    """A new machine restarts the run from step 0 with the same seed: its milestones join the first run's only if
    it replays that run, so each record write compares the two at their shared steps, until the new run's curves
    (both together) replace the first run's."""
    first = {"pretrain_curve": curve_rows(range(25, 201, 25)), "eval_curve": curve_rows((125,))}
    early = {"id": "2026-11-28T02:15:14Z", "pretrain_curve": curve_rows((25, 50, 75), 1e-6), "eval_curve": []}
    written = curve_run.run_curves(first, early)
    assert written["pretrain_curve"] == first["pretrain_curve"] and written["pretrain_run"] is None
    assert written["restart_replays"] == [{
        "run": early["id"], "against": "the first run", "steps_compared": 3, "through_step": 75,
        "max_abs_loss_difference": 1e-6, "windows_cut_by_a_piece": 0, "eval_steps_compared": 0,
        "eval_through_step": 0, "eval_max_abs_loss_difference": 0.0}]
    # A training-curve point is the mean over its 25-step window: the new run resumed at step 142, so its point at
    # 150 averages 8 steps (the first run's, 25) and is left out; the held-out loss is the model's at its step.
    later = {**early, "pretrain_curve": curve_rows(range(25, 226, 25), 2e-6), "eval_curve": curve_rows((125,), 3e-6)}
    later["pretrain_curve"][5]["loss"] += 0.1
    bounds = curve_run.piece_bounds([{"from_step": 0, "to_step": 142, "stopped": "unlogged"},
                                     {"from_step": 142, "to_step": 900}])
    switched = curve_run.run_curves({**first, **written}, later, bounds, log_steps=25)
    assert switched["pretrain_curve"] == later["pretrain_curve"] and switched["eval_curve"] == later["eval_curve"]
    assert switched["pretrain_run"] == early["id"]
    [replay] = switched["restart_replays"]
    assert (replay["steps_compared"], replay["through_step"], replay["eval_steps_compared"]) == (7, 200, 1)
    assert replay["windows_cut_by_a_piece"] == 1
    assert replay["max_abs_loss_difference"] == pytest.approx(2e-6)
    assert replay["eval_max_abs_loss_difference"] == pytest.approx(3e-6)
    # From now on the record's curves are the new run's own: comparing it with itself would erase the check.
    assert curve_run.run_curves(switched, later)["restart_replays"] == [replay]
    # Another restart is compared with the run whose curves the record holds.
    again = curve_run.run_curves(switched, {"id": "2026-11-29T01:00:00Z", "pretrain_curve": curve_rows((25,)),
                                            "eval_curve": []})
    assert [r["against"] for r in again["restart_replays"]] == ["the first run", early["id"]]
    line, = report.replay_lines({"mlm": {"restart_replays": [replay]}})
    assert line == ("- mlm: the run restarted from step 0 with the same seed (2026-11-28T02:15:14Z) replays the first "
                    "run: training loss within 2e-06 at the 7 logged steps both share (through step 200; 1 whose "
                    "window a piece cut short left out), held-out loss within 3e-06 at 1 evaluation.")
