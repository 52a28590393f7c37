"""Continued pre-training with a larger vocabulary than the checkpoint's (`run_pretraining.py --init_checkpoint`).

The run's data may use a vocab of V' > V tokens whose first V are the checkpoint's, in the same order (what
`python -m data_prep.extend_vocab` writes): the data decides `vocab_size` (`data_vocab_size`), anything that
shrinks or reorders the checkpoint's vocab, or replaces it by another of the same size, is refused in one line
naming both files and digests (`check_growth`, through the one vocabulary rule `text.vocabulary.check_vocabulary`). WordPiece
only: a SentencePiece `.model` on either side is refused in one line (its pieces come with scores and a
normaliser; appending pieces is no extension of it).
`VocabularyExtension` then loads the checkpoint into a twin of the model with V rows (`source_model`, through
whatever loader its format has) and copies it over (`copy_into`): every weight as it is, except those with a
vocabulary axis (the token embeddings the generator and discriminator share, the masked-LM heads' output
biases, and any separate generator table; an embedding projection has none and stays as it is), whose rows
0..V-1 are copied and whose rows V..V'-1 are new.

A new row is the mean of the rows of the token's pieces (`piece_ids`): its WordPiece ids under the OLD vocab,
split from the token's own text (not normalised again: a vocab token is already normalised). A `##` token is
split as a continuation (its first piece in `##` form where the old vocab has it); a token with no piece (it
is made of characters the tokenizer deletes) or with an `[UNK]` piece gets the `[UNK]` row. The same rule for
every vocabulary-axis weight, biases included: the generator's logit of a new word starts at the mean of its
pieces' logits, so its probability starts at their geometric mean, not at a random value.

Invariant (tests/test_vocab_extension.py): on id sequences with no new id, the discriminator's outputs and
the generator's logits over the old ids equal the checkpoint's, since every computation on old ids reads old
rows only.

Example:

>>> import numpy as np
>>> check_extends(["[PAD]", "bio"], ["[PAD]", "bio", "biology"], "old.txt", "new.txt")
>>> check_extends(["[PAD]", "bio"], ["bio", "[PAD]", "biology"], "old.txt", "new.txt")
Traceback (most recent call last):
...
ValueError: the new vocabulary new.txt (sha256 not recorded) is not the old vocabulary old.txt (sha256 not recorded): \
its line 1 is 'bio' there but '[PAD]' in old.txt (a vocabulary that reorders or replaces tokens changes what the ids \
mean); append new tokens after the checkpoint's (python -m data_prep.extend_vocab)
>>> extended_rows(np.array([[0., 2.], [4., 6.], [1., 1.]]), [[0, 1], [2]])
array([[0., 2.],
       [4., 6.],
       [1., 1.],
       [2., 4.],
       [1., 1.]])
"""

import dataclasses

import numpy as np
from absl import logging

from electra_tf.text.manifest import vocab_differs_from_record
from electra_tf.text.tokenization import WordPieceTokenizer, read_vocab
from electra_tf.text.tokenizers import is_sentencepiece
from electra_tf.text.vocabulary import EXTENSION, UNCHECKED, Vocabulary, check_vocabulary, compare_tokens

CONTINUATION = "##"


def check_extends(old_tokens: list, new_tokens: list, old_name: str, new_name: str) -> None:
    """Refuses (ValueError, one line naming both files and digests) a vocabulary `new_tokens` (from file
    `new_name`) that does not keep `old_tokens` (from file `old_name`) as its first tokens: the vocabulary rule
    (`vocabulary.compare_tokens`)."""
    compare_tokens(old_tokens, new_tokens, Vocabulary("the old vocabulary", old_name),
                   Vocabulary("the new vocabulary", new_name), hint=EXTENSION_HINT)


def piece_ids(tokens: list, old_vocab_file: str) -> list:
    """Each token's WordPiece ids under the vocab `old_vocab_file` (see the module docstring for the rule)."""
    tokenizer = WordPieceTokenizer(old_vocab_file, do_lower_case=False, strip_accents=False)
    continuation = [token.startswith(CONTINUATION) and len(token) > len(CONTINUATION) for token in tokens]
    bodies = [token[len(CONTINUATION):] if cont else token for token, cont in zip(tokens, continuation)]
    pieces = []
    for ids, cont in zip(tokenizer.tokenize(bodies), continuation):
        if not ids or tokenizer.unk_id in ids:
            ids = [tokenizer.unk_id]
        elif cont:
            first = CONTINUATION + tokenizer.vocab[ids[0]]
            ids = [tokenizer.token_to_id.get(first, ids[0])] + ids[1:]
        pieces.append(list(ids))
    return pieces


def extended_rows(array: np.ndarray, pieces: list, axis: int = 0) -> np.ndarray:
    """`array` with one slice appended along `axis` per entry of `pieces`: the mean of the slices it names."""
    new = [np.take(array, ids, axis=axis).mean(axis=axis, keepdims=True) for ids in pieces]
    return np.concatenate([array] + new, axis=axis).astype(array.dtype)


def check_growth(checkpoint: str, checkpoint_size: int, checkpoint_vocab: str | None, run_size: int,
                 run_vocab: str | None, run_name: str, run_sha256: str | None = None) -> str:
    """The vocabulary rule (`vocabulary.check_vocabulary`) for a run from `--init_checkpoint` `checkpoint`
    (`checkpoint_vocab`, `checkpoint_size` rows) whose vocabulary is `run_vocab` (`run_size` tokens, recorded
    digest `run_sha256`, named `run_name`): `SAME` or `UNCHECKED` at the checkpoint's size, `EXTENSION` above it;
    refused in one line naming both files (and digests) otherwise: another vocabulary of the same size, one
    that shrinks or reorders the checkpoint's, or a larger one where either file is not there to compare."""
    if run_size < checkpoint_size:
        raise ValueError(f"{run_name} has {run_size} tokens ({run_vocab}) but --init_checkpoint {checkpoint} has "
                         f"{checkpoint_size} ({checkpoint_vocab}): a vocabulary may only grow (python -m "
                         "data_prep.extend_vocab appends tokens); use the checkpoint's vocabulary or an extension "
                         "of it")
    theirs = Vocabulary(f"--init_checkpoint {checkpoint}'s vocabulary", checkpoint_vocab)
    ours = Vocabulary(run_name, run_vocab, run_sha256)
    if run_size == checkpoint_size:
        verdict = check_vocabulary(theirs, ours, allow_extension=False, hint=SAME_SIZE_HINT)
        if verdict == UNCHECKED:
            logging.warning("%s could not be compared with --init_checkpoint %s's (%s): the checkpoint holds no "
                            "vocabulary file; its %d rows are taken to mean the data's tokens", run_name,
                            checkpoint, checkpoint_vocab or "none found", checkpoint_size)
        return verdict
    for name, path in ((f"--init_checkpoint {checkpoint}'s vocabulary", checkpoint_vocab), (run_name, run_vocab)):
        if path and is_sentencepiece(path):
            raise ValueError(f"vocabulary extension supports WordPiece vocab files; {name} {path} is a SentencePiece "
                             f"model: continue pre-training with the checkpoint's own tokenizer ({checkpoint_size} "
                             f"ids), or pre-train from scratch with the new one")
    if not theirs.on_disk:
        raise ValueError(f"--init_checkpoint {checkpoint} holds no vocab.txt to compare with {run_name} ({run_size} "
                         f"tokens, {run_vocab}): its {checkpoint_size} rows can only be extended when its vocabulary "
                         "is known (use its export directory, or put its vocab.txt beside it)")
    if not ours.on_disk:
        raise ValueError(f"{run_name}: {run_vocab} is not on disk, so it cannot be checked against "
                         f"--init_checkpoint's vocabulary {checkpoint_vocab}")
    return check_vocabulary(theirs, ours, hint=EXTENSION_HINT)


SAME_SIZE_HINT = ("the checkpoint's embedding rows mean its own tokens: build the data with the checkpoint's "
                  "vocabulary, or one python -m data_prep.extend_vocab grows from it, or pre-train from scratch")
EXTENSION_HINT = "append new tokens after the checkpoint's (python -m data_prep.extend_vocab)"


def data_vocab_size(checkpoint: str, checkpoint_size: int, checkpoint_vocab: str | None, manifest: dict,
                    data_name: str) -> int:
    """The run's `vocab_size` with `--init_checkpoint=checkpoint` (`checkpoint_size` rows): the data's (its
    `manifest`'s; `data_name` names the data in messages, e.g. "--data_dir D"), once `check_growth` accepts its
    vocab."""
    vocab_file, name = manifest.get("vocab_file"), f"{data_name}'s vocabulary"
    if manifest["vocab_size"] != checkpoint_size and vocab_differs_from_record(manifest, vocab_file):
        raise ValueError(f"{name}: {vocab_file} is not the vocab the data was built with (its sha256 differs from "
                         "the manifest's), so the new rows cannot be told from it")
    data = Vocabulary.of_manifest(manifest, name)
    verdict = check_growth(checkpoint, checkpoint_size, checkpoint_vocab, manifest["vocab_size"], data.path, name,
                           data.sha256)
    if verdict == EXTENSION:
        logging.info("%s (%s) extends --init_checkpoint's (%s): vocab_size %d -> %d, the new rows made at "
                     "initialisation", name, vocab_file, checkpoint_vocab, checkpoint_size, manifest["vocab_size"])
    return manifest["vocab_size"]


@dataclasses.dataclass(frozen=True)
class VocabularyExtension:
    """How the V rows of a checkpoint become the V' rows of the run: `pieces[i]` are the old ids whose rows'
    mean is new row V + i."""

    old_vocab_file: str
    new_vocab_file: str
    old_size: int
    new_size: int
    pieces: list

    @classmethod
    def between(cls, old_vocab_file: str, new_vocab_file: str) -> "VocabularyExtension":
        """The extension from `old_vocab_file` to `new_vocab_file` (refused unless it extends it)."""
        old, new = read_vocab(old_vocab_file), read_vocab(new_vocab_file)
        check_extends(old, new, old_vocab_file, new_vocab_file)
        return cls(old_vocab_file, new_vocab_file, len(old), len(new), piece_ids(new[len(old):], old_vocab_file))

    def describe(self) -> str:
        return (f"extended vocabulary: {self.old_size} -> {self.new_size} ({self.new_size - self.old_size} new rows "
                "from their pieces' mean)")

    def source_model(self, model):
        """A twin of `model` (an `ElectraPretrainer`) with the old vocabulary's rows, to load the checkpoint into."""
        from electra_tf.model.networks import pretrainer_from_config

        if model.config.vocab_size != self.new_size:
            raise ValueError(f"the model has {model.config.vocab_size} token rows but {self.new_vocab_file} has "
                             f"{self.new_size} tokens")
        twin = pretrainer_from_config(model.config.replace(vocab_size=self.old_size),
                                      special_token_ids=model.special_token_ids, execution=model.execution)
        return twin.build_all()

    def copy_into(self, model, source) -> None:
        """Every weight of `source` (the twin, loaded) into `model`; vocabulary axes extended (`extended_rows`)."""
        pairs = list(zip(source.weights, model.weights))
        if len(source.weights) != len(model.weights):
            raise ValueError(f"the model has {len(model.weights)} weights, its {self.old_size}-row twin "
                             f"{len(source.weights)}")
        for old, new in pairs:
            if old.path != new.path:
                raise ValueError(f"the model's weight {new.path} pairs with {old.path} of its twin")
            value = np.asarray(old.numpy())
            if value.shape != tuple(new.shape):
                value = extended_rows(value, self.pieces, self._vocab_axis(old, new))
            new.assign(value)

    def _vocab_axis(self, old, new) -> int:
        """The one axis along which `old` has V entries and `new` V' (the weights are otherwise alike)."""
        old_shape, new_shape = tuple(old.shape), tuple(new.shape)
        axes = [axis for axis, (a, b) in enumerate(zip(old_shape, new_shape)) if a != b]
        if len(old_shape) != len(new_shape) or len(axes) != 1 or \
                (old_shape[axes[0]], new_shape[axes[0]]) != (self.old_size, self.new_size):
            raise ValueError(f"{new.path}: {old_shape} in the checkpoint's model, {new_shape} in the run's: only a "
                             f"vocabulary axis ({self.old_size} -> {self.new_size}) may differ")
        return axes[0]

