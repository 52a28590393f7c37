"""Tag a text with a tagging SavedModel (`run_finetuning --task=ner|chunk|tagging --export_saved_model=DIR`).

    python -m electra_tf.tag --model DIR --text "Peter Blackburn rejects the EU call"
    python -m electra_tf.tag --model DIR --text_file sentence.txt --json

The text is split into words at whitespace, as a CoNLL file's words. Prints one line per entity,
`TYPE<tab>entity text<tab>start:end` (characters of the text; `(no entities)` without one), or for a
model trained with `--tagging_scheme=none` one line of `word/TAG` pairs. `--json`: every output for the
text as one JSON object, without the padding. Bad input (no SavedModel, not a tagging export, no or
an unreadable text) gets one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from electra_tf import runtime
from electra_tf.serving.loading import UsageError, first_row, load_signature, text_or_file

INPUT_NAMES = ("text",)  # the signature of electra_tf.serving.tagging
OUTPUT_NAMES = ("tags", "words", "num_words")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m electra_tf.tag",
                                     description="Tag a text's words and print its entities with a tagging SavedModel.")
    parser.add_argument("--model", required=True,
                        help="the SavedModel directory (--export_saved_model of an ner, chunk or tagging run)")
    parser.add_argument("--text", help="the text to tag")
    parser.add_argument("--text_file", help="a UTF-8 file holding the text")
    parser.add_argument("--json", action="store_true", help="print every output as one JSON object")
    return parser


def read_text(args) -> str:
    return text_or_file(args.text, args.text_file, "text")


def tag(signature, text: str) -> dict:
    """The signature's outputs for one text, as Python values without the batch's padding."""
    import tensorflow as tf

    row = first_row(signature(text=tf.constant([text])))
    for name, value in row.items():
        if isinstance(value, list):
            row[name] = value[:row["num_entities" if name.startswith("entity_") else "num_words"]]
    return row


def render(result: dict, as_json: bool) -> str:
    if as_json:
        return json.dumps(result, ensure_ascii=False)
    if "num_entities" not in result:  # a model of tags without chunks
        return " ".join(f"{word}/{tag}" for word, tag in zip(result["words"], result["tags"]))
    if not result["num_entities"]:
        return "(no entities)"
    return "\n".join(f"{kind}\t{text}\t{start}:{end}" for kind, text, start, end in zip(
        result["entity_type"], result["entity_text"], result["entity_start"], result["entity_end"]))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        text = read_text(args)
        runtime.use_onednn_kernels()
        signature = load_signature(args.model, INPUT_NAMES, "a tagging export", OUTPUT_NAMES)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(tag(signature, text), args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
