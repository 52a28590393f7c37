"""The nine GLUE tasks, read from the GLUE tsv layout or from TFDS.

The tsv layout is the one `download_glue_data.py` writes: CoLA train/dev
have no header, MRPC's header starts with a UTF-8 BOM, MNLI has
dev_matched/dev_mismatched, malformed QQP rows are skipped and counted with
`skip_malformed`. With `use_tfds` the same data comes from TFDS (`glue/*`,
no download; `tfds_input`).

Main metrics (`main_metric_key`, used to pick the best dev epoch and named in
`metrics.json`) are those of the official README's results table, which are
also the official scorers' (`classification_metrics.py`: `MCCScorer` for
CoLA, `RegressionScorer` for STS-B, `AccuracyScorer` for every other task):
CoLA Matthews correlation, STS-B Spearman (Pearson reported beside), accuracy
for SST-2, MRPC, QQP (F1 of label 1 reported beside, as the GLUE leaderboard
shows it), MNLI (matched; mismatched beside), QNLI, RTE and WNLI (not in the
official code; accuracy as on GLUE). All scores are in percent. RTE and STS-B
train for 10 epochs by default, as in the paper.

Example:

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> _ = open(os.path.join(d, "dev.tsv"), "w").write("sentence\\tlabel\\ngood film\\t1\\nbad film\\t0\\n")
>>> task = GlueTask(GLUE_SPECS["SST-2"], data_dir=d)
>>> [(e.text_a, e.label) for e in task.get_examples("dev")]
[('good film', '1'), ('bad film', '0')]
>>> task.main_metric, task.metric_names, GlueTask(GLUE_SPECS["RTE"]).default_epochs
('accuracy', ('accuracy',), 10)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from absl import logging

from electra_tf.finetuning.readers import read_tsv_rows
from electra_tf.finetuning.sentence import SentenceTask
from electra_tf.finetuning.task import InputExample
from electra_tf.finetuning.tfds_input import read_tfds_examples

GLUE_TASKS = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI")


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
    default_epochs: Optional[float] = None  # None: the config's `finetune_epochs` (3)

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
                      tfds_fields=("sentence1", "sentence2"), unordered_pair=True, default_epochs=10),
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
                    default_epochs=10, **_PAIR),
    "WNLI": GlueSpec("WNLI", ("0", "1"), ("accuracy",), "accuracy", submission_names=("WNLI.tsv",),
                     tfds_name="glue/wnli", tfds_fields=("sentence1", "sentence2"), **_PAIR),
}
DIAGNOSTIC_COLUMNS = Columns(1, 2, index=0)  # GLUE AX, predicted by the MNLI model
TASK_ALIASES = {
    "cola": "CoLA", "sst-2": "SST-2", "sst2": "SST-2", "sst": "SST-2", "mrpc": "MRPC", "sts-b": "STS-B",
    "stsb": "STS-B", "sts": "STS-B", "qqp": "QQP", "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI",
}


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
        self.default_epochs = spec.default_epochs
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

    def split_columns(self, split: str) -> Columns:
        kind = split.split("_")[0]
        if split == "diagnostic":
            return DIAGNOSTIC_COLUMNS
        if kind == "test":
            return self.spec.test
        if kind == "dev":
            return self.spec.dev or self.spec.train
        return self.spec.train

    def get_examples(self, split: str) -> list[InputExample]:
        if self.use_tfds:
            return read_tfds_examples(self.spec, split, self.tfds_data_dir)
        path = self.split_path(split)
        examples, malformed = parse_glue_rows(read_tsv_rows(path), self.split_columns(split), self.name, path,
                                              with_labels=split.split("_")[0] in ("train", "dev"),
                                              skip_malformed=self.skip_malformed)
        self.malformed[split] = malformed
        return examples
