"""Rows of tsv and csv files, and columns named by header or index.

GLUE tsv files are split on '\\n' and '\\t' only, without quoting (the
official reader's `quotechar=None`); `.csv` files use standard csv quoting.

Example:

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "train.csv")
>>> _ = open(path, "w").write('label,review\\n1,"good, really"\\n')
>>> rows = read_delimited(path)
>>> rows
[['label', 'review'], ['1', 'good, really']]
>>> resolve_column("review", rows[0], "text_column", path), resolve_column("0", None, "label_column", path)
(1, 0)
"""

from __future__ import annotations

import csv
import os
from typing import Optional


def _check_exists(path: str) -> None:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")


def read_tsv_rows(path: str, encoding: str = "utf-8-sig") -> list[list[str]]:
    """Rows of a GLUE tsv: no quoting; a UTF-8 BOM and trailing '\\r' are dropped."""
    _check_exists(path)
    with open(path, encoding=encoding, newline="") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r").split("\t") for line in lines]


def read_delimited(path: str) -> list[list[str]]:
    """Rows of a generic tsv (no quoting) or csv (standard quoting, blank lines dropped)."""
    if not path.lower().endswith(".csv"):
        return read_tsv_rows(path)
    _check_exists(path)
    with open(path, encoding="utf-8-sig", newline="") as f:
        return [row for row in csv.reader(f) if row]


def resolve_column(spec: Optional[str], header: Optional[list[str]], flag: str, path: str) -> Optional[int]:
    """A column given by name (needs a header) or by 0-based index; None when `spec` is unset."""
    if spec is None or spec == "":
        return None
    spec = str(spec)
    if header is not None and spec in header:
        return header.index(spec)
    if spec.lstrip("-").isdigit():
        return int(spec)
    raise ValueError(f"--{flag}: column {spec!r} is not in the header of {path} "
                     f"({header if header is not None else 'no header detected'})")
