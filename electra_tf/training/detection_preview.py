"""TensorBoard's view of what the discriminator sees during pre-training (`DetectionPreview`).

It runs the model on a fixed batch without touching any training state, so a run stays exactly resumable.
"""

import os

import numpy as np
import tensorflow as tf
from absl import logging

from electra_tf.model import masking
from electra_tf.text.manifest import FEATURE_NAMES
from electra_tf.text.tokenizers import validate_tokenizer_file
from electra_tf.training import input_pipeline, text_input


class DetectionPreview:
    """What the discriminator sees, for TensorBoard: one example as a table and probability histograms.

    Runs the model (no dropout) on a fixed batch read once from the shards, with
    masking seeds of the current step; it touches no training state, so runs stay
    exactly resumable. Writes `rtd/example` (text: original, discriminator input,
    p(replaced) per token) and histograms `rtd/p_replaced/original` and
    `rtd/p_replaced/replaced`.
    """

    def __init__(self, model, dataset, vocab_file=None, num_examples=8, seed=0):
        self.model, self.seed = model, seed
        self.batch = next(iter(dataset.unbatch().batch(num_examples).take(1)))
        self.vocab = read_vocab(vocab_file)
        self._forward = tf.function(self._outputs)

    def _outputs(self, step):
        size = tf.shape(self.batch["input_ids"])[0]
        seeds = masking.example_seeds(self.seed, step, tf.range(size))
        out = self.model.compute_losses(self.batch, training=False, seeds=seeds)
        return {"fake_ids": out["fake_ids"], "labels": out["labels"], "probs": tf.sigmoid(out["disc_logits"])}

    def write(self, writer, step: int):
        out = {k: v.numpy() for k, v in self._forward(tf.constant(step, tf.int64)).items()}
        real = self.batch["input_mask"].numpy() > 0
        with writer.as_default(step=step):
            for name, chosen in (("original", out["labels"] == 0), ("replaced", out["labels"] == 1)):
                tf.summary.histogram(f"rtd/p_replaced/{name}", out["probs"][real & chosen])
            tf.summary.text("rtd/example", self.example_table(out, real[0]))
        writer.flush()

    def token(self, token_id: int) -> str:
        return self.vocab[token_id] if 0 <= token_id < len(self.vocab) else str(token_id)

    def example_table(self, out, real) -> str:
        rows = ["| position | original | discriminator input | p(replaced) |", "|---|---|---|---|"]
        original = self.batch["input_ids"].numpy()[0]
        for position in np.flatnonzero(real):
            shown = self.token(int(out["fake_ids"][0, position]))
            if out["labels"][0, position]:
                shown = f"**{shown}** (replaced)"
            rows.append(f"| {position} | {self.token(int(original[position]))} | {shown} | "
                        f"{out['probs'][0, position]:.3f} |")
        return "\n".join(rows)


def read_vocab(vocab_file) -> list[str]:
    """The tokens (WordPiece) or pieces (SentencePiece `.model`) in id order; none where the file is gone
    or unreadable (the preview then shows ids)."""
    if not vocab_file or not os.path.isfile(vocab_file):
        return []
    try:
        return validate_tokenizer_file(vocab_file)
    except ValueError as e:
        logging.warning("TensorBoard's rtd/example shows ids: %s", e)
        return []


def make_preview(model, options, manifest, text=None):
    """The chief's preview for a model with a discriminator (None otherwise), reading the run's data once."""
    if "disc_loss" not in model.step_output_names:
        return None
    # Batches of 1, re-batched by the preview: batches of its 8 drop the remainder, and data of fewer examples
    # would give none.
    if text is not None:
        dataset = text_input.text_dataset(text, batch_size=1, seed=options.seed, shuffle_buffer=0, repeat=False)
    else:
        dataset = input_pipeline.pretraining_dataset(options.data_dir, manifest, batch_size=1, seed=options.seed,
                                                     shuffle_buffer=0, repeat=False,
                                                     skip_corrupt=options.skip_corrupt_records)
    dataset = dataset.map(lambda batch: {name: batch[name] for name in FEATURE_NAMES})
    return DetectionPreview(model, dataset, manifest.get("vocab_file"), seed=options.seed)
