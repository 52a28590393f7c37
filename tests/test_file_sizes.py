"""No Python file of the project is over MAX_LINES lines without the reason at its top (issue #57 item 4).

A long file is split by concern; where a split would hurt, one of its first REASON_WITHIN lines says why,
as "Over 450 lines because ...". The test reads the files only: it imports nothing of the project.
"""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("electra_tf", "data_prep", "experiments", "tools", "bench", "tests")
MAX_LINES = 450
REASON_WITHIN = 15
REASON = re.compile(r"\bOver 450 lines because \S")


def project_python_files(root: str = ROOT) -> list[str]:
    """The top-level scripts and every .py file under PACKAGES, relative to `root`."""
    found = [name for name in os.listdir(root) if name.endswith(".py")]
    for package in PACKAGES:
        for folder, _, names in os.walk(os.path.join(root, package)):
            found += [os.path.relpath(os.path.join(folder, name), root) for name in names if name.endswith(".py")]
    return sorted(found)


def unexplained_long_files(root: str = ROOT) -> list[str]:
    """`path: N lines` for each file over MAX_LINES lines with no reason in its first REASON_WITHIN lines."""
    problems = []
    for path in project_python_files(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            lines = f.read().splitlines()
        if len(lines) > MAX_LINES and not any(REASON.search(line) for line in lines[:REASON_WITHIN]):
            problems.append(f"{path}: {len(lines)} lines")
    return problems


def test_no_python_file_is_over_450_lines_without_a_reason_at_its_top():
    problems = unexplained_long_files()
    assert not problems, (f"over {MAX_LINES} lines with no 'Over 450 lines because ...' in the first "
                          f"{REASON_WITHIN} lines: split the file by concern or give the reason: {problems}")


def _write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("header, at, expected", [
    ([], 0, ["tools/long.py: 451 lines"]),
    (["# Over 450 lines because the table is one unit."], 0, []),
    (["# Over 450 lines because the table is one unit."], REASON_WITHIN, ["tools/long.py: 452 lines"]),
    (["# Over 450 lines because"], 0, ["tools/long.py: 452 lines"]),  # a reason must follow
])
def test_the_check_counts_lines_and_finds_the_reason_only_at_the_top(tmp_path, header, at, expected):
    body = [f"x{i} = {i}" for i in range(451)]
    _write(str(tmp_path / "tools" / "long.py"), body[:at] + header + body[at:])
    _write(str(tmp_path / "tools" / "short.py"), body[:MAX_LINES])
    _write(str(tmp_path / "script.py"), body[:MAX_LINES])
    assert unexplained_long_files(str(tmp_path)) == expected
