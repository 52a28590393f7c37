"""The ``manifest.json`` contract between data preparation and training.

A pre-training data directory holds TFRecord shards plus ``manifest.json``,
written last and atomically by ``data_prep.build_pretraining_dataset``.
Training code calls ``load_manifest`` + ``validate_manifest`` so that a
mismatch between the data and the model (sequence length, vocabulary) fails
at start-up with an actionable message instead of producing garbage.

This module owns the names both sides must agree on: the TFRecord feature
names (``FEATURE_NAMES``: ``input_ids``, ``input_mask``, ``segment_ids``, each
an int64 list of ``max_seq_length`` values), the special-token keys of the
manifest's ``special_token_ids`` (``SPECIAL_TOKENS``: ``pad``, ``unk``,
``cls``, ``sep``, ``mask`` and their vocab strings) and the shard file names.
Import them from here rather than repeating the strings.

A build with ``--eval_fraction`` also lists held-out shards (``eval_shards`` and
the other ``eval_*`` keys, see ``EVAL_KEYS``); ``eval_view`` presents them as a
manifest of their own, so every reader of shards reads them unchanged.

Versioning: ``format_version`` changes only when a reader must change (a key
renamed, removed or re-typed, or a different shard layout).  New keys are
added without a bump (readers ignore keys they do not know); e.g. the
cleaning/truncation counters ``num_nul_bytes_removed``,
``num_truncated_tokens`` and ``num_long_sentences`` came without one.

Example:

>>> import tempfile
>>> from electra_tf.text.manifest import (FEATURE_NAMES, load_manifest, shard_name, validate_manifest,
...                                       write_json_atomic)
>>> d = tempfile.mkdtemp()
>>> write_json_atomic(d + "/manifest.json", {"format_version": 1, "max_seq_length": 128,
...     "vocab_size": 30522, "shards": [], "num_shards": 0, "num_examples": 10})
>>> validate_manifest(load_manifest(d), max_seq_length=128, vocab_size=30522)
>>> try:
...     validate_manifest(load_manifest(d), max_seq_length=512, data_dir="data/")
... except ValueError as e:
...     print(e)
data in data/ has max_seq_length=128 but the model expects max_seq_length=512: rebuild the data with `python -m data_prep.build_pretraining_dataset ... --max_seq_length=512` or pass --max_seq_length=128 to training
>>> FEATURE_NAMES
('input_ids', 'input_mask', 'segment_ids')
>>> write_json_atomic(d + "/manifest.json", {"format_version": 1, "max_seq_length": 128,
...     "vocab_size": 30522, "shards": [shard_name(0, 1)], "num_shards": 1, "num_examples": 10})
>>> try:
...     load_manifest(d)
... except ValueError as e:
...     print(e)
manifest .../manifest.json lists shard(s) missing on disk: pretrain_data.tfrecord-00000-of-00001: build the data with ...
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any, Optional

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
SHARD_PREFIX = "pretrain_data.tfrecord"
# Held-out documents (``--eval_fraction``) go to shards of their own, listed under the
# manifest's ``eval_*`` keys; the training shards never contain them.
EVAL_SHARD_PREFIX = "eval_data.tfrecord"
EVAL_KEYS = {"shards": "eval_shards", "num_shards": "eval_num_shards", "num_examples": "eval_num_examples",
             "examples_per_shard": "eval_examples_per_shard", "shard_sha256": "eval_shard_sha256",
             "shard_size_bytes": "eval_shard_size_bytes"}
CREATED_BY = "data_prep.build_pretraining_dataset"

# TFRecord features of every example (tf.train.Example, int64 lists of
# max_seq_length values); this order is also the byte order of a serialised
# example (protobuf map keys sorted).
INPUT_IDS, INPUT_MASK, SEGMENT_IDS = "input_ids", "input_mask", "segment_ids"
FEATURE_NAMES = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS)

# The official ExampleBuilder's packing constants; data_prep.packing and training.text_input both follow them.
SINGLE_SEGMENT_TARGET = 100000  # the "infinite" first-segment budget of a single-segment example
MIN_SHORT_TARGET = 5  # a short target length is uniform in [MIN_SHORT_TARGET, max_seq_length]

# Keys of the manifest's ``special_token_ids`` -> the vocab token they name.
SPECIAL_TOKENS = {
    "pad": "[PAD]",
    "unk": "[UNK]",
    "cls": "[CLS]",
    "sep": "[SEP]",
    "mask": "[MASK]",
}
SPECIAL_TOKEN_KEYS = tuple(SPECIAL_TOKENS)
REQUIRED_KEYS = (
    "format_version", "max_seq_length", "vocab_size", "shards", "num_shards", "num_examples",
)


def shard_name(index: int, num_shards: int) -> str:
    """File name of shard ``index`` out of ``num_shards``."""
    return f"{SHARD_PREFIX}-{index:05d}-of-{num_shards:05d}"


def eval_shard_name(index: int, num_shards: int) -> str:
    """File name of held-out shard ``index`` out of ``num_shards``."""
    return f"{EVAL_SHARD_PREFIX}-{index:05d}-of-{num_shards:05d}"


def has_eval_split(manifest: dict) -> bool:
    """Whether the build held documents out (``--eval_fraction``) and kept at least one example."""
    return bool(manifest.get("eval_shards")) and manifest.get("eval_num_examples", 0) > 0


def eval_view(manifest: dict) -> dict:
    """The manifest with its held-out shards in the place of the training shards.

    Readers of shards (the input pipeline, ``verify``) take this view unchanged.
    """
    view = {key: value for key, value in manifest.items() if key not in EVAL_KEYS}
    for key, eval_key in EVAL_KEYS.items():
        if eval_key in manifest:
            view[key] = manifest[eval_key]
    return view


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` (UTF-8, ``\\n`` newlines) to ``path`` via a temp file + ``os.replace``.

    A reader sees the old file or the complete new one, never a torn write;
    the temp file is removed if writing fails.
    """
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, then rename)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str, obj: Any, sort_keys: bool = False) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (``write_text_atomic``)."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n")


def sha256_file(path: str, chunk_size: int = 1 << 20) -> str:
    with open(path, "rb") as f:
        return sha256_stream(f, chunk_size)


def sha256_stream(f, chunk_size: int = 1 << 20) -> str:
    """The sha256 of a binary file object read to its end (local files, `tf.io.gfile.GFile`)."""
    digest = hashlib.sha256()
    for chunk in iter(lambda: f.read(chunk_size), b""):
        digest.update(chunk)
    return digest.hexdigest()


def vocab_differs_from_record(manifest: dict, path: Optional[str] = None) -> Optional[str]:
    """The sha256 of the tokenizer file `path` (default: the manifest's `vocab_file`) when the manifest records
    another `vocab_sha256`; None when they agree or there is nothing to compare (no record, no file)."""
    expected, path = manifest.get("vocab_sha256"), path or manifest.get("vocab_file")
    if not expected or not path or not os.path.isfile(path):
        return None
    actual = sha256_file(path)
    return actual if actual != expected else None


def load_manifest(data_dir: str) -> dict:
    """Read and sanity-check ``<data_dir>/manifest.json``.

    Raises ValueError naming the path if the file is missing, not JSON, lacks
    required keys, or lists shards that are not on disk.
    """
    path = os.path.join(os.fspath(data_dir), MANIFEST_NAME)
    hint = ("build the data with `python -m data_prep.build_pretraining_dataset --input=... "
            f"--output_dir={data_dir} --vocab_file=...`")
    if not os.path.isfile(path):
        raise ValueError(f"no pre-training manifest at {path} (an unfinished or missing build?): {hint}")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"manifest {path} is not readable JSON ({e}): {hint}") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"manifest {path} is not a JSON object: {hint}")
    missing = [k for k in REQUIRED_KEYS if k not in manifest]
    if missing:
        raise ValueError(f"manifest {path} lacks key(s) {', '.join(missing)}: {hint}")
    if manifest["format_version"] != FORMAT_VERSION:
        raise ValueError(f"manifest {path} has format_version={manifest['format_version']}, "
                         f"this code reads format_version={FORMAT_VERSION}: {hint}")
    if len(manifest["shards"]) != manifest["num_shards"]:
        raise ValueError(f"manifest {path} lists {len(manifest['shards'])} shards but "
                         f"num_shards={manifest['num_shards']}: {hint}")
    if len(manifest.get("eval_shards", [])) != manifest.get("eval_num_shards", 0):
        raise ValueError(f"manifest {path} lists {len(manifest['eval_shards'])} eval shards but "
                         f"eval_num_shards={manifest.get('eval_num_shards')}: {hint}")
    listed = manifest["shards"] + manifest.get("eval_shards", [])
    absent = [s for s in listed if not os.path.isfile(os.path.join(data_dir, s))]
    if absent:
        raise ValueError(f"manifest {path} lists shard(s) missing on disk: "
                         f"{', '.join(absent[:3])}{' ...' if len(absent) > 3 else ''}: {hint}")
    return manifest


def validate_manifest(manifest: dict, *, max_seq_length: Optional[int] = None,
                      vocab_size: Optional[int] = None, data_dir: str = "") -> None:
    """Check the data fits the model; raise ValueError naming the field.

    ``max_seq_length`` must match exactly (examples are padded to it).
    ``vocab_size`` is the model's embedding table size: it must be at least
    the data's vocab size (ids must fit) and is expected to equal it.
    """
    where = data_dir or "the data directory"
    if max_seq_length is not None and manifest["max_seq_length"] != max_seq_length:
        have = manifest["max_seq_length"]
        raise ValueError(
            f"data in {where} has max_seq_length={have} but the model expects "
            f"max_seq_length={max_seq_length}: rebuild the data with "
            f"`python -m data_prep.build_pretraining_dataset ... --max_seq_length={max_seq_length}` "
            f"or pass --max_seq_length={have} to training")
    if vocab_size is not None and manifest["vocab_size"] != vocab_size:
        have = manifest["vocab_size"]
        vocab = manifest.get("vocab_file", "its vocab file")
        raise ValueError(
            f"data in {where} has vocab_size={have} (from {vocab}) but the model expects "
            f"vocab_size={vocab_size}: set the model's vocab_size to {have} (e.g. "
            f"--hparams='{{\"vocab_size\": {have}}}') or rebuild the data with "
            f"a vocab of {vocab_size} tokens")
    if manifest["num_examples"] <= 0:
        raise ValueError(f"data in {where} has num_examples={manifest['num_examples']}: "
                         "rebuild it from a non-empty corpus")
