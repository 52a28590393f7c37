"""The result of a run: one JSON document (`new_report`, `finish`, `write_json`) and its printed tables.

The JSON holds the command line, the commit, the machine, the thread settings, the matmul peaks
and, per group (implementations interleaved in the same rounds), every round's order and timings
and the ratios of the group's reference to each other implementation (`harness.group_ratios`).
Ablation groups also hold the baseline's execution options and each variant's changes.
"""

import json
import os
import statistics
import time

import tensorflow as tf

from bench.step_bench import harness, profile

SCHEMA = 1
RESULTS = harness.REPO / "bench" / "results"
SCRATCH = RESULTS / "scratch"  # git-ignored: runs that back no claim


def new_report(argv: list, settings: dict, torch_threads=None) -> dict:
    return {
        "schema": SCHEMA, "command": " ".join(["python -m bench.step_bench"] + list(argv)), "argv": list(argv),
        "commit": harness.commit_id(), "machine": harness.machine(), "settings": settings,
        "threads": {"tf_intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "tf_inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                    "torch": torch_threads, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")},
        "notes": [], "groups": [],
    }


def finish(report: dict, peaks: dict):
    """The peaks of the whole run (MFU of every group against the best one) and the final load."""
    report["peaks_gflops"] = {f"{framework} {precision}": value
                              for (framework, precision), value in sorted(peaks.items())}
    for group in report["groups"]:
        group["peak_gflops"] = harness.best_peak(peaks, group["peak_precision"])
    report["machine"]["load_average_end"] = harness.load_average()


def default_json_path() -> str:
    return str(SCRATCH / time.strftime("step_bench-%Y%m%d-%H%M%S.json"))


def write_json(report: dict, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=2, default=str)
        f.write("\n")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------
# Printed tables
# --------------------------------------------------------------------------

def fmt_ratio(stats) -> str:
    return f"{stats['median']:.2f}x ({stats['min']:.2f}-{stats['max']:.2f})" if stats else "-"


def median_of(result: dict, key: str) -> float:
    values = harness.per_round(result, key)
    return statistics.median(values) if values else float("nan")


def group_rows(group: dict) -> list:
    rows = []
    for name, result in group["results"].items():
        seq = median_of(result, "seq_s")
        seqs = harness.per_round(result, "seq_s") or [float("nan")]
        gflops = seq / group["batch_size"] * group["flops_per_step"] / 1e9
        reference = name == group["reference"]
        rows.append(
            f"| {group['name']} | {name} | {seq:.2f} | {min(seqs):.2f}-{max(seqs):.2f} | {gflops:.1f} | "
            f"{100 * gflops / group['peak_gflops']:.1f} % | {result['first_step_s']:.1f} | {result['build_s']:.1f} | "
            f"{'1' if reference else fmt_ratio(group['ratios']['throughput'].get(name))} | "
            f"{median_of(result, 'cpu_s_per_step'):.2f} | "
            f"{'1' if reference else fmt_ratio(group['ratios']['cpu'].get(name))} |")
    return rows


def print_groups(groups: list):
    print("\n| group | implementation | seq/s (median) | seq/s range | GFLOP/s | MFU | first step s | build s | "
          "reference ÷ this, throughput: median (range) | CPU-s/step | this ÷ reference, CPU-s/step |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for group in groups:
        for row in group_rows(group):
            print(row)
    for group in groups:
        if group.get("variants"):
            print(f"\n{group['name']}: reference {group['reference']} = "
                  + " ".join(f"{k}={v}" for k, v in group["baseline"].items()) + "; variants:")
            for name, variant in group["variants"].items():
                print(f"- {name} ({variant['changes']}) undoes {variant['undoes']}")


def print_pipeline(p: dict):
    multiples = ", ".join(f"{k}: {v:.1f}x" for k, v in p.get("multiple_of_step", {}).items())
    print(f"\ntf.data pipeline alone (input_pipeline.pretraining_dataset, {p['shards']} shards, batch "
          f"{p['batch_size']} × 128, {p['batches']} batches × 3): {p['examples_s']:.0f} examples/s "
          f"(runs {', '.join(f'{x:.0f}' for x in p['examples_s_all'])}); multiple of what our step "
          f"consumes: {multiples or '-'}")


def print_report(report: dict, json_path):
    settings, threads = report["settings"], report["threads"]
    print(f"\nCommand: {report['command']} (commit {report['commit']})")
    print(f"Hardware: {harness.hardware_line(report['machine'])}")
    print(f"Threads: TF intra-op {threads['tf_intra_op']} (0 = all cores), inter-op {threads['tf_inter_op']}; "
          f"torch {threads['torch'] or '-'} (OMP_WAIT_POLICY={threads['OMP_WAIT_POLICY']}); {settings['rounds']} "
          f"rounds × {settings['steps']} timed steps after {settings['warmup']} warm-up steps, order rotating")
    for note in report["notes"]:
        print(f"Note: {note}")
    print("\nDense matmul peak (2048³, best of 5 at the start and 5 at the end, GFLOP/s): "
          + ", ".join(f"{k} {v:.0f}" for k, v in report["peaks_gflops"].items()))
    if report["groups"]:
        print_groups(report["groups"])
    if report.get("pipeline"):
        print_pipeline(report["pipeline"])
    if report.get("profile"):
        profile.print_profile(report["profile"])
    print(f"\nJSON result: {json_path or '(not written)'}")
