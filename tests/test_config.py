"""The single hyper-parameter source: paper values, overrides, validation."""

import json
from pathlib import Path

import pytest

from electra_tf.config import (MODEL_SIZES, SHAPE_FIELDS, ElectraConfig, EncoderConfig, get_config,
                               merge_architecture)
from electra_tf.options import ExecutionOptions


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
    assert {k: config.get(k) for k in expected} == expected
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
        assert config.generator.hidden_size < config.discriminator.hidden_size
        assert config.to_dict()["model_size"] == size


def test_encoder_fields_by_nested_object_dotted_key_or_legacy_key_agree():
    nested = get_config("small", {"generator": {"num_layers": 6, "hidden_size": 128, "num_heads": 2}})
    dotted = get_config("small", {"generator.num_layers": 6, "generator.hidden_size": 128, "generator.num_heads": 2})
    legacy = get_config("small", generator_num_layers=6, generator_hidden_size=128, generator_num_heads=2)
    assert nested == dotted == legacy
    assert nested.generator == EncoderConfig(hidden_size=128, num_layers=6, num_heads=2, intermediate_size=256)
    assert nested.discriminator == get_config("small").discriminator  # the other encoder is untouched


def test_config_round_trips_through_its_json_and_reads_the_flat_form_of_older_runs():
    config = get_config("mini", num_train_steps=77)
    assert ElectraConfig.from_dict(json.loads(config.to_json())) == config
    flat = {k: v for k, v in config.to_dict().items() if k not in ("discriminator", "generator")}
    for role, prefix in (("discriminator", ""), ("generator", "generator_")):
        flat.update({prefix + name: value for name, value in config.to_dict()[role].items()})
    assert ElectraConfig.from_dict(flat) == config


@pytest.mark.parametrize("hparams,message", [
    ({"generator.width": 3}, r"Unknown encoder field\(s\) \['width'\]"),
    ({"discriminator": {"num_heads": 0}}, "discriminator.num_heads must be a positive integer"),
    ({"generator_hidden_size": 100, "generator_num_heads": 3}, "generator.hidden_size=100 is not divisible"),
])
def test_bad_encoder_fields_name_the_encoder(hparams, message):
    with pytest.raises(ValueError, match=message):
        get_config("small", hparams)


def test_shape_fields_are_every_field_that_changes_a_weight_shape():
    from electra_tf.convert import names

    base = get_config("small")
    bumped = {"vocab_size": 30000, "embedding_size": 64, "max_position_embeddings": 256, "type_vocab_size": 3,
              "hidden_size": 128, "num_layers": 11, "num_heads": 2, "intermediate_size": 512}
    for field in SHAPE_FIELDS:
        name = field.split(".")[-1]
        if name == "num_heads":  # canonical [in, out] kernels hide it; Keras' [in, heads, head_dim] do not
            continue
        value = bumped[name] // (4 if field == "generator.hidden_size" else 1)
        changed = base.replace(**{field: value, "max_seq_length": 128})
        assert names.expected_shapes(changed) != names.expected_shapes(base), field
    for field in ("dropout_rate", "hidden_act", "layer_norm_epsilon", "learning_rate"):
        assert field not in SHAPE_FIELDS


def test_merge_architecture_takes_the_checkpoints_shape_and_keeps_training_fields():
    checkpoint = get_config("mini", hidden_act="gelu_approximate")
    requested = get_config("small", finetune_learning_rate=1e-5, max_seq_length=512, dropout_rate=0.2)
    merged = merge_architecture(checkpoint.replace(max_position_embeddings=256, max_seq_length=128), requested)
    assert merged.discriminator == checkpoint.discriminator and merged.generator == checkpoint.generator
    assert merged.hidden_act == "gelu_approximate" and merged.max_position_embeddings == 256
    assert (merged.finetune_learning_rate, merged.dropout_rate, merged.max_seq_length) == (1e-5, 0.2, 256)


# --------------------------------------------------------------------------- execution options

def test_run_configs_written_before_the_execution_options_still_load():
    """A run_config.json of the earlier format (execution switches and attention_dropout_rate among
    the hyper-parameters) reads as the same model; the switches are dropped, not applied."""
    stored = json.loads((Path(__file__).parent / "fixtures" / "run_config_before_execution_options.json").read_text())
    assert stored["fused_kernels"] is False and stored["sampling"] == "gumbel" and "attention_dropout_rate" in stored
    config = ElectraConfig.from_dict(stored)
    assert config == get_config("small")
    assert not {"fused_kernels", "dropout_masks", "sampling", "adam_fused_kernel",
                "attention_dropout_rate"} & set(config.to_dict())
    with pytest.raises(ValueError, match="one dropout rate"):
        ElectraConfig.from_dict({**stored, "attention_dropout_rate": 0.2})


@pytest.mark.parametrize("field, flag", [("fused_kernels", "--kernels"), ("dropout_masks", "--dropout_masks"),
                                         ("sampling", "--sampling"), ("adam_fused_kernel", "--adam_kernel")])
def test_execution_fields_in_hparams_point_to_their_flag(field, flag):
    with pytest.raises(ValueError, match=f"an execution option now.*{flag}"):
        get_config("small", {field: "x"})


@pytest.mark.parametrize("devices, expected", [
    ({"CPU"}, ("xla_cpu", "16bit", "inverse_cdf", "fused", False, "off")),
    ({"CPU", "GPU"}, ("reference", "keras", "gumbel", "ops", True, "on")),
    ({"CPU", "TPU"}, ("reference", "keras", "gumbel", "ops", True, "on")),
])
def test_auto_execution_is_the_cpu_tuned_path_only_where_every_device_is_a_cpu(devices, expected):
    resolved = ExecutionOptions().resolve(devices)
    assert (resolved.kernels, resolved.dropout_masks, resolved.sampling, resolved.adam_kernel,
            resolved.jit_compile, resolved.graph_optimizer) == expected
    assert resolved.resolved and resolved.resolve(devices) == resolved


def test_explicit_execution_choices_win_and_impossible_ones_raise():
    gpu = {"CPU", "GPU"}
    assert ExecutionOptions(kernels="xla_cpu").resolve(gpu).dropout_masks == "16bit"  # what the kernels need
    assert ExecutionOptions(kernels="reference").resolve({"CPU"}).dropout_masks == "16bit"
    assert ExecutionOptions(jit_compile=False, sampling="inverse_cdf").resolve(gpu).jit_compile is False
    assert ExecutionOptions().resolve({"CPU"}, backend="jax").kernels == "reference"
    with pytest.raises(ValueError, match="needs the TensorFlow backend"):
        ExecutionOptions(kernels="xla_cpu").resolve({"CPU"}, backend="jax")
    with pytest.raises(ValueError, match="--dropout_masks=keras needs --kernels=reference"):
        ExecutionOptions(kernels="xla_cpu", dropout_masks="keras").resolve({"CPU"})
    with pytest.raises(ValueError, match="--sampling must be one of"):
        ExecutionOptions(sampling="fast")
