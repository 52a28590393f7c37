r"""Summarise and decode a pre-training data directory.

Prints the manifest summary, a text histogram of real example lengths, the
[UNK] rate, segment statistics (single-segment share, mean A/B lengths) and
decodes ``--num_examples`` examples back to text.  Reads at most
``--max_scan`` examples for the statistics.

Example:

    python -m data_prep.inspect --data_dir=/tmp/enwiki_128 --num_examples=3
"""

from __future__ import annotations

import os
import sys
from typing import Iterator

import numpy as np
from absl import app, flags

from data_prep.manifest import load_manifest

FEATURES = ("input_ids", "input_mask", "segment_ids")


def iter_examples(data_dir: str, manifest: dict, limit: int) -> Iterator[dict]:
    """Examples as dicts of numpy arrays, shard by shard, at most ``limit``."""
    import tensorflow as tf
    length = manifest["max_seq_length"]
    spec = {name: tf.io.FixedLenFeature([length], tf.int64) for name in FEATURES}
    files = [os.path.join(data_dir, s) for s in manifest["shards"]]
    dataset = tf.data.TFRecordDataset(files).take(limit).batch(1024)
    for batch in dataset:
        parsed = tf.io.parse_example(batch, spec)
        arrays = {k: v.numpy() for k, v in parsed.items()}
        for i in range(len(arrays["input_ids"])):
            yield {k: arrays[k][i] for k in FEATURES}


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
    seg_b = np.array([int(e["segment_ids"].sum()) for e in examples])
    real = np.array([int(e["input_mask"].sum()) for e in examples])
    two = seg_b > 0
    a_len = np.where(two, real - seg_b - 2, real - 2)
    b_len = np.where(two, seg_b - 1, 0)
    return {"examples": len(examples), "single_segment": int((~two).sum()),
            "mean_a": float(a_len.mean()) if len(a_len) else 0.0,
            "mean_b_when_present": float(b_len[two].mean()) if two.any() else 0.0,
            "lengths": real}


def decode_example(tokenizer, example: dict) -> str:
    ids = example["input_ids"][example["input_mask"] > 0].tolist()
    return tokenizer.decode(ids)


def summarize(data_dir: str, num_examples: int = 3, max_scan: int = 100000,
              out=sys.stdout) -> dict:
    """Print the report; return the computed statistics."""
    manifest = load_manifest(data_dir)
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"data_dir        {os.path.abspath(data_dir)}")
    for key in ("num_shards", "num_documents", "num_examples", "num_tokens", "max_seq_length",
                "vocab_file", "vocab_size", "do_lower_case", "strip_accents",
                "num_skipped_lines"):
        p(f"{key:<15} {manifest.get(key)}")
    p(f"unk_rate        {manifest.get('unk_rate', 0.0):.4%} "
      f"({manifest.get('num_unk_tokens')} [UNK] tokens)")
    p(f"inputs          {', '.join(manifest.get('inputs', [])[:3])}"
      f"{' ...' if len(manifest.get('inputs', [])) > 3 else ''}")
    examples = list(iter_examples(data_dir, manifest, max_scan))
    stats = segment_stats(examples)
    lengths = stats["lengths"]
    p(f"\nscanned {len(examples):,} examples: mean length {lengths.mean():.1f}, "
      f"{(lengths == manifest['max_seq_length']).mean():.1%} full")
    p(f"single-segment  {stats['single_segment'] / max(1, len(examples)):.1%}; mean A "
      f"{stats['mean_a']:.1f} tokens, mean B {stats['mean_b_when_present']:.1f} tokens")
    p("length histogram (real tokens incl. [CLS]/[SEP]):")
    p(length_histogram(lengths, manifest["max_seq_length"]))
    if num_examples:
        from data_prep.tokenization import WordPieceTokenizer
        tokenizer = WordPieceTokenizer(manifest["vocab_file"], manifest["do_lower_case"],
                                       manifest.get("strip_accents"))
        for index, example in enumerate(examples[:num_examples]):
            p(f"\nexample {index} ({int(example['input_mask'].sum())} tokens):")
            p(decode_example(tokenizer, example))
    return stats


FLAGS = flags.FLAGS


def define_flags() -> None:
    """Register the command-line flags (only when run as a program)."""
    flags.DEFINE_string("data_dir", None, "Directory with manifest.json and shards.")
    flags.DEFINE_integer("num_examples", 3, "Examples to decode back to text.")
    flags.DEFINE_integer("max_scan", 100000, "Examples read for the statistics.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not FLAGS.data_dir:
        print("error: --data_dir is required", file=sys.stderr)
        return 2
    try:
        summarize(FLAGS.data_dir, FLAGS.num_examples, FLAGS.max_scan)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
