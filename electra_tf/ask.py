"""Ask a SQuAD SavedModel (`run_finetuning --task=squad --export_saved_model=DIR`) a question.

    python -m electra_tf.ask --model DIR --question "Who built the tower?" --context "..."
    python -m electra_tf.ask --model DIR --question "..." --context_file paragraph.txt --json

Prints the answer and its score on one line (`--json`: every output of the SavedModel's signature, with
the character offsets of the span and, for SQuAD 2.0, `best_span` and `null_odds`). Bad input (no
SavedModel, not a SQuAD export, an unreadable context file) gets one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from electra_tf import runtime
from electra_tf.serving.loading import UsageError, first_row, load_signature, text_or_file

INPUT_NAMES = ("question", "context")  # the signature of electra_tf.serving.squad


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m electra_tf.ask",
                                     description="Answer a question from a context with a SQuAD SavedModel.")
    parser.add_argument("--model", required=True, help="the SavedModel directory (--export_saved_model of a SQuAD run)")
    parser.add_argument("--question", required=True)
    parser.add_argument("--context", help="the paragraph to answer from")
    parser.add_argument("--context_file", help="a UTF-8 file holding the paragraph")
    parser.add_argument("--json", action="store_true", help="print every output as one JSON object")
    return parser


def read_context(args) -> str:
    return text_or_file(args.context, args.context_file, "context")


def ask(signature, question: str, context: str) -> dict:
    """The signature's outputs for one question, as Python values."""
    import tensorflow as tf

    return first_row(signature(question=tf.constant([question]), context=tf.constant([context])))


def render(result: dict, as_json: bool) -> str:
    if as_json:
        return json.dumps(result, ensure_ascii=False)
    if result["answer"] == "" and "null_odds" in result:
        return f"(no answer)\tnull_odds={result['null_odds']:.4f}\tbest_span={result['best_span']!r}"
    return f"{result['answer']}\tscore={result['score']:.4f}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        context = read_context(args)
        runtime.use_onednn_kernels()
        signature = load_signature(args.model, INPUT_NAMES, "a SQuAD export")
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(ask(signature, args.question, context), args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
