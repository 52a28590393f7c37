"""tests/conftest.py: the long files first, the rest in pytest-xdist's default order; XLA kernels unoptimised."""

import os
from pathlib import Path

from conftest import LONG_FILES_FIRST, UNOPTIMISED_KERNELS, compile_kernels_unoptimised, scheduled_order


def test_the_long_files_scheduled_first_exist():
    tests = Path(__file__).parent
    assert [name for name in LONG_FILES_FIRST if not (tests / name).is_file()] == []


def test_long_files_go_first_then_files_of_more_tests_with_each_files_tests_together_and_in_order():
    long_first, long_second = LONG_FILES_FIRST[0], LONG_FILES_FIRST[1]
    collected = ["tests/test_a.py::one", f"tests/{long_second}::x", "tests/test_b.py::one", "tests/test_b.py::two",
                 f"tests/{long_first}::y", "tests/test_c.py::one", "tests/test_b.py::three", f"tests/{long_first}::z"]
    assert scheduled_order(collected) == [
        f"tests/{long_first}::y", f"tests/{long_first}::z", f"tests/{long_second}::x",
        "tests/test_b.py::one", "tests/test_b.py::two", "tests/test_b.py::three",
        "tests/test_a.py::one", "tests/test_c.py::one"]


def test_the_session_compiles_xla_kernels_unoptimised_unless_xla_flags_names_a_level():
    assert UNOPTIMISED_KERNELS == "--xla_backend_optimization_level=0"
    # The session's flags were set when conftest was imported: they name a level already (ours, or the user's own).
    assert compile_kernels_unoptimised(dict(os.environ)) == os.environ["XLA_FLAGS"]
    for before, after in ((None, UNOPTIMISED_KERNELS), ("", UNOPTIMISED_KERNELS),
                          ("--xla_cpu_max_isa=AVX2", f"--xla_cpu_max_isa=AVX2 {UNOPTIMISED_KERNELS}"),
                          ("--xla_backend_optimization_level=2", "--xla_backend_optimization_level=2")):
        environ = {} if before is None else {"XLA_FLAGS": before}
        assert compile_kernels_unoptimised(environ) == after == environ["XLA_FLAGS"], before
