r"""Benchmark: MB of raw text per second turned into ELECTRA TFRecords.

Three tokenizers run through the SAME pipeline (reading, sentence splitting,
official ELECTRA packing, protobuf serialisation, ``tf.io.TFRecordWriter``,
sharding and worker processes of ``data_prep.builder``), so only tokenisation
differs (``preload_tokenizer`` installs each one in the workers with
``data_prep.shard_writer.cache_tokenizer``):

* ``data_prep``  - ``electra_tf.text.tokenization.WordPieceTokenizer`` (tensorflow-text C++);
* ``hf-rust``    - HuggingFace ``tokenizers.BertWordPieceTokenizer`` (Rust,
  ``encode_batch_fast`` when available; rayon threads on all cores);
* ``pure-python``- ``electra_tf.text.reference_tokenizer`` (basic tokenizer + greedy
  longest-match-first WordPiece in Python, like the official code).

Each is timed at 1 and 2 processes on a fixed subset of
``../shared/data/pretrain/enwiki`` with the English uncased vocab.  Timings are
steady state: worker start-up (TensorFlow import, tokenizer construction) is
done before the clock starts; the end-to-end command line (including
start-up) is timed separately for ``data_prep``.  Output shards of each
tokenizer are compared byte for byte with ``data_prep``'s.

Usage (needs ``pip install -r requirements-bench.txt``):

    python -m bench.data_prep_bench                 # first 8 files, ~8.4 MB
    python -m bench.data_prep_bench --num_files=16 --processes=1,2 --skip_python
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from data_prep import shard_writer
from data_prep.builder import BuildOptions, make_plan, run_build
from data_prep.pool import make_pool
from electra_tf.runtime import use_onednn_kernels
from electra_tf.text.manifest import SPECIAL_TOKENS
from electra_tf.text.reference_tokenizer import ReferenceTokenizer
from electra_tf.text.tokenization import WordPieceTokenizer, read_vocab

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"


class _SpecialIdsMixin:
    def _set_specials(self, token_to_id):
        self.special_ids = {name: token_to_id[token] for name, token in SPECIAL_TOKENS.items()}
        self.unk_id = self.special_ids["unk"]


class HFRustTokenizer(_SpecialIdsMixin):
    """tokenizers.BertWordPieceTokenizer behind the builder's interface."""

    def __init__(self, vocab_file, do_lower_case=True, strip_accents=None):
        from tokenizers import BertWordPieceTokenizer
        self.tokenizer = BertWordPieceTokenizer(
            vocab_file, lowercase=do_lower_case, strip_accents=strip_accents, clean_text=True,
            handle_chinese_chars=True, wordpieces_prefix="##")
        self._set_specials({t: i for i, t in enumerate(read_vocab(vocab_file))})
        inner = self.tokenizer._tokenizer
        self._encode = getattr(inner, "encode_batch_fast", inner.encode_batch)

    def tokenize_flat(self, texts):
        encodings = self._encode(list(texts), add_special_tokens=False)
        ids = [e.ids for e in encodings]
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum()))
        return flat, lengths


class PurePythonTokenizer(_SpecialIdsMixin):
    """The official-style pure-Python tokenizer behind the builder's interface."""

    def __init__(self, vocab_file, do_lower_case=True, strip_accents=None):
        vocab = read_vocab(vocab_file)
        self.tokenizer = ReferenceTokenizer(vocab, do_lower_case, strip_accents)
        self._set_specials({t: i for i, t in enumerate(vocab)})

    def tokenize_flat(self, texts):
        ids = [self.tokenizer.tokenize_to_ids(t) for t in texts]
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum()))
        return flat, lengths


BACKENDS = {
    "data_prep": WordPieceTokenizer,
    "hf-rust": HFRustTokenizer,
    "pure-python": PurePythonTokenizer,
}


def preload_tokenizer(vocab_file, do_lower_case=True, strip_accents=None,
                      factory=WordPieceTokenizer) -> None:
    """Build, warm up and install this process's tokenizer before the clock starts.

    A ``make_pool`` initializer: the workers' timings then exclude TensorFlow's
    import and the tokenizer's construction.  ``factory(vocab_file,
    do_lower_case, strip_accents)`` returns an object with the
    ``WordPieceTokenizer`` interface (``tokenize_flat``, ``special_ids``,
    ``unk_id``); ``shard_writer.cache_tokenizer`` makes the builder use it.
    """
    vocab_file = os.path.abspath(vocab_file)
    tokenizer = factory(vocab_file, do_lower_case, strip_accents)
    tokenizer.tokenize_flat(["Warm up: é 中文 " + "x" * 120, "second line."])
    import tensorflow as tf  # the shard writer needs it; import it now
    tf.io.TFRecordWriter  # noqa: B018
    shard_writer.cache_tokenizer(tokenizer, vocab_file, do_lower_case, strip_accents)


def time_build(factory, inputs, vocab, processes, out_dir, max_seq_length, num_shards, repeats):
    """Best of ``repeats`` wall times to build all shards with warm workers; the manifest."""
    quiet = lambda message: None  # noqa: E731

    def one_run(index, pool=None):
        out = Path(f"{out_dir}-{index}")
        plan = make_plan(BuildOptions(inputs=inputs, output_dir=str(out), vocab_file=vocab,
                                      max_seq_length=max_seq_length, num_shards=num_shards))
        start = time.perf_counter()
        manifest = run_build(plan, num_processes=processes, log=quiet, pool=pool)
        elapsed = time.perf_counter() - start
        shutil.rmtree(out)
        return elapsed, manifest

    if processes == 1:
        preload_tokenizer(vocab, True, None, factory)
        runs = [one_run(i) for i in range(repeats)]
    else:
        with make_pool(processes, preload_tokenizer, (vocab, True, None, factory)) as pool:
            pool.pool.map(time.sleep, [1.0] * processes, chunksize=1)  # all workers initialised
            runs = [one_run(i, pool) for i in range(repeats)]
    return min(r[0] for r in runs), runs[0][1]


def time_cli(inputs, vocab, processes, out_dir, max_seq_length, num_shards, repeats):
    """Best of ``repeats`` end-to-end command-line runs (seconds)."""
    best = float("inf")
    for index in range(repeats):
        best = min(best, _time_cli_once(inputs, vocab, processes, Path(f"{out_dir}-{index}"),
                                        max_seq_length, num_shards))
    return best


def _time_cli_once(inputs, vocab, processes, out_dir, max_seq_length, num_shards):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "data_prep.build_pretraining_dataset", f"--input={inputs}",
               f"--vocab_file={vocab}", f"--output_dir={out_dir}", f"--num_processes={processes}",
               f"--max_seq_length={max_seq_length}", f"--num_shards={num_shards}"]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO, env=env, capture_output=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input_dir", default=str(SHARED / "pretrain" / "enwiki" / "AA"))
    parser.add_argument("--num_files", type=int, default=8)
    parser.add_argument("--vocab_file", default=str(SHARED / "vocab" / "en_uncased" / "vocab.txt"))
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--num_shards", type=int, default=8)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--skip_python", action="store_true", help="skip the slow pure-Python run")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per configuration; the best time is reported (the machine may be shared)")
    parser.add_argument("--python_repeats", type=int, default=2, help="runs for the pure-Python baseline")
    args = parser.parse_args()

    import tensorflow as tf  # noqa: F401  (loaded first: worker pools then use 'spawn')
    import tokenizers

    files = sorted(p for p in Path(args.input_dir).iterdir() if p.is_file())[:args.num_files]
    inputs = ",".join(str(p) for p in files)
    megabytes = sum(p.stat().st_size for p in files) / 1e6
    processes = [int(p) for p in args.processes.split(",")]
    backends = [b for b in args.backends.split(",") if not (args.skip_python and b == "pure-python")]
    work = Path(tempfile.mkdtemp(prefix="data_prep_bench-"))
    rows, reference_sha = [], None
    try:
        for name in backends:
            for count in processes:
                out = work / f"{name}-{count}"
                repeats = args.python_repeats if name == "pure-python" else args.repeats
                seconds, manifest = time_build(BACKENDS[name], inputs, args.vocab_file, count, out,
                                               args.max_seq_length, args.num_shards, repeats)
                if name == "data_prep" and reference_sha is None:
                    reference_sha = manifest["shard_sha256"]
                same = "yes" if manifest["shard_sha256"] == reference_sha else \
                    f"no ({sum(a != b for a, b in zip(manifest['shard_sha256'], reference_sha))}" \
                    f"/{len(reference_sha)} shards differ)"
                rows.append((name, count, megabytes / seconds, seconds, manifest["num_examples"], same))
                print(f"{name:12s} x{count}: {megabytes / seconds:6.2f} MB/s ({seconds:.2f} s)",
                      file=sys.stderr, flush=True)
        cli_rows = []
        for count in processes:
            seconds = time_cli(inputs, args.vocab_file, count, work / f"cli-{count}",
                               args.max_seq_length, args.num_shards, args.repeats)
            cli_rows.append((count, megabytes / seconds, seconds))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    by_key = {(r[0], r[1]): r[2] for r in rows}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nInput: {len(files)} files of {args.input_dir} ({megabytes:.1f} MB), vocab "
          f"{args.vocab_file}, max_seq_length={args.max_seq_length}, {args.num_shards} shards; "
          f"tokenizers {tokenizers.__version__}, {os.cpu_count()} CPUs, load average {load:.1f}; "
          f"best of {args.repeats} runs ({args.python_repeats} for pure-python).\n")
    print("| tokenizer in the pipeline | processes | MB/s | seconds | examples | "
          "shards identical to data_prep | data_prep speed-up |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for name, count, rate, seconds, examples, same in rows:
        ours = by_key.get(("data_prep", count))
        speedup = f"{ours / rate:.1f}x" if ours and name != "data_prep" else ""
        print(f"| {name} | {count} | {rate:.2f} | {seconds:.2f} | {examples:,} | {same} | {speedup} |")
    for count, rate, seconds in cli_rows:
        print(f"| data_prep CLI end-to-end (incl. Python/TF start-up) | {count} | {rate:.2f} | "
              f"{seconds:.2f} | | | |")
    print(f"\nCommand: {' '.join(['python -m bench.data_prep_bench'] + sys.argv[1:])}")


if __name__ == "__main__":
    use_onednn_kernels()  # before TensorFlow is imported
    main()
