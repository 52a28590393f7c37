"""The `>>>` examples in the docstrings of every module of `electra_tf/`, `data_prep/` and `experiments/` run.

One test per module, so a failure names it (plus the test helper `tests/parity.py`, which
came from `electra_tf/convert/`). Examples run from the repository root (some read
`tests/fixtures/`), with ELLIPSIS and NORMALIZE_WHITESPACE.
"""

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("electra_tf", "data_prep", "experiments")
TEST_HELPERS = ("parity",)  # tests/ is on sys.path under pytest
OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# Temporary: {module: failure} for examples that fail in modules owned by someone else (issue #10).
# Strict xfail: an entry whose examples pass again fails the suite, so it gets removed. Empty now.
KNOWN_FAILURES: dict[str, str] = {}


def module_names() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__main__.py":  # importing it would run the command line
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names + list(TEST_HELPERS)


MODULES = module_names()


def run_doctests(name: str) -> tuple[int, int, str]:
    """(failed, attempted, report) of the examples in module `name`'s docstrings."""
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    failed = attempted = 0
    report = []
    for test in finder.find(module, name):
        result = runner.run(test, out=report.append)
        failed, attempted = failed + result.failed, attempted + result.attempted
    return failed, attempted, "".join(report)


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[name], strict=True))
    if name in KNOWN_FAILURES else name
    for name in MODULES
])
def test_module_examples(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    failed, attempted, report = run_doctests(name)
    assert not failed, f"{failed} of {attempted} examples failed in {name}:\n{report}"


def test_known_failures_are_modules():
    assert not set(KNOWN_FAILURES) - set(MODULES), "KNOWN_FAILURES names a module that no longer exists"


def test_a_broken_example_fails(tmp_path, monkeypatch):
    """The runner reports a wrong expected output (the suite can fail)."""
    (tmp_path / "doctest_broken_example.py").write_text('"""\n>>> 1 + 1\n3\n"""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    failed, attempted, report = run_doctests("doctest_broken_example")
    assert (failed, attempted) == (1, 1) and "Expected:\n    3\nGot:\n    2" in report
