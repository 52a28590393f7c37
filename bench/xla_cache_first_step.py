"""The first pre-training step with and without the persistent XLA:CPU kernel cache, each in a fresh process.

Not a test. Each round runs `python -m bench.step_bench --sizes=small --precisions=fp32 --only=ours --rounds=1`
in processes of their own: `off` (`--xla_cache_dir=off`: every kernel compiled in the process), `cold` (an empty
cache directory: a user's first run, which compiles and writes the kernels) and `warm` (that directory again:
every later run with the same model and batch on this machine, which loads them); with `--before=COMMIT` also
`before`, step_bench in a `git worktree` of COMMIT as it is there. The modes take turns in the round's order,
`warm` always right after its `cold`. Reported: step_bench's `first_step_s` (tracing, graph instantiation, the
kernels compiled or loaded, one step), `build_s` (the model, whose Keras build also calls some kernels) and the
steady sequences/s of its timed steps.

    python -m bench.xla_cache_first_step --rounds=3 --before=032115d \
        --out=bench/results/xla-cache-first-step-small-fp32.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.seeded_check import git
from electra_tf.text.manifest import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
MODES = ("off", "cold", "warm")


def step_bench(cache_setting: str | None, steps: int, json_out: Path, checkout: Path = ROOT) -> dict:
    """One fresh process of step_bench in `checkout` (`cache_setting` None: the flag left out)."""
    command = [sys.executable, "-m", "bench.step_bench", "--sizes=small", "--precisions=fp32", "--only=ours",
               "--rounds=1", f"--steps={steps}", "--warmup=1", f"--json_out={json_out}"]
    if cache_setting is not None:
        command.append(f"--xla_cache_dir={cache_setting}")
    subprocess.run(command, cwd=checkout, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.loads(json_out.read_text())
    ours = report["groups"][0]["results"]["ours"]
    return {"first_step_s": round(ours["first_step_s"], 2), "build_s": round(ours["build_s"], 2),
            "seq_s": round(ours["rounds"][0]["seq_s"], 2),
            "entries_at_start": report.get("xla_cache", {}).get("entries_at_start", 0),
            "machine": report["machine"], "commit": report["commit"]}


def round_order(index: int, modes: list[str]) -> list[str]:
    """The modes rotated by `index`, `cold` and `warm` moving as one."""
    units = [[m] for m in modes if m not in ("cold", "warm")] + [["cold", "warm"]]
    shift = index % len(units)
    return [mode for unit in units[shift:] + units[:shift] for mode in unit]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.xla_cache_first_step", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed steps of each process (the steady rate)")
    parser.add_argument("--before", help="also time step_bench at this commit (a git worktree), as it is there")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    modes = (["before"] if args.before else []) + list(MODES)
    runs = {mode: [] for mode in modes}
    machine = commit = before = None
    with tempfile.TemporaryDirectory(prefix="xla_cache_first_step-") as tmp:
        if args.before:
            before = git("rev-parse", "--short", args.before)
            git("worktree", "add", "--detach", str(Path(tmp) / "before"), before)
        try:
            for index in range(args.rounds):
                cache = Path(tmp) / f"cache{index}"
                for mode in round_order(index, modes):
                    out = Path(tmp) / f"{mode}{index}.json"
                    if mode == "before":
                        result = step_bench(None, args.steps, out, Path(tmp) / "before")
                        result.pop("machine"), result.pop("commit")
                    else:
                        result = step_bench("off" if mode == "off" else str(cache), args.steps, out)
                        machine, commit = result.pop("machine"), result.pop("commit")
                    runs[mode].append(result)
                    print(f"round {index + 1} {mode}: first step {result['first_step_s']} s, build "
                          f"{result['build_s']} s, {result['seq_s']} seq/s ({result['entries_at_start']} cached "
                          f"kernels at start)", flush=True)
        finally:
            if args.before:
                git("worktree", "remove", "--force", str(Path(tmp) / "before"))
    medians = {mode: {key: statistics.median(run[key] for run in runs[mode])
                      for key in ("first_step_s", "build_s", "seq_s")} for mode in modes}
    record = {"command": "python -m bench.xla_cache_first_step " + " ".join(
                  a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--out")),
              "commit": commit, "before": before, "machine": machine, "rounds": args.rounds, "steps": args.steps,
              "medians": medians, "runs": runs,
              "seq_s_over_before" if args.before else "seq_s_over_off": {
                  mode: round(medians[mode]["seq_s"] / medians[modes[0]]["seq_s"], 3) for mode in modes}}
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        write_text_atomic(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
