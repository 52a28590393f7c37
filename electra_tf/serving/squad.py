"""A fine-tuned SQuAD model as one question + context in / answer out TF SavedModel.

`export_squad(model, tokenizer, settings, path)` writes a SavedModel whose `serving_default` signature
takes two string batches, `question` and `context`, and returns per question

* `answer`: the answer text (SQuAD 2.0: "" where the null odds exceed the run's threshold);
* `score`: the best span's start + end score (log-probs for the joint head, logits otherwise);
* `start`, `end`: the best span's characters in the context (`context[start:end]`; −1 without a span);
* 2.0 only: `best_span` (the answer before the null decision) and `null_odds`.

Everything runs in the graph and reproduces `run_finetuning`'s Python path step by step
(`electra_tf.finetuning.squad`): whitespace words, pieces per word (`serving.text`'s in-graph tokeniser), the
question cut to `max_query_length`, `doc_stride` windows with their max-context flags (each row padded to the
batch's longest window, not to `max_seq_length`), the head's candidate spans (joint beam or independent top-n) with
the official filters, the best by score (first on ties, as the stable sort), the answer text and the 2.0 null odds.
The text: WordPiece, `get_final_text` (BERT's basic tokenisation of the span's words, the first occurrence of the
WordPiece text, the non-space character alignment); SentencePiece, the pieces' own character offsets in their words
(tensorflow-text's `tokenize_with_offsets`). Only the best answer is decoded: the n-best list and its probabilities
stay in `nbest_predictions.json`. Gaps are `serving.text`'s (WordPiece: ICU lower-casing, words over 100
characters). Where the Python path finds no valid span it predicts the official nonce "empty"; so does this.

Load it with TensorFlow and tensorflow-text only, or ask it with `python -m electra_tf.ask`.
"""

from __future__ import annotations

import dataclasses
import unicodedata

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.serving.portable import serving_model
from electra_tf.serving.text import (add_serving_endpoint, char_offsets, flat_of, graph_tokenizer, join_rows, masked,
                                     positions_in_rows, row_ids, rows_within, serving_archive, splits_of,
                                     write_archive)
from electra_tf.text import normalization
from electra_tf.text.tokenizers import is_sentencepiece

# SQuAD's `is_whitespace` (examples.whitespace_split), as RE2.
SQUAD_WHITESPACE = r"[ \t\r\n\x{202f}]+"
# The Python path's answer where no span passes the filters, and its null score before any window.
NO_SPAN_TEXT = "empty"
NO_WINDOW_NULL_SCORE = 1e6
INPUT_NAMES = ("question", "context")


@dataclasses.dataclass(frozen=True)
class SquadServingSettings:
    """What decoding needs besides the model: the run's SquadTask options and sequence length."""

    max_seq_length: int
    doc_stride: int
    max_query_length: int
    max_answer_length: int
    n_best_size: int
    v2: bool
    null_score_threshold: float
    do_lower_case: bool = True


def _bert_whitespace_class() -> str:
    """BERT's `is_whitespace` (tab, newline, return, category Zs) as an RE2 class."""
    zs = [cp for cp in range(0x110000) if unicodedata.category(chr(cp)) == "Zs"]
    return normalization._re2_class([(cp, cp) for cp in [9, 10, 13] + zs])


class _BasicJoiner(tf.Module):
    """`" ".join(BasicTokenizer(do_lower_case).tokenize(text))` as TF string ops (get_final_text's tok_text)."""

    def __init__(self, do_lower_case: bool):
        super().__init__()
        self.do_lower_case = do_lower_case
        masks = normalization._category_masks()
        self.removed = normalization._re2_patterns()["removed"]
        self.mark = normalization._re2_patterns()["mark"]
        self.whitespace = _bert_whitespace_class()
        self.word_break = "(" + normalization._re2_class(normalization._mask_ranges(masks["word_break"])) + ")"

    def __call__(self, texts):
        texts = tf.strings.regex_replace(texts, self.removed, "")
        texts = tf.strings.regex_replace(texts, self.whitespace, " ")
        if self.do_lower_case:  # BasicTokenizer strips accents exactly when it lower-cases
            texts = tf.strings.lower(texts, encoding="utf-8")
            texts = tf_text.normalize_utf8(texts, "NFD")
            texts = tf.strings.regex_replace(texts, self.mark, "")
        texts = tf.strings.regex_replace(texts, self.word_break, " \\1 ")
        # str.split() also splits on the line/paragraph separators BERT keeps inside words.
        texts = tf.strings.regex_replace(texts, r"[ \x{2028}\x{2029}]+", " ")
        return tf.strings.strip(texts)


def _spaces(texts):
    return tf.strings.length(texts) - tf.strings.length(tf.strings.regex_replace(texts, " ", ""))


def _chars(texts):
    return tf.strings.length(texts, unit="UTF8_CHAR")


def _find_first(haystack, needle):
    """Per row: whether `needle` occurs in `haystack` (str.find) and the text before its first occurrence.

    The needle against the haystack's substring at every byte offset, all rows at once (a `map_fn` of
    `tf.strings.split` would put a while loop in the export, which a loader lowers and instantiates on the first
    request). Bytes, as `tf.strings.split`: a valid UTF-8 needle matches only at a character's first byte, so the
    first match is the first in characters too. An empty needle matches at 0 (its caller discards it)."""
    rows = tf.size(haystack)
    haystack_bytes = tf.strings.length(haystack)
    offsets = tf.range(tf.reduce_max(tf.concat([[0], haystack_bytes], 0)) + 1)[None, :]
    shape = tf.stack([rows, tf.shape(offsets)[1]])
    position = tf.minimum(tf.broadcast_to(offsets, shape), haystack_bytes[:, None])  # substr needs pos <= length
    candidates = tf.strings.substr(tf.broadcast_to(haystack[:, None], shape), position,
                                   tf.broadcast_to(tf.strings.length(needle)[:, None], shape))
    matches = (candidates == needle[:, None]) & (offsets <= haystack_bytes[:, None])
    first = tf.argmax(tf.cast(matches, tf.int32), axis=1, output_type=tf.int32)
    return tf.reduce_any(matches, axis=1), tf.strings.substr(haystack, tf.zeros_like(first), first)


def repeat_columns(x, times):
    """`tf.repeat(x, times, axis=1)` of a `[rows, columns]` `x` (`times`: a scalar): each column `times` times in
    a row. TensorFlow's `tf.repeat` traces about 12 nodes for it, a loader instantiates each."""
    rows, columns = tf.shape(x)[0], tf.shape(x)[1]
    return tf.reshape(tf.broadcast_to(x[:, :, None], tf.stack([rows, columns, times])), tf.stack([rows, -1]))


def get_final_text_tf(pred_text, orig_text, joiner: _BasicJoiner):
    """`decoding.get_final_text` on string batches: (text, first char, last char) in `orig_text`."""
    tok_text = joiner(orig_text)
    found, prefix = _find_first(tok_text, pred_text)
    ns_start = _chars(prefix) - _spaces(prefix)
    ns_end = ns_start + _chars(pred_text) - _spaces(pred_text) - 1
    same_length = _chars(orig_text) - _spaces(orig_text) == _chars(tok_text) - _spaces(tok_text)
    ok = found & (pred_text != "") & same_length
    codepoints = tf.strings.unicode_decode(orig_text, "UTF-8", errors="replace")
    splits = codepoints.row_splits
    positions = codepoints.with_flat_values(positions_in_rows(splits, row_ids(splits)))
    non_space = masked(positions, tf.not_equal(codepoints, 32)).to_tensor(-1)
    non_space = tf.pad(non_space, [[0, 0], [0, 1]], constant_values=-1)
    last = tf.shape(non_space, out_type=tf.int64)[1] - 1

    def at(index):
        return tf.gather(non_space, tf.clip_by_value(tf.cast(index, tf.int64), 0, last)[:, None], batch_dims=1)[:, 0]

    first = tf.where(ok, at(ns_start), 0)
    final = tf.where(ok, at(ns_end), tf.cast(_chars(orig_text), tf.int64) - 1)
    text = tf.where(ok, tf.strings.substr(orig_text, tf.cast(first, tf.int32), tf.cast(final - first + 1, tf.int32),
                                          unit="UTF8_CHAR"), orig_text)
    return text, first, final


class SquadServer(tf.Module):
    """In-graph SQuAD features, the fine-tuned model and the decoding of its best answer."""

    def __init__(self, model, tokenizer, settings: SquadServingSettings):
        super().__init__()
        if settings.max_seq_length - settings.max_query_length - 3 <= 0:
            raise ValueError(f"--max_seq_length={settings.max_seq_length} leaves no room for the document after "
                             f"a {settings.max_query_length}-token question; lower --max_query_length")
        self.model = model
        self.settings = settings
        # The fewest positions a window row gets: the decoding's top-k (`n_best_size` starts and ends, or the joint
        # head's beam) needs that many, and every index it returns then names a real column.
        self.min_width = min(settings.max_seq_length,
                             max(settings.n_best_size, getattr(model.head, "beam_size", 0), 1))
        self.tokenizer = graph_tokenizer(tokenizer)
        # SentencePiece: answers from the pieces' character offsets (`decoding._final_text` decides the same way).
        self.char_spans = is_sentencepiece(tokenizer.vocab_file)
        self.joiner = _BasicJoiner(settings.do_lower_case)
        self.vocab = tf.constant(tokenizer.vocab, tf.string)  # convert_ids_to_tokens's strings
        self.cls_id, self.sep_id, self.pad_id = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id

    # ---- features -------------------------------------------------------------------------------
    def _documents(self, contexts):
        """Whitespace words, their first characters, the document's piece ids and word index, and (SentencePiece)
        each piece's `(begin, end)` characters in its word."""
        words, begins, _ = tf_text.regex_split_with_offsets(contexts, SQUAD_WHITESPACE, "")
        flat_words = words.flat_values
        piece_chars = None
        if self.char_spans:  # every word on its own, as the Python features
            pieces, byte_begin, byte_end = self.tokenizer.tokenize_with_offsets(flat_words)
            piece_chars = [flat_of(char_offsets(flat_words, offsets), pieces.row_lengths())
                           for offsets in (byte_begin, byte_end)]
        else:
            pieces = self.tokenizer(flat_words)
        word_in_document = positions_in_rows(words.row_splits, row_ids(words.row_splits))
        word_index = tf.gather(word_in_document, row_ids(pieces.row_splits))  # each piece's word
        doc_splits = tf.gather(pieces.row_splits, words.row_splits)  # a document's pieces are its words'
        by_document = lambda flat: tf.RaggedTensor.from_row_splits(flat, doc_splits, validate=False)  # noqa: E731
        doc_ids = by_document(tf.cast(pieces.flat_values, tf.int32))
        tok_to_orig = by_document(tf.cast(word_index, tf.int32))
        if piece_chars is not None:
            piece_chars = [by_document(chars) for chars in piece_chars]
        return words, char_offsets(contexts, begins), doc_ids, tok_to_orig, piece_chars

    def _windows(self, questions, doc_ids, tok_to_orig):
        """The features of every window (rows of all questions, in order) and what decoding needs of them."""
        s = self.settings
        seq = s.max_seq_length
        query = self.tokenizer(questions)[:, :s.max_query_length]
        q_len = tf.cast(query.row_lengths(), tf.int32)
        n = tf.cast(doc_ids.row_lengths(), tf.int32)
        room = seq - q_len - 3
        stride = tf.minimum(room, s.doc_stride)
        count = tf.where(n <= room, 1, (n - room + stride - 1) // stride + 1)
        window_splits = splits_of(count)
        question_of = row_ids(window_splits)
        k = tf.cast(positions_in_rows(window_splits, question_of), tf.int32)  # the window's number in its question
        question_of = tf.cast(question_of, tf.int32)
        start = k * tf.gather(stride, question_of)
        length = tf.maximum(tf.minimum(tf.gather(n, question_of) - start, tf.gather(room, question_of)), 0)
        q_rows = tf.gather(tf.cast(query.to_tensor(0, shape=[None, max(s.max_query_length, 1)]), tf.int32),
                           question_of)
        doc_rows = tf.gather(tf.pad(doc_ids.to_tensor(0), [[0, 0], [0, 1]]), question_of)
        orig_rows = tf.gather(tf.pad(tok_to_orig.to_tensor(-1), [[0, 0], [0, 1]], constant_values=-1), question_of)
        ql = tf.gather(q_len, question_of)[:, None]
        off = ql + 2  # the window's first document token
        end = off + length[:, None]  # its closing [SEP]
        width = self._width(end[:, 0] + 1)
        j = tf.broadcast_to(tf.range(width)[None, :], [tf.size(question_of), width])  # positions, for batched gathers
        doc_pos = start[:, None] + j - off
        in_doc = (j >= off) & (j < end)
        doc_index = tf.clip_by_value(doc_pos, 0, tf.shape(doc_rows)[1] - 1)
        q_index = tf.clip_by_value(j - 1, 0, tf.shape(q_rows)[1] - 1)
        ids = tf.where(j == 0, self.cls_id, tf.where(
            j <= ql, tf.gather(q_rows, q_index, batch_dims=1), tf.where(
                j == ql + 1, self.sep_id, tf.where(
                    in_doc, tf.gather(doc_rows, doc_index, batch_dims=1), tf.where(j == end, self.sep_id, self.pad_id)))))
        features = {"input_ids": ids, "input_mask": tf.cast(j <= end, tf.int32),
                    "segment_ids": tf.cast((j >= off) & (j <= end), tf.int32)}
        token_to_orig = tf.where(in_doc, tf.gather(orig_rows, doc_index, batch_dims=1), -1)
        max_context = in_doc & self._is_max_context(doc_pos, k, question_of, count, stride, room, n)
        return features, {"question_of": question_of, "start": start, "offset": off[:, 0], "num_tokens": end[:, 0] + 1,
                          "token_to_orig": token_to_orig, "max_context": max_context}

    def _width(self, num_tokens):
        """The rows' length: the batch's longest window, not max_seq_length (as `serving.text.pad_to_longest`:
        outputs at the real positions do not depend on the padding, which the mask hides from every key and the
        head's answer penalty (−1000) keeps out of every softmax and top-k ahead of a real position), and at least
        `min_width`."""
        return tf.maximum(tf.reduce_max(tf.concat([[0], num_tokens], 0)), self.min_width)

    @staticmethod
    def _is_max_context(doc_pos, k, question_of, count, stride, room, n):
        """`features.check_is_max_context` for every window position: its window scores best (first on ties)."""
        others = tf.range(tf.reduce_max(count))[None, None, :]  # [1, 1, K]: the question's windows
        o_start = others * tf.gather(stride, question_of)[:, None, None]
        o_length = tf.minimum(tf.gather(n, question_of)[:, None, None] - o_start, tf.gather(room, question_of)[:, None, None])
        o_end = o_start + o_length - 1
        p = doc_pos[:, :, None]
        contains = (others < tf.gather(count, question_of)[:, None, None]) & (p >= o_start) & (p <= o_end)
        # Float64 as Python's `min(...) + 0.01 * span_length`, so ties fall as they do there.
        score = tf.cast(tf.minimum(p - o_start, o_end - p), tf.float64) + 0.01 * tf.cast(o_length, tf.float64)
        score = tf.where(contains, score, -np.inf)
        best = tf.reduce_max(score, axis=-1, keepdims=True)
        first_best = tf.reduce_min(tf.where(contains & (score == best), others, tf.int32.max), axis=-1)
        return first_best == k[:, None]

    # ---- decoding -------------------------------------------------------------------------------
    def _candidates(self, outputs):
        """(start, end, start score, end score) `[windows, C]` in the Python path's order."""
        if "start_top_index" in outputs:  # the joint head's beam
            beam = tf.shape(outputs["start_top_index"])[1]
            starts = repeat_columns(outputs["start_top_index"], beam)
            start_scores = repeat_columns(outputs["start_top_log_probs"], beam)
            flat = lambda x: tf.reshape(x, [tf.shape(x)[0], -1])  # noqa: E731
            return starts, flat(outputs["end_top_index"]), start_scores, flat(outputs["end_top_log_probs"])
        top = min(self.settings.n_best_size, self.min_width)  # rows have at least min_width positions
        start_scores, starts = tf.math.top_k(outputs["start_logits"], top)  # ties: lower position first
        end_scores, ends = tf.math.top_k(outputs["end_logits"], top)
        return (repeat_columns(starts, top), tf.tile(ends, [1, top]),
                repeat_columns(start_scores, top), tf.tile(end_scores, [1, top]))

    def _valid(self, starts, ends, windows):
        """`decoding.is_valid_span` for every candidate."""
        num_tokens = windows["num_tokens"][:, None]
        orig = windows["token_to_orig"]
        width = tf.shape(orig)[1]
        first, last = tf.clip_by_value(starts, 0, width - 1), tf.clip_by_value(ends, 0, width - 1)
        return ((starts < num_tokens) & (ends < num_tokens) & (starts != 0)
                & (tf.gather(orig, first, batch_dims=1) >= 0) & (tf.gather(orig, last, batch_dims=1) >= 0)
                & tf.gather(windows["max_context"], first, batch_dims=1)
                & (starts <= ends) & (ends - starts + 1 <= self.settings.max_answer_length))

    def _best_span(self, outputs, windows, num_questions):
        """Per question: the window, start, end and scores of the best valid candidate (first on ties)."""
        starts, ends, start_scores, end_scores = self._candidates(outputs)
        valid = self._valid(starts, ends, windows)
        start_scores, end_scores = tf.cast(start_scores, tf.float64), tf.cast(end_scores, tf.float64)
        score = tf.reshape(start_scores + end_scores, [-1])
        valid = tf.reshape(valid, [-1])
        per_window = tf.shape(starts)[1]
        question = tf.reshape(repeat_columns(windows["question_of"][:, None], per_window), [-1])
        valid_score = tf.where(valid, score, -np.inf)
        best = tf.math.unsorted_segment_max(valid_score, question, num_questions)
        order = tf.range(tf.size(score))
        chosen = tf.math.unsorted_segment_min(tf.where(valid & (valid_score == tf.gather(best, question)), order,
                                                       tf.int32.max), question, num_questions)
        found = chosen < tf.int32.max
        chosen = tf.where(found, chosen, 0)
        pick = lambda x: tf.gather(tf.reshape(x, [-1]), chosen)  # noqa: E731
        return {"found": found, "window": chosen // per_window, "start": pick(starts), "end": pick(ends),
                "start_score": tf.where(found, pick(start_scores), 0.0), "end_score": tf.where(found, pick(end_scores), 0.0)}

    def _span_texts(self, best, windows, words, doc_ids, piece_chars):
        """The span's answer text and its first and last characters in the span's words joined by spaces
        (`decoding._final_text`), its first word, and which words it covers."""
        w = best["window"]
        orig = tf.gather(windows["token_to_orig"], w)
        first_word = tf.gather(orig, best["start"][:, None], batch_dims=1)[:, 0]
        last_word = tf.gather(orig, best["end"][:, None], batch_dims=1)[:, 0]
        piece_start = tf.cast(tf.gather(windows["start"], w) + best["start"] - tf.gather(windows["offset"], w), tf.int64)
        piece_end = piece_start + tf.cast(best["end"] - best["start"], tf.int64)
        first_word, last_word = tf.cast(first_word, tf.int64), tf.cast(last_word, tf.int64)
        in_words = rows_within(words, first_word, last_word)
        orig_text = join_rows(masked(words, in_words), " ")
        if piece_chars is not None:
            # A question without a span (its result is masked) may name no word (-1): read a padding column.
            padded_words = tf.pad(words.to_tensor(""), [[0, 0], [0, 1]])
            last_index = tf.clip_by_value(last_word, 0, tf.cast(tf.shape(padded_words)[1] - 1, tf.int64))
            last_word_text = tf.gather(padded_words, last_index[:, None], batch_dims=1)[:, 0]
            text, first, last = self._piece_text(orig_text, last_word_text, piece_chars, piece_start, piece_end)
        else:
            in_span = rows_within(doc_ids, piece_start, piece_end)
            tokens = tf.gather(self.vocab, masked(doc_ids, in_span))
            pred = join_rows(tokens, " ")
            pred = tf.strings.regex_replace(tf.strings.regex_replace(pred, " ##", ""), "##", "")
            pred = tf.strings.strip(tf.strings.regex_replace(pred, " +", " "))
            text, first, last = get_final_text_tf(pred, orig_text, self.joiner)
        return text, first, last, first_word, in_words

    @staticmethod
    def _piece_text(orig_text, last_word_text, piece_chars, piece_start, piece_end):
        """SentencePiece: from the first piece's first character in its word to the last piece's last in its
        word (`decoding._sentencepiece_final_text`), as (text, first, last) in `orig_text`."""
        begins, ends = (tf.pad(chars.to_tensor(0), [[0, 0], [0, 1]]) for chars in piece_chars)
        clip = lambda index: tf.clip_by_value(index, 0, tf.cast(tf.shape(begins)[1] - 1, tf.int64))  # noqa: E731
        first = tf.gather(begins, clip(piece_start)[:, None], batch_dims=1)[:, 0]
        last_word_begin = tf.cast(_chars(orig_text) - _chars(last_word_text), tf.int64)
        last = last_word_begin + tf.gather(ends, clip(piece_end)[:, None], batch_dims=1)[:, 0] - 1
        length = tf.maximum(last - first + 1, 0)
        text = tf.strings.substr(orig_text, tf.cast(first, tf.int32), tf.cast(length, tf.int32), unit="UTF8_CHAR")
        return text, first, last

    @staticmethod
    def _context_offset(chars, first_word, in_words, word_lengths, word_chars):
        """A character of the joined span words → its character in the context."""
        step = tf.where(in_words, word_lengths + 1, 0)
        starts = tf.cumsum(step, axis=1, exclusive=True)  # each word's first char in the joined text
        before = tf.reduce_sum(tf.cast(in_words & (starts <= chars[:, None]), tf.int64), axis=1)
        word = first_word + tf.maximum(before, 1) - 1
        # A question without a span (its result is masked) may point at no word of its context (-1, or another
        # question's window): it reads a padding column instead, so the batch still runs.
        word_chars, starts = tf.pad(word_chars, [[0, 0], [0, 1]]), tf.pad(starts, [[0, 0], [0, 1]])
        word = tf.clip_by_value(word, 0, tf.cast(tf.shape(word_chars)[1] - 1, word.dtype))
        return (tf.gather(word_chars, word[:, None], batch_dims=1)[:, 0]
                + chars - tf.gather(starts, word[:, None], batch_dims=1)[:, 0])

    def _null_odds(self, outputs, windows, best, num_questions, empty):
        """2.0: the smallest window null score (minus the best span's score without the classifier)."""
        if "answerable_logit" in outputs:
            null = tf.cast(outputs["answerable_logit"], tf.float64)
        else:
            null = tf.cast(outputs["start_logits"][:, 0], tf.float64)
            if "end_logits" in outputs:
                null += tf.cast(outputs["end_logits"][:, 0], tf.float64)
        no_window = tf.constant(NO_WINDOW_NULL_SCORE, tf.float64)
        null = tf.minimum(tf.math.unsorted_segment_min(null, windows["question_of"], num_questions), no_window)
        null = tf.where(empty, no_window, null)
        if "answerable_logit" not in outputs:
            null = null - best["start_score"] - best["end_score"]
        return null

    def answer(self, questions, contexts):
        """The signature's function: question and context string batches → answers."""
        num_questions = tf.size(questions)
        words, word_chars, doc_ids, tok_to_orig, piece_chars = self._documents(contexts)
        features, windows = self._windows(questions, doc_ids, tok_to_orig)
        outputs = self.model(features, training=False)
        best = self._best_span(outputs, windows, num_questions)
        empty = tf.equal(doc_ids.row_lengths(), 0)  # no document token: the Python path has no window
        found = best["found"] & ~empty
        text, first, last, first_word, in_words = self._span_texts(best, windows, words, doc_ids, piece_chars)
        word_lengths = tf.cast(_chars(words).to_tensor(0), tf.int64)
        in_words = in_words.to_tensor(False)
        start = self._context_offset(first, first_word, in_words, word_lengths, word_chars)
        end = self._context_offset(last, first_word, in_words, word_lengths, word_chars) + 1
        score = best["start_score"] + best["end_score"]
        result = {"answer": tf.where(found, text, NO_SPAN_TEXT), "score": tf.where(found, score, 0.0),
                  "start": tf.where(found, start, -1), "end": tf.where(found, end, -1)}
        if self.settings.v2:
            null_odds = self._null_odds(outputs, windows, best, num_questions, empty)
            result["best_span"] = result["answer"]
            result["null_odds"] = null_odds
            result["answer"] = tf.where(null_odds > self.settings.null_score_threshold, "", result["answer"])
        return result


def export_squad(model, tokenizer, settings: SquadServingSettings, path: str) -> str:
    """Writes the SavedModel of `model`'s portable copy (`serving.portable.serving_model`) to `path` (via a temporary
    directory renamed into place)."""
    # A question and its context window run well past FEW_TOKENS: one attention's kernels, no `tf.cond` to load.
    server = SquadServer(serving_model(model, settings.max_seq_length, few_tokens=0), tokenizer, settings)
    question = tf.TensorSpec([None], tf.string, name="question")
    context = tf.TensorSpec([None], tf.string, name="context")
    archive = serving_archive(server.tokenizer)
    add_serving_endpoint(archive, lambda question, context: server.answer(question, context), [question, context])
    return write_archive(archive, path)
