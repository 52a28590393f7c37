"""Pre-training examples straight from raw text files, in tf.data ops (`run_pretraining.py --train_text`).

The same batches as `input_pipeline.pretraining_dataset` (`{input_ids, input_mask, segment_ids}`, int32
`[batch, seq]`) with no shard-building step. Everything is a TensorFlow op (no `tf.py_function`), so the
pipeline runs in tf.data service workers and its iterator is checkpointed like the shard pipeline's:

1. files: the globs expanded in Python, shuffled with the seed, sharded per worker by file (`worker_dataset`'s
   rules), read with `TextLineDataset` (NUL bytes deleted; invalid UTF-8 lines dropped, as data_prep does);
2. documents: a `scan` over each file's lines. Plain text: blank-line separated; WikiExtractor (`<doc ...>` as
   the first non-blank line): `<doc ...>` ... `</doc>` with the title line skipped. Paragraphs are the
   stripped non-blank lines joined by "\\n" (`electra_tf.text.held_out.document_text`), so `--eval_fraction`
   holds out exactly the documents data_prep's `--eval_fraction` puts into its eval shards;
3. sentences: data_prep's regex rule (`data_prep/corpus/sentences.py`) rewritten for RE2, which has no
   look-ahead: the look-ahead's characters are captured and written back (`SENTENCE_BREAKS`);
4. tokens: the tokenizer of `vocab_file` (`tokenizers.load_tokenizer`: a WordPiece vocab or a SentencePiece
   `.model`) by its `tokenize_in_graph`, TensorFlow ops only. SentencePiece: tensorflow-text's op, data_prep's
   ids exactly. WordPiece: its normalisation and tensorflow-text `FastWordpieceTokenizer`, with two
   differences from data_prep's Python path: lower-casing is `tf.strings.lower(encoding="utf-8")` (ICU)
   instead of Python's `str.lower` (they differ on 40 code points, Unicode 14 additions such as U+2C2F), and
   a word over 100 characters but under 400 bytes is WordPiece-split instead of becoming [UNK];
5. packing (`pack_document`): the official ExampleBuilder's rules, decision for decision (`data_prep/packing.py`),
   with stateless random numbers seeded by `(seed, hash of the document)`: the examples of a document do not
   depend on parallelism, file order or workers. Unlike data_prep, whose `random.Random` runs on from one
   document to the next, each document starts at the full target length: with `short_seq_prob=0` and
   `single_segment_prob=1` both make exactly the same examples (tests/test_text_input.py checks it); otherwise
   the same distributions (measured there and in docs/pretraining.md).

Example:

>>> import tempfile
>>> from electra_tf.training.text_input import TextSource, text_dataset
>>> d = tempfile.mkdtemp()
>>> _ = open(d + "/v.txt", "w").write("[PAD]\\n[UNK]\\n[CLS]\\n[SEP]\\n[MASK]\\nthe\\ncat\\nsat\\n.\\n")
>>> _ = open(d + "/a.txt", "w").write("The cat sat. The cat sat.\\n\\nThe cat.\\n")
>>> source = TextSource(patterns=(d + "/a.txt",), vocab_file=d + "/v.txt", max_seq_length=8,
...                     short_seq_prob=0.0, single_segment_prob=1.0)
>>> batch = next(iter(text_dataset(source, batch_size=2, seed=0, shuffle_buffer=0, repeat=False)))
>>> batch["input_ids"].numpy().tolist()
[[2, 5, 6, 7, 8, 5, 6, 3], [2, 5, 6, 8, 3, 0, 0, 0]]
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re

import numpy as np
import tensorflow as tf

from electra_tf.options import DEFAULT_SHUFFLE_BUFFER
from electra_tf.text import normalization
from electra_tf.text.held_out import HASH_BUCKETS, held_out_mask
from electra_tf.text.manifest import FEATURE_NAMES, MIN_SHORT_TARGET, SINGLE_SEGMENT_TARGET, SPECIAL_TOKENS
from electra_tf.text.tokenizers import load_tokenizer, tokenizer_sha256, validate_tokenizer_file
from electra_tf.training.input_pipeline import files_of_this_pipeline

TEXT, WIKI = "text", "wikiextractor"
SNIFF_LINES = 50  # a file whose first non-blank line (among these) starts with "<doc" is WikiExtractor output


@dataclasses.dataclass(frozen=True)
class TextSource:
    """What `--train_text` reads and how it makes examples (data options, recorded in the run's recipe)."""

    patterns: tuple  # globs / files, expanded by `expand_patterns`
    vocab_file: str
    max_seq_length: int
    do_lower_case: bool = True
    short_seq_prob: float = 0.05
    single_segment_prob: float = 0.1
    eval_fraction: float = 0.0  # documents `held_out_mask` picks are not trained on


def checked_source(options, config) -> TextSource:
    """`options`' (`TrainOptions`) --train_text source, refused (ValueError, one line naming the flag) when it
    matches no file or does not fit `config`."""
    check_flags(options.data_dir, options.train_text, options.vocab_file)
    if options.skip_corrupt_records:
        raise ValueError("--skip_corrupt_records is for --data_dir's TFRecord shards, not --train_text")
    source = TextSource(patterns=parse_patterns(options.train_text), vocab_file=options.vocab_file,
                        max_seq_length=config.max_seq_length, do_lower_case=options.do_lower_case,
                        short_seq_prob=options.short_seq_prob, single_segment_prob=options.single_segment_prob,
                        eval_fraction=options.eval_fraction)
    if not 0.0 <= source.eval_fraction < 1.0:
        raise ValueError(f"--eval_fraction={source.eval_fraction}: expected a fraction in [0, 1)")
    try:
        vocab_size = len(validate_tokenizer_file(source.vocab_file))
    except ValueError as e:
        raise ValueError(f"--vocab_file: {e}") from None
    if vocab_size != config.vocab_size:
        raise ValueError(f"--vocab_file {source.vocab_file} has {vocab_size} tokens but the model's vocab_size is "
                         f"{config.vocab_size}: set --hparams='{{\"vocab_size\": {vocab_size}}}'")
    return source


def check_flags(data_dir, train_text, vocab_file) -> list[str]:
    """The files of --train_text; ValueError (one line naming the flag) for --data_dir beside it, a glob that
    matches nothing or a missing --vocab_file."""
    if data_dir:
        raise ValueError("--data_dir and --train_text both given: train from one of them")
    files = expand_patterns(parse_patterns(train_text))
    if not vocab_file or not os.path.isfile(vocab_file):
        raise ValueError(f"--train_text needs --vocab_file (a WordPiece vocab, one token per line, or a "
                         f"SentencePiece .model); {vocab_file!r} is not a file")
    return files


def reader(source: TextSource, seed: int, shuffle_buffer: int):
    """`input_pipeline.worker_dataset`'s `make_dataset` for `source`."""
    def make_dataset(batch_size, input_context):
        return text_dataset(source, batch_size, seed=seed, input_context=input_context, shuffle_buffer=shuffle_buffer)
    return make_dataset


def held_out_source(source: TextSource, seed: int) -> tuple:
    """`evaluation.Evaluator`'s source for the documents `--eval_fraction` holds out: their examples in file
    order, unshuffled (the evaluation reads the files until it has its batches)."""
    def make_dataset(batch_size):
        dataset = examples_dataset(source, seed=seed, repeat=False, held_out=True)
        return dataset.batch(batch_size, drop_remainder=True).map(
            lambda batch: {name: batch[name] for name in FEATURE_NAMES})
    return "--train_text's held-out documents", {"num_examples": 1 << 62}, make_dataset


def parse_patterns(value: str) -> tuple:
    """`--train_text`'s comma-separated globs."""
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


def expand_patterns(patterns, flag: str = "--train_text") -> list[str]:
    """The files the globs match (sorted, each once; a directory: its files); ValueError in one line naming
    the flag when a pattern matches no file."""
    if not patterns:
        raise ValueError(f"{flag}: no file pattern given (expected GLOB[,GLOB...])")
    files = []
    for pattern in patterns:
        matches = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True))
        matches = sorted(f for m in matches for f in ([m] if os.path.isfile(m) else _files_under(m)))
        if not matches:
            raise ValueError(f"{flag}: no file matches {pattern!r} (expected text or WikiExtractor files)")
        files.extend(matches)
    return list(dict.fromkeys(os.path.abspath(f) for f in files))


def _files_under(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(root, name) for root, _, names in os.walk(directory)
                  for name in names if not name.startswith("."))


def file_format(path: str) -> str:
    """WIKI when the first non-blank line starts with "<doc", else TEXT (data_prep's `detect_format`)."""
    with open(path, "rb") as f:
        for _, line in zip(range(SNIFF_LINES), f):
            line = line.strip()
            if line:
                return WIKI if line.startswith(b"<doc ") or line == b"<doc>" else TEXT
    return TEXT


def synthesized_manifest(source: TextSource) -> dict:
    """The manifest fields the rest of a run reads (config checks, export, whole-word masking, recipe)."""
    vocab = validate_tokenizer_file(source.vocab_file)
    digest = tokenizer_sha256(source.vocab_file)
    return {"format_version": 1, "source": "train_text", "train_text": list(source.patterns),
            "max_seq_length": source.max_seq_length, "vocab_size": len(vocab), "vocab_file": source.vocab_file,
            "vocab_sha256": digest, "do_lower_case": source.do_lower_case,
            "special_token_ids": {name: vocab.index(token) for name, token in SPECIAL_TOKENS.items()},
            "short_seq_prob": source.short_seq_prob, "single_segment_prob": source.single_segment_prob,
            "eval_fraction": source.eval_fraction, "shards": [], "num_shards": 0}


# ---------------------------------------------------------------------------------------------------------
# Lines -> documents
# ---------------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _space_class() -> str:
    """Python's `\\s` (Unicode whitespace) as an RE2 class: RE2's `\\s` is ASCII only."""
    mask = np.zeros(0x110000, bool)
    mask[[cp for cp in range(0x110000) if re.match(r"\s", chr(cp))]] = True
    return normalization._re2_class(normalization._mask_ranges(mask))


def _strip(lines):
    """`str.strip()`: Unicode whitespace off both ends."""
    space = _space_class()
    return tf.strings.regex_replace(lines, f"^{space}+|{space}+$", "")


LINE_BLOCK = 256  # lines cleaned per vectorised call (tf.data's per-element cost dominates single lines)


def _clean_block(lines):
    """Lines without NUL bytes, stripped, and whether each is valid UTF-8 (data_prep drops the others)."""
    lines = tf.strings.regex_replace(lines, "\\x00", "")
    valid = tf.equal(lines, tf.strings.unicode_transcode(lines, "UTF-8", "UTF-8", errors="replace",
                                                         replacement_char=0xFFFD))
    return tf.data.Dataset.from_tensor_slices((_strip(lines), valid))


def _clean_lines(path):
    """The file's lines, NUL bytes deleted and stripped; invalid UTF-8 lines dropped (data_prep's cleaning)."""
    blocks = tf.data.TextLineDataset(path).batch(LINE_BLOCK)
    return blocks.flat_map(_clean_block).filter(_is_valid_utf8).map(_line_of)


# Selectors of `_clean_block`'s (line, valid) pairs and of `file_documents`' (complete, text) pairs.
def _is_valid_utf8(line, valid):
    return valid


def _line_of(line, valid):
    return line


def _is_complete_document(complete, text):
    return complete


def _document_text(complete, text):
    return text


def _not_the_end(line):
    return line, False


def file_documents(path, wiki) -> tf.data.Dataset:
    """The documents (paragraphs joined by "\\n") of one file; `wiki`: a WikiExtractor file (bool tensor)."""
    lines = _clean_lines(path).map(_not_the_end).concatenate(
        tf.data.Dataset.from_tensors((tf.constant(""), True)))  # the end of the file flushes the last document
    empty = tf.constant("")
    start = (empty, tf.constant(0, tf.int32), tf.constant(False), tf.constant(False))

    def step(state, item):
        text, paragraphs, in_doc, expect_title = state
        line, end = item
        blank = tf.equal(line, "")
        opens = wiki & tf.equal(tf.strings.substr(line, 0, 4), "<doc")
        closes = wiki & tf.equal(line, "</doc>")
        flush = end | opens | closes | (~wiki & blank)
        title = wiki & ~flush & ~blank & in_doc & expect_title
        content = ~flush & ~blank & (~wiki | (in_doc & ~expect_title))
        joined = tf.where(paragraphs > 0, tf.strings.join([text, line], "\n"), line)
        new_state = (tf.where(flush, empty, tf.where(content, joined, text)),
                     tf.where(flush, 0, paragraphs + tf.cast(content, tf.int32)),
                     tf.where(opens, True, tf.where(closes | end, False, in_doc)),
                     tf.where(opens, True, tf.where(title, False, expect_title)))
        return new_state, (flush & (paragraphs > 0), text)

    return lines.scan(start, step).filter(_is_complete_document).map(_document_text)


# ---------------------------------------------------------------------------------------------------------
# Documents -> sentences -> tokens
# ---------------------------------------------------------------------------------------------------------

_CLOSERS = "\"'\u201d\u2019\u00bb)\\]"
_UPPER = "A-Z0-9\u00c0-\u00d6\u00d8-\u00de\u0391-\u03a9\u0410-\u042f\u3040-\u30ff\u4e00-\u9fff"


@functools.lru_cache(maxsize=None)
def sentence_breaks() -> tuple:
    """(RE2 pattern, rewrite) pairs that put a "\\n" at each sentence end of data_prep's splitter.

    data_prep: `([.!?][closers]*)\\s+(?=[opener]?[upper])` -> group 1 + "\\n". RE2 has no look-ahead, so the
    looked-at characters are captured and written back; they are never a `[.!?]`, so consuming them cannot
    hide the next sentence end. Then the CJK rule `([。！？][closers]*)\\s*` -> group 1 + "\\n".
    """
    space = _space_class()
    latin = (f"([.!?][{_CLOSERS}]*){space}+([\"'\u201c\u2018(\\[]?[{_UPPER}])", "\\1\n\\2")
    cjk = (f"([\u3002\uff01\uff1f][\u201d\u2019\u300d\u300f\uff09)\"']*){space}*", "\\1\n")
    return latin, cjk


def split_sentences(document):
    """The non-empty sentences (1-D string tensor) of a document string (its paragraphs end sentences)."""
    text = document
    for pattern, rewrite in sentence_breaks():
        text = tf.strings.regex_replace(text, pattern, rewrite)
    sentences = tf.strings.split(text, "\n")
    return tf.boolean_mask(sentences, tf.strings.length(sentences) > 0)


# ---------------------------------------------------------------------------------------------------------
# Packing
# ---------------------------------------------------------------------------------------------------------

def _split_examples(lengths, draws, max_seq_length: int, short_seq_prob: float, single_segment_prob: float):
    """Per sentence its example, segment (0 = A) and token offset in that segment; per example its A and B
    lengths (kept after truncation), as `data_prep.packing.ExamplePacker.pack_document` decides. One pass: a
    sentence's segment depends only on the sentences before it in its example and on the example's
    first-segment budget, so each sentence is placed as it arrives.

    `draws` `[n, 4]` uniforms: column 0 the sentence's A/B coin, columns 1-3 of row k example k's
    single-segment draw, short-target draw and short target.
    """
    n = tf.shape(lengths)[0]
    max_len = tf.constant(max_seq_length, tf.int32)

    def first_target(k, target):
        single = draws[k, 1] < single_segment_prob
        return tf.where(single, SINGLE_SEGMENT_TARGET, (target - 3) // 2)

    def body(i, k, target, budget, current, first, second, example, segment, offset, a_lens, b_lens):
        length = lengths[i]
        to_a = ((first == 0) | (first + length < budget)
                | ((second == 0) & (first < budget) & (draws[i, 0] < 0.5)))
        example = example.write(i, k)
        segment = segment.write(i, tf.where(to_a, 0, 1))
        offset = offset.write(i, tf.where(to_a, first, second))
        first += tf.where(to_a, length, 0)
        second += tf.where(to_a, 0, length)
        current += length
        close = (current >= target) | ((i == n - 1) & (current > 0))
        a_len = tf.minimum(first, max_len - 2)
        b_len = tf.minimum(second, tf.maximum(0, max_len - a_len - 3))
        a_lens, b_lens = a_lens.write(k, a_len), b_lens.write(k, b_len)  # the last write, at its close, stays
        short = draws[k, 2] < short_seq_prob
        short_target = MIN_SHORT_TARGET + tf.cast(draws[k, 3] * float(max_seq_length - MIN_SHORT_TARGET + 1),
                                                  tf.int32)
        next_target = tf.where(short, tf.minimum(short_target, max_len), max_len)
        target = tf.where(close, next_target, target)
        k_next = k + tf.cast(close, tf.int32)
        budget = tf.where(close, first_target(tf.minimum(k_next, n - 1), target), budget)
        zero = tf.constant(0, tf.int32)
        return (i + 1, k_next, target, budget, tf.where(close, zero, current), tf.where(close, zero, first),
                tf.where(close, zero, second), example, segment, offset, a_lens, b_lens)

    arrays = [tf.TensorArray(tf.int32, size=n, element_shape=[]) for _ in range(5)]
    zero = tf.constant(0, tf.int32)
    start = (zero, zero, max_len, tf.cond(n > 0, lambda: first_target(0, max_len), lambda: zero),
             zero, zero, zero, *arrays)
    out = tf.while_loop(lambda i, *rest: i < n, body, start)
    num_examples = out[1]
    example, segment, offset = out[7].stack(), out[8].stack(), out[9].stack()
    a_lens = out[10].stack()[:num_examples]
    b_lens = out[11].stack()[:num_examples]
    return example, segment, offset, a_lens, b_lens


def assemble_examples(ids, example, segment, offset, a_lens, b_lens, max_seq_length: int, special: dict):
    """Dense `[examples, max_seq_length]` rows `[CLS] A [SEP] B [SEP]` (`data_prep.packing.assemble`'s)."""
    sentence = tf.cast(ids.value_rowids(), tf.int32)
    position = tf.gather(offset, sentence) + (tf.range(tf.size(ids.flat_values), dtype=tf.int32)
                                              - tf.gather(tf.cast(ids.row_starts(), tf.int32), sentence))
    row, is_b = tf.gather(example, sentence), tf.gather(segment, sentence) > 0
    a_len, b_len = tf.gather(a_lens, row), tf.gather(b_lens, row)
    keep = position < tf.where(is_b, b_len, a_len)
    column = tf.where(is_b, a_len + 2 + position, 1 + position)
    indices = tf.boolean_mask(tf.stack([row, column], axis=1), keep)
    count = tf.size(a_lens)
    rows = tf.fill([count, max_seq_length], tf.constant(special["pad"], tf.int32))
    rows = tf.tensor_scatter_nd_update(rows, indices, tf.boolean_mask(ids.flat_values, keep))
    has_b = b_lens > 0
    lengths = a_lens + 2 + tf.where(has_b, b_lens + 1, 0)
    columns = tf.range(max_seq_length, dtype=tf.int32)[None, :]
    sep_b = tf.where(has_b, a_lens + b_lens + 2, -1)[:, None]
    rows = tf.where(columns == 0, special["cls"], rows)
    rows = tf.where((columns == a_lens[:, None] + 1) | (columns == sep_b), special["sep"], rows)
    real = columns < lengths[:, None]
    segment_ids = (columns >= a_lens[:, None] + 2) & real & has_b[:, None]
    return {"input_ids": rows, "input_mask": tf.cast(real, tf.int32), "segment_ids": tf.cast(segment_ids, tf.int32)}


def document_seed(seed: int, document):
    """The stateless seed of a document's packing: the run's seed and a hash of the document's text."""
    key = tf.strings.to_hash_bucket_fast(document, HASH_BUCKETS)
    return tf.stack([tf.constant(seed, tf.int64), key])


def pack_document(ids, seed, source: TextSource, special: dict) -> dict:
    """The examples (`{input_ids, input_mask, segment_ids}`, `[examples, seq]` int32) of one document whose
    sentences' token ids are the ragged `ids` `[sentences, None]`; `seed`: `document_seed`'s."""
    lengths = tf.cast(ids.row_lengths(), tf.int32)
    draws = tf.random.stateless_uniform([tf.shape(lengths)[0], 4], seed=seed)
    parts = _split_examples(lengths, draws, source.max_seq_length, source.short_seq_prob,
                            source.single_segment_prob)
    return assemble_examples(ids, *parts, source.max_seq_length, special)


def examples_dataset(source: TextSource, *, seed: int = 0, input_context=None, repeat: bool = True,
                     files: list[str] | None = None, held_out: bool = False) -> tf.data.Dataset:
    """Unbatched examples of `source`'s files (`repeat` False: one pass, files in the given order, their documents
    interleaved by `cycle_length` 8); `held_out`: of the documents `source.eval_fraction` holds out instead."""
    files = files or expand_patterns(source.patterns)
    wiki = [file_format(f) == WIKI for f in files]
    tokenizer = load_tokenizer(source.vocab_file, do_lower_case=source.do_lower_case)
    special = tokenizer.special_ids  # what synthesized_manifest records, without reading and hashing the file again
    dataset, shard_files = files_of_this_pipeline(tf.data.Dataset.from_tensor_slices((files, wiki)), len(files),
                                                  seed=seed, input_context=input_context, repeat=repeat)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    documents = dataset.interleave(file_documents, cycle_length=min(len(files), 8), block_length=1,
                                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if source.eval_fraction > 0 or held_out:
        documents = documents.filter(lambda doc: tf.equal(held_out_mask(doc, source.eval_fraction), held_out))

    def examples(document):
        return pack_document(tokenizer.tokenize_in_graph(split_sentences(document)), document_seed(seed, document),
                             source, special)

    dataset = documents.map(examples, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
    if num_pipelines > 1 and not shard_files:
        dataset = dataset.shard(num_pipelines, input_context.input_pipeline_id)
    return dataset


def text_dataset(source: TextSource, batch_size: int, *, seed: int = 0, input_context=None,
                 shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, repeat: bool = True) -> tf.data.Dataset:
    """Batches of `{input_ids, input_mask, segment_ids}` (int32 `[batch, seq]`), as `pretraining_dataset`."""
    dataset = examples_dataset(source, seed=seed, input_context=input_context, repeat=repeat)
    if shuffle_buffer > 1:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.map(lambda batch: {name: batch[name] for name in FEATURE_NAMES}).prefetch(tf.data.AUTOTUNE)
