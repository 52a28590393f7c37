"""File operations on the build's output: local paths by ``os``, URLs (``gs://``, ...) by ``tf.io.gfile``.

The pool engine writes local files and must not import TensorFlow in its parent process
(``data_prep.pool`` forks workers only while TensorFlow is not loaded), so local paths never
touch ``tf.io.gfile``.  The Beam engine's workers may write to an object store: there,
``tf.io.gfile`` does the work, and an object appears whole when its writer closes, so
``write_json`` needs no temp file (locally it keeps ``write_json_atomic``'s temp + rename).

Example:

>>> import tempfile, os
>>> from data_prep import fs
>>> d = tempfile.mkdtemp()
>>> fs.write_json(os.path.join(d, "a.json"), {"x": 1})
>>> fs.read_json(os.path.join(d, "a.json")), fs.size(os.path.join(d, "a.json")), fs.is_url("gs://b/x")
({'x': 1}, 13, True)
"""

from __future__ import annotations

import glob as glob_lib
import io
import json
import os
from typing import Any, Optional

from electra_tf.text.manifest import sha256_file, sha256_stream, write_json_atomic


def is_url(path: str) -> bool:
    return "://" in path


def _gfile():
    import tensorflow as tf
    return tf.io.gfile


def join_path(directory: str, name: str) -> str:
    """``os.path.join``, or ``directory/name`` for a URL."""
    return f"{directory.rstrip('/')}/{name}" if is_url(directory) else os.path.join(directory, name)


def exists(path: str) -> bool:
    return _gfile().exists(path) if is_url(path) else os.path.exists(path)


def size(path: str) -> int:
    """The file's size in bytes; FileNotFoundError if it is missing."""
    if not is_url(path):
        return os.path.getsize(path)
    if not exists(path):
        raise FileNotFoundError(path)
    return _gfile().stat(path).length


def sha256(path: str) -> str:
    if not is_url(path):
        return sha256_file(path)
    with _gfile().GFile(path, "rb") as f:
        return sha256_stream(f)


def makedirs(path: str) -> None:
    if is_url(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def glob(pattern_dir: str, pattern: str) -> list[str]:
    """Files of directory ``pattern_dir`` matching the glob ``pattern`` (the directory taken literally)."""
    if is_url(pattern_dir):
        return _gfile().glob(join_path(pattern_dir, pattern))
    return glob_lib.glob(os.path.join(glob_lib.escape(pattern_dir), pattern))


def replace(source: str, target: str) -> None:
    """Rename ``source`` over ``target`` (on object stores a copy + delete: not atomic)."""
    if is_url(source):
        _gfile().rename(source, target, overwrite=True)
    else:
        os.replace(source, target)


def remove(path: str) -> None:
    """Delete ``path`` if it exists."""
    try:
        _gfile().remove(path) if is_url(path) else os.unlink(path)
    except FileNotFoundError:
        pass
    except Exception as e:  # tf.errors.NotFoundError is not a FileNotFoundError
        if type(e).__name__ != "NotFoundError":
            raise


def read_json(path: str) -> Optional[dict]:
    """The JSON object in ``path``, or None if it is missing or unreadable."""
    try:
        if is_url(path):
            if not exists(path):
                return None
            with _gfile().GFile(path, "r") as f:
                return json.load(f)
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as ``write_json_atomic`` does; whole or not at all."""
    if not is_url(path):
        write_json_atomic(path, obj)
        return
    with _gfile().GFile(path, "w") as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------
# Reading inputs at URLs (data_prep.corpus.inputs uses these for URL inputs only)
# --------------------------------------------------------------------------

class _GFileRaw(io.RawIOBase):
    """A ``tf.io.gfile.GFile`` as a raw stream, so that ``io.BufferedReader`` gives it the file API
    (``readline(size)``, ``seek``, ``tell``) that the corpus readers use on local files."""

    def __init__(self, path: str):
        self._file = _gfile().GFile(path, "rb")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._file.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._file.seek(offset, whence)
        return self._file.tell()

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()
        super().close()


def open_url(path: str):
    """A URL opened for reading bytes, with the API of ``open(path, "rb")``."""
    return io.BufferedReader(_GFileRaw(path), buffer_size=1 << 20)


def stat_url(path: str) -> tuple[int, int]:
    """``(size, mtime in ns)`` of a file at a URL."""
    stat = _gfile().stat(path)
    return stat.length, stat.mtime_nsec


def isdir_url(path: str) -> bool:
    return _gfile().isdir(path)


def isfile_url(path: str) -> bool:
    return _gfile().exists(path) and not _gfile().isdir(path)


def glob_url(pattern: str) -> list[str]:
    return sorted(p for p in _gfile().glob(pattern) if not _gfile().isdir(p))


def files_under_url(directory: str) -> list[str]:
    """The files below ``directory`` (hidden ones skipped), sorted."""
    found = []
    for root, dirs, names in _gfile().walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if any(part.startswith(".") for part in root[len(directory):].split("/")):
            continue
        found.extend(join_path(root, n) for n in names if not n.startswith("."))
    return sorted(found)
