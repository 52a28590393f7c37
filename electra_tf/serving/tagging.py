"""A fine-tuned tagger (`--task=ner|chunk|tagging`) as one text-in / tags-and-entities-out TF SavedModel.

`export_tagging(model, tokenizer, labels, scheme, max_seq_length, path, segment_id=...)` writes a SavedModel whose
`serving_default` signature takes `text` (a string batch). Each text is split into words as Python's
`str.split()` splits it (what a CoNLL line's word column holds), and every word gets a tag, as
`run_finetuning` predicts the words of a CoNLL file (`electra_tf.finetuning.tagging`): pieces per
word (`[UNK]` for a word without pieces), the label read at its first piece, sentences longer than
`max_seq_length - 2` pieces split into windows of whole words, every real token fed the segment id the
model was trained with (`--tagging_segment_id`), BIOES labels decoded back into the training files'
scheme (IOB1 or IOB2).

Outputs, padded per batch row (`""` for strings, −1 for integers past the row's count):

* `num_words` `[batch]`, `words`, `tags` `[batch, max words]`;
* `word_start`, `word_end` `[batch, max words]`: each word is `text[word_start:word_end]` (characters);
* chunked schemes only: `num_entities` `[batch]` and, `[batch, max entities]`, `entity_type`,
  `entity_first_word` and `entity_last_word` (word indices, both inclusive), `entity_start` and
  `entity_end` (characters: `text[entity_start:entity_end]`) and `entity_text` (that slice, with the
  text's own whitespace between its words). Entities are the chunks `conlleval` reads from `tags`
  (`electra_tf.finetuning.tagging_metrics.chunks`), in order.

Load it with TensorFlow and tensorflow-text only, or print its entities with `python -m electra_tf.tag`.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.finetuning.conll import SCHEMES
from electra_tf.finetuning.tagging import SEGMENT_ID_CHOICES
from electra_tf.serving.portable import serving_model
from electra_tf.serving.text import (add_serving_endpoint, char_offsets, flat_of, graph_tokenizer,
                                     positions_in_rows, python_whitespace, row_ids, serving_archive, splits_of,
                                     write_archive)

INPUT_NAMES = ("text",)
# Label prefixes as codes; a chunked model's labels are O and BIOES (`tagging.to_bioes`).
OUTSIDE, BEGIN, INSIDE, END, SINGLE = range(5)
PREFIXES = {"B": BEGIN, "I": INSIDE, "E": END, "S": SINGLE}


def label_codes(labels) -> tuple[list[int], list[int], list[str]]:
    """Per label its prefix code and type index, and the sorted types (BIOES labels, `O` for outside)."""
    types = sorted({label.partition("-")[2] for label in labels if label != "O"})
    prefixes, type_ids = [], []
    for label in labels:
        prefix, _, chunk_type = label.partition("-")
        if label != "O" and (prefix not in PREFIXES or not chunk_type):
            raise ValueError(f"label {label!r} is neither O nor BIOES (B-, I-, E- or S- and a type)")
        prefixes.append(OUTSIDE if label == "O" else PREFIXES[prefix])
        type_ids.append(types.index(chunk_type) if label != "O" else -1)
    return prefixes, type_ids, types


def _shift(values, is_edge, fill, step):
    """Each word's neighbour (`step` −1: the previous word, +1: the next) in its own sentence, else `fill`."""
    fill = tf.constant(fill, values.dtype)
    shifted = tf.concat([[fill], values[:-1]], 0) if step < 0 else tf.concat([values[1:], [fill]], 0)
    return tf.where(is_edge, fill, shifted)


def decode_bioes(prefix, type_id, is_first, is_last, scheme: str):
    """`tagging.from_bioes` on flat word sequences: the IOB prefix code of each word's tag (its type is kept).

    `bioes_spans` reads the labels left to right, but whether a chunk is open after a word depends on that
    word's label alone (`B-`/`I-` leave one open, `E-`/`S-`/`O` do not), so every decision is a comparison
    of neighbours and the whole batch decodes at once.
    """
    opens = (prefix == BEGIN) | (prefix == INSIDE)
    previous_type = _shift(type_id, is_first, -1, -1)
    continues = ((prefix == INSIDE) | (prefix == END)) & _shift(opens, is_first, False, -1) & (previous_type == type_id)
    continued = _shift(continues, is_last, False, +1)
    inside = prefix != OUTSIDE
    start = inside & ~continues
    end = inside & ((prefix == END) | (prefix == SINGLE) | ~continued)
    if scheme == "iob2":
        begins = start
    else:  # IOB1: B- only where a chunk follows one of its type directly
        begins = start & _shift(end, is_first, False, -1) & (previous_type == type_id)
    return tf.where(~inside, OUTSIDE, tf.where(begins, BEGIN, INSIDE))


def iob_chunks(prefix, type_id, is_first, is_last):
    """`tagging_metrics.chunks` (conlleval's start/end rules) on flat IOB prefix codes: whether a chunk starts
    and whether one ends at each word."""
    inside = prefix != OUTSIDE
    previous_prefix = _shift(prefix, is_first, OUTSIDE, -1)
    next_prefix = _shift(prefix, is_last, OUTSIDE, +1)
    previous_type = _shift(type_id, is_first, -1, -1)
    next_type = _shift(type_id, is_last, -1, +1)
    starts = inside & ((prefix == BEGIN) | (previous_prefix == OUTSIDE) | (previous_type != type_id))
    ends = inside & ((next_prefix == BEGIN) | (next_prefix == OUTSIDE) | (next_type != type_id))
    return starts, ends


class TaggingServer(tf.Module):
    """Whitespace words, the in-graph tokeniser, windows of whole words, the fine-tuned model, tags and entities."""

    def __init__(self, model, tokenizer, labels, scheme: str, max_seq_length: int, segment_id: int):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"tagging scheme {scheme!r} is not one of {', '.join(SCHEMES)}")
        if segment_id not in SEGMENT_ID_CHOICES:
            raise ValueError(f"tagging segment id {segment_id!r} is not 0 or 1")
        self.segment_id = int(segment_id)
        self.model = model
        self.tokenizer = graph_tokenizer(tokenizer)
        self.scheme, self.chunked = scheme, scheme != "none"
        self.max_seq_length, self.budget = max_seq_length, max_seq_length - 2  # [CLS] words [SEP]
        self.labels = tf.constant(list(labels), tf.string)
        if self.chunked:
            prefixes, type_ids, types = label_codes(labels)
            self.label_prefix = tf.constant(prefixes, tf.int32)
            self.label_type = tf.constant(type_ids, tf.int32)
            self.types = tf.constant(types or [""], tf.string)
        self.cls_id, self.sep_id, self.pad_id, self.unk_id = (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                                                              tokenizer.unk_id)

    # ---- features -------------------------------------------------------------------------------
    def _pieces(self, words):
        """Per word (flat), its piece ids: `[UNK]` for a word without pieces, cut to a window's budget."""
        pieces = tf.cast(self.tokenizer(words), tf.int32)
        count = tf.minimum(tf.maximum(pieces.row_lengths(), 1), self.budget)
        splits = splits_of(count)
        word = row_ids(splits)
        source = tf.gather(pieces.row_splits, word) + positions_in_rows(splits, word)
        has_pieces = tf.gather(pieces.row_lengths(), word) > 0
        source = tf.where(has_pieces, source, tf.size(pieces.flat_values, tf.int64))  # there: [UNK]
        values = tf.gather(tf.concat([pieces.flat_values, [self.unk_id]], 0), source)
        return tf.RaggedTensor.from_row_splits(values, splits, validate=False), count

    def _windows(self, counts, sentence, sentence_lengths):
        """`tagging.word_windows` over every sentence of the batch: each word's window (numbered across the
        batch, in order) and the position of its first piece there.

        A sentence whose pieces fit the budget is one window (most sentences); the greedy packing, a sequential
        rule, runs as a `tf.scan` over the words of the longer sentences only, so a batch of short sentences
        computes no loop iteration (a scan over every word ran one per word of the batch)."""
        num_sentences = tf.size(sentence_lengths, out_type=tf.int64)
        total = tf.math.unsorted_segment_sum(counts, sentence, num_sentences)
        long_sentence = total > self.budget
        long_words = tf.where(tf.gather(long_sentence, sentence))[:, 0]
        long_counts, long_of = tf.gather(counts, long_words), tf.gather(sentence, long_words)
        is_first = tf.concat([[True], long_of[1:] != long_of[:-1]], 0)[:tf.size(long_of)]

        def step(state, word):
            window, used = state
            count, first = word
            new = first | (used + count > self.budget)
            return window + tf.cast(new, tf.int64), tf.where(new, tf.zeros_like(used), used) + count

        long_window, _ = tf.scan(step, (long_counts, is_first),
                                 initializer=(tf.constant(-1, tf.int64), tf.constant(0, tf.int64)))
        first_window = tf.math.unsorted_segment_min(long_window, long_of, num_sentences)
        windows_of = tf.where(long_sentence,
                              tf.math.unsorted_segment_max(long_window, long_of, num_sentences) - first_window + 1,
                              tf.minimum(sentence_lengths, 1))  # a sentence without words has no window
        in_sentence = tf.scatter_nd(long_words[:, None], long_window - tf.gather(first_window, long_of),
                                    tf.shape(counts, out_type=tf.int64))
        window = tf.gather(tf.cumsum(windows_of, exclusive=True), sentence) + in_sentence
        before = tf.cumsum(counts, exclusive=True)
        position = 1 + before - tf.gather(tf.math.segment_min(before, window), window)
        return window, position

    def window_features(self, words, sentence, sentence_lengths):
        """The model's inputs for the flat `words` (`sentence`: each word's, sorted; `sentence_lengths`: each
        sentence's words), as
        `tagging.align_features` makes them, and each word's window and first-piece position there."""
        pieces, counts = self._pieces(words)
        window, position = self._windows(counts, sentence, sentence_lengths)
        return self._features(pieces, counts, window, position), window, position

    def _features(self, pieces, counts, window, position):
        """`[CLS] pieces [SEP]` rows of every window, the trained segment id on every real token; one
        `[CLS] [SEP]` row where the batch has no word, so the model always sees a batch. Rows are padded to the
        longest window of the batch, not to max_seq_length (as `serving.text.pad_to_longest`)."""
        num_windows = tf.maximum(tf.reduce_max(tf.concat([[-1], window], 0)) + 1, 1)
        length = tf.math.unsorted_segment_sum(counts, window, num_windows)
        width = tf.reduce_max(length) + 2
        rows = tf.range(num_windows)
        piece_word = row_ids(pieces.row_splits)  # a word's pieces are its `counts`
        piece_rows = tf.gather(window, piece_word)
        piece_cols = tf.gather(position, piece_word) + positions_in_rows(pieces.row_splits, piece_word)
        indices = tf.concat([tf.stack([rows, tf.zeros_like(rows)], 1), tf.stack([rows, length + 1], 1),
                             tf.stack([piece_rows, piece_cols], 1)], 0)
        values = tf.concat([tf.fill([num_windows], self.cls_id), tf.fill([num_windows], self.sep_id),
                            pieces.flat_values], 0)
        ids = tf.tensor_scatter_nd_update(tf.fill(tf.stack([num_windows, width]), self.pad_id), indices, values)
        mask = tf.cast(tf.range(width, dtype=tf.int64)[None, :] <= (length + 1)[:, None], tf.int32)
        return {"input_ids": ids, "input_mask": mask, "segment_ids": mask * self.segment_id}

    # ---- outputs --------------------------------------------------------------------------------
    def _tags(self, label_ids, is_first, is_last):
        """Tag strings of the words, and for chunked schemes their IOB prefix codes and type indices."""
        if not self.chunked:
            return tf.gather(self.labels, label_ids), None, None
        type_id = tf.gather(self.label_type, label_ids)
        prefix = decode_bioes(tf.gather(self.label_prefix, label_ids), type_id, is_first, is_last, self.scheme)
        names = tf.strings.join([tf.gather(tf.constant(["O", "B", "I"]), prefix), "-",
                                 tf.gather(self.types, tf.maximum(type_id, 0))])
        return tf.where(prefix == OUTSIDE, "O", names), prefix, type_id

    def _entities(self, texts, prefix, type_id, is_first, is_last, sentence, word_in_sentence, spans):
        """The chunks of the served tags, as padded `[batch, max entities]` outputs."""
        starts, ends = iob_chunks(prefix, type_id, is_first, is_last)
        first, last = tf.where(starts)[:, 0], tf.where(ends)[:, 0]  # in order, one end per start
        row = tf.gather(sentence, first)
        byte_start, byte_end = tf.gather(spans["byte_start"], first), tf.gather(spans["byte_end"], last)
        text = tf.strings.substr(tf.gather(texts, row), byte_start, byte_end - byte_start)
        batch = tf.shape(texts, out_type=tf.int64)[0]
        num_entities = tf.math.unsorted_segment_sum(tf.ones_like(row), row, batch)  # `row` is sorted
        pad = lambda values, fill: tf.RaggedTensor.from_row_lengths(  # noqa: E731
            values, num_entities, validate=False).to_tensor(fill)
        return {"num_entities": num_entities,
                "entity_type": pad(tf.gather(self.types, tf.gather(type_id, first)), ""),
                "entity_first_word": pad(tf.gather(word_in_sentence, first), -1),
                "entity_last_word": pad(tf.gather(word_in_sentence, last), -1),
                "entity_start": pad(tf.gather(spans["char_start"], first), -1),
                "entity_end": pad(tf.gather(spans["char_end"], last), -1), "entity_text": pad(text, "")}

    def tag(self, texts):
        """The signature's function: a string batch → words, tags and (chunked schemes) entities."""
        words, byte_start, byte_end = tf_text.regex_split_with_offsets(texts, python_whitespace(), "")
        lengths = words.row_lengths()
        flat = lambda dense: flat_of(dense, lengths)  # noqa: E731
        spans = {"byte_start": byte_start.flat_values, "byte_end": byte_end.flat_values,
                 "char_start": flat(char_offsets(texts, byte_start)), "char_end": flat(char_offsets(texts, byte_end))}
        sentence = row_ids(words.row_splits)
        word_in_sentence = positions_in_rows(words.row_splits, sentence)
        is_first, is_last = word_in_sentence == 0, word_in_sentence == tf.gather(lengths, sentence) - 1
        features, window, position = self.window_features(words.flat_values, sentence, lengths)
        logits = self.model(features, training=False)["logits"]
        label_ids = tf.argmax(tf.gather_nd(logits, tf.stack([window, position], 1)), axis=-1, output_type=tf.int32)
        tags, prefix, type_id = self._tags(label_ids, is_first, is_last)
        by_row = lambda values, fill: words.with_flat_values(values).to_tensor(fill)  # noqa: E731
        result = {"num_words": lengths, "words": words.to_tensor(""), "tags": by_row(tags, ""),
                  "word_start": by_row(spans["char_start"], -1), "word_end": by_row(spans["char_end"], -1)}
        if self.chunked:
            result.update(self._entities(texts, prefix, type_id, is_first, is_last, sentence, word_in_sentence,
                                         spans))
        return result


def export_tagging(model, tokenizer, labels, scheme: str, max_seq_length: int, path: str, *, segment_id: int) -> str:
    """Writes the SavedModel of `model`'s portable copy (`serving.portable.serving_model`) to `path` (via a temporary
    directory renamed into place); `segment_id` is the one the model was trained with (no default, so an export
    cannot silently feed another)."""
    server = TaggingServer(serving_model(model, max_seq_length), tokenizer, labels, scheme, max_seq_length, segment_id)
    archive = serving_archive(server.tokenizer)
    add_serving_endpoint(archive, lambda text: server.tag(text), [tf.TensorSpec([None], tf.string, name="text")])
    return write_archive(archive, path)
