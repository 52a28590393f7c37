"""The first pre-training step with and without the persistent XLA:CPU kernel cache, each in a fresh process.

Not a test. Each round runs `python -m bench.step_bench --sizes=small --precisions=fp32 --only=ours --rounds=1`
three times, each a process of its own: `off` (`--xla_cache_dir=off`: every kernel compiled, as before the cache),
`cold` (an empty cache directory: a user's first run, which compiles and writes the kernels) and `warm` (that
directory again: every later run with the same model and batch on this machine, which loads them). `off` moves
through the round's order, `warm` always follows its `cold`. Reported: step_bench's `first_step_s` (tracing,
graph instantiation, the kernels compiled or loaded, one step), `build_s` (the model, whose Keras build also
calls some kernels) and the steady sequences/s of its timed steps.

    python -m bench.xla_cache_first_step --rounds=3 --out=bench/results/xla-cache-first-step-small-fp32.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("off", "cold", "warm")


def step_bench(cache_setting: str, steps: int, json_out: Path) -> dict:
    command = [sys.executable, "-m", "bench.step_bench", "--sizes=small", "--precisions=fp32", "--only=ours",
               "--rounds=1", f"--steps={steps}", "--warmup=1", f"--xla_cache_dir={cache_setting}",
               f"--json_out={json_out}"]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.loads(json_out.read_text())
    ours = report["groups"][0]["results"]["ours"]
    return {"first_step_s": round(ours["first_step_s"], 2), "build_s": round(ours["build_s"], 2),
            "seq_s": round(ours["rounds"][0]["seq_s"], 2), "entries_at_start": report["xla_cache"]["entries_at_start"],
            "machine": report["machine"], "commit": report["commit"]}


def round_order(index: int) -> list[str]:
    """off first, between or last; warm after its cold."""
    return [["off", "cold", "warm"], ["cold", "off", "warm"], ["cold", "warm", "off"]][index % 3]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.xla_cache_first_step", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed steps of each process (the steady rate)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    runs = {mode: [] for mode in MODES}
    machine = commit = None
    with tempfile.TemporaryDirectory(prefix="xla_cache_first_step-") as tmp:
        for index in range(args.rounds):
            cache = Path(tmp) / f"cache{index}"
            for mode in round_order(index):
                setting = "off" if mode == "off" else str(cache)
                result = step_bench(setting, args.steps, Path(tmp) / f"{mode}{index}.json")
                machine, commit = result.pop("machine"), result.pop("commit")
                runs[mode].append(result)
                print(f"round {index + 1} {mode}: first step {result['first_step_s']} s, build {result['build_s']} s, "
                      f"{result['seq_s']} seq/s ({result['entries_at_start']} cached kernels at start)", flush=True)
    medians = {mode: {key: statistics.median(run[key] for run in runs[mode])
                      for key in ("first_step_s", "build_s", "seq_s")} for mode in MODES}
    record = {"command": "python -m bench.xla_cache_first_step " + " ".join(
                  a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--out")),
              "commit": commit, "machine": machine, "rounds": args.rounds, "steps": args.steps,
              "medians": medians, "runs": runs,
              "warm_over_off_seq_s": round(medians["warm"]["seq_s"] / medians["off"]["seq_s"], 3)}
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        tmp_out = Path(args.out + ".tmp")
        tmp_out.write_text(text + "\n")
        tmp_out.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
