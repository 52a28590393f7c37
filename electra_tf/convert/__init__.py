"""Checkpoint interoperability: official TF1 ELECTRA, Hugging Face, keras-hub ⇄ electra-tf.

Python API (CLI: `python -m electra_tf.convert --help`):

* `load_any(path, config=None)` → `(ElectraConfig, ElectraPretrainer, vocab_file)`
  from an export directory of ours, a Hugging Face directory or an official
  TF1 checkpoint (`detect_format(path)` tells which);
* `load_encoder(path, config=None, name=...)` → `(ElectraEncoder, ElectraConfig,
  vocab_file)`: the encoder to fine-tune;
* `read_config(path)` → `(ElectraConfig, recorded finetune_* fields)` without
  building a model;
* `initialize_pretrainer(model, path)` for continued pre-training from a foreign checkpoint;
* `load_hf_checkpoint`, `load_official_checkpoint`, `load_ours` per format;
* `save_hf`, `save_keras_hub_preset`, `save_ours` to write.

Every mismatch raises `ConversionError` (a `ValueError`) naming the file and
listing the missing, unexpected or wrongly shaped variables.

Example:

>>> import tempfile
>>> from electra_tf.convert import load_any, save_hf
>>> config, pretrainer, vocab = load_any("tests/fixtures/hf_electra")
>>> dirs = save_hf(pretrainer, config, tempfile.mkdtemp(), vocab)
"""

from electra_tf.convert.api import FORMATS, detect_format, initialize_pretrainer, load_any, load_encoder, read_config
from electra_tf.convert.errors import ConversionError
from electra_tf.convert.hf import load_hf_checkpoint, save_hf
from electra_tf.convert.keras_hub_preset import save_keras_hub_preset
from electra_tf.convert.official import load_official_checkpoint
from electra_tf.convert.ours import load_ours, save_ours

__all__ = [
    "FORMATS", "ConversionError", "detect_format", "initialize_pretrainer", "load_any", "load_encoder",
    "load_hf_checkpoint", "load_official_checkpoint", "load_ours", "read_config", "save_hf",
    "save_keras_hub_preset", "save_ours",
]
