"""`--config_json`: config fields to check against (and complete) a converted checkpoint.

Accepts our `electra_config.json` (an export's, with a "config" object), a
flat object of `ElectraConfig` fields, or a Hugging Face / BERT `config.json`
(`num_hidden_layers`, `num_attention_heads`, `layer_norm_eps`, ...). Unknown
keys are refused, listed.

Example:

>>> import json, os, tempfile
>>> from electra_tf.convert.config_json import read_config_json
>>> path = os.path.join(tempfile.mkdtemp(), "config.json")
>>> _ = open(path, "w").write(json.dumps({"model_type": "electra", "hidden_size": 256,
...                                        "num_attention_heads": 4, "hidden_act": "gelu_new"}))
>>> sorted(read_config_json(path).items())
[('discriminator.hidden_size', 256), ('discriminator.num_heads', 4), ('hidden_act', 'gelu_approximate')]
"""

import dataclasses
import json

from electra_tf.config import ACTIVATIONS as OUR_ACTIVATIONS
from electra_tf.config import ENCODER_FIELDS, ROLES, ElectraConfig, flatten
from electra_tf.convert.errors import ConversionError
from electra_tf.convert.hf import HF_TO_OURS_ACT

RENAMED = {"num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
           "layer_norm_eps": "layer_norm_epsilon", "hidden_dropout_prob": "dropout_rate"}
# Hugging Face / BERT keys with no meaning for our config.
IGNORED = {"architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "pad_token_id",
           "bos_token_id", "eos_token_id", "summary_type", "summary_use_proj", "summary_activation",
           "summary_last_dropout", "use_cache", "classifier_dropout", "is_decoder", "add_cross_attention",
           "tie_word_embeddings", "position_embedding_type", "directionality", "pooler_fc_size",
           "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type"}
ACTIVATIONS = {**HF_TO_OURS_ACT, **{name: name for name in OUR_ACTIVATIONS}}


def read_config_json(path: str) -> dict:
    """`{ElectraConfig field or dotted encoder key: value}` from the JSON file at `path`."""
    with open(path) as f:
        values = json.load(f)
    if isinstance(values.get("config"), dict):
        values = values["config"]
    attention_rate = values.pop("attention_probs_dropout_prob", None)
    if attention_rate is not None and attention_rate != values.get("hidden_dropout_prob", attention_rate):
        raise ConversionError(f"--config_json {path}: attention_probs_dropout_prob={attention_rate} differs from "
                              f"hidden_dropout_prob={values['hidden_dropout_prob']}; this model has one dropout rate")
    fields = {f.name for f in dataclasses.fields(ElectraConfig)} - set(ROLES)
    fields |= {f"{role}.{name}" for role in ROLES for name in ENCODER_FIELDS}
    out, unknown = {}, []
    for key, value in flatten({RENAMED.get(k, k): v for k, v in values.items() if k not in IGNORED}).items():
        if key not in fields:
            unknown.append(key)
            continue
        out[key] = ACTIVATIONS.get(value, value) if key == "hidden_act" else value
    if unknown:
        raise ConversionError(f"--config_json {path}: unknown key(s); valid: ElectraConfig fields "
                              "or Hugging Face/BERT config names", unexpected=unknown)
    return out
