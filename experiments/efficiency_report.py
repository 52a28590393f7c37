r"""The efficiency curve's report: score against pre-training compute, and the compute ratio read from it.

    python -m experiments.efficiency_curve --stage=report

Built from the committed records alone (`docs/results/efficiency_curve/cpu/<arm>-pseed0.json`,
and the objectives experiment's `none` record for the floor and its decayed 192k runs), no work
folder: `docs/results/efficiency_curve.{md,json}` and `docs/results/efficiency_curve.png`.

Each milestone is scored as the objectives experiment scores a run: the median over fine-tuning seeds at
its chosen learning rate (the better STS-B median of the grid). The compute ratio is read from STS-B
(MRPC stays near the floor for every arm until 2× at this scale): the smallest milestone at which rtd is
at or above mlm's score at its largest milestone, "at" meaning within the pre-training-seed spread
(`SEED_SPREAD`), reported as the bracket between that milestone and the one before it, in FLOPs, with no
interpolation. Where that score is itself within the spread of the floor (no pre-training), the bracket
only says how soon rtd reaches the floor, so the report also names the first milestone at which rtd is
above mlm's score by more than the spread. Mid-run milestones are not decayed (the learning rate is
still high there), so the report sets the 192k milestones beside the objectives experiment's decayed
192k runs of the same data, seed and initialisation, to say how conservative the ratio is.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Optional

from electra_tf.text.manifest import write_text_atomic
from experiments import efficiency_milestones as milestones
from experiments.lib import protocol, runner, workdir
from experiments.lib.records import chosen_lr, load_runs, runs_dir_of

TASKS = milestones.TUNING_TASKS  # STS-B, MRPC
RATIO_TASK = "STS-B"
STEM = "efficiency_curve"


def milestone_score(entry: dict, task: str, budget: Optional[protocol.Budget] = None) -> Optional[dict]:
    """{"median", "seeds", "lr"} of a milestone's task at its chosen lr, or None before its grid is complete
    (with `budget`: every learning rate of its grid with all its seeds, for the selection task and `task`; the
    lr is chosen from the whole grid)."""
    finetune = entry.get("finetune", {})
    if not finetune.get(protocol.SELECTION_TASK) or task not in finetune:
        return None
    if budget is not None and not milestones.finetune_complete(budget, entry, {protocol.SELECTION_TASK, task}):
        return None
    lr = f"{chosen_lr(finetune):g}"
    seeds = finetune[task].get(lr, [])
    return {"median": statistics.median(seeds), "seeds": seeds, "lr": lr} if seeds else None


def arm_points(record: dict, task: str) -> list[dict]:
    """The arm's scored milestones in compute order: multiple, FLOPs, examples and the score."""
    points = []
    for multiple in milestones.MULTIPLES:
        entry = record.get("milestones", {}).get(f"{multiple:g}")
        score = milestone_score(entry, task, protocol.BUDGETS[record["budget"]]) if entry else None
        if score:
            points.append({"multiple": multiple, "pretrain_flops": entry["pretrain_flops"], "steps": entry["steps"],
                           "rtd_equivalent_examples": entry["rtd_equivalent_examples"], **score})
    return points


def compute_ratio(rtd: list[dict], mlm: list[dict], spread: float, floor: Optional[float] = None) -> dict:
    """Where rtd first reaches mlm's score at mlm's largest milestone (within `spread`): the bracket of
    milestones, in FLOPs. `reached` is None when rtd never does (or mlm's largest milestone is not scored: a
    ratio read against a smaller one would be another quantity, shown while the run is under way).
    `clearly_above`: the first milestone at which rtd is above that score by more than `spread` (None if none);
    `target_at_floor`: whether that score is within `spread` of `floor` (the `none` arm's median), when given."""
    if not rtd or not mlm:
        return {"reached": None, "why": "not every arm has a scored milestone yet"}
    target = mlm[-1]
    if target["multiple"] != milestones.MULTIPLES[-1]:
        return {"reached": None, "why": f"mlm's {milestones.MULTIPLES[-1]:g}× milestone is not scored yet"}
    above = next((p for p in rtd if p["median"] > target["median"] + spread), None)
    context = {"clearly_above": above and {"multiple": above["multiple"], "median": above["median"],
                                           "ratio": target["pretrain_flops"] / above["pretrain_flops"]},
               "floor": floor, "target_at_floor": None if floor is None else abs(target["median"] - floor) <= spread}
    for index, point in enumerate(rtd):
        if point["median"] >= target["median"] - spread:
            below = rtd[index - 1] if index else None
            return {"reached": point["multiple"], "target_multiple": target["multiple"],
                    "target_median": target["median"], "spread": spread,
                    "flops_bracket": [below["pretrain_flops"] if below else 0.0, point["pretrain_flops"]],
                    "ratio_bracket": [target["pretrain_flops"] / point["pretrain_flops"],
                                      target["pretrain_flops"] / below["pretrain_flops"] if below else None],
                    **context}
    return {"reached": None, "target_multiple": target["multiple"], "target_median": target["median"],
            "spread": spread, "why": f"rtd stays more than {spread} below mlm's score at its largest milestone"}


def decayed_comparison(objective_runs: list[dict], points: dict) -> dict:
    """Each arm's 192k milestone (mid-run, not decayed) beside the objectives runs decayed to zero at 192k
    (`objective_runs`: `experiments.lib.records.load_runs`), per task: `{arm: {task: {"mid_run", "decayed":
    {pre-training seed: median}, "mid_run_minus_decayed"}}}`, the difference against the run of this curve's seed
    (same data, order and initialisation; the other seeds show the pre-training-seed spread beside it)."""
    comparison = {}
    for task, arms in points.items():
        for arm, arm_points_ in arms.items():
            milestone = next((p for p in arm_points_ if p["multiple"] == 1.0), None)
            decayed = {run["pretrain_seed"]: score["median"] for run in objective_runs
                       if run["arm"] == arm and (score := milestone_score(run, task))}
            if milestone is None or milestones.PRETRAIN_SEED not in decayed:
                continue
            comparison.setdefault(arm, {})[task] = {
                "mid_run": milestone["median"], "decayed": decayed,
                "mid_run_minus_decayed": milestone["median"] - decayed[milestones.PRETRAIN_SEED]}
    return comparison


def decayed_lines(comparison: dict) -> list[str]:
    lines = []
    for arm, tasks in comparison.items():
        for task, c in tasks.items():
            others = [f"{median:.1f} (pre-training seed {seed})" for seed, median in sorted(c["decayed"].items())
                      if seed != milestones.PRETRAIN_SEED]
            lines.append(f"- {arm} at 192k, {task}: {c['mid_run']:.1f} mid-run; decayed to zero at 192k in the objectives "
                         f"experiment: {c['decayed'][milestones.PRETRAIN_SEED]:.1f} (same data, seed and initialisation)"
                         + (", " + ", ".join(others) if others else "")
                         + f"; mid-run minus decayed {c['mid_run_minus_decayed']:+.1f}.")
    return lines


def run_history(invocations: list[dict]) -> dict:
    """How the run's logged pieces join, one entry per run (a restart begins the next). A piece that starts where
    a stopped one (`stopped`: by a signal, or killed and logged by the next run) stopped resumed from the
    checkpoint it kept; so did one that starts past the previous piece's end (records before pieces logged their
    stops: the cut piece went unlogged). One that starts before that end restarted from step 0 with the same seed:
    its work folder was lost. Each run: where it resumed after a cut, and the last step it logged. `stopped_at`:
    the step the last piece stopped at, when it did not reach its stop (where the next run resumes)."""
    runs, end, stopped = [], 0, False
    for piece in invocations:
        start = piece["from_step"]
        if not runs or start < end:
            runs.append({"restarted_at": start if runs else None, "resumed_after_a_cut_at": []})
        if start > end or (start == end and stopped):
            runs[-1]["resumed_after_a_cut_at"].append(start)
        end, stopped = piece["to_step"], "stopped" in piece
        runs[-1]["logged_through_step"] = end
    return {"pieces": len(invocations), "runs": runs, "stopped_at": end if stopped else None}


def steps_done(record: dict) -> int:
    """The step the newest logged piece stopped at. The training curve is logged every `--log_steps`, so its last
    point falls short of a stop between two logs (mlm's milestones, 406 … 6496, are none of them multiples of 25);
    a record with no logged piece yet falls back to that last point."""
    invocations = record.get("pretrain_invocations") or []
    if invocations:
        return invocations[-1]["to_step"]
    return (record.get("pretrain_curve") or [{"step": 0}])[-1]["step"]


def _history_text(history: dict) -> str:
    def steps(values):
        return "step" + "s" * (len(values) > 1) + " " + ", ".join(map(str, values))

    def resumes(run):
        cuts = run["resumed_after_a_cut_at"]
        return f"resumed after a cut-off piece at {steps(cuts)}" if cuts else "none cut off"

    runs = history["runs"]
    text = f"{history['pieces']} logged piece" + "s" * (history["pieces"] != 1)
    if len(runs) <= 1:
        text += ", " + (resumes(runs[0]) if runs else "none cut off") + ", never restarted"
    else:
        text += ": " + "; ".join(
            f"run {index + 1}" + (f", restarted at step {run['restarted_at']}," if index else "")
            + f" logged through step {run['logged_through_step']}, {resumes(run)}" for index, run in enumerate(runs))
    if history.get("stopped_at") is not None:
        text += f", the last piece stopped at step {history['stopped_at']} (the next run resumes there)"
    return text


def _within(difference: float) -> str:
    return "0 (equal to the 6 decimals kept)" if difference == 0 else f"{difference:.2g}"


def replay_lines(progress: dict) -> list[str]:
    """How each restarted run replays the run before it (the records' `restart_replays`)."""
    lines = []
    for arm, p in progress.items():
        for r in p.get("restart_replays", []):
            lines.append(f"- {arm}: the run restarted from step 0 with the same seed ({r['run']}) replays "
                         f"{r['against']}: training loss within {_within(r['max_abs_loss_difference'])} at the "
                         f"{r['steps_compared']} logged steps both share (through step {r['through_step']}; "
                         f"{r.get('windows_cut_by_a_piece', 0)} whose window a piece cut short left out), "
                         f"held-out loss within {_within(r['eval_max_abs_loss_difference'])} at "
                         f"{r['eval_steps_compared']} evaluation" + "s" * (r["eval_steps_compared"] != 1) + ".")
    return lines


def build_results(results_dir: Path, budget_name: str = "cpu") -> dict:
    records_dir = milestones.records_dir(results_dir, protocol.BUDGETS[budget_name])
    records = {path.stem.split("-pseed")[0]: json.loads(path.read_text())
               for path in sorted(records_dir.glob("*.json"))} if records_dir.is_dir() else {}
    objectives_dir = runs_dir_of(results_dir, protocol.BUDGETS[budget_name])
    objective_runs = load_runs(objectives_dir) if objectives_dir.is_dir() else []
    none = next((run for run in objective_runs if run["arm"] == "none" and run["pretrain_seed"] == 0), None)
    floor = {task: milestone_score(none, task) for task in TASKS} if none else {}
    points = {task: {arm: arm_points(record, task) for arm, record in records.items()} for task in TASKS}
    ratio_points = points[RATIO_TASK]
    return {
        "command": "python -m experiments.efficiency_curve --stage=report", "budget": budget_name,
        "seed_spread": milestones.SEED_SPREAD, "points": points, "floor": floor,
        "compute_ratio": compute_ratio(ratio_points.get("rtd", []), ratio_points.get("mlm", []), milestones.SEED_SPREAD,
                                       (floor.get(RATIO_TASK) or {}).get("median")),
        "decayed_192k": decayed_comparison(objective_runs, points),
        "progress": {arm: {"milestones_scored": len(ratio_points.get(arm, [])),
                           "steps_done": steps_done(record),
                           "total_steps": record.get("total_steps"),
                           "commits": record.get("pretrain_commits", []),
                           "history": run_history(record.get("pretrain_invocations", [])),
                           "restart_replays": record.get("restart_replays", [])}
                     for arm, record in records.items()},
    }


def _cell(score: Optional[dict]) -> str:
    if not score:
        return "–"
    return f"**{score['median']:.1f}** [{', '.join(f'{v:.1f}' for v in score['seeds'])}] (lr {score['lr']})"


def _ratio_range(bracket: list) -> str:
    """mlm's compute over rtd's, as a range: open above when rtd reached the score at its first milestone
    (no milestone below bounds it)."""
    low, high = bracket
    return f"{low:.1f}× to {high:.1f}×" if high else f"at least {low:.1f}×"


def ratio_line(ratio: dict) -> str:
    if ratio.get("reached") is None:
        return f"Compute ratio: not read yet or not reached ({ratio.get('why', '')})."
    low, high = ratio["flops_bracket"]
    fewer = ratio["ratio_bracket"]
    return (f"Compute ratio (STS-B): rtd is within {ratio['spread']} points of mlm's score at "
            f"{ratio['target_multiple']:g}× ({ratio['target_median']:.1f}) first at its {ratio['reached']:g}× milestone: somewhere between "
            f"{low:.3g} and {high:.3g} pre-training FLOPs, i.e. mlm spent {_ratio_range(fewer)} rtd's compute "
            "for that score (milestones bracket it; no interpolation)." + _ratio_context(ratio))


def _ratio_context(ratio: dict) -> str:
    """What the bracket means when mlm's score is the floor, and where rtd clearly passes it."""
    text = ""
    if ratio.get("target_at_floor"):
        text += (f" mlm's {ratio['target_multiple']:g}× score is within {ratio['spread']} points of the floor (no "
                 f"pre-training, {ratio['floor']:.1f}): the bracket says how soon rtd reaches the floor.")
    above = ratio.get("clearly_above")
    if above:
        text += (f" rtd is above mlm's {ratio['target_multiple']:g}× score by more than {ratio['spread']} points "
                 f"first at its {above['multiple']:g}× milestone ({above['median']:.1f}), on {above['ratio']:.1f}× "
                 "fewer pre-training FLOPs.")
    elif "clearly_above" in ratio:
        text += f" rtd is never above it by more than {ratio['spread']} points."
    return text


def markdown(results: dict) -> str:
    lines = ["# Score against pre-training compute: rtd and mlm (the paper's Figure 1 in miniature)", "",
             f"Generated by `{results['command']}` from `docs/results/efficiency_curve/{results['budget']}/` "
             "(and the objectives experiment's `none` record and decayed 192k runs).", "",
             "Each arm pre-trains once for 4× the objectives budget in FLOPs, the learning rate decaying over the "
             "whole run; each milestone is fine-tuned with the objectives protocol. Cells: the median over 3 fine-tuning "
             "seeds at the milestone's chosen learning rate (the seeds in brackets).", ""]
    for task in TASKS:
        lines += [f"## {task}", "", "| arm | " + " | ".join(f"{m:g}× ({round(m * 192)}k)" for m in milestones.MULTIPLES)
                  + " |", "|---|" + "---|" * len(milestones.MULTIPLES)]
        for arm, arm_points_ in results["points"][task].items():
            by_multiple = {p["multiple"]: p for p in arm_points_}
            lines.append(f"| {arm} | " + " | ".join(_cell(by_multiple.get(m)) for m in milestones.MULTIPLES) + " |")
        floor = results["floor"].get(task)
        lines += ["", f"No pre-training (`none`, the floor): {_cell(floor)}.", ""]
    lines += [ratio_line(results["compute_ratio"]), ""]
    lines += decayed_lines(results["decayed_192k"])
    lines += ["", "Progress:", ""] + [
        f"- {arm}: {p['milestones_scored']}/{len(milestones.MULTIPLES)} milestones scored, pre-trained "
        f"{p['steps_done']}/{p['total_steps']} steps in {_history_text(p['history'])} (commits "
        f"{', '.join(p['commits']) or '–'})." for arm, p in results["progress"].items()] + [""]
    replays = replay_lines(results["progress"])
    lines += replays + [""] * bool(replays)
    return "\n".join(lines)


def plot(results: dict, out_dir: Path) -> Optional[Path]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        runner.log("matplotlib is not installed (pip install -r requirements-bench.txt): no plot")
        return None
    fig, axes = plt.subplots(1, len(TASKS), figsize=(5 * len(TASKS), 4))
    for ax, task in zip(axes, TASKS):
        for index, (arm, points) in enumerate(results["points"][task].items()):
            if not points:
                continue
            x = [p["pretrain_flops"] for p in points]
            ax.plot(x, [p["median"] for p in points], "o-", color=f"C{index}", label=arm)
            ax.vlines(x, [min(p["seeds"]) for p in points], [max(p["seeds"]) for p in points], color=f"C{index}",
                      alpha=0.5)
        floor = results["floor"].get(task)
        if floor:
            ax.axhline(floor["median"], linestyle=":", color="grey", label="none (floor)")
        ax.set_xscale("log")
        ax.set_xlabel("pre-training FLOPs")
        ax.set_title(f"{task} (median, fine-tuning seed range)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(out_dir) / f"{STEM}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(curve) -> dict:
    """`docs/results/efficiency_curve.{md,json}` and the plot, from the committed records of `curve`'s budget."""
    results_dir = Path(curve.results_dir)
    results = build_results(results_dir, curve.budget.name)
    stem = STEM if curve.budget.name == "cpu" else f"{STEM}_{curve.budget.name}"
    workdir.write_json_atomic(results_dir / f"{stem}.json", results)
    page = markdown(results)
    write_text_atomic(str(results_dir / f"{stem}.md"), page)
    if curve.budget.name == "cpu":
        plot(results, results_dir)
    print(page, flush=True)
    return results
