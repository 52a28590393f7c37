"""The objectives experiment's report: `docs/results/compare_objectives.{md,json}` and its plots, built from the
committed run records alone (`experiments.lib.records`), no work folder.

    python -m experiments.compare_objectives --budget=cpu --stage=report

Example:

>>> _cell(None), _cell(12.34, [11.0, 13.5])
('–', '**12.3** [11.0, 13.5]')
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

from experiments.lib.protocol import (DISCRIMINATOR_WIDTH, GLUE_TASKS, OWN_GRID_TASKS, SELECTION_TASK, TASKS,
                                      TUNING_TASKS, Budget, generator_width)
from experiments.lib.records import chosen_lr, glue_average, headline, headline_lr, load_runs, runs_dir_of
from experiments.lib.runner import format_seconds, log
from experiments.lib.workdir import write_json_atomic

# The paper's Table 5 (GLUE dev score, ELECTRA-Base-sized models trained for the same steps).
PAPER_TABLE5 = (("rtd", "ELECTRA", 85.0), ("all_tokens_mlm", "All-Tokens MLM", 84.3),
                ("replace_mlm", "Replace MLM", 82.4), ("rtd_masked_only", "ELECTRA 15%", 82.4),
                ("mlm", "BERT", 82.2))


def build_results(budget: Budget, records: list[dict], command: str) -> dict:
    """The report's data: each run with its chosen lr, and per arm the median over pre-training seeds."""
    from electra_tf.config import get_config
    from electra_tf.model.flops import train_flops_per_step

    small = get_config("small")
    small_flops = train_flops_per_step(small) * small.num_train_steps
    runs = {}
    for record in records:
        entry = dict(record)
        try:
            entry["chosen_lr"] = chosen_lr(entry["finetune"])
        except ValueError:
            entry["chosen_lr"] = None
        entry["fraction_of_electra_small_flops"] = entry["pretrain_flops"] / small_flops
        runs[f"{record['arm']}-pseed{record['pretrain_seed']}"] = entry
    arms = {}
    for entry in runs.values():
        arms.setdefault(entry["arm"], []).append(entry)
    summary = {}
    for arm, entries in arms.items():
        per_task = {}
        for task in TASKS:
            values = [headline(e, task) for e in entries]
            values = [v for v in values if v is not None]
            if values:
                per_task[task] = {"median": statistics.median(values), "per_seed": values,
                                  "spread": max(values) - min(values)}
        summary[arm] = {"pretrain_seeds": [e["pretrain_seed"] for e in entries], "tasks": per_task,
                        "generator_width": generator_width(arm)}
    return {"budget": budget.name, "command": command, "model_size": "mini",
            "electra_small_pretrain_flops": small_flops, "average_tasks": list(GLUE_TASKS), "runs": runs,
            "arms": summary, "arm_order": list(summary)}  # the JSON's keys are sorted; this keeps ARMS order


def _cell(value: Optional[float], seeds=()) -> str:
    if value is None:
        return "–"
    return f"**{value:.1f}**" + (f" [{', '.join(f'{v:.1f}' for v in seeds)}]" if seeds else "")


def _headline_cell(entry: dict, task: str) -> str:
    """The task's headline with its seeds; an `OWN_GRID_TASKS` cell names its lr."""
    lr = headline_lr(entry, task)
    value = headline(entry, task)
    cell = _cell(value, entry["finetune"].get(task, {}).get(lr or "", []))
    return cell + (f" (lr {lr})" if task in OWN_GRID_TASKS and value else "")


def _commit(entry: dict) -> str:
    commits = sorted(set(entry.get("pretrain_commits", [])) | set(entry.get("finetune_commits", [])))
    return ", ".join(f"`{c}`" for c in commits) or "–"


def ordering_lines(results: dict) -> list[str]:
    """Our ordering by STS-B median beside the paper's Table 5, with the seed spread."""
    stsb = {arm: s["tasks"][SELECTION_TASK]["median"] for arm, s in results["arms"].items()
            if SELECTION_TASK in s["tasks"]}
    widths = {arm: results["arms"][arm]["generator_width"] for arm in stsb
              if results["arms"][arm]["generator_width"]}  # rtd and the generator-size arms
    by_width = sorted(widths, key=widths.get)
    table5 = {arm: value for arm, value in stsb.items() if arm not in widths or arm == "rtd"}
    spreads = [s["tasks"][SELECTION_TASK]["spread"] for s in results["arms"].values()
               if SELECTION_TASK in s["tasks"] and len(s["tasks"][SELECTION_TASK]["per_seed"]) > 1]
    paper = " > ".join(f"{label} {score}" for _, label, score in PAPER_TABLE5)
    ours = " > ".join(f"{arm} {table5[arm]:.1f}" for arm in sorted(table5, key=table5.get, reverse=True))
    spread = (f"the largest STS-B spread between pre-training seeds of one arm is {max(spreads):.1f} points: "
              "arms closer than that cannot be told apart" if spreads else
              "no arm has two pre-training seeds yet, so the seed spread is unknown")
    lines = [f"- The paper's Table 5 (GLUE, Base-sized, equal steps): {paper}.",
             f"- Ours (STS-B, median over pre-training seeds): {ours}; {spread}."]
    if any(arm != "rtd" for arm in by_width):
        curve = ", ".join(f"{widths[arm]} ({widths[arm] / DISCRIMINATOR_WIDTH:g}): {stsb[arm]:.1f}" for arm in by_width)
        lines.append(f"- Generator size, the paper's Figure 3: GLUE is best with a generator 1/4–1/2 of the "
                     f"discriminator's width. Ours, STS-B by generator hidden size (÷ the discriminator's "
                     f"{DISCRIMINATOR_WIDTH}): {curve}.")
    ner = {arm: s["tasks"]["NER"]["median"] for arm, s in results["arms"].items() if "NER" in s["tasks"]}
    if ner:
        lines.append("- NER (CoNLL-2003 dev entity F1, median over pre-training seeds): "
                     + " > ".join(f"{arm} {ner[arm]:.1f}" for arm in sorted(ner, key=ner.get, reverse=True)) + ".")
    return lines


def markdown(results: dict) -> str:
    tasks = list(TASKS)
    lines = [f"# Objectives at equal compute (`--budget={results['budget']}`)", "",
             f"Generated by `{results['command']}` from the run files in "
             f"`docs/results/objectives/{results['budget']}/`.", "",
             "Each row is one pre-training run (arm × pre-training seed) with the commits that ran it. Cells: the "
             "median over fine-tuning seeds at the run's chosen learning rate (the better STS-B median of the "
             "grid), metric × 100: Spearman (STS-B), accuracy (MRPC, SST-2, RTE), MCC (CoLA), entity F1 "
             "(NER: CoNLL-2003 dev, at its own best lr of the grid, named); the fine-tuning seeds in brackets; the "
             "average is over the GLUE tasks.", "",
             "| arm | pre-training seed | commits | steps | examples | pre-train FLOPs | × ELECTRA-Small | chosen lr | "
             + " | ".join(tasks) + " | average |",
             "|---|---|---|---|---|---|---|---|" + "---|" * len(tasks) + "---|"]
    for entry in results["runs"].values():
        lr = entry["chosen_lr"]
        cells = [_headline_cell(entry, task) for task in tasks]
        average = glue_average(entry)
        lines.append(f"| {entry['arm']} | {entry['pretrain_seed'] if entry['steps'] else '–'} | {_commit(entry)} | "
                     f"{entry['pretrain_steps_done']}/{entry['steps']} | {entry['examples']:,} | "
                     f"{entry['pretrain_flops']:.3g} | {entry['fraction_of_electra_small_flops']:.2%} | "
                     f"{'–' if lr is None else f'{lr:g}'} | " + " | ".join(cells)
                     + f" | {'–' if average is None else f'{average:.1f}'} |")
    lines += ["", "Per arm, the median over pre-training seeds of the runs' medians (each seed's value in brackets):",
              "", "| arm | pre-training seeds | " + " | ".join(tasks) + " |", "|---|---|" + "---|" * len(tasks)]
    for arm, summary in results["arms"].items():
        cells = [_cell(summary["tasks"][t]["median"], summary["tasks"][t]["per_seed"]) if t in summary["tasks"]
                 else "–" for t in tasks]
        lines.append(f"| {arm} | {', '.join(map(str, summary['pretrain_seeds']))} | " + " | ".join(cells) + " |")
    lines += ["", "Ordering:", ""] + ordering_lines(results)
    lines += ["", "Learning-rate grid (median [seeds]) on the tuning tasks and NER:", "",
              "| run | task | " + " | ".join(f"lr {lr}" for lr in _grid(results)) + " |",
              "|---|---|" + "---|" * len(_grid(results))]
    for name, entry in results["runs"].items():
        for task in TUNING_TASKS + tuple(t for t in OWN_GRID_TASKS if t in entry["finetune"]):
            by_lr = entry["finetune"].get(task, {})
            cells = [f"{statistics.median(by_lr[lr]):.1f} [{', '.join(f'{v:.1f}' for v in by_lr[lr])}]"
                     if lr in by_lr else "–" for lr in _grid(results)]
            lines.append(f"| {name} | {task} | " + " | ".join(cells) + " |")
    lines += ["", "Pre-training FLOPs: forward matmul FLOPs × 3, generator included (`electra_tf/model/flops.py`); "
              f"ELECTRA-Small (1M steps × 128 × 128) is {results['electra_small_pretrain_flops']:.3g} by the same "
              "formula. The rtd arm runs the budget's steps; the generator-size arms the same steps; every other "
              "arm the steps that spend rtd's FLOPs, but never fewer than rtd's.", "",
              "Wall-clock (2 CPU cores): "
              + "; ".join(f"{name} pre-training {format_seconds(e['pretrain_seconds'])}, fine-tuning "
                          f"{format_seconds(e.get('finetune_seconds', 0.0))}" for name, e in results["runs"].items())
              + ".", ""]
    missing = [name for name, e in results["runs"].items() if e["steps"] and not e["pretrain_curve"]]
    if missing:
        lines += [f"No pre-training curve was kept for {', '.join(missing)}: only the fine-tuning results of those "
                  "runs survived their work folder.", ""]
    return "\n".join(lines)


def _grid(results: dict) -> list[str]:
    return sorted({lr for e in results["runs"].values() for t in e["finetune"].values() for lr in t}, key=float)


def plot(results: dict, out_dir: Path) -> list[Path]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (pip install -r requirements-bench.txt): no plots")
        return []
    colours = {arm: f"C{index % 10}" for index, arm in enumerate(results["arms"])}
    paths = [_plot_vs_flops(plt, results, colours, out_dir), _plot_generator_width(plt, results, out_dir),
             _plot_curves(plt, results, colours, out_dir)]
    return [path for path in paths if path is not None]


def _plot_vs_flops(plt, results, colours, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for entry in results["runs"].values():
        x = max(entry["pretrain_flops"], 1e12)
        for ax, value, title in ((axes[0], headline(entry, "STS-B"), "STS-B Spearman × 100"),
                                 (axes[1], glue_average(entry), "average of the five tasks")):
            if value is not None:
                ax.scatter([x], [value], s=50, color=colours[entry["arm"]])
                ax.annotate(f"{entry['arm']}/{entry['pretrain_seed']}", (x, value), textcoords="offset points",
                            xytext=(4, 4), fontsize=7)
            ax.set_title(title)
            ax.set_xscale("log")
            ax.set_xlabel("pre-training FLOPs (none at 1e12); label arm/pre-training seed")
    return _save_figure(plt, fig, out_dir / "compare_objectives_vs_flops.png")


def _plot_generator_width(plt, results, out_dir):
    points = [(s["generator_width"] / DISCRIMINATOR_WIDTH, s["tasks"][SELECTION_TASK])
              for s in results["arms"].values()
              if s["generator_width"] and SELECTION_TASK in s["tasks"]]
    if not points:
        return None
    points.sort(key=lambda p: p[0])
    fig, ax = plt.subplots(figsize=(5, 4))
    for ratio, task in points:
        ax.scatter([ratio] * len(task["per_seed"]), task["per_seed"], color="C0", s=25, alpha=0.6)
    ax.plot([p[0] for p in points], [p[1]["median"] for p in points], "o-", color="C1", label="median over seeds")
    for arm, style in (("mlm", "--"), ("none", ":")):  # the bars a generator size has to clear
        reference = results["arms"].get(arm, {}).get("tasks", {}).get(SELECTION_TASK)
        if reference:
            ax.axhline(reference["median"], linestyle=style, color="grey", linewidth=1, label=f"{arm} (median)")
    ax.set_xscale("log", base=2)
    ratios = [p[0] for p in points]
    ax.set_xticks(ratios, [f"{ratio:g}\n({round(ratio * DISCRIMINATOR_WIDTH)})" for ratio in ratios])
    ax.set_xlabel("generator width / discriminator width (generator hidden size)")
    ax.set_ylabel("STS-B Spearman × 100")
    ax.set_title("generator size (rtd, equal steps)")
    ax.legend(fontsize=7)
    return _save_figure(plt, fig, out_dir / "compare_objectives_generator_size.png")


def _plot_curves(plt, results, colours, out_dir):
    curves = [("disc_auc", "discriminator AUC"), ("gen_accuracy", "generator / MLM accuracy"),
              ("gen_loss", "generator / MLM loss"), ("disc_loss", "discriminator loss")]
    fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3.5))
    for name, entry in results["runs"].items():
        for ax, (key, title) in zip(axes, curves):
            points = [(r["step"], r[key]) for r in entry["pretrain_curve"] if key in r]
            if points:
                style = "-" if entry["pretrain_seed"] == 0 else "--"
                ax.plot(*zip(*points), style, label=name, color=colours[entry["arm"]], linewidth=1)
            ax.set_title(title)
            ax.set_xlabel("step")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    return _save_figure(plt, fig, out_dir / "compare_objectives_pretraining.png")


def _save_figure(plt, fig, path: Path) -> Path:
    """Writes `fig` to `path` (100 dpi, tight layout) and closes it."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(budget: Budget, results_dir: Path, command: str) -> dict:
    """docs/results/compare_objectives[_<budget>].{md,json} (and the plots) from the committed run files."""
    results_dir = Path(results_dir)
    results = build_results(budget, load_runs(runs_dir_of(results_dir, budget)), command)
    stem = "compare_objectives" if budget.name == "cpu" else f"compare_objectives_{budget.name}"
    write_json_atomic(results_dir / f"{stem}.json", results)
    (results_dir / f"{stem}.md").write_text(markdown(results))
    if budget.name == "cpu":
        plot(results, results_dir)
    print(markdown(results), flush=True)
    return results
