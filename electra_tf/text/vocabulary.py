"""The vocabulary rule, the one place that decides whether two vocabularies give token ids the same meaning.

Two vocabularies (a tokenizer file, a recorded sha256, or both) compare as

- `SAME`: the same tokens in the same order (WordPiece files whose bytes differ without changing a token, such as
  a final newline, are the same vocabulary), or where a side has no file or is a SentencePiece model, the same
  sha256 (the recorded one where a side has it);
- `EXTENSION`: the newer one keeps every old token at its id and appends tokens after them (what
  `python -m data_prep.extend_vocab` writes; WordPiece only, and only where the caller allows it);
- otherwise refused: ValueError, one line naming both files and both digests and the first line that differs.

Where neither a file nor a digest is known on one side nothing can be compared: `UNCHECKED`, and the caller says
so in one line. Callers: the data against `--init_checkpoint` (pre-training and fine-tuning), phase 2 against
phase 1, a resume against its run record, held-out data against the training data, a manifest against its own
vocab file.

Example:

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> def vocab(name, tokens):
...     path = os.path.join(d, name)
...     open(path, "w").write("\\n".join(tokens) + "\\n")
...     return Vocabulary(name, path)
>>> old, grown = vocab("old.txt", ["[PAD]", "bio"]), vocab("new.txt", ["[PAD]", "bio", "biology"])
>>> check_vocabulary(old, grown)
'extension'
>>> check_vocabulary(old, vocab("copy.txt", ["[PAD]", "bio"]))
'same'
>>> check_vocabulary(old, grown, allow_extension=False)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: new.txt .../new.txt (sha256 ...) is not old.txt .../old.txt (sha256 ...): it has 3 tokens, ...
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from electra_tf.text.manifest import sha256_file
from electra_tf.text.tokenization import read_vocab
from electra_tf.text.tokenizers import is_sentencepiece, validate_tokenizer_file

SAME, EXTENSION, UNCHECKED = "same", "extension", "unchecked"


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """One side of a comparison: `name` says whose it is in a message (a flag, a run), `path` its tokenizer file
    (None or missing: not on disk), `sha256` the digest recorded for it (None: the file's own)."""

    name: str
    path: Optional[str] = None
    sha256: Optional[str] = None

    @classmethod
    def of_manifest(cls, manifest: dict, name: str) -> "Vocabulary":
        """The vocabulary a data manifest (data_prep's, or --train_text's synthesised one) names and records."""
        return cls(name, manifest.get("vocab_file"), manifest.get("vocab_sha256"))

    @property
    def on_disk(self) -> bool:
        return bool(self.path) and os.path.isfile(self.path)

    @property
    def digest(self) -> Optional[str]:
        """The recorded sha256, else the file's; None where neither is known."""
        if self.sha256:
            return self.sha256
        return sha256_file(self.path) if self.on_disk else None

    def describe(self) -> str:
        return f"{self.name} {self.path or '(no file)'} (sha256 {self.digest or 'not recorded'})"


def check_vocabulary(old: Vocabulary, new: Vocabulary, allow_extension: bool = True, hint: str = "") -> str:
    """`SAME`, `EXTENSION` (only with `allow_extension`) or `UNCHECKED` for vocabulary `new` against `old` (see
    the module docstring); ValueError (one line naming both files and digests, then `hint`) otherwise."""
    if old.on_disk and new.on_disk and not (is_sentencepiece(old.path) or is_sentencepiece(new.path)):
        return _compare_tokens(old, new, allow_extension, hint)
    # A side not on disk, or a SentencePiece model (whose normaliser and scores decide the ids as much as its
    # pieces): the digests decide.
    old_digest, new_digest = old.digest, new.digest
    if old_digest is None or new_digest is None:
        return UNCHECKED
    if old_digest == new_digest:
        return SAME
    raise ValueError(_refusal(old, new, "another vocabulary (the digests differ)", hint))


def _compare_tokens(old: Vocabulary, new: Vocabulary, allow_extension: bool, hint: str) -> str:
    return compare_tokens(_tokens(old.path), _tokens(new.path), old, new, allow_extension, hint)


def _tokens(path: str) -> list:
    """The tokens in id order: a WordPiece file's lines as they are (whatever its special tokens), a
    SentencePiece model's pieces."""
    return validate_tokenizer_file(path) if is_sentencepiece(path) else read_vocab(path)


def compare_tokens(old_tokens: list, new_tokens: list, old: Vocabulary, new: Vocabulary, allow_extension: bool = True,
                   hint: str = "") -> str:
    """`check_vocabulary` on token lists already read (`old`, `new` name them in the refusal)."""
    if old_tokens == new_tokens:
        return SAME
    old_file = old.path or old.name
    differs = next((i for i, (a, b) in enumerate(zip(old_tokens, new_tokens)) if a != b), None)
    if differs is not None:
        why = (f"its line {differs + 1} is {new_tokens[differs]!r} there but {old_tokens[differs]!r} in {old_file} "
               "(a vocabulary that reorders or replaces tokens changes what the ids mean)")
    elif len(new_tokens) < len(old_tokens):
        why = (f"it has {len(new_tokens)} tokens, fewer than the {len(old_tokens)} of {old_file} (a vocabulary may "
               "only grow, by tokens appended after the old ones)")
    elif not allow_extension:
        why = f"it has {len(new_tokens)} tokens, {old_file}'s {len(old_tokens)} and more appended"
    elif any(side.path and is_sentencepiece(side.path) for side in (old, new)):
        why = ("it appends pieces to a SentencePiece model, whose pieces come with scores and a normaliser "
               "(extension supports WordPiece vocab files)")
    else:
        return EXTENSION
    raise ValueError(_refusal(old, new, why, hint))


def _refusal(old: Vocabulary, new: Vocabulary, why: str, hint: str) -> str:
    return f"{new.describe()} is not {old.describe()}: {why}" + (f"; {hint}" if hint else "")
