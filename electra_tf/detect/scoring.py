"""The discriminator's p(replaced) for every wordpiece of a text (`score_texts`), as `TokenScores`.

With `corrupt`, the checkpoint's generator first replaces tokens the way pre-training does
(`electra_tf.model.masking`), reproducibly from the seed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence


@dataclasses.dataclass
class TokenScores:
    """The discriminator's verdict on one text.

    `tokens`: the wordpieces the discriminator saw ([CLS]/[SEP] left out; with
    `--corrupt` the corrupted ones); `probs`: p(replaced) of each; `originals`:
    `None` when nothing was corrupted, else per token the original wordpiece
    where the generator changed it and `None` where the token is the original.
    `truncated`: wordpieces dropped to fit the sequence length. `word_starts`: per
    token, whether it begins a word (`word_starts()`; None: read from the `##` marks).
    """

    text: str
    tokens: list
    probs: list
    originals: list | None = None
    truncated: int = 0
    word_starts: list | None = None

    @property
    def corrupted(self) -> bool:
        return self.originals is not None

    @property
    def replaced(self) -> list:
        """Per token, whether it was really replaced (all False without corruption)."""
        return [o is not None for o in (self.originals or [None] * len(self.tokens))]

    def summary(self) -> str:
        notes = []
        if self.corrupted:
            notes.append(f"{sum(self.replaced)} of {len(self.tokens)} replaced")
        if self.truncated:
            notes.append(f"{self.truncated} wordpieces truncated")
        return f"  ({'; '.join(notes)})" if notes else ""


def word_starts(tokenizer, ids) -> list:
    """Per id, whether its piece begins a word (the tokenizer's own rule, `is_word_start`: the one whole-word
    masking uses)."""
    return [tokenizer.is_word_start(i) for i in ids]


def _encode(tokenizer, texts: Sequence[str], max_seq_length: int):
    """`[CLS] ids [SEP]` per text, truncated; returns (rows, number of pieces dropped per text)."""
    rows, dropped = [], []
    for ids in tokenizer.tokenize(list(texts)):
        keep = max_seq_length - 2
        dropped.append(max(0, len(ids) - keep))
        rows.append([tokenizer.cls_id, *ids[:keep], tokenizer.sep_id])
    return rows, dropped


def _corrupt_batch(pretrainer, input_ids, input_mask, segment_ids, seeds, special, mask_prob, temperature):
    """The pre-training corruption: mask → generator → sample (`pretrainer.execution.sampling`) → write samples in."""
    import tensorflow as tf

    from electra_tf.model import masking
    from electra_tf.model.heads import gather_positions

    length = int(input_ids.shape[1])
    max_predictions = min(length, max(1, math.ceil(mask_prob * length)))
    masked = masking.mask_inputs(
        input_ids, input_mask, seeds, mask_id=special["mask"],
        special_ids=(special["pad"], special["cls"], special["sep"], special["mask"]),
        mask_prob=mask_prob, max_predictions=max_predictions, mask_token_prob=pretrainer.config.mask_token_prob)
    hidden = pretrainer.generator({"token_ids": masked.input_ids, "segment_ids": segment_ids,
                                   "padding_mask": input_mask}, training=False)
    logits = pretrainer.generator_head(gather_positions(hidden, masked.positions))
    sampled = masking.sample_tokens(logits, seeds, temperature, pretrainer.execution.sampling)
    fake_ids, labels = masking.corrupt(input_ids, masked, sampled)
    return fake_ids, tf.cast(labels, tf.bool)


def score_texts(pretrainer, tokenizer, texts: Sequence[str], corrupt: bool = False, seed: int = 0,
                max_seq_length: int = 128, mask_prob: float | None = None, temperature: float | None = None,
                batch_size: int = 32) -> list:
    """A `TokenScores` per text: the discriminator's p(replaced) for every wordpiece.

    `pretrainer` is an `ElectraPretrainer` (discriminator + head; with `corrupt`
    the generator too), `tokenizer` one of `electra_tf.text.tokenizers.load_tokenizer`
    over the same vocabulary. With `corrupt`, text i is corrupted with the
    stateless seeds of example i at step 0 of run `seed`, so a text's corruption
    does not depend on the batch it is in. `mask_prob`/`temperature` default to
    the model's config. Sequences are capped at `max_position_embeddings`.
    """
    import numpy as np
    import tensorflow as tf

    from electra_tf.model import masking

    if pretrainer.discriminator is None or pretrainer.discriminator_head is None:
        raise ValueError("the model has no replaced-token discriminator (objective "
                         f"{pretrainer.config.objective!r})")
    if pretrainer.config.objective == "electric":
        # Its head is an energy: p(replaced) needs the cloze model's log q and the noise ratio too.
        raise ValueError("objective 'electric': the discriminator outputs energies, not p(replaced); "
                         "detection supports replaced-token-detection models only")
    config = pretrainer.config
    max_seq_length = max(3, min(int(max_seq_length), config.max_position_embeddings))
    mask_prob = config.mask_prob if mask_prob is None else float(mask_prob)
    temperature = config.temperature if temperature is None else float(temperature)
    special = tokenizer.special_ids
    rows, dropped = _encode(tokenizer, texts, max_seq_length)
    results = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        length = max(len(r) for r in chunk)
        ids = np.full((len(chunk), length), special["pad"], np.int32)
        for i, r in enumerate(chunk):
            ids[i, :len(r)] = r
        input_ids = tf.constant(ids)
        input_mask = tf.constant((np.arange(length)[None] < np.array([len(r) for r in chunk])[:, None])
                                 .astype(np.int32))
        segment_ids = tf.zeros_like(input_ids)
        replaced = tf.zeros_like(input_ids, tf.bool)
        if corrupt:
            seeds = masking.example_seeds(seed, 0, tf.range(start, start + len(chunk)))
            input_ids, replaced = _corrupt_batch(pretrainer, input_ids, input_mask, segment_ids, seeds, special,
                                                 mask_prob, temperature)
        hidden = pretrainer.discriminator({"token_ids": input_ids, "segment_ids": segment_ids,
                                           "padding_mask": input_mask}, training=False)
        probs = tf.sigmoid(tf.cast(pretrainer.discriminator_head(hidden), tf.float32)).numpy()
        seen, replaced = input_ids.numpy(), replaced.numpy()
        for i, row in enumerate(chunk):
            inner = slice(1, len(row) - 1)  # drop [CLS] and [SEP]
            originals = None
            if corrupt:
                originals = [tokenizer.vocab[o] if r else None
                             for o, r in zip(row[inner], replaced[i, inner])]
            results.append(TokenScores(
                text=texts[start + i], tokens=tokenizer.convert_ids_to_tokens(seen[i, inner]),
                probs=[round(float(p), 6) for p in probs[i, inner]], originals=originals,
                truncated=dropped[start + i], word_starts=word_starts(tokenizer, seen[i, inner])))
    return results
