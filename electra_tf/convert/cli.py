"""`python -m electra_tf.convert`: convert a checkpoint between formats.

    python -m electra_tf.convert --from=hf --to=ours --input=electra-small/ --output=export/
    python -m electra_tf.convert --from=official --to=hf --input=electra_small/model.ckpt-1000000 \\
        --vocab_file=electra_small/vocab.txt --output=hf_out/
    python -m electra_tf.convert --from=ours --to=keras_hub --input=runs/small/export --output=preset/

A fine-tuned model (a `run_finetuning.py --output_dir`, or one seed's `seed_N/` in it) goes to ONNX or
Hugging Face:

    python -m electra_tf.convert --to=onnx --input=out/sst2 --output=onnx_sst2/ --quantize=int8
    python -m electra_tf.convert --to=hf --input=out/ner --output=hf_ner/

`--to=onnx` writes model.onnx (ids in, the head's outputs out; no PyTorch needed) with the tokenizer beside it,
and with `--quantize=int8` also model.int8.onnx (ONNX Runtime's dynamic quantization); it needs
requirements-onnx.txt. `--to=hf` writes ElectraForTokenClassification for a tagger; the other heads have no
transformers class that computes them (see docs/conversion.md).

The command is an application over the library packages (as `electra_tf.ask` and `electra_tf.tag` are): a
fine-tuning run is converted by `electra_tf.serving.convert_finetuned`, which rebuilds its model with the
fine-tuning package; the library modules of `electra_tf.convert` never import it.

`--from` defaults to auto-detection. Hugging Face inputs are one model
directory (add the generator's with `--generator_input`) or a directory with
`discriminator/` and `generator/`; `--to=hf` writes that layout.
`--config_json` names config fields the checkpoint must match (and completes
the others, e.g. head counts, which official checkpoints do not record).

Example:

>>> import tempfile
>>> from electra_tf.convert.cli import main
>>> main(["--to=hf", "--input=tests/fixtures/hf_electra", f"--output={tempfile.mkdtemp()}"])  # doctest: +ELLIPSIS
hf → hf: ... (vocab 1000, embedding 128, discriminator 1×256, generator 2×64, gelu)
0
"""

import argparse
import sys

from absl import logging

from electra_tf.convert import api, keras_model, onnx_export
from electra_tf.convert.config_json import read_config_json
from electra_tf.convert.errors import ConversionError
from electra_tf.convert.hf import save_hf
from electra_tf.convert.keras_hub_preset import save_keras_hub_preset
from electra_tf.convert.export_dir import save_ours
from electra_tf.serving import convert_finetuned


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m electra_tf.convert", description=__doc__.split("Example:")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", default="auto", choices=("auto", "hf", "official", "ours"),
                        help="input format (default: detected)")
    parser.add_argument("--to", dest="target", required=True, choices=("ours", "hf", "keras_hub", "onnx"))
    parser.add_argument("--input", required=True, help="checkpoint directory, or TF1 checkpoint prefix")
    parser.add_argument("--output", required=True, help="directory to write")
    parser.add_argument("--generator_input", help="Hugging Face generator directory (ElectraForMaskedLM)")
    parser.add_argument("--vocab_file", help="vocab.txt or SentencePiece .model (default: found beside the input)")
    parser.add_argument("--config_json", help="JSON of config fields the checkpoint must match")
    parser.add_argument("--do_lower_case", action=argparse.BooleanOptionalAction, default=True,
                        help="WordPiece tokenizer lower-cases (uncased vocabularies, as Google's ELECTRA); "
                             "a SentencePiece model normalises by itself")
    parser.add_argument("--quantize", default="none", choices=onnx_export.QUANTIZATIONS,
                        help="--to=onnx: also write model.int8.onnx, dynamically quantized (int8 weights)")
    return parser.parse_args(argv)


def convert(args) -> str:
    """Loads `args.input`, writes `args.output` in `args.target` format; returns a summary line."""
    overrides = read_config_json(args.config_json) if args.config_json else None
    source = api.detect_format(args.input) if args.source == "auto" else args.source
    if source == "finetuned":
        return convert_finetuned.convert_finetuned(args)
    if args.target == "onnx":
        raise ConversionError(f"--to=onnx converts a fine-tuned model (a run_finetuning.py --output_dir); "
                              f"{args.input} is a {source} pre-training checkpoint: fine-tune it first")
    if args.quantize != "none":
        raise ConversionError("--quantize applies to --to=onnx only")
    if source == "ours" and keras_model.converts_encoder_only(api.read_config(args.input)[0]):
        return _convert_discriminator_only(args, source)
    config, pretrainer, vocab = api.load_any(args.input, vocab_file=args.vocab_file, overrides=overrides,
                                             generator_path=args.generator_input, source_format=source)
    vocab = args.vocab_file or vocab
    if args.target == "ours":
        save_ours(pretrainer, args.output, vocab)
    elif args.target == "hf":
        if not vocab:
            raise ConversionError(f"{args.input} has no tokenizer (vocab.txt or sentencepiece.model): "
                                  "pass --vocab_file")
        save_hf(pretrainer, config, args.output, vocab, args.do_lower_case)
    else:
        save_keras_hub_preset(pretrainer, config, args.output, vocab, args.do_lower_case)
    return (f"{source} → {args.target}: {args.output} (vocab {config.vocab_size}, embedding {config.embedding_size}, "
            f"discriminator {config.discriminator.num_layers}×{config.discriminator.hidden_size}, generator "
            f"{config.generator.num_layers}×{config.generator.hidden_size}, {config.hidden_act})")


_TARGET_NAMES = {"hf": "Hugging Face's ElectraForMaskedLM generator", "ours": "a generator + discriminator export"}


def _convert_discriminator_only(args, source) -> str:
    """An export whose objective converts its encoder alone (Electric: its discriminator is a standard encoder,
    its two-tower generator has no other form)."""
    if args.target != "keras_hub":
        keras_model.refuse_two_tower_generator(api.read_config(args.input)[0], _TARGET_NAMES[args.target])
    encoder, config, vocab = api.load_encoder(args.input)
    save_keras_hub_preset(encoder, config, args.output, args.vocab_file or vocab, args.do_lower_case)
    return (f"{source} → {args.target}: {args.output} (objective {config.objective}: the discriminator alone, "
            f"{config.discriminator.num_layers}×{config.discriminator.hidden_size}, {config.hidden_act})")


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.set_verbosity(logging.INFO)
    try:
        print(convert(args))
    except (ConversionError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
