"""Hugging Face ELECTRA checkpoints ⇄ our `ElectraPretrainer` (no PyTorch needed).

Reads a discriminator (`ElectraForPreTraining`, or a bare `ElectraModel`)
and optionally a generator (`ElectraForMaskedLM`): either one directory each,
or one directory with `discriminator/` and `generator/` sub-directories (what
`save_hf` writes). Weights come from `model.safetensors` or
`pytorch_model.bin` (see `tensor_io`). Hugging Face stores the embeddings in
both models; ours shares one copy, so the two copies must be equal (they are
in Google's released checkpoints). `hidden_act` "gelu" maps to exact GELU,
"gelu_new"/"gelu_pytorch_tanh"/"gelu_fast" to `gelu_approximate`.
The tokenizer is found beside the weights: vocab.txt, sentencepiece.model
(what `save_hf` writes beside a SentencePiece tokenizer.json, see
`hf_tokenizer`) or a WordPiece tokenizer.json.

Example (from the repository root):

>>> import os, tempfile
>>> from electra_tf.convert import hf
>>> config, pretrainer, vocab = hf.load_hf_checkpoint("tests/fixtures/hf_electra")
>>> config.discriminator.hidden_size, config.generator.hidden_size, config.hidden_act, os.path.basename(vocab)
(256, 64, 'gelu', 'vocab.txt')
>>> dirs = hf.save_hf(pretrainer, config, tempfile.mkdtemp(), vocab)
>>> sorted(os.listdir(dirs["generator"]))
['config.json', 'model.safetensors', 'special_tokens_map.json', 'tokenizer_config.json', 'vocab.txt']
"""

import json
import os
import shutil

import numpy as np
from absl import logging

from electra_tf.config import ElectraConfig
from electra_tf.convert import foreign, hf_tokenizer, keras_model, names, tensor_io, vocab
from electra_tf.convert.checkpoint import SourceTensors
from electra_tf.convert.foreign import ForeignCheckpoint
from electra_tf.convert.errors import ConversionError
from electra_tf.text import tokenizers

HF_TO_OURS_ACT = {"gelu": "gelu", "gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate",
                  "gelu_fast": "gelu_approximate"}
OURS_TO_HF_ACT = {"gelu": "gelu", "gelu_approximate": "gelu_new"}
_ARCHITECTURES = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM"}
_IGNORED_SUFFIXES = (".position_ids", ".token_type_ids")  # non-persistent buffers of older exports
_ENCODER_PREFIXES = ("embeddings.", "embeddings_project.", "encoder.")


def is_hf_dir(path: str) -> bool:
    """A Hugging Face model directory, or one with discriminator/ (+ generator/) model directories."""
    def model_dir(d):
        return os.path.isfile(os.path.join(d, "config.json")) and any(
            os.path.isfile(os.path.join(d, f)) or os.path.isfile(os.path.join(d, f + ".index.json"))
            for f in tensor_io.WEIGHT_FILES)
    return os.path.isdir(path) and (model_dir(path) or model_dir(os.path.join(path, "discriminator")))


def _normalize_names(tensors: dict) -> dict:
    """`LayerNorm.gamma/beta` → `weight/bias`; a bare `ElectraModel`'s names get the `electra.` prefix."""
    bare = not any(name.startswith("electra.") for name in tensors)
    out = {}
    for name, value in tensors.items():
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if bare and name.startswith(_ENCODER_PREFIXES):
            name = "electra." + name
        out[name] = value
    return out


def read_hf_model(directory: str) -> dict:
    """`{"dir", "config", "tensors", "files", "role"}` of one Hugging Face model directory."""
    config_path = os.path.join(directory, "config.json")
    if not os.path.isfile(config_path):
        raise ConversionError(f"{directory} is not a Hugging Face model directory", missing=[config_path])
    with open(config_path) as f:
        config = json.load(f)
    tensors, files = tensor_io.read_hf_weights(directory)
    tensors = _normalize_names(tensors)
    is_generator = any(n.startswith(("generator_predictions.", "generator_lm_head.")) for n in tensors) or \
        "ElectraForMaskedLM" in config.get("architectures", [])
    return {"dir": directory, "config": config, "tensors": tensors, "files": files,
            "role": "generator" if is_generator else "discriminator"}


def find_models(path: str, generator_path: str | None = None) -> dict:
    """`{role: model}` from `path` (one model, or discriminator/ + generator/) and `generator_path`."""
    if os.path.isdir(os.path.join(path, "discriminator")):
        dirs = [os.path.join(path, "discriminator")]
        if os.path.isdir(os.path.join(path, "generator")):
            dirs.append(os.path.join(path, "generator"))
    else:
        dirs = [path]
    dirs += [generator_path] if generator_path else []
    models = {}
    for directory in dirs:
        model = read_hf_model(directory)
        if model["role"] in models:
            raise ConversionError(f"two {model['role']}s given: {models[model['role']]['dir']} and {directory}")
        models[model["role"]] = model
    if "discriminator" not in models:
        raise ConversionError(f"no discriminator among {dirs}: pass the ElectraForPreTraining directory as --input "
                              "and the generator as --generator_input")
    return models


def _check_shared_embeddings(models: dict) -> None:
    """The generator's embedding copy (and tied LM-head weight) must equal the discriminator's."""
    if "generator" not in models:
        return
    disc, gen = models["discriminator"]["tensors"], models["generator"]["tensors"]
    pairs = [(names.hf_name(key)[1], names.hf_name(key)[1]) for key in names.EMBEDDING_KEYS]
    pairs.append(("electra.embeddings.word_embeddings.weight", "generator_lm_head.weight"))
    differing = []
    for disc_name, gen_name in pairs:
        if gen_name not in gen or disc_name not in disc:
            continue
        a, b = np.asarray(disc[disc_name]), np.asarray(gen[gen_name])
        if a.shape != b.shape:
            differing.append(f"{gen_name}: generator {b.shape} vs discriminator {disc_name} {a.shape}")
        elif not np.array_equal(a, b):
            differing.append(f"{gen_name}: max |generator - discriminator| = {np.max(np.abs(a - b)):.3g}")
    if differing:
        raise ConversionError(
            f"{models['generator']['dir']}: the generator's embeddings differ from the discriminator's; "
            "ELECTRA (and ours) shares one copy. Convert the discriminator alone to keep its embeddings",
            mismatched=differing)


def _is_ignored(name: str, role: str) -> bool:
    if name.endswith(_IGNORED_SUFFIXES):
        return True
    # The generator's embedding copy and tied LM-head weight were compared with the discriminator's.
    return role == "generator" and (name.startswith("electra.embeddings.") or name == "generator_lm_head.weight")


def _hint(models: dict) -> str:
    config = models["discriminator"]["config"]
    prefixes = sorted({name.split(".", 1)[0] for name in models["discriminator"]["tensors"]})
    if config.get("model_type", "electra") != "electra" or "electra" not in prefixes:
        return (f"model_type {config.get('model_type')!r}, architectures {config.get('architectures')}, "
                f"weights under {prefixes}")
    return ""


def _display_name(key: str) -> str:
    role, name, _ = names.hf_name(key)
    return name if role == "discriminator" else f"{name} (generator)"


def _find_keys(models: dict) -> dict:
    """`{canonical key: (role, Hugging Face name, transpose?)}` of the tensors present in `models`."""
    max_layers = max(names.max_layer_index(m["tensors"]) for m in models.values())
    found = {}
    for key in names.all_keys(max_layers):
        role, name, transpose = names.hf_name(key)
        if role in models and name in models[role]["tensors"]:
            found[key] = (role, name, transpose)
    return found


def source_tensors(models: dict) -> SourceTensors:
    """The canonical view of the discriminator (+ generator) `models`."""
    found = _find_keys(models)
    mapped = {(role, name) for role, name, _ in found.values()}
    unexpected = [f"{name} ({role})" for role, model in models.items() for name in sorted(model["tensors"])
                  if (role, name) not in mapped and not _is_ignored(name, role)]

    def load(key):
        role, name, transpose = found[key]
        value = np.asarray(models[role]["tensors"][name], np.float32)
        return value.T if transpose else value

    def shape(key):
        role, name, transpose = found[key]
        value_shape = tuple(np.shape(models[role]["tensors"][name]))
        return tuple(reversed(value_shape)) if transpose else value_shape

    return SourceTensors(
        path=", ".join(f for m in models.values() for f in m["files"]),
        shapes={key: shape(key) for key in found}, load=load, unexpected=unexpected, name_of=_display_name,
        transposed=lambda key: key.endswith("/kernel"), hint=_hint(models),
    )


def _activation(models: dict) -> str:
    acts = {role: m["config"].get("hidden_act", "gelu") for role, m in models.items()}
    unknown = {role: act for role, act in acts.items() if act not in HF_TO_OURS_ACT}
    if unknown:
        raise ConversionError(f"unsupported hidden_act {unknown}; supported: {sorted(HF_TO_OURS_ACT)}")
    ours = {HF_TO_OURS_ACT[act] for act in acts.values()}
    if len(ours) > 1:
        raise ConversionError(f"discriminator and generator use different activations: {acts}")
    if "generator" in models and ours == {"gelu_approximate"}:
        logging.warning("Hugging Face's generator head always uses exact GELU; ours uses the config's "
                        "tanh approximation there, so generator logits differ slightly")
    return ours.pop()


def _behaviour(models: dict) -> dict:
    config = models["discriminator"]["config"]
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ConversionError(f"{models['discriminator']['dir']}: position_embedding_type "
                              f"{config['position_embedding_type']!r} is not supported (only 'absolute')")
    return {"hidden_act": _activation(models), "layer_norm_epsilon": float(config.get("layer_norm_eps", 1e-12))}


def _dropout(models: dict) -> dict:
    """Ours has one rate for hidden and attention dropout: the hidden one."""
    rate = float(models["discriminator"]["config"].get("hidden_dropout_prob", 0.1))
    return {"dropout_rate": rate}


def _declared_fields(models: dict) -> dict:
    """The shape fields that the Hugging Face config.json files declare."""
    fields = {}
    for role, model in models.items():
        c = model["config"]
        fields.update({f"{role}.hidden_size": c.get("hidden_size"), f"{role}.num_layers": c.get("num_hidden_layers"),
                       f"{role}.num_heads": c.get("num_attention_heads"),
                       f"{role}.intermediate_size": c.get("intermediate_size")})
        if role == "discriminator":
            fields.update({k: c.get(k) for k in ("vocab_size", "embedding_size", "max_position_embeddings",
                                                 "type_vocab_size")})
    return {k: v for k, v in fields.items() if v is not None}


def _check_declared(models: dict, config: ElectraConfig) -> None:
    differences = [f"{field}: config.json {value}, weights {config.get(field)}"
                   for field, value in _declared_fields(models).items() if config.get(field) != value]
    if differences:
        raise ConversionError(f"{', '.join(m['dir'] for m in models.values())}: config.json disagrees with "
                              "the weights: " + "; ".join(differences))


def open_hf(path: str, generator_path: str | None = None) -> ForeignCheckpoint:
    """The discriminator (+ generator) Hugging Face checkpoint at `path` (+ `generator_path`)."""
    models = find_models(path, generator_path)
    _check_shared_embeddings(models)
    return ForeignCheckpoint(
        source=source_tensors(models),
        heads={role: m["config"].get("num_attention_heads") for role, m in models.items()},
        behaviour=_behaviour(models),
        vocab_dirs=[m["dir"] for m in models.values()] + [path],
        defaults=_dropout(models),
        check=lambda config: _check_declared(models, config),
    )


def load_hf_checkpoint(path: str, generator_path: str | None = None, config: ElectraConfig | None = None,
                       vocab_file: str | None = None, overrides: dict | None = None, strict: bool = True):
    """`(ElectraConfig, ElectraPretrainer, vocab_file)` from Hugging Face ELECTRA directories.

    `config` (a full config) or `overrides` (some fields) are checked against
    the checkpoint: under `strict` a difference raises a `ConversionError`
    listing the variables concerned.
    """
    return foreign.load(open_hf(path, generator_path), config, vocab_file, overrides, strict)


# --- Writing ---------------------------------------------------------------------------------

def hf_config(config: ElectraConfig, role: str, pad_token_id: int = 0) -> dict:
    """The transformers `config.json` of our `role` encoder."""
    encoder = config.encoder(role)
    return {
        "architectures": [_ARCHITECTURES[role]], "model_type": "electra",
        "vocab_size": config.vocab_size, "embedding_size": config.embedding_size,
        "hidden_size": encoder.hidden_size, "num_hidden_layers": encoder.num_layers,
        "num_attention_heads": encoder.num_heads, "intermediate_size": encoder.intermediate_size,
        "hidden_act": OURS_TO_HF_ACT[config.hidden_act], "hidden_dropout_prob": config.dropout_rate,
        "attention_probs_dropout_prob": config.dropout_rate,
        "max_position_embeddings": config.max_position_embeddings, "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range, "layer_norm_eps": config.layer_norm_epsilon,
        "position_embedding_type": "absolute", "pad_token_id": pad_token_id, "dtype": "float32",
    }


def hf_tensors(weights: dict, role: str) -> dict:
    """`{Hugging Face name: array}` of the `role` model from canonical `weights`."""
    parts = ("discriminator", "discriminator_head") if role == "discriminator" else ("generator", "generator_head")
    out = {}
    for key, value in weights.items():
        if names.part_of(key) in parts or key in names.EMBEDDING_KEYS:
            _, name, transpose = names.hf_name(key)
            out[name] = np.ascontiguousarray(value.T if transpose else value, dtype=np.float32)
    return out


def write_tokenizer_files(directory: str, vocab_file: str, config: ElectraConfig, do_lower_case: bool) -> None:
    """The tokenizer files `transformers.AutoTokenizer` reads, for a WordPiece vocab or a SentencePiece model.

    A SentencePiece model decides its own normalisation (`do_lower_case` does
    not apply): `hf_tokenizer.write_tokenizer_files` writes its tokenizer.json.
    """
    if tokenizers.is_sentencepiece(vocab_file):
        hf_tokenizer.write_tokenizer_files(directory, vocab_file, config.max_position_embeddings)
    else:
        write_wordpiece_tokenizer_files(directory, vocab_file, config, do_lower_case)


def write_wordpiece_tokenizer_files(directory: str, vocab_file: str, config: ElectraConfig,
                                    do_lower_case: bool) -> None:
    """vocab.txt + the configs `transformers.AutoTokenizer` needs for a BERT-style WordPiece tokenizer."""
    shutil.copyfile(vocab_file, os.path.join(directory, "vocab.txt"))
    hf_tokenizer.write_tokenizer_configs(directory, {
        "tokenizer_class": "ElectraTokenizer", "do_lower_case": do_lower_case,
        "model_max_length": config.max_position_embeddings, "tokenize_chinese_chars": True, "strip_accents": None})


def save_hf(pretrainer, config: ElectraConfig, out_dir: str, vocab_file: str, do_lower_case: bool = True) -> dict:
    """Writes `out_dir/discriminator` (ElectraForPreTraining) and `out_dir/generator` (ElectraForMaskedLM).

    Each holds config.json, model.safetensors and the tokenizer files; returns
    `{role: directory}`. A tied generator (`untied_generator=False`) is written as a copy of the
    discriminator's encoder with its own head; a `uniform_generator` model has no generator/.
    """
    keras_model.refuse_two_tower_generator(config, "Hugging Face's ElectraForMaskedLM generator")
    if config.hidden_act == "gelu_approximate":
        logging.warning("Hugging Face's generator head always uses exact GELU; this model uses the tanh "
                        "approximation, so the exported generator's logits differ slightly")
    if not config.uniform_generator:
        keras_model.check_canonical(config, names.PARTS)
    parts = keras_model.canonical_parts(config)
    weights = keras_model.read_weights(pretrainer, parts)
    pad_id = vocab.special_token_ids(vocab_file)["pad"]
    dirs = {}
    # Under uniform_generator only discriminator/ is written: a layout the reader accepts.
    for role in [role for role in names.ROLES if role in parts]:
        directory = os.path.join(out_dir, role)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(hf_config(config, role, pad_id), f, indent=2)
        tensor_io.write_safetensors(os.path.join(directory, "model.safetensors"), hf_tensors(weights, role))
        write_tokenizer_files(directory, vocab_file, config, do_lower_case)
        dirs[role] = directory
    logging.info("Wrote Hugging Face ELECTRA discriminator and generator to %s", out_dir)
    return dirs
