"""tools/render_docs.py: generated blocks in the docs are rebuilt from JSON, and the committed pages are current."""

import json
import shutil
from pathlib import Path

import pytest

from tools import docs_renderers, render_docs

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


def tiny_curve(**changes) -> dict:
    """A demo_curve.json as experiments/demo_curve.py writes it, two logged steps, two evaluations."""
    curve = {"command": "python run_pretraining.py", "working_directory": "a fresh, empty directory",
             "commit": "abc1234", "date": "2026-01-02", "machine": "a laptop, 2 cores", "load_average": 3.5,
             "model_size": "tiny", "num_train_steps": 2, "train_batch_size": 32, "max_seq_length": 128,
             "disc_weight": 50.0, "held_out_examples": 192, "wall_seconds": 120, "data_build_seconds": 30,
             "train_seconds": 90, "final_examples_per_second": 7.5,
             "train": {"steps": [1, 2], "disc_auc": [0.5, 0.75], "gen_accuracy": [0.0, 0.125], "loss": [30.0, 20.5]},
             "eval": {"steps": [1, 2], "disc_auc": [0.55, 0.7], "gen_accuracy": [0.01, 0.1], "loss": [31.0, 22.25],
                      "gen_loss": [9.0, 8.0]}}
    curve.update(changes)
    return curve


def render_demo(tmp_path, curve: dict) -> str:
    (tmp_path / "docs" / "results").mkdir(parents=True, exist_ok=True)
    (tmp_path / "docs" / "results" / "demo_curve.json").write_text(json.dumps(curve))
    page = "# Demo\n\n<!-- begin generated: demo_curve -->\nstale\n<!-- end generated: demo_curve -->\nafter\n"
    return render_docs.render_page(page, Path("docs/pretraining.md"), tmp_path)


def test_a_table_is_rendered_from_a_tiny_json(tmp_path):
    out = render_demo(tmp_path, tiny_curve())
    assert out.startswith("# Demo\n\n<!-- begin generated: demo_curve -->\nFrom [`docs/results/demo_curve.json`]"
                          "(results/demo_curve.json)")
    assert "| step | 1 | 2 |\n|---|---:|---:|\n| discriminator AUC, train | 0.500 | 0.750 |" in out
    assert "| generator accuracy (masked positions), train | 0.000 | 0.125 |" in out
    assert "| loss, train | 30.00 | 20.50 |" in out
    text = " ".join(out.split())  # the head is wrapped
    assert "`python run_pretraining.py` in a fresh, empty directory at commit abc1234, 2026-01-02" in text
    assert "30 s to build the demo data" in text and "1 min 30 s to train `tiny` for 2 steps of 32 × 128" in text
    assert "7.5 examples/s at the end" in text
    assert "stale" not in out and out.endswith("<!-- end generated: demo_curve -->\nafter\n")
    assert render_docs.render_page(out, Path("docs/pretraining.md"), tmp_path) == out  # idempotent


def test_the_demo_table_has_held_out_rows_under_the_train_rows(tmp_path):
    out = render_demo(tmp_path, tiny_curve())
    rows = [line.split(" | ")[0].lstrip("| ") for line in out.splitlines() if line.startswith("| ")][1:]
    assert rows == ["discriminator AUC, train", "discriminator AUC, held-out",
                    "generator accuracy (masked positions), train", "generator accuracy (masked positions), held-out",
                    "loss, train", "loss, held-out"]
    assert "| discriminator AUC, held-out | 0.550 | 0.700 |" in out
    assert "| generator accuracy (masked positions), held-out | 0.010 | 0.100 |" in out
    assert "| loss, held-out | 31.00 | 22.25 |" in out
    text = " ".join(out.split())
    assert "the demo holds out (192 examples)" in text and "plus 50 × the discriminator's" in text


def test_demo_steps_without_an_evaluation_show_a_dash(tmp_path):
    curve = tiny_curve(train={"steps": [1, 2, 3], "disc_auc": [0.5, 0.75, 0.8], "gen_accuracy": [0.0, 0.1, 0.2],
                              "loss": [30.0, 20.0, 19.0]},
                       eval={"steps": [2], "disc_auc": [0.6], "gen_accuracy": [0.05], "loss": [25.0]})
    out = render_demo(tmp_path, curve)
    assert "| step | 1 | 2 | 3 |" in out
    assert "| discriminator AUC, held-out | – | 0.600 | – |" in out and "| loss, train | 30.00 | 20.00 | 19.00 |" in out


def test_a_demo_curve_without_evaluations_has_train_rows_only(tmp_path):
    out = render_demo(tmp_path, tiny_curve(eval={"steps": []}))
    assert "| discriminator AUC, train | 0.500 | 0.750 |" in out
    assert "held-out" not in out


def tiny_objectives(average_tasks: list) -> dict:
    def run(arm, seed, flops):
        return {"arm": arm, "pretrain_seed": seed, "pretrain_flops": flops, "steps": 10 if flops else 0}
    return {"budget": "cpu", "command": "python -m experiments.compare_objectives --stage=report", "model_size": "mini",
            "average_tasks": average_tasks, "arm_order": ["rtd", "mlm", "none"],
            "runs": {"mlm-pseed0": run("mlm", 0, 2e12), "rtd-pseed0": run("rtd", 0, 2e12),
                     "rtd-pseed1": run("rtd", 1, 2e12), "none-pseed0": run("none", 0, 0)},
            "arms": {"mlm": {"pretrain_seeds": [0], "tasks": {"A": {"median": 20.0}, "B": {"median": 60.0}}},
                     "none": {"pretrain_seeds": [0], "tasks": {"A": {"median": 10.0}}},
                     "rtd": {"pretrain_seeds": [0, 1], "tasks": {"A": {"median": 30.0}, "B": {"median": 70.0},
                                                                   "NER": {"median": 55.55}}}}}


def test_the_objectives_summary_has_a_column_per_averaged_task_and_averages_only_complete_rows(tmp_path):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "compare_objectives.json").write_text(json.dumps(tiny_objectives(["B", "A"])))
    page = "<!-- begin generated: objectives_summary -->\n<!-- end generated: objectives_summary -->\n"
    out = render_docs.render_page(page, Path("docs/results.md"), tmp_path)
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows[0] == "| arm | pre-training seeds | steps | pre-training FLOPs | B | A | average | NER |"
    assert rows[1:] == ["| `rtd` | 0, 1 | 10 | 2.00e+12 | 70.0 | 30.0 | 50.0 | 55.5 |",
                        "| `mlm` | 0 | 10 | 2.00e+12 | 60.0 | 20.0 | 40.0 | – |",
                        "| `none` | 0 | 0 | 0 | – | 10.0 | – | – |"]


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
    assert used == set(docs_renderers.RENDERERS)
