"""Pure-Python BERT tokenizer: the *reference* the fast path is checked against.

This is an independent re-implementation of the basic + WordPiece tokenizer
of google-research/bert ``tokenization.py`` (the one ELECTRA ships), with the
``strip_accents`` override of HuggingFace's ``BasicTokenizer``.  It is slow on
purpose (one Python loop per character and per candidate word piece, like the
original) and exists for three things:

* tests: ``electra_tf.text.tokenization.WordPieceTokenizer`` must give the same ids;
* the benchmark's "official-style pure Python" baseline;
* SQuAD's projection of a predicted answer back onto the original text
  (``electra_tf.finetuning.squad.decoding.get_final_text`` runs ``BasicTokenizer``).

It also owns BERT's CJK ranges (``_CJK_RANGES``), which ``tokenization.py`` builds its
character classes from.

Example:

>>> from electra_tf.text.reference_tokenizer import ReferenceTokenizer
>>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "wor", "##ld", ","]
>>> tok = ReferenceTokenizer(vocab)
>>> tok.tokenize("Héllo, World!")
['hello', ',', 'wor', '##ld', '[UNK]']
>>> tok.tokenize_to_ids("Héllo, World!")
[5, 8, 6, 7, 1]
"""

from __future__ import annotations

import unicodedata
from typing import Iterable, Optional, Sequence

# CJK Unified Ideographs blocks exactly as BERT defines "Chinese characters".
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_cjk_char(code_point: int) -> bool:
    """True for the code points BERT splits into one token each."""
    return any(lo <= code_point <= hi for lo, hi in _CJK_RANGES)


def is_whitespace(char: str) -> bool:
    """BERT whitespace: space, tab, newline, carriage return and category Zs."""
    if char in " \t\n\r":
        return True
    return unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    """BERT control characters (category C*, except tab/newline/cr)."""
    if char in "\t\n\r":
        return False
    return unicodedata.category(char).startswith("C")


def is_punctuation(char: str) -> bool:
    """ASCII non-alphanumerics count as punctuation, plus Unicode P*."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def strip_accents(text: str) -> str:
    """NFD-decompose and drop combining marks (category Mn)."""
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")


def clean_text(text: str) -> str:
    """Remove NUL, U+FFFD and control chars; map whitespace to a space."""
    out = []
    for char in text:
        cp = ord(char)
        if cp == 0 or cp == 0xFFFD or is_control(char):
            continue
        out.append(" " if is_whitespace(char) else char)
    return "".join(out)


def split_cjk(text: str) -> str:
    """Surround every CJK character with spaces."""
    out = []
    for char in text:
        if is_cjk_char(ord(char)):
            out.extend((" ", char, " "))
        else:
            out.append(char)
    return "".join(out)


def split_on_punctuation(word: str) -> list[str]:
    """Each punctuation character becomes its own piece."""
    pieces: list[list[str]] = []
    start_new = True
    for char in word:
        if is_punctuation(char):
            pieces.append([char])
            start_new = True
        else:
            if start_new:
                pieces.append([])
            start_new = False
            pieces[-1].append(char)
    return ["".join(p) for p in pieces]


class BasicTokenizer:
    """Whitespace/punctuation/CJK splitting with optional lower-casing."""

    def __init__(self, do_lower_case: bool = True, strip_accents: Optional[bool] = None):
        self.do_lower_case = do_lower_case
        self.strip_accents = do_lower_case if strip_accents is None else strip_accents

    def tokenize(self, text: str) -> list[str]:
        text = split_cjk(clean_text(text))
        words = []
        for word in text.split():
            if self.do_lower_case:
                word = word.lower()
            if self.strip_accents:
                word = strip_accents(word)
            words.extend(split_on_punctuation(word))
        return " ".join(words).split()


class GreedyWordPiece:
    """Greedy longest-match-first WordPiece over a vocab set."""

    def __init__(self, vocab: Iterable[str], unk_token: str = "[UNK]",
                 max_chars_per_word: int = 100):
        self.vocab = set(vocab)
        self.unk_token = unk_token
        self.max_chars_per_word = max_chars_per_word

    def tokenize_word(self, word: str) -> list[str]:
        if len(word) > self.max_chars_per_word:
            return [self.unk_token]
        pieces = []
        start = 0
        while start < len(word):
            end = len(word)
            match = None
            while start < end:
                candidate = word[start:end]
                if start > 0:
                    candidate = "##" + candidate
                if candidate in self.vocab:
                    match = candidate
                    break
                end -= 1
            if match is None:
                return [self.unk_token]
            pieces.append(match)
            start = end
        return pieces


class ReferenceTokenizer:
    """BERT basic tokenizer followed by greedy WordPiece, all in Python."""

    def __init__(self, vocab: Sequence[str], do_lower_case: bool = True,
                 strip_accents: Optional[bool] = None, unk_token: str = "[UNK]",
                 max_chars_per_word: int = 100):
        self.vocab = list(vocab)
        self.token_to_id = {}
        for index, token in enumerate(self.vocab):
            self.token_to_id.setdefault(token, index)
        self.basic = BasicTokenizer(do_lower_case, strip_accents)
        self.wordpiece = GreedyWordPiece(self.token_to_id, unk_token, max_chars_per_word)
        self.unk_id = self.token_to_id[unk_token]

    def tokenize(self, text: str) -> list[str]:
        tokens = []
        for word in self.basic.tokenize(text):
            tokens.extend(self.wordpiece.tokenize_word(word))
        return tokens

    def tokenize_to_ids(self, text: str) -> list[int]:
        return [self.token_to_id.get(t, self.unk_id) for t in self.tokenize(text)]
