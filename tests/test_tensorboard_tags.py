"""TensorBoard: a metric has one tag in every run that logs it, so its train and held-out curves share a chart."""

import json
import os

import tensorflow as tf

from electra_tf.training import evaluation, loop
from test_evaluation import data_dir, run, small  # noqa: F401 (data_dir is a fixture)

# What both the training log and the held-out evaluation measure.
SHARED_METRICS = {"loss", "gen_loss", "gen_accuracy", "disc_loss", "disc_accuracy", "disc_precision", "disc_recall",
                  "disc_auc"}


def scalar_tags(run_dir) -> set:
    """The tags of the scalar summaries in the event files of the TensorBoard run `run_dir`."""
    tags = set()
    for name in os.listdir(run_dir):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(run_dir, name)):
            tags |= {v.tag for v in event.summary.value if v.metadata.plugin_data.plugin_name == "scalars"}
    return tags


def jsonl_keys(path) -> set:
    with open(path) as f:
        return {key for line in f for key in json.loads(line)}


def test_the_train_and_eval_runs_tag_a_metric_alike(data_dir, tmp_path):  # noqa: F811
    model_dir = tmp_path / "run"
    run(small(num_train_steps=2), data_dir, str(model_dir), eval_every_steps=2, log_steps=2)
    train, held_out = scalar_tags(model_dir / "train"), scalar_tags(model_dir / evaluation.LOG_DIR)
    assert SHARED_METRICS <= train & held_out
    # The JSON lines keep their keys.
    assert SHARED_METRICS <= jsonl_keys(model_dir / "train_log.jsonl") & jsonl_keys(model_dir / evaluation.LOG_FILE)


def test_a_run_shared_by_splits_keeps_the_split_in_the_tag(tmp_path):
    """Fine-tuning logs its training and its dev metrics into one run."""
    logger = loop.ScalarLogger(str(tmp_path), "tensorboard", "log.jsonl")
    logger.write(1, {"loss": 0.5}, "train", nested=True)
    logger.write(1, {"accuracy": 80.0}, "dev", nested=True)
    assert scalar_tags(tmp_path / "tensorboard") == {"train/loss", "dev/accuracy"}
    with open(tmp_path / "log.jsonl") as f:
        assert [json.loads(line) for line in f] == [{"step": 1, "train": {"loss": 0.5}},
                                                    {"step": 1, "dev": {"accuracy": 80.0}}]
