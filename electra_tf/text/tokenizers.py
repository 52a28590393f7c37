"""Choose the tokenizer for a vocabulary file: the ONE place that decides.

A path ending in ``.model`` is a SentencePiece model proto
(``SentencePieceTokenizer``); anything else is a BERT WordPiece vocab, one
token per line (``WordPieceTokenizer``).  Both expose the same interface and
both are checked for ``[PAD] [UNK] [CLS] [SEP] [MASK]``.

Example:

>>> import tempfile, os
>>> from electra_tf.text.tokenizers import load_tokenizer, validate_tokenizer_file
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w").write("[PAD]\\n[UNK]\\n[CLS]\\n[SEP]\\n[MASK]\\nhello\\n")
>>> type(load_tokenizer(path)).__name__
'WordPieceTokenizer'
>>> validate_tokenizer_file(path)[-1]
'hello'
>>> export_name(path), export_name("spm/en.model")
('vocab.txt', 'sentencepiece.model')
>>> tokenizer_sha256(path)[:12]  # hashlib.sha256(the file's bytes)
'90786d49eb5d'

An export or a data manifest names its tokenizer by file and records
``vocab_sha256`` (``tokenizer_sha256`` of the file: the SHA-256 of its bytes).  Two tokenizers
with the same number of ids are told apart by it.
"""

from __future__ import annotations

from typing import Optional

SENTENCEPIECE_SUFFIX = ".model"
# The tokenizer's file name inside an export directory, by kind (a reader looks for each).
WORDPIECE_EXPORT_NAME = "vocab.txt"
SENTENCEPIECE_EXPORT_NAME = "sentencepiece.model"
EXPORT_NAMES = (WORDPIECE_EXPORT_NAME, SENTENCEPIECE_EXPORT_NAME)


def is_sentencepiece(path: str) -> bool:
    """True if ``path`` names a SentencePiece model (by its ``.model`` suffix)."""
    return str(path).endswith(SENTENCEPIECE_SUFFIX)


def load_tokenizer(path: str, do_lower_case: bool = True, strip_accents: Optional[bool] = None):
    """``SentencePieceTokenizer`` for a ``.model`` file, else ``WordPieceTokenizer``."""
    if is_sentencepiece(path):
        from electra_tf.text.sentencepiece_tokenizer import SentencePieceTokenizer
        return SentencePieceTokenizer(path, do_lower_case, strip_accents)
    from electra_tf.text.tokenization import WordPieceTokenizer
    return WordPieceTokenizer(path, do_lower_case, strip_accents)


def validate_tokenizer_file(path: str) -> list[str]:
    """The tokens in id order of a checked vocab or model; ValueError naming the file if bad."""
    if is_sentencepiece(path):
        from electra_tf.text.sentencepiece_tokenizer import validate_sentencepiece_model
        return validate_sentencepiece_model(path)
    from electra_tf.text.tokenization import validate_vocab
    return validate_vocab(path)


def export_name(path: str) -> str:
    """The file name the tokenizer at ``path`` takes inside an export directory."""
    return SENTENCEPIECE_EXPORT_NAME if is_sentencepiece(path) else WORDPIECE_EXPORT_NAME


def tokenizer_sha256(path: str) -> str:
    """The SHA-256 (hex) of the tokenizer file's bytes: what manifests and exports record."""
    from electra_tf.text.manifest import sha256_file
    return sha256_file(path)
