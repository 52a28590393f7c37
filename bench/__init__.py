"""Benchmarks, not tests: run them from the repository root, e.g. `python -m bench.step_bench --help`."""
