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
* `save_hf`, `save_keras_hub_preset`, `save_ours` to write;
* `save_onnx(model, out_dir, vocab_file)` to write a fine-tuned model as ONNX (`requirements-onnx.txt`); the
  model comes from `electra_tf.finetuning.finetuned_run.load_finetuned(run_dir)` (a `run_finetuning.py
  --output_dir`), as this package does not import fine-tuning (fine-tuning imports it).

Every mismatch raises `ConversionError` (a `ValueError`) naming the file and
listing the missing, unexpected or wrongly shaped variables.

Example:

>>> import tempfile
>>> from electra_tf.convert import load_any, save_hf
>>> config, pretrainer, vocab = load_any("tests/fixtures/hf_electra")
>>> dirs = save_hf(pretrainer, config, tempfile.mkdtemp(), vocab)
"""

import importlib

# Public name -> the module of this package that defines it. Imported on first use (PEP 562), so that
# `python -m electra_tf.convert` can choose TensorFlow's kernels before anything imports TensorFlow.
_EXPORTS = {
    "FORMATS": "api", "detect_format": "api", "initialize_pretrainer": "api", "load_any": "api",
    "load_encoder": "api", "read_config": "api",
    "ConversionError": "errors",
    "load_hf_checkpoint": "hf", "save_hf": "hf",
    "save_keras_hub_preset": "keras_hub_preset",
    "load_official_checkpoint": "official",
    "load_ours": "export_dir", "save_ours": "export_dir",
    "save_onnx": "onnx_export",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
