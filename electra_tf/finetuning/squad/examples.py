"""SQuAD examples: a json's articles, its paragraphs split into whitespace words, answers mapped to words.

Train examples whose answer text cannot be recovered from the context are skipped and counted.

Example:

>>> doc_tokens, offsets = whitespace_split("The  cat sat.")
>>> doc_tokens, offsets
(['The', 'cat', 'sat.'], [0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
>>> word_begins(offsets)
[0, 5, 9]
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional, Sequence

from absl import logging


@dataclasses.dataclass
class SquadExample:
    qas_id: str
    question_text: str
    doc_tokens: list  # whitespace words of the paragraph (shared by its questions)
    orig_answer_text: Optional[str] = None
    start_position: Optional[int] = None  # word index
    end_position: Optional[int] = None
    is_impossible: bool = False
    # Training answers: the answer's first character in its first word and its end (exclusive) in its last word,
    # for tokenizers that map pieces to characters (SentencePiece; `features.answer_pieces`).
    answer_chars: Optional[tuple] = None


def is_whitespace(c: str) -> bool:
    return c in " \t\r\n" or ord(c) == 0x202F


def whitespace_split(text: str) -> tuple[list[str], list[int]]:
    """Words of `text` and, for every character, the index of its word."""
    doc_tokens, char_to_word_offset = [], []
    prev_is_whitespace = True
    for c in text:
        if is_whitespace(c):
            prev_is_whitespace = True
        else:
            if prev_is_whitespace:
                doc_tokens.append(c)
            else:
                doc_tokens[-1] += c
            prev_is_whitespace = False
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


def word_begins(char_to_word: list[int]) -> list[int]:
    """Each word's first character, from `whitespace_split`'s character → word map (whitespace maps to the word
    before it, so a word's first character is the first one mapped to it)."""
    begins = []
    for i, word in enumerate(char_to_word):
        if word == len(begins):
            begins.append(i)
    return begins


def load_squad(path: str, articles: Optional[str] = None) -> list[dict]:
    """The `data` list of a SQuAD json, optionally sliced by article ("start:end")."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    if articles:
        start, _, end = articles.partition(":")
        data = data[int(start) if start else None:int(end) if end else None]
    return data


def read_examples(data: Sequence[dict], is_training: bool, v2: bool) -> tuple[list[SquadExample], int]:
    """Examples of a SQuAD `data` list and the number of training answers that failed."""
    examples, failures = [], 0
    for article in data:
        for paragraph in article["paragraphs"]:
            doc_tokens, char_to_word = whitespace_split(paragraph["context"])
            begins = word_begins(char_to_word)
            for qa in paragraph["qas"]:
                example = SquadExample(qa["id"], qa["question"], doc_tokens)
                if is_training:
                    example.is_impossible = bool(qa.get("is_impossible", False)) if v2 else False
                    if example.is_impossible:
                        example.start_position = example.end_position = -1
                        example.orig_answer_text = ""
                    else:
                        answer = qa["answers"][0]
                        offset, text = answer["answer_start"], answer["text"]
                        if offset + len(text) - 1 >= len(char_to_word):
                            failures += 1
                            continue
                        start, end = char_to_word[offset], char_to_word[offset + len(text) - 1]
                        actual = " ".join(doc_tokens[start:end + 1]).lower()
                        if actual.find(" ".join(text.split()).lower()) == -1:
                            failures += 1
                            continue
                        example.orig_answer_text = text
                        example.start_position, example.end_position = start, end
                        example.answer_chars = (offset - begins[start],
                                                min(offset + len(text) - begins[end], len(doc_tokens[end])))
                examples.append(example)
    if failures:
        logging.warning("SQuAD: skipped %d training question(s) whose answer is not in the context", failures)
    return examples, failures
