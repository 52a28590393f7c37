"""CI runs the README's set-up and test commands as written (issue #55: CI installed apache-beam, the README did
not, and CI's green hid a test that failed on a fresh machine)."""

import os

from tools import readme_commands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_readme_set_up_and_test_commands_are_found():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    setup = readme_commands.section_commands(text, "Set-up")
    assert "pip install -r requirements.txt" in setup
    assert readme_commands.section_commands(text, "Tests")[0] == "python -m pytest -q"


def test_ci_runs_the_readme_commands_before_installing_anything_else():
    script = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    readme_setup = script.index("run_readme setup")
    assert script.index("run_readme test") > readme_setup
    assert script.index("requirements-beam.txt") > script.index("run_readme test")  # optional: after the README
    assert "pip install" not in script[:readme_setup]
