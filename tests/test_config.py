"""The single hyper-parameter source: paper values, overrides, validation."""

import json

import pytest

from electra_tf.config import MODEL_SIZES, get_config


@pytest.mark.parametrize("size,expected", [
    ("small", dict(hidden_size=256, num_layers=12, num_heads=4, intermediate_size=1024, embedding_size=128,
                   generator_hidden_size=64, generator_num_heads=1, generator_intermediate_size=256,
                   generator_num_layers=12, mask_prob=0.15, learning_rate=5e-4, train_batch_size=128,
                   max_seq_length=128, num_train_steps=1_000_000)),
    ("base", dict(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072, embedding_size=768,
                  generator_hidden_size=256, generator_num_heads=4, generator_intermediate_size=1024,
                  mask_prob=0.15, learning_rate=2e-4, train_batch_size=256, max_seq_length=512,
                  num_train_steps=766_000)),
    ("large", dict(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096, embedding_size=1024,
                   generator_hidden_size=256, generator_num_heads=4, generator_num_layers=24, mask_prob=0.25,
                   learning_rate=2e-4, train_batch_size=2048, max_seq_length=512, num_train_steps=400_000)),
])
def test_sizes_match_the_paper(size, expected):
    config = get_config(size)
    assert {k: getattr(config, k) for k in expected} == expected
    shared = dict(adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-6, weight_decay=0.01, num_warmup_steps=10_000,
                  clip_norm=1.0, dropout_rate=0.1, disc_weight=50.0, temperature=1.0, vocab_size=30522,
                  hidden_act="gelu", mask_token_prob=0.85)
    assert {k: getattr(config, k) for k in shared} == shared


def test_finetuning_defaults_per_size():
    assert (get_config("small").finetune_learning_rate, get_config("small").finetune_layerwise_lr_decay) == (3e-4, 0.8)
    assert (get_config("base").finetune_learning_rate, get_config("base").finetune_layerwise_lr_decay) == (1e-4, 0.8)
    assert (get_config("large").finetune_learning_rate, get_config("large").finetune_layerwise_lr_decay) == (5e-5, 0.9)


def test_overrides_from_json_string_file_and_flags(tmp_path):
    assert get_config("small", '{"learning_rate": 1e-3}').learning_rate == 1e-3
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"disc_weight": 20.0, "num_train_steps": 5}))
    config = get_config("small", str(path), num_train_steps=7, learning_rate=None)
    assert (config.disc_weight, config.num_train_steps, config.learning_rate) == (20.0, 7, 5e-4)


@pytest.mark.parametrize("hparams,message", [
    ('{"hiden_size": 3}', "Unknown hyper-parameter"),
    ('{"objective": "gan"}', "objective"),
    ('{"hidden_size": 250}', "divisible"),
    ('{"max_seq_length": 1024}', "max_position_embeddings"),
    ("not-a-file.json", "neither a JSON object nor an existing JSON file"),
    ("{bad json", "invalid JSON"),
])
def test_bad_hyper_parameters_are_explained(hparams, message):
    with pytest.raises(ValueError, match=message):
        get_config("small", hparams)


def test_unknown_size_is_explained():
    with pytest.raises(ValueError, match="--model_size"):
        get_config("huge")


def test_every_size_is_a_valid_config():
    for size in MODEL_SIZES:
        config = get_config(size)
        assert config.generator_hidden_size < config.hidden_size
        assert config.to_dict()["model_size"] == size
