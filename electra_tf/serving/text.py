"""What every serving export shares: the in-graph tokeniser, whitespace words with their offsets, and
writing the SavedModel.

`graph_tokenizer(tokenizer)` is the one place that picks the in-graph tokeniser for a run's tokenizer
(`tokenizers.is_sentencepiece` of its file):

* a SentencePiece model: `SentencePieceGraphTokenizer`, tensorflow-text's `SentencepieceTokenizer` built
  from the model proto's bytes, which the SavedModel holds (it needs no file once written); the
  normalisation is the model's own, so its ids are the Python tokenizer's;
* a WordPiece vocab: `WordPieceGraphTokenizer`.

`WordPieceGraphTokenizer` matches `electra_tf.text.tokenization.WordPieceTokenizer`: the same normalisation
(lower-casing, deletion of control characters, accent stripping by NFD + removal of combining marks,
with the same RE2 character classes), then tensorflow-text's `FastWordpieceTokenizer` over the same
vocabulary. Two deliberate gaps, both rare: lower-casing is ICU's (`tf.strings.lower`) rather than
Python's `str.lower`, and a word longer than 100 characters is split by byte count rather than
becoming `[UNK]`.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.text import tokenization
from electra_tf.text.tokenizers import is_sentencepiece


def graph_tokenizer(tokenizer) -> tf.Module:
    """The in-graph tokeniser of `tokenizer` (from `tokenizers.load_tokenizer`): ids of a string batch, ragged."""
    if is_sentencepiece(tokenizer.vocab_file):
        return SentencePieceGraphTokenizer(tokenizer)
    return WordPieceGraphTokenizer(tokenizer)


class SentencePieceGraphTokenizer(tf.Module):
    """`SentencePieceTokenizer` as a TF op holding the model proto (for a SavedModel)."""

    def __init__(self, tokenizer):
        super().__init__()
        self.sentencepiece = tf_text.SentencepieceTokenizer(model=tokenizer.model_proto, out_type=tf.int32,
                                                            add_bos=False, add_eos=False)

    def __call__(self, texts):
        return self.sentencepiece.tokenize(texts)

    def tokenize_with_offsets(self, texts):
        """Ids and each piece's `(begin, end)` bytes in its text, ragged `[batch, pieces]`."""
        return self.sentencepiece.tokenize_with_offsets(texts)


class WordPieceGraphTokenizer(tf.Module):
    """`WordPieceTokenizer`'s normalisation and WordPiece as TF ops (for a SavedModel)."""

    def __init__(self, tokenizer: tokenization.WordPieceTokenizer):
        super().__init__()
        self.do_lower_case, self.strip_accents = tokenizer.do_lower_case, tokenizer.strip_accents
        self.patterns = tokenization._re2_patterns()
        self.wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=tokenizer._vocab_for_tf_text(), suffix_indicator="##",
            max_bytes_per_word=4 * tokenizer.max_chars_per_word, token_out_type=tf.int32,
            unknown_token=tokenization.SPECIAL_TOKENS["unk"], no_pretokenization=False)

    def __call__(self, texts):
        if self.do_lower_case:
            texts = tf.strings.lower(texts, encoding="utf-8")
        texts = tf.strings.regex_replace(texts, self.patterns["removed"], "")
        if self.strip_accents:
            texts = tf_text.normalize_utf8(texts, "NFD")
            texts = tf.strings.regex_replace(texts, self.patterns["mark"], "")
        return self.wordpiece.tokenize(texts)


@functools.lru_cache(maxsize=None)
def python_whitespace() -> str:
    """What Python's `str.split()` splits on (`str.isspace`), as an RE2 class run."""
    spaces = np.array([chr(cp).isspace() for cp in range(0x110000)])
    return tokenization._re2_class(tokenization._mask_ranges(spaces)) + "+"


def char_offsets(texts, byte_offsets):
    """Byte offsets into `texts` (ragged `[batch, n]`, each at a character boundary or the end) → character
    offsets, what Python's `str` indexes."""
    _, char_bytes = tf.strings.unicode_decode_with_offsets(texts, "UTF-8", errors="replace")
    char_bytes = char_bytes.to_tensor(np.iinfo(np.int64).max)
    return tf.searchsorted(char_bytes, byte_offsets.to_tensor(0), side="left", out_type=tf.int64)


# Serving computes no gradient: the functions of the model's custom gradients (which TensorFlow saves by
# default) stay out of the SavedModel.
SAVE_OPTIONS = tf.saved_model.SaveOptions(experimental_custom_gradients=False)


def write_archive(archive, path: str) -> str:
    """Writes `archive` to `path` through a temporary sibling directory, so `path` is never half-written."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".saved_model_", dir=parent)
    try:
        archive.write_out(tmp, options=SAVE_OPTIONS, verbose=False)
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path
