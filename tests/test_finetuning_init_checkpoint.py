"""`run_finetuning.py --init_checkpoint`: architecture and the size's fine-tuning defaults from the checkpoint."""

import json
import logging
from pathlib import Path

import pytest

from electra_tf.config import ElectraConfig, get_config
from test_finetuning_run import VOCAB, glue_dir, run_main, vocab_file  # noqa: F401

HF_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hf_electra"  # 1 layer, hidden 256, vocab 1000
SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def _run(tmp_path, glue_dir, checkpoint, out, extra=()):
    """SST-2, one step, only the flags a user must give (no --model_size, --hparams or --vocab_file)."""
    run_main([f"--output_dir={tmp_path / out}", "--task=SST-2", f"--data_dir={glue_dir}",
              f"--init_checkpoint={checkpoint}", "--max_seq_length=16", "--train_batch_size=4",
              "--max_train_steps=1", "--log_steps=1"] + list(extra))
    recorded = json.loads((tmp_path / out / "finetune_config.json").read_text())
    metrics = json.loads((tmp_path / out / "metrics.json").read_text())
    assert metrics["runs"][0]["train_steps"] == 1
    if "--do_eval=false" not in extra:
        assert 0 <= metrics["median"]["accuracy"] <= 100
    return ElectraConfig.from_dict(recorded["config"]), recorded["options"]


def _pretrainer(config):
    from electra_tf.model.networks import pretrainer_from_config

    pretrainer = pretrainer_from_config(config, special_token_ids=SPECIAL)
    pretrainer.build_all()
    return pretrainer


def test_hf_checkpoint_without_hparams(tmp_path, glue_dir, caplog):
    """No size has 1 layer of 256: small's fine-tuning defaults, said in the log; architecture from the files."""
    caplog.set_level(logging.INFO)
    config, options = _run(tmp_path, glue_dir, HF_FIXTURE, "hf")
    assert (config.discriminator.num_layers, config.discriminator.hidden_size, config.vocab_size) == (1, 256, 1000)
    assert config.model_size == "small" and options["learning_rate"] == get_config("small").finetune_learning_rate
    assert "no model size has hidden_size 256 and 1 layers" in caplog.text


@pytest.mark.slow  # ~7 s; test_tiny_export_uses_tiny_finetuning_defaults (a size's defaults by its shape) and
# test_hf_checkpoint_without_hparams (a Hugging Face folder) run by default
def test_hf_checkpoint_of_a_known_size_takes_its_defaults(tmp_path, glue_dir, vocab_file):
    """A 4-layer, 256-wide Hugging Face checkpoint is `mini`: mini's learning rate and layer decay."""
    from electra_tf.convert import save_hf

    mini = get_config("mini", vocab_size=len(VOCAB), max_position_embeddings=64, max_seq_length=64)
    save_hf(_pretrainer(mini), mini, str(tmp_path / "hf_mini"), vocab_file)
    config, options = _run(tmp_path, glue_dir, tmp_path / "hf_mini", "mini", ["--do_eval=false"])
    expected = get_config("mini")
    assert (config.model_size, config.discriminator.num_layers, config.discriminator.hidden_size) == ("mini", 4, 256)
    assert options["learning_rate"] == expected.finetune_learning_rate
    assert options["layerwise_lr_decay"] == expected.finetune_layerwise_lr_decay


def test_explicit_model_size_keeps_the_checkpoint_architecture(tmp_path, glue_dir, caplog):
    caplog.set_level(logging.INFO)
    config, options = _run(tmp_path, glue_dir, HF_FIXTURE, "base", ["--model_size=base"])
    assert (config.discriminator.num_layers, config.discriminator.hidden_size, config.discriminator.num_heads) == (1, 256, 4)  # not base's 12/768/12
    assert options["learning_rate"] == get_config("base").finetune_learning_rate
    assert "architecture taken from the checkpoint" in caplog.text


def test_tiny_export_uses_tiny_finetuning_defaults(tmp_path, glue_dir, vocab_file):
    """The export records model_size="tiny" and its finetune_* fields (here a custom weight decay)."""
    from electra_tf.convert import export_dir as export_format

    tiny = get_config("tiny", vocab_size=len(VOCAB), max_position_embeddings=64, max_seq_length=64,
                      finetune_weight_decay=0.02)
    export_dir = str(tmp_path / "export")
    export_format.save_ours(_pretrainer(tiny), export_dir, vocab_file=vocab_file, keras_hub=False)
    expected = get_config("tiny")
    assert expected.finetune_learning_rate != get_config("small").finetune_learning_rate

    config, options = _run(tmp_path, glue_dir, export_dir, "tiny")
    assert (config.model_size, config.discriminator.num_layers, config.discriminator.hidden_size) == ("tiny", 2, 128)
    assert options["learning_rate"] == config.finetune_learning_rate == expected.finetune_learning_rate
    assert options["layerwise_lr_decay"] == expected.finetune_layerwise_lr_decay
    assert options["weight_decay"] == 0.02  # recorded by the export

    config, options = _run(tmp_path, glue_dir, export_dir, "flags",
                           ["--learning_rate=0.002", '--hparams={"finetune_weight_decay": 0.0}'])
    assert options["learning_rate"] == 0.002 and options["weight_decay"] == 0.0  # flags and --hparams win


def test_unrecognised_checkpoint_is_one_line(tmp_path, glue_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as info:
        _run(tmp_path, glue_dir, tmp_path / "empty", "out")
    text = str(info.value.code)
    assert "--init_checkpoint" in text and "unrecognised checkpoint" in text and "\n" not in text


def test_hf_checkpoint_without_its_vocab_takes_vocab_file(tmp_path, glue_dir):
    """A checkpoint folder without vocab.txt fine-tunes with --vocab_file (the encoder loader gets it too)."""
    import shutil

    bare = tmp_path / "bare"
    for role in ("discriminator", "generator"):
        (bare / role).mkdir(parents=True)
        for name in ("config.json", "model.safetensors"):
            shutil.copy(HF_FIXTURE / role / name, bare / role / name)
    vocab = HF_FIXTURE / "discriminator" / "vocab.txt"
    with pytest.raises(SystemExit, match="--vocab_file is required"):
        _run(tmp_path, glue_dir, bare, "no_vocab")
    config, _ = _run(tmp_path, glue_dir, bare, "with_vocab", [f"--vocab_file={vocab}"])
    assert config.vocab_size == 1000


def test_graph_optimizer_flag_reaches_the_fine_tuning_loop(tmp_path, glue_dir, monkeypatch):
    from electra_tf.training import loop

    seen = []
    original = loop.make_step_driver

    def driver(*args, graph_optimizer, **kwargs):
        seen.append(graph_optimizer)
        return original(*args, graph_optimizer=graph_optimizer, **kwargs)

    monkeypatch.setattr(loop, "make_step_driver", driver)
    _, options = _run(tmp_path, glue_dir, HF_FIXTURE, "on", extra=("--graph_optimizer=on", "--do_eval=false"))
    assert options["execution"]["graph_optimizer"] == "on" and seen == ["on"]
