"""`--to=onnx`: a fine-tuned model of ours as an ONNX model, its tokenizer beside it.

`save_onnx(finetuned, out_dir, vocab_file)` writes, into a staging folder renamed into place when complete:

* `model.onnx`: `onnx_graph.build_graph`'s graph (ids in, the head's outputs out, float32);
* `model.int8.onnx` with `quantize="int8"`: ONNX Runtime's dynamic quantization of it
  (`onnxruntime.quantization.quantize_dynamic`, int8 weights, activations quantized per batch at run time);
* the tokenizer files of `hf.write_tokenizer_files` (vocab.txt and the configs `transformers.AutoTokenizer` reads,
  or a SentencePiece model's tokenizer.json), so the ids fed to the model are the ones it was trained on;
* `onnx_config.json`: the task, kind, inputs and outputs, label names (where known), the run's max_seq_length.

`onnx` and `onnxruntime` are optional (`requirements-onnx.txt`); a missing one is one line naming that file.
"""

from __future__ import annotations

import json
import os
import shutil

from absl import logging

from electra_tf.convert import hf, onnx_graph
from electra_tf.convert.errors import ConversionError

MODEL_FILE = "model.onnx"
INT8_MODEL_FILE = "model.int8.onnx"
CONFIG_FILE = "onnx_config.json"
QUANTIZATIONS = ("none", "int8")


def import_quantization():
    """`onnxruntime.quantization`, or one line naming the requirements file that installs it."""
    try:
        from onnxruntime import quantization
    except ImportError:
        raise ConversionError(f"--quantize=int8 needs the onnxruntime package: pip install -r "
                              f"{onnx_graph.REQUIREMENTS}") from None
    return quantization


def quantize_int8(model_path: str, output_path: str) -> None:
    """Dynamic int8 quantization of `model_path`'s MatMul weights (ONNX Runtime's `quantize_dynamic`)."""
    quantization = import_quantization()
    quantization.quantize_dynamic(model_path, output_path, weight_type=quantization.QuantType.QInt8)


def save_onnx(finetuned, out_dir: str, vocab_file: str | None, do_lower_case: bool = True,
              quantize: str = "none") -> dict:
    """Writes `out_dir` (see the module docstring); returns `{"model": path[, "int8": path]}`."""
    if quantize not in QUANTIZATIONS:
        raise ConversionError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, got {quantize!r}")
    if not vocab_file:
        raise ConversionError(f"{finetuned.path}: the run's vocabulary was not found: pass --vocab_file")
    model = onnx_graph.build_graph(finetuned.config, finetuned.encoder_weights(), finetuned.head,
                                   finetuned.head_weights(), name=f"electra_{finetuned.kind}")
    if quantize != "none":
        import_quantization()  # before any file is written
    staging = out_dir.rstrip("/") + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        onnx_graph.import_onnx().save_model(model, os.path.join(staging, MODEL_FILE))
        if quantize == "int8":
            quantize_int8(os.path.join(staging, MODEL_FILE), os.path.join(staging, INT8_MODEL_FILE))
        hf.write_tokenizer_files(staging, vocab_file, finetuned.config, do_lower_case)
        with open(os.path.join(staging, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(_description(finetuned, model, quantize, do_lower_case), f, indent=2)
        _replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logging.info("Wrote ONNX %s model to %s", finetuned.kind, out_dir)
    paths = {"model": os.path.join(out_dir, MODEL_FILE)}
    if quantize == "int8":
        paths["int8"] = os.path.join(out_dir, INT8_MODEL_FILE)
    return paths


def _description(finetuned, model, quantize: str, do_lower_case: bool) -> dict:
    return {"task": finetuned.task, "kind": finetuned.kind, "inputs": list(onnx_graph.INPUTS),
            "outputs": [o.name for o in model.graph.output], "labels": finetuned.labels,
            "max_seq_length": finetuned.max_seq_length, "do_lower_case": do_lower_case,
            # A tagger was trained with this token type id on every real token (--tagging_segment_id).
            **({"token_type_id": finetuned.segment_id} if finetuned.kind == "tagger" else {}),
            "opset": onnx_graph.OPSET, "quantized": INT8_MODEL_FILE if quantize == "int8" else None,
            "source": os.path.abspath(finetuned.path)}


def _replace(staging: str, target: str) -> None:
    """`target` becomes `staging`: an existing folder is removed only once the new one is complete."""
    if os.path.exists(target):
        shutil.rmtree(target)
    os.replace(staging, target)
