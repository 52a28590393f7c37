"""SQuAD 1.1 / 2.0: examples, sliding-window features, n-best decoding, scoring.

Follows the official ELECTRA `finetune/qa/qa_tasks.py` (features) and
`qa_metrics.py` (`write_predictions`):

* paragraphs are split on whitespace into "original" words, answers mapped
  from character offsets to words (train examples whose answer text cannot be
  recovered are skipped and counted), every word is tokenised on its
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

Modules: `examples` (paragraphs → `SquadExample`s, answers mapped to words), `features` (sliding windows of
`[CLS] question [SEP] doc-window [SEP]`), `decoding` (n-best spans → answer texts, null odds), `task`
(`SquadTask` for `run_finetuning`: files, head, scoring, prediction files).
"""
