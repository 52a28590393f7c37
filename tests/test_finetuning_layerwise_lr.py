"""Layer-wise learning-rate decay: every variable's multiplier, and the optimizer applying it."""

import re

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import get_config
from electra_tf.finetuning.heads import ClassificationHead, SpanHead
from electra_tf.finetuning.layerwise_lr import layer_depth_exponents, layerwise_lr_multipliers
from electra_tf.finetuning.model import FinetuningModel
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.training.optimization import ElectraAdamW

DECAY = 0.7


def _model(head, num_layers=3):
    # embedding_size != hidden_size, so the encoder has an embedding projection.
    config = get_config("tiny", vocab_size=40, num_layers=num_layers, embedding_size=16, hidden_size=32,
                        num_heads=2, intermediate_size=64)
    encoder = ElectraEncoder.from_config_object(config)
    encoder.build()  # as run_finetuning does: the encoder exists before the head
    model = FinetuningModel(encoder, head)
    return model.build_all(8), num_layers


def _expected_exponent(path, num_layers, official_bug):
    """Independent of the implementation: the exponent read off the variable path."""
    extra = 1 if official_bug else 0
    if path.startswith("discriminator/embeddings"):  # embeddings/... and embeddings_projection/...
        return num_layers + 1 + extra
    match = re.match(r"discriminator/transformer_layer_(\d+)/", path)
    if match:
        return num_layers - int(match.group(1)) + extra
    assert not path.startswith("discriminator/"), path
    return 0


@pytest.mark.parametrize("official_bug", [False, True])
@pytest.mark.parametrize("head", ["classification", "span"])
def test_every_variable_matches_the_formula(official_bug, head):
    head_layer = ClassificationHead(3) if head == "classification" else SpanHead(answerable=True,
                                                                                  answerable_hidden_size=8)
    model, num_layers = _model(head_layer)
    multipliers = layerwise_lr_multipliers(model.encoder, model.head.trainable_weights, DECAY,
                                           official_bug=official_bug)
    paths = [v.path for v in model.trainable_variables]
    assert sorted(multipliers) == sorted(paths)  # every variable, nothing else
    assert any("embeddings_projection" in p for p in paths)
    for path in paths:
        exponent = _expected_exponent(path, num_layers, official_bug)
        assert multipliers[path] == pytest.approx(DECAY ** exponent), path
    top = [p for p in paths if "transformer_layer_2/" in p]
    assert multipliers[top[0]] == pytest.approx(DECAY ** (2 if official_bug else 1))


def test_exponent_table_and_disabled_decay():
    assert layer_depth_exponents(3, official_bug=False) == {
        "embeddings": 4, "layer_0": 3, "layer_1": 2, "layer_2": 1, "head": 0}
    assert layer_depth_exponents(3) == layer_depth_exponents(3, official_bug=True) == {
        "embeddings": 5, "layer_0": 4, "layer_1": 3, "layer_2": 2, "head": 0}
    model, _ = _model(ClassificationHead(2), num_layers=1)
    for decay in (1.0, 0.0, -1.0):
        assert set(layerwise_lr_multipliers(model.encoder, model.head.trainable_weights, decay).values()) == {1.0}


def test_optimizer_step_is_scaled_per_variable():
    """The first (official, uncorrected) Adam step with unit gradients moves each variable by
    lr × its multiplier × (1 − β1) / (√(1 − β2) + ε)."""
    model, num_layers = _model(ClassificationHead(2), num_layers=2)
    multipliers = layerwise_lr_multipliers(model.encoder, model.head.trainable_weights, DECAY)
    variables = model.trainable_variables
    optimizer = ElectraAdamW(learning_rate=0.01, weight_decay=0.0, lr_multipliers=multipliers)
    optimizer.build(variables)
    before = [v.numpy().copy() for v in variables]
    optimizer.apply([tf.ones_like(v) for v in variables], variables)
    for variable, old in zip(variables, before):
        step = old - variable.numpy()
        unit_step = (1 - 0.9) / (np.sqrt(1 - 0.999) + 1e-6)
        np.testing.assert_allclose(step, 0.01 * multipliers[variable.path] * unit_step, rtol=1e-4,
                                   err_msg=variable.path)


@pytest.mark.parametrize("config_bug, option, expected", [
    (True, None, True), (False, None, False), (True, False, False), (False, True, True)])
def test_optimizer_takes_the_default_from_the_config(config_bug, option, expected):
    """`RunOptions.official_layerwise_lr_bug=None` means the config's `finetune_official_layerwise_lr_bug`."""
    from electra_tf.finetuning.train import make_optimizer
    from electra_tf.options import RunOptions

    model, num_layers = _model(ClassificationHead(2), num_layers=2)
    config = get_config("tiny", finetune_official_layerwise_lr_bug=config_bug)
    options = RunOptions(output_dir="unused", learning_rate=0.01, train_batch_size=2, eval_batch_size=2,
                         num_train_epochs=1, warmup_fraction=0.0, weight_decay=0.0, layerwise_lr_decay=DECAY,
                         max_seq_length=8, official_layerwise_lr_bug=option)
    optimizer = make_optimizer(model, options, config, total_steps=10)
    for variable in model.trainable_variables:
        exponent = _expected_exponent(variable.path, num_layers, expected)
        assert optimizer.lr_multipliers[variable.path] == pytest.approx(DECAY ** exponent), variable.path
    assert get_config("small").finetune_official_layerwise_lr_bug  # the official behaviour by default
