"""tools/check_docs_commands.py: which commands of the docs it finds, runs, shortens and skips.

The default suite starts no TensorFlow process: the runner is exercised with plain shell commands on a
page written here. Running the real pages' commands takes an hour or more (`-m slow`).
"""

import doctest
import io
import subprocess
import sys
from pathlib import Path

import pytest

from tools import check_docs_commands as checker
from tools import docs_renderers, render_docs

ROOT = Path(__file__).resolve().parents[1]

PAGE = """# A page

```bash
# a comment line is not a command
python run_pretraining.py --model_size=small --data_dir=shards/ \\
    --model_dir=runs/small   # resumes when re-run
pip install -r requirements.txt   # not run by tools/check_docs_commands.py: installs packages
mkdir -p data && awk 'NR == 1 {print > "a.csv"; next}
    {print > "b.csv"}' input.csv
```

```python
print("not a shell command")
```

1. In a list:

   ```sh
   python run_finetuning.py --task=RTE --output_dir=out/rte
   ```

```bash
python run_pretraining.py --model_dir=runs/small --export_only
echo "done" && python run_finetuning.py --task=SST-2
```
"""


@pytest.fixture
def page(tmp_path):
    (tmp_path / "page.md").write_text(PAGE)
    return tmp_path


def test_commands_are_grouped_as_bash_reads_them(page):
    commands = checker.page_commands(page, "page.md")
    assert [c.line for c in commands] == [5, 7, 8, 19, 23, 24]
    assert commands[0].text == ("python run_pretraining.py --model_size=small --data_dir=shards/ \\\n"
                                "    --model_dir=runs/small")
    assert commands[0].comments == ["resumes when re-run"]
    assert commands[2].text == "mkdir -p data && awk 'NR == 1 {print > \"a.csv\"; next}\n    {print > \"b.csv\"}' input.csv"
    assert commands[3].text == "python run_finetuning.py --task=RTE --output_dir=out/rte"  # fence inside a list


def test_the_marker_skips_with_its_reason(page):
    reasons = [c.skip_reason for c in checker.page_commands(page, "page.md")]
    assert reasons == [None, "installs packages", None, None, None, None]


def test_training_commands_are_shortened_by_documented_overrides(page):
    commands = checker.page_commands(page, "page.md")
    text, note = checker.to_run(commands[0])
    assert text.endswith("--model_dir=runs/small --stop_after_steps=2 --train_batch_size=8 --log_steps=1")
    assert note == "appended --stop_after_steps=2 --train_batch_size=8 --log_steps=1"
    assert checker.to_run(commands[3])[0].endswith("--output_dir=out/rte --max_train_steps=2")
    assert checker.to_run(commands[4]) == (commands[4].text, "")  # --export_only trains nothing
    assert checker.to_run(commands[2]) == (commands[2].text, "")  # no training script: as written


def test_a_training_command_that_cannot_be_shortened_fails_instead_of_running(page):
    command = checker.page_commands(page, "page.md")[5]
    text, note = checker.to_run(command)
    assert text is None and "cannot shorten" in note
    prefixed = checker.Command("p", 1, "TF_ENABLE_ONEDNN_OPTS=0 python run_finetuning.py --task=RTE", [])
    assert checker.to_run(prefixed)[0].endswith("--task=RTE --max_train_steps=2")
    quoted = checker.Command("p", 1, "python run_finetuning.py --hparams='{\"a\": 1}' --text_column='a|b'", [])
    assert checker.to_run(quoted)[0].endswith("--max_train_steps=2")  # operators inside quotes are text


def test_pages_run_in_the_documented_order(tmp_path):
    (tmp_path / "docs").mkdir()
    for name in ("zeta.md", "finetuning.md", "data.md", "pretraining.md"):
        (tmp_path / "docs" / name).write_text("")
    (tmp_path / "README.md").write_text("")
    assert checker.default_pages(tmp_path) == ["README.md", "docs/data.md", "docs/pretraining.md",
                                               "docs/finetuning.md", "docs/zeta.md"]


def test_the_runner_reports_ok_failed_and_skipped_beside_shared_data(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "page.md").write_text("```bash\necho made > made.txt\ncat made.txt\nfalse\n"
                                  "ls ../shared/data\nrm -rf /  # not run by tools/check_docs_commands.py: harmful\n```\n")
    (tmp_path / "shared" / "data").mkdir(parents=True)
    out = io.StringIO()
    status = checker.check(["page.md"], tmp_path / "work", timeout=60, root=repo, out=out)
    lines = out.getvalue().splitlines()
    assert status == 1
    assert [line.split()[0] for line in lines if line.split() and line.split()[0] in ("ok", "failed", "skipped")] \
        == ["ok", "ok", "failed", "ok", "skipped"]
    assert "0 ok" not in lines[-1] and lines[-1].startswith("3 ok, 1 failed, 1 skipped")
    assert (tmp_path / "work" / "repo" / "page.md").exists()  # commands ran on a copy
    assert not (repo / "made.txt").exists()


def test_every_command_of_the_committed_docs_runs_or_says_why_not():
    out = io.StringIO()
    assert checker.check(checker.default_pages(ROOT), ROOT, 1, root=ROOT, list_only=True, out=out) == 0, \
        out.getvalue()
    listed = out.getvalue().splitlines()
    assert listed and all(line.startswith(("run ", "skip ")) for line in listed)
    assert all(line.rstrip().endswith("]") for line in listed if line.startswith("skip "))  # a reason each


def test_docstring_examples():
    for module in (checker, render_docs, docs_renderers):
        assert doctest.testmod(module).failed == 0


@pytest.mark.slow
def test_the_docs_commands_run():
    """Every command of README.md and docs/*.md, with the documented overrides (an hour or more)."""
    result = subprocess.run([sys.executable, "-m", "tools.check_docs_commands"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout[-5000:]
