"""Building one shard of a plan (runs in the worker process that owns it).

Each shard depends only on the plan and its index:

* its documents are a fixed set of byte ranges (``corpus.byte_ranges.plan_byte_ranges``)
  or TFDS example ranges;
* its RNG is ``random.Random("<seed>:<shard>")``;
* it is written to ``<shard>.tmp-<pid>`` and renamed, then a sidecar
  ``<shard>.done.json`` (counts, size, sha256, plan fingerprint) is written;
* with ``eval_fraction`` > 0 the documents that ``held_out`` picks (by a hash
  of their text, so the choice does not depend on shards, seeds or re-runs) go
  to the eval shard of the same index instead (its own packer RNG, file and
  sidecar, written before the training shard's sidecar marks the pair done).

``ShardWriter`` tokenises a batch of documents, packs it
(``data_prep.packing``), serialises the examples and counts what the manifest
reports: examples, tokens, [UNK]s, single-segment examples, and the tokens
the packer drops when it truncates to ``max_seq_length`` (as the official
ELECTRA code does: segment A is cut to ``max - 2`` tokens, B to what is left),
plus the sentences that can never fit whole (more than ``max - 2`` tokens).

Example:

>>> import tempfile
>>> from data_prep.plan import BuildOptions, make_plan
>>> from data_prep.shard_writer import ShardWriter
>>> d = tempfile.mkdtemp()
>>> _ = open(d + "/c.txt", "w").write("the cat sat on the mat the cat sat\\n")
>>> _ = open(d + "/v.txt", "w").write("[PAD]\\n[UNK]\\n[CLS]\\n[SEP]\\n[MASK]\\nthe\\ncat\\nsat\\n")
>>> plan = make_plan(BuildOptions(inputs=d + "/c.txt", output_dir=d + "/out",
...                               vocab_file=d + "/v.txt", max_seq_length=8, num_shards=1))
>>> writer = ShardWriter(plan, 0)
>>> records = []
>>> writer.write_documents([["the cat sat on the mat the cat sat"]], records.append)
>>> len(records), writer.stats.num_text_tokens, writer.stats.num_truncated_tokens
(1, 6, 3)
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import random
from typing import Callable, Optional

import numpy as np

from data_prep import fs
from data_prep.corpus.documents import RangeStats, iter_documents
from data_prep.corpus.sentences import document_sentences
from data_prep.packing import ExamplePacker, ExampleSerializer, SpecialIds, assemble
from electra_tf.text.held_out import document_text, held_out_flags
from electra_tf.text.manifest import sha256_file

_TOKENIZER_CACHE: dict = {}
_PROGRESS_QUEUE = None


# --------------------------------------------------------------------------
# Per-process state: the tokenizer and where progress goes
# --------------------------------------------------------------------------

def _tokenizer_key(vocab_file: str, vocab_sha256: str, do_lower_case: bool,
                   strip_accents: Optional[bool]) -> tuple:
    return (vocab_file, vocab_sha256, do_lower_case, strip_accents)


def cache_tokenizer(tokenizer, vocab_file: str, do_lower_case: bool = True,
                    strip_accents: Optional[bool] = None) -> None:
    """Make this process use ``tokenizer`` for shards with this vocab and casing.

    ``tokenizer`` needs ``tokenize_flat``, ``special_ids`` and ``unk_id`` (the
    ``WordPieceTokenizer`` interface).  Used to warm a worker up before a
    timed build (``bench/data_prep_bench.py``); a build with another vocab or
    casing builds its own ``WordPieceTokenizer`` as usual.
    """
    vocab_file = os.path.abspath(vocab_file)
    _TOKENIZER_CACHE.clear()
    key = _tokenizer_key(vocab_file, sha256_file(vocab_file), do_lower_case, strip_accents)
    _TOKENIZER_CACHE[key] = tokenizer


def _tokenizer(plan):
    options = plan.options
    key = _tokenizer_key(options.vocab_file, plan.vocab_sha256, options.do_lower_case,
                         options.strip_accents)
    if key not in _TOKENIZER_CACHE:
        from electra_tf.text.tokenizers import load_tokenizer
        _TOKENIZER_CACHE.clear()
        _TOKENIZER_CACHE[key] = load_tokenizer(
            options.vocab_file, options.do_lower_case, options.strip_accents)
    return _TOKENIZER_CACHE[key]


def set_progress_queue(progress_queue) -> None:
    """Where ``build_shard`` puts ``(shard, bytes, examples, skipped)`` increments (None: nowhere)."""
    global _PROGRESS_QUEUE
    _PROGRESS_QUEUE = progress_queue


def _report(shard: int, bytes_read: int, examples: int, skipped: int) -> None:
    if _PROGRESS_QUEUE is not None:
        _PROGRESS_QUEUE.put((shard, bytes_read, examples, skipped))


# --------------------------------------------------------------------------
# Tokenise, pack, serialise
# --------------------------------------------------------------------------

@dataclasses.dataclass
class ShardStats:
    """A shard's counts (its sidecar record; summed into the manifest)."""
    num_documents: int = 0
    num_sentences: int = 0
    num_examples: int = 0
    num_tokens: int = 0
    num_text_tokens: int = 0
    num_unk_tokens: int = 0
    num_single_segment: int = 0
    num_truncated_tokens: int = 0     # tokenised, but cut off by the packer's truncation
    num_long_sentences: int = 0       # sentences of more than max_seq_length - 2 tokens
    num_skipped_lines: int = 0
    num_nul_bytes_removed: int = 0
    bytes_read: int = 0
    num_duplicate_documents: int = 0  # documents dropped by --dedup_documents (training shard's record)


class ShardWriter:
    """Tokenises, packs, serialises and writes the documents of one shard."""

    def __init__(self, plan, shard: int, rng_key: str = ""):
        self.plan, self.shard = plan, shard
        self.tokenizer = _tokenizer(plan)
        options = plan.options
        rng = random.Random(f"{options.seed}:{shard}{rng_key}")
        self.packer = ExamplePacker(options.max_seq_length, rng, options.short_seq_prob,
                                    options.single_segment_prob)
        self.serializer = ExampleSerializer(options.max_seq_length)
        ids = self.tokenizer.special_ids
        self.special = SpecialIds(cls=ids["cls"], sep=ids["sep"], pad=ids["pad"])
        self.stats = ShardStats()

    def write_documents(self, docs: list[list[str]], write: Callable[[bytes], object]) -> None:
        """Pack ``docs`` (lists of paragraphs) and ``write`` each serialised example."""
        if not docs:
            return
        sentences, counts = [], []
        for paragraphs in docs:
            doc_sentences = document_sentences(paragraphs)
            sentences.extend(doc_sentences)
            counts.append(len(doc_sentences))
        flat, lengths = self.tokenizer.tokenize_flat(sentences)
        max_seq_length = self.plan.options.max_seq_length
        self.stats.num_long_sentences += int((lengths > max_seq_length - 2).sum())
        starts = (np.cumsum(lengths) - lengths).tolist()
        length_list = lengths.tolist()
        specs, position = [], 0
        for count in counts:
            end = position + count
            specs.extend(self.packer.pack_document(starts[position:end],
                                                   length_list[position:end]))
            position = end
        self.stats.num_documents += sum(1 for c in counts if c)
        self.stats.num_sentences += len(sentences)
        kept = sum(spec.a_length + spec.b_length for spec in specs)
        self.stats.num_truncated_tokens += int(lengths.sum()) - kept
        if not specs:
            return
        batch = assemble(flat, specs, max_seq_length, self.special)
        for record in self.serializer.serialize(batch):
            write(record)
        self._count(batch)

    def _count(self, batch) -> None:
        stats = self.stats
        real = batch.input_mask.astype(bool)
        stats.num_examples += len(batch.lengths)
        stats.num_tokens += int(batch.lengths.sum())
        specials = 2 + (batch.segment_ids.max(axis=1) > 0).astype(np.int64)
        stats.num_text_tokens += int((batch.lengths - specials).sum())
        stats.num_unk_tokens += int(((batch.input_ids == self.tokenizer.unk_id) & real).sum())
        stats.num_single_segment += int((batch.segment_ids.max(axis=1) == 0).sum())


def held_out(paragraphs: list[str], fraction: float) -> bool:
    """Whether one document belongs to the held-out split (``electra_tf.text.held_out``'s rule)."""
    return held_out_flags([document_text(paragraphs)], fraction)[0]


def split_documents(docs: list[list[str]], fraction: float) -> tuple[list, list]:
    """`(training documents, held-out documents)` of a batch, in their order."""
    flags = held_out_flags([document_text(doc) for doc in docs], fraction)
    train, held = [], []
    for doc, is_held in zip(docs, flags):
        (held if is_held else train).append(doc)
    return train, held


def iter_shard_documents(plan, shard: int, stats: RangeStats):
    """Batches of documents of shard ``shard`` (files or TFDS)."""
    if plan.options.tfds_name:
        from data_prep.tfds_input import iter_tfds_documents
        yield from iter_tfds_documents(plan, shard, stats)
        return
    for byte_range in plan.shard_ranges[shard]:
        file = plan.files[byte_range.file_index]
        yield from iter_documents(file, byte_range, stats, plan.options.text_field)


# --------------------------------------------------------------------------
# One shard, atomically, with its sidecar
# --------------------------------------------------------------------------

def sidecar_path(shard_path: str) -> str:
    return shard_path + ".done.json"


def shard_paths(plan, shard: int) -> list[str]:
    """The shard's final paths: the training shard, then its eval shard (with --eval_fraction)."""
    return [plan.shard_path(shard)] + ([plan.eval_shard_path(shard)] if plan.options.eval_fraction else [])


def build_shard(plan, shard: int, drop_positions: frozenset = frozenset()) -> dict:
    """Build shard ``shard`` atomically (temp files, rename, sidecars); return its sidecar record.

    ``drop_positions``: positions of the shard's documents to leave out (``data_prep.dedup``).
    """
    paths = shard_paths(plan, shard)
    tmps = [f"{path}.tmp-{os.getpid()}" for path in paths]
    try:
        stats = write_shard(plan, shard, tmps, drop_positions)
        for tmp, path in zip(tmps, paths):
            os.replace(tmp, path)
    finally:
        for tmp in tmps:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return write_sidecars(plan, shard, stats)


def write_shard(plan, shard: int, tmps: list[str], drop_positions: frozenset = frozenset()) -> list[ShardStats]:
    """Write the shard's examples to ``tmps`` (as ``shard_paths``); return their stats.

    Shared by both engines; the caller renames the files and writes the sidecars
    (``write_sidecars``).  ``tmps`` may be URLs (``tf.io.TFRecordWriter`` writes them).
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the many short-lived lists are acyclic; GC passes cost ~20 %
    try:
        return _write_shard(plan, shard, tmps, drop_positions)
    finally:
        if gc_was_enabled:
            gc.enable()


def _write_shard(plan, shard: int, tmps: list[str], drop_positions: frozenset) -> list[ShardStats]:
    import tensorflow as tf
    fraction = plan.options.eval_fraction
    writers = [ShardWriter(plan, shard)] + ([ShardWriter(plan, shard, ":eval")] if fraction else [])
    range_stats = RangeStats()
    reported = [0, 0, 0]
    position = duplicates = 0

    def report():
        now = [range_stats.bytes_read, writers[0].stats.num_examples, range_stats.skipped_lines]
        _report(shard, *(a - b for a, b in zip(now, reported)))
        reported[:] = now

    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(tf.io.TFRecordWriter(tmp)) for tmp in tmps]
        for docs in iter_shard_documents(plan, shard, range_stats):
            if drop_positions:
                kept = [doc for i, doc in enumerate(docs, position) if i not in drop_positions]
                position, duplicates = position + len(docs), duplicates + len(docs) - len(kept)
                docs = kept
            for writer, part, file in zip(writers, split_documents(docs, fraction), files):
                writer.write_documents(part, file.write)
            report()
    report()
    stats = writers[0].stats
    stats.num_skipped_lines = range_stats.skipped_lines
    stats.num_nul_bytes_removed = range_stats.nul_bytes
    stats.bytes_read = range_stats.bytes_read
    stats.num_duplicate_documents = duplicates
    return [writer.stats for writer in writers]


def file_digests(paths: list[str]) -> list[tuple[int, str]]:
    """``(size, sha256)`` of each file (what its sidecar records)."""
    return [(fs.size(path), fs.sha256(path)) for path in paths]


def write_sidecars(plan, shard: int, stats: list[ShardStats],
                   digests: Optional[list[tuple[int, str]]] = None) -> dict:
    """Write the sidecars of the shard's final files (written by ``write_shard``); return the training one's.

    ``digests``: the files' ``file_digests`` if already known (the Beam engine's workers hash their
    temps in parallel, so the finaliser does not read every shard back); by default computed here.
    Idempotent: a re-run writes the same records.
    """
    paths = shard_paths(plan, shard)
    digests = digests or file_digests(paths)
    records = [_sidecar_record(plan, path, shard_stats, digest)
               for path, shard_stats, digest in zip(paths, stats, digests)]
    # The training shard's sidecar last: it marks the shard (and its eval shard) done.
    for path, record in reversed(list(zip(paths, records))):
        fs.write_json(sidecar_path(path), record)
    return records[0]


def _sidecar_record(plan, path: str, stats: ShardStats, digest: tuple[int, str]) -> dict:
    record = dataclasses.asdict(stats)
    if not plan.options.dedup_documents:  # sidecars of builds without dedup stay as they were
        record.pop("num_duplicate_documents")
    size, sha256 = digest
    return {"fingerprint": plan.fingerprint, "shard": os.path.basename(path),
            "size_bytes": size, "sha256": sha256, **record}


def read_sidecar(plan, shard: int) -> Optional[dict]:
    """The shard's sidecar if the shard (with its eval shard, if any) is complete for this plan, else None."""
    if plan.options.eval_fraction and _read_sidecar(plan, plan.eval_shard_path(shard)) is None:
        return None
    return _read_sidecar(plan, plan.shard_path(shard))


def read_eval_sidecar(plan, shard: int) -> Optional[dict]:
    """The eval shard's sidecar (None without --eval_fraction or if incomplete)."""
    return _read_sidecar(plan, plan.eval_shard_path(shard)) if plan.options.eval_fraction else None


def _read_sidecar(plan, path: str) -> Optional[dict]:
    record = fs.read_json(sidecar_path(path))
    try:
        if record and record.get("fingerprint") == plan.fingerprint and record.get("size_bytes") == fs.size(path):
            return record
    except OSError:
        pass
    return None
