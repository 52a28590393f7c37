"""The build plan: validated options, inputs and the fixed contents of each shard.

``make_plan`` turns ``BuildOptions`` (the command-line flags) into an
immutable ``BuildPlan``: the vocabulary, the input files (or a TFDS split),
per shard a fixed list of byte ranges (``corpus.byte_ranges.plan_byte_ranges``) or TFDS
example ranges, and a ``fingerprint`` of everything that influences the bytes
written.  The number of shards depends on the input size, never on the number
of processes, so the output is the same whatever the parallelism.

Example:

>>> import tempfile
>>> from data_prep.plan import BuildOptions, make_plan
>>> d = tempfile.mkdtemp()
>>> _ = open(d + "/corpus.txt", "w").write("The cat sat.\\n\\nThe dog ran.\\n")
>>> _ = open(d + "/vocab.txt", "w").write("[PAD]\\n[UNK]\\n[CLS]\\n[SEP]\\n[MASK]\\nthe\\n")
>>> plan = make_plan(BuildOptions(inputs=d + "/corpus.txt", output_dir=d + "/out",
...                               vocab_file=d + "/vocab.txt", num_shards=2))
>>> plan.num_shards, [f.format for f in plan.files], len(plan.fingerprint)
(2, ['text'], 64)
>>> make_plan(BuildOptions(inputs=d + "/corpus.txt", output_dir=d + "/out",
...                        vocab_file=d + "/vocab.txt", max_seq_length=1024))
Traceback (most recent call last):
data_prep.corpus.errors.CorpusError: --max_seq_length=1024 exceeds --max_position_embeddings=512 (the model's position table); use --max_seq_length<=512 or a model with a larger table
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Optional

from data_prep.corpus.byte_ranges import plan_byte_ranges
from data_prep.fs import join_path
from data_prep.corpus.errors import CorpusError
from data_prep.corpus.inputs import expand_inputs, inspect_inputs
from electra_tf.text.manifest import eval_shard_name, shard_name
from electra_tf.text.tokenizers import tokenizer_sha256, validate_tokenizer_file

# Bump when the bytes written for the same plan, or the shards' sidecar
# records, change: finished shards of an older version are then rebuilt.
# 2: sidecars count NUL bytes removed and tokens dropped by truncation.
CODE_VERSION = 2
# Builds with --eval_fraction also carry the held-out rule: builds that held documents out by
# blake2b (before the rule became electra_tf.text.held_out's FarmHash) are rebuilt.
HELD_OUT_RULE = "farmhash64-buckets-2^62"
# --dedup_documents's rule (data_prep.dedup applies it), in the fingerprint of builds that use it.
DEDUP_RULE = "blake2b-128 of document_text; first in (shard, position) order kept"
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
    eval_fraction: float = 0.0  # share of documents held out for evaluation (by a hash of their text)
    dedup_documents: bool = False  # drop exact duplicate documents (data_prep.dedup)


@dataclasses.dataclass(frozen=True)
class BuildPlan:
    options: BuildOptions
    vocab: tuple
    vocab_sha256: str
    files: tuple            # corpus.inputs.InputFile, empty for TFDS
    shard_ranges: tuple     # per shard: tuple of corpus.byte_ranges.ByteRange, or (lo, hi) for TFDS
    num_shards: int
    fingerprint: str

    @property
    def output_dir(self) -> str:
        return self.options.output_dir

    def shard_path(self, index: int) -> str:
        return join_path(self.output_dir, shard_name(index, self.num_shards))

    def eval_shard_path(self, index: int) -> str:
        return join_path(self.output_dir, eval_shard_name(index, self.num_shards))

    def input_names(self) -> list[str]:
        """The input files, or ``tfds:<name>/<split>``."""
        if self.options.tfds_name:
            return [f"tfds:{self.options.tfds_name}/{self.options.tfds_split}"]
        return [f.path for f in self.files]


def check_options(options: BuildOptions) -> None:
    """Reject impossible flag combinations with a one-line message."""
    if options.max_seq_length > options.max_position_embeddings:
        raise CorpusError(
            f"--max_seq_length={options.max_seq_length} exceeds --max_position_embeddings="
            f"{options.max_position_embeddings} (the model's position table); use "
            f"--max_seq_length<={options.max_position_embeddings} or a model with a larger table")
    if options.max_seq_length < 8:
        raise CorpusError(f"--max_seq_length={options.max_seq_length} is too small (minimum 8)")
    for name in ("short_seq_prob", "single_segment_prob"):
        value = getattr(options, name)
        if not 0.0 <= value <= 1.0:
            raise CorpusError(f"--{name}={value} must be in [0, 1]")
    if not 0.0 <= options.eval_fraction < 1.0:
        raise CorpusError(f"--eval_fraction={options.eval_fraction} must be in [0, 1)")
    if options.num_shards is not None and options.num_shards < 1:
        raise CorpusError(f"--num_shards={options.num_shards} must be >= 1")
    if bool(options.inputs) == bool(options.tfds_name):
        raise CorpusError("pass exactly one of --input and --tfds_name")
    if not options.output_dir:
        raise CorpusError("--output_dir is required")


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
    output_dir = options.output_dir if "://" in options.output_dir else os.path.abspath(options.output_dir)
    options = dataclasses.replace(options, output_dir=output_dir,
                                  vocab_file=os.path.abspath(options.vocab_file))
    try:
        vocab = validate_tokenizer_file(options.vocab_file)  # WordPiece vocab or SentencePiece .model
    except ValueError as e:
        raise CorpusError(str(e)) from None
    vocab_sha = tokenizer_sha256(options.vocab_file)  # in the fingerprint: another tokenizer file rebuilds
    if options.tfds_name:
        from data_prep.tfds_input import plan_tfds
        files, shard_ranges = (), plan_tfds(options, MIN_SHARDS)
    else:
        paths = expand_inputs(options.inputs, exclude_dir=options.output_dir)
        files = tuple(inspect_inputs(paths, options.input_format))
        total = sum(f.size for f in files)
        num_shards = options.num_shards or default_num_shards(total)
        if not options.num_shards and all(f.compressed for f in files):
            num_shards = min(num_shards, len(files))  # a compressed file is never split
        shard_ranges = tuple(tuple(r) for r in plan_byte_ranges(list(files), num_shards))
    fingerprint = _fingerprint(options, vocab_sha, files, shard_ranges)
    return BuildPlan(options, tuple(vocab), vocab_sha, files, shard_ranges, len(shard_ranges),
                     fingerprint)


def _fingerprint(options, vocab_sha, files, shard_ranges) -> str:
    relevant = dataclasses.asdict(options)
    for key in ("output_dir", "vocab_file", "max_position_embeddings", "inputs"):
        relevant.pop(key)
    if not options.eval_fraction:  # builds without a held-out split keep their fingerprint
        relevant.pop("eval_fraction")
    else:
        relevant["held_out_rule"] = HELD_OUT_RULE
    if not options.dedup_documents:  # builds without dedup keep their fingerprint
        relevant.pop("dedup_documents")
    else:
        relevant["dedup_rule"] = DEDUP_RULE
    payload = {
        "code_version": CODE_VERSION, "options": relevant, "vocab_sha256": vocab_sha,
        "files": [f.fingerprint() for f in files],
        "shards": [[dataclasses.astuple(r) for r in ranges] if options.inputs else list(ranges)
                   for ranges in shard_ranges],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
