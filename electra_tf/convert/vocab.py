"""Finding and checking the vocabulary that goes with a checkpoint: a WordPiece vocab.txt or a SentencePiece model.

`read_tokens` gives the tokens in id order of either kind (a SentencePiece
model's pieces through `tokenizers.validate_tokenizer_file`), so sizes and
special ids are checked the same way for both.

Example:

>>> import os, tempfile
>>> from electra_tf.convert import vocab
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w").write("[PAD]\\n[UNK]\\n[CLS]\\n[SEP]\\n[MASK]\\nhello\\n")
>>> vocab.special_token_ids(path)
{'pad': 0, 'unk': 1, 'cls': 2, 'sep': 3, 'mask': 4}
>>> vocab.find_vocab(None, [os.path.dirname(path)], vocab_size=6) == path
True
"""

import json
import os
import tempfile

from absl import logging

from electra_tf.convert.errors import ConversionError
from electra_tf.text import tokenizers
from electra_tf.text.manifest import SPECIAL_TOKENS  # the one table of special tokens (data contract)

VOCAB_NAMES = tokenizers.EXPORT_NAMES  # vocab.txt, sentencepiece.model


def read_tokens(path: str) -> list:
    """The tokens in id order: a vocab.txt's lines, or a SentencePiece model's pieces (checked)."""
    if tokenizers.is_sentencepiece(path):
        try:
            return tokenizers.validate_tokenizer_file(path)
        except ValueError as e:
            raise ConversionError(str(e)) from None
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def find_vocab(vocab_file: str | None, search_dirs, vocab_size: int | None = None) -> str:
    """`vocab_file`, else the first vocab.txt / sentencepiece.model in `search_dirs`; checks its size."""
    if vocab_file:
        if not os.path.isfile(vocab_file):
            raise ConversionError(f"--vocab_file {vocab_file!r} does not exist")
        path = vocab_file
    else:
        candidates = [os.path.join(d, name) for d in search_dirs if d for name in VOCAB_NAMES + ("tokenizer.json",)]
        found = [c for c in candidates if os.path.isfile(c)]
        path = next((c for c in found if not c.endswith(".json")), None) or \
            next((p for p in map(vocab_from_tokenizer_json, found) if p), None)
        if path is None:
            raise ConversionError("missing vocabulary: pass --vocab_file (vocab_file=...); looked for",
                                  missing=candidates)
    if vocab_size is not None:
        count = len(read_tokens(path))
        if count != vocab_size:
            raise ConversionError(
                f"{path} has {count} tokens but the checkpoint's word embeddings have {vocab_size} rows")
    return path


def vocab_from_tokenizer_json(path: str) -> str | None:
    """A vocab.txt (in a temporary directory) from a WordPiece `tokenizer.json`, else None."""
    with open(path, encoding="utf-8") as f:
        model = json.load(f).get("model", {})
    if model.get("type") != "WordPiece":
        return None
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    if [model["vocab"][t] for t in tokens] != list(range(len(tokens))):
        return None
    out = os.path.join(tempfile.mkdtemp(prefix="electra_vocab_"), "vocab.txt")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    logging.info("Vocabulary taken from %s (written to %s)", path, out)
    return out


def special_token_ids(path: str) -> dict:
    """Ids of [PAD], [UNK], [CLS], [SEP] and [MASK] in the vocabulary at `path`."""
    index = {token: i for i, token in reversed(list(enumerate(read_tokens(path))))}
    missing = [token for token in SPECIAL_TOKENS.values() if token not in index]
    if missing:
        raise ConversionError(f"{path} lacks special token(s) needed by ELECTRA", missing=missing)
    return {name: index[token] for name, token in SPECIAL_TOKENS.items()}
