"""The renderers of the documentation's generated blocks: NAME → function(Context) → Markdown, from one JSON file
under `docs/results/` each (`RENDERERS`), and the Markdown helpers they share.

`tools/render_docs.py` finds the blocks in the pages and calls these; its docstring says which JSON file comes
from which command. A new block: a function here and its line in `RENDERERS`.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Callable

RESULTS = Path("docs") / "results"


# ---------------------------------------------------------------------------------------------
# Helpers for the renderers


class Context:
    """What a renderer needs: the JSON files and links relative to the page being written."""

    def __init__(self, root: Path, page: Path):
        self.root, self.page = root, Path(page)

    def load(self, name: str) -> dict:
        return json.loads((self.root / RESULTS / name).read_text(encoding="utf-8"))

    def link(self, target: str | Path) -> str:
        """A relative link from the page to `target` (a path from the repository root)."""
        return Path(os.path.relpath(Path(target), self.page.parent or Path("."))).as_posix()

    def source(self, name: str) -> str:
        return f"[`{RESULTS.as_posix()}/{name}`]({self.link(RESULTS / name)})"


def table(header: list[str], rows: list[list], align: str | None = None) -> str:
    """A Markdown table; `align` has one letter per column, `l` or `r`.

    >>> print(table(["a", "b"], [[1, "x"]], align="rl"))
    | a | b |
    |---:|---|
    | 1 | x |
    """
    align = align or "l" * len(header)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join("" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def code(text: str) -> str:
    """Inline code that survives a table cell (pipes escaped)."""
    return "`" + text.replace("|", "\\|") + "`"


def ratio(r: dict | None) -> str:
    """'2.21× (2.13–2.34)' from {"median", "min", "max"}."""
    if not r:
        return "–"
    return f"{r['median']:.2f}× ({r['min']:.2f}–{r['max']:.2f})"


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min" + (f" {seconds % 60:02d} s" if seconds % 60 else "")


def number(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}"


def item(text: str, width: int = 115) -> str:
    """A numbered or bulleted list item, wrapped with its continuation lines indented."""
    indent = " " * (text.index(" ") + 1)
    return textwrap.fill(text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def paragraph(text: str, width: int = 115) -> str:
    """`text` wrapped at `width` characters (pages keep their prose lines short; tables stay one line a row)."""
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


# ---------------------------------------------------------------------------------------------
# Renderers: NAME -> function(Context) -> Markdown


def objectives_headline(ctx: Context) -> str:
    """One sentence: rtd against mlm and no pre-training on STS-B, with the link to the full report."""
    data = ctx.load("compare_objectives.json")
    arms = data["arms"]
    sts = {arm: arms[arm]["tasks"]["STS-B"]["median"] for arm in ("rtd", "mlm", "none") if arm in arms}
    rtd_run = next(run for run in data["runs"].values() if run["arm"] == "rtd")
    page = ctx.link(RESULTS / "compare_objectives.md")
    return paragraph(f"At equal pre-training FLOPs (the `{data['model_size']}` shape, "
            f"{100 * rtd_run['fraction_of_electra_small_flops']:.3f} % of ELECTRA-Small's pre-training compute), "
            f"replaced-token detection (`rtd`) reaches an STS-B Spearman of {sts['rtd']:.1f} against "
            f"{sts['mlm']:.1f} for masked LM (`mlm`) and {sts['none']:.1f} without pre-training "
            f"([the objectives experiment]({page}), `{data['command']}`).")


def objectives_summary(ctx: Context) -> str:
    """Per arm: pre-training steps and FLOPs, the task medians and their average."""
    data = ctx.load("compare_objectives.json")
    tasks = data["average_tasks"]  # the columns are the tasks the driver averages, in its order
    rows = []
    for arm in data["arm_order"]:  # the report's order (rtd, mlm, none first)
        entry = data["arms"][arm]
        runs = [run for run in data["runs"].values() if run["arm"] == arm]
        flops = max((run["pretrain_flops"] for run in runs), default=0)
        steps = max((run["steps"] for run in runs), default=0)
        medians = [entry["tasks"].get(task, {}).get("median") for task in tasks]
        done = [m for m in medians if m is not None]
        average = f"{sum(done) / len(done):.1f}" if len(done) == len(tasks) else "–"
        ner = entry["tasks"].get("NER", {}).get("median")
        rows.append([f"`{arm}`", ", ".join(map(str, entry["pretrain_seeds"])), f"{steps:,}", f"{flops:.2e}" if flops else "0",
                     *("–" if m is None else f"{m:.1f}" for m in medians), average,
                     "–" if ner is None else f"{ner:.1f}"])
    head = (f"From {ctx.source('compare_objectives.json')}, written by `{data['command']}`; budget "
            f"`{data['budget']}`, model shape `{data['model_size']}`. Medians over fine-tuning seeds (and over "
            "pre-training seeds where an arm has several), metric × 100: Spearman (STS-B), accuracy (MRPC, SST-2, "
            "RTE), MCC (CoLA); the average is theirs. NER: CoNLL-2003 dev entity F1 at its own best learning rate.")
    return paragraph(head) + "\n\n" + table(["arm", "pre-training seeds", "steps", "pre-training FLOPs", *tasks, "average",
                                              "NER"], rows, "llrr" + "r" * (len(tasks) + 2))


DEMO_ROWS = (  # (label, "train" or "eval", key, decimals)
    ("discriminator AUC, train", "train", "disc_auc", 3),
    ("discriminator AUC, held-out", "eval", "disc_auc", 3),
    ("generator accuracy (masked positions), train", "train", "gen_accuracy", 3),
    ("generator accuracy (masked positions), held-out", "eval", "gen_accuracy", 3),
    ("loss, train", "train", "loss", 2),
    ("loss, held-out", "eval", "loss", 2),
)


def demo_curve(ctx: Context) -> str:
    """The demo's train rows (train_log.jsonl) and held-out rows (eval_log.jsonl), one column per logged step."""
    data = ctx.load("demo_curve.json")
    curves = {"train": data["train"], "eval": data.get("eval") or {"steps": []}}
    steps = sorted(set(curves["train"]["steps"]) | set(curves["eval"]["steps"]))
    rows = []
    for label, curve, key, digits in DEMO_ROWS:
        values = dict(zip(curves[curve]["steps"], curves[curve].get(key, [])))
        if values:
            rows.append([label, *(f"{values[s]:.{digits}f}" if s in values else "–" for s in steps)])
    run = (f"{data['train_batch_size']} × {data['max_seq_length']} tokens"
           if data.get("train_batch_size") and data.get("max_seq_length") else "")
    where = data.get("working_directory", "a fresh directory")
    head = (f"From {ctx.source('demo_curve.json')}: `{data['command']}` in {where} at commit {data['commit']}" + (f" ({data['commit_note']})" if data.get("commit_note") else "")
            + (f", {data['date']}" if data.get("date") else "") + f"; {data['machine']}"
            + (f" (load average {data['load_average']})" if data.get("load_average") is not None else "")
            + f". {minutes(data.get('data_build_seconds'))} to build the demo data (including starting Python and "
            f"TensorFlow), then {minutes(data['train_seconds'])} to train `{data.get('model_size', 'tiny')}` for "
            f"{data.get('num_train_steps', steps[-1] if steps else 0):,} steps" + (f" of {run}" if run else "")
            + ", evaluations included; "
            f"{data['final_examples_per_second']} examples/s at the end.")
    if curves["eval"]["steps"]:
        examples = f" ({data['held_out_examples']} examples)" if data.get("held_out_examples") else ""
        head += (f" Train rows: the mean over the steps since the previous log line (train_log.jsonl; the AUC is "
                 f"Keras' thresholded estimate). Held-out rows: the 10 % of the documents the demo holds out"
                 f"{examples}, always the same masks and samples, no dropout, exact AUC (eval_log.jsonl). The loss is "
                 + (f"the generator's plus {data['disc_weight']:g} × the discriminator's"
                    if data.get("disc_weight") else "the generator's plus the weighted discriminator's")
                 + ", as in training.")
    return paragraph(head) + "\n\n" + table(["step", *map(str, steps)], rows, "l" + "r" * len(steps))


def metrics_text(metrics: list) -> str:
    (name, value), *rest = metrics
    text = f"{name} {value:.2f}"
    return text + (" (" + ", ".join(f"{n} {v:.2f}" for n, v in rest) + ")" if rest else "")


def finetuning_smoke(ctx: Context) -> str:
    data = ctx.load("finetuning_smoke.json")
    rows, commands = [], []
    for i, run in enumerate(data["runs"], 1):
        rows.append([i, run["name"], metrics_text(run["metrics"]), run.get("note", ""), minutes(run["wall_seconds"])])
        before = "".join(f"{code(c)}, then " for c in run.get("before", []))
        commands.append(f"{i}. {before}{code(run['command'])}")
    head = (f"From {ctx.source('finetuning_smoke.json')}: commit {data['commit']}, {data['machine']}. "
            f"{data['description']}")
    return (paragraph(head) + "\n\n" + table(["#", "run", "dev result", "note", "wall"], rows, "rlllr")
            + "\n\nCommands:\n\n" + "\n".join(item(c) for c in commands))


def data_prep_throughput(ctx: Context) -> str:
    data = ctx.load("data_prep.json")["throughput"]
    rows = []
    for r in data["rows"]:
        identical = {True: "yes", False: "no", None: ""}[r["shards_identical"]]
        speedup = f"{r['data_prep_speedup']}×" if r["data_prep_speedup"] else ""
        examples = f"{r['examples']:,}" if r["examples"] else ""
        rows.append([r["tokenizer"], r["processes"], number(r["mb_per_s"]), number(r["seconds"]), examples,
                     identical, speedup])
    head = (f"From {ctx.source('data_prep.json')}: `{data['command']}` on {data['input']}; {data['method']}; "
            f"{data['machine']}.")
    return paragraph(head) + "\n\n" + table(["tokenizer in the pipeline", "processes", "MB/s", "seconds", "examples",
                                  "shards identical", "data_prep is faster by"], rows, "lrrrrlr")


def data_prep_builds(ctx: Context) -> str:
    data = ctx.load("data_prep.json")["builds"]
    rows, commands = [], []
    for i, r in enumerate(data["rows"], 1):
        truncated = f"{r['truncated_percent']} %"
        if r.get("long_sentences") is not None:
            limit = r["max_seq_length"] - 2
            truncated += f" ({r['long_sentences']} sentences > {limit} tokens)"
        rows.append([i, r["input"], r["vocab"], r["max_seq_length"], f"{r['examples']:,}",
                     f"{r['unk_rate_percent']} %", truncated,
                     "–" if r.get("wall_seconds") is None else f"{r['wall_seconds']} s"])
        before = f"{code(r['before'])}, then " if r.get("before") else ""
        note = f" ({r['note']})" if r.get("note") else ""
        commands.append(f"{i}. {before}{code(r['command'])}{note}")
    head = (f"From {ctx.source('data_prep.json')}: one `build_pretraining_dataset` run per row, "
            f"{data['machine']}; the [UNK] rate is over the text tokens written.")
    return (paragraph(head) + "\n\n" + table(["#", "input", "vocab", "`--max_seq_length`", "examples", "[UNK] rate",
                                   "tokens dropped by truncation", "wall"], rows, "rllrrrrr")
            + "\n\nCommands:\n\n" + "\n".join(item(c) for c in commands))


def _step_rows(data: dict) -> list[tuple[dict, dict]]:
    return [(run, row) for run in data["runs"] for row in run["rows"]]


def _step_head(ctx: Context, data: dict) -> str:
    runs = "; ".join(f"{run['name'].capitalize()} at commit {run['commit']}: {code(run['command'])}"
                     for run in data["runs"])
    peaks = data["matmul_peak_gflop_per_s"]
    return (f"From {ctx.source('step_bench_latest.json')}: {data['machine']} (dense-matmul peaks: "
            f"TensorFlow {peaks['tensorflow_fp32']} GFLOP/s fp32 and {peaks['tensorflow_bf16']} bf16, PyTorch "
            f"{peaks['torch_fp32']} fp32 and {peaks['torch_bf16']} bf16). {runs}.")


def step_bench_summary(ctx: Context) -> str:
    """Our throughput and first step, and the ratios to the peers, one line per step."""
    data = ctx.load("step_bench_latest.json")
    labels = {"small 32×128": "Small pre-training, 32 × 128", "base 8×128": "Base pre-training, 8 × 128",
              "small finetune (cls, 2 labels) 32×128": "Small fine-tuning (classification), 32 × 128"}
    rows = []
    for run, row in _step_rows(data):
        if row["implementation"] not in ("ours", "ours_finetune") or row["group"] not in labels:
            continue
        peers = {r["implementation"]: r for r in run["rows"]
                 if r["group"] == row["group"] and r["precision"] == row["precision"]}
        hf = peers.get("hf") or peers.get("hf_finetune")
        keras_hub = peers.get("keras_hub")
        rows.append([f"{labels[row['group']]}, {row['precision']}", number(row["seq_per_s"]),
                     f"{row['first_step_s']} s", ratio(hf and hf["ours_over_this"]),
                     ratio(keras_hub and keras_hub["ours_over_this"])])
    precision = [f"{run['name'].capitalize()} {ratio(row['ours_over_this'])}"
                 for run, row in _step_rows(data) if row["implementation"] == "ours_fp32"]
    tail = ""
    if precision:
        tail = "\n\n" + paragraph("Our bf16 step against our fp32 step, the two interleaved in the same rounds: "
                                  + ", ".join(precision) + ".")
    return paragraph(_step_head(ctx, data)) + "\n\n" + table(
        ["step", "ours, sequences/s", "first step", "ours ÷ HF transformers", "ours ÷ keras-hub pair"],
        rows, "lrrll") + tail


def step_bench_full(ctx: Context) -> str:
    """Every row of the latest runs, as `bench/step_bench.py` reports them."""
    data = ctx.load("step_bench_latest.json")
    rows = []
    for _, r in _step_rows(data):
        lo, hi = r["seq_per_s_range"]
        rows.append([r["group"], r["precision"], r["implementation"], number(r["seq_per_s"]), f"{lo:.2f}–{hi:.2f}",
                     f"{r['gflop_per_s']:.1f}", f"{r['mfu_percent']:.1f} %", r["first_step_s"], r["build_s"],
                     ratio(r["ours_over_this"]) if r["ours_over_this"] else "1", number(r["cpu_s_per_step"]),
                     ratio(r["ours_over_this_cpu"]) if r["ours_over_this_cpu"] else "1"])
    return paragraph(_step_head(ctx, data)) + "\n\n" + table(
        ["size", "precision", "implementation", "seq/s (median)", "seq/s range", "GFLOP/s", "MFU", "first step s",
         "build s", "ours ÷ this, throughput", "CPU-s/step", "ours ÷ this, CPU time"], rows, "lllrrrrrrlrl")


def step_bench_ablations(ctx: Context) -> str:
    data = ctx.load("step_bench_latest.json")
    run = next(run for run in data["runs"] if "ablations" in run)
    ablations = run["ablations"]

    def saving(s):
        return "–" if not s else f"{s['median']:+.1f} % ({s['min']:+.1f} to {s['max']:+.1f})"

    rows = [[f"`{r['variant']}` ({r['what']})" if r["variant"] != "ours" else "ours (unchanged)",
             number(r["cpu_s_per_step"]), saving(r["cpu_saving_percent"]), number(r["wall_s_per_step"]),
             saving(r["wall_saving_percent"]), r["first_step_s"]] for r in ablations["rows"]]
    pipeline = run.get("pipeline_examples_per_s")
    tail = ""
    if pipeline:
        tail = "\n\n" + paragraph(f"The tf.data pipeline alone, in the same run: {pipeline['median']:,} examples/s "
                                  "(runs " + ", ".join(f"{v:,}" for v in pipeline["runs"]) + ").")
    reruns = "".join(
        "\n" + item(f"- {code(p['command'])} at commit {p['commit']}: bf16 {p['bf16_seq_per_s']} sequences/s, fp32 "
        f"{p['fp32_seq_per_s']}, bf16 ÷ fp32 {ratio(p['bf16_over_fp32'])}.") for p in data.get("precision_runs", []))
    if reruns:
        tail += "\n\nOur bf16 step against our fp32 step in runs of their own:\n" + reruns
    head = (f"From {ctx.source('step_bench_latest.json')}: the {run['name'].capitalize()} run above (commit "
            f"{run['commit']}), {ablations['size'].capitalize()} {ablations['precision']}; {ablations['note']}.")
    return paragraph(head) + "\n\n" + table(
        [f"variant ({ablations['size'].capitalize()} {ablations['precision']})", "CPU-s/step",
         "CPU saving, median (range)", "wall s/step", "wall saving, median (range)", "first step s"],
        rows, "lrrrrr") + tail


def conll_ner(ctx: Context) -> str:
    """Every record of `experiments/conll_ner.py` under docs/results/conll/, one row each."""
    names = sorted(p.name for p in (ctx.root / RESULTS / "conll").glob("*.json"))
    rows, commands = [], []
    for i, name in enumerate(names, 1):
        run = ctx.load(f"conll/{name}")
        dev = run["dev"]
        per_type = ", ".join(f"{t} {number(dev[t + '_f1'], 1)}" for t in ("PER", "LOC", "ORG", "MISC")
                             if t + "_f1" in dev)
        dev_counts = run["data"].get("dev", {})
        seeds = (f"; F1 per seed {', '.join(number(f) for f in run['f1_per_seed'])}"
                 if len(run.get("f1_per_seed", [])) > 1 else "")
        label = f"{run['task']}: {run['model']}; segment id {run['tagging_segment_id']}"
        rows.append([i, label, number(dev["f1"]), number(dev["precision"]), number(dev["recall"]),
                     number(dev["accuracy"]), per_type, run["train_steps"], run["seeds"], minutes(run["wall_seconds"])])
        commands.append(f"{i}. {code(run['command'])} ({ctx.source('conll/' + name)}; commit {run['commit']}, "
                        f"{run['date']}, {run['machine']}; {run['recipe']}{seeds}; dev: "
                        f"{dev_counts.get('split_sentences', 0)} of {dev_counts.get('sentences', 0)} sentences "
                        "longer than max_seq_length, split into windows)")
    head = ("CoNLL-2003 English dev set, `conlleval` entity scores in percent (median over the seeds), from "
            "`python -m experiments.conll_ner`, whose records are the JSON files under "
            f"{ctx.source('conll')}.")
    if not rows:
        return paragraph(head + " No run recorded yet.")
    return (paragraph(head) + "\n\n" + table(["#", "run", "F1", "precision", "recall", "token acc.", "F1 per type",
                                              "steps", "seeds", "wall"], rows, "rlrrrrlrrr")
            + "\n\nCommands:\n\n" + "\n".join(item(c) for c in commands))


INFERENCE_RESULTS = Path("bench") / "results" / "inference-sst2-small.json"
INFERENCE_TAGGER_RESULTS = Path("bench") / "results" / "inference-conll-tagger-small.json"
INFERENCE_SQUAD_RESULTS = Path("bench") / "results" / "inference-squad-small.json"
INFERENCE_SYSTEMS = {"ours": "our serving SavedModel", "ours_before": "our serving SavedModel, before",
                     "hf": "HF transformers (PyTorch), fast tokenizer", "ort": "ONNX Runtime, HF fast tokenizer"}


def inference_timings(ctx: Context, path: Path) -> tuple[dict, str]:
    """An inference bench's results (`path`) and their opening paragraph and timings table (one row a system)."""
    data = json.loads((ctx.root / path).read_text(encoding="utf-8"))

    def cell(spread, digits):
        return f"{spread['median']:.{digits}f} [{spread['min']:.{digits}f}–{spread['max']:.{digits}f}]"

    rows = [[INFERENCE_SYSTEMS[name], cell(r["batch1_median_ms"], 1), f"{r['batch1_p90_ms']['median']:.1f}",
             cell(r["batch32_sentences_per_s"], 1), f"{r['load_s']['median']:.2f} s",
             f"{r['first_request_s']['median']:.3f} s"] for name, r in data["systems"].items()]
    source = f"[`{path.as_posix()}`]({ctx.link(path)})"
    head = (f"From {source}: {code(data['command'])} at commit {data['commit']}, {data['date']}, {data['machine']}; "
            f"{data['model']}; {data['data']} as raw text, tokenisation included; {data['rounds']} interleaved rounds, "
            f"each system in a process of its own, medians [range over the rounds]. Batch 1: {data['requests']} "
            "requests of one sentence; batch 32: every sentence in batches of 32.")
    return data, paragraph(head) + "\n\n" + table(
        ["system", "batch 1, median ms", "batch 1, p90 ms", "batch 32, sentences/s", "load", "first request"],
        rows, "lrrrrr")


def inference_ratios(data: dict) -> str:
    """Issue #58's goal and acceptance beside the measured ratios of an inference bench's results."""
    r, ours = data["ratios"], data["systems"]["ours"]
    by_round = r.get("ours_over_ort_batch1_by_round")  # results written before it was recorded lack it
    rounds = f", each round's own {', '.join(f'{x:.2f}' for x in by_round)}" if by_round else ""
    return (f"Ours ÷ ONNX Runtime, batch-1 median: {r['ours_over_ort_batch1_median']:.2f}{rounds} (goal ≤ 1, "
            f"acceptance ≤ 1.5); batch-32 throughput: {r['ours_over_ort_batch32_throughput']:.2f} (goal ≥ 1); "
            f"ours ÷ HF transformers, batch-32 throughput: {r['ours_over_hf_batch32_throughput']:.2f} "
            f"(acceptance ≥ 1); our load + first request: "
            f"{ours['load_s']['median'] + ours['first_request_s']['median']:.2f} s (acceptance ≤ 0.5 s).")


def inference_bench(ctx: Context) -> str:
    """`bench/inference_bench.py`'s systems, one row each, and the issue's goal beside the measured ratios."""
    data, timings = inference_timings(ctx, INFERENCE_RESULTS)
    before = f" Before: {data['ours_before']}." if "ours_before" in data else ""
    before += f" Ours: {data['ours_export']}." if "ours_export" in data else ""
    before += f" Note: {data['note']}." if "note" in data else ""
    differences = ", ".join(f"{pair} {value:.1e}" for pair, value in data["max_abs_logit_difference"].items())
    tail = (f"Largest |logit difference| over the {data['compared_inputs']} sentences: {differences}.{before} "
            + inference_ratios(data))
    return timings + "\n\n" + paragraph(tail)


def inference_tagger(ctx: Context) -> str:
    """`bench/inference_bench_tagger.py`'s systems, one row each, the tags' agreement and the speed ratios."""
    data, timings = inference_timings(ctx, INFERENCE_TAGGER_RESULTS)

    def agreement(pair, a):
        cut = (f"; words past HF's truncation, not compared: {a['words_tagged_by_one_only']} (sentences cut: "
               f"{a['sentences_tagged_in_part_by_one']}, of them disagreeing: {a['of_which_with_disagreement']})"
               if a["words_tagged_by_one_only"] else "")
        return (f"{pair}: {100 * a['agreeing_fraction']:.3f} % of {a['words']} words agree, disagreeing sentences: "
                f"{a['sentences_with_disagreement']}{cut}")

    agreements = "; ".join(agreement(pair, a) for pair, a in data["tag_agreement"].items())
    tail = (f"Tags of every word of the {data['compared_inputs']} sentences, system against system: {agreements}. "
            + inference_ratios(data) + by_words_sentence(data))
    return timings + "\n\n" + paragraph(tail)


def by_words_sentence(data: dict) -> str:
    """The tagger's batch 1 by words per request, ours against ONNX Runtime ("" for results without it)."""
    buckets = data.get("batch1_by_words")
    if not buckets or not all("ours_over_ort" in b for b in buckets.values()):
        return ""
    each = "; ".join(f"{name} words ({b['requests']}): ours {b['median_ms']['ours']:.2f}, ONNX Runtime "
                     f"{b['median_ms']['ort']:.2f} ms, {b['ours_over_ort']:.2f} ×" for name, b in buckets.items())
    return f" Batch-1 medians by words per request (requests): {each}."


def inference_squad(ctx: Context) -> str:
    """`bench/inference_bench_squad.py`'s systems, one row each, the answers' exact match and the speed ratios."""
    data, timings = inference_timings(ctx, INFERENCE_SQUAD_RESULTS)
    agreements = "; ".join(f"{pair}: {100 * a['exact_match_fraction']:.1f} % of {a['pairs']} answers identical, "
                           f"{a['differing']} differ" for pair, a in data["answer_agreement"].items())
    tail = (f"A sentence is one question-context pair. The answer strings of the {data['compared_inputs']} pairs, "
            f"system against system: {agreements}. " + inference_ratios(data))
    return timings + "\n\n" + paragraph(tail)


RENDERERS: dict[str, Callable[[Context], str]] = {
    "inference_bench": inference_bench,
    "inference_tagger": inference_tagger,
    "inference_squad": inference_squad,
    "objectives_headline": objectives_headline,
    "objectives_summary": objectives_summary,
    "demo_curve": demo_curve,
    "finetuning_smoke": finetuning_smoke,
    "data_prep_throughput": data_prep_throughput,
    "data_prep_builds": data_prep_builds,
    "step_bench_summary": step_bench_summary,
    "step_bench_full": step_bench_full,
    "step_bench_ablations": step_bench_ablations,
    "conll_ner": conll_ner,
}
