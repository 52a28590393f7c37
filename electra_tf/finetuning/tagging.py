"""Token tagging over CoNLL files: NER (`--task=ner`), chunking (`--task=chunk`) and any columns (`--task=tagging`).

Follows the official ELECTRA `finetune/tagging/tagging_tasks.py`:

* every word is tokenised on its own, WordPiece or SentencePiece (one batched call for all
  words); its label goes on its **first** piece, the other pieces carry
  weight 0 and are never scored; predictions are read at the first pieces
  and mapped back to the words (`align_features`, `words_of`);
* IOB tags (`--tagging_scheme=iob1|iob2`) are trained as BIOES labels (the
  official `LABEL_ENCODING`): chunks are read with `conlleval`'s rules
  (`tagging_metrics.chunks`, which read IOB1 and IOB2 alike) and re-encoded
  with `S-` for one-word chunks and `E-` for their last word. Predicted
  BIOES labels are decoded back to chunks (tolerantly: a stray `I-`/`E-`
  opens a chunk) and written in the file's own scheme, so the prediction
  file and the token accuracy compare like with like. `--tagging_scheme=none`
  trains the file's tags as they are (e.g. POS) and scores token accuracy only;
* the label list is that of the training file (`O` first, then sorted; without
  chunks only the tags that occur, sorted), kept
  in `<output_dir>/tagging_labels.json` so a `--do_train=false` run predicts
  with the same ids.

Unlike the official code, a sentence longer than `max_seq_length - 2` pieces
is not cut: it is split into consecutive windows of whole words, each
`[CLS] words [SEP]`, so every word is trained on and predicted exactly once
(a single word of more pieces than a window holds keeps its first pieces;
it is still predicted). Split sentences, windows and cut words are counted
per split, logged in one line and reported under "data" in `metrics.json`.
Every real token gets segment id `segment_id` (`--tagging_segment_id`, default 1 as the
official code; 0 is what every other task feeds a single text), padding 0; the id is saved
with the labels and is part of the run's settings, so prediction, export and a resumed run
use the id the weights were trained with.

Metrics (percent): `conlleval`'s entity precision/recall/F1 (main: `f1`),
token `accuracy`, and `<TYPE>_precision/recall/f1` per type. Prediction
files (`word gold predicted`, what `conlleval` reads): `dev_predictions.txt`
at every evaluation, `test_predictions.txt` with `--do_predict`.

Example:

>>> to_bioes(["B-PER", "I-PER", "O", "B-LOC", "I-ORG"])
['B-PER', 'E-PER', 'O', 'S-LOC', 'S-ORG']
>>> from_bioes(["B-PER", "E-PER", "O", "S-LOC", "I-LOC"], scheme="iob1")
['I-PER', 'I-PER', 'O', 'I-LOC', 'B-LOC']
>>> word_windows([2, 3, 1, 4], budget=5)  # (first word, end word) of each window
([(0, 2), (2, 4)], 0)
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np
from absl import logging

from electra_tf.finetuning import conll, tagging_metrics
from electra_tf.finetuning.conll import SCHEMES
from electra_tf.finetuning.heads import TokenClassificationHead
from electra_tf.finetuning.task import EvalSet, Task
from electra_tf.text.manifest import write_json_atomic

SEGMENT_ID_CHOICES = (0, 1)  # the segment id every token of a tagged sentence gets, fixed per model (serving's too)
DEFAULT_SEGMENT_ID = 1  # the official `featurize`: `segment_ids = pad([1] * len(input_ids))`
LABELS_FILE = "tagging_labels.json"


# ---- label encodings ---------------------------------------------------------------------------

def spans_to_tags(spans: Sequence[tuple[str, int, int]], length: int, scheme: str) -> list[str]:
    """Tags of a sentence of `length` words holding the chunks `spans` ((type, first, last), in order)."""
    tags = ["O"] * length
    previous_end, previous_type = -2, None
    for chunk_type, first, last in spans:
        for i in range(first, last + 1):
            tags[i] = "I-" + chunk_type
        if scheme == "bioes":
            if first == last:
                tags[first] = "S-" + chunk_type
            else:
                tags[first], tags[last] = "B-" + chunk_type, "E-" + chunk_type
        elif scheme == "iob2" or (previous_end == first - 1 and previous_type == chunk_type):
            tags[first] = "B-" + chunk_type  # IOB1: B- only between two adjacent chunks of one type
        previous_end, previous_type = last, chunk_type
    return tags


def to_bioes(tags: Sequence[str]) -> list[str]:
    """BIOES tags of an IOB1 or IOB2 sentence (chunks read as `conlleval` reads them)."""
    return spans_to_tags(tagging_metrics.chunks(tags), len(tags), "bioes")


def bioes_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Chunks of a predicted BIOES sequence: `B-`/`S-` start one; `I-`/`E-` continue an open chunk of
    their type or else start one; `E-`/`S-` close it; `O` or a type change ends it."""
    spans, open_type, start = [], None, 0
    for i, tag in enumerate(tags):
        prefix, _, chunk_type = tag.partition("-")
        continues = open_type == chunk_type and prefix in ("I", "E")
        if open_type is not None and not continues:
            spans.append((open_type, start, i - 1))
            open_type = None
        if prefix == "O" and not chunk_type:
            continue
        if open_type is None:
            open_type, start = chunk_type, i
        if prefix in ("E", "S"):
            spans.append((open_type, start, i))
            open_type = None
    if open_type is not None:
        spans.append((open_type, start, len(tags) - 1))
    return spans


def from_bioes(tags: Sequence[str], scheme: str) -> list[str]:
    """Predicted BIOES tags as IOB1 or IOB2."""
    return spans_to_tags(bioes_spans(tags), len(tags), scheme)


# ---- features ----------------------------------------------------------------------------------

def word_pieces(tokenizer, sentences) -> list[list[list[int]]]:
    """Per sentence, per word, its piece ids (one batched call; a word without pieces gets [UNK])."""
    words = [word for sentence_words, _ in sentences for word in sentence_words]
    ids, out, offset = [], [], 0
    for i in range(0, len(words), 20000):
        ids.extend(tokenizer.tokenize(words[i:i + 20000]))
    for sentence_words, _ in sentences:
        out.append([list(p) if len(p) else [tokenizer.unk_id] for p in ids[offset:offset + len(sentence_words)]])
        offset += len(sentence_words)
    return out


def word_windows(piece_counts: Sequence[int], budget: int) -> tuple[list[tuple[int, int]], int]:
    """Consecutive word ranges [first, end) of at most `budget` pieces each (greedy), and the number of
    words longer than `budget` (alone in their window, cut to `budget` pieces)."""
    windows, start, used, cut = [], 0, 0, 0
    for i, count in enumerate(piece_counts):
        if count > budget:
            cut += 1
        count = min(count, budget)
        if used + count > budget:
            windows.append((start, i))
            start, used = i, 0
        used += count
    if piece_counts:
        windows.append((start, len(piece_counts)))
    return windows, cut


def align_features(tokenizer, sentences, max_seq_length: int, label_ids: Optional[Sequence[Sequence[int]]] = None,
                   segment_id: int = DEFAULT_SEGMENT_ID):
    """`[CLS] words [SEP]` features of every window, their metadata and the split's counts.

    `label_ids` (per sentence, per word) become `label_ids` `[N, L]` on the first
    piece of every word with `label_weights` 1 there, 0 elsewhere. Every real token
    gets `segment_id`, padding 0. Metadata per window: `sentence`, `first_word` and
    `positions` (the first pieces' positions).
    """
    budget = max_seq_length - 2
    pieces = word_pieces(tokenizer, sentences)
    rows, meta = [], []
    split_sentences = cut_words = 0
    for s, sentence_pieces in enumerate(pieces):
        windows, cut = word_windows([len(p) for p in sentence_pieces], budget)
        split_sentences += len(windows) > 1
        cut_words += cut
        for first, end in windows:
            ids, positions = [tokenizer.cls_id], []
            for word in sentence_pieces[first:end]:
                positions.append(len(ids))
                ids.extend(word[:budget])
            ids.append(tokenizer.sep_id)
            rows.append(ids)
            meta.append({"sentence": s, "first_word": first, "positions": np.asarray(positions, np.int32)})
    n = len(rows)
    features = {"input_ids": np.full((n, max_seq_length), tokenizer.pad_id, np.int32),
                "input_mask": np.zeros((n, max_seq_length), np.int32),
                "segment_ids": np.zeros((n, max_seq_length), np.int32)}
    if label_ids is not None:
        features["label_ids"] = np.zeros((n, max_seq_length), np.int32)
        features["label_weights"] = np.zeros((n, max_seq_length), np.float32)
    for i, (ids, m) in enumerate(zip(rows, meta)):
        features["input_ids"][i, :len(ids)] = ids
        features["input_mask"][i, :len(ids)] = 1
        features["segment_ids"][i, :len(ids)] = segment_id
        if label_ids is not None:
            labels = label_ids[m["sentence"]][m["first_word"]:m["first_word"] + len(m["positions"])]
            features["label_ids"][i, m["positions"]] = labels
            features["label_weights"][i, m["positions"]] = 1.0
    counts = {"sentences": len(sentences), "words": sum(len(w) for w, _ in sentences), "windows": n,
              "split_sentences": split_sentences, "cut_words": cut_words}
    return features, meta, counts


def words_of(predictions: np.ndarray, meta: Sequence[dict], sentence_lengths: Sequence[int]) -> list[list[int]]:
    """Per sentence, the prediction of each word, read at its first piece: `predictions` `[N, L]`
    (one row per window). Raises unless every word is predicted exactly once."""
    out = [[None] * n for n in sentence_lengths]
    for row, m in zip(predictions, meta):
        words = out[m["sentence"]]
        for k, position in enumerate(m["positions"]):
            if words[m["first_word"] + k] is not None:
                raise AssertionError(f"sentence {m['sentence']}: word {m['first_word'] + k} predicted twice")
            words[m["first_word"] + k] = int(row[position])
    for s, words in enumerate(out):
        if any(w is None for w in words):
            raise AssertionError(f"sentence {s}: word {words.index(None)} has no prediction")
    return out


# ---- the task ----------------------------------------------------------------------------------

class TaggingTask(Task):
    """Tagging of CoNLL-style files `{data_dir}/{train,dev,test}.txt` (or --train_file/--dev_file/--test_file).

    `word_column` / `label_column` pick the columns (0-based; negative counts
    from the end); `scheme` is the files' tagging scheme (`iob1`, `iob2`, or
    `none` for labels without chunks). `segment_id` (0 or 1) goes on every real
    token. `labels` fixes the label list (tests); `output_dir` is where the label
    list is saved (and, with `do_train` false, read back from).
    """

    default_max_seq_length = 128

    def __init__(self, name="tagging", data_dir=None, file_overrides=None, word_column=conll.WORD_COLUMN,
                 label_column=-1, scheme="iob2", labels=None, output_dir=None, do_train=True,
                 segment_id=DEFAULT_SEGMENT_ID):
        super().__init__(name)
        if scheme not in SCHEMES:
            raise ValueError(f"--tagging_scheme: {scheme!r} is not one of {', '.join(SCHEMES)}")
        if segment_id not in SEGMENT_ID_CHOICES:
            raise ValueError(f"--tagging_segment_id: {segment_id!r} is not 0 or 1")
        self.segment_id = int(segment_id)
        self.data_dir = data_dir
        self.file_overrides = {k: v for k, v in (file_overrides or {}).items() if v}
        self.word_column, self.label_column, self.scheme = int(word_column), int(label_column), scheme
        self.output_dir, self.do_train = output_dir, do_train
        self.chunked = scheme != "none"
        self.main_metric = "f1" if self.chunked else "accuracy"
        self._labels = list(labels) if labels else None
        self._sentences, self._counts = {}, {}

    # ---- files ----
    def split_path(self, split: str) -> Optional[str]:
        if split in self.file_overrides:
            return self.file_overrides[split]
        if not self.data_dir:
            if split == "test":
                return None
            raise ValueError(f"--data_dir is required for task {self.name} (or pass --{split}_file)")
        path = os.path.join(self.data_dir, split + ".txt")
        return path if split != "test" or os.path.isfile(path) else None

    def sentences(self, split: str) -> list[conll.Sentence]:
        if split not in self._sentences:
            sentences = conll.read_conll(self.split_path(split), self.word_column, self.label_column,
                                         tags=self.scheme)
            if not sentences:
                raise ValueError(f"{self.split_path(split)}: no sentences")
            self._sentences[split] = sentences
        return self._sentences[split]

    def encode_tags(self, tags: Sequence[str]) -> list[str]:
        """The training labels of a sentence's tags (BIOES for IOB schemes)."""
        return to_bioes(tags) if self.chunked else list(tags)

    def decode_tags(self, labels: Sequence[str]) -> list[str]:
        """Predicted training labels as tags of the files' scheme."""
        return from_bioes(labels, self.scheme) if self.chunked else list(labels)

    @property
    def labels(self) -> list[str]:
        """The training labels: `O` first, then sorted (without chunks: sorted); saved ones for a run without
        training."""
        if self._labels is None:
            saved = os.path.join(self.output_dir, LABELS_FILE) if self.output_dir else None
            if not self.do_train and saved and os.path.isfile(saved):
                with open(saved, encoding="utf-8") as f:
                    record = json.load(f)
                self._check_saved(saved, record)
                self._labels = list(record["labels"])
                logging.info("%s: %d labels from %s", self.name, len(self._labels), saved)
            else:
                encoded = [(words, self.encode_tags(tags)) for words, tags in self.sentences("train")]
                self._labels = (conll.label_list(encoded) if self.chunked
                                else sorted({tag for _, tags in encoded for tag in tags}))
        return self._labels

    def _check_saved(self, saved: str, record: dict):
        """Refuses to predict with weights trained on another scheme or segment id."""
        if record.get("scheme") != self.scheme:
            raise ValueError(f"{saved}: labels of --tagging_scheme={record.get('scheme')}, not {self.scheme}")
        # Labels files without the field come from runs that fed 0 to every token.
        trained = record.get("segment_id", 0)
        if trained != self.segment_id:
            raise ValueError(f"{saved}: the model was trained with --tagging_segment_id={trained}, "
                             f"not {self.segment_id}")

    def save_labels(self) -> Optional[str]:
        if not self.output_dir:
            return None
        os.makedirs(self.output_dir, exist_ok=True)
        path = os.path.join(self.output_dir, LABELS_FILE)
        record = {"task": self.name, "scheme": self.scheme, "encoding": "bioes" if self.chunked else "tags",
                  "word_column": self.word_column, "label_column": self.label_column,
                  "segment_id": self.segment_id, "labels": self.labels}
        write_json_atomic(path, record)
        return path

    # ---- the Task interface ----
    def build_head(self, config) -> TokenClassificationHead:
        """A linear map of every position to the labels (no dropout, as the official tagging head).

        Called when the model is built, after every input file was read: the label list is saved then.
        """
        self.save_labels()
        return TokenClassificationHead(len(self.labels), name="tagging_head")

    def _features(self, split: str, tokenizer, max_seq_length: int, with_labels: bool):
        if not self.do_train:
            _ = self.labels  # reads and checks the saved labels (scheme, segment id) before anything is written
        sentences = self.sentences(split)
        label_ids = None
        if with_labels:
            index = {label: i for i, label in enumerate(self.labels)}
            label_ids = []
            for s, (_, tags) in enumerate(sentences):
                encoded = self.encode_tags(tags)
                unknown = next((t for t in encoded if t not in index), None)
                if unknown is not None:
                    raise ValueError(f"{self.split_path(split)}: sentence {s + 1}: label {unknown!r} is not one "
                                     f"of the {len(index)} labels the model was trained with")
                label_ids.append([index[t] for t in encoded])
        features, meta, counts = align_features(tokenizer, sentences, max_seq_length, label_ids, self.segment_id)
        self._counts[split] = counts
        logging.info("%s %s: %d sentences, %d words -> %d windows of <= %d tokens; %d sentence(s) longer than "
                     "that split into windows, %d word(s) cut to their first pieces (every word is predicted)",
                     self.name, split, counts["sentences"], counts["words"], counts["windows"], max_seq_length,
                     counts["split_sentences"], counts["cut_words"])
        return features, meta

    def train_features(self, tokenizer, max_seq_length: int) -> dict[str, np.ndarray]:
        return self._features("train", tokenizer, max_seq_length, with_labels=True)[0]

    def _eval_set(self, split, tokenizer, max_seq_length, prefix):
        features, meta = self._features(split, tokenizer, max_seq_length, with_labels=False)
        return EvalSet(split, self.sentences(split), features, extra={"meta": meta, "prefix": prefix})

    def eval_sets(self, tokenizer, max_seq_length: int) -> list[EvalSet]:
        return [self._eval_set("dev", tokenizer, max_seq_length, "dev_")]

    def predict_sets(self, tokenizer, max_seq_length: int) -> list[EvalSet]:
        split = "test" if self.split_path("test") else "dev"
        return [self._eval_set(split, tokenizer, max_seq_length, split + "_")]

    def predicted_tags(self, eval_set: EvalSet, outputs: dict) -> list[list[str]]:
        """Per sentence, the predicted tag of every word (in the files' scheme)."""
        predictions = np.argmax(np.asarray(outputs["logits"]), axis=-1)
        per_word = words_of(predictions, eval_set.extra["meta"], [len(w) for w, _ in eval_set.examples])
        labels = self.labels
        return [self.decode_tags([labels[i] for i in ids]) for ids in per_word]

    def score(self, eval_set: EvalSet, outputs: dict, output_dir: Optional[str] = None) -> dict[str, float]:
        """Entity P/R/F1 (overall and per type) and token accuracy; writes `dev_predictions.txt`."""
        predicted = self.predicted_tags(eval_set, outputs)
        if output_dir:
            self._write(eval_set, predicted, output_dir)
        gold = [tags for _, tags in eval_set.examples]
        if not self.chunked:
            pairs = [(g, p) for gold_tags, predicted_tags in zip(gold, predicted)
                     for g, p in zip(gold_tags, predicted_tags)]
            return {"accuracy": 100.0 * sum(g == p for g, p in pairs) / max(len(pairs), 1)}
        return tagging_metrics.evaluate(gold, predicted).as_dict()

    def write_predictions(self, eval_set: EvalSet, outputs: dict, output_dir: str) -> str:
        return self._write(eval_set, self.predicted_tags(eval_set, outputs), output_dir)

    def _write(self, eval_set, predicted, output_dir) -> str:
        path = os.path.join(output_dir, eval_set.extra["prefix"] + "predictions.txt")
        conll.write_predictions(path, eval_set.examples, predicted)
        return path

    def data_summary(self) -> dict:
        return {split: dict(counts) for split, counts in self._counts.items()}

    def training_settings(self) -> dict:
        return {"tagging_segment_id": self.segment_id}


def conll2003_task(name: str, label_column: int):
    """A factory of the CoNLL-2003 task on `label_column` (NER 3, chunks 2), IOB2 by default."""
    def factory(data_dir=None, file_overrides=None, tagging_word_column=None, tagging_label_column=None,
                tagging_scheme=None, labels=None, output_dir=None, do_train=True, tagging_segment_id=None):
        return TaggingTask(name, data_dir, file_overrides,
                           conll.WORD_COLUMN if tagging_word_column is None else tagging_word_column,
                           label_column if tagging_label_column is None else tagging_label_column,
                           tagging_scheme or "iob2", labels, output_dir, do_train,
                           DEFAULT_SEGMENT_ID if tagging_segment_id is None else tagging_segment_id)
    return factory


def generic_task(data_dir=None, file_overrides=None, tagging_word_column=None, tagging_label_column=None,
                 tagging_scheme=None, labels=None, output_dir=None, do_train=True,
                 tagging_segment_id=None) -> TaggingTask:
    """`--task=tagging`: word column 0 and the last column as labels unless given, IOB2 unless given."""
    return TaggingTask("tagging", data_dir, file_overrides,
                       conll.WORD_COLUMN if tagging_word_column is None else tagging_word_column,
                       -1 if tagging_label_column is None else tagging_label_column,
                       tagging_scheme or "iob2", labels, output_dir, do_train,
                       DEFAULT_SEGMENT_ID if tagging_segment_id is None else tagging_segment_id)


__all__ = ["DEFAULT_SEGMENT_ID", "LABELS_FILE", "TaggingTask", "align_features",
           "bioes_spans", "conll2003_task", "from_bioes", "generic_task", "spans_to_tags", "to_bioes", "word_pieces",
           "word_windows", "words_of"]
