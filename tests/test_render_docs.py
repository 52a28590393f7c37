"""tools/render_docs.py: generated blocks in the docs are rebuilt from JSON, and the committed pages are current."""

import json
import shutil
from pathlib import Path

import pytest

from tools import render_docs

ROOT = Path(__file__).resolve().parents[1]


def test_markers_pair_up_and_keep_the_marker_lines():
    text = ("intro\n<!-- begin generated: a -->\nold a\n<!-- end generated: a -->\nmiddle\n"
            "<!-- begin generated: b --><!-- end generated: b -->\n")
    blocks = render_docs.find_blocks(text)
    assert [(name, text[start:end]) for name, start, end in blocks] == [("a", "old a\n"), ("b", "")]


@pytest.mark.parametrize("text, message", [
    ("<!-- begin generated: a -->\n", "without its end marker"),
    ("<!-- end generated: a -->\n", "without a begin marker"),
    ("<!-- begin generated: a -->\n<!-- end generated: b -->\n", "ends with"),
    ("<!-- begin generated: a -->\n<!-- begin generated: b -->\n<!-- end generated: b -->\n"
     "<!-- end generated: a -->\n", "inside block"),
])
def test_unpaired_markers_are_errors(text, message):
    with pytest.raises(render_docs.DocsError, match=message):
        render_docs.find_blocks(text)


def test_unknown_block_names_are_errors():
    with pytest.raises(render_docs.DocsError, match="unknown generated block 'nope'"):
        render_docs.render_page("<!-- begin generated: nope -->\n<!-- end generated: nope -->\n", Path("x.md"))


def test_a_table_is_rendered_from_a_tiny_json(tmp_path):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    curve = {"command": "python run_pretraining.py", "commit": "abc1234", "commit_note": "a note",
             "machine": "a laptop", "train_seconds": 90, "data_build_seconds_approx": 30,
             "final_examples_per_second": 7, "steps": [1, 2], "disc_auc": [0.5, 0.75], "gen_accuracy": [0.0, 0.125]}
    (tmp_path / "docs" / "results" / "demo_curve.json").write_text(json.dumps(curve))
    page = "# Demo\n\n<!-- begin generated: demo_curve -->\nstale\n<!-- end generated: demo_curve -->\nafter\n"
    out = render_docs.render_page(page, Path("docs/pretraining.md"), tmp_path)
    assert out.startswith("# Demo\n\n<!-- begin generated: demo_curve -->\nFrom [`docs/results/demo_curve.json`]"
                          "(results/demo_curve.json)")
    assert "| step | 1 | 2 |\n|---|---:|---:|\n| discriminator AUC | 0.500 | 0.750 |" in out
    assert "| generator accuracy (masked positions) | 0.000 | 0.125 |" in out
    assert "`python run_pretraining.py` at commit abc1234" in out and "1 min 30 s of training" in out
    assert "stale" not in out and out.endswith("<!-- end generated: demo_curve -->\nafter\n")
    assert render_docs.render_page(out, Path("docs/pretraining.md"), tmp_path) == out  # idempotent


def test_check_finds_a_stale_block_and_a_rewrite_fixes_it(tmp_path, capsys):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "results" / "compare_objectives.json", tmp_path / "docs" / "results")
    page = tmp_path / "README.md"
    page.write_text("<!-- begin generated: objectives_headline -->\nold numbers\n"
                    "<!-- end generated: objectives_headline -->\n")
    assert render_docs.run(check=True, root=tmp_path) == 1
    assert "stale: README.md (generated blocks: objectives_headline)" in capsys.readouterr().out
    assert "old numbers" in page.read_text()  # --check changes nothing
    assert render_docs.run(check=False, root=tmp_path) == 0
    results = json.loads((tmp_path / "docs" / "results" / "compare_objectives.json").read_text())
    stsb = results["arms"]["rtd"]["tasks"]["STS-B"]["median"]
    assert f"STS-B Spearman of {stsb:.1f}" in page.read_text()
    assert render_docs.run(check=True, root=tmp_path) == 0


def test_a_missing_json_file_is_reported(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text("<!-- begin generated: demo_curve -->\n<!-- end generated: demo_curve -->\n")
    assert render_docs.run(check=True, root=tmp_path) == 1
    assert "docs/x.md: FileNotFoundError" in capsys.readouterr().err


def test_the_committed_docs_are_up_to_date(capsys):
    status = render_docs.run(check=True, root=ROOT)
    assert status == 0, capsys.readouterr()


def test_every_renderer_is_used_by_a_page():
    used = {name for page in render_docs.pages(ROOT)
            for name, _, _ in render_docs.find_blocks((ROOT / page).read_text(encoding="utf-8"))}
    assert used == set(render_docs.RENDERERS)
