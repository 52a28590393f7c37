"""bench/step_bench: interleaving order, ratio statistics, ablations as option changes, the JSON result."""

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.step_bench import ablations, harness, report
from electra_tf.options import ExecutionOptions

REPO = Path(__file__).resolve().parents[1]
CPU = {"CPU"}
BASELINE = ExecutionOptions().resolve(CPU)


class Fake(harness.Implementation):
    """Counts its steps; `fail=True`: its first step raises."""

    def __init__(self, name, fail=False):
        self.name, self.fail, self.steps, self.closed = name, fail, 0, False

    def call(self, steps):
        if self.fail:
            raise RuntimeError("no kernel\nfor this op")
        self.steps += steps
        return 1.5

    def close(self):
        self.closed = True


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(harness, "settle", lambda: None)  # no gc.collect and pause between implementations


def timings(seq_s, cpu_s_per_step):
    return {"rounds": [{"seq_s": s, "cpu_s_per_step": c} for s, c in zip(seq_s, cpu_s_per_step)]}


# --------------------------------------------------------------------------
# Interleaving
# --------------------------------------------------------------------------

def test_rotation_shifts_the_order_by_one_each_round():
    assert [harness.rotation("abc", r) for r in range(4)] == [list("abc"), list("bca"), list("cab"), list("abc")]
    assert harness.rotation([], 3) == []


def test_every_implementation_leads_one_round_in_len_rounds():
    items = ["ours", "hf", "keras_hub", "x"]
    orders = [harness.rotation(items, r) for r in range(len(items))]
    assert sorted(order[0] for order in orders) == sorted(items)
    assert all(sorted(order) == sorted(items) for order in orders)


def test_interleave_runs_each_round_in_the_rotated_order_and_times_every_round():
    impls = [Fake("a"), Fake("b"), Fake("c")]
    results, order = harness.interleave(impls, rounds=3, steps=2, warmup=1, rows=4, label="t", notes=[])
    assert order == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert [impl.steps for impl in impls] == [1 + 3 * (1 + 2)] * 3  # first step, then warm-up + timed per round
    for result in results.values():
        assert result["first_loss"] == 1.5 and len(result["rounds"]) == 3
        assert all(t["steps"] == 2 and t["seq_s"] == pytest.approx(2 * 4 / t["wall_s"]) for t in result["rounds"])


def test_an_implementation_whose_first_step_fails_is_dropped_with_a_note():
    impls, notes = [Fake("a"), Fake("broken", fail=True)], []
    results, order = harness.interleave(impls, rounds=2, steps=1, warmup=0, rows=1, label="g", notes=notes)
    assert list(results) == ["a"] and order == [["a"], ["a"]]
    assert notes == ["g broken: first step failed (RuntimeError: for this op)"]


# --------------------------------------------------------------------------
# Ratios
# --------------------------------------------------------------------------

def test_ratio_stats_are_per_round_then_median_and_range():
    stats = harness.ratio_stats([6.0, 2.0, 9.0], [3.0, 2.0, 3.0])
    assert stats == {"median": 2.0, "min": 1.0, "max": 3.0, "per_round": [2.0, 1.0, 3.0]}
    assert harness.ratio_stats([], []) is None


def test_group_ratios_divide_within_each_round():
    results = {"ours": timings([10.0, 8.0], [1.0, 2.0]), "hf": timings([5.0, 2.0], [3.0, 3.0])}
    ratios = harness.group_ratios(results, "ours")
    assert ratios["throughput"]["hf"]["per_round"] == [2.0, 4.0]  # ours ÷ hf seq/s: > 1 = ours faster
    assert ratios["cpu"]["hf"]["per_round"] == [3.0, 1.5]  # hf ÷ ours CPU-s/step
    assert set(ratios["throughput"]) == {"hf"}
    assert harness.group_ratios(results, "absent") == {"throughput": {}, "cpu": {}}


# --------------------------------------------------------------------------
# Ablations: option switches, nothing patched
# --------------------------------------------------------------------------

ALL_FIELDS = {field.name for field in dataclasses.fields(ExecutionOptions)}
INTENDED = {
    "reference_kernels": {"kernels"},
    "keras_dropout": {"kernels", "dropout_masks"},
    "gumbel_sampling": {"sampling"},
    "ops_adam": {"adam_kernel"},
    "grappler_on": {"graph_optimizer"},
    "graph_loop": {"step_loop"},
    "xla": {"kernels", "dropout_masks", "sampling", "jit_compile"},
    "accelerator_defaults": ALL_FIELDS - {"gradient_accumulation_steps"},  # one batch per step on every device
}


def changed_fields(a: ExecutionOptions, b: ExecutionOptions) -> set:
    return {name for name in ALL_FIELDS if getattr(a, name) != getattr(b, name)}


def test_every_ablation_differs_from_the_cpu_baseline_in_exactly_its_intended_fields():
    assert set(ablations.PRETRAINING) == set(INTENDED)
    options = {a.name: a.options(BASELINE, CPU) for a in ablations.ABLATIONS}
    for name, option in options.items():
        assert option.resolved, name
        assert changed_fields(option, BASELINE) == INTENDED[name], name
    assert len(set(options.values())) == len(options)  # distinct


def test_xla_and_accelerator_defaults_are_the_accelerators_path():
    accelerator = ExecutionOptions().resolve({"CPU", "GPU"})
    assert ablations.BY_NAME["accelerator_defaults"].options(BASELINE, CPU) == accelerator
    xla = ablations.BY_NAME["xla"].options(BASELINE, CPU)
    assert changed_fields(xla, accelerator) == {"adam_kernel", "graph_optimizer", "step_loop"}


def test_fine_tuning_takes_every_ablation_but_sampling():
    assert set(ablations.FINETUNING) == set(ablations.PRETRAINING) - {"gumbel_sampling"}
    with pytest.raises(ValueError, match="gumbel_sampling"):
        ablations.parse("ops_adam,gumbel_sampling", ablations.FINETUNING)
    assert [a.name for a in ablations.parse("ops_adam,,xla", ablations.PRETRAINING)] == ["ops_adam", "xla"]


def test_variants_leave_out_what_cannot_run_or_equals_the_baseline():
    notes = []
    gpu_baseline = ExecutionOptions().resolve({"GPU"})
    chosen = ablations.parse("reference_kernels,ops_adam,grappler_on", ablations.PRETRAINING)
    assert ablations.variants(chosen, gpu_baseline, {"GPU"}, notes) == {}
    assert len(notes) == 3 and all("the baseline's options" in note for note in notes)
    broken = ablations.Ablation("broken", (("kernels", "xla_cpu"), ("dropout_masks", "keras")), "nothing")
    assert ablations.variants([broken], BASELINE, CPU, notes) == {}
    assert notes[-1].startswith("ablation broken: cannot run")


# --------------------------------------------------------------------------
# The machine and the JSON result
# --------------------------------------------------------------------------

def test_commit_id_is_short_hash_and_says_when_the_tree_differs():
    commit = harness.commit_id()
    assert commit is None or re.fullmatch(r"[0-9a-f]{4,40}(\+modified)?", commit)


def test_hardware_line_names_cpu_cores_isa_and_onednn():
    facts = {"cpu": "Some CPU", "cores": 2, "cpus_online": 4, "isa": ["avx2", "fma"], "onednn": True,
             "load_average_start": 1.234, "versions": {"tensorflow": "2.21.0"}, "python": "3.11.7"}
    assert harness.hardware_line(facts) == ("Some CPU, 2 cores (4 CPUs online; ISA avx2,fma), load average 1.2 at "
                                            "start; TF oneDNN kernels on; tensorflow 2.21.0; Python 3.11.7")


def check_schema(result: dict, impl_names: set):
    assert result["schema"] == report.SCHEMA
    assert set(result["machine"]) >= {"cpu", "cores", "isa", "onednn", "versions", "load_average_end"}
    assert result["command"].startswith("python -m bench.step_bench") and "commit" in result
    assert result["peaks_gflops"] and all(value > 0 for value in result["peaks_gflops"].values())
    group = result["groups"][-1]
    assert set(group) >= {"name", "reference", "order", "results", "ratios", "flops_per_step", "peak_gflops"}
    assert set(group["results"]) == impl_names and group["reference"] in impl_names
    for timing in (t for r in group["results"].values() for t in r["rounds"]):
        assert set(timing) == {"steps", "wall_s", "cpu_s", "seq_s", "cpu_s_per_step"}
    others = impl_names - {group["reference"]}
    assert set(group["ratios"]["throughput"]) == set(group["ratios"]["cpu"]) == others
    return group


def test_json_result_of_fake_implementations(tmp_path):
    result = report.new_report(["--rounds=2"], {"rounds": 2, "steps": 1, "warmup": 0, "ablation_steps": 1})
    impls = [Fake("ours"), Fake("peer")]
    results, order = harness.interleave(impls, 2, 1, 0, 8, "g", result["notes"])
    result["groups"].append({"name": "g", "reference": "ours", "order": order, "results": results,
                             "ratios": harness.group_ratios(results, "ours"), "flops_per_step": 1,
                             "peak_precision": "fp32", "batch_size": 8})
    report.finish(result, {("tf", "fp32"): 100.0})
    path = report.write_json(result, str(tmp_path / "sub" / "r.json"))
    group = check_schema(json.loads(Path(path).read_text()), {"ours", "peer"})
    assert group["peak_gflops"] == 100.0 and len(group["ratios"]["throughput"]["peer"]["per_round"]) == 2


def test_default_json_path_is_in_the_ignored_scratch_folder():
    path = Path(report.default_json_path())
    assert path.parent == REPO / "bench" / "results" / "scratch" and path.suffix == ".json"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=REPO).returncode == 0
    kept = subprocess.run(["git", "check-ignore", "-q", str(REPO / "bench/results/x.json")], cwd=REPO).returncode
    assert ignored and kept == 1


@pytest.mark.slow
def test_a_tiny_run_writes_the_json_result(tmp_path):
    """The whole command, tiny: ours and one ablation, one round of one step (minutes on 2 busy cores)."""
    out = tmp_path / "tiny.json"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-m", "bench.step_bench", "--sizes=tiny", "--precisions=fp32", "--only=ours",
               "--rounds=1", "--steps=1", "--warmup=0", "--ablations", "--ablation_list=reference_kernels",
               "--ablation_size=tiny", "--ablation_steps=1", f"--json_out={out}"]
    run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"JSON result: {out}" in run.stdout
    result = json.loads(out.read_text())
    group = check_schema(result, {"ours", "ours[reference_kernels]"})
    assert group["variants"]["reference_kernels"]["changes"] == "kernels=reference"
    assert group["baseline"] == dataclasses.asdict(BASELINE)
    assert group["results"]["ours[reference_kernels]"]["execution"]["kernels"] == "reference"
    assert result["groups"][0]["name"] == "tiny/fp32"
