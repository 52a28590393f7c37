"""SQuAD decoding: the head's outputs → n-best answer texts, predictions and 2.0 null odds, as the official
`write_predictions` (the package docstring tells the rules).

A span of pieces becomes text in one of two ways, by the tokenizer's kind (`_final_text`, the one place):

* WordPiece: BERT's `get_final_text`: the pieces joined without their `##` marks, found in the basic
  tokenisation of the span's words and projected back onto them by their non-space characters;
* SentencePiece: the pieces' own character offsets in their word (`SentencePieceTokenizer.char_spans`, as the ALBERT and
  XLNet SQuAD code map pieces to characters): from the first piece's first character to the last piece's last,
  in the span's words joined by single spaces. Normalisation (NFKC, case folding) and byte-fallback pieces need
  no inverse: the offsets point into the original text.

Example:

>>> get_final_text("steve smith", "Steve Smith's", do_lower_case=True)
'Steve Smith'
"""

from __future__ import annotations

import collections

import numpy as np

from electra_tf.options import SquadOptions
from electra_tf.text.tokenizers import is_sentencepiece


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool = True) -> str:
    """Project the normalised predicted text back onto the original words."""
    from electra_tf.text.reference_tokenizer import BasicTokenizer

    def strip_spaces(text):
        ns_chars, ns_to_s = [], {}
        for i, c in enumerate(text):
            if c == " ":
                continue
            ns_to_s[len(ns_chars)] = i
            ns_chars.append(c)
        return "".join(ns_chars), ns_to_s

    tok_text = " ".join(BasicTokenizer(do_lower_case=do_lower_case).tokenize(orig_text))
    start_position = tok_text.find(pred_text)
    if start_position == -1:
        return orig_text
    end_position = start_position + len(pred_text) - 1
    orig_ns_text, orig_ns_to_s = strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s = strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        return orig_text
    tok_s_to_ns = {tok_index: i for i, tok_index in tok_ns_to_s.items()}
    orig_start = orig_ns_to_s.get(tok_s_to_ns.get(start_position, -1))
    orig_end = orig_ns_to_s.get(tok_s_to_ns.get(end_position, -1))
    if orig_start is None or orig_end is None:
        return orig_text
    return orig_text[orig_start:orig_end + 1]


def _softmax(scores):
    scores = np.asarray(scores, np.float64)
    exp = np.exp(scores - scores.max())
    return exp / exp.sum()


def _best_indexes(logits, n_best_size):
    """The `n_best_size` highest positions, ties in position order (the official `_get_best_indexes`)."""
    return np.argsort(-np.asarray(logits), kind="stable")[:n_best_size]


def is_joint(outputs) -> bool:
    """Whether `outputs` come from the joint (beam-search) head."""
    return "start_top_index" in outputs


def span_candidates(outputs, feature_index: int, n_best_size: int):
    """(start, end, start score, end score) of one window's candidate spans, unfiltered.

    Joint head: every (beam start i, beam end j) pair, scored by their log-probs
    `start_top_log_probs[i]` and `end_top_log_probs[i, j]`. Independent head: the
    `n_best_size` best starts × the `n_best_size` best ends, scored by their logits.
    """
    if is_joint(outputs):
        starts = np.asarray(outputs["start_top_index"][feature_index])
        start_scores = np.asarray(outputs["start_top_log_probs"][feature_index])
        ends = np.asarray(outputs["end_top_index"][feature_index])
        end_scores = np.asarray(outputs["end_top_log_probs"][feature_index])
        for i, s in enumerate(starts):
            for j, e in enumerate(ends[i]):
                yield int(s), int(e), float(start_scores[i]), float(end_scores[i, j])
        return
    start_logits = np.asarray(outputs["start_logits"][feature_index])
    end_logits = np.asarray(outputs["end_logits"][feature_index])
    for s in _best_indexes(start_logits, n_best_size):
        for e in _best_indexes(end_logits, n_best_size):
            yield int(s), int(e), float(start_logits[s]), float(end_logits[e])


def is_valid_span(m: dict, start: int, end: int, max_answer_length: int) -> bool:
    """The official filters: inside the window's document tokens, not [CLS], start in its
    max-context window, not reversed, at most `max_answer_length` tokens."""
    num_tokens = len(m["tokens"])
    if start >= num_tokens or end >= num_tokens or start == 0:
        return False
    if m["token_to_orig"][start] < 0 or m["token_to_orig"][end] < 0 or not m["max_context"][start]:
        return False
    return start <= end and end - start + 1 <= max_answer_length


def feature_null_score(outputs, feature_index: int) -> float:
    """A window's no-answer score: the answerability logit, else (official fallback) the
    start + end logits of position 0 (the joint head has no end logits at inference: 0)."""
    if "answerable_logit" in outputs:
        return float(outputs["answerable_logit"][feature_index])
    end = float(outputs["end_logits"][feature_index][0]) if "end_logits" in outputs else 0.0
    return float(outputs["start_logits"][feature_index][0]) + end


def _sentencepiece_final_text(example, m, start, end, tokenizer) -> str:
    """The span's text from its pieces' character offsets in their words."""
    first_word, last_word = int(m["token_to_orig"][start]), int(m["token_to_orig"][end])
    words = example.doc_tokens[first_word:last_word + 1]
    first_spans, last_spans = tokenizer.char_spans([words[0], words[-1]])
    orig_text = " ".join(words)
    begin = first_spans[m["tok_in_word"][start]][0]
    last_word_begin = len(orig_text) - len(words[-1])
    return orig_text[begin:last_word_begin + last_spans[m["tok_in_word"][end]][1]]


def _final_text(example, m, start, end, tokenizer, do_lower_case):
    """The original-text answer of tokens [start, end] of window `m`."""
    if is_sentencepiece(tokenizer.vocab_file):
        return _sentencepiece_final_text(example, m, start, end, tokenizer)
    tok_text = " ".join(tokenizer.convert_ids_to_tokens(m["tokens"][start:end + 1]))
    tok_text = " ".join(tok_text.replace(" ##", "").replace("##", "").strip().split())
    orig_text = " ".join(example.doc_tokens[m["token_to_orig"][start]:m["token_to_orig"][end] + 1])
    return get_final_text(tok_text, orig_text, do_lower_case)


def _nbest(example, prelim, meta, tokenizer, n_best_size, do_lower_case):
    """The `n_best_size` best distinct answer texts: (text, start score, end score)."""
    prelim = sorted(prelim, key=lambda p: p[3] + p[4], reverse=True)
    seen, nbest = set(), []
    for feature_index, s, e, start_score, end_score in prelim:
        if len(nbest) >= n_best_size:
            break
        text = _final_text(example, meta[feature_index], s, e, tokenizer, do_lower_case)
        if text not in seen:
            seen.add(text)
            nbest.append((text, start_score, end_score))
    return nbest or [("empty", 0.0, 0.0)]  # the official nonce answer when no span is valid


def decode_predictions(examples, meta, outputs, tokenizer, n_best_size=SquadOptions.n_best_size,
                       max_answer_length=SquadOptions.max_answer_length, v2=False,
                       do_lower_case=True):
    """(predictions, nbest, null_odds) dicts keyed by question id, as the official `write_predictions`.

    `outputs` are the head's per-feature outputs: the joint head's beam
    (`start_top_*` `[N, K]`, `end_top_*` `[N, K, K]`) or `start_logits` /
    `end_logits` `[N, seq]`, and `answerable_logit` `[N]` when the head has
    the classifier. Predictions are the best non-empty answer texts (apply
    the null-odds threshold separately); 2.0 null odds are the smallest
    window no-answer score, minus the best answer's score when the head has
    no answerability classifier.
    """
    by_example = collections.defaultdict(list)
    for feature_index, m in enumerate(meta):
        by_example[m["example_index"]].append(feature_index)
    predictions, nbest_json, null_odds = collections.OrderedDict(), collections.OrderedDict(), {}
    for example_index, example in enumerate(examples):
        prelim, score_null = [], 1e6
        for feature_index in by_example.get(example_index, []):
            if v2:
                score_null = min(score_null, feature_null_score(outputs, feature_index))
            for s, e, start_score, end_score in span_candidates(outputs, feature_index, n_best_size):
                if is_valid_span(meta[feature_index], s, e, max_answer_length):
                    prelim.append((feature_index, s, e, start_score, end_score))
        nbest = _nbest(example, prelim, meta, tokenizer, n_best_size, do_lower_case)
        probs = _softmax([s + e for _, s, e in nbest])
        nbest_json[example.qas_id] = [
            {"text": text, "probability": float(p), "start_logit": s, "end_logit": e}
            for (text, s, e), p in zip(nbest, probs)]
        best = next((entry for entry in nbest if entry[0]), nbest[0]) if v2 else nbest[0]
        predictions[example.qas_id] = best[0]
        if v2:
            has_classifier = "answerable_logit" in outputs
            null_odds[example.qas_id] = float(score_null if has_classifier else score_null - best[1] - best[2])
    return predictions, nbest_json, null_odds
