r"""Extend a WordPiece vocabulary with the whole words of a domain corpus that would save most pieces.

A word is one of BERT's basic-tokenizer words (the normalisation and split of
``electra_tf.text.tokenization``, counted by ``build_vocab.count_words``). Its
score is ``frequency × (pieces − 1)``: the pieces the corpus would save if the
word were one token, with ``pieces`` its WordPiece count under the old vocab.
Skipped: words already in the vocab (one piece, score 0), the special tokens,
and words the tokenizer would not keep (any ``[UNK]`` piece: characters absent
from the vocab, or a word over its 100-character limit). The ``--add`` best are
APPENDED after the old tokens, so every old id keeps its meaning (the vocab a
checkpoint was trained with stays its prefix; ``run_pretraining.py
--init_checkpoint`` initialises the new rows from their pieces).

Ties are broken by frequency (higher first), then by the word in code-point
order, so the output depends only on the counts. Fewer than ``--add`` words are
added when fewer words have a positive score (a line says so).

Writes ``--output`` atomically and, beside it, ``<output>.extension.json``: the
old and new vocab, their sizes and, per added word, its id, score, frequency and
old piece count.

Example:

    python -m data_prep.extend_vocab --vocab_file=../shared/data/vocab/en_uncased/vocab.txt \
        --input=domain/*.txt --add=1000 --output=domain_vocab.txt
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sys
from typing import Callable, Optional

from absl import flags

from data_prep.build_vocab import count_words, iter_paragraph_batches, write_vocab_atomic
from data_prep.corpus.errors import CorpusError
from data_prep.corpus.inputs import FORMATS, expand_inputs
from electra_tf.text.manifest import SPECIAL_TOKENS, write_json_atomic
from electra_tf.text.tokenization import WordPieceTokenizer

REPORT_SUFFIX = ".extension.json"
TOKENIZE_BATCH = 50000  # distinct words per tokenizer call


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A word that would become one token: its corpus frequency and its WordPiece count under the old vocab."""

    word: str
    frequency: int
    pieces: int

    @property
    def score(self) -> int:
        """The pieces the corpus saves when the word is one token."""
        return self.frequency * (self.pieces - 1)

    def order_key(self):
        return -self.score, -self.frequency, self.word


def piece_counts(words: list[str], tokenizer: WordPieceTokenizer) -> dict:
    """`{word: WordPiece count}` of the words the tokenizer keeps whole (no `[UNK]` piece)."""
    counts = {}
    for start in range(0, len(words), TOKENIZE_BATCH):
        batch = words[start:start + TOKENIZE_BATCH]
        for word, ids in zip(batch, tokenizer.tokenize(batch)):
            if ids and tokenizer.unk_id not in ids:
                counts[word] = len(ids)
    return counts


def best_words(word_counts: collections.Counter, tokenizer: WordPieceTokenizer, add: int) -> list[Candidate]:
    """The `add` candidates of highest score (ties: higher frequency, then the word), best first.

    `word_counts`: basic-tokenizer words (normalised as `tokenizer` normalises) and their frequencies.
    """
    excluded = set(tokenizer.vocab) | set(SPECIAL_TOKENS.values())
    words = sorted(word for word in word_counts if word not in excluded)
    pieces = piece_counts(words, tokenizer)
    candidates = [Candidate(word, word_counts[word], pieces[word]) for word in words
                  if pieces.get(word, 1) > 1]
    return sorted(candidates, key=Candidate.order_key)[:add]


def check_output(vocab_file: str, output: str) -> None:
    """Refuses an `--output` that would replace `--vocab_file`: shards and checkpoints made with it keep
    its sha256 and size, so the extension is a new file."""
    if os.path.abspath(output) == os.path.abspath(vocab_file):
        raise CorpusError(f"--output={output} is --vocab_file: the extended vocab must be a new file (shards "
                          "and checkpoints made with the old one record its size and sha256)")


def extend_vocab(vocab_file: str, inputs: str, add: int, output: str, do_lower_case: bool = True,
                 strip_accents: Optional[bool] = None, input_format: str = "auto", text_field: str = "text",
                 log: Callable[[str], None] = lambda message: None) -> dict:
    """Writes `output` (the old tokens, then the added words) and its report; returns the report."""
    from electra_tf.training.vocab_extension import check_extends

    if add is None or add <= 0:
        raise CorpusError(f"--add={add}: must be a positive number of words to add")
    if not os.path.isfile(vocab_file):
        raise CorpusError(f"--vocab_file={vocab_file}: no such file")
    check_output(vocab_file, output)
    try:
        tokenizer = WordPieceTokenizer(vocab_file, do_lower_case, strip_accents)
    except ValueError as e:
        raise CorpusError(f"--vocab_file: {e}") from None
    counts = count_words(iter_paragraph_batches(expand_inputs(inputs), input_format, text_field),
                         do_lower_case, strip_accents)
    if not counts:
        raise CorpusError(f"--input={inputs}: contains no words")
    chosen = best_words(counts, tokenizer, add)
    if len(chosen) < add:
        log(f"only {len(chosen)} of the {len(counts):,} distinct words would save pieces: adding {len(chosen)}, "
            f"not --add={add}")
    tokens = tokenizer.vocab + [candidate.word for candidate in chosen]
    try:
        check_extends(tokenizer.vocab, tokens, vocab_file, output)
    except ValueError as e:
        raise CorpusError(str(e)) from None
    report = extension_report(vocab_file, output, tokenizer.vocab_size, chosen, do_lower_case, tokenizer.strip_accents)
    write_vocab_atomic(tokens, output)
    write_json_atomic(output + REPORT_SUFFIX, report)
    log(f"wrote {output}: {len(tokenizer.vocab)} + {len(chosen)} tokens (ids {len(tokenizer.vocab)}.."
        f"{len(tokens) - 1} new); report {output + REPORT_SUFFIX}")
    return report


def extension_report(vocab_file: str, output: str, old_size: int, chosen: list[Candidate], do_lower_case: bool,
                     strip_accents: bool) -> dict:
    return {
        "vocab_file": os.path.abspath(vocab_file), "output": os.path.abspath(output),
        "old_size": old_size, "new_size": old_size + len(chosen), "do_lower_case": do_lower_case,
        "strip_accents": strip_accents, "score": "frequency * (pieces - 1); ties: frequency, then the word",
        "added": [{"id": old_size + i, "word": c.word, "score": c.score, "frequency": c.frequency,
                   "pieces": c.pieces} for i, c in enumerate(chosen)],
    }


FLAGS = flags.FLAGS


def define_flags() -> None:
    """Register the command-line flags (only when run as a program)."""
    flags.DEFINE_string("vocab_file", None, "The WordPiece vocab to extend (its tokens keep their ids).")
    flags.DEFINE_string("input", None, "Comma-separated domain text files, globs or directories.")
    flags.DEFINE_integer("add", None, "How many whole words to append.")
    flags.DEFINE_string("output", None, "The extended vocab to write (a new file).")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the text, as the vocab's tokenizer does.")
    flags.DEFINE_enum("strip_accents", None, ["true", "false"], "Strip accents; default: same as --do_lower_case.")
    flags.DEFINE_enum("input_format", "auto", list(FORMATS), "Input format; auto detects it per file.")
    flags.DEFINE_string("text_field", "text", "JSON Lines field holding the text.")


def run() -> None:
    """Extend and write the vocab (the flags are parsed; see ``data_prep.cli``)."""
    strip = None if FLAGS.strip_accents is None else FLAGS.strip_accents == "true"
    extend_vocab(FLAGS.vocab_file, FLAGS.input, FLAGS.add, FLAGS.output, FLAGS.do_lower_case, strip,
                 FLAGS.input_format, FLAGS.text_field,
                 log=lambda m: print(f"[extend_vocab] {m}", file=sys.stderr, flush=True))


if __name__ == "__main__":
    from data_prep.cli import run_cli
    run_cli(run, define_flags, required=("vocab_file", "input", "output"))  # --add=0 gets its own line
