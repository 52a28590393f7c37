"""Format-neutral ("canonical") names and shapes of every ELECTRA pre-training tensor.

Each converter maps its format's variables onto these keys, so validation,
config inference and the copy into Keras are written once. Canonical dense
kernels are 2-D `[in, out]` (the TF1 layout; Hugging Face stores `[out, in]`
and the Keras attention layers `[in, heads, head_dim]`).

Keys (`R` = `discriminator` or `generator`, `i` = layer index):

* `embeddings/{word,position,segment}`, `embeddings/layer_norm/{gamma,beta}`
  — shared by both encoders, as in the official code;
* `R/projection/{kernel,bias}` — only when the encoder width ≠ embedding size;
* `R/layer_i/attention/{query,key,value,output}/{kernel,bias}`,
  `R/layer_i/attention/layer_norm/{gamma,beta}`,
  `R/layer_i/ffn/{intermediate,output}/{kernel,bias}`, `R/layer_i/ffn/layer_norm/{gamma,beta}`;
* `discriminator_head/{dense,logits}/{kernel,bias}`;
* `generator_head/dense/{kernel,bias}`, `generator_head/layer_norm/{gamma,beta}`,
  `generator_head/output_bias`.

Example:

>>> from electra_tf.config import get_config
>>> from electra_tf.convert import names
>>> shapes = names.expected_shapes(get_config("small", {"discriminator.num_layers": 1, "generator.num_layers": 1}))
>>> shapes["discriminator/projection/kernel"], shapes["generator_head/dense/kernel"]
((128, 256), (64, 128))
>>> names.official_name("generator/layer_0/ffn/layer_norm/gamma")
'generator/encoder/layer_0/output/LayerNorm/gamma'
>>> names.hf_name("discriminator/layer_3/attention/output/kernel")
('discriminator', 'electra.encoder.layer.3.attention.output.dense.weight', True)
"""

import re

from electra_tf.config import ElectraConfig

ROLES = ("discriminator", "generator")
# The four parts a checkpoint may hold; "discriminator" includes the shared embeddings.
PARTS = ("discriminator", "discriminator_head", "generator", "generator_head")

EMBEDDING_KEYS = (
    "embeddings/word", "embeddings/position", "embeddings/segment",
    "embeddings/layer_norm/gamma", "embeddings/layer_norm/beta",
)
LAYER_SUFFIXES = tuple(
    f"{block}/{leaf}"
    for block, leaves in (
        ("attention/query", ("kernel", "bias")), ("attention/key", ("kernel", "bias")),
        ("attention/value", ("kernel", "bias")), ("attention/output", ("kernel", "bias")),
        ("attention/layer_norm", ("gamma", "beta")),
        ("ffn/intermediate", ("kernel", "bias")), ("ffn/output", ("kernel", "bias")),
        ("ffn/layer_norm", ("gamma", "beta")),
    )
    for leaf in leaves
)
DISCRIMINATOR_HEAD_KEYS = (
    "discriminator_head/dense/kernel", "discriminator_head/dense/bias",
    "discriminator_head/logits/kernel", "discriminator_head/logits/bias",
)
GENERATOR_HEAD_KEYS = (
    "generator_head/dense/kernel", "generator_head/dense/bias",
    "generator_head/layer_norm/gamma", "generator_head/layer_norm/beta", "generator_head/output_bias",
)

# --- Official TF1 names (google-research/electra: model/modeling.py, run_pretraining.py) ---
_OFFICIAL_SCOPE = {"discriminator": "electra", "generator": "generator"}
_OFFICIAL_FIXED = {
    "embeddings/word": "electra/embeddings/word_embeddings",
    "embeddings/position": "electra/embeddings/position_embeddings",
    "embeddings/segment": "electra/embeddings/token_type_embeddings",
    "embeddings/layer_norm/gamma": "electra/embeddings/LayerNorm/gamma",
    "embeddings/layer_norm/beta": "electra/embeddings/LayerNorm/beta",
    "discriminator_head/dense/kernel": "discriminator_predictions/dense/kernel",
    "discriminator_head/dense/bias": "discriminator_predictions/dense/bias",
    "discriminator_head/logits/kernel": "discriminator_predictions/dense_1/kernel",
    "discriminator_head/logits/bias": "discriminator_predictions/dense_1/bias",
    "generator_head/dense/kernel": "generator_predictions/dense/kernel",
    "generator_head/dense/bias": "generator_predictions/dense/bias",
    "generator_head/layer_norm/gamma": "generator_predictions/LayerNorm/gamma",
    "generator_head/layer_norm/beta": "generator_predictions/LayerNorm/beta",
    "generator_head/output_bias": "generator_predictions/output_bias",
}
_OFFICIAL_LAYER_BLOCKS = {
    "attention/query": "attention/self/query", "attention/key": "attention/self/key",
    "attention/value": "attention/self/value", "attention/output": "attention/output/dense",
    "attention/layer_norm": "attention/output/LayerNorm",
    "ffn/intermediate": "intermediate/dense", "ffn/output": "output/dense", "ffn/layer_norm": "output/LayerNorm",
}

# --- Hugging Face names (transformers ElectraForPreTraining / ElectraForMaskedLM) ---
_HF_FIXED = {
    "embeddings/word": "electra.embeddings.word_embeddings.weight",
    "embeddings/position": "electra.embeddings.position_embeddings.weight",
    "embeddings/segment": "electra.embeddings.token_type_embeddings.weight",
    "embeddings/layer_norm/gamma": "electra.embeddings.LayerNorm.weight",
    "embeddings/layer_norm/beta": "electra.embeddings.LayerNorm.bias",
    "discriminator_head/dense/kernel": "discriminator_predictions.dense.weight",
    "discriminator_head/dense/bias": "discriminator_predictions.dense.bias",
    "discriminator_head/logits/kernel": "discriminator_predictions.dense_prediction.weight",
    "discriminator_head/logits/bias": "discriminator_predictions.dense_prediction.bias",
    "generator_head/dense/kernel": "generator_predictions.dense.weight",
    "generator_head/dense/bias": "generator_predictions.dense.bias",
    "generator_head/layer_norm/gamma": "generator_predictions.LayerNorm.weight",
    "generator_head/layer_norm/beta": "generator_predictions.LayerNorm.bias",
    "generator_head/output_bias": "generator_lm_head.bias",
}
_HF_LAYER_BLOCKS = {
    "attention/query": "attention.self.query", "attention/key": "attention.self.key",
    "attention/value": "attention.self.value", "attention/output": "attention.output.dense",
    "attention/layer_norm": "attention.output.LayerNorm",
    "ffn/intermediate": "intermediate.dense", "ffn/output": "output.dense", "ffn/layer_norm": "output.LayerNorm",
}
_HF_LEAF = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}

_LAYER_KEY = re.compile(r"^(discriminator|generator)/layer_(\d+)/(.+)/(kernel|bias|gamma|beta)$")
_PROJECTION_KEY = re.compile(r"^(discriminator|generator)/projection/(kernel|bias)$")


def part_of(key: str) -> str:
    """The part (one of `PARTS`) that holds canonical `key`."""
    if key.startswith("embeddings/"):
        return "discriminator"
    return key.split("/", 1)[0]


def _encoder_shapes(role: str, config: ElectraConfig) -> dict:
    encoder = config.encoder(role)
    hidden, inner = encoder.hidden_size, encoder.intermediate_size
    shapes = {}
    if hidden != config.embedding_size:
        shapes[f"{role}/projection/kernel"] = (config.embedding_size, hidden)
        shapes[f"{role}/projection/bias"] = (hidden,)
    for i in range(encoder.num_layers):
        for suffix in LAYER_SUFFIXES:
            shape = (hidden,) if not suffix.endswith("kernel") else (hidden, hidden)
            if suffix == "ffn/intermediate/kernel":
                shape = (hidden, inner)
            elif suffix == "ffn/intermediate/bias":
                shape = (inner,)
            elif suffix == "ffn/output/kernel":
                shape = (inner, hidden)
            shapes[f"{role}/layer_{i}/{suffix}"] = shape
    return shapes


def expected_shapes(config: ElectraConfig, parts=PARTS) -> dict:
    """`{canonical key: shape}` of the tensors of `parts` under `config`."""
    vocab, embed = config.vocab_size, config.embedding_size
    shapes = {}
    if "discriminator" in parts:
        shapes.update({
            "embeddings/word": (vocab, embed),
            "embeddings/position": (config.max_position_embeddings, embed),
            "embeddings/segment": (config.type_vocab_size, embed),
            "embeddings/layer_norm/gamma": (embed,),
            "embeddings/layer_norm/beta": (embed,),
        })
        shapes.update(_encoder_shapes("discriminator", config))
    if "discriminator_head" in parts:
        hidden = config.discriminator.hidden_size
        shapes.update({
            "discriminator_head/dense/kernel": (hidden, hidden), "discriminator_head/dense/bias": (hidden,),
            "discriminator_head/logits/kernel": (hidden, 1), "discriminator_head/logits/bias": (1,),
        })
    if "generator" in parts:
        shapes.update(_encoder_shapes("generator", config))
    if "generator_head" in parts:
        shapes.update({
            "generator_head/dense/kernel": (config.generator.hidden_size, embed),
            "generator_head/dense/bias": (embed,),
            "generator_head/layer_norm/gamma": (embed,),
            "generator_head/layer_norm/beta": (embed,),
            "generator_head/output_bias": (vocab,),
        })
    return shapes


def all_keys(max_layers: int) -> list:
    """Every canonical key of a model with at most `max_layers` layers per encoder."""
    keys = list(EMBEDDING_KEYS) + list(DISCRIMINATOR_HEAD_KEYS) + list(GENERATOR_HEAD_KEYS)
    for role in ROLES:
        keys += [f"{role}/projection/kernel", f"{role}/projection/bias"]
        keys += [f"{role}/layer_{i}/{suffix}" for i in range(max_layers) for suffix in LAYER_SUFFIXES]
    return keys


def official_name(key: str) -> str:
    """The official TF1 variable name of canonical `key` (same `[in, out]` layout)."""
    if key in _OFFICIAL_FIXED:
        return _OFFICIAL_FIXED[key]
    match = _PROJECTION_KEY.match(key)
    if match:
        return f"{_OFFICIAL_SCOPE[match.group(1)]}/embeddings_project/{match.group(2)}"
    role, index, block, leaf = _split_layer_key(key)
    return f"{_OFFICIAL_SCOPE[role]}/encoder/layer_{index}/{_OFFICIAL_LAYER_BLOCKS[block]}/{leaf}"


def hf_name(key: str) -> tuple:
    """`(model role, Hugging Face name, transpose?)` of canonical `key`.

    Embeddings are reported under the discriminator; the generator's model
    file holds a copy under the same name. Linear weights are `[out, in]`.
    """
    transpose = key.endswith("/kernel")
    if key in _HF_FIXED:
        role = "generator" if key.startswith("generator") else "discriminator"
        return role, _HF_FIXED[key], transpose
    match = _PROJECTION_KEY.match(key)
    if match:
        return match.group(1), f"electra.embeddings_project.{_HF_LEAF[match.group(2)]}", transpose
    role, index, block, leaf = _split_layer_key(key)
    return role, f"electra.encoder.layer.{index}.{_HF_LAYER_BLOCKS[block]}.{_HF_LEAF[leaf]}", transpose


def _split_layer_key(key: str):
    match = _LAYER_KEY.match(key)
    if not match:
        raise KeyError(f"not a canonical ELECTRA tensor name: {key!r}")
    return match.group(1), int(match.group(2)), match.group(3), match.group(4)


def max_layer_index(names) -> int:
    """1 + the largest `layer_N` / `layer.N` index among `names` (0 when none)."""
    indices = [int(m.group(1)) for name in names for m in [re.search(r"layer[._](\d+)", name)] if m]
    return max(indices) + 1 if indices else 0
