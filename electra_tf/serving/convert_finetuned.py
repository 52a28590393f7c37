"""`python -m electra_tf.convert --input=<a fine-tuning run>`: the fine-tuned model to ONNX or Hugging Face.

The command line (`electra_tf.convert.cli`) hands a fine-tuning run here: rebuilding its model needs the
fine-tuning package (`electra_tf.finetuning.finetuned_run`), which the convert package must not import (fine-tuning
imports convert to load pre-trained checkpoints); serving sits above both.

* `--to=onnx`: every head (`onnx_export.save_onnx`);
* `--to=hf`: a tagger as `ElectraForTokenClassification` (`save_token_classification_hf`): Hugging Face's head
  is ours, dropout then one linear map of every position. The other heads are refused in one line, as no
  transformers class computes them: `ElectraForSequenceClassification`'s head is dense → GELU → dense on [CLS]
  where ours is one dense layer (GELU is not linear, so no weights make the two equal), and
  `ElectraForQuestionAnswering` scores start and end independently, without the answer mask, the joint end
  scorer or the answerability classifier of our span head.

Example:

>>> print(HF_REFUSALS["classifier"])  # doctest: +ELLIPSIS
--to=hf: transformers has no class for this sentence classifier: ...
"""

from __future__ import annotations

import json
import os

import numpy as np
from absl import logging

from electra_tf.convert import hf, onnx_export, tensor_io, vocab
from electra_tf.convert.errors import ConversionError
from electra_tf.finetuning.finetuned_run import FinetunedModel, load_finetuned

_SEQUENCE = ("transformers has no class for this sentence classifier: ElectraForSequenceClassification computes "
             "dense → GELU → dense on [CLS], ours one dense layer (GELU is not linear: no weights make them equal); "
             "use --to=onnx or the run's --export_saved_model")
HF_REFUSALS = {
    "classifier": f"--to=hf: {_SEQUENCE}",
    "regression": f"--to=hf: {_SEQUENCE}",
    "squad": "--to=hf: transformers has no class for this span head: ElectraForQuestionAnswering scores start "
             "and end independently, without our answer mask, joint end scorer and answerability classifier; "
             "use --to=onnx or the run's --export_saved_model",
}


def convert_finetuned(args) -> str:
    """The `--to` of a fine-tuning run (`args` as `cli.parse_args` gives them); returns the summary line."""
    if args.target not in ("onnx", "hf"):
        raise ConversionError(f"{args.input} is a fine-tuned model: it converts --to=onnx or --to=hf, "
                              f"not --to={args.target} (that takes a pre-training export)")
    if args.target == "hf" and args.quantize != "none":
        raise ConversionError("--quantize applies to --to=onnx only")
    model = load_finetuned(args.input)
    vocab_file = args.vocab_file or model.vocab_file
    if args.target == "onnx":
        written = onnx_export.save_onnx(model, args.output, vocab_file, args.do_lower_case, args.quantize)
        what = ", ".join(os.path.basename(p) for p in written.values())
    else:
        save_token_classification_hf(model, args.output, vocab_file, args.do_lower_case)
        what = "ElectraForTokenClassification"
    config = model.config
    return (f"finetuned ({model.task}, {model.kind}) → {args.target}: {args.output} ({what}; "
            f"{config.discriminator.num_layers}×{config.discriminator.hidden_size}, {config.hidden_act})")


def token_classification_config(model: FinetunedModel, pad_token_id: int) -> dict:
    """`config.json` of `ElectraForTokenClassification` for tagger `model`, label names where known."""
    config = hf.hf_config(model.config, "discriminator", pad_token_id)
    labels = model.labels or [f"LABEL_{i}" for i in range(model.head.num_labels)]
    config.update(architectures=["ElectraForTokenClassification"], num_labels=len(labels),
                  id2label={str(i): label for i, label in enumerate(labels)},
                  label2id={label: i for i, label in enumerate(labels)})
    return config


def save_token_classification_hf(model: FinetunedModel, out_dir: str, vocab_file: str | None,
                                 do_lower_case: bool = True) -> str:
    """Writes tagger `model` as a transformers `ElectraForTokenClassification` directory; returns it."""
    if model.kind != "tagger":
        raise ConversionError(HF_REFUSALS[model.kind])
    if not vocab_file:
        raise ConversionError(f"{model.path}: the run's vocabulary was not found: pass --vocab_file")
    tensors = hf.hf_tensors(model.encoder_weights(), "discriminator")
    kernel, bias = model.head_weights()["logits"]
    tensors.update({"classifier.weight": np.ascontiguousarray(kernel.T), "classifier.bias": bias})
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(token_classification_config(model, vocab.special_token_ids(vocab_file)["pad"]), f, indent=2)
    tensor_io.write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    hf.write_tokenizer_files(out_dir, vocab_file, model.config, do_lower_case)
    logging.info("Wrote Hugging Face ElectraForTokenClassification to %s", out_dir)
    return out_dir
