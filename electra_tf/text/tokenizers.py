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
"""

from __future__ import annotations

from typing import Optional

SENTENCEPIECE_SUFFIX = ".model"


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
