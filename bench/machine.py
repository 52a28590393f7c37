"""The machine a benchmark ran on, for its results file: the CPU's model name (no TensorFlow import, so the
benchmarks' peer processes stay free of it).

>>> isinstance(cpu_model(), str) and cpu_model() != ""
True
"""

import platform


def cpu_model() -> str:
    """/proc/cpuinfo's model name; the platform's processor name elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"
