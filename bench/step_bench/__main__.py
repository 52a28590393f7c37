"""`python -m bench.step_bench`: the groups a run measures, in order (see the package docstring)."""

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# PyTorch's OpenMP workers busy-wait at barriers by default; on a shared, oversubscribed machine a
# spinning worker starves its partner. PASSIVE makes them block like TF's Eigen pool (TF does not
# use OpenMP). The environment can override it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from electra_tf.runtime import XLA_CACHE_HELP, use_onednn_kernels, use_xla_cache  # noqa: E402

use_onednn_kernels()  # before TensorFlow is imported, as in run_pretraining.py

import tensorflow as tf  # noqa: E402

from bench import step_bench  # noqa: E402
from bench.step_bench import ablations, harness, ours, peers, profile, report, workload  # noqa: E402
from electra_tf.training import distribution  # noqa: E402
from electra_tf.options import ExecutionOptions  # noqa: E402

tf.get_logger().setLevel("ERROR")  # each implementation traces its own step: no retracing warnings

ONLY = ("ours", "hf", "keras_hub", "finetune", "pipeline", "precision")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench.step_bench", description=step_bench.__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="small,base")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--only", default=",".join(ONLY), help=f"subset of {','.join(ONLY)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per implementation per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before each timed run")
    parser.add_argument("--pipeline_batches", type=int, default=300)
    parser.add_argument("--finetune_ablations", default="",
                        help=f"with finetune: also time ours under these options ({', '.join(ablations.FINETUNING)})")
    parser.add_argument("--ablations", action="store_true", help="time our step under other execution options")
    parser.add_argument("--ablation_list", default=",".join(ablations.PRETRAINING))
    parser.add_argument("--ablation_size", default="small")
    parser.add_argument("--ablation_precision", default="fp32")
    parser.add_argument("--ablation_steps", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="TF-profile a few steps of ours (first size)")
    parser.add_argument("--profile_steps", type=int, default=3)
    parser.add_argument("--profile_precision", default="fp32")
    parser.add_argument("--xla_cache_dir", default="auto", help="as the scripts' flag: " + XLA_CACHE_HELP)
    parser.add_argument("--json_out", default=None,
                        help="where the JSON result goes (default: a timestamped file in bench/results/scratch/; "
                             "empty: none)")
    args = parser.parse_args(argv)
    args.only = [x for x in args.only.split(",") if x]
    args.sizes = [x for x in args.sizes.split(",") if x]
    args.precisions = [x for x in args.precisions.split(",") if x]
    if set(args.only) - set(ONLY):
        parser.error(f"--only: unknown {sorted(set(args.only) - set(ONLY))}; choose from {ONLY}")
    try:
        args.ablation_list = ablations.parse(args.ablation_list, ablations.PRETRAINING)
        args.finetune_ablations = ablations.parse(args.finetune_ablations, ablations.FINETUNING)
    except ValueError as e:
        parser.error(str(e))
    if args.json_out is None:
        args.json_out = report.default_json_path()
    return args


@dataclasses.dataclass
class Bench:
    """What every group of a run shares."""

    args: argparse.Namespace
    strategy: tf.distribute.Strategy
    baseline: ExecutionOptions  # the scripts' defaults on the strategy's devices
    notes: list
    tmp: str

    def device_types(self):
        return distribution.device_types(self.strategy)


def build(factories: dict, label: str, notes: list) -> list:
    """The implementations whose construction succeeds; a failure is noted and skipped."""
    impls = []
    for name, factory in factories.items():
        try:
            impls.append(factory())
        except Exception as e:  # noqa: BLE001 - report it and go on with the others
            notes.append(f"{label} {name}: could not build ({type(e).__name__}: {str(e).splitlines()[0][:300]})")
            harness.log(notes[-1])
    return impls


def timed_group(bench, factories, *, name, size, precision, rows, flops, reference="ours", steps=None,
                peak_precision=None, **extra) -> dict:
    """Builds the implementations, interleaves them over the rounds, frees them; the group's record."""
    impls = build(factories, name, bench.notes)
    steps = steps or bench.args.steps
    results, order = harness.interleave(impls, bench.args.rounds, steps, bench.args.warmup, rows, name, bench.notes)
    harness.close_all(impls)
    return {"name": name, "size": size, "precision": precision, "batch_size": rows,
            "seq_length": workload.SEQ_LENGTH, "flops_per_step": flops, "peak_precision": peak_precision or precision,
            "reference": reference, "steps": steps, "order": order, "results": results,
            "ratios": harness.group_ratios(results, reference), **extra}


def with_variants(bench, chosen: list, make) -> tuple:
    """(factories of ours and of each chosen ablation, the group's ablation record);
    `make(options, name)` builds ours under `options`."""
    options = ablations.variants(chosen, bench.baseline, bench.device_types(), bench.notes)
    factories = {"ours": lambda: make(bench.baseline, "ours")}
    factories.update({f"ours[{n}]": (lambda o=o, n=n: make(o, f"ours[{n}]")) for n, o in options.items()})
    record = {"baseline": dataclasses.asdict(bench.baseline), "variants": {
        n: {"changes": ablations.BY_NAME[n].describe(), "undoes": ablations.BY_NAME[n].undoes}
        for n in options}}
    return factories, record


def step_group(bench, size, precision) -> dict:
    """Our pre-training step against the peers (`--only=ours,hf,keras_hub`)."""
    config = workload.bench_config(size)
    batch = workload.pretraining_batch(config, size)
    masks = workload.masked_positions(config, batch)
    factories = {"ours": lambda: ours.OursPretraining(config, batch, precision, bench.strategy, bench.baseline),
                 "hf": lambda: peers.HFPair(config, batch, precision, masks),
                 "keras_hub": lambda: peers.KerasHubPair(config, batch, precision, masks)}
    runnable = set(bench.args.only) - ({"hf"} if peers.torch is None else set())
    return timed_group(bench, {name: make for name, make in factories.items() if name in runnable},
                       name=f"{size}/{precision}", size=size, precision=precision, rows=workload.batch_size(size),
                       flops=workload.pretraining_flops(config, size))


def precision_group(bench, size) -> dict:
    """Our bf16 step against our fp32 step, in the same rounds (`--only=precision`)."""
    config = workload.bench_config(size)
    batch = workload.pretraining_batch(config, size)
    factories = {f"ours[{p}]": (lambda p=p: ours.OursPretraining(config, batch, p, bench.strategy, bench.baseline,
                                                                 name=f"ours[{p}]")) for p in ("bf16", "fp32")}
    return timed_group(bench, factories, name=f"{size}/bf16 vs fp32", size=size, precision="bf16 vs fp32",
                       rows=workload.batch_size(size), flops=workload.pretraining_flops(config, size),
                       reference="ours[bf16]", peak_precision="bf16")


def finetune_group(bench) -> dict:
    """The Small fine-tuning step, its ablations (`--finetune_ablations`) and HF's (`--only=finetune`)."""
    config = workload.bench_config("small")
    batch = workload.finetuning_batch(config)
    factories, record = with_variants(bench, bench.args.finetune_ablations, lambda options, name: ours.OursFinetuning(
        config, batch, bench.strategy, bench.tmp, options, name=name))
    if peers.torch is not None:
        factories["hf"] = lambda: peers.HFFinetune(config, batch)
    return timed_group(bench, factories, name="small finetune (cls, 2 labels)", size="small", precision="fp32",
                       rows=workload.FINETUNE_BATCH, flops=workload.finetuning_flops(config), **record)


def ablation_group(bench) -> dict:
    """Our pre-training step under each `--ablation_list` option change, with the unchanged step."""
    args = bench.args
    size, precision = args.ablation_size, args.ablation_precision
    config = workload.bench_config(size)
    batch = workload.pretraining_batch(config, size)
    factories, record = with_variants(bench, args.ablation_list, lambda options, name: ours.OursPretraining(
        config, batch, precision, bench.strategy, options, name=name))
    return timed_group(bench, factories, name=f"ablations {size}/{precision}", size=size, precision=precision,
                       rows=workload.batch_size(size), flops=workload.pretraining_flops(config, size),
                       steps=args.ablation_steps, **record)


def pipeline(bench, groups: list) -> dict:
    """The tf.data pipeline alone, and how many times what our Small step consumes it delivers."""
    harness.settle()
    result = ours.pipeline_throughput(workload.bench_config("small"), workload.BATCH["small"],
                                      bench.args.pipeline_batches, bench.tmp)
    consumed = {g["name"]: report.median_of(g["results"]["ours"], "seq_s") for g in groups
                if g["size"] == "small" and "ours" in g["results"] and not g.get("variants")}
    result["multiple_of_step"] = {name: result["examples_s"] / seq_s for name, seq_s in consumed.items()}
    return result


def profile_run(bench, json_out) -> dict:
    """`--profile`: a TF-profiler summary of ours at the first size; the trace kept next to the JSON."""
    size = bench.args.sizes[0] if bench.args.sizes else "small"
    config = workload.bench_config(size)
    harness.settle()
    result = profile.profile_ours(config, workload.pretraining_batch(config, size), bench.args.profile_precision,
                                  bench.strategy, bench.baseline, bench.args.profile_steps,
                                  os.path.join(bench.tmp, "profile"))
    if json_out and "xplane" in result:
        keep = os.path.splitext(json_out)[0] + ".xplane.pb"
        os.makedirs(os.path.dirname(os.path.abspath(keep)), exist_ok=True)
        shutil.copy(result["xplane"], keep)
        result["xplane"] = keep
    return result


def peak_functions() -> dict:
    fns = {"tf": harness.tf_matmul_peak}
    if peers.torch is not None:
        fns["torch"] = peers.torch_matmul_peak
    return fns


def torch_threads(args, notes: list):
    """PyTorch on the cores TF uses; a note where the HF peers cannot run."""
    if peers.torch is not None:
        peers.set_torch_threads(harness.num_cores())
        return peers.torch.get_num_threads()
    if {"hf", "finetune"} & set(args.only):
        notes.append(f"torch/transformers unavailable ({peers.TORCH_ERROR}): HF columns skipped "
                     "(pip install -r requirements-bench.txt)")
    return None


def xla_cache_state(setting: str) -> dict:
    """The scripts' XLA kernel cache (`use_xla_cache`) and how many kernels it held at the start: a first step
    compiles them (0 entries: a cold start) or loads them (a run after the first)."""
    directory = use_xla_cache(setting)
    entries = len(os.listdir(directory)) if directory and os.path.isdir(directory) else 0
    return {"setting": setting, "directory": directory, "entries_at_start": entries}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    xla_cache = xla_cache_state(args.xla_cache_dir)  # before TensorFlow creates its devices, as the scripts
    settings = {k: getattr(args, k) for k in ("rounds", "steps", "warmup", "ablation_steps")}
    notes = []
    result = report.new_report(argv, settings, torch_threads(args, notes))
    result["notes"] = notes
    result["xla_cache"] = xla_cache
    harness.log(f"XLA kernel cache: {xla_cache['directory'] or 'off'} ({xla_cache['entries_at_start']} entries)")
    harness.log(harness.hardware_line(result["machine"]))
    strategy = distribution.create_strategy("one_device")
    bench = Bench(args, strategy, ours.baseline_execution(strategy), notes, tempfile.mkdtemp(prefix="step_bench-"))
    result["baseline_execution"] = dataclasses.asdict(bench.baseline)
    peak_precisions = sorted(set(args.precisions) | {"fp32"} | ({"bf16"} if "precision" in args.only else set()))
    peaks = harness.measure_peaks(peak_precisions, peak_functions())
    groups = result["groups"]
    try:
        if {"ours", "hf", "keras_hub"} & set(args.only):
            groups.extend(step_group(bench, size, p) for size in args.sizes for p in args.precisions)
        if "precision" in args.only:
            groups.extend(precision_group(bench, size) for size in args.sizes)
        if "finetune" in args.only:
            groups.append(finetune_group(bench))
        if "pipeline" in args.only:
            result["pipeline"] = pipeline(bench, groups)
        if args.ablations:
            groups.append(ablation_group(bench))
        if args.profile:
            result["profile"] = profile_run(bench, args.json_out)
        harness.settle()
        peaks = harness.measure_peaks(peak_precisions, peak_functions(), peaks)  # the best of start and end
    finally:
        report.finish(result, peaks)
        json_path = report.write_json(result, args.json_out) if args.json_out else None
        shutil.rmtree(bench.tmp, ignore_errors=True)
    report.print_report(result, json_path)


if __name__ == "__main__":
    main()
