"""Fast BERT WordPiece tokenization on top of tensorflow-text.

``WordPieceTokenizer`` gives exactly the ids of google-research/bert's
``FullTokenizer`` (basic tokenizer + greedy longest-match-first WordPiece; the
tokenizer ELECTRA uses), with HuggingFace's ``strip_accents`` override, at C++
speed (tests compare it with ``electra_tf.text.reference_tokenizer`` on real
English/Chinese text and on adversarial Unicode).  How:

1. Normalisation (``normalize_tf``, ``electra_tf.text.normalization``) follows BERT's Python semantics:
   ``str.lower()`` in Python if ``do_lower_case``; then, as batched TF ops,
   deletion of NUL/U+FFFD/category C* characters (BERT's ``_clean_text``) and,
   if ``strip_accents``, ICU NFD + deletion of combining marks (Mn).  The RE2
   character classes are generated from Python's ``unicodedata`` so both
   agree on every code point.  tensorflow-text's own
   ``lower_case_nfd_strip_accents`` is *not* used: it applies NFKC case
   folding, which turns ``…`` into ``...`` and ``，`` into ``,`` unlike BERT.
2. ``tf_text.FastWordpieceTokenizer`` in end-to-end mode (linear-time split on
   whitespace, punctuation and CJK ideographs + WordPiece, in C++) does the
   rest.  Vocab tokens BERT could never produce (containing whitespace or
   control characters, e.g. the zh vocab's ``##\u2028``) are hidden from it,
   because they change how it splits words.
3. BERT turns words longer than ``max_chars_per_word`` *characters* into
   ``[UNK]``; tensorflow-text counts *bytes*.  The fast tokenizer is therefore
   built with a 4x byte limit (never triggers for a word of <= 100 chars) and
   the rare rows that contain a longer word (found with an RE2 pre-filter and
   an exact check) are re-tokenised around it with the word as ``[UNK]``.

Vocab files are read by splitting on ``"\\n"`` only (the Chinese BERT vocab
contains a U+2028 token, which ``str.splitlines`` would split).  Special token
ids are looked up by name, never hard-coded.

Example:

>>> import tempfile, os
>>> from electra_tf.text.tokenization import WordPieceTokenizer
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w").write("\\n".join(
...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "wor", "##ld", ","]) + "\\n")
>>> tok = WordPieceTokenizer(path)
>>> tok.tokenize(["Héllo, World!"])
[[5, 8, 6, 7, 1]]
>>> tok.convert_ids_to_tokens([5, 8, 6, 7, 1])
['hello', ',', 'wor', '##ld', '[UNK]']
>>> tok.decode([2, 5, 8, 6, 7, 3, 0, 0])
'[CLS] hello , world [SEP]'
>>> tok.continuation_table().nonzero()[0].tolist()  # '##ld' continues a word (whole-word masking)
[7]
"""

from __future__ import annotations

import re
from typing import Iterable, Optional, Sequence

import numpy as np

from electra_tf.text.manifest import SPECIAL_TOKENS  # noqa: F401  (re-exported: the manifest owns it)
from electra_tf.text.normalization import (_break_table, _category_masks, _long_word_patterns, clean_strings_tf,
                                           normalize_text, normalize_tf)

REQUIRED_SPECIALS = tuple(SPECIAL_TOKENS.values())


# --------------------------------------------------------------------------
# Vocabulary files
# --------------------------------------------------------------------------

def read_vocab(vocab_file: str) -> list[str]:
    """Tokens of a vocab file, one per '\\n'-separated line (trailing '\\r' dropped)."""
    try:
        with open(vocab_file, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ValueError(f"vocab file {vocab_file}: cannot read it ({e.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"vocab file {vocab_file}: not valid UTF-8 (byte {e.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def validate_vocab(vocab_file: str, required: Sequence[str] = REQUIRED_SPECIALS) -> list[str]:
    """Read and check a vocab file; return its tokens.

    Raises ValueError naming the file when it is empty, lacks a required
    special token, or lists a token twice.
    """
    vocab = read_vocab(vocab_file)
    if not vocab:
        raise ValueError(f"vocab file {vocab_file}: is empty")
    missing = [t for t in required if t not in set(vocab)]
    if missing:
        raise ValueError(
            f"vocab file {vocab_file}: missing special token(s) {', '.join(missing)} "
            f"(a BERT/ELECTRA vocab needs {', '.join(required)})")
    seen: dict[str, int] = {}
    for index, token in enumerate(vocab):
        if token in seen:
            raise ValueError(
                f"vocab file {vocab_file}: duplicate token {token!r} on lines "
                f"{seen[token] + 1} and {index + 1}")
        seen[token] = index
    return vocab


# Whitespace (after normalisation) is exactly what str.split() splits on.
_ANY_WHITESPACE = re.compile(r"\s")


# --------------------------------------------------------------------------
# The tokenizer
# --------------------------------------------------------------------------

def is_wordpiece_continuation(token: str) -> bool:
    """`##x`: a WordPiece piece that continues the word before it (`##` alone is a token of its own)."""
    return token.startswith("##") and len(token) > 2


class VocabularyLookups:
    """What every tokenizer derives from its `vocab` (list, id order) and `special_ids` (name -> id).

    A subclass also defines `continuation_table()`: `[V]` bool, True for a token that continues the word of
    the token before it (whole-word masking groups a word start with the continuations after it).
    """

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    pad_id = property(lambda self: self.special_ids["pad"])
    unk_id = property(lambda self: self.special_ids["unk"])
    cls_id = property(lambda self: self.special_ids["cls"])
    sep_id = property(lambda self: self.special_ids["sep"])
    mask_id = property(lambda self: self.special_ids["mask"])

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.vocab[int(i)] for i in ids]

    def is_word_start(self, token_id: int) -> bool:
        """True unless the token continues the word before it (`continuation_table`)."""
        if getattr(self, "_continuations", None) is None:
            self._continuations = self.continuation_table()
        return not bool(self._continuations[int(token_id)])


class WordPieceTokenizer(VocabularyLookups):
    """BERT-compatible WordPiece tokenizer (tensorflow-text C++ core).

    Args:
      vocab_file: path of a BERT vocab (one token per '\\n'-separated line).
      do_lower_case: lower-case the text (uncased models).
      strip_accents: strip accents (NFD + drop combining marks).  ``None``
        follows ``do_lower_case``, as in BERT and HuggingFace.
      max_chars_per_word: longer words become ``[UNK]`` (BERT uses 100).
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True,
                 strip_accents: Optional[bool] = None, max_chars_per_word: int = 100):
        self.vocab_file = str(vocab_file)
        self.vocab: list[str] = validate_vocab(self.vocab_file)
        self.do_lower_case = bool(do_lower_case)
        self.strip_accents = self.do_lower_case if strip_accents is None else bool(strip_accents)
        self.max_chars_per_word = int(max_chars_per_word)
        self.token_to_id = {token: index for index, token in enumerate(self.vocab)}
        self.special_ids = {name: self.token_to_id[token] for name, token in SPECIAL_TOKENS.items()}
        self._long_run = None  # compiled lazily (see _long_word_patterns)
        self._fast = None  # built lazily: tensorflow import is slow

    # ---- vocabulary: VocabularyLookups ------------------------------------------

    def continuation_table(self) -> np.ndarray:
        """`[V]` bool: True for the WordPiece continuations `##x`. CJK characters are words of their own:
        the tokenizer splits them apart, so they never come as `##` pieces."""
        return np.array([is_wordpiece_continuation(token) for token in self.vocab], dtype=bool)

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        unk = self.unk_id
        return [self.token_to_id.get(t, unk) for t in tokens]

    def decode(self, ids: Iterable[int]) -> str:
        """Tokens joined by spaces, '##' pieces glued on, [PAD] dropped."""
        words: list[str] = []
        for token in self.convert_ids_to_tokens(ids):
            if token == SPECIAL_TOKENS["pad"]:
                continue
            if token.startswith("##") and words:
                words[-1] += token[2:]
            else:
                words.append(token)
        return " ".join(words)

    # ---- tokenisation -------------------------------------------------------
    def normalize(self, texts: Sequence[str]) -> list[str]:
        """BERT normalisation of each text (pure-Python reference path)."""
        return [normalize_text(t, self.do_lower_case, self.strip_accents) for t in texts]

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (no [CLS]/[SEP] added)."""
        flat, lengths = self.tokenize_flat(texts)
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        flat_list = flat.tolist()
        return [flat_list[bounds[i]:bounds[i + 1]] for i in range(len(lengths))]

    def tokenize_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All ids concatenated (int32) and the number of ids of each text (int64)."""
        import tensorflow as tf
        if isinstance(texts, (str, bytes)):
            raise TypeError("tokenize* take a list of strings, not a single string")
        texts = list(texts)
        if not texts:
            return np.zeros([0], np.int32), np.zeros([0], np.int64)
        normalized = self._normalize_tf(texts)
        ragged = self.in_graph_op().tokenize(normalized)
        flat, lengths = ragged.flat_values.numpy(), ragged.row_lengths().numpy()
        # RE2's \S is ASCII-only, so this flags a superset of the rows with long words.
        re2_long_word, python_long_word = _long_word_patterns(self.max_chars_per_word)
        flagged = np.flatnonzero(tf.strings.regex_full_match(normalized, re2_long_word).numpy())
        if len(flagged):
            candidates = tf.gather(normalized, flagged).numpy()
            slow = {int(row): text for row, text in
                    zip(flagged, (c.decode("utf-8") for c in candidates))
                    if python_long_word.search(text.translate(_break_table()))}
            if slow:
                flat, lengths = self._patch_long_words(slow, flat, lengths)
        return flat, lengths

    def tokenize_to_ragged(self, texts):
        """Ids as a ``tf.RaggedTensor`` (int64); works in eager and in tf.data."""
        import tensorflow as tf

        def run(strings):
            decoded = [s.decode("utf-8", "replace") for s in strings.numpy().reshape(-1)]
            flat, lengths = self.tokenize_flat(decoded)
            return flat.astype(np.int64), lengths.astype(np.int64)

        if not isinstance(texts, tf.Tensor):
            flat, lengths = self.tokenize_flat(list(texts))
            return tf.RaggedTensor.from_row_lengths(flat.astype(np.int64), lengths.astype(np.int64))
        if tf.executing_eagerly():
            flat, lengths = run(texts)
            return tf.RaggedTensor.from_row_lengths(flat, lengths)
        flat, lengths = tf.py_function(run, [texts], [tf.int64, tf.int64])
        flat.set_shape([None])
        lengths.set_shape([None])
        return tf.RaggedTensor.from_row_lengths(flat, lengths)

    def tokenize_in_graph(self, strings, op=None):
        """Ids (int32 `tf.RaggedTensor`) of a string tensor by TensorFlow ops alone: no Python runs, so it
        goes into tf.data service workers and checkpointed iterators. Two differences from `tokenize`:
        lower-casing is ICU's `tf.strings.lower` instead of Python's `str.lower` (they differ on 40 code
        points, Unicode 14 additions such as U+2C2F), and a word over `max_chars_per_word` characters but
        under 4x that many bytes is WordPiece-split instead of becoming [UNK] (the exact check is Python).
        ``op``: one from ``in_graph_op()`` to run (a SavedModel runs the one it holds); default: the tokenizer's own."""
        import tensorflow as tf
        if self.do_lower_case:
            strings = tf.strings.lower(strings, encoding="utf-8")
        return (op or self.in_graph_op()).tokenize(clean_strings_tf(strings, self.strip_accents))

    # ---- internals ----------------------------------------------------------
    def _normalize_tf(self, texts: list[str]):
        return normalize_tf(texts, self.do_lower_case, self.strip_accents)

    def in_graph_op(self):
        """The tensorflow-text tokenizer `tokenize_in_graph` runs: a module that holds the vocabulary, which a
        SavedModel tracks to carry it (`electra_tf.serving.text.GraphTokenizer`)."""
        if self._fast is None:
            import tensorflow as tf
            import tensorflow_text as tf_text
            # FastWordpieceTokenizer's end-to-end mode (pre-tokenisation +
            # WordPiece); normalisation was done by _normalize_tf.
            self._fast = tf_text.FastWordpieceTokenizer(
                vocab=self._vocab_for_tf_text(),
                suffix_indicator="##",
                max_bytes_per_word=4 * self.max_chars_per_word,
                token_out_type=tf.int32,
                unknown_token=SPECIAL_TOKENS["unk"],
                no_pretokenization=False)
        return self._fast

    def _vocab_for_tf_text(self) -> list[str]:
        """The vocab with tokens BERT can never produce made unmatchable.

        tensorflow-text stops splitting on a whitespace character when some
        vocab token contains it (e.g. the zh vocab's '##\\u2028'); such tokens
        are replaced by unique placeholders containing punctuation, which its
        pre-tokenizer never merges.  Ids are unchanged.
        """
        out = []
        for index, token in enumerate(self.vocab):
            body = token[2:] if token.startswith("##") else token
            removed = _category_masks()["removed"]
            if body and (_ANY_WHITESPACE.search(body) or any(removed[ord(c)] for c in body)):
                token = f"[unreachable-{index}]"
            out.append(token)
        return out

    def _fast_tokenize(self, normalized: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Tokenise already-normalised texts."""
        import tensorflow as tf
        if not normalized:
            return np.zeros([0], np.int32), np.zeros([0], np.int64)
        ragged = self.in_graph_op().tokenize(tf.constant(normalized, dtype=tf.string))
        return ragged.flat_values.numpy(), ragged.row_lengths().numpy()

    def _patch_long_words(self, slow: dict, flat, lengths):
        """Re-tokenise the rows in ``slow`` (row -> normalised text) exactly."""
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        pieces = [flat[bounds[i]:bounds[i + 1]] for i in range(len(lengths))]
        for row, text in slow.items():
            pieces[row] = self._tokenize_with_long_words(text)
        new_lengths = np.array([len(p) for p in pieces], dtype=np.int64)
        return np.concatenate(pieces).astype(np.int32), new_lengths

    def _tokenize_with_long_words(self, text: str) -> np.ndarray:
        """Tokenise normalised ``text`` with its over-long words as [UNK]."""
        delimited = text.translate(_break_table())  # same length, words split by spaces
        segments: list = []   # text pieces; None marks a long word
        cursor = 0
        for word in _long_word_patterns(self.max_chars_per_word)[1].finditer(delimited):
            segments.append(text[cursor:word.start()])
            segments.append(None)
            cursor = word.end()
        segments.append(text[cursor:])
        flat, lengths = self._fast_tokenize([s for s in segments if s is not None])
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        out, k = [], 0
        for segment in segments:
            if segment is None:
                out.append(np.array([self.unk_id], np.int32))
            else:
                out.append(flat[bounds[k]:bounds[k + 1]])
                k += 1
        return np.concatenate(out).astype(np.int32)
