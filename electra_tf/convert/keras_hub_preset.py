"""Our discriminator → a keras-hub `ElectraBackbone` preset directory (+ its tokenizer).

The preset (config.json, model.weights.h5, metadata.json, tokenizer.json,
assets/tokenizer/vocabulary.txt) is written with keras-hub's own
`Backbone.save_to_preset` / `Tokenizer.save_to_preset`, so
`keras_hub.models.ElectraBackbone.from_preset(out_dir)` and
`keras_hub.models.ElectraTokenizer.from_preset(out_dir)` load it.

keras-hub's `ElectraTokenizer` is WordPiece-only: a SentencePiece model goes
into the preset as keras-hub's generic `keras_hub.tokenizers.SentencePieceTokenizer`
(assets/tokenizer/vocabulary.spm), which `keras_hub.tokenizers.Tokenizer.from_preset(out_dir)`
loads and which gives our ids (the same tensorflow-text op); keras-hub's ELECTRA
task preprocessors need the WordPiece tokenizer's special-token attributes, so
for tasks pack `[CLS] ... [SEP]` yourself (`tokenizer.token_to_id("[CLS]")`).

keras-hub's ElectraBackbone hard-codes tanh-approximate GELU and LayerNorm
epsilon 1e-12, and has a `pooled_dense` layer ELECTRA lacks (left random).
When our model differs (exact GELU is the default), the export logs a warning
with the measured max |ours − keras-hub| of the sequence outputs on a sample
input, and records it in metadata.json under "electra_tf" and in
electra_export.json. Our export directories hold such a preset (`convert/export_dir.py`).

Example (from the repository root):

>>> import tempfile, keras_hub
>>> from electra_tf.convert import load_any
>>> from electra_tf.convert.keras_hub_preset import save_keras_hub_preset
>>> config, pretrainer, vocab = load_any("tests/fixtures/hf_electra")
>>> out_dir = tempfile.mkdtemp()
>>> note = save_keras_hub_preset(pretrainer, config, out_dir, vocab)  # exact GELU: warns
>>> 0 < note["max_abs_sequence_output_deviation"] < 1e-2
True
>>> backbone = keras_hub.models.ElectraBackbone.from_preset(out_dir)
"""

import json
import os

import keras
import keras_hub
import numpy as np
from absl import logging

from electra_tf.config import ElectraConfig
from electra_tf.convert import vocab
from electra_tf.text import tokenizers

KERAS_HUB_EPSILON = 1e-12


def to_keras_hub_backbone(encoder, config: ElectraConfig) -> keras_hub.models.ElectraBackbone:
    """A keras-hub `ElectraBackbone` holding `encoder`'s weights (its unused pooler stays random)."""
    backbone = keras_hub.models.ElectraBackbone(
        vocab_size=config.vocab_size,
        num_layers=encoder.num_layers,
        num_heads=encoder.transformer_layers[0].num_heads,
        hidden_dim=encoder.hidden_size,
        embedding_dim=config.embedding_size,
        intermediate_dim=encoder.transformer_layers[0].intermediate_dim,
        dropout=config.dropout_rate,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size,
    )
    pairs = [(backbone.get_layer(name), getattr(encoder.embeddings, name)) for name in
             ("token_embedding", "position_embedding", "segment_embedding", "embeddings_layer_norm")]
    if encoder.embeddings_projection is not None:
        pairs.append((backbone.get_layer("embeddings_projection"), encoder.embeddings_projection))
    pairs += list(zip(backbone.transformer_layers, encoder.transformer_layers))
    for target, source in pairs:
        target.set_weights(source.get_weights())
    return backbone


def keras_hub_deviation(encoder, backbone, config: ElectraConfig, seq_length=16) -> float:
    """Max |ours − keras-hub| over sequence outputs on a fixed random input."""
    rng = np.random.RandomState(0)
    inputs = {
        "token_ids": rng.randint(0, config.vocab_size, size=(2, seq_length)).astype("int32"),
        "segment_ids": (np.arange(seq_length) >= seq_length // 2).astype("int32")[None].repeat(2, 0),
        "padding_mask": np.ones((2, seq_length), "int32"),
    }
    ours = keras.ops.convert_to_numpy(encoder(inputs, training=False))
    theirs = keras.ops.convert_to_numpy(backbone(inputs, training=False)["sequence_output"])
    return float(np.max(np.abs(ours - theirs)))


def deviation_note(config: ElectraConfig, deviation: float) -> dict:
    """What the preset computes differently from our model, with the measured deviation."""
    note = {"source": "electra_tf", "hidden_act": config.hidden_act, "keras_hub_activation": "gelu_approximate",
            "layer_norm_epsilon": config.layer_norm_epsilon,
            "max_abs_sequence_output_deviation": deviation,
            "pooled_dense": "not part of ELECTRA: randomly initialised"}
    causes = []
    if config.hidden_act != "gelu_approximate":
        causes.append("keras-hub's ElectraBackbone uses tanh-approximate GELU; this model uses exact GELU")
    if config.layer_norm_epsilon != KERAS_HUB_EPSILON:
        causes.append(f"keras-hub uses LayerNorm epsilon {KERAS_HUB_EPSILON}; this model {config.layer_norm_epsilon}")
    if causes:
        note["warning"] = "; ".join(causes) + f": sequence outputs differ by up to {deviation:.3g}"
    return note


def _add_to_metadata(out_dir: str, note: dict) -> None:
    path = os.path.join(out_dir, "metadata.json")
    with open(path) as f:
        metadata = json.load(f)
    metadata["electra_tf"] = note
    with open(path, "w") as f:
        json.dump(metadata, f, indent=4)
    with open(os.path.join(out_dir, "electra_export.json"), "w") as f:
        json.dump(note, f, indent=2)


def keras_hub_tokenizer(vocab_file: str, do_lower_case: bool = True):
    """keras-hub's `ElectraTokenizer` of a WordPiece vocab, or its generic `SentencePieceTokenizer` of a model.

    A SentencePiece model normalises by itself (`do_lower_case` does not apply).
    """
    if tokenizers.is_sentencepiece(vocab_file):
        vocab.read_tokens(vocab_file)  # checked: one clear line if it is no ELECTRA model
        with open(vocab_file, "rb") as f:
            return keras_hub.tokenizers.SentencePieceTokenizer(proto=f.read())
    return keras_hub.models.ElectraTokenizer(vocabulary=vocab_file, lowercase=do_lower_case)


def save_keras_hub_preset(model, config: ElectraConfig, out_dir: str, vocab_file: str | None,
                          do_lower_case: bool = True) -> dict:
    """Writes the preset of `model`'s discriminator (an `ElectraPretrainer` or an encoder); returns the note."""
    encoder = getattr(model, "encoder_for_finetuning", model)
    backbone = to_keras_hub_backbone(encoder, config)
    backbone.save_to_preset(out_dir)
    if vocab_file:
        keras_hub_tokenizer(vocab_file, do_lower_case).save_to_preset(out_dir)
    else:
        logging.warning("keras-hub preset %s written without a tokenizer (no vocabulary given)", out_dir)
    note = deviation_note(config, keras_hub_deviation(encoder, backbone, config))
    if "warning" in note:
        logging.warning("keras-hub preset %s: %s", out_dir, note["warning"])
    _add_to_metadata(out_dir, note)
    return note
