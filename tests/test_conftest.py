"""tests/conftest.py's scheduling: the long files first, the rest in pytest-xdist's default order."""

from pathlib import Path

from conftest import LONG_FILES_FIRST, scheduled_order


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
