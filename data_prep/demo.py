"""Offline demo pre-training dataset built from Python's own documentation.

No download: the text is ``pydoc_data.topics.topics`` (the ``help()`` topics,
~0.5 MB) plus the docstrings of a fixed list of standard-library modules,
written as a plain-text corpus (one paragraph per line, a blank line between
documents).  A WordPiece vocab of exactly ``vocab_size`` tokens is learned on
it with ``data_prep.build_vocab`` and the shards + manifest are built with the
regular builder.  Layout of ``data_dir``::

    corpus/python_docs.txt   the corpus
    vocab.txt                the learned vocab
    manifest.json, pretrain_data.tfrecord-*   the dataset
    eval_data.tfrecord-*     the held-out documents (``EVAL_FRACTION``), for the eval curve

Idempotent: a valid manifest built with the same settings returns at once.
Takes well under a minute on 2 cores.

Example:

>>> import tempfile
>>> from data_prep.demo import build_demo_dataset
>>> from electra_tf.text.manifest import load_manifest
>>> data_dir = build_demo_dataset(tempfile.mkdtemp() + "/demo", log=lambda m: None)
>>> manifest = load_manifest(data_dir)
>>> manifest["vocab_size"], manifest["max_seq_length"], manifest["num_examples"] > 1000
(8192, 128, True)
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import warnings
from typing import Callable, Iterator

from electra_tf.text.manifest import load_manifest, sha256_file, write_text_atomic

CORPUS_NAME = os.path.join("corpus", "python_docs.txt")
VOCAB_NAME = "vocab.txt"
SERIAL_BELOW_BYTES = 8 << 20  # spawning TF workers costs more than it saves below this
EVAL_FRACTION = 0.1  # of the documents: ~200 held-out examples, a steady enough eval curve

# Pure-Python, side-effect-free standard-library modules with rich docstrings.
DOC_MODULES = (
    "abc", "argparse", "ast", "asyncio", "base64", "bisect", "calendar", "cmd", "codecs",
    "collections", "colorsys", "configparser", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "doctest", "email", "enum", "filecmp", "fnmatch",
    "fractions", "ftplib", "functools", "getopt", "gettext", "glob", "gzip", "heapq", "hmac",
    "html", "http.client", "http.server", "imaplib", "inspect", "ipaddress", "json", "locale",
    "logging", "mailbox", "numbers", "operator", "optparse", "os", "pathlib", "pdb", "pickle",
    "pkgutil", "platform", "plistlib", "poplib", "pprint", "profile", "pydoc", "queue",
    "quopri", "random", "re", "reprlib", "sched", "secrets", "selectors", "shlex", "shutil",
    "smtplib", "socket", "socketserver", "statistics", "string", "subprocess", "tarfile",
    "tempfile", "textwrap", "threading", "timeit", "tokenize", "trace", "traceback", "types",
    "typing", "unittest", "urllib.parse", "urllib.request", "uuid", "warnings", "wave",
    "weakref", "xml.dom.minidom", "xml.etree.ElementTree", "zipfile", "zipimport",
    "array", "binascii", "builtins", "cmath", "code", "codeop", "compileall", "concurrent.futures",
    "contextvars", "copyreg", "dis", "errno", "fileinput", "gc", "getpass", "graphlib",
    "hashlib", "importlib", "importlib.metadata", "io", "itertools", "keyword", "linecache",
    "lzma", "bz2", "math", "mimetypes", "mmap", "multiprocessing", "netrc", "pyclbr",
    "py_compile", "rlcompleter", "select", "shelve", "signal", "site", "sqlite3", "ssl",
    "stat", "struct", "symtable", "sys", "sysconfig", "tabnanny", "time", "token",
    "tracemalloc", "unicodedata", "venv", "wsgiref.simple_server", "xml.sax",
    "xmlrpc.client", "zipapp", "zlib",
)


def _reflow(text: str) -> list[str]:
    """Paragraphs of a help text, each joined onto one line."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines()]
        lines = [line for line in lines if line and not set(line) <= set("*=-~^\"'`#+")]
        if lines:
            paragraphs.append(" ".join(lines))
    return paragraphs


def _module_docs(name: str) -> Iterator[str]:
    """Module docstring, then public classes/functions/methods' docstrings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            module = importlib.import_module(name)
        except Exception:  # not built into this Python: skip
            return
    if module.__doc__:
        yield module.__doc__
    for attr in sorted(vars(module)):
        obj = vars(module)[attr]
        if attr.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isroutine(obj):
            doc = obj.__doc__
            if isinstance(doc, str) and doc.strip():
                yield f"{attr}. {inspect.cleandoc(doc)}"
            if inspect.isclass(obj):
                for member in sorted(vars(obj)):
                    value = vars(obj)[member]
                    doc = getattr(value, "__doc__", None)
                    if (not member.startswith("_") and inspect.isroutine(value)
                            and isinstance(doc, str) and doc.strip()):
                        yield f"{attr}.{member}. {inspect.cleandoc(doc)}"


def iter_documents() -> Iterator[list[str]]:
    """Documents (lists of paragraphs): help topics, then module docs."""
    from pydoc_data.topics import topics
    for key in sorted(topics):
        paragraphs = _reflow(topics[key])
        if paragraphs:
            yield paragraphs
    for name in DOC_MODULES:
        paragraphs = [p for doc in _module_docs(name) for p in _reflow(doc)]
        if paragraphs:
            yield paragraphs


def write_corpus(path: str) -> int:
    """Write the demo corpus; return its size in bytes."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = "\n\n".join("\n".join(doc) for doc in iter_documents()) + "\n"
    write_text_atomic(path, text)
    return len(text.encode("utf-8"))


def _is_current(data_dir: str, vocab_size: int, max_seq_length: int, eval_fraction: float) -> bool:
    try:
        manifest = load_manifest(data_dir)
        vocab = os.path.join(data_dir, VOCAB_NAME)
        return (manifest["vocab_size"] == vocab_size
                and manifest["max_seq_length"] == max_seq_length
                and manifest.get("eval_fraction", 0.0) == eval_fraction
                and manifest.get("vocab_sha256") == sha256_file(vocab)
                and manifest.get("inputs") == [os.path.abspath(os.path.join(data_dir, CORPUS_NAME))])
    except (ValueError, OSError, KeyError):
        return False


def build_demo_dataset(data_dir: str, *, vocab_size: int = 8192, max_seq_length: int = 128,
                       num_processes: int = 2, eval_fraction: float = EVAL_FRACTION,
                       log: Callable[[str], None] = lambda m: print(f"[demo] {m}", file=sys.stderr)
                       ) -> str:
    """Build (or reuse) the demo dataset in ``data_dir``; return ``data_dir``."""
    if _is_current(data_dir, vocab_size, max_seq_length, eval_fraction):
        return data_dir
    from data_prep.build_vocab import build_vocab
    from data_prep.builder import BuildOptions, make_plan, run_build
    os.makedirs(data_dir, exist_ok=True)
    corpus_path = os.path.abspath(os.path.join(data_dir, CORPUS_NAME))
    vocab_path = os.path.join(data_dir, VOCAB_NAME)
    size = write_corpus(corpus_path)
    log(f"corpus {corpus_path}: {size / 1e6:.2f} MB of Python documentation")
    build_vocab(corpus_path, vocab_path, vocab_size=vocab_size, log=log)
    plan = make_plan(BuildOptions(inputs=corpus_path, output_dir=data_dir, vocab_file=vocab_path,
                                  max_seq_length=max_seq_length,
                                  max_position_embeddings=max(512, max_seq_length),
                                  num_shards=max(1, num_processes), eval_fraction=eval_fraction))
    processes = 1 if size < SERIAL_BELOW_BYTES else num_processes
    run_build(plan, num_processes=processes, log=log)
    return data_dir
