"""Timing: implementations interleaved over rounds, ratios within a round, the machine, matmul peaks.

An implementation (`Implementation`) runs `steps` steps per `call` and returns the last loss as a
Python float, so a call's wall time covers its work. `interleave` times each implementation's
first step (tracing included), then runs `rounds` rounds; in round r the order is rotated by r
(`rotation`) so that no implementation always follows the same one on a shared, noisy machine.
Each round, each implementation runs `warmup` untimed steps and then `steps` timed ones, alone.
Ratios are taken within a round (the implementations of a round saw the same minutes of the
machine) and summarised as median and range over the rounds (`ratio_stats`).
"""

import gc
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tensorflow as tf

from bench.machine import num_cores
from electra_tf.runtime import onednn_enabled

REPO = Path(__file__).resolve().parents[2]
SETTLE_SECONDS = 0.3  # between implementations: lets idle OpenMP/Eigen workers stop spinning
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
VERSIONED = ("tensorflow", "keras", "keras-hub", "torch", "transformers")


def log(message: str):
    print(message, file=sys.stderr, flush=True)


def settle():
    gc.collect()
    time.sleep(SETTLE_SECONDS)


class Implementation:
    """One implementation of a step. Subclasses set `name` and `framework` and define `call`."""

    name = "?"
    framework = "tf"
    build_seconds = float("nan")

    def call(self, steps: int) -> float:
        """Runs `steps` steps; returns the last loss as a float (which waits for the work)."""
        raise NotImplementedError

    def first_step(self) -> tuple:
        start = time.perf_counter()
        loss = self.call(1)
        return time.perf_counter() - start, loss

    def run(self, steps: int) -> float:
        start = time.perf_counter()
        self.call(steps)
        return time.perf_counter() - start

    def facts(self) -> dict:
        """What the JSON result records about this implementation besides its timings."""
        return {}

    def close(self):
        pass


# --------------------------------------------------------------------------
# Interleaving
# --------------------------------------------------------------------------

def rotation(items: list, round_index: int) -> list:
    """The order of round `round_index`: `items` rotated left by `round_index`."""
    shift = round_index % len(items) if items else 0
    return list(items[shift:]) + list(items[:shift])


def first_steps(impls: list, label: str, notes: list) -> dict:
    """Each implementation's build and first-step time; one whose first step fails is removed from
    `impls` with a note."""
    results = {}
    for impl in list(impls):
        settle()
        try:
            seconds, loss = impl.first_step()
        except Exception as e:  # noqa: BLE001 - report it and go on with the others
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            notes.append(f"{label} {impl.name}: first step failed ({type(e).__name__}: "
                         f"{(lines[-1] if lines else '')[:300]})")
            log(notes[-1])
            impls.remove(impl)
            continue
        results[impl.name] = {"framework": impl.framework, "build_s": impl.build_seconds, "first_step_s": seconds,
                              "first_loss": loss, **impl.facts(), "rounds": []}
        log(f"[{label}] {impl.name}: build {impl.build_seconds:.1f}s, first step {seconds:.1f}s, loss {loss:.3f}")
    return results


def timed_run(impl, steps: int, warmup: int, rows: int) -> dict:
    """`warmup` untimed steps, then `steps` timed ones: wall and process CPU time."""
    settle()
    if warmup:
        impl.run(warmup)
    cpu_start = time.process_time()
    seconds = impl.run(steps)
    cpu = time.process_time() - cpu_start
    return {"steps": steps, "wall_s": seconds, "cpu_s": cpu, "seq_s": steps * rows / seconds,
            "cpu_s_per_step": cpu / steps}


def interleave(impls: list, rounds: int, steps: int, warmup: int, rows: int, label: str, notes: list) -> tuple:
    """(results by name, the order of each round); `rows`: sequences per step."""
    results = first_steps(impls, label, notes)
    order = []
    for r in range(rounds):
        order.append([impl.name for impl in rotation(impls, r)])
        for impl in rotation(impls, r):
            timing = timed_run(impl, steps, warmup, rows)
            results[impl.name]["rounds"].append(timing)
            log(f"[{label}] round {r + 1}/{rounds} {impl.name}: {timing['seq_s']:.2f} seq/s "
                f"({timing['wall_s'] / steps:.3f} s/step wall, {timing['cpu_s_per_step']:.3f} CPU-s/step)")
    return results, order


def close_all(impls: list):
    for impl in impls:
        impl.close()
    impls.clear()
    gc.collect()


# --------------------------------------------------------------------------
# Ratios
# --------------------------------------------------------------------------

def per_round(result: dict, key: str) -> list:
    return [timing[key] for timing in result["rounds"]]


def ratio_stats(numerators: list, denominators: list) -> dict:
    """Round-by-round ratios, their median and range (`None` without rounds)."""
    ratios = [a / b for a, b in zip(numerators, denominators)]
    if not ratios:
        return None
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "per_round": ratios}


def group_ratios(results: dict, reference: str) -> dict:
    """`reference` ÷ every other implementation, round by round: throughput (> 1: the reference
    is faster) and CPU time per step (> 1: the other one spends more CPU time per step)."""
    if reference not in results:
        return {"throughput": {}, "cpu": {}}
    ref = results[reference]
    others = [name for name in results if name != reference]
    return {"throughput": {name: ratio_stats(per_round(ref, "seq_s"), per_round(results[name], "seq_s"))
                           for name in others},
            "cpu": {name: ratio_stats(per_round(results[name], "cpu_s_per_step"), per_round(ref, "cpu_s_per_step"))
                    for name in others}}


# --------------------------------------------------------------------------
# The machine and the run
# --------------------------------------------------------------------------

def cpu_info() -> tuple:
    """(model name, flags) from /proc/cpuinfo; the platform's processor name elsewhere."""
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return model, flags
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), model)
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    return model, flags


def load_average():
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def package_versions() -> dict:
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def machine() -> dict:
    model, flags = cpu_info()
    return {"cpu": model, "cores": num_cores(), "cpus_online": os.cpu_count(),
            "isa": [flag for flag in ISA_FLAGS if flag in flags], "onednn": onednn_enabled(),
            "load_average_start": load_average(), "versions": package_versions(),
            "python": platform.python_version()}


def hardware_line(facts: dict) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in facts["versions"].items())
    load = facts["load_average_start"]
    return (f"{facts['cpu']}, {facts['cores']} cores ({facts['cpus_online']} CPUs online; ISA "
            f"{','.join(facts['isa']) or '-'}), load average {load if load is None else round(load, 1)} at start; "
            f"TF oneDNN kernels {'on' if facts['onednn'] else 'off'}; {versions}; Python {facts['python']}")


def commit_id(repo: Path = REPO):
    """`git rev-parse --short HEAD`, with "+modified" where tracked files differ from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        return head + ("+modified" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return None


# --------------------------------------------------------------------------
# Dense-matmul peaks (for MFU)
# --------------------------------------------------------------------------

def best_seconds(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def tf_matmul_peak(precision: str, n=2048, reps=5) -> float:
    """Best GFLOP/s of an n×n×n `tf.linalg.matmul`."""
    dtype = {"fp32": tf.float32, "bf16": tf.bfloat16}[precision]
    a = tf.cast(tf.random.normal([n, n]), dtype)
    b = tf.cast(tf.random.normal([n, n]), dtype)
    matmul = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.linalg.matmul(x, y)[0, :8], tf.float32)))
    return 2 * n ** 3 / best_seconds(lambda: float(matmul(a, b)), reps) / 1e9


def measure_peaks(precisions, peak_fns: dict, peaks=None) -> dict:
    """{(framework, precision): GFLOP/s}, the best of this measurement and `peaks`."""
    peaks = dict(peaks or {})
    for precision in precisions:
        for framework, fn in peak_fns.items():
            peaks[(framework, precision)] = max(peaks.get((framework, precision), 0.0), fn(precision))
            settle()
    return peaks


def best_peak(peaks: dict, precision: str) -> float:
    return max((value for (_, p), value in peaks.items() if p == precision), default=float("nan"))
