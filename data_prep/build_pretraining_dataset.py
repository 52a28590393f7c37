r"""Build ELECTRA pre-training TFRecords from raw text.

Reads plain text / WikiExtractor / JSON Lines files (optionally .gz/.bz2) or
a prepared TFDS text dataset, tokenises with BERT WordPiece (tensorflow-text),
packs sentences like the official ELECTRA ``build_pretraining_dataset.py``
and writes ``pretrain_data.tfrecord-XXXXX-of-YYYYY`` shards plus
``manifest.json`` (see ``electra_tf/text/manifest.py``); ``--eval_fraction``
holds documents out in ``eval_data.tfrecord-*`` shards of their own.  Progress (MB read/s,
examples/s) goes to stderr.  Bad input stops the build with a one-line
``error: ...`` naming the file, exit status 1, and no shard or manifest left.

Re-running the same command resumes: finished shards are kept (verified by
their ``.done.json`` sidecars), the rest are rebuilt, and the result is
byte-identical to an uninterrupted build with any ``--num_processes``.

Policies (see ``data_prep/corpus/__init__.py``): invalid UTF-8 lines are skipped and
counted (``num_skipped_lines``); stray NUL bytes are removed and counted
(``num_nul_bytes_removed``), a file with more than 1 % NULs in its first
64 KiB is rejected as binary; lines over 256 KiB are cut at spaces.  Tokens
cut off when an example is truncated to ``--max_seq_length`` (as in the
official code) are counted (``num_truncated_tokens``).  The last line on
stderr sums these up.

Example:

    python -m data_prep.build_pretraining_dataset \
        --input=../shared/data/pretrain/enwiki/AA \
        --vocab_file=../shared/data/vocab/en_uncased/vocab.txt \
        --output_dir=/tmp/enwiki_128 --max_seq_length=128 --num_processes=2

``--engine=beam`` builds the same shards with an Apache Beam pipeline
(``data_prep.beam_pipeline``; other flags are passed to Beam as pipeline options).
"""

from __future__ import annotations

import os
import sys

from absl import flags

FLAGS = flags.FLAGS


def options_from_flags():
    from data_prep.builder import BuildOptions
    strip = None if FLAGS.strip_accents is None else FLAGS.strip_accents == "true"
    return BuildOptions(
        inputs=FLAGS.input, output_dir=FLAGS.output_dir or "", vocab_file=FLAGS.vocab_file or "",
        do_lower_case=FLAGS.do_lower_case, strip_accents=strip,
        max_seq_length=FLAGS.max_seq_length, max_position_embeddings=FLAGS.max_position_embeddings,
        short_seq_prob=FLAGS.short_seq_prob, single_segment_prob=FLAGS.single_segment_prob,
        num_shards=FLAGS.num_shards, seed=FLAGS.seed, input_format=FLAGS.input_format,
        text_field=FLAGS.text_field, tfds_name=FLAGS.tfds_name, tfds_split=FLAGS.tfds_split,
        tfds_data_dir=FLAGS.tfds_data_dir, tfds_text_field=FLAGS.tfds_text_field,
        eval_fraction=FLAGS.eval_fraction, dedup_documents=FLAGS.dedup_documents)


def define_flags() -> None:
    """Register the command-line flags (only when run as a program); defaults are `BuildOptions`'."""
    import dataclasses

    from data_prep.corpus.inputs import FORMATS
    from data_prep.plan import BuildOptions

    default = {field.name: field.default for field in dataclasses.fields(BuildOptions)}
    flags.DEFINE_string("input", "", "Comma-separated input files, globs or directories.")
    flags.DEFINE_string("output_dir", None, "Where the shards and manifest.json are written.")
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab (one token per line).")
    flags.DEFINE_bool("do_lower_case", default["do_lower_case"], "Lower-case the text (uncased vocab).")
    flags.DEFINE_enum("strip_accents", None, ["true", "false"],
                      "Strip accents; default: same as --do_lower_case.")
    flags.DEFINE_integer("max_seq_length", default["max_seq_length"], "Tokens per example (incl. [CLS]/[SEP]).")
    flags.DEFINE_integer("max_position_embeddings", default["max_position_embeddings"],
                         "The model's position table size; --max_seq_length may not exceed it.")
    flags.DEFINE_float("short_seq_prob", default["short_seq_prob"], "Probability of a random shorter target length.")
    flags.DEFINE_float("single_segment_prob", default["single_segment_prob"], "Probability of a single-segment example.")
    flags.DEFINE_integer("num_processes", 1, "Worker processes (0 = all CPU cores).")
    flags.DEFINE_integer("num_shards", None,
                         "Output shards (default: one per 32 MiB of input, at least min(8, input MiB); "
                         "independent of --num_processes).")
    flags.DEFINE_integer("seed", default["seed"], "Seed of the packing randomness.")
    flags.DEFINE_float("eval_fraction", default["eval_fraction"],
                       "Share of documents held out for evaluation, written to eval_data.tfrecord-* shards that "
                       "the training shards exclude (run_pretraining.py evaluates on them). A document is chosen "
                       "by a hash of its text, so every build of the same text holds out the same documents.")
    flags.DEFINE_bool("dedup_documents", default["dedup_documents"],
                      "Drop exact duplicate documents (same text); the first in (shard, position) order is "
                      "kept. Counted as num_duplicate_documents in the manifest.")
    flags.DEFINE_enum("engine", "pool", ["pool", "beam"],
                      "pool: worker processes on this machine (--num_processes). beam: an Apache Beam "
                      "pipeline writing the same shards; flags this tool does not know (--runner, --project, "
                      "--temp_location, --setup_file, ...) are Beam pipeline options; without --runner it runs "
                      "in-process (--num_processes workers). Needs requirements-beam.txt.")
    flags.DEFINE_enum("input_format", default["input_format"], list(FORMATS),
                      "Input format; auto detects it per file.")
    flags.DEFINE_string("text_field", default["text_field"], "JSON Lines field holding the document text.")
    flags.DEFINE_string("tfds_name", default["tfds_name"], "TFDS dataset name (prepared data only; never downloads).")
    flags.DEFINE_string("tfds_split", default["tfds_split"], "TFDS split.")
    flags.DEFINE_string("tfds_data_dir", None, "TFDS data_dir.")
    flags.DEFINE_string("tfds_text_field", default["tfds_text_field"], "TFDS feature holding the text.")


def run(args: list) -> None:
    """Plan and build (the flags are parsed; ``args``: the arguments that are not our flags)."""
    from data_prep.builder import make_plan, run_build
    from data_prep.cli import refuse_args
    if FLAGS.engine == "pool":
        refuse_args(args)
    else:
        refuse_args([arg for arg in args if not arg.startswith("--")])
        from data_prep.beam_pipeline import import_beam
        import_beam()  # the one-line error before any work when Beam is missing
    num_processes = FLAGS.num_processes or os.cpu_count() or 1
    plan = make_plan(options_from_flags())
    if num_processes > plan.num_shards:
        print(f"[build_pretraining_dataset] note: {num_processes} processes but only "
              f"{plan.num_shards} shards; pass --num_shards to use them all", file=sys.stderr)
    if FLAGS.engine == "beam":
        import logging

        from data_prep.beam_pipeline import run_beam_build
        logging.getLogger("apache_beam").setLevel(logging.WARNING)  # Beam's INFO chatter, not our progress
        run_beam_build(plan, args, num_processes)
    else:
        run_build(plan, num_processes)


if __name__ == "__main__":
    from data_prep.cli import run_cli
    run_cli(run, define_flags, required=("vocab_file", "output_dir"), known_only=True)
