"""experiments/demo_curve.py: the record it writes from a demo run's train and eval logs (no training here)."""

import json

import pytest

from experiments import demo_curve


def write_run(model_dir, train_lines, eval_lines):
    model_dir.mkdir(parents=True)
    for name, lines in (("train_log.jsonl", train_lines), ("eval_log.jsonl", eval_lines)):
        (model_dir / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    (model_dir / "run_config.json").write_text(json.dumps(
        {"num_train_steps": 200, "train_batch_size": 32, "max_seq_length": 128, "disc_weight": 50.0}))


def train_line(step, auc, loss):
    return {"step": step, "disc_auc": auc, "gen_accuracy": step / 1000, "loss": loss, "gen_loss": 8.0,
            "disc_loss": 0.3, "disc_accuracy": 0.8, "grad_norm": 3.0, "examples_per_second": 60.0 + step / 100}


def eval_line(step, auc, loss):
    return {"step": step, "gen_loss": 7.0, "gen_accuracy": step / 2000, "loss": loss, "disc_loss": 0.4,
            "disc_accuracy": 0.85, "disc_precision": 0.5, "disc_recall": 0.4, "disc_auc": auc,
            "gen_sampled_accuracy": 0.01, "replaced_fraction": 0.98}


def test_the_record_holds_both_curves_and_the_timings(tmp_path):
    model_dir = tmp_path / demo_curve.MODEL_DIR
    write_run(model_dir, [train_line(100, 0.78912, 26.6), train_line(200, 0.7576, 24.1)],
              [eval_line(100, 0.8624, 22.7), eval_line(200, 0.6038, 27.65)])
    output = ["I1125 evaluation.py:148] eval at step 100 (192 held-out examples of electra_demo/tiny/data): ...\n"]
    entry = demo_curve.record(["python", "run_pretraining.py"], model_dir, 600.4, 20.2, output, "abc1234")
    assert entry["command"] == "python run_pretraining.py" and entry["commit"] == "abc1234"
    assert entry["wall_seconds"] == 600 and entry["data_build_seconds"] == 20 and entry["train_seconds"] == 580
    assert entry["final_examples_per_second"] == 62.0 and entry["held_out_examples"] == 192
    assert (entry["num_train_steps"], entry["train_batch_size"], entry["max_seq_length"]) == (200, 32, 128)
    assert entry["train"]["steps"] == [100, 200] and entry["train"]["disc_auc"] == [0.7891, 0.7576]
    assert entry["train"]["loss"] == [26.6, 24.1] and "grad_norm" not in entry["train"]
    assert entry["eval"]["steps"] == [100, 200] and entry["eval"]["disc_auc"] == [0.8624, 0.6038]
    assert entry["eval"]["gen_accuracy"] == [0.05, 0.1] and entry["eval"]["disc_recall"] == [0.4, 0.4]
    assert entry["machine"].endswith("cores") and entry["date"]


def test_a_repeated_step_keeps_its_last_line_and_a_missing_eval_log_gives_no_eval_steps(tmp_path):
    model_dir = tmp_path / "model"
    write_run(model_dir, [train_line(100, 0.5, 30.0), train_line(100, 0.6, 29.0)], [])
    (model_dir / "eval_log.jsonl").unlink()
    entry = demo_curve.record(["python", "run_pretraining.py"], model_dir, 60, None, [], "abc1234")
    assert entry["train"]["steps"] == [100] and entry["train"]["disc_auc"] == [0.6]
    assert entry["eval"] == {"steps": []} and entry["data_build_seconds"] is None
    assert entry["held_out_examples"] is None


def test_no_training_log_is_an_error(tmp_path):
    write_run(tmp_path / "model", [], [])
    with pytest.raises(ValueError, match="no training log lines"):
        demo_curve.record(["python", "run_pretraining.py"], tmp_path / "model", 60, None, [], "abc1234")


def test_the_json_is_replaced_whole(tmp_path):
    path = tmp_path / "results" / "demo_curve.json"
    demo_curve.save_record(path, {"a": 1})
    demo_curve.save_record(path, {"b": [1, 2]})
    assert json.loads(path.read_text()) == {"b": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["demo_curve.json"]  # no temporary file left


def test_the_work_dir_must_be_new_or_empty(tmp_path):
    assert demo_curve.fresh_work_dir(str(tmp_path / "new")).is_dir()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "electra_demo").mkdir()
    with pytest.raises(SystemExit, match="not empty"):
        demo_curve.fresh_work_dir(str(tmp_path / "used"))
