"""Library behind ``python -m data_prep.build_pretraining_dataset``.

The public API is ``BuildOptions`` -> ``make_plan`` -> ``BuildPlan`` ->
``run_build`` -> manifest dict.  The work is split over:

* ``data_prep.plan``: options, validation, shard contents, fingerprint;
* ``data_prep.shard_writer``: one shard (tokenise, pack, serialise, write
  atomically with a ``.done.json`` sidecar) - runs in a worker;
* ``data_prep.pool``: the worker processes and their progress reports;
* this module: what to (re)build, progress, the manifest, clean-up.

A re-run skips shards whose sidecar matches the plan and rebuilds the rest,
so an interrupted (even SIGKILLed) build resumes to byte-identical output.
On bad input the build stops with a ``CorpusError`` and removes every shard,
sidecar and temp file of the plan: no partial dataset is left behind.

The last log line sums up what the data lost on the way: invalid lines
skipped, NUL bytes removed, and tokens dropped by truncation to
``max_seq_length`` (all also in the manifest).

Example:

>>> import tempfile, os
>>> from data_prep.builder import BuildOptions, make_plan, run_build
>>> d = tempfile.mkdtemp()
>>> _ = open(d + "/corpus.txt", "w").write("The cat sat. The dog ran.\\n\\nA new doc.\\n")
>>> _ = open(d + "/vocab.txt", "w").write("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]",
...     "[MASK]", "the", "cat", "sat", "dog", "ran", "a", "new", "doc", "."]) + "\\n")
>>> plan = make_plan(BuildOptions(inputs=d + "/corpus.txt", output_dir=d + "/out",
...                               vocab_file=d + "/vocab.txt", max_seq_length=16))
>>> manifest = run_build(plan, num_processes=1, log=lambda msg: None)
>>> manifest["num_examples"], manifest["num_documents"], manifest["num_truncated_tokens"]
(2, 2, 0)
"""

from __future__ import annotations

import dataclasses
import os
import queue as queue_lib
import sys
import time
from typing import Callable, Optional

from data_prep import fs, shard_writer
from data_prep.corpus.errors import CorpusError
from data_prep.plan import BuildOptions, BuildPlan, make_plan  # noqa: F401  (public API)
from data_prep.pool import WorkerPool, build_in_pool, make_pool
from data_prep.shard_writer import ShardStats, build_shard, read_eval_sidecar, read_sidecar
from electra_tf.text.manifest import (CREATED_BY, EVAL_SHARD_PREFIX, FORMAT_VERSION, MANIFEST_NAME, SHARD_PREFIX,
                                      SPECIAL_TOKENS, eval_shard_name, shard_name)

__all__ = ["BuildOptions", "BuildPlan", "CorpusError", "make_plan", "run_build", "remove_outputs"]


class Progress:
    """Aggregates worker reports; prints MB/s and examples/s to stderr."""

    def __init__(self, plan: BuildPlan, log: Callable[[str], None], interval: float = 5.0):
        self.total_bytes = sum(f.size for f in plan.files)
        self.log, self.interval = log, interval
        self.start = self.last = time.time()
        self.bytes_read = self.examples = self.done = self.skipped = 0
        self.num_shards = plan.num_shards

    def add(self, bytes_read: int, examples: int, skipped: int = 0) -> None:
        self.bytes_read += bytes_read
        self.examples += examples
        self.skipped += skipped
        if time.time() - self.last >= self.interval:
            self.print()

    def print(self, final: bool = False) -> None:
        self.last = time.time()
        elapsed = max(self.last - self.start, 1e-6)
        total = f"/{self.total_bytes / 1e6:.1f}" if self.total_bytes else ""
        self.log(f"{'done: ' if final else ''}{self.done}/{self.num_shards} shards | "
                 f"{self.bytes_read / 1e6:.1f}{total} MB read | {self.bytes_read / 1e6 / elapsed:.2f} MB/s"
                 f" | {self.examples:,} examples | {self.examples / elapsed:,.0f} examples/s"
                 f" | {self.skipped:,} invalid lines skipped | {elapsed:.1f} s")


def stderr_log(message: str) -> None:
    print(f"[build_pretraining_dataset] {message}", file=sys.stderr, flush=True)


def run_build(plan: BuildPlan, num_processes: int = 1,
              log: Callable[[str], None] = stderr_log, pool: Optional[WorkerPool] = None) -> dict:
    """Build every missing shard, then write and return the manifest.

    ``pool``: an existing ``data_prep.pool.make_pool`` pool to use (e.g. warm
    workers reused over several builds); by default one is created when
    ``num_processes > 1``.
    """
    if fs.is_url(plan.output_dir):
        raise CorpusError(f"--output_dir={plan.output_dir}: the pool engine writes to local directories; "
                          "use --engine=beam to write to a URL")
    up_to_date = up_to_date_manifest(plan, log)
    if up_to_date:
        return up_to_date
    pending = prepare_output(plan, log)
    progress = Progress(plan, log)
    progress.done = plan.num_shards - len(pending)
    try:
        if pool is not None:
            _build(plan, pending, pool, progress)
        elif num_processes <= 1 or len(pending) <= 1:
            _build(plan, pending, None, progress)
        else:
            with make_pool(min(num_processes, len(pending))) as new_pool:
                _build(plan, pending, new_pool, progress)
    except CorpusError:
        remove_outputs(plan)
        raise
    progress.print(final=True)
    return finish_build(plan, log)


def up_to_date_manifest(plan: BuildPlan, log: Callable[[str], None]) -> Optional[dict]:
    """The existing manifest if it and every shard match the plan (nothing to do), else None."""
    manifest_path = fs.join_path(plan.output_dir, MANIFEST_NAME)
    existing = fs.read_json(manifest_path)
    if existing and existing.get("fingerprint") == plan.fingerprint and \
            all(read_sidecar(plan, i) for i in range(plan.num_shards)):
        log(f"{manifest_path} is up to date ({existing['num_examples']:,} examples); nothing to do")
        return existing
    return None


def prepare_output(plan: BuildPlan, log: Callable[[str], None]) -> list[int]:
    """Remove the manifest and stale files; return the shards still to build (both engines)."""
    fs.makedirs(plan.output_dir)
    fs.remove(fs.join_path(plan.output_dir, MANIFEST_NAME))
    _remove_stale_files(plan, log)
    pending = [i for i in range(plan.num_shards) if read_sidecar(plan, i) is None]
    if len(pending) < plan.num_shards:
        log(f"resuming: {plan.num_shards - len(pending)} of {plan.num_shards} shards already built")
    return pending


def finish_build(plan: BuildPlan, log: Callable[[str], None]) -> dict:
    """Write the manifest (last: it marks the build complete) from the sidecars; return it.

    Every shard must be built.  No examples at all is a ``CorpusError`` (outputs removed).
    """
    manifest = _make_manifest(plan, [read_sidecar(plan, i) for i in range(plan.num_shards)])
    if plan.options.eval_fraction:
        manifest.update(_eval_manifest(plan, [read_eval_sidecar(plan, i) for i in range(plan.num_shards)]))
    if manifest["num_examples"] == 0:
        remove_outputs(plan)
        raise CorpusError(f"input {', '.join(plan.input_names()[:3])}: contains no text to build "
                          "examples from (empty documents only?)")
    fs.write_json(fs.join_path(plan.output_dir, MANIFEST_NAME), manifest)
    log(summary_line(manifest, plan.output_dir))
    if plan.options.eval_fraction:
        log(eval_summary_line(manifest))
    return manifest


def _build(plan: BuildPlan, pending: list[int], pool: Optional[WorkerPool], progress: Progress) -> None:
    """Build ``pending`` in ``pool`` (None: in this process), dropping duplicates with --dedup_documents."""
    drops = _duplicate_positions(plan, pool) if plan.options.dedup_documents and pending else {}
    if pool is None:
        _build_serially(plan, pending, progress, drops)
    else:
        build_in_pool(plan, pending, pool, progress, drops)


def _duplicate_positions(plan: BuildPlan, pool: Optional[WorkerPool]) -> dict:
    """``data_prep.dedup``'s first pass over every shard (built or not: the first copy may be in any)."""
    from data_prep.dedup import duplicate_positions, shard_document_keys
    shards = range(plan.num_shards)
    if pool is None:
        keys = [shard_document_keys(plan, shard) for shard in shards]
    else:
        keys = pool.pool.starmap(shard_document_keys, [(plan, shard) for shard in shards])
    return duplicate_positions(zip(shards, keys))


def summary_line(manifest: dict, output_dir: str) -> str:
    """The build's last log line: what was written and what the text lost on the way."""
    shards = manifest["num_shards"]
    return (f"wrote {manifest['num_examples']:,} examples in {shards} shard{'' if shards == 1 else 's'} to "
            f"{output_dir} ([UNK] rate {manifest['unk_rate']:.3%}; "
            f"{manifest['num_skipped_lines']:,} invalid lines skipped, "
            f"{manifest['num_nul_bytes_removed']:,} NUL bytes removed; "
            f"{manifest['num_truncated_tokens']:,} tokens dropped by truncation to "
            f"max_seq_length={manifest['max_seq_length']} "
            f"({manifest['truncated_token_rate']:.2%} of the text's tokens, "
            f"{manifest['num_long_sentences']:,} sentences longer than "
            f"{manifest['max_seq_length'] - 2} tokens))")


def eval_summary_line(manifest: dict) -> str:
    """What --eval_fraction held out, for the log."""
    line = (f"held out {manifest['eval_num_documents']:,} of "
            f"{manifest['eval_num_documents'] + manifest['num_documents']:,} documents "
            f"(--eval_fraction={manifest['eval_fraction']}): {manifest['eval_num_examples']:,} examples in "
            f"{manifest['eval_num_shards']} {EVAL_SHARD_PREFIX}-* shards, none of them in the training shards")
    if not manifest["eval_num_examples"]:
        line += "; no examples: raise --eval_fraction to evaluate on held-out text"
    return line


def _build_serially(plan: BuildPlan, pending: list[int], progress: Progress, drops: dict) -> None:
    local_queue: "queue_lib.SimpleQueue" = queue_lib.SimpleQueue()
    shard_writer.set_progress_queue(local_queue)
    # Test hook: pause after each shard so a test can SIGKILL a build mid-way.
    pause = float(os.environ.get("DATA_PREP_TEST_PAUSE_AFTER_SHARD", "0") or 0)
    try:
        for shard in pending:
            build_shard(plan, shard, drops.get(shard, frozenset()))
            progress.done += 1
            while not local_queue.empty():
                progress.add(*local_queue.get()[1:])
            if pause:
                time.sleep(pause)
    finally:
        shard_writer.set_progress_queue(None)


def _our_files(output_dir: str) -> list[str]:
    """Shards, sidecars and temp files (incl. manifest temps) in output_dir."""
    return (fs.glob(output_dir, SHARD_PREFIX + "-*") + fs.glob(output_dir, EVAL_SHARD_PREFIX + "-*")
            + fs.glob(output_dir, MANIFEST_NAME + ".tmp-*"))


def _remove_stale_files(plan: BuildPlan, log) -> None:
    """Temp files of killed runs and shards of a different shard count."""
    wanted = {shard_name(i, plan.num_shards) for i in range(plan.num_shards)}
    if plan.options.eval_fraction:
        wanted |= {eval_shard_name(i, plan.num_shards) for i in range(plan.num_shards)}
    wanted.add(MANIFEST_NAME)
    for path in _our_files(plan.output_dir):
        name = os.path.basename(path)
        base = name.split(".tmp-")[0].removesuffix(".done.json")
        if ".tmp-" in name or base not in wanted:
            if ".tmp-" not in name:
                log(f"removing {name}: not part of this build ({plan.num_shards} shards)")
            fs.remove(path)


def remove_outputs(plan: BuildPlan) -> None:
    """Delete all shards, sidecars and temp files of the plan's output dir."""
    for path in _our_files(plan.output_dir):
        fs.remove(path)


def _eval_manifest(plan: BuildPlan, records: list[dict]) -> dict:
    """The manifest's record of the held-out shards (one per training shard; some may be empty)."""
    return {
        "eval_fraction": plan.options.eval_fraction,
        "eval_shards": [eval_shard_name(i, plan.num_shards) for i in range(plan.num_shards)],
        "eval_num_shards": plan.num_shards,
        "eval_num_documents": sum(r["num_documents"] for r in records),
        "eval_num_examples": sum(r["num_examples"] for r in records),
        "eval_num_tokens": sum(r["num_tokens"] for r in records),
        "eval_examples_per_shard": [r["num_examples"] for r in records],
        "eval_shard_sha256": [r["sha256"] for r in records],
        "eval_shard_size_bytes": [r["size_bytes"] for r in records],
    }


def _make_manifest(plan: BuildPlan, records: list[dict]) -> dict:
    options = plan.options
    total = {key: sum(r.get(key, 0) for r in records) for key in dataclasses.asdict(ShardStats())}
    vocab = list(plan.vocab)
    special_ids = {name: vocab.index(token) for name, token in SPECIAL_TOKENS.items()}
    tokenized = total["num_text_tokens"] + total["num_truncated_tokens"]
    return {
        "format_version": FORMAT_VERSION,
        "max_seq_length": options.max_seq_length,
        "vocab_file": options.vocab_file,
        "vocab_size": len(vocab),
        "vocab_sha256": plan.vocab_sha256,
        "do_lower_case": options.do_lower_case,
        "strip_accents": options.strip_accents,
        "special_token_ids": special_ids,
        "shards": [shard_name(i, plan.num_shards) for i in range(plan.num_shards)],
        "num_shards": plan.num_shards,
        "num_documents": total["num_documents"],
        "num_sentences": total["num_sentences"],
        "num_examples": total["num_examples"],
        "num_tokens": total["num_tokens"],
        "num_text_tokens": total["num_text_tokens"],
        "num_unk_tokens": total["num_unk_tokens"],
        "unk_rate": total["num_unk_tokens"] / max(1, total["num_text_tokens"]),
        "num_single_segment_examples": total["num_single_segment"],
        "num_truncated_tokens": total["num_truncated_tokens"],
        "truncated_token_rate": total["num_truncated_tokens"] / max(1, tokenized),
        "num_long_sentences": total["num_long_sentences"],
        "num_skipped_lines": total["num_skipped_lines"],
        "num_nul_bytes_removed": total["num_nul_bytes_removed"],
        "bytes_read": total["bytes_read"],
        "examples_per_shard": [r["num_examples"] for r in records],
        "shard_sha256": [r["sha256"] for r in records],
        "shard_size_bytes": [r["size_bytes"] for r in records],
        "inputs": plan.input_names(),
        "input_formats": sorted({f.format for f in plan.files}) or ["tfds"],
        "text_field": options.tfds_text_field if options.tfds_name else options.text_field,
        "seed": options.seed,
        "short_seq_prob": options.short_seq_prob,
        "single_segment_prob": options.single_segment_prob,
        "fingerprint": plan.fingerprint,
        "created_by": CREATED_BY,
        **({"dedup_documents": True, "num_duplicate_documents": total["num_duplicate_documents"]}
           if options.dedup_documents else {}),
    }
