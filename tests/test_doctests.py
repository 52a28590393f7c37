"""The `>>>` examples in the docstrings of every module of `electra_tf/`, `data_prep/` and `experiments/` run.

One test per module, so a failure names it (plus the test helper `tests/parity.py`, which
came from `electra_tf/convert/`). Examples run from the repository root (some read
`tests/fixtures/`), with ELLIPSIS and NORMALIZE_WHITESPACE.
"""

import doctest
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("electra_tf", "data_prep", "experiments")
TEST_HELPERS = ("parity",)  # tests/ is on sys.path under pytest
OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# Temporary: {module: failure} for examples that fail in modules owned by someone else (issue #10).
# Strict xfail: an entry whose examples pass again fails the suite, so it gets removed. Empty now.
KNOWN_FAILURES: dict[str, str] = {}
# Modules whose examples need an optional package: {module: (package, the requirements file that installs it)}.
# Skipped, with the reason, where it is missing: the README's set-up installs requirements.txt only.
NEEDS_OPTIONAL = {"data_prep.beam_pipeline": ("apache_beam", "requirements-beam.txt"),
                  "electra_tf.convert.onnx_graph": ("onnx", "requirements-onnx.txt"),
                  "electra_tf.convert.onnx_export": ("onnx", "requirements-onnx.txt")}


def missing_optional(name: str):
    """The reason `name`'s examples cannot run here (an optional package not installed), or None."""
    package, requirements = NEEDS_OPTIONAL.get(name, (None, None))
    if package is None or importlib.util.find_spec(package) is not None:
        return None
    return f"{name}'s examples need {package} (optional: pip install -r {requirements})"


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
    reason = missing_optional(name)
    if reason:
        pytest.skip(reason)
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


def test_examples_that_need_a_missing_optional_package_are_skipped_with_the_reason(monkeypatch):
    """The README's set-up installs requirements.txt alone: its test command must pass without apache_beam."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "apache_beam" else real(name, *a))
    assert missing_optional("data_prep.beam_pipeline") == (
        "data_prep.beam_pipeline's examples need apache_beam (optional: pip install -r requirements-beam.txt)")
    assert missing_optional("data_prep.build_vocab") is None
    assert set(NEEDS_OPTIONAL) <= set(MODULES)
