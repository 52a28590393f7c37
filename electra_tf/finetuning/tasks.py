"""Sentence(-pair) classification and regression tasks: GLUE and generic tsv/csv.

* The nine GLUE tasks read the original GLUE tsv layout written by
  `download_glue_data.py` (CoLA train/dev have no header, MRPC's header starts
  with a UTF-8 BOM, MNLI has dev_matched/dev_mismatched, malformed QQP rows
  are skipped and counted), or the same data from TFDS (`glue/*`, no download).
* `text_classification` reads any tsv/csv with `text_column` / `label_column`
  (/ `text_b_column`) given by name or 0-based index; the header is detected.

Each task turns examples into `[CLS] a [SEP] b [SEP]` features padded to
`max_seq_length` (the longer segment is truncated first), scores model outputs
with the task's GLUE metrics and writes GLUE submission files.

Main metrics (`main_metric_key`, used to pick the best dev epoch and named in
`metrics.json`) are those of the official README's results table, which are
also the official scorers' (`classification_metrics.py`: `MCCScorer` for
CoLA, `RegressionScorer` for STS-B, `AccuracyScorer` for every other task):
CoLA Matthews correlation, STS-B Spearman (Pearson reported beside), accuracy
for SST-2, MRPC, QQP (F1 of label 1 reported beside, as the GLUE leaderboard
shows it), MNLI (matched; mismatched beside), QNLI, RTE and WNLI (not in the
official code; accuracy as on GLUE); SQuAD: see `squad.SquadTask`. All
scores are in percent.

Example:

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> _ = open(os.path.join(d, "dev.tsv"), "w").write("sentence\\tlabel\\ngood film\\t1\\nbad film\\t0\\n")
>>> task = get_task("SST-2", data_dir=d)
>>> [(e.text_a, e.label) for e in task.get_examples("dev")]
[('good film', '1'), ('bad film', '0')]
>>> task.main_metric, task.metric_names
('accuracy', ('accuracy',))
"""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import Optional, Sequence

import numpy as np
from absl import logging

from electra_tf.finetuning import metrics as metrics_lib

GLUE_TASKS = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI")


@dataclasses.dataclass
class InputExample:
    """One sentence or sentence pair; `label` is a label string, a float (regression) or None."""

    guid: str
    text_a: str
    text_b: Optional[str] = None
    label: Optional[object] = None
    source: str = dataclasses.field(default="", compare=False)  # "file:line" it was read from, for errors


@dataclasses.dataclass(frozen=True)
class Columns:
    """Where the fields of one split's tsv live (0-based, negative from the end)."""

    text_a: int
    text_b: Optional[int] = None
    label: Optional[int] = None
    index: Optional[int] = None  # the id written to the submission file
    header: bool = True


@dataclasses.dataclass(frozen=True)
class GlueSpec:
    """Everything task-specific about one GLUE task."""

    name: str
    labels: Optional[tuple]  # None: regression
    metric_names: tuple
    main_metric: str
    train: Columns
    test: Columns
    dev: Optional[Columns] = None  # defaults to `train`
    dev_splits: tuple = ("dev",)
    test_splits: tuple = ("test",)
    submission_names: tuple = ()  # one per test split
    tfds_name: str = ""
    tfds_fields: tuple = ("sentence",)
    label_range: tuple = (0.0, 5.0)  # regression only
    unordered_pair: bool = False  # official `double_unordered` applies

    @property
    def is_regression(self) -> bool:
        return self.labels is None


_PAIR = dict(train=Columns(1, 2, 3), test=Columns(1, 2, index=0))
GLUE_SPECS = {
    "CoLA": GlueSpec("CoLA", ("0", "1"), ("mcc",), "mcc", train=Columns(3, label=1, header=False),
                     test=Columns(1, index=0), submission_names=("CoLA.tsv",), tfds_name="glue/cola"),
    "SST-2": GlueSpec("SST-2", ("0", "1"), ("accuracy",), "accuracy", train=Columns(0, label=1),
                      test=Columns(1, index=0), submission_names=("SST-2.tsv",), tfds_name="glue/sst2"),
    "MRPC": GlueSpec("MRPC", ("0", "1"), ("accuracy", "f1"), "accuracy", train=Columns(3, 4, 0),
                     test=Columns(3, 4, index=0), submission_names=("MRPC.tsv",), tfds_name="glue/mrpc",
                     tfds_fields=("sentence1", "sentence2"), unordered_pair=True),
    "STS-B": GlueSpec("STS-B", None, ("pearson", "spearman"), "spearman", train=Columns(-3, -2, -1),
                      test=Columns(-2, -1, index=0), submission_names=("STS-B.tsv",), tfds_name="glue/stsb",
                      tfds_fields=("sentence1", "sentence2"), unordered_pair=True),
    "QQP": GlueSpec("QQP", ("0", "1"), ("accuracy", "f1"), "accuracy", train=Columns(3, 4, 5),
                    test=Columns(1, 2, index=0), submission_names=("QQP.tsv",), tfds_name="glue/qqp",
                    tfds_fields=("question1", "question2")),
    "MNLI": GlueSpec("MNLI", ("contradiction", "entailment", "neutral"), ("accuracy",), "accuracy",
                     train=Columns(8, 9, -1), test=Columns(8, 9, index=0),
                     dev_splits=("dev_matched", "dev_mismatched"),
                     test_splits=("test_matched", "test_mismatched"),
                     submission_names=("MNLI-m.tsv", "MNLI-mm.tsv"), tfds_name="glue/mnli",
                     tfds_fields=("premise", "hypothesis")),
    "QNLI": GlueSpec("QNLI", ("entailment", "not_entailment"), ("accuracy",), "accuracy",
                     submission_names=("QNLI.tsv",), tfds_name="glue/qnli", tfds_fields=("question", "sentence"),
                     **_PAIR),
    "RTE": GlueSpec("RTE", ("entailment", "not_entailment"), ("accuracy",), "accuracy",
                    submission_names=("RTE.tsv",), tfds_name="glue/rte", tfds_fields=("sentence1", "sentence2"),
                    **_PAIR),
    "WNLI": GlueSpec("WNLI", ("0", "1"), ("accuracy",), "accuracy", submission_names=("WNLI.tsv",),
                     tfds_name="glue/wnli", tfds_fields=("sentence1", "sentence2"), **_PAIR),
}
DIAGNOSTIC_COLUMNS = Columns(1, 2, index=0)  # GLUE AX, predicted by the MNLI model
TASK_ALIASES = {
    "cola": "CoLA", "sst-2": "SST-2", "sst2": "SST-2", "sst": "SST-2", "mrpc": "MRPC", "sts-b": "STS-B",
    "stsb": "STS-B", "sts": "STS-B", "qqp": "QQP", "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI",
}
# Paper / official defaults that differ from the 3 epochs of `get_config`.
DEFAULT_EPOCHS = {"RTE": 10, "STS-B": 10, "squad": 2, "squad_v2": 2}


# --------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------

def read_tsv_rows(path: str, encoding: str = "utf-8-sig") -> list[list[str]]:
    """Rows of a GLUE tsv: split on '\\n' and '\\t' only, no quoting (like the
    official reader's `quotechar=None`); a UTF-8 BOM and trailing '\\r' are dropped."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    with open(path, encoding=encoding, newline="") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r").split("\t") for line in lines]


def parse_glue_rows(rows: list[list[str]], columns: Columns, spec_name: str, path: str,
                    with_labels: bool, skip_malformed: bool = False) -> tuple[list[InputExample], int]:
    """Examples from tsv rows and the number of malformed rows skipped.

    A row is malformed when its number of fields differs from the header's (or,
    without a header, from the first row's): an error naming the file and line,
    unless `skip_malformed` (then skipped, counted and logged; real QQP needs it).
    """
    start = 1 if columns.header else 0
    expected = len(rows[0]) if rows else 0
    examples, malformed = [], 0
    for line, row in enumerate(rows[start:], start=start + 1):
        if len(row) != expected:
            if not skip_malformed:
                raise ValueError(f"{path}: line {line} has {len(row)} fields, expected {expected} "
                                 "(--skip_malformed_rows skips such lines)")
            malformed += 1
            continue
        guid = row[columns.index] if columns.index is not None else str(len(examples))
        text_b = row[columns.text_b] if columns.text_b is not None else None
        label = row[columns.label] if (with_labels and columns.label is not None) else None
        examples.append(InputExample(guid, row[columns.text_a], text_b, label, source=f"{path}:{line}"))
    if malformed:
        logging.warning("%s: skipped %d malformed line(s) in %s (wrong number of fields)",
                        spec_name, malformed, path)
    if not examples and path:
        raise ValueError(f"{path}: no examples (empty file)")
    return examples, malformed


def _detect_delimiter(path: str) -> str:
    return "," if path.lower().endswith(".csv") else "\t"


def read_delimited(path: str) -> list[list[str]]:
    """Rows of a generic tsv (no quoting) or csv (standard quoting)."""
    if _detect_delimiter(path) == "\t":
        return read_tsv_rows(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    with open(path, encoding="utf-8-sig", newline="") as f:
        return [row for row in csv.reader(f) if row]


def resolve_column(spec: Optional[str], header: Optional[list[str]], flag: str, path: str) -> Optional[int]:
    """A column given by name (needs a header) or by 0-based index."""
    if spec is None or spec == "":
        return None
    spec = str(spec)
    if header is not None and spec in header:
        return header.index(spec)
    if spec.lstrip("-").isdigit():
        return int(spec)
    raise ValueError(f"--{flag}: column {spec!r} is not in the header of {path} "
                     f"({header if header is not None else 'no header detected'})")


# --------------------------------------------------------------------------
# Features
# --------------------------------------------------------------------------

def truncate_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """Official `_truncate_seq_pair`: pop from the longer list (b on ties) in place."""
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def encode_pairs(tokenizer, texts_a: Sequence[str], texts_b: Optional[Sequence[Optional[str]]],
                 max_seq_length: int) -> dict[str, np.ndarray]:
    """`[CLS] a [SEP] (b [SEP])` ids, mask and segment ids, int32 `[N, max_seq_length]`.

    Tokenisation is one batched call per segment.
    """
    n = len(texts_a)
    ids_a = tokenizer.tokenize(list(texts_a))
    has_b = texts_b is not None and any(t is not None for t in texts_b)
    ids_b = tokenizer.tokenize([t or "" for t in texts_b]) if has_b else [None] * n
    input_ids = np.full((n, max_seq_length), tokenizer.pad_id, np.int32)
    input_mask = np.zeros((n, max_seq_length), np.int32)
    segment_ids = np.zeros((n, max_seq_length), np.int32)
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    for i in range(n):
        a = list(ids_a[i])
        b = list(ids_b[i]) if (has_b and texts_b[i] is not None) else None
        if b is not None:
            truncate_pair(a, b, max_seq_length - 3)
            row = [cls] + a + [sep] + b + [sep]
            segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        else:
            a = a[:max_seq_length - 2]
            row = [cls] + a + [sep]
            segments = [0] * len(row)
        input_ids[i, :len(row)] = row
        input_mask[i, :len(row)] = 1
        segment_ids[i, :len(row)] = segments
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}


# --------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------

@dataclasses.dataclass
class EvalSet:
    """A split to score or predict: its features, examples and output name."""

    name: str
    examples: list
    features: dict
    extra: dict = dataclasses.field(default_factory=dict)


class SentenceTask:
    """Base class of the GLUE and generic sentence(-pair) tasks."""

    kind = "classification"  # or "regression"
    labels: Optional[tuple] = None
    metric_names: tuple = ("accuracy",)
    main_metric = "accuracy"
    unordered_pair = False

    def __init__(self, name: str, double_unordered: bool = True):
        self.name = name
        self.double_unordered = double_unordered

    # ---- to implement -------------------------------------------------------
    def get_examples(self, split: str) -> list[InputExample]:
        raise NotImplementedError

    def dev_splits(self) -> tuple:
        return ("dev",)

    def test_splits(self) -> list[tuple[str, str]]:
        """(split, submission file name) pairs."""
        raise NotImplementedError

    # ---- shared -------------------------------------------------------------
    @property
    def num_labels(self) -> int:
        return 1 if self.kind == "regression" else len(self.labels)

    def label_to_feature(self, label):
        if self.kind == "regression":
            low, high = self.label_range
            return (float(label) - low) / high  # the official normalisation
        return self.labels.index(label)

    def train_features(self, tokenizer, max_seq_length: int) -> dict[str, np.ndarray]:
        examples = self.get_examples("train")
        if self.unordered_pair and self.double_unordered:
            examples = examples + [InputExample(e.guid + "-swapped", e.text_b, e.text_a, e.label) for e in examples]
        return self.features(tokenizer, examples, max_seq_length, with_labels=True)

    def features(self, tokenizer, examples, max_seq_length, with_labels=False) -> dict[str, np.ndarray]:
        texts_b = [e.text_b for e in examples] if any(e.text_b is not None for e in examples) else None
        features = encode_pairs(tokenizer, [e.text_a for e in examples], texts_b, max_seq_length)
        if with_labels:
            values = []
            for e in examples:
                if self.kind == "classification" and e.label not in self.labels:
                    where = e.source or f"{self.name} example {e.guid}"
                    raise ValueError(f"{where}: label {e.label!r} is not one of {list(self.labels)}")
                values.append(self.label_to_feature(e.label))
            key, dtype = ("targets", np.float32) if self.kind == "regression" else ("label_ids", np.int32)
            features[key] = np.asarray(values, dtype)
        return features

    def eval_sets(self, tokenizer, max_seq_length) -> list[EvalSet]:
        sets = []
        for split in self.dev_splits():
            examples = self.get_examples(split)
            sets.append(EvalSet(split, examples, self.features(tokenizer, examples, max_seq_length, True)))
        return sets

    def predict_sets(self, tokenizer, max_seq_length) -> list[EvalSet]:
        sets = []
        for split, filename in self.test_splits():
            examples = self.get_examples(split)
            sets.append(EvalSet(split, examples, self.features(tokenizer, examples, max_seq_length),
                                extra={"filename": filename}))
        return sets

    def decode(self, outputs: dict) -> np.ndarray:
        if self.kind == "regression":
            return np.asarray(outputs["predictions"], np.float64)
        return np.argmax(np.asarray(outputs["logits"]), axis=-1)

    def score(self, eval_set: EvalSet, outputs: dict, output_dir: Optional[str] = None) -> dict[str, float]:
        """The task's metrics on one dev split (names prefixed for MNLI's two dev sets)."""
        predictions = self.decode(outputs)
        feats = eval_set.features
        labels = feats["targets"] if self.kind == "regression" else feats["label_ids"]
        values = {}
        for name in self.metric_names:
            fn = {"accuracy": metrics_lib.accuracy, "f1": metrics_lib.f1_score,
                  "mcc": metrics_lib.matthews_corrcoef, "pearson": metrics_lib.pearson,
                  "spearman": metrics_lib.spearman}[name]
            values[name] = 100.0 * fn(labels, predictions)
        prefix = self.metric_prefix(eval_set.name)
        return {prefix + k: v for k, v in values.items()}

    def metric_prefix(self, split: str) -> str:
        return "" if len(self.dev_splits()) == 1 else split.replace("dev_", "") + "_"

    def main_metric_key(self) -> str:
        return self.metric_prefix(self.dev_splits()[0]) + self.main_metric

    def write_predictions(self, eval_set: EvalSet, outputs: dict, output_dir: str) -> str:
        """Writes a GLUE submission file (`index\\tprediction`); returns its path."""
        predictions = self.decode(outputs)
        path = os.path.join(output_dir, eval_set.extra["filename"])
        with open(path, "w", encoding="utf-8") as f:
            f.write("index\tprediction\n")
            for example, prediction in zip(eval_set.examples, predictions):
                f.write(f"{example.guid}\t{self.format_prediction(prediction)}\n")
        return path

    def format_prediction(self, prediction) -> str:
        if self.kind == "regression":
            low, high = self.label_range
            return f"{min(max(float(prediction) * high + low, low), high):.3f}"
        return str(self.labels[int(prediction)])


class GlueTask(SentenceTask):
    """One GLUE task read from GLUE tsv files or from TFDS."""

    def __init__(self, spec: GlueSpec, data_dir: Optional[str] = None, file_overrides: Optional[dict] = None,
                 tfds_data_dir: Optional[str] = None, use_tfds: bool = False,
                 diagnostic_file: Optional[str] = None, double_unordered: bool = True,
                 skip_malformed: bool = False):
        super().__init__(spec.name, double_unordered)
        self.spec = spec
        self.skip_malformed = skip_malformed
        self.kind = "regression" if spec.is_regression else "classification"
        self.labels = spec.labels
        self.metric_names = spec.metric_names
        self.main_metric = spec.main_metric
        self.label_range = spec.label_range
        self.unordered_pair = spec.unordered_pair
        self.data_dir = self._task_dir(data_dir, spec.name)
        self.file_overrides = {k: v for k, v in (file_overrides or {}).items() if v}
        self.use_tfds = use_tfds
        self.tfds_data_dir = tfds_data_dir
        self.diagnostic_file = diagnostic_file
        self.malformed = {}

    @staticmethod
    def _task_dir(data_dir, name):
        """`data_dir` may be the task folder or the GLUE root that contains it."""
        if data_dir and os.path.isdir(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
        return data_dir

    def dev_splits(self):
        return self.spec.dev_splits

    def test_splits(self):
        splits = list(zip(self.spec.test_splits, self.spec.submission_names))
        if self.name == "MNLI" and self.find_diagnostic_file():
            splits.append(("diagnostic", "AX.tsv"))
        return splits

    def find_diagnostic_file(self) -> Optional[str]:
        if self.use_tfds:
            return "tfds"
        candidates = [self.diagnostic_file] if self.diagnostic_file else []
        if self.data_dir:
            candidates += [os.path.join(self.data_dir, "diagnostic.tsv"),
                           os.path.join(self.data_dir, "diagnostic", "diagnostic.tsv"),
                           os.path.join(self.data_dir, "..", "diagnostic", "diagnostic.tsv")]
        return next((c for c in candidates if c and os.path.isfile(c)), None)

    def split_path(self, split: str) -> str:
        """The tsv of `split`; --train_file/--dev_file/--test_file replace the
        train, (first) dev and (first) test files."""
        override = {"train": "train", self.spec.dev_splits[0]: "dev", self.spec.test_splits[0]: "test"}.get(split)
        if override in self.file_overrides:
            return self.file_overrides[override]
        if split == "diagnostic":
            path = self.find_diagnostic_file()
            if path is None:
                raise FileNotFoundError("GLUE diagnostic (AX) file not found; pass --diagnostic_file")
            return path
        if not self.data_dir:
            raise ValueError(f"--data_dir is required for task {self.name} (or pass --{split}_file)")
        return os.path.join(self.data_dir, split + ".tsv")

    def get_examples(self, split: str) -> list[InputExample]:
        if self.use_tfds:
            return read_tfds_examples(self.spec, split, self.tfds_data_dir)
        path = self.split_path(split)
        kind = split.split("_")[0]
        if split == "diagnostic":
            columns = DIAGNOSTIC_COLUMNS
        elif kind == "test":
            columns = self.spec.test
        elif kind == "dev":
            columns = self.spec.dev or self.spec.train
        else:
            columns = self.spec.train
        examples, malformed = parse_glue_rows(read_tsv_rows(path), columns, self.name, path,
                                              with_labels=kind in ("train", "dev"),
                                              skip_malformed=self.skip_malformed)
        self.malformed[split] = malformed
        return examples


def tfds_split_name(spec: GlueSpec, split: str) -> tuple[str, str]:
    """(TFDS dataset name, split name) for one of our split names."""
    if split == "diagnostic":
        return "glue/ax", "test"
    name = {"train": "train", "dev": "validation", "test": "test"}.get(split)
    if name is None:  # MNLI: dev_matched → validation_matched, test_mismatched → test_mismatched
        kind, rest = split.split("_", 1)
        name = ("validation" if kind == "dev" else kind) + "_" + rest
    return spec.tfds_name, name


def read_tfds_examples(spec: GlueSpec, split: str, data_dir: Optional[str]) -> list[InputExample]:
    """Examples of a GLUE task from TFDS (`download=False`: prepared data only)."""
    import tensorflow_datasets as tfds

    dataset_name, split_name = tfds_split_name(spec, split)
    fields = ("premise", "hypothesis") if split == "diagnostic" else spec.tfds_fields
    try:
        builder = tfds.builder(dataset_name, data_dir=data_dir)
        label_names = None if spec.is_regression else builder.info.features["label"].names
        dataset = tfds.load(dataset_name, split=split_name, data_dir=data_dir, download=False)
    except Exception as e:  # DatasetNotFoundError, AssertionError, ... depending on the TFDS version
        raise FileNotFoundError(f"TFDS dataset {dataset_name} split {split_name} is not prepared under "
                                f"--tfds_data_dir={data_dir} (downloads are disabled): {type(e).__name__}") from e
    examples = []
    for record in tfds.as_numpy(dataset):
        texts = [record[f].decode("utf-8") for f in fields]
        label = record["label"]
        if spec.is_regression:
            label = float(label) if split.split("_")[0] != "test" else None
        else:
            label = label_names[int(label)] if int(label) >= 0 else None
        examples.append(InputExample(str(int(record["idx"])), texts[0], texts[1] if len(texts) > 1 else None, label))
    examples.sort(key=lambda e: int(e.guid))
    return examples


class TextClassificationTask(SentenceTask):
    """Generic classification over tsv/csv files with named or indexed columns.

    Files: `{data_dir}/{train,dev,test}.{tsv,csv}` unless overridden. Labels
    are the sorted distinct training labels (numerically if all integers).
    Metrics: accuracy (+ F1 of label index 1 for binary tasks).
    """

    def __init__(self, data_dir=None, text_column="text_a", label_column="label", text_b_column=None,
                 file_overrides=None, name="text_classification", labels=None):
        super().__init__(name, double_unordered=False)
        self.data_dir = data_dir
        self.text_column, self.label_column, self.text_b_column = text_column, label_column, text_b_column
        self.file_overrides = {k: v for k, v in (file_overrides or {}).items() if v}
        self._labels = tuple(labels) if labels else None
        self._cache = {}

    @property
    def labels(self):
        if self._labels is None:
            try:
                found = {e.label for e in self.get_examples("train")}
            except FileNotFoundError:  # evaluation-only runs: the dev labels
                found = {e.label for e in self.get_examples("dev")}
            ints = all(str(x).lstrip("-").isdigit() for x in found)
            self._labels = tuple(sorted(found, key=(lambda x: int(x)) if ints else None))
        return self._labels

    @property
    def metric_names(self):
        return ("accuracy", "f1") if len(self.labels) == 2 else ("accuracy",)

    def split_path(self, split: str) -> Optional[str]:
        if split in self.file_overrides:
            return self.file_overrides[split]
        if not self.data_dir:
            raise ValueError(f"--data_dir is required for task {self.name} (or pass --{split}_file)")
        for ext in (".tsv", ".csv"):
            path = os.path.join(self.data_dir, split + ext)
            if os.path.isfile(path):
                return path
        return None

    def test_splits(self):
        return [("test", f"{self.name}.tsv")] if self.split_path("test") else []

    def get_examples(self, split: str) -> list[InputExample]:
        if split in self._cache:
            return self._cache[split]
        path = self.split_path(split)
        if path is None:
            raise FileNotFoundError(f"data file not found: {os.path.join(self.data_dir, split)}.tsv (or .csv)")
        rows = read_delimited(path)
        if not rows:
            raise ValueError(f"{path}: empty file")
        header = self._detect_header(rows)
        width = len(rows[0])
        text_col = resolve_column(self.text_column, header, "text_column", path)
        text_b_col = resolve_column(self.text_b_column, header, "text_b_column", path)
        if text_col is None:
            raise ValueError("--text_column is required for task text_classification")
        try:
            label_col = resolve_column(self.label_column, header, "label_column", path)
        except ValueError:
            if split != "test":
                raise
            label_col = None  # unlabeled test file
        if label_col is not None and not -width <= label_col < width:
            if split != "test":
                raise ValueError(f"--label_column: index {label_col} out of range for {path} ({width} fields)")
            label_col = None
        if label_col is None and split != "test":
            raise ValueError(f"--label_column is required for the {split} split of {path}")
        id_col = next((header.index(n) for n in ("qid", "id", "index") if header and n in header), None)
        examples = []
        for i, row in enumerate(rows[1 if header is not None else 0:]):
            if len(row) != width:
                raise ValueError(f"{path}: line {i + 1 + (header is not None)} has {len(row)} fields, "
                                 f"expected {width}")
            examples.append(InputExample(
                row[id_col] if id_col is not None else str(i), row[text_col],
                row[text_b_col] if text_b_col is not None else None,
                row[label_col] if label_col is not None else None,
                source=f"{path}:{i + 1 + (header is not None)}"))
        self._cache[split] = examples
        return examples

    @staticmethod
    def _is_name(spec) -> bool:
        """A column given by name rather than by index."""
        return spec is not None and not str(spec).lstrip("-").isdigit()

    def _detect_header(self, rows) -> Optional[list[str]]:
        """The first row is a header if it names a requested column, or if the
        label column's first value is not a value seen in the other rows."""
        first = rows[0]
        names = [c for c in (self.text_column, self.label_column, self.text_b_column) if self._is_name(c)]
        if any(n in first for n in names):
            return first
        if names:
            return None
        if self.label_column is not None and len(rows) > 1:
            col = int(self.label_column)
            others = {r[col] for r in rows[1:101] if len(r) > abs(col)}
            if len(first) > abs(col) and first[col] not in others:
                return first
        return None


def get_task(name: str, data_dir: Optional[str] = None, **kwargs):
    """The task called `name` (case-insensitive GLUE names, `text_classification`,
    `squad`, `squad_v2`). Unknown names raise a ValueError naming `--task`."""
    key = name.strip()
    canonical = TASK_ALIASES.get(key.lower())
    if canonical:
        glue_kwargs = {k: kwargs[k] for k in ("file_overrides", "tfds_data_dir", "use_tfds", "diagnostic_file",
                                              "double_unordered", "skip_malformed") if k in kwargs}
        return GlueTask(GLUE_SPECS[canonical], data_dir=data_dir, **glue_kwargs)
    if key.lower() in ("text_classification", "classification"):
        keys = ("text_column", "label_column", "text_b_column", "file_overrides")
        return TextClassificationTask(data_dir=data_dir, **{k: kwargs[k] for k in keys if k in kwargs})
    if key.lower() in ("squad", "squad_v1", "squad1.1", "squad_v1.1", "squad_v2", "squad2", "squad2.0", "squadv2"):
        from electra_tf.finetuning.squad import SquadTask
        keys = ("file_overrides", "max_query_length", "doc_stride", "n_best_size", "max_answer_length",
                "train_articles", "dev_articles", "null_score_threshold", "do_lower_case")
        return SquadTask(v2="2" in key, data_dir=data_dir, **{k: kwargs[k] for k in keys if k in kwargs})
    choices = sorted(GLUE_TASKS) + ["squad", "squad_v2", "text_classification"]
    raise ValueError(f"--task: unknown task {name!r}; choose from {', '.join(choices)}")


def default_epochs(task) -> Optional[float]:
    """The official per-task epoch default, or None for `get_config`'s."""
    return DEFAULT_EPOCHS.get(task.name)


__all__ = ["InputExample", "GlueSpec", "GLUE_SPECS", "GlueTask", "TextClassificationTask", "get_task",
           "encode_pairs", "truncate_pair", "read_tsv_rows", "EvalSet"]
