"""Every Keras layer of the model and the fine-tuning heads round-trips through `get_config` /
`from_config` (and Keras' serialisation): the same config back, and with the same weights the same
outputs. A new layer class fails `test_every_layer_class_has_a_round_trip_case` until it has a case."""

import importlib
import inspect
import pkgutil

import keras
import numpy as np
import pytest

import electra_tf.finetuning
import electra_tf.model
from electra_tf.config import get_config
from electra_tf.model import attention, embeddings, encoder, heads, layers, transformer_layer
from electra_tf.finetuning import heads as finetuning_heads

CONFIG = get_config("tiny", {"discriminator.num_layers": 1, "generator.num_layers": 1}, vocab_size=40,
                    max_seq_length=8)
RNG = np.random.RandomState(0)
HIDDEN = RNG.normal(size=(2, 8, 16)).astype("float32")
IDS = RNG.randint(0, 40, size=(2, 8)).astype("int32")
SEGMENTS = np.zeros((2, 8), "int32")
MASK = np.ones((2, 8), "int32")
BATCH = {"input_ids": IDS, "input_mask": MASK, "segment_ids": SEGMENTS, "label_ids": np.array([0, 1], "int32")}


def embeddings_block():
    return embeddings.ElectraEmbeddings(40, 16, max_position_embeddings=8, dropout_rate=0.0)


# Layer class → (a built-to-be instance, its call on test inputs).
CASES = {
    layers.ElectraLayerNormalization: (lambda: layers.ElectraLayerNormalization(epsilon=1e-12), lambda l: l(HIDDEN)),
    layers.ElectraDense: (lambda: layers.ElectraDense(4, activation="relu"), lambda l: l(HIDDEN)),
    layers.ElectraEinsumDense: (lambda: layers.ElectraEinsumDense("abc,cd->abd", output_shape=(None, 4),
                                                                  bias_axes="d"), lambda l: l(HIDDEN)),
    layers.ElectraDropout: (lambda: layers.ElectraDropout(0.25, seed=3), lambda l: l(HIDDEN, training=False)),
    attention.SelfAttention: (lambda: attention.SelfAttention(num_heads=2, key_dim=8),
                              lambda l: l(HIDDEN, HIDDEN)),
    transformer_layer.ElectraTransformerEncoder: (
        lambda: transformer_layer.ElectraTransformerEncoder(32, 2, dropout=0.0, activation="gelu"),
        lambda l: l(HIDDEN, padding_mask=MASK.astype(bool))),
    embeddings.ElectraEmbeddings: (embeddings_block, lambda l: l(IDS, SEGMENTS)),
    embeddings.GdesEmbeddings: (lambda: embeddings.GdesEmbeddings(embeddings_block()), lambda l: l(IDS, SEGMENTS)),
    heads.DiscriminatorHead: (lambda: heads.DiscriminatorHead(16), lambda l: l(HIDDEN)),
    heads.MaskedLMHead: (lambda: heads.MaskedLMHead(embeddings_block().token_embedding, 16), lambda l: l(HIDDEN)),
    encoder.ElectraEncoder: (lambda: encoder.ElectraEncoder.from_config_object(CONFIG),
                             lambda l: l({"token_ids": IDS, "segment_ids": SEGMENTS, "padding_mask": MASK})),
    finetuning_heads.ClassificationHead: (lambda: finetuning_heads.ClassificationHead(3),
                                          lambda l: l(HIDDEN, BATCH)["logits"]),
    finetuning_heads.TokenClassificationHead: (lambda: finetuning_heads.TokenClassificationHead(3),
                                               lambda l: l(HIDDEN, BATCH)["logits"]),
    finetuning_heads.SpanHead: (lambda: finetuning_heads.SpanHead(answerable=True),
                                lambda l: l(HIDDEN, BATCH)["start_logits"]),
}
# Composites of networks that share weights, built from an ElectraConfig (`model.networks.build_networks`,
# `finetuning.model.build_model`): their round trip is the config plus the weights (an export), which
# tests/test_convert.py and the fine-tuning tests cover; a get_config of their parts would lose the sharing.
COMPOSITES = {"ElectraPretrainer", "TwoTowerGenerator", "FinetuningModel"}


def layer_classes():
    found = set()
    for package in (electra_tf.model, electra_tf.finetuning):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            found |= {cls for _, cls in inspect.getmembers(module, inspect.isclass)
                      if issubclass(cls, keras.layers.Layer) and cls.__module__ == module.__name__}
    return found


def test_every_layer_class_has_a_round_trip_case():
    missing = {cls.__name__ for cls in layer_classes()} - {cls.__name__ for cls in CASES} - COMPOSITES
    assert not missing, f"layers without a round-trip case in tests/test_layer_configs.py: {sorted(missing)}"


@pytest.mark.parametrize("cls", list(CASES), ids=lambda cls: cls.__name__)
def test_layer_round_trips_through_its_config(cls):
    make, call = CASES[cls]
    layer = make()
    expected = np.asarray(call(layer))
    clone = cls.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(again) is cls and again.get_config() == layer.get_config()
    call(clone)  # builds it
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.asarray(call(clone)), expected, rtol=1e-6, atol=1e-6)
