"""BERT's text normalisation, exactly as google-research/bert's basic tokenizer does it, in Python and as TF ops.

The character classes (deleted characters: NUL, U+FFFD and category C*; combining marks Mn; word breaks:
punctuation and CJK ideographs) are built once from Python's ``unicodedata`` (``_category_masks``), so the
Python path (``normalize_text``) and the TF path (``normalize_tf``, ``clean_strings_tf``, ``split_words_tf``)
agree on every code point. ``electra_tf.text.tokenization`` (why not tensorflow-text's own normaliser is told in
its docstring), ``data_prep`` and the serving graphs build on these.

Example:

>>> normalize_text("Héllo\\x00 Wörld", do_lower_case=True, strip_accents=True)
'hello world'
>>> _re2_class([(65, 67), (95, 95)])
'[\\\\x{41}-\\\\x{43}\\\\x{5f}]'
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Iterable, Sequence

import numpy as np

from electra_tf.text.reference_tokenizer import _CJK_RANGES

_MAX_UNICODE = 0x10FFFF


# --------------------------------------------------------------------------
# Character classes (built once from Python's unicodedata, like BERT)
# --------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _category_masks() -> dict[str, np.ndarray]:
    """Boolean masks over all code points, from Python's unicodedata (~0.3 s once)."""
    categories = np.array(
        [unicodedata.category(chr(cp)) for cp in range(_MAX_UNICODE + 1)], dtype="<U2")
    first = categories.astype("<U1")
    removed = (first == "C") | (np.arange(_MAX_UNICODE + 1) == 0xFFFD)
    removed[[9, 10, 13]] = False
    punctuation = first == "P"
    for lo, hi in ((33, 47), (58, 64), (91, 96), (123, 126)):
        punctuation[lo:hi + 1] = True
    cjk = np.zeros(_MAX_UNICODE + 1, bool)
    for lo, hi in _CJK_RANGES:
        cjk[lo:hi + 1] = True
    return {"removed": removed, "mark": categories == "Mn", "word_break": punctuation | cjk}


def _mask_ranges(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal (lo, hi) runs of True in a code point mask."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[0::2].tolist(), (edges[1::2] - 1).tolist()))


def _re2_class(ranges: Iterable[tuple[int, int]]) -> str:
    """An RE2 character class (tf.strings.regex_*) over code point ranges."""
    def esc(cp):
        return "\\x{%x}" % cp
    return "[" + "".join(esc(lo) if lo == hi else f"{esc(lo)}-{esc(hi)}" for lo, hi in ranges) + "]"


def _python_class(ranges: Iterable[tuple[int, int]]) -> str:
    """A Python ``re`` character class over code point ranges."""
    return "[" + "".join(re.escape(chr(lo)) if lo == hi else
                         f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges) + "]"


@functools.lru_cache(maxsize=None)
def _re2_patterns() -> dict[str, str]:
    masks = _category_masks()
    return {"removed": _re2_class(_mask_ranges(masks["removed"])) + "+",
            "mark": _re2_class(_mask_ranges(masks["mark"])) + "+"}


@functools.lru_cache(maxsize=None)
def _python_patterns() -> dict[str, re.Pattern]:
    masks = _category_masks()
    return {"removed": re.compile(_python_class(_mask_ranges(masks["removed"])) + "+"),
            "removed_or_mark": re.compile(
                _python_class(_mask_ranges(masks["removed"] | masks["mark"])) + "+"),
            "word_break": re.compile(_python_class(_mask_ranges(masks["word_break"])))}


def normalize_text(text: str, do_lower_case: bool, strip_accents: bool) -> str:
    """BERT's character-level normalisation in pure Python (reference path).

    Lower-case (``str.lower``), NFD + drop combining marks if
    ``strip_accents``, and delete NUL, U+FFFD and category C* characters.
    """
    if do_lower_case:
        text = text.lower()
    if strip_accents:
        text = unicodedata.normalize("NFD", text)
        return _python_patterns()["removed_or_mark"].sub("", text)
    return _python_patterns()["removed"].sub("", text)


@functools.lru_cache(maxsize=None)
def _long_word_patterns(max_chars: int) -> tuple[str, re.Pattern]:
    """(RE2 pre-filter, exact Python pattern) for words over ``max_chars`` chars.

    A BERT word is delimited by whitespace, punctuation and CJK ideographs.
    The RE2 pre-filter only treats ASCII whitespace/punctuation and the big
    CJK/punctuation blocks as delimiters, so it flags a superset of the rows
    (a small class keeps RE2's DFA small).  The exact check runs the Python
    pattern on text whose delimiters were mapped to spaces (``_break_table``).
    """
    ranges = [(lo, hi) for lo, hi in _mask_ranges(_category_masks()["word_break"])
              if hi <= 0x7F or (hi <= 0xFFFF and hi - lo >= 15)]
    count = max_chars + 1
    return (f"(?s).*[^\\s{_re2_class(ranges)[1:-1]}]{{{count}}}.*",
            re.compile(f"\\S{{{count},}}"))


@functools.lru_cache(maxsize=None)
def _break_table() -> dict[int, int]:
    """str.translate table mapping every punctuation/CJK char to a space."""
    return dict.fromkeys(np.flatnonzero(_category_masks()["word_break"]).tolist(), 32)


def normalize_tf(texts: Sequence[str], do_lower_case: bool, strip_accents: bool):
    """BERT normalisation of a batch as a ``tf.string`` tensor (fast path).

    ``str.lower`` in Python (exact Python semantics), then RE2 deletions with
    character classes built from Python's unicodedata, and ICU NFD
    (decompositions of assigned characters are stable across Unicode
    versions; unassigned ones were deleted before).  Same result as
    ``normalize_text`` (tests check this).
    """
    import tensorflow as tf
    if do_lower_case:
        texts = [t.lower() for t in texts]
    try:
        strings = tf.constant(list(texts), dtype=tf.string)
    except (UnicodeEncodeError, ValueError):  # lone surrogates (category Cs): BERT deletes them
        strings = tf.constant([t.encode("utf-8", "ignore") for t in texts], dtype=tf.string)
    return clean_strings_tf(strings, strip_accents)


def clean_strings_tf(strings, strip_accents: bool):
    """The TF-op part of ``normalize_tf`` (graph-safe: also runs inside tf.data): deletion of NUL, U+FFFD and
    category C* characters, then NFD + deletion of combining marks if ``strip_accents``."""
    import tensorflow as tf
    import tensorflow_text as tf_text
    patterns = _re2_patterns()
    strings = tf.strings.regex_replace(strings, patterns["removed"], "")
    if strip_accents:
        strings = tf_text.normalize_utf8(strings, "NFD")
        strings = tf.strings.regex_replace(strings, patterns["mark"], "")
    return strings


def split_words_tf(normalized):
    """BERT basic-tokenizer words of normalised ``tf.string`` texts (ragged).

    Whitespace splits; every punctuation or CJK character is a word.
    """
    import tensorflow as tf
    masks = _category_masks()
    unicode_space = np.zeros_like(masks["removed"])
    unicode_space[[cp for cp in range(0x80, 0x10000) if chr(cp).isspace()]] = True
    strings = tf.strings.regex_replace(
        normalized, _re2_class(_mask_ranges(unicode_space)), " ")
    strings = tf.strings.regex_replace(
        strings, "(" + _re2_class(_mask_ranges(masks["word_break"])) + ")", " \\1 ")
    return tf.strings.split(strings)
