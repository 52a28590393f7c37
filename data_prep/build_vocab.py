r"""Learn a BERT-style WordPiece vocabulary from raw text.

Words are exactly those of BERT's basic tokenizer (same normalisation as
``electra_tf.text.tokenization``: lower-casing / accent stripping, punctuation and
every CJK ideograph split off).  Their counts feed tensorflow-text's WordPiece
learner (``tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib``,
the engine of ``bert_vocab_from_dataset`` and keras-hub's
``compute_word_piece_vocabulary``), with ``##`` continuation pieces.

The output has EXACTLY ``--vocab_size`` lines, in this order:

1. the reserved tokens (default ``[PAD] [UNK] [CLS] [SEP] [MASK]`` at ids 0-4),
2. every kept character and its ``##`` form (so any word made of known
   characters can be tokenised without ``[UNK]``),
3. learned pieces, most frequent first,
4. ``[unused0]``, ``[unused1]``, ... if the corpus is too small to fill it.

Instead of the learner's own arithmetic binary search over the count
threshold (about 15 full learning runs), the threshold search here starts at
the count of the ``vocab_size``-th most frequent word (which gives at least
``vocab_size`` candidates on a big enough corpus), then doubles it while that
still holds, or halves it until it does (at most ``--max_search_steps`` runs);
the surplus lowest-count pieces are dropped.  Inputs: the builder's formats (text, WikiExtractor, JSON Lines,
``.gz``/``.bz2``).  The file is written atomically.

``--model_type=unigram`` or ``bpe`` instead trains a SentencePiece model with the
``sentencepiece`` package (``train_sentencepiece``) on the same paragraphs:
byte fallback on, ``[PAD] [UNK] [CLS] [SEP] [MASK]`` at ids 0-4 (pad and unk
as such, the other three as CONTROL symbols, so the text "[MASK]" in the input
never becomes the mask id), no BOS/EOS, lower-casing in the model's normalizer
(``nmt_nfkc_cf``) when ``--do_lower_case``.  It writes ``x.model`` and
``x.vocab`` (piece and score per line) for ``--output=x.model`` or ``--output=x``,
each atomically; one thread and a fixed seed make it deterministic for a fixed
input.

Example:

    python -m data_prep.build_vocab --input=../shared/data/pretrain/enwiki/AA/wiki_0[0-3] \
        --vocab_size=8000 --output=/tmp/vocab.txt
    python -m data_prep.build_vocab --model_type=unigram --input=../shared/data/pretrain/enwiki/AA/wiki_00 \
        --vocab_size=8000 --output=/tmp/sp_en.model   # writes /tmp/sp_en.model and /tmp/sp_en.vocab
"""

from __future__ import annotations

import collections
import os
import sys
import time
from typing import Callable, Iterable, Optional, Sequence

from absl import flags

from data_prep.corpus.byte_ranges import ByteRange
from data_prep.corpus.documents import RangeStats, batched, iter_documents
from data_prep.corpus.errors import CorpusError
from data_prep.corpus.inputs import FORMATS, expand_inputs, inspect_inputs
from electra_tf.text.manifest import SPECIAL_TOKENS, write_bytes_atomic, write_text_atomic

MODEL_TYPES = ("wordpiece", "unigram", "bpe")
SENTENCEPIECE_SEED = 12345

DEFAULT_RESERVED = tuple(SPECIAL_TOKENS.values())  # [PAD] [UNK] [CLS] [SEP] [MASK]
REQUIRED = DEFAULT_RESERVED
JOINER = "##"
MAX_TOKEN_LENGTH = 50
BATCH_PARAGRAPHS = 20000


def count_words(texts_batches: Iterable[Sequence[str]], do_lower_case: bool,
                strip_accents: Optional[bool]) -> collections.Counter:
    """BERT basic-tokenizer word counts of batches of texts (TF fast path)."""
    import tensorflow as tf
    from electra_tf.text.normalization import normalize_tf, split_words_tf
    strip = do_lower_case if strip_accents is None else strip_accents
    counts: collections.Counter = collections.Counter()
    for texts in texts_batches:
        if not texts:
            continue
        words = split_words_tf(normalize_tf(texts, do_lower_case, strip)).flat_values
        unique, _, freq = tf.unique_with_counts(words)
        for word, count in zip(unique.numpy().tolist(), freq.numpy().tolist()):
            counts[word.decode("utf-8")] += count
    return counts


def iter_paragraph_batches(paths: Sequence[str], input_format: str = "auto",
                           text_field: str = "text", stats: Optional[RangeStats] = None):
    """Batches of paragraphs from whole input files."""
    files = inspect_inputs(list(paths), input_format)
    stats = stats or RangeStats()
    paragraphs = (paragraph
                  for index, file in enumerate(files)
                  for docs in iter_documents(file, ByteRange(index, 0, None), stats, text_field)
                  for document in docs for paragraph in document)
    yield from batched(paragraphs, BATCH_PARAGRAPHS)


def learn_vocab(counts: collections.Counter, vocab_size: int,
                reserved_tokens: Sequence[str] = DEFAULT_RESERVED, max_unique_chars: Optional[int] = None,
                max_search_steps: int = 4, log: Callable[[str], None] = lambda m: None) -> list[str]:
    """Exactly ``vocab_size`` tokens learned from word ``counts``."""
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner
    reserved = list(dict.fromkeys(reserved_tokens))
    max_unique_chars = max_unique_chars or max(vocab_size // 2, 100)
    params = learner.Params(
        upper_thresh=None, lower_thresh=None, num_iterations=4, max_input_tokens=-1,
        max_token_length=MAX_TOKEN_LENGTH, max_unique_chars=max_unique_chars,
        vocab_size=vocab_size, slack_ratio=0.0, include_joiner_token=True, joiner=JOINER,
        reserved_tokens=reserved)
    all_counts = learner.get_input_words(counts.items(), reserved, MAX_TOKEN_LENGTH)
    allowed = learner.get_allowed_chars(all_counts, max_unique_chars)
    word_counts = learner.filter_input_words(all_counts, allowed, -1)
    if not word_counts:
        return _pad(reserved, vocab_size)
    threshold = max(1, word_counts[min(vocab_size, len(word_counts)) - 1][1])
    best = learner.learn_with_thresh(word_counts, threshold, params)
    log(f"threshold {threshold}: {len(best)} candidate tokens")
    step = 2 if len(best) >= vocab_size else 0.5
    for _ in range(max_search_steps - 1):
        next_threshold = max(1, int(threshold * step))
        if next_threshold == threshold:
            break
        candidate = learner.learn_with_thresh(word_counts, next_threshold, params)
        log(f"threshold {next_threshold}: {len(candidate)} candidate tokens")
        threshold = next_threshold
        if step > 1 and len(candidate) < vocab_size:
            break          # going up: keep the last threshold with enough candidates
        best = candidate
        if step < 1 and len(candidate) >= vocab_size:
            break          # going down: the first threshold with enough candidates
    return _assemble(best, reserved, vocab_size)


def _assemble(learned: list[str], reserved: list[str], vocab_size: int) -> list[str]:
    """Reserved, characters (+ ## forms), then pieces by count; exact size."""
    chars = [t for t in learned if len(t) == 1 and t not in reserved]
    essential = reserved + chars + [JOINER + c for c in chars]
    if len(essential) > vocab_size:
        raise CorpusError(f"--vocab_size={vocab_size} cannot hold the {len(reserved)} reserved "
                          f"tokens plus {len(chars)} characters and their ## forms; raise "
                          "--vocab_size or lower --max_unique_chars")
    seen = set(essential)
    pieces = [t for t in learned if t not in seen]
    return _pad(essential + pieces[:vocab_size - len(essential)], vocab_size)


def _pad(tokens: list[str], vocab_size: int) -> list[str]:
    present = set(tokens)
    index = 0
    tokens = list(tokens)
    while len(tokens) < vocab_size:
        token = f"[unused{index}]"
        index += 1
        if token not in present:
            tokens.append(token)
    return tokens


def write_vocab_atomic(tokens: Sequence[str], path: str) -> None:
    """Write one token per line to ``path`` atomically (creating its directory)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_text_atomic(path, "\n".join(tokens) + "\n")


def build_vocab(inputs: str, output: str, vocab_size: int = 30522, do_lower_case: bool = True,
                strip_accents: Optional[bool] = None,
                reserved_tokens: Sequence[str] = DEFAULT_RESERVED, input_format: str = "auto",
                text_field: str = "text", max_unique_chars: Optional[int] = None,
                max_search_steps: int = 4, log: Callable[[str], None] = lambda m: None) -> list[str]:
    """Learn a vocab from the comma-separated ``inputs`` and write it to ``output``."""
    missing = [t for t in REQUIRED if t not in reserved_tokens]
    if missing:
        raise CorpusError(f"--reserved_tokens must include {', '.join(missing)}")
    if vocab_size < len(reserved_tokens) + 2:
        raise CorpusError(f"--vocab_size={vocab_size} is too small")
    start = time.time()
    paths = expand_inputs(inputs)
    stats = RangeStats()
    counts = count_words(iter_paragraph_batches(paths, input_format, text_field, stats),
                         do_lower_case, strip_accents)
    if not counts:
        raise CorpusError(f"input {', '.join(paths[:3])}: contains no words")
    log(f"counted {sum(counts.values()):,} words ({len(counts):,} distinct) in "
        f"{stats.bytes_read / 1e6:.1f} MB, {stats.skipped_lines} invalid lines skipped, "
        f"{stats.nul_bytes} NUL bytes removed, "
        f"{time.time() - start:.1f} s")
    tokens = learn_vocab(counts, vocab_size, reserved_tokens, max_unique_chars,
                         max_search_steps, log)
    write_vocab_atomic(tokens, output)
    learned = sum(1 for t in tokens if not t.startswith("[unused"))
    log(f"wrote {output}: {len(tokens)} tokens ({len(tokens) - learned} [unused] padding) "
        f"in {time.time() - start:.1f} s")
    return tokens


def sentencepiece_trainer_args(model_type: str, vocab_size: int, do_lower_case: bool,
                               character_coverage: float = 0.9995) -> dict:
    """``SentencePieceTrainer.train`` settings for an ELECTRA vocab (see the module docstring)."""
    pad, unk, cls, sep, mask = (SPECIAL_TOKENS[k] for k in ("pad", "unk", "cls", "sep", "mask"))
    return dict(
        model_type=model_type, vocab_size=vocab_size, byte_fallback=True,
        character_coverage=character_coverage,  # rarer characters: byte pieces
        pad_id=0, pad_piece=pad, unk_id=1, unk_piece=unk, bos_id=-1, eos_id=-1,
        control_symbols=[cls, sep, mask],  # ids 2, 3, 4, in this order
        normalization_rule_name="nmt_nfkc_cf" if do_lower_case else "nmt_nfkc",
        num_threads=1, shuffle_input_sentence=False,  # deterministic for a fixed input
        hard_vocab_limit=False,  # a small corpus gives a smaller vocab instead of an error
        max_sentence_length=1 << 16, minloglevel=2)


def train_sentencepiece(paragraphs: Iterable[str], output: str, model_type: str = "unigram",
                        vocab_size: int = 30522, do_lower_case: bool = True,
                        character_coverage: float = 0.9995) -> bytes:
    """Train on ``paragraphs``; write ``<prefix>.model`` and ``<prefix>.vocab`` atomically (``prefix``:
    ``output`` less a final ``.model``, `sentencepiece_prefix`)."""
    import io
    import sentencepiece as spm
    proto = io.BytesIO()
    spm.set_random_generator_seed(SENTENCEPIECE_SEED)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(paragraphs), model_writer=proto,
            **sentencepiece_trainer_args(model_type, vocab_size, do_lower_case, character_coverage))
    except (RuntimeError, OSError) as e:
        raise CorpusError(f"--model_type={model_type} --vocab_size={vocab_size}: SentencePiece "
                          f"training failed ({str(e).strip()})") from None
    model = proto.getvalue()
    processor = spm.SentencePieceProcessor(model_proto=model)
    vocab_lines = [f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}"
                   for i in range(processor.get_piece_size())]
    prefix = sentencepiece_prefix(output)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)) or ".", exist_ok=True)
    write_bytes_atomic(prefix + ".model", model)
    write_text_atomic(prefix + ".vocab", "\n".join(vocab_lines) + "\n")
    return model


def sentencepiece_prefix(output: str) -> str:
    """The prefix of a SentencePiece model's two files: ``--output=x.model`` names the model itself (x.model and
    x.vocab), any other ``--output`` is the prefix (``--output=sp`` writes sp.model and sp.vocab).

    >>> sentencepiece_prefix("out/x.model"), sentencepiece_prefix("out/sp_en")
    ('out/x', 'out/sp_en')
    """
    return output[:-len(".model")] if output.endswith(".model") else output


def build_sentencepiece(inputs: str, output: str, model_type: str, vocab_size: int = 30522,
                        do_lower_case: bool = True, input_format: str = "auto",
                        text_field: str = "text", character_coverage: float = 0.9995,
                        log: Callable[[str], None] = lambda m: None) -> bytes:
    """Train a SentencePiece model on the paragraphs of the comma-separated ``inputs``."""
    if model_type not in MODEL_TYPES[1:]:
        raise CorpusError(f"--model_type={model_type}: expected one of {', '.join(MODEL_TYPES)}")
    start = time.time()
    paths = expand_inputs(inputs)
    stats = RangeStats()
    paragraphs = (p for batch in iter_paragraph_batches(paths, input_format, text_field, stats)
                  for p in batch if p.strip())
    model = train_sentencepiece(paragraphs, output, model_type, vocab_size, do_lower_case,
                                character_coverage)
    prefix = sentencepiece_prefix(output)
    log(f"read {stats.bytes_read / 1e6:.1f} MB; wrote {prefix}.model ({len(model):,} bytes) and "
        f"{prefix}.vocab in {time.time() - start:.1f} s")
    return model


FLAGS = flags.FLAGS


def define_flags() -> None:
    """Register the command-line flags (only when run as a program)."""
    flags.DEFINE_string("input", None, "Comma-separated input files, globs or directories.")
    flags.DEFINE_string("output", None, "Vocab file to write (unigram/bpe: the model file x.model, beside "
                        "which x.vocab is written, or a prefix x of x.model and x.vocab).")
    flags.DEFINE_enum("model_type", "wordpiece", list(MODEL_TYPES),
                      "wordpiece: BERT vocab file; unigram/bpe: SentencePiece model.")
    flags.DEFINE_integer("vocab_size", 30522, "Exact number of tokens in the output.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the text.")
    flags.DEFINE_enum("strip_accents", None, ["true", "false"],
                      "Strip accents; default: same as --do_lower_case.")
    flags.DEFINE_list("reserved_tokens", list(DEFAULT_RESERVED),
                      "Tokens at ids 0..N-1; must include [PAD],[UNK],[CLS],[SEP],[MASK].")
    flags.DEFINE_enum("input_format", "auto", list(FORMATS),
                      "Input format; auto detects it per file.")
    flags.DEFINE_string("text_field", "text", "JSON Lines field holding the text.")
    flags.DEFINE_integer("max_unique_chars", None,
                         "Alphabet size cap (default vocab_size/2); rarer characters become [UNK].")
    flags.DEFINE_integer("max_search_steps", 4, "Learner runs spent on the threshold search.")
    flags.DEFINE_float("character_coverage", 0.9995,
                       "unigram/bpe: share of characters given their own piece (the rest use "
                       "byte pieces); SentencePiece's default, suited to CJK.")


def run() -> None:
    """Learn and write the vocab (the flags are parsed; see ``data_prep.cli``)."""
    log = lambda m: print(f"[build_vocab] {m}", file=sys.stderr, flush=True)  # noqa: E731
    if FLAGS.model_type != "wordpiece":
        build_sentencepiece(FLAGS.input, FLAGS.output, FLAGS.model_type, FLAGS.vocab_size,
                            FLAGS.do_lower_case, FLAGS.input_format, FLAGS.text_field,
                            FLAGS.character_coverage, log)
        return
    strip = None if FLAGS.strip_accents is None else FLAGS.strip_accents == "true"
    build_vocab(FLAGS.input, FLAGS.output, FLAGS.vocab_size, FLAGS.do_lower_case, strip,
                FLAGS.reserved_tokens, FLAGS.input_format, FLAGS.text_field,
                FLAGS.max_unique_chars, FLAGS.max_search_steps, log=log)


if __name__ == "__main__":
    from data_prep.cli import run_cli
    run_cli(run, define_flags, required=("input", "output"))
