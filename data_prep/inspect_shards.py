r"""Summarise and decode a pre-training data directory.

Prints the manifest summary (including what cleaning and truncation cost:
invalid lines skipped, NUL bytes removed, tokens dropped by truncation), a
text histogram of real example lengths, the [UNK] rate, segment statistics
(single-segment share, mean A/B lengths) and decodes ``--num_examples``
examples back to text.  Reads at most ``--max_scan`` examples for the
statistics.  (Named ``inspect_shards``, not ``inspect``, so that it never
shadows the standard library's ``inspect``.)

Command line:

    python -m data_prep.inspect_shards --data_dir=/tmp/enwiki_128 --num_examples=3
    python -m data_prep.inspect_shards --verify /tmp/enwiki_128

``--verify DIR`` checks the shards instead (``electra_tf.text.verify``): each
listed shard exists, has the size and SHA-256 its build recorded, every
TFRecord record's length and data CRCs are valid and the record count equals
``examples_per_shard``; the held-out shards of ``--eval_fraction`` are checked
alike against the manifest's ``eval_*`` records.  It prints one line per problem and a summary, and
exits 1 if there is any problem, 0 otherwise.

Example:

>>> import numpy as np
>>> from data_prep.inspect_shards import length_histogram
>>> print(length_histogram(np.array([3, 4, 16, 16]), max_len=16, bins=2, width=4))
     1-8           2 ####
     9-16          2 ####
"""

from __future__ import annotations

import json
import os
import sys
from typing import Iterator

import numpy as np
from absl import flags

from electra_tf.text.manifest import FEATURE_NAMES, INPUT_IDS, INPUT_MASK, SEGMENT_IDS, load_manifest

LABEL_WIDTH = 21


def iter_examples(data_dir: str, manifest: dict, limit: int) -> Iterator[dict]:
    """Examples as dicts of numpy arrays, shard by shard, at most ``limit``."""
    import tensorflow as tf
    length = manifest["max_seq_length"]
    spec = {name: tf.io.FixedLenFeature([length], tf.int64) for name in FEATURE_NAMES}
    files = [os.path.join(data_dir, s) for s in manifest["shards"]]
    dataset = tf.data.TFRecordDataset(files).take(limit).batch(1024)
    for batch in dataset:
        parsed = tf.io.parse_example(batch, spec)
        arrays = {k: v.numpy() for k, v in parsed.items()}
        for i in range(len(arrays[INPUT_IDS])):
            yield {k: arrays[k][i] for k in FEATURE_NAMES}


def length_histogram(lengths: np.ndarray, max_len: int, bins: int = 8, width: int = 40) -> str:
    """Text bars of how many examples fall in each length bucket."""
    edges = np.linspace(0, max_len, bins + 1).astype(int)
    counts, _ = np.histogram(lengths, bins=edges)
    top = max(1, counts.max())
    rows = []
    for lo, hi, count in zip(edges[:-1], edges[1:], counts):
        bar = "#" * int(round(width * count / top))
        rows.append(f"  {lo + 1:4d}-{hi:<4d} {count:8d} {bar}")
    return "\n".join(rows)


def segment_stats(examples: list[dict]) -> dict:
    seg_b = np.array([int(e[SEGMENT_IDS].sum()) for e in examples])
    real = np.array([int(e[INPUT_MASK].sum()) for e in examples])
    two = seg_b > 0
    a_len = np.where(two, real - seg_b - 2, real - 2)
    b_len = np.where(two, seg_b - 1, 0)
    return {"examples": len(examples), "single_segment": int((~two).sum()),
            "mean_a": float(a_len.mean()) if len(a_len) else 0.0,
            "mean_b_when_present": float(b_len[two].mean()) if two.any() else 0.0,
            "lengths": real}


def decode_example(tokenizer, example: dict) -> str:
    ids = example[INPUT_IDS][example[INPUT_MASK] > 0].tolist()
    return tokenizer.decode(ids)


def summarize(data_dir: str, num_examples: int = 3, max_scan: int = 100000,
              out=sys.stdout) -> dict:
    """Print the report; return the computed statistics."""
    manifest = load_manifest(data_dir)
    p = lambda *a: print(*a, file=out)  # noqa: E731
    inputs = manifest.get("inputs", [])
    rows = [("data_dir", os.path.abspath(data_dir))]
    rows += [(key, manifest.get(key)) for key in (
        "num_shards", "num_documents", "num_examples", "num_tokens", "max_seq_length",
        "vocab_file", "vocab_size", "do_lower_case", "strip_accents", "num_skipped_lines",
        "num_nul_bytes_removed", "num_truncated_tokens", "num_long_sentences")]
    rows.append(("unk_rate", f"{manifest.get('unk_rate', 0.0):.4%} "
                             f"({manifest.get('num_unk_tokens')} [UNK] tokens)"))
    rows.append(("inputs", ", ".join(inputs[:3]) + (" ..." if len(inputs) > 3 else "")))
    if "eval_shards" in manifest:  # --eval_fraction: held-out documents, not in the shards above
        rows += [(key, manifest.get(key)) for key in (
            "eval_fraction", "eval_num_shards", "eval_num_documents", "eval_num_examples")]
    for key, value in rows:
        p(f"{key:<{LABEL_WIDTH}} {value}")
    examples = list(iter_examples(data_dir, manifest, max_scan))
    stats = segment_stats(examples)
    lengths = stats["lengths"]
    p(f"\nscanned {len(examples):,} examples: mean length {lengths.mean():.1f}, "
      f"{(lengths == manifest['max_seq_length']).mean():.1%} full")
    p(f"{'single-segment':<{LABEL_WIDTH}} {stats['single_segment'] / max(1, len(examples)):.1%}; mean A "
      f"{stats['mean_a']:.1f} tokens, mean B {stats['mean_b_when_present']:.1f} tokens")
    p("length histogram (real tokens incl. [CLS]/[SEP]):")
    p(length_histogram(lengths, manifest["max_seq_length"]))
    if num_examples:
        from electra_tf.text.tokenization import WordPieceTokenizer
        tokenizer = WordPieceTokenizer(manifest["vocab_file"], manifest["do_lower_case"],
                                       manifest.get("strip_accents"))
        for index, example in enumerate(examples[:num_examples]):
            p(f"\nexample {index} ({int(example['input_mask'].sum())} tokens):")
            p(decode_example(tokenizer, example))
    return stats


FLAGS = flags.FLAGS


def verify(data_dir: str, out=sys.stdout) -> int:
    """Print every problem of ``data_dir``'s shards and a summary; 1 if there is any, else 0."""
    from electra_tf.text.verify import verify_shards

    problems = verify_shards(data_dir)
    for problem in problems:
        print(problem, file=out)
    try:
        with open(os.path.join(data_dir, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        num_shards = len(manifest["shards"]) + len(manifest.get("eval_shards", []))
    except (OSError, ValueError, KeyError, TypeError):
        num_shards = 0
    if problems:
        bad = len({p.path for p in problems})
        print(f"verify {data_dir}: {len(problems)} problem(s) in {bad} file(s) of {num_shards} shard(s); rebuild "
              "the affected shards with `python -m data_prep.build_pretraining_dataset` (delete a corrupt shard "
              "and its .done.json first)", file=out)
        return 1
    print(f"verify {data_dir}: {num_shards} shard(s) OK", file=out)
    return 0


def define_flags() -> None:
    """Register the command-line flags (only when run as a program)."""
    flags.DEFINE_string("data_dir", None, "Directory with manifest.json and shards.")
    flags.DEFINE_string("verify", None, "Check the shards of this directory (sizes, sha256, record CRCs, "
                        "counts) instead of summarising; exit 1 if anything is wrong.")
    flags.DEFINE_integer("num_examples", 3, "Examples to decode back to text.")
    flags.DEFINE_integer("max_scan", 100000, "Examples read for the statistics.")


def run() -> None:
    """Print the report, or verify (the flags are parsed; see ``data_prep.cli``)."""
    if FLAGS.verify:
        return verify(FLAGS.verify)
    if not FLAGS.data_dir:
        print("error: --data_dir or --verify is required", file=sys.stderr)
        return 2
    summarize(FLAGS.data_dir, FLAGS.num_examples, FLAGS.max_scan)


if __name__ == "__main__":
    from data_prep.cli import run_cli
    run_cli(run, define_flags, errors=(ValueError,))
