"""Generic text classification over tsv/csv files (`--task=text_classification`).

Columns (`text_column`, `label_column`, optional `text_b_column`) are given
by header name or 0-based index; whether the first row is a header is
detected. Labels are the sorted distinct training labels (numerically when
all are integers).

Example:

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> _ = open(os.path.join(d, "train.tsv"), "w").write("label\\ttext_a\\n10\\tgood\\n9\\tbad\\n")
>>> task = TextClassificationTask(data_dir=d)
>>> task.labels, task.metric_names, [e.text_a for e in task.get_examples("train")]
(('9', '10'), ('accuracy', 'f1'), ['good', 'bad'])
"""

from __future__ import annotations

import os
from typing import Optional

from electra_tf.finetuning.readers import read_delimited, resolve_column
from electra_tf.finetuning.sentence import SentenceTask
from electra_tf.finetuning.task import InputExample

ID_COLUMNS = ("qid", "id", "index")  # a header column of one of these names gives the example ids


def _is_name(spec) -> bool:
    """A column given by name rather than by index."""
    return spec is not None and not str(spec).lstrip("-").isdigit()


class TextClassificationTask(SentenceTask):
    """Classification over `{data_dir}/{train,dev,test}.{tsv,csv}` (or the given files).

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
        if split not in self._cache:
            self._cache[split] = self._read_examples(split)
        return self._cache[split]

    def _read_examples(self, split: str) -> list[InputExample]:
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
        label_col = self._label_column(split, header, width, path)
        id_col = next((header.index(n) for n in ID_COLUMNS if header and n in header), None)
        examples = []
        for i, row in enumerate(rows[1 if header is not None else 0:]):
            line = i + 1 + (header is not None)
            if len(row) != width:
                raise ValueError(f"{path}: line {line} has {len(row)} fields, expected {width}")
            examples.append(InputExample(
                row[id_col] if id_col is not None else str(i), row[text_col],
                row[text_b_col] if text_b_col is not None else None,
                row[label_col] if label_col is not None else None, source=f"{path}:{line}"))
        return examples

    def _label_column(self, split, header, width, path) -> Optional[int]:
        """The label column; None for an unlabeled test file, an error for other splits."""
        try:
            label_col = resolve_column(self.label_column, header, "label_column", path)
        except ValueError:
            if split != "test":
                raise
            return None
        if label_col is not None and not -width <= label_col < width:
            if split != "test":
                raise ValueError(f"--label_column: index {label_col} out of range for {path} ({width} fields)")
            return None
        if label_col is None and split != "test":
            raise ValueError(f"--label_column is required for the {split} split of {path}")
        return label_col

    def _detect_header(self, rows) -> Optional[list[str]]:
        """The first row is a header if it names a requested column, or if the
        label column's first value is not a value seen in the other rows."""
        first = rows[0]
        names = [c for c in (self.text_column, self.label_column, self.text_b_column) if _is_name(c)]
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
