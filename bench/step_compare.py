"""Is our pre-training step at one commit as fast as at another? Both timed, interleaved, on one machine.

    python -m bench.step_compare --before=b3a6e87 --after=HEAD --name=issue43_execution

Each round runs `python -m bench.step_bench --sizes=small --precisions=fp32 --only=ours --rounds=1` (or
`--precision=bf16`'s) in a
checkout of each commit (a temporary `git worktree`), the two commits alternating and the order flipped every
round, so a machine that slows down or speeds up during the comparison weighs on both alike. The result,
`bench/results/step_compare-<name>.json`, holds both commits, the command, the machine, every round's
sequences/s and the ratios after ÷ before (> 1: the later commit is faster), and every round's first step
(step_bench's `first_step_s`: tracing, graph instantiation, XLA compilation and one step, in a fresh process;
with `--cold`, each run's XLA kernel cache is a new empty directory, as on a machine's first run).
A measurement, not a test: read it with the spread of its rounds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.seeded_check import git
from electra_tf.text.manifest import write_text_atomic
from experiments.provenance import machine_line

ROOT = Path(__file__).resolve().parents[1]


PRECISIONS = ("fp32", "bf16")


def bench_command(steps: int, json_out: Path, precision: str = "fp32", xla_cache_dir: str | None = None) -> list[str]:
    """One step_bench run; `xla_cache_dir`: the XLA kernel cache it uses (None: the scripts' default)."""
    cache = [f"--xla_cache_dir={xla_cache_dir}"] if xla_cache_dir else []
    return [sys.executable, "-m", "bench.step_bench", "--sizes=small", f"--precisions={precision}", "--only=ours",
            "--rounds=1", f"--steps={steps}", "--warmup=1", *cache, f"--json_out={json_out}"]


def ours_timings(report: dict) -> tuple[float, float]:
    """Our step's sequences/s and first step (seconds) in a step_bench report of one round."""
    (group,) = [g for g in report["groups"] if "ours" in g.get("results", {})]
    ours = group["results"]["ours"]
    (timing,) = ours["rounds"]
    return timing["seq_s"], ours["first_step_s"]


def time_once(checkout: Path, steps: int, out: Path, precision: str = "fp32",
              xla_cache_dir: str | None = None) -> tuple[float, float]:
    subprocess.run(bench_command(steps, out, precision, xla_cache_dir), cwd=checkout, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return ours_timings(json.loads(out.read_text()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--name", required=True, help="the result: bench/results/step_compare-<name>.json")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per run")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32", help="the step's precision (step_bench's)")
    parser.add_argument("--cold", action="store_true",
                        help="each run with an empty XLA kernel cache of its own (a machine's first run): its first "
                             "step compiles every kernel; without it, runs after the first may find them compiled")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="step_compare_"))
    commits, seq_s, first_s = {}, {"before": [], "after": []}, {"before": [], "after": []}
    try:
        for label in ("before", "after"):
            commits[label] = git("rev-parse", "--short", getattr(args, label))
            git("worktree", "add", "--detach", str(work / label), commits[label])
        for round_ in range(args.rounds):
            for label in (("before", "after") if round_ % 2 == 0 else ("after", "before")):
                cache = str(work / f"xla-{label}-{round_}") if args.cold else None
                value, first = time_once(work / label, args.steps, work / f"{label}-{round_}.json", args.precision,
                                         cache)
                seq_s[label].append(value)
                first_s[label].append(first)
                print(f"round {round_ + 1}/{args.rounds} {label} ({commits[label]}): {value:.2f} seq/s, "
                      f"first step {first:.1f} s", flush=True)
    finally:
        for label in ("before", "after"):
            if (work / label).exists():
                git("worktree", "remove", "--force", str(work / label))
        shutil.rmtree(work, ignore_errors=True)
    ratios = [a / b for a, b in zip(seq_s["after"], seq_s["before"])]
    result = {"before": commits["before"], "after": commits["after"], "machine": machine_line(),
              "command": f"python -m bench.step_compare --before={args.before} --after={args.after} "
                         f"--name={args.name} --rounds={args.rounds} --steps={args.steps} --precision={args.precision}"
                         + (" --cold" if args.cold else ""),
              "each_run": " ".join(bench_command(args.steps, Path("OUT.json"), args.precision,
                                                 "EMPTY_DIR" if args.cold else None)[1:]),
              "seq_per_s": seq_s,
              "ratio_after_over_before": {"per_round": ratios, "median": statistics.median(ratios)},
              "first_step_s": {**first_s, "median": {label: statistics.median(first_s[label]) for label in first_s}}}
    out = ROOT / "bench" / "results" / f"step_compare-{args.name}.json"
    write_text_atomic(out, json.dumps(result, indent=1) + "\n")
    print(f"after ÷ before: median {result['ratio_after_over_before']['median']:.3f} over {args.rounds} rounds "
          f"({', '.join(f'{r:.3f}' for r in ratios)}); first step, medians: before "
          f"{result['first_step_s']['median']['before']:.1f} s, after {result['first_step_s']['median']['after']:.1f} s; "
          f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
