"""The Beam engine (``--engine=beam``): the pool engine's shards, built by an Apache Beam pipeline.

One pipeline, with the plan's shard as the unit of parallel work::

    Create(pending shards) | Reshuffle | ParDo(BuildShardFn)      # shard_writer.write_shard to temps
        | (constant key) GroupByKey | ParDo(FinalizeFn)            # rename, sidecars, manifest LAST

``BuildShardFn`` calls the pool engine's ``shard_writer.write_shard`` (same tokenisation,
packing and RNG per shard), so the records are the pool engine's, shard for shard.  It writes
under a per-attempt temporary name (``<shard>.tmp-beam-<random>``): a retried bundle writes
other temps and never a final file.  ``FinalizeFn`` runs once over all the shards' results: it
renames the temps of the committed attempts to the final names (``tf.io.gfile``: local paths and
``gs://``), writes the sidecars, deletes the temps of abandoned attempts and writes the manifest
(``builder.finish_build``) last.  Re-running it is harmless: a temp already renamed is skipped,
the sidecars and manifest are rewritten with the same bytes.

Bad input (a ``CorpusError``) is not raised in a worker, where a runner would retry it and log
tracebacks: ``BuildShardFn`` emits it as a result, and the finaliser removes the build's files
and leaves the message in ``build_error.json``, which ``run_beam_build`` turns back into a
``CorpusError`` (the command's one-line ``error: ...``) and deletes.

With ``--dedup_documents`` a first pass emits ``(document key, (shard, position))`` for every
document, groups by key and turns ``dedup.later_occurrences`` into per-shard drop sets, a side
input of ``BuildShardFn`` (``data_prep.dedup`` holds the rule both engines use).

Counters (Beam Metrics, namespace ``data_prep``): documents, examples, tokens, skipped_lines,
duplicate_documents, eval_documents, eval_examples, bytes_read; ``run_beam_build`` logs the
committed values at the end (the manifest holds the same numbers).

Without ``--runner``, the pipeline runs on Beam's in-process ``FnApiRunner``: the
``DirectRunner`` of Beam >= 2.68 first tries the Prism runner, which downloads a binary.

Example (Beam installed; ``direct_num_workers`` etc. are ordinary Beam pipeline options):

>>> import tempfile
>>> from data_prep.plan import BuildOptions, make_plan
>>> from data_prep.beam_pipeline import run_beam_build
>>> d = tempfile.mkdtemp()
>>> _ = open(d + "/c.txt", "w").write("The cat sat. The dog ran.\\n\\nA new doc.\\n")
>>> _ = open(d + "/v.txt", "w").write("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]",
...     "[MASK]", "the", "cat", "sat", "dog", "ran", "a", "new", "doc", "."]) + "\\n")
>>> plan = make_plan(BuildOptions(inputs=d + "/c.txt", output_dir=d + "/out",
...                               vocab_file=d + "/v.txt", max_seq_length=16, num_shards=2))
>>> manifest = run_beam_build(plan, [], log=lambda msg: None)
>>> manifest["num_examples"], manifest["num_documents"]
(2, 2)
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import uuid
from typing import Callable, Optional, Sequence

from data_prep import fs
from data_prep.corpus.errors import CorpusError

BEAM_MISSING = "--engine=beam needs apache-beam: pip install -r requirements-beam.txt"
TEMP_MARK = ".tmp-beam-"
ERROR_FILE = "build_error.json"
DEFAULT_RUNNER = "FnApiRunner"
NAMESPACE = "data_prep"
# Counter name -> (record: 0 training, 1 eval; ShardStats field).
COUNTERS = {
    "documents": (0, "num_documents"), "examples": (0, "num_examples"), "tokens": (0, "num_tokens"),
    "skipped_lines": (0, "num_skipped_lines"), "duplicate_documents": (0, "num_duplicate_documents"),
    "bytes_read": (0, "bytes_read"), "eval_documents": (1, "num_documents"),
    "eval_examples": (1, "num_examples"),
}


def import_beam():
    """``apache_beam``, or a ``CorpusError`` saying how to install it (the CLI prints it as one line)."""
    try:
        import apache_beam
    except ImportError:
        raise CorpusError(BEAM_MISSING) from None
    return apache_beam


def _temp_paths(plan, shard: int) -> list[str]:
    from data_prep.shard_writer import shard_paths
    attempt = uuid.uuid4().hex[:12]
    return [f"{path}{TEMP_MARK}{attempt}" for path in shard_paths(plan, shard)]


def shipped_model(plan) -> Optional[bytes]:
    """The SentencePiece model's bytes, read where the pipeline is made, to travel inside ``BuildShardFn``
    (None for a WordPiece vocab, whose tokens the plan holds).  CorpusError if the file changed since the
    plan hashed it."""
    from electra_tf.text.tokenizers import is_sentencepiece
    if not is_sentencepiece(plan.options.vocab_file):
        return None
    with open(plan.options.vocab_file, "rb") as f:
        model = f.read()
    if hashlib.sha256(model).hexdigest() != plan.vocab_sha256:
        raise CorpusError(f"--vocab_file {plan.options.vocab_file}: changed since the build was planned; "
                          "run the command again")
    return model


def plan_with_local_vocab(plan, model: Optional[bytes] = None):
    """The plan, its tokenizer file rewritten to a local temp file if this worker lacks it.

    The launching machine read ``--vocab_file``; a remote worker may not see that path.  A WordPiece vocab
    is written from ``plan.vocab`` (its tokens, checked at planning, hashed into the fingerprint); a
    SentencePiece model from ``model``, the bytes ``shipped_model`` read (its pieces alone do not make the
    model: without the bytes the worker refuses, never guesses).
    """
    if os.path.exists(plan.options.vocab_file):
        return plan
    import tempfile
    from electra_tf.text.manifest import write_bytes_atomic, write_text_atomic
    from electra_tf.text.tokenizers import is_sentencepiece
    if is_sentencepiece(plan.options.vocab_file):
        if model is None:
            raise CorpusError(f"--vocab_file {plan.options.vocab_file}: this worker cannot read the SentencePiece "
                              "model; put it where every worker can read it (shared storage or the worker image)")
        local = os.path.join(tempfile.gettempdir(), f"data_prep-tokenizer-{plan.vocab_sha256[:16]}.model")
        if not os.path.exists(local):
            write_bytes_atomic(local, model)
    else:
        local = os.path.join(tempfile.gettempdir(), f"data_prep-vocab-{plan.vocab_sha256[:16]}.txt")
        if not os.path.exists(local):
            write_text_atomic(local, "\n".join(plan.vocab) + "\n")
    return dataclasses.replace(plan, options=dataclasses.replace(plan.options, vocab_file=local))


def build_shard_to_temps(plan, shard: int, drops: Optional[dict]) -> dict:
    """One attempt at a shard: its examples in fresh temp files; the result ``FinalizeFn`` needs."""
    from data_prep.shard_writer import file_digests, write_shard
    tmps = _temp_paths(plan, shard)
    try:
        stats = write_shard(plan, shard, tmps, (drops or {}).get(shard, frozenset()))
        digests = file_digests(tmps)  # here, in parallel: a rename keeps the bytes
    except BaseException:
        for tmp in tmps:
            fs.remove(tmp)
        raise
    return {"shard": shard, "temps": tmps, "stats": [dataclasses.asdict(s) for s in stats],
            "digests": digests}


def finalize(plan, results: Sequence[dict], log: Callable[[str], None]) -> dict:
    """Rename the committed temps, write sidecars, delete other temps, write the manifest; return it.

    Idempotent: temps renamed by an earlier run of this function are skipped (their final files
    exist); everything else it writes is rewritten with the same bytes.
    """
    from data_prep.builder import finish_build
    from data_prep.shard_writer import ShardStats, shard_paths, write_sidecars
    errors = sorted((r["shard"], r["error"]) for r in results if "error" in r)
    if errors:
        return _fail(plan, errors[0][1])
    for result in sorted(results, key=lambda r: r["shard"]):
        shard = result["shard"]
        for tmp, path in zip(result["temps"], shard_paths(plan, shard)):
            if fs.exists(tmp):
                fs.replace(tmp, path)
            elif not fs.exists(path):
                raise RuntimeError(f"shard {shard}: neither {tmp} nor {path} exists")
        write_sidecars(plan, shard, [ShardStats(**stats) for stats in result["stats"]],
                       [tuple(digest) for digest in result["digests"]])
    for tmp in fs.glob(plan.output_dir, f"*{TEMP_MARK}*"):  # attempts that were retried
        fs.remove(tmp)
    try:
        return finish_build(plan, log)
    except CorpusError as e:
        return _fail(plan, str(e))


def _fail(plan, message: str) -> dict:
    """Bad input: remove the build's files, leave ``message`` in the error file for the driver."""
    from data_prep.builder import remove_outputs
    remove_outputs(plan)
    fs.write_json(error_path(plan), {"error": message, "fingerprint": plan.fingerprint})
    return {"error": message}


def error_path(plan) -> str:
    """Where the finaliser leaves a bad-input message (the driver reads and removes it)."""
    return fs.join_path(plan.output_dir, ERROR_FILE)


def _make_dofns(beam):
    """The DoFn classes (defined once Beam is imported: the default path never imports it)."""

    class BuildShardFn(beam.DoFn):
        """Writes one shard to temps; builds its tokenizer once per DoFn instance."""

        def __init__(self, plan):
            self.plan = plan  # the tokenizer does not pickle: it is made in setup()
            self.model = shipped_model(plan)  # a SentencePiece model travels with the DoFn

        def setup(self):
            import tensorflow_text  # noqa: F401  registers RegexSplitWithOffsets etc. on remote workers
            from data_prep.shard_writer import _tokenizer
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            self.plan = plan_with_local_vocab(self.plan, self.model)
            _tokenizer(self.plan)

        def process(self, shard, drops=None):
            try:
                result = build_shard_to_temps(self.plan, shard, drops)
            except CorpusError as e:  # bad input: retrying cannot help; the finaliser reports it
                yield {"shard": shard, "error": str(e)}
                return
            for name, (index, field) in COUNTERS.items():
                if index < len(result["stats"]):
                    beam.metrics.Metrics.counter(NAMESPACE, name).inc(result["stats"][index][field])
            train = result["stats"][0]
            print(f"[build_pretraining_dataset] shard {shard + 1}/{self.plan.num_shards} written: "
                  f"{train['bytes_read'] / 1e6:.1f} MB read, {train['num_examples']:,} examples",
                  file=sys.stderr, flush=True)
            yield result

    class DocumentKeysFn(beam.DoFn):
        """``(key, (shard, position))`` for every non-blank document of a shard."""

        def __init__(self, plan):
            self.plan = plan

        def process(self, shard):
            from data_prep.dedup import shard_document_keys
            try:
                keys = shard_document_keys(self.plan, shard)
            except CorpusError:
                return  # BuildShardFn meets the same bad input and reports it
            for position, key in enumerate(keys):
                if key is not None:
                    yield key, (shard, position)

    class FinalizeFn(beam.DoFn):
        def __init__(self, plan):
            self.plan = plan

        def process(self, keyed_results):
            yield finalize(self.plan, list(keyed_results[1]), log=lambda message: None)  # the driver logs

    return BuildShardFn, DocumentKeysFn, FinalizeFn


def build_pipeline(pipeline, plan, pending: list[int]):
    """Add the build's transforms to ``pipeline``; return the PCollection holding the manifest."""
    beam = import_beam()
    BuildShardFn, DocumentKeysFn, FinalizeFn = _make_dofns(beam)
    side_inputs = {}
    if plan.options.dedup_documents:
        from data_prep.dedup import later_occurrences
        drops = (pipeline
                 | "AllShards" >> beam.Create(list(range(plan.num_shards)))
                 | "SpreadKeyShards" >> beam.Reshuffle()
                 | "DocumentKeys" >> beam.ParDo(DocumentKeysFn(plan))
                 | "GroupByKey" >> beam.GroupByKey()
                 | "LaterCopies" >> beam.FlatMap(lambda kv: later_occurrences(kv[1]))
                 | "GroupByShard" >> beam.GroupByKey()
                 | "DropSets" >> beam.MapTuple(lambda shard, positions: (shard, frozenset(positions))))
        side_inputs["drops"] = beam.pvalue.AsDict(drops)
    return (pipeline
            | "PendingShards" >> beam.Create(pending)
            | "SpreadShards" >> beam.Reshuffle()
            | "BuildShard" >> beam.ParDo(BuildShardFn(plan), **side_inputs)
            | "OneKey" >> beam.Map(lambda result: (None, result))
            | "AllResults" >> beam.GroupByKey()
            | "Finalize" >> beam.ParDo(FinalizeFn(plan)))


def pipeline_options(beam_args: Sequence[str], num_processes: int = 1):
    """``(PipelineOptions, runner or None, runner name)``: the user's ``--runner``, or the in-process one."""
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
    options = PipelineOptions(list(beam_args))
    if options.view_as(StandardOptions).runner:
        return options, None, str(options.view_as(StandardOptions).runner)
    direct = options.view_as(DirectOptions)
    given = " ".join(beam_args)
    if num_processes > 1 and "--direct_num_workers" not in given:
        direct.direct_num_workers = num_processes
    if direct.direct_num_workers != 1 and "--direct_running_mode" not in given:
        direct.direct_running_mode = "multi_processing"
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    name = (f"{DEFAULT_RUNNER} (in-process, direct_running_mode={direct.direct_running_mode}, "
            f"direct_num_workers={direct.direct_num_workers})")
    return options, FnApiRunner(), name


def run_beam_build(plan, beam_args: Sequence[str], num_processes: int = 1,
                   log: Optional[Callable[[str], None]] = None) -> dict:
    """Build the plan's missing shards with Beam and write the manifest; return it (as ``run_build``)."""
    from data_prep import builder
    log = log or builder.stderr_log
    beam = import_beam()
    up_to_date = builder.up_to_date_manifest(plan, log)
    if up_to_date:
        return up_to_date
    pending = builder.prepare_output(plan, log)
    fs.remove(error_path(plan))
    if not pending:  # every shard is built, only the manifest is missing: no pipeline to run
        return builder.finish_build(plan, log)
    options, runner, runner_name = pipeline_options(beam_args, num_processes)
    log(f"runner: {runner_name}")
    pipeline = beam.Pipeline(runner=runner, options=options)
    build_pipeline(pipeline, plan, pending)
    result = pipeline.run()
    result.wait_until_finish()
    failure = fs.read_json(error_path(plan))
    if failure is not None:
        builder.remove_outputs(plan)
        fs.remove(error_path(plan))
        raise CorpusError(failure["error"])
    manifest = fs.read_json(fs.join_path(plan.output_dir, builder.MANIFEST_NAME))
    if manifest is None or manifest.get("fingerprint") != plan.fingerprint:
        raise RuntimeError(f"the pipeline finished but wrote no manifest in {plan.output_dir}")
    log("counters: " + ", ".join(f"{name} {value:,}" for name, value in committed_counters(result).items()))
    log(builder.summary_line(manifest, plan.output_dir))
    if plan.options.eval_fraction:
        log(builder.eval_summary_line(manifest))
    return manifest


def committed_counters(result) -> dict:
    """The ``data_prep`` counters of a finished pipeline (committed values where the runner has them)."""
    from apache_beam.metrics.metric import MetricsFilter
    counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    values = {}
    for counter in counters:
        value = counter.committed if counter.committed is not None else counter.attempted
        values[counter.key.metric.name] = values.get(counter.key.metric.name, 0) + value
    return {name: values.get(name, 0) for name in COUNTERS}
