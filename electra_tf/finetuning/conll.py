"""CoNLL-format tagging files: sentences of (word, tag) and prediction files.

A CoNLL file has one token per line with whitespace-separated columns and
a blank line after each sentence; `-DOCSTART-` lines mark documents and are
skipped. The word and the tag are columns chosen by index: for CoNLL-2003
(`word POS chunk NER`) the word is column 0, NER column 3 (`NER_COLUMN`),
chunk column 2 (`CHUNK_COLUMN`). Every token line of a file has as many
columns as its first one, and every tag is IOB (`O`, `B-TYPE` or
`I-TYPE`; IOB1 and IOB2 both qualify, `E-`/`S-` do not; `tags="iob2"` also
requires each chunk to start with `B-`, `tags="none"` accepts any tag). Bad input raises
one `ValueError` line naming the file and line.

Prediction files have `word gold predicted` per token line and a blank
line between sentences (what the `conlleval` script reads); they are
written to a temp name and then renamed, so a reader never sees half a file.

Example:

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "dev.txt")
>>> _ = open(path, "w").write("-DOCSTART- -X- -X- O\\n\\nEU NNP B-NP B-ORG\\nrejects VBZ B-VP O\\n\\n"
...                           "Peter NNP B-NP B-PER\\nBlackburn NNP I-NP I-PER\\n")
>>> sentences = read_conll(path)
>>> sentences
[(['EU', 'rejects'], ['B-ORG', 'O']), (['Peter', 'Blackburn'], ['B-PER', 'I-PER'])]
>>> label_list(sentences)
['O', 'B-ORG', 'B-PER', 'I-PER']
>>> read_conll(path, label_column=CHUNK_COLUMN)[1][1]
['B-NP', 'I-NP']
>>> write_predictions(path + ".pred", sentences, [["B-ORG", "O"], ["B-PER", "O"]])
>>> print(open(path + ".pred").read())
EU B-ORG B-ORG
rejects O O
<BLANKLINE>
Peter B-PER B-PER
Blackburn I-PER O
<BLANKLINE>
"""

from __future__ import annotations

import os
from typing import Sequence

from electra_tf.text.manifest import write_text_atomic

WORD_COLUMN = 0
CHUNK_COLUMN = 2
NER_COLUMN = 3
DOCSTART = "-DOCSTART-"

Sentence = tuple[list[str], list[str]]


def is_iob_tag(tag: str) -> bool:
    """`O`, or `B-`/`I-` followed by a non-empty type."""
    return tag == "O" or (tag[:2] in ("B-", "I-") and len(tag) > 2)


SCHEMES = ("iob1", "iob2", "none")  # the tagging schemes a file may declare (`--tagging_scheme`)
TAG_CHECKS = ("iob", *SCHEMES)  # "iob": either IOB scheme


def read_conll(path: str, word_column: int = WORD_COLUMN, label_column: int = NER_COLUMN,
               encoding: str = "utf-8-sig", tags: str = "iob") -> list[Sentence]:
    """Sentences of `path` as (words, tags); blank-line runs and `-DOCSTART-` lines separate them.

    `tags`: "iob" or "iob1" accept any IOB tag; "iob2" also requires every chunk
    to start with `B-` (an `I-X` only after `B-X` or `I-X`); "none" accepts any tag.
    """
    if tags not in TAG_CHECKS:
        raise ValueError(f"tags must be one of {TAG_CHECKS}, got {tags!r}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    sentences: list[Sentence] = []
    words: list[str] = []
    sentence_tags: list[str] = []
    num_columns = first_line = None
    with open(path, encoding=encoding) as f:  # universal newlines: '\r\n' and '\r' end lines too
        for lineno, line in enumerate(f, start=1):
            fields = line.split()
            if not fields or fields[0] == DOCSTART:
                if words:
                    sentences.append((words, sentence_tags))
                    words, sentence_tags = [], []
                continue
            if num_columns is None:
                num_columns, first_line = len(fields), lineno
                for name, column in (("word", word_column), ("label", label_column)):
                    if not -num_columns <= column < num_columns:
                        raise ValueError(f"{path}:{lineno}: no {name} column {column} "
                                         f"(the line has {num_columns} columns)")
            elif len(fields) != num_columns:
                raise ValueError(f"{path}:{lineno}: {len(fields)} columns, expected {num_columns} "
                                 f"(as on line {first_line})")
            tag = fields[label_column]
            if tags != "none" and not is_iob_tag(tag):
                raise ValueError(f"{path}:{lineno}: tag {tag!r} is not IOB (O, B-TYPE or I-TYPE)")
            if tags == "iob2" and tag.startswith("I-") and (not words or sentence_tags[-1][2:] != tag[2:]):
                after = f"after {sentence_tags[-1]!r}" if words else "at the start of a sentence"
                raise ValueError(f"{path}:{lineno}: tag {tag!r} {after} is not IOB2 (a chunk starts with B-; "
                                 "IOB1 files need --tagging_scheme=iob1)")
            words.append(fields[word_column])
            sentence_tags.append(tag)
    if words:
        sentences.append((words, sentence_tags))
    return sentences


def label_list(sentences: Sequence[Sentence]) -> list[str]:
    """The tags that occur, sorted, with `O` first (`O` is always in the list)."""
    tags = {tag for _, sentence_tags in sentences for tag in sentence_tags}
    return ["O"] + sorted(tags - {"O"})


def _check_field(value: str, what: str, index: int) -> str:
    if not value or len(value.split()) != 1 or value != value.strip():
        raise ValueError(f"sentence {index}: {what} {value!r} is empty or contains whitespace")
    return value


def format_predictions(sentences: Sequence[Sentence], predictions: Sequence[Sequence[str]]) -> str:
    """`word gold predicted` lines, a blank line after each sentence."""
    if len(sentences) != len(predictions):
        raise ValueError(f"{len(predictions)} predicted sentences for {len(sentences)} sentences")
    blocks = []
    for index, ((words, gold), predicted) in enumerate(zip(sentences, predictions)):
        if not len(words) == len(gold) == len(predicted):
            raise ValueError(f"sentence {index}: {len(words)} words, {len(gold)} gold tags, "
                             f"{len(predicted)} predicted tags")
        lines = [" ".join(_check_field(v, what, index) for v, what in
                          ((w, "word"), (g, "gold tag"), (p, "predicted tag")))
                 for w, g, p in zip(words, gold, predicted)]
        blocks.append("".join(line + "\n" for line in lines) + "\n")
    return "".join(blocks)


def write_predictions(path: str, sentences: Sequence[Sentence], predictions: Sequence[Sequence[str]]) -> None:
    """Write `format_predictions` to `path` atomically (temp file, then rename)."""
    write_text_atomic(path, format_predictions(sentences, predictions))
