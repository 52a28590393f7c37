"""The machine a benchmark ran on, for its results file: the CPU's model name and the cores a process may run on
(no TensorFlow import, so the benchmarks' peer processes stay free of it).

>>> isinstance(cpu_model(), str) and cpu_model() != ""
True
"""

import os
import platform


def cpu_model() -> str:
    """/proc/cpuinfo's model name; the platform's processor name elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def num_cores() -> int:
    """The cores this process may run on (`taskset` narrows them); all the machine's where that is not known."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
