"""Library behind ``python -m data_prep.build_pretraining_dataset``.

``make_plan`` turns the options into an immutable ``BuildPlan`` (inputs, shard
byte ranges, a fingerprint of everything that influences the bytes written);
``run_build`` builds the missing shards in parallel and writes
``manifest.json``.  Each shard depends only on the plan and its index:

* its documents are a fixed set of byte ranges (``corpus.plan_byte_ranges``)
  or TFDS example ranges;
* its RNG is ``random.Random("<seed>:<shard>")``;
* it is written to ``<shard>.tmp-<pid>`` and renamed, then a sidecar
  ``<shard>.done.json`` (counts, size, sha256, plan fingerprint) is written.

A re-run skips shards whose sidecar matches the plan and rebuilds the rest,
so an interrupted (even SIGKILLed) build resumes to byte-identical output.
On bad input the build stops with a ``CorpusError`` and removes every shard,
sidecar and temp file of the plan: no partial dataset is left behind.

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
>>> manifest["num_examples"], manifest["num_documents"]
(2, 2)
"""

from __future__ import annotations

import dataclasses
import gc
import glob
import hashlib
import json
import math
import multiprocessing
import os
import queue as queue_lib
import random
import sys
import time
from typing import Callable, Optional

import numpy as np

from data_prep import corpus
from data_prep.corpus import CorpusError
from data_prep.manifest import (CREATED_BY, FORMAT_VERSION, MANIFEST_NAME, SHARD_PREFIX,
                                sha256_file, shard_name, write_json_atomic)
from data_prep.tokenization import SPECIAL_TOKENS, validate_vocab

CODE_VERSION = 1  # bump when the bytes written for the same plan change
SHARD_TARGET_BYTES = 32 << 20
MIN_SHARDS = 8


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """User options (the command-line flags)."""
    output_dir: str
    vocab_file: str
    inputs: str = ""
    do_lower_case: bool = True
    strip_accents: Optional[bool] = None
    max_seq_length: int = 128
    max_position_embeddings: int = 512
    short_seq_prob: float = 0.05
    single_segment_prob: float = 0.1
    num_shards: Optional[int] = None
    seed: int = 12345
    input_format: str = "auto"
    text_field: str = "text"
    tfds_name: str = ""
    tfds_split: str = "train"
    tfds_data_dir: Optional[str] = None
    tfds_text_field: str = "text"


@dataclasses.dataclass(frozen=True)
class BuildPlan:
    options: BuildOptions
    vocab: tuple
    vocab_sha256: str
    files: tuple            # corpus.InputFile, empty for TFDS
    shard_ranges: tuple     # per shard: tuple of corpus.ByteRange, or (lo, hi) for TFDS
    num_shards: int
    fingerprint: str

    @property
    def output_dir(self) -> str:
        return self.options.output_dir

    def shard_path(self, index: int) -> str:
        return os.path.join(self.output_dir, shard_name(index, self.num_shards))


def _fail(message: str):
    raise CorpusError(message)


def check_options(options: BuildOptions) -> None:
    """Reject impossible flag combinations with a one-line message."""
    if options.max_seq_length > options.max_position_embeddings:
        _fail(f"--max_seq_length={options.max_seq_length} exceeds --max_position_embeddings="
              f"{options.max_position_embeddings} (the model's position table); use "
              f"--max_seq_length<={options.max_position_embeddings} or a model with a larger table")
    if options.max_seq_length < 8:
        _fail(f"--max_seq_length={options.max_seq_length} is too small (minimum 8)")
    for name in ("short_seq_prob", "single_segment_prob"):
        value = getattr(options, name)
        if not 0.0 <= value <= 1.0:
            _fail(f"--{name}={value} must be in [0, 1]")
    if options.num_shards is not None and options.num_shards < 1:
        _fail(f"--num_shards={options.num_shards} must be >= 1")
    if bool(options.inputs) == bool(options.tfds_name):
        _fail("pass exactly one of --input and --tfds_name")
    if not options.output_dir:
        _fail("--output_dir is required")


def default_num_shards(total_bytes: int) -> int:
    """One shard per 32 MiB of input, but at least min(8, input MiB).

    Deliberately independent of --num_processes so that the output is the
    same whatever the parallelism.
    """
    mib = max(1, math.ceil(total_bytes / (1 << 20)))
    return max(math.ceil(total_bytes / SHARD_TARGET_BYTES), min(MIN_SHARDS, mib), 1)


def make_plan(options: BuildOptions) -> BuildPlan:
    """Validate inputs and vocab; fix the shards' contents."""
    check_options(options)
    options = dataclasses.replace(options, output_dir=os.path.abspath(options.output_dir),
                                  vocab_file=os.path.abspath(options.vocab_file))
    try:
        vocab = validate_vocab(options.vocab_file)
    except ValueError as e:
        raise CorpusError(str(e)) from None
    vocab_sha = sha256_file(options.vocab_file)
    if options.tfds_name:
        files, shard_ranges = (), _plan_tfds(options)
    else:
        paths = corpus.expand_inputs(options.inputs, exclude_dir=options.output_dir)
        files = tuple(corpus.inspect_inputs(paths, options.input_format))
        total = sum(f.size for f in files)
        num_shards = options.num_shards or default_num_shards(total)
        if not options.num_shards and all(f.compressed for f in files):
            num_shards = min(num_shards, len(files))  # a compressed file is never split
        shard_ranges = tuple(tuple(r) for r in corpus.plan_byte_ranges(list(files), num_shards))
    fingerprint = _fingerprint(options, vocab_sha, files, shard_ranges)
    return BuildPlan(options, tuple(vocab), vocab_sha, files, shard_ranges, len(shard_ranges),
                     fingerprint)


def _fingerprint(options, vocab_sha, files, shard_ranges) -> str:
    relevant = dataclasses.asdict(options)
    for key in ("output_dir", "vocab_file", "max_position_embeddings", "inputs"):
        relevant.pop(key)
    payload = {
        "code_version": CODE_VERSION, "options": relevant, "vocab_sha256": vocab_sha,
        "files": [f.fingerprint() for f in files],
        "shards": [[dataclasses.astuple(r) for r in ranges] if options.inputs else list(ranges)
                   for ranges in shard_ranges],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


# --------------------------------------------------------------------------
# TFDS input (offline only: prepared data or tfds.testing.mock_data)
# --------------------------------------------------------------------------

def _tfds_builder(options: BuildOptions):
    import tensorflow_datasets as tfds
    try:
        return tfds.builder(options.tfds_name, data_dir=options.tfds_data_dir, try_gcs=False)
    except Exception as e:  # unknown name, bad config ...
        _fail(f"TFDS dataset {options.tfds_name}: {str(e).splitlines()[0]}")


def _plan_tfds(options: BuildOptions) -> tuple:
    """Per shard (lo, hi) example ranges; (-1, -1) = use Dataset.shard()."""
    builder = _tfds_builder(options)
    features = getattr(builder.info, "features", None)
    if features is not None and options.tfds_text_field not in features:
        _fail(f"TFDS dataset {options.tfds_name}: no feature {options.tfds_text_field!r} "
              f"(has: {', '.join(features.keys())}); set --tfds_text_field")
    try:
        total = builder.info.splits[options.tfds_split].num_examples
    except Exception:
        total = None
    if not total:
        count = options.num_shards or 1
        return tuple((-1, -1) for _ in range(count))
    count = options.num_shards or max(min(MIN_SHARDS, math.ceil(total / 1000)),
                                      math.ceil(total / 200_000), 1)
    return tuple(((total * k) // count, (total * (k + 1)) // count) for k in range(count))


def _iter_tfds_documents(plan: BuildPlan, shard: int, stats: corpus.RangeStats):
    import tensorflow_datasets as tfds
    options = plan.options
    builder = _tfds_builder(options)
    lo, hi = plan.shard_ranges[shard]
    try:
        if lo < 0:
            dataset = builder.as_dataset(split=options.tfds_split, shuffle_files=False)
            dataset = dataset.shard(plan.num_shards, shard)
        else:
            dataset = builder.as_dataset(split=f"{options.tfds_split}[{lo}:{hi}]",
                                         shuffle_files=False)
    except Exception as e:
        _fail(f"TFDS dataset {options.tfds_name} split {options.tfds_split}: "
              f"{str(e).splitlines()[0]} (this tool never downloads: prepare the data first)")
    batch = []
    for record in tfds.as_numpy(dataset):
        raw = record[options.tfds_text_field]
        stats.bytes_read += len(raw)
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        except UnicodeDecodeError:
            stats.skipped_lines += 1
            continue
        paragraphs = corpus.text_to_paragraphs(text)
        if paragraphs:
            batch.append(paragraphs)
        if len(batch) >= 2000:
            yield batch
            batch = []
    if batch:
        yield batch


# --------------------------------------------------------------------------
# Building one shard (runs in a worker process)
# --------------------------------------------------------------------------

_TOKENIZER_CACHE: dict = {}
_PROGRESS_QUEUE = None
_TOKENIZER_FACTORY = None


def set_tokenizer_factory(factory) -> None:
    """Benchmarks only: ``factory(vocab_file, do_lower_case, strip_accents)``
    returns an object with ``tokenize_flat``, ``special_ids`` and ``unk_id``
    used instead of ``WordPieceTokenizer`` in this process."""
    global _TOKENIZER_FACTORY
    _TOKENIZER_FACTORY = factory
    _TOKENIZER_CACHE.clear()


def _tokenizer(plan: BuildPlan):
    from data_prep.tokenization import WordPieceTokenizer
    factory = _TOKENIZER_FACTORY or WordPieceTokenizer
    key = (plan.options.vocab_file, plan.vocab_sha256, plan.options.do_lower_case,
           plan.options.strip_accents)
    if key not in _TOKENIZER_CACHE:
        _TOKENIZER_CACHE.clear()
        _TOKENIZER_CACHE[key] = factory(
            plan.options.vocab_file, plan.options.do_lower_case, plan.options.strip_accents)
    return _TOKENIZER_CACHE[key]


def sidecar_path(shard_path: str) -> str:
    return shard_path + ".done.json"


def _report(shard: int, bytes_read: int, examples: int, skipped: int) -> None:
    if _PROGRESS_QUEUE is not None:
        _PROGRESS_QUEUE.put((shard, bytes_read, examples, skipped))


@dataclasses.dataclass
class ShardStats:
    num_documents: int = 0
    num_sentences: int = 0
    num_examples: int = 0
    num_tokens: int = 0
    num_text_tokens: int = 0
    num_unk_tokens: int = 0
    num_single_segment: int = 0
    num_skipped_lines: int = 0
    bytes_read: int = 0


class ShardWriter:
    """Tokenises, packs, serialises and writes the documents of one shard."""

    def __init__(self, plan: BuildPlan, shard: int):
        from data_prep.packing import ExamplePacker, ExampleSerializer, SpecialIds
        self.plan, self.shard = plan, shard
        self.tokenizer = _tokenizer(plan)
        options = plan.options
        rng = random.Random(f"{options.seed}:{shard}")
        self.packer = ExamplePacker(options.max_seq_length, rng, options.short_seq_prob,
                                    options.single_segment_prob)
        self.serializer = ExampleSerializer(options.max_seq_length)
        ids = self.tokenizer.special_ids
        self.special = SpecialIds(cls=ids["cls"], sep=ids["sep"], pad=ids["pad"])
        self.stats = ShardStats()

    def write_documents(self, docs: list[list[str]], writer) -> None:
        from data_prep.packing import assemble
        sentences, counts = [], []
        for paragraphs in docs:
            doc_sentences = corpus.document_sentences(paragraphs)
            sentences.extend(doc_sentences)
            counts.append(len(doc_sentences))
        flat, lengths = self.tokenizer.tokenize_flat(sentences)
        starts = (np.cumsum(lengths) - lengths).tolist()
        lengths = lengths.tolist()
        specs, position = [], 0
        for count in counts:
            end = position + count
            specs.extend(self.packer.pack_document(starts[position:end], lengths[position:end]))
            position = end
        self.stats.num_documents += sum(1 for c in counts if c)
        self.stats.num_sentences += len(sentences)
        if not specs:
            return
        batch = assemble(flat, specs, self.plan.options.max_seq_length, self.special)
        for record in self.serializer.serialize(batch):
            writer.write(record)
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


def _iter_shard_documents(plan: BuildPlan, shard: int, stats: corpus.RangeStats):
    if plan.options.tfds_name:
        yield from _iter_tfds_documents(plan, shard, stats)
        return
    for byte_range in plan.shard_ranges[shard]:
        file = plan.files[byte_range.file_index]
        yield from corpus.iter_documents(file, byte_range, stats, plan.options.text_field)


def build_shard(plan: BuildPlan, shard: int) -> dict:
    """Build shard ``shard`` atomically; return its sidecar record."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the many short-lived lists are acyclic; GC passes cost ~20 %
    try:
        return _build_shard(plan, shard)
    finally:
        if gc_was_enabled:
            gc.enable()


def _build_shard(plan: BuildPlan, shard: int) -> dict:
    import tensorflow as tf
    path = plan.shard_path(shard)
    tmp = f"{path}.tmp-{os.getpid()}"
    shard_writer = ShardWriter(plan, shard)
    range_stats = corpus.RangeStats()
    reported = [0, 0, 0]

    def report():
        now = [range_stats.bytes_read, shard_writer.stats.num_examples, range_stats.skipped_lines]
        _report(shard, *(a - b for a, b in zip(now, reported)))
        reported[:] = now

    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            for docs in _iter_shard_documents(plan, shard, range_stats):
                shard_writer.write_documents(docs, writer)
                report()
        report()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    stats = shard_writer.stats
    stats.num_skipped_lines = range_stats.skipped_lines
    stats.bytes_read = range_stats.bytes_read
    record = {"fingerprint": plan.fingerprint, "shard": os.path.basename(path),
              "size_bytes": os.path.getsize(path), "sha256": sha256_file(path),
              **dataclasses.asdict(stats)}
    write_json_atomic(sidecar_path(path), record)
    return record


def read_sidecar(plan: BuildPlan, shard: int) -> Optional[dict]:
    """The shard's sidecar if the shard is complete for this plan, else None."""
    path = plan.shard_path(shard)
    try:
        with open(sidecar_path(path), encoding="utf-8") as f:
            record = json.load(f)
        if (record.get("fingerprint") == plan.fingerprint
                and record.get("size_bytes") == os.path.getsize(path)):
            return record
    except (OSError, ValueError):
        pass
    return None


def _worker_init(progress_queue, initializer=None, initargs=()) -> None:
    global _PROGRESS_QUEUE
    _PROGRESS_QUEUE = progress_queue
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if initializer is not None:
        initializer(*initargs)


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------

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
              log: Callable[[str], None] = stderr_log, pool=None) -> dict:
    """Build every missing shard, then write and return the manifest.

    ``pool``: an existing ``make_pool`` pool to use (benchmarks reuse warm
    workers); by default one is created when ``num_processes > 1``.
    """
    os.makedirs(plan.output_dir, exist_ok=True)
    manifest_path = os.path.join(plan.output_dir, MANIFEST_NAME)
    existing = _read_json(manifest_path)
    if existing and existing.get("fingerprint") == plan.fingerprint and \
            all(read_sidecar(plan, i) for i in range(plan.num_shards)):
        log(f"{manifest_path} is up to date ({existing['num_examples']:,} examples); nothing to do")
        return existing
    if os.path.exists(manifest_path):
        os.unlink(manifest_path)
    _remove_stale_files(plan, log)
    pending = [i for i in range(plan.num_shards) if read_sidecar(plan, i) is None]
    if len(pending) < plan.num_shards:
        log(f"resuming: {plan.num_shards - len(pending)} of {plan.num_shards} shards already built")
    progress = Progress(plan, log)
    progress.done = plan.num_shards - len(pending)
    try:
        if pool is not None:
            _build_in_pool(plan, pending, pool, progress)
        elif num_processes <= 1 or len(pending) <= 1:
            _build_serially(plan, pending, progress)
        else:
            with make_pool(min(num_processes, len(pending))) as new_pool:
                _build_in_pool(plan, pending, new_pool, progress)
    except CorpusError:
        remove_outputs(plan)
        raise
    progress.print(final=True)
    records = [read_sidecar(plan, i) for i in range(plan.num_shards)]
    manifest = _make_manifest(plan, records)
    if manifest["num_examples"] == 0:
        remove_outputs(plan)
        _fail(f"input {', '.join(_input_names(plan)[:3])}: contains no text to build examples "
              "from (empty documents only?)")
    write_json_atomic(manifest_path, manifest)
    log(f"wrote {manifest['num_examples']:,} examples in {plan.num_shards} shards to "
        f"{plan.output_dir} ([UNK] rate {manifest['unk_rate']:.3%}, "
        f"{manifest['num_skipped_lines']} invalid lines skipped)")
    return manifest


def _build_serially(plan: BuildPlan, pending: list[int], progress: Progress) -> None:
    global _PROGRESS_QUEUE
    local_queue: "queue_lib.SimpleQueue" = queue_lib.SimpleQueue()
    _PROGRESS_QUEUE = local_queue
    # Test hook: pause after each shard so a test can SIGKILL a build mid-way.
    pause = float(os.environ.get("DATA_PREP_TEST_PAUSE_AFTER_SHARD", "0") or 0)
    try:
        for shard in pending:
            build_shard(plan, shard)
            progress.done += 1
            while not local_queue.empty():
                progress.add(*local_queue.get()[1:])
            if pause:
                time.sleep(pause)
    finally:
        _PROGRESS_QUEUE = None


class WorkerPool:
    """A spawn-context process pool plus the queue its workers report to."""

    def __init__(self, processes: int, initializer=None, initargs=()):
        context = multiprocessing.get_context(_start_method())
        self.queue = context.Queue()
        self.pool = context.Pool(processes, initializer=_worker_init,
                                 initargs=(self.queue, initializer, initargs))
        self.processes = processes

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.pool.close()
        else:
            self.pool.terminate()
        self.pool.join()


def _start_method() -> str:
    """'fork' while TensorFlow is not loaded in this process, else 'spawn'.

    Forking a process that has initialised TensorFlow is unsafe (its thread
    pools do not survive a fork); forking before is safe and saves each
    worker the interpreter start-up.  The character tables are computed
    before forking so the workers inherit them.
    """
    if "tensorflow" in sys.modules or sys.platform != "linux":
        return "spawn"
    from data_prep.tokenization import _category_masks, _re2_patterns
    _category_masks()
    _re2_patterns()
    return "fork"


def make_pool(processes: int, initializer=None, initargs=()) -> WorkerPool:
    """A worker pool; ``initializer(*initargs)`` runs in each worker."""
    return WorkerPool(processes, initializer, initargs)


def preload_tokenizer(vocab_file: str, do_lower_case: bool = True,
                      strip_accents: Optional[bool] = None, factory=None) -> None:
    """Build and warm this process's tokenizer ahead of time (benchmarks).

    Usable as a ``make_pool`` initializer so that timings exclude start-up.
    """
    if factory is not None:
        set_tokenizer_factory(factory)
    vocab_file = os.path.abspath(vocab_file)
    validate_vocab(vocab_file)
    sha = sha256_file(vocab_file)
    tokenizer = (factory or _default_factory())(vocab_file, do_lower_case, strip_accents)
    tokenizer.tokenize_flat(["Warm up: é 中文 " + "x" * 120, "second line."])
    import tensorflow as tf  # the shard writer needs it; import it now
    tf.io.TFRecordWriter  # noqa: B018
    _TOKENIZER_CACHE.clear()
    _TOKENIZER_CACHE[(vocab_file, sha, do_lower_case, strip_accents)] = tokenizer


def _default_factory():
    from data_prep.tokenization import WordPieceTokenizer
    return WordPieceTokenizer


def _drain(pool: WorkerPool, progress: Progress, timeout: Optional[float]) -> bool:
    try:
        if timeout is None:
            message = pool.queue.get_nowait()
        else:
            message = pool.queue.get(timeout=timeout)
    except queue_lib.Empty:
        return False
    progress.add(*message[1:])
    return True


def _build_in_pool(plan: BuildPlan, pending: list[int], pool: WorkerPool,
                   progress: Progress) -> None:
    results = [pool.pool.apply_async(build_shard, (plan, shard)) for shard in pending]
    remaining = list(results)
    try:
        while remaining:
            _drain(pool, progress, timeout=0.02)
            for result in [r for r in remaining if r.ready()]:
                remaining.remove(result)
                result.get()  # re-raises a worker's exception here
                progress.done += 1
    except BaseException:
        pool.pool.terminate()
        raise
    while _drain(pool, progress, timeout=None):
        pass


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _input_names(plan: BuildPlan) -> list[str]:
    if plan.options.tfds_name:
        return [f"tfds:{plan.options.tfds_name}/{plan.options.tfds_split}"]
    return [f.path for f in plan.files]


def _our_files(output_dir: str) -> list[str]:
    """Shards, sidecars and temp files (incl. manifest temps) in output_dir."""
    escaped = glob.escape(output_dir)
    return (glob.glob(os.path.join(escaped, SHARD_PREFIX + "-*"))
            + glob.glob(os.path.join(escaped, MANIFEST_NAME + ".tmp-*")))


def _remove_stale_files(plan: BuildPlan, log) -> None:
    """Temp files of killed runs and shards of a different shard count."""
    wanted = {shard_name(i, plan.num_shards) for i in range(plan.num_shards)}
    wanted.add(MANIFEST_NAME)
    for path in _our_files(plan.output_dir):
        name = os.path.basename(path)
        base = name.split(".tmp-")[0].removesuffix(".done.json")
        if ".tmp-" in name or base not in wanted:
            if ".tmp-" not in name:
                log(f"removing {name}: not part of this build ({plan.num_shards} shards)")
            os.unlink(path)


def remove_outputs(plan: BuildPlan) -> None:
    """Delete all shards, sidecars and temp files of the plan's output dir."""
    for path in _our_files(plan.output_dir):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _make_manifest(plan: BuildPlan, records: list[dict]) -> dict:
    options = plan.options
    total = {key: sum(r[key] for r in records) for key in dataclasses.asdict(ShardStats())}
    vocab = list(plan.vocab)
    special_ids = {name: vocab.index(token) for name, token in SPECIAL_TOKENS.items()}
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
        "num_skipped_lines": total["num_skipped_lines"],
        "bytes_read": total["bytes_read"],
        "examples_per_shard": [r["num_examples"] for r in records],
        "shard_sha256": [r["sha256"] for r in records],
        "inputs": _input_names(plan),
        "input_formats": sorted({f.format for f in plan.files}) or ["tfds"],
        "text_field": options.tfds_text_field if options.tfds_name else options.text_field,
        "seed": options.seed,
        "short_seq_prob": options.short_seq_prob,
        "single_segment_prob": options.single_segment_prob,
        "fingerprint": plan.fingerprint,
        "created_by": CREATED_BY,
    }
