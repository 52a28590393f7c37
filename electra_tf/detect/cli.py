"""The command line of `python -m electra_tf.detect` (see the package docstring); `main` returns the exit status."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from electra_tf.detect.errors import UsageError
from electra_tf.detect.loading import load_detector
from electra_tf.detect.rendering import render_html, render_terminal


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m electra_tf.detect",
        description="Show the ELECTRA discriminator's probability that each token was replaced.")
    parser.add_argument("texts", nargs="*", help="texts to score (one sequence each)")
    parser.add_argument("--init_checkpoint", help="export directory, Hugging Face folder or TF1 checkpoint")
    parser.add_argument("--generator_checkpoint", help="Hugging Face generator folder, if not beside the "
                        "discriminator (for --corrupt)")
    parser.add_argument("--vocab_file", help="vocab.txt or SentencePiece .model (default: the checkpoint's)")
    parser.add_argument("--do_lower_case", action=argparse.BooleanOptionalAction, default=None,
                        help="lower-case and strip accents, WordPiece only (default: the checkpoint's "
                        "tokenizer_config.json, else yes; a SentencePiece model normalises as it was built)")
    parser.add_argument("--input_file", help="file with one text per line (blank lines skipped); '-' = stdin")
    parser.add_argument("--max_seq_length", type=int, default=128,
                        help="wordpieces per sequence incl. [CLS]/[SEP] (capped by max_position_embeddings)")
    parser.add_argument("--corrupt", action="store_true",
                        help="let the generator replace tokens first, as in pre-training")
    parser.add_argument("--seed", type=int, default=0, help="seed of --corrupt's masking and sampling")
    parser.add_argument("--mask_prob", type=float, default=None,
                        help="share of tokens --corrupt masks (default: the model's, 0.15)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="generator sampling temperature for --corrupt (default: the model's)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="ANSI colours: auto = when stdout is a terminal and NO_COLOR is unset")
    parser.add_argument("--table", action="store_true", help="one aligned row per token instead of one line")
    parser.add_argument("--html", metavar="OUT.html", help="also write a self-contained HTML page")
    parser.add_argument("--batch_size", type=int, default=32)
    return parser


def _read_texts(args) -> list:
    texts = [t for t in args.texts if t.strip()]
    if args.input_file:
        try:
            if args.input_file == "-":
                lines = sys.stdin.read().split("\n")
            else:
                with open(args.input_file, encoding="utf-8") as f:
                    lines = f.read().split("\n")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError("--input_file", f"cannot read {args.input_file} "
                             f"({getattr(e, 'strerror', None) or e})") from None
        texts += [line.rstrip("\r") for line in lines if line.strip()]
    if not texts:
        raise UsageError(None, "no text to score: pass texts as arguments or --input_file")
    return texts


def _use_color(choice: str, stream) -> bool:
    if choice != "auto":
        return choice == "always"
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR") \
        and os.environ.get("TERM") != "dumb"


def _check_args(args):
    if args.max_seq_length < 3:
        raise UsageError("--max_seq_length", f"must be at least 3 ([CLS] token [SEP]), got {args.max_seq_length}")
    if args.mask_prob is not None and not 0.0 < args.mask_prob < 1.0:
        raise UsageError("--mask_prob", f"must be in (0, 1), got {args.mask_prob}")
    if args.temperature is not None and args.temperature <= 0:
        raise UsageError("--temperature", f"must be positive, got {args.temperature}")
    if args.batch_size < 1:
        raise UsageError("--batch_size", f"must be positive, got {args.batch_size}")
    if args.html and not os.path.isdir(os.path.dirname(os.path.abspath(args.html))):
        raise UsageError("--html", f"the folder of {args.html} does not exist")


def main(argv: Sequence[str] | None = None, stdout=None) -> int:
    """The CLI; returns the exit status (2 for bad input)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    stdout = stdout or sys.stdout
    args = _parser().parse_args(argv)
    try:
        _check_args(args)
        texts = _read_texts(args)
        detector = load_detector(args.init_checkpoint, args.vocab_file, args.generator_checkpoint,
                                 args.do_lower_case)
    except UsageError as e:
        print(f"detect: error: {e}", file=sys.stderr)
        return 2
    if args.corrupt and not {"generator", "generator_head"} <= set(detector.parts):
        print(f"detect: warning: {args.init_checkpoint} holds no trained generator; --corrupt samples from a "
              "random one (pass --generator_checkpoint for a Hugging Face generator)", file=sys.stderr)
    results = detector.score(texts, corrupt=args.corrupt, seed=args.seed, max_seq_length=args.max_seq_length,
                             mask_prob=args.mask_prob, temperature=args.temperature, batch_size=args.batch_size)
    print(render_terminal(results, color=_use_color(args.color, stdout), table=args.table), file=stdout)
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(render_html(results, source=args.init_checkpoint))
        print(f"detect: wrote {args.html}", file=sys.stderr)
    return 0
