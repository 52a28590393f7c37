"""`ElectraTransformerEncoder` (`electra_tf.model.transformer_layer`) in an encoder: keras-hub's weight layout,
the sub-layers each kernel choice uses, the [CLS]-only last layer and the dropout layers."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_hub.layers import TransformerEncoder

from electra_tf.config import get_config
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.model.layers import ElectraDropout, ElectraLayerNormalization
from electra_tf.options import ExecutionOptions


@pytest.mark.parametrize("kernels, ours", [("xla_cpu", 1), ("reference", 0)])
def test_encoder_layer_norms_follow_the_kernels_and_keep_the_weight_layout(kernels, ours):
    """xla_cpu: the embeddings' LayerNorm has the closed-form backward and the transformer layers'
    LayerNorms are keras-hub's own (their weights feed the fused kernels); reference: all Keras'."""
    keras.utils.set_random_seed(0)
    config = get_config("small", vocab_size=100, hparams={"discriminator.num_layers": 2})
    execution = ExecutionOptions(kernels=kernels).resolve({"CPU"})
    encoder = ElectraEncoder.from_config_object(config, "discriminator", execution=execution)
    encoder.build()
    kinds = [type(layer) for layer in encoder._flatten_layers()]
    assert kinds.count(ElectraLayerNormalization) == ours
    assert kinds.count(keras.layers.LayerNormalization) == 1 + 2 * 2 - ours
    # Same weights, in the same order, as an untouched keras-hub layer built alike.
    layer = encoder.transformer_layers[0]
    plain = TransformerEncoder(intermediate_dim=config.discriminator.intermediate_size,
                               num_heads=config.discriminator.num_heads, name=layer.name)
    plain.build((None, None, config.discriminator.hidden_size))
    def layout(layer):
        return [(w.path.split(layer.name + "/", 1)[1], tuple(w.shape)) for w in layer.weights]

    assert layout(layer) == layout(plain) and len(layout(plain)) == 16


# --------------------------------------------------------------------------- [CLS]-only last layer

def _encoder_and_batch(num_layers=3, seq=12, kernels="xla_cpu"):
    keras.utils.set_random_seed(1)
    config = get_config("small", vocab_size=100, hparams={"discriminator.num_layers": num_layers})
    encoder = ElectraEncoder.from_config_object(config, "discriminator",
                                                execution=ExecutionOptions(kernels=kernels).resolve({"CPU"}))
    rng = np.random.RandomState(1)
    lengths = np.array([seq, 7, 3, 9])
    mask = (np.arange(seq)[None] < lengths[:, None]).astype("int32")
    inputs = {"token_ids": tf.constant(rng.randint(1, 100, size=(4, seq)) * mask, tf.int32),
              "segment_ids": tf.constant((np.arange(seq)[None] >= lengths[:, None] // 2) * mask, tf.int32),
              "padding_mask": tf.constant(mask)}
    return encoder, inputs


@pytest.mark.parametrize("kernels", ["xla_cpu", "reference"])
@pytest.mark.parametrize("length", [1, 3])
def test_last_layer_at_the_first_positions_equals_the_full_output_there(length, kernels):
    encoder, inputs = _encoder_and_batch(kernels=kernels)
    full = encoder(inputs, training=False).numpy()
    first = encoder(inputs, training=False, output_length=length).numpy()
    assert first.shape == (4, length, full.shape[-1])
    np.testing.assert_allclose(first, full[:, :length], rtol=0, atol=2e-5)
    # The shortcut must not be a no-op slice of the full output: the other positions differ.
    assert np.abs(full[:, length:length + 1] - full[:, :1]).max() > 1e-2


@pytest.mark.parametrize("kernels", ["xla_cpu", "reference"])
def test_last_layer_at_cls_gives_the_full_paths_gradients(kernels):
    encoder, inputs = _encoder_and_batch(kernels=kernels)
    weights = tf.constant(np.random.RandomState(2).normal(size=(4, encoder.hidden_size)).astype("float32"))

    def grads(output_length):
        with tf.GradientTape() as tape:
            cls = encoder(inputs, training=False, output_length=output_length)[:, 0]
            loss = tf.reduce_sum(tf.square(cls) * weights)
        return loss, tape.gradient(loss, encoder.trainable_variables)

    loss_full, grads_full = grads(None)
    loss_cls, grads_cls = grads(1)
    np.testing.assert_allclose(loss_cls.numpy(), loss_full.numpy(), rtol=1e-5)
    for variable, g_full, g_cls in zip(encoder.trainable_variables, grads_full, grads_cls):
        g_full, g_cls = (tf.convert_to_tensor(g).numpy() for g in (g_full, g_cls))
        np.testing.assert_allclose(g_cls, g_full, rtol=0, atol=1e-4 * max(np.abs(g_full).max(), 1e-3),
                                   err_msg=variable.path)


@pytest.mark.parametrize("kernels", ["xla_cpu", "reference"])
def test_classification_model_runs_the_last_layer_at_cls_only(kernels, monkeypatch):
    from electra_tf.ops import xla_cpu
    from electra_tf.finetuning.heads import ClassificationHead, SpanHead
    from electra_tf.finetuning.model import FinetuningModel

    assert ClassificationHead.output_length == 1 and SpanHead.output_length is None
    encoder, inputs = _encoder_and_batch(kernels=kernels)
    model = FinetuningModel(encoder, ClassificationHead(3))
    batch = {"input_ids": inputs["token_ids"], "segment_ids": inputs["segment_ids"],
             "input_mask": inputs["padding_mask"]}
    logits = model(batch)["logits"].numpy()
    reference = model.head(encoder(inputs, training=False), batch)["logits"].numpy()
    np.testing.assert_allclose(logits, reference, rtol=0, atol=1e-5)
    last = encoder.transformer_layers[-1]
    seen = []
    if kernels == "xla_cpu":  # the feed-forward's rows, [batch × positions, intermediate], reach the fused GELU
        original_gelu = xla_cpu.bias_gelu
        monkeypatch.setattr(xla_cpu, "bias_gelu", lambda x, bias: seen.append(x.shape) or original_gelu(x, bias))
        model(batch)
        expected = [(4 * inputs["token_ids"].shape[1], last.intermediate_dim)] * (encoder.num_layers - 1)
        assert [tuple(shape) for shape in seen] == expected + [(4, last.intermediate_dim)]
        return
    original = last._feedforward_intermediate_dense.call
    last._feedforward_intermediate_dense.call = lambda x, *a, **k: seen.append(x.shape) or original(x, *a, **k)
    try:
        model(batch)
    finally:
        last._feedforward_intermediate_dense.call = original
    assert [tuple(shape) for shape in seen] == [(4, 1, encoder.hidden_size)]


def test_encoder_drops_out_with_electra_dropout_and_keeps_its_rng_state_list():
    keras.utils.set_random_seed(0)
    config = get_config("small", vocab_size=100, hparams={"discriminator.num_layers": 2})
    encoder = ElectraEncoder.from_config_object(config, "discriminator", execution=ExecutionOptions().resolve({"CPU"}))
    encoder.build()
    layer = encoder.transformer_layers[0]
    dropouts = (layer._self_attention_dropout, layer._feedforward_dropout, layer._self_attention_layer._dropout_layer)
    assert [type(d) for d in dropouts] == [ElectraDropout] * 3
    keras.utils.set_random_seed(0)
    plain = TransformerEncoder(intermediate_dim=1024, num_heads=4, dropout=0.1)
    plain.build((None, None, 256))
    seeds = lambda l: [v.path.split("/")[-2:] for v in l.non_trainable_variables if "seed" in v.path]  # noqa: E731
    assert seeds(layer) and len(seeds(layer)) == len(seeds(plain))


def test_keras_dropout_masks_are_keras_dropout_outside_training_and_stay_out_of_the_config():
    config = get_config("small", vocab_size=100, hparams={"discriminator.num_layers": 1})
    execution = ExecutionOptions(kernels="reference", dropout_masks="keras").resolve({"CPU"})
    encoder = ElectraEncoder.from_config_object(config, "discriminator", execution=execution)
    encoder.build()
    dropout = encoder.transformer_layers[0]._feedforward_dropout
    assert isinstance(dropout, ElectraDropout) and dropout.masks == "keras"  # keyed by the example in training
    x = np.ones((4, 8, 16), "float32")  # outside a keyed scope: Keras' dropout, draw for draw
    np.testing.assert_array_equal(ElectraDropout(0.3, masks="keras", seed=5)(x, training=True),
                                  keras.layers.Dropout(0.3, seed=5)(x, training=True))
    assert "dropout_masks" not in encoder.get_config() and "fused_kernels" not in encoder.get_config()
    with pytest.raises(ValueError, match="--dropout_masks must be one of"):
        ExecutionOptions(dropout_masks="8bit")
    with pytest.raises(ValueError, match="an execution option now"):
        get_config("small", hparams={"dropout_masks": "keras"})


def test_keras_files_keep_the_transformer_layers_weight_paths(tmp_path):
    """`.keras` files key a model's layers by class name and sub-layers by attribute: these paths are what
    encoders saved before hold, so they still load."""
    import h5py
    import zipfile

    encoder = ElectraEncoder.from_config_object(
        get_config("tiny", vocab_size=100, hparams={"discriminator.num_layers": 1}), "discriminator")
    encoder.build()
    encoder.save(tmp_path / "encoder.keras")
    with zipfile.ZipFile(tmp_path / "encoder.keras") as archive:
        archive.extract("model.weights.h5", tmp_path)
    paths = []
    with h5py.File(tmp_path / "model.weights.h5") as weights:
        weights.visititems(lambda name, item: paths.append(name) if isinstance(item, h5py.Dataset) else None)
    sublayers = ["_feedforward_intermediate_dense", "_feedforward_layer_norm", "_feedforward_output_dense",
                 "_self_attention_layer/key_dense", "_self_attention_layer/output_dense",
                 "_self_attention_layer/query_dense", "_self_attention_layer/value_dense", "_self_attention_layer_norm"]
    expected = [f"layers/electra_transformer_encoder/{name}/vars/{i}" for name in sublayers for i in (0, 1)]
    assert [path for path in paths if path.startswith("layers/")] == expected
