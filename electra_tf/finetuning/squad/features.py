"""SQuAD features: `[CLS] question [SEP] doc-window [SEP]` windows `doc_stride` tokens apart.

Every word is tokenised on its own (WordPiece or SentencePiece; all words in one batched call) so token ↔ word maps
are exact; the answer span is refined as the official `_improve_answer_span` (WordPiece) or found by its pieces'
characters (SentencePiece, `answer_pieces`); windows without the answer (and 2.0 unanswerable questions) point at
position 0.
"""

from __future__ import annotations

import collections

import numpy as np

from electra_tf.options import SquadOptions
from electra_tf.text.tokenizers import is_sentencepiece


def check_is_max_context(doc_spans, cur_span_index: int, position: int) -> bool:
    """Whether window `cur_span_index` gives token `position` its maximum context."""
    best_score, best_span_index = None, None
    for span_index, (span_start, span_length) in enumerate(doc_spans):
        end = span_start + span_length - 1
        if position < span_start or position > end:
            continue
        score = min(position - span_start, end - position) + 0.01 * span_length
        if best_score is None or score > best_score:
            best_score, best_span_index = score, span_index
    return cur_span_index == best_span_index


def improve_answer_span(doc_ids, input_start, input_end, answer_ids):
    """The sub-span of [input_start, input_end] whose tokens equal the answer's."""
    answer_ids = list(answer_ids)
    for new_start in range(input_start, input_end + 1):
        for new_end in range(input_end, new_start - 1, -1):
            if list(doc_ids[new_start:new_end + 1]) == answer_ids:
                return new_start, new_end
    return input_start, input_end


def answer_pieces(tokenizer, example, orig_to_tok):
    """SentencePiece: the training answer's first and last document pieces by their characters (the first piece
    ending after the answer's first character, the last one starting before its end), as ALBERT's SQuAD code
    aligns answers by characters: an answer that begins inside a whitespace word (`$5` in `($5)`) gets its own
    pieces, which matching its ids (`improve_answer_span`) would not find."""
    first_word, last_word = example.start_position, example.end_position
    first, last = tokenizer.char_spans([example.doc_tokens[first_word], example.doc_tokens[last_word]])
    begin, end = example.answer_chars
    start = next((i for i, (_, e) in enumerate(first) if e > begin), 0)
    stop = max((i for i, (b, _) in enumerate(last) if b < end), default=len(last) - 1)
    return orig_to_tok[first_word] + start, orig_to_tok[last_word] + stop


def _tokenize_in_chunks(tokenizer, texts, chunk=20000):
    out = []
    for i in range(0, len(texts), chunk):
        out.extend(tokenizer.tokenize(texts[i:i + chunk]))
    return out


def _tokenize_paragraphs(tokenizer, examples):
    """Per paragraph (by identity of its word list): token ids and index maps (token → word, word → its first
    token, token → its place among its word's pieces)."""
    paragraphs, words = {}, []
    for example in examples:
        key = id(example.doc_tokens)
        if key not in paragraphs:
            paragraphs[key] = (len(words), example.doc_tokens)
            words.extend(example.doc_tokens)
    word_ids = _tokenize_in_chunks(tokenizer, words)
    result = {}
    for key, (offset, doc_tokens) in paragraphs.items():
        tok_to_orig, orig_to_tok, all_ids, tok_in_word = [], [], [], []
        for i in range(len(doc_tokens)):
            orig_to_tok.append(len(all_ids))
            pieces = word_ids[offset + i]
            tok_to_orig.extend([i] * len(pieces))
            tok_in_word.extend(range(len(pieces)))
            all_ids.extend(pieces)
        result[key] = (tok_to_orig, orig_to_tok, all_ids, tok_in_word)
    return result


def convert_examples_to_features(examples, tokenizer, max_seq_length=512, doc_stride=SquadOptions.doc_stride,
                                 max_query_length=SquadOptions.max_query_length,
                                 is_training=False):
    """Features (dict of int32 arrays) and one metadata dict per feature.

    Metadata: `example_index`, `tokens` (ids), `token_to_orig` (int array,
    -1 outside the document), `tok_in_word` (each document token's index
    among its word's pieces, -1 outside: SentencePiece decoding maps pieces
    to characters with it), `max_context` (bool array), and `span_start` /
    `doc_offset` (the window's first document token and its position).
    """
    paragraphs = _tokenize_paragraphs(tokenizer, examples)
    queries = _tokenize_in_chunks(tokenizer, [e.question_text for e in examples])
    answers = (_tokenize_in_chunks(tokenizer, [e.orig_answer_text or "" for e in examples])
               if is_training else [None] * len(examples))
    cols = collections.defaultdict(list)
    meta = []
    cls, sep, pad = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
    by_characters = is_sentencepiece(tokenizer.vocab_file)  # training answers by piece characters (`answer_pieces`)
    for example_index, example in enumerate(examples):
        tok_to_orig, orig_to_tok, all_ids, tok_in_word = paragraphs[id(example.doc_tokens)]
        query = queries[example_index][:max_query_length]
        tok_start = tok_end = None
        if is_training and not example.is_impossible:
            tok_start = orig_to_tok[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end = orig_to_tok[example.end_position + 1] - 1
            else:
                tok_end = len(all_ids) - 1
            if by_characters and example.answer_chars is not None:
                tok_start, tok_end = answer_pieces(tokenizer, example, orig_to_tok)
            else:
                tok_start, tok_end = improve_answer_span(all_ids, tok_start, tok_end, answers[example_index])
        max_tokens_for_doc = max_seq_length - len(query) - 3
        if max_tokens_for_doc <= 0:
            raise ValueError(f"--max_seq_length={max_seq_length} leaves no room for the document after "
                             f"a {len(query)}-token question; lower --max_query_length")
        doc_spans, start_offset = [], 0
        while start_offset < len(all_ids):
            length = min(len(all_ids) - start_offset, max_tokens_for_doc)
            doc_spans.append((start_offset, length))
            if start_offset + length == len(all_ids):
                break
            start_offset += min(length, doc_stride)
        for span_index, (span_start, span_length) in enumerate(doc_spans):
            tokens = [cls] + query + [sep] + all_ids[span_start:span_start + span_length] + [sep]
            doc_offset = len(query) + 2
            segment = [0] * doc_offset + [1] * (span_length + 1)
            token_to_orig = np.full(len(tokens), -1, np.int32)
            piece_in_word = np.full(len(tokens), -1, np.int32)
            max_context = np.zeros(len(tokens), bool)
            for i in range(span_length):
                token_to_orig[doc_offset + i] = tok_to_orig[span_start + i]
                piece_in_word[doc_offset + i] = tok_in_word[span_start + i]
                max_context[doc_offset + i] = check_is_max_context(doc_spans, span_index, span_start + i)
            padding = max_seq_length - len(tokens)
            cols["input_ids"].append(tokens + [pad] * padding)
            cols["input_mask"].append([1] * len(tokens) + [0] * padding)
            cols["segment_ids"].append(segment + [0] * padding)
            if is_training:
                start = end = 0
                if not example.is_impossible and span_start <= tok_start and tok_end <= span_start + span_length - 1:
                    start, end = tok_start - span_start + doc_offset, tok_end - span_start + doc_offset
                cols["start_positions"].append(start)
                cols["end_positions"].append(end)
                cols["is_impossible"].append(int(example.is_impossible))
            meta.append({"example_index": example_index, "tokens": tokens, "token_to_orig": token_to_orig,
                         "tok_in_word": piece_in_word, "max_context": max_context, "span_start": span_start,
                         "doc_offset": doc_offset})
    features = {k: np.asarray(v, np.int32).reshape(len(v), -1) if k in ("input_ids", "input_mask", "segment_ids")
                else np.asarray(v, np.int32) for k, v in cols.items()}
    if not meta:
        features = {k: np.zeros((0, max_seq_length), np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    return features, meta
