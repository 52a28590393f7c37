"""The library side of `run_finetuning.py`: config, checkpoint size, vocabulary checks and seeds, without flags."""

import dataclasses
import logging
from pathlib import Path

import pytest
import tensorflow as tf

from electra_tf.config import get_config
from electra_tf.finetuning import prepare, runner
from electra_tf.finetuning.prepare import ModelOptions, UsageError
from electra_tf.finetuning.registry import get_task
from electra_tf.options import RunOptions

HF_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hf_electra"  # 1 layer, hidden 256, vocab 1000


def test_the_task_epochs_beat_the_size_default_and_options_beat_both():
    rte = get_task("RTE")
    assert prepare.build_config(rte, ModelOptions(model_size="tiny")).finetune_epochs == 10
    assert prepare.build_config(rte, ModelOptions(model_size="tiny", num_train_epochs=2)).finetune_epochs == 2
    hparams = ModelOptions(model_size="tiny", hparams='{"finetune_epochs": 4}')
    assert prepare.build_config(rte, hparams).finetune_epochs == 4
    assert prepare.build_config(get_task("SST-2"), ModelOptions()).model_size == "small"


def test_a_checkpoint_of_no_known_size_takes_small_and_says_so(caplog):
    caplog.set_level(logging.INFO)
    checkpoint = prepare.read_checkpoint(str(HF_FIXTURE))
    assert prepare.choose_model_size(checkpoint) == ("small", {})
    assert "no model size has hidden_size 256 and 1 layers" in caplog.text
    assert prepare.choose_model_size(checkpoint, "tiny") == ("tiny", {})
    assert "--model_size=tiny but --init_checkpoint is a small model" in caplog.text
    config = prepare.build_config(get_task("SST-2"), ModelOptions(init_checkpoint=str(HF_FIXTURE)), checkpoint)
    assert (config.discriminator.num_layers, config.discriminator.hidden_size, config.vocab_size) == (1, 256, 1000)


def test_a_missing_checkpoint_is_a_usage_error(tmp_path):
    assert prepare.read_checkpoint(None) is None
    with pytest.raises(UsageError, match=f"--init_checkpoint: {tmp_path / 'nope'} does not exist"):
        prepare.read_checkpoint(str(tmp_path / "nope"))


def test_vocab_checks(tmp_path):
    mine, theirs = tmp_path / "mine.txt", tmp_path / "theirs.txt"
    special = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"
    mine.write_text(special + "cat\n")
    theirs.write_text(special + "dog\n")
    with pytest.raises(UsageError, match="has 6 tokens but --init_checkpoint's embeddings have 7 rows"):
        prepare.check_vocab_matches_checkpoint(str(mine), str(theirs), 6, 7)
    with pytest.raises(UsageError, match=f"^--vocab_file {mine} \\(sha256 [0-9a-f]{{64}}\\) is not the tokenizer of "
                                         f"--init_checkpoint {theirs} \\(sha256 [0-9a-f]{{64}}\\): its line 6 is "
                                         "'cat' there but 'dog'"):
        prepare.check_vocab_matches_checkpoint(str(mine), str(theirs), 6, 6)
    prepare.check_vocab_matches_checkpoint(str(mine), str(mine), 6, 6)
    with pytest.raises(UsageError, match=r"^--vocab_file is required$"):
        prepare.make_tokenizer(get_config("tiny"), ModelOptions())
    tokenizer, config = prepare.make_tokenizer(get_config("tiny"), ModelOptions(vocab_file=str(mine)))
    assert tokenizer.vocab_size == config.vocab_size == 6


def test_max_seq_length():
    task, config = get_task("squad"), get_config("tiny", max_position_embeddings=128)
    assert prepare.resolve_max_seq_length(task, config) == 128  # SQuAD's 512, capped
    assert prepare.resolve_max_seq_length(task, config, 64) == 64
    with pytest.raises(UsageError, match="--max_seq_length=256 exceeds the model's max_position_embeddings=128"):
        prepare.resolve_max_seq_length(task, config, 256)
    with pytest.raises(UsageError, match="--max_seq_length=4 is too small"):
        prepare.resolve_max_seq_length(task, config, 4)


def test_batch_and_padding_on_the_default_strategy():
    strategy = tf.distribute.get_strategy()
    assert prepare.dynamic_padding_for(strategy, True) and not prepare.dynamic_padding_for(strategy, False)
    prepare.check_batch_size(3, strategy)


def test_seeds_get_their_own_folders_and_exports():
    options = RunOptions(output_dir="out", learning_rate=1e-4, train_batch_size=2, eval_batch_size=2,
                         num_train_epochs=1, warmup_fraction=0.1, weight_decay=0.0, layerwise_lr_decay=1.0,
                         max_seq_length=16, seed=7, export_saved_model="serving")
    assert runner.seed_options(options, 0, 1) == options
    assert runner.seed_options(options, 2, 3) == dataclasses.replace(options, seed=9, export_saved_model="serving/seed_9")
    assert runner.seed_run_dir("out", 9, 3) == "out/seed_9"


def test_the_summary_reports_medians_of_the_selected_weights():
    task = get_task("MRPC")
    runs = [{"selection": "final", "final": {"accuracy": 70.0}, "selected": {"accuracy": 70.0}},
            {"selection": "best_epoch", "final": {"accuracy": 60.0}, "best": {"accuracy": 75.0},
             "selected": {"accuracy": 75.0}}]
    summary = runner.summarize(task, runs)
    assert summary["selection"] == "best_epoch" and summary["main_metric"] == "accuracy"
    assert (summary["median"], summary["median_final"], summary["median_best"]) == (
        {"accuracy": 72.5}, {"accuracy": 65.0}, {"accuracy": 75.0})
