"""SQuAD 1.1 / 2.0: examples, sliding-window features, n-best decoding, scoring.

Follows the official ELECTRA `finetune/qa/qa_tasks.py` (features) and
`qa_metrics.py` (`write_predictions`):

* paragraphs are split on whitespace into "original" words, answers mapped
  from character offsets to words (train examples whose answer text cannot be
  recovered are skipped and counted), every word is WordPiece-tokenised on its
  own so token ↔ word maps are exact (all words go to the tokenizer in one
  batched call), the answer span is refined with `_improve_answer_span`;
* features are `[CLS] question [SEP] doc-window [SEP]` with the question cut
  to `max_query_length` tokens and windows `doc_stride` tokens apart; windows
  without the answer (and 2.0 unanswerable questions) point at position 0;
* decoding collects candidate spans from every window of a question. With
  the joint head (`SpanHead(joint_prediction=True)`, the official default)
  they are the beam's `beam_size` starts × `beam_size` ends per start,
  scored by start log-prob + end log-prob; with independent start/end logits
  the `n_best_size` best starts × the `n_best_size` best ends, scored by
  start + end logit. Spans outside the document, starting at [CLS] or outside
  their "max context" window, reversed or longer than `max_answer_length` are
  dropped; the rest are sorted by score, mapped back to the original text
  with `get_final_text` and de-duplicated into the `n_best_size`-best list
  (`nbest_predictions.json`, whose `start_logit`/`end_logit` hold the
  log-probs for the joint head, as in the official files);
* 1.1 predicts the best text; 2.0 the best non-empty text, and a question's
  null odds are the smallest `answerable_logit` over its windows (the
  answerability classifier; without it, the official fallback: the smallest
  position-0 start + end logit minus the best span's score), written to
  `null_odds.json`. Scoring applies the official threshold: "no answer"
  where the null odds exceed −2.75 (`qa_na_threshold`); the v2.0 script's
  threshold search (`best_exact`, `best_f1`) is reported beside.

Example:

>>> doc_tokens, offsets = whitespace_split("The  cat sat.")
>>> doc_tokens, offsets
(['The', 'cat', 'sat.'], [0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
>>> get_final_text("steve smith", "Steve Smith's", do_lower_case=True)
'Steve Smith'
>>> task = SquadTask(v2=True)
>>> task.name, task.main_metric_key(), task.default_epochs, task.default_max_seq_length
('squad_v2', 'exact', 2, 512)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Optional, Sequence

import numpy as np
from absl import logging

from electra_tf.finetuning import metrics as metrics_lib
from electra_tf.finetuning.heads import SpanHead
from electra_tf.finetuning.task import EvalSet, Task
from electra_tf.options import SquadOptions

# The official `qa_na_threshold`: 2.0 predicts "no answer" where the null odds exceed it.
OFFICIAL_NULL_THRESHOLD = -2.75
# The span head ranks start/end positions (top-k, beam search): batches are never cut below this.
SPAN_MIN_LENGTH = 64


@dataclasses.dataclass
class SquadExample:
    qas_id: str
    question_text: str
    doc_tokens: list  # whitespace words of the paragraph (shared by its questions)
    orig_answer_text: Optional[str] = None
    start_position: Optional[int] = None  # word index
    end_position: Optional[int] = None
    is_impossible: bool = False


def is_whitespace(c: str) -> bool:
    return c in " \t\r\n" or ord(c) == 0x202F


def whitespace_split(text: str) -> tuple[list[str], list[int]]:
    """Words of `text` and, for every character, the index of its word."""
    doc_tokens, char_to_word_offset = [], []
    prev_is_whitespace = True
    for c in text:
        if is_whitespace(c):
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                doc_tokens.append(c)
            else:
                doc_tokens[-1] += c
            prev_is_whitespace = False
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


def load_squad(path: str, articles: Optional[str] = None) -> list[dict]:
    """The `data` list of a SQuAD json, optionally sliced by article ("start:end")."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    if articles:
        start, _, end = articles.partition(":")
        data = data[int(start) if start else None:int(end) if end else None]
    return data


def read_examples(data: Sequence[dict], is_training: bool, v2: bool) -> tuple[list[SquadExample], int]:
    """Examples of a SQuAD `data` list and the number of training answers that failed."""
    examples, failures = [], 0
    for article in data:
        for paragraph in article["paragraphs"]:
            doc_tokens, char_to_word = whitespace_split(paragraph["context"])
            for qa in paragraph["qas"]:
                example = SquadExample(qa["id"], qa["question"], doc_tokens)
                if is_training:
                    example.is_impossible = bool(qa.get("is_impossible", False)) if v2 else False
                    if example.is_impossible:
                        example.start_position = example.end_position = -1
                        example.orig_answer_text = ""
                    else:
                        answer = qa["answers"][0]
                        offset, text = answer["answer_start"], answer["text"]
                        if offset + len(text) - 1 >= len(char_to_word):
                            failures += 1
                            continue
                        start, end = char_to_word[offset], char_to_word[offset + len(text) - 1]
                        actual = " ".join(doc_tokens[start:end + 1]).lower()
                        if actual.find(" ".join(text.split()).lower()) == -1:
                            failures += 1
                            continue
                        example.orig_answer_text = text
                        example.start_position, example.end_position = start, end
                examples.append(example)
    if failures:
        logging.warning("SQuAD: skipped %d training question(s) whose answer is not in the context", failures)
    return examples, failures


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


def _tokenize_in_chunks(tokenizer, texts, chunk=20000):
    out = []
    for i in range(0, len(texts), chunk):
        out.extend(tokenizer.tokenize(texts[i:i + chunk]))
    return out


def _tokenize_paragraphs(tokenizer, examples):
    """Per paragraph (by identity of its word list): token ids and index maps."""
    paragraphs, words = {}, []
    for example in examples:
        key = id(example.doc_tokens)
        if key not in paragraphs:
            paragraphs[key] = (len(words), example.doc_tokens)
            words.extend(example.doc_tokens)
    word_ids = _tokenize_in_chunks(tokenizer, words)
    result = {}
    for key, (offset, doc_tokens) in paragraphs.items():
        tok_to_orig, orig_to_tok, all_ids = [], [], []
        for i in range(len(doc_tokens)):
            orig_to_tok.append(len(all_ids))
            pieces = word_ids[offset + i]
            tok_to_orig.extend([i] * len(pieces))
            all_ids.extend(pieces)
        result[key] = (tok_to_orig, orig_to_tok, all_ids)
    return result


def convert_examples_to_features(examples, tokenizer, max_seq_length=512, doc_stride=SquadOptions.doc_stride,
                                 max_query_length=SquadOptions.max_query_length,
                                 is_training=False):
    """Features (dict of int32 arrays) and one metadata dict per feature.

    Metadata: `example_index`, `tokens` (ids), `token_to_orig` (int array,
    -1 outside the document), `max_context` (bool array), and `span_start` /
    `doc_offset` (the window's first document token and its position).
    """
    paragraphs = _tokenize_paragraphs(tokenizer, examples)
    queries = _tokenize_in_chunks(tokenizer, [e.question_text for e in examples])
    answers = (_tokenize_in_chunks(tokenizer, [e.orig_answer_text or "" for e in examples])
               if is_training else [None] * len(examples))
    cols = collections.defaultdict(list)
    meta = []
    cls, sep, pad = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
    for example_index, example in enumerate(examples):
        tok_to_orig, orig_to_tok, all_ids = paragraphs[id(example.doc_tokens)]
        query = queries[example_index][:max_query_length]
        tok_start = tok_end = None
        if is_training and not example.is_impossible:
            tok_start = orig_to_tok[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end = orig_to_tok[example.end_position + 1] - 1
            else:
                tok_end = len(all_ids) - 1
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
            max_context = np.zeros(len(tokens), bool)
            for i in range(span_length):
                token_to_orig[doc_offset + i] = tok_to_orig[span_start + i]
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
                         "max_context": max_context, "span_start": span_start, "doc_offset": doc_offset})
    features = {k: np.asarray(v, np.int32).reshape(len(v), -1) if k in ("input_ids", "input_mask", "segment_ids")
                else np.asarray(v, np.int32) for k, v in cols.items()}
    if not meta:
        features = {k: np.zeros((0, max_seq_length), np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    return features, meta


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


def _final_text(example, m, start, end, tokenizer, do_lower_case):
    """The original-text answer of tokens [start, end] of window `m`."""
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


def apply_null_threshold(predictions: dict, null_odds: dict, threshold: float) -> dict:
    """2.0: predict "" where the null odds exceed `threshold`."""
    return {qid: ("" if null_odds[qid] > threshold else text) for qid, text in predictions.items()}


def write_json(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
    return path


class SquadTask(Task):
    """SQuAD 1.1 (`v2=False`) or 2.0 for `run_finetuning`: 2 epochs of 512-token windows by default.

    Files: `{data_dir}/train-v1.1.json`, `dev-v1.1.json` (or `-v2.0`),
    replaced by --train_file/--dev_file/--test_file. `train_articles` /
    `dev_articles` ("start:end") keep a slice of the articles.

    Metrics as the official code and README report them: 1.1 `exact_match`
    (main, the README's "EM") and `f1` of the v1.1 script; 2.0 the v2.0
    script's `exact` (main) and `f1` with "no answer" predicted where the null
    odds exceed `null_score_threshold` (default −2.75, the official
    `qa_na_threshold`), plus `best_exact` / `best_f1` and their thresholds
    from the script's threshold search. `predictions.json` applies the same
    threshold, so it scores the headline numbers.
    """

    default_epochs = 2
    default_max_seq_length = 512

    def __init__(self, v2=False, data_dir=None, file_overrides=None, max_query_length=SquadOptions.max_query_length,
                 doc_stride=SquadOptions.doc_stride, n_best_size=SquadOptions.n_best_size,
                 max_answer_length=SquadOptions.max_answer_length, train_articles=None, dev_articles=None,
                 null_score_threshold=None, do_lower_case=True):
        super().__init__("squad_v2" if v2 else "squad")
        self.v2 = v2
        self.data_dir = data_dir
        self.file_overrides = {k: v for k, v in (file_overrides or {}).items() if v}
        self.max_query_length, self.doc_stride = max_query_length, doc_stride
        self.n_best_size, self.max_answer_length = n_best_size, max_answer_length
        self.articles = {"train": train_articles, "dev": dev_articles}
        self.null_score_threshold = (OFFICIAL_NULL_THRESHOLD if null_score_threshold is None
                                     else float(null_score_threshold))
        self.do_lower_case = do_lower_case
        self.metric_names = ("exact", "f1", "best_exact", "best_f1") if v2 else ("exact_match", "f1")
        self.main_metric = "exact" if v2 else "exact_match"

    def build_head(self, config) -> SpanHead:
        """The official head: joint start/end prediction with a `squad_beam_size` beam and the
        answerability classifier (config switches `squad_joint_prediction`, `squad_answerable_classifier`)."""
        return SpanHead(answerable=config.squad_answerable_classifier,
                        joint_prediction=config.squad_joint_prediction, beam_size=config.squad_beam_size,
                        hidden_act=config.hidden_act, name="span_head")

    def min_sequence_length(self, config) -> int:
        return max(SPAN_MIN_LENGTH, config.squad_beam_size)

    def split_path(self, split):
        if split in self.file_overrides:
            return self.file_overrides[split]
        if split == "test":
            return None
        if not self.data_dir:
            raise ValueError(f"--data_dir is required for task {self.name} (or pass --{split}_file)")
        return os.path.join(self.data_dir, f"{split}-{'v2.0' if self.v2 else 'v1.1'}.json")

    def data(self, split):
        return load_squad(self.split_path(split), self.articles.get(split))

    def train_features(self, tokenizer, max_seq_length):
        examples, _ = read_examples(self.data("train"), is_training=True, v2=self.v2)
        features, _ = convert_examples_to_features(examples, tokenizer, max_seq_length, self.doc_stride,
                                                   self.max_query_length, is_training=True)
        logging.info("%s: %d training questions → %d features", self.name, len(examples), len(features["input_ids"]))
        return features

    def _eval_set(self, split, tokenizer, max_seq_length):
        data = self.data(split)
        examples, _ = read_examples(data, is_training=False, v2=self.v2)
        features, meta = convert_examples_to_features(examples, tokenizer, max_seq_length, self.doc_stride,
                                                      self.max_query_length, is_training=False)
        return EvalSet(split, examples, features, extra={"data": data, "meta": meta, "tokenizer": tokenizer})

    def eval_sets(self, tokenizer, max_seq_length):
        return [self._eval_set("dev", tokenizer, max_seq_length)]

    def predict_sets(self, tokenizer, max_seq_length):
        split = "test" if self.split_path("test") else "dev"
        eval_set = self._eval_set(split, tokenizer, max_seq_length)
        eval_set.extra["prefix"] = "test_" if split == "test" else ""
        return [eval_set]

    def _decode(self, eval_set, outputs):
        return decode_predictions(eval_set.examples, eval_set.extra["meta"], outputs, eval_set.extra["tokenizer"],
                                  self.n_best_size, self.max_answer_length, self.v2, self.do_lower_case)

    def score(self, eval_set, outputs, output_dir=None):
        """Official EM/F1 on the dev questions; writes the prediction files to `output_dir`."""
        predictions, nbest, null_odds = self._decode(eval_set, outputs)
        data = eval_set.extra["data"]
        if self.v2:
            result = metrics_lib.squad_v2_evaluate(data, predictions, null_odds,
                                                   na_prob_thresh=self.null_score_threshold)
        else:
            result = metrics_lib.squad_v1_evaluate(data, predictions)
        if output_dir:
            self._write(predictions, nbest, null_odds, output_dir, prefix="")
        return {k: float(v) for k, v in result.items()}

    def write_predictions(self, eval_set, outputs, output_dir):
        predictions, nbest, null_odds = self._decode(eval_set, outputs)
        return self._write(predictions, nbest, null_odds, output_dir, eval_set.extra.get("prefix", ""))

    def _write(self, predictions, nbest, null_odds, output_dir, prefix):
        if self.v2:
            write_json(null_odds, os.path.join(output_dir, prefix + "null_odds.json"))
            predictions = apply_null_threshold(predictions, null_odds, self.null_score_threshold)
        write_json(nbest, os.path.join(output_dir, prefix + "nbest_predictions.json"))
        return write_json(dict(predictions), os.path.join(output_dir, prefix + "predictions.json"))
