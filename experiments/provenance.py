"""Where a result came from: the machine (CPU model, cores) and the commit, for every experiment's record.

Example:

>>> from experiments.provenance import machine_line
>>> "cores" in machine_line()
True
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine_line() -> str:
    """The CPU model and core count of the machine writing a record."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def git_commit(code_paths: tuple[str, ...] = ()) -> str:
    """The checkout's short commit, `+modified` when one of `code_paths` differs from it; "unknown" outside git."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = code_paths and git("status", "--porcelain", "--untracked-files=no", "--", *code_paths)
    return commit + ("+modified" if changed else "")
