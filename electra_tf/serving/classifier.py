"""A fine-tuned classifier as one text-in / label-out TF SavedModel.

`export_classifier(model, tokenizer, label_names, max_seq_length, path, two_texts)` writes a
SavedModel whose `serving_default` signature takes raw strings, `text` (and `text_b` for
sentence-pair tasks), tokenises them in the graph and returns

* `logits` and `probabilities` `[batch, num_labels]` and `label` (the label name, a string) and `label_id`
  for classification;
* `score` `[batch]` for regression (STS-B).

Tokenisation in the graph is `electra_tf.serving.text.graph_tokenizer`'s (a SentencePiece model's own
ids, its proto held in the SavedModel; or WordPiece with its two documented gaps), pairs truncated
longest-first (BERT's `_truncate_seq_pair`), `[CLS] a [SEP] b [SEP]` with segment ids.

Load and call it anywhere TensorFlow runs, without this package:

    import tensorflow as tf, tensorflow_text  # tensorflow_text registers the tokenizer ops
    model = tf.saved_model.load("exports/sst2")
    model.signatures["serving_default"](text=tf.constant(["a gripping, funny film"]))

or `saved_model_cli run --dir exports/sst2 --tag_set serve --signature_def serving_default
--input_exprs 'text=["a gripping, funny film"]'`.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.serving.portable import serving_model
from electra_tf.serving.text import (add_serving_endpoint, graph_tokenizer, masked, pad_to_longest, rows_within,
                                     serving_archive, write_archive)


def _keep_first(tokens, lengths):
    return masked(tokens, rows_within(tokens, high=tf.cast(lengths, tf.int64) - 1))


def truncate_longest_first(segments, budget: int):
    """BERT's `_truncate_seq_pair` on ragged rows: pop from the longer segment (b on ties).

    Its result in closed form: unchanged if a + b fits; else b keeps
    min(b, max(⌊budget/2⌋, budget − a)) tokens and a the rest of the budget.
    """
    if len(segments) == 1:
        return [_keep_first(segments[0], tf.fill(tf.shape(segments[0].row_lengths()), tf.cast(budget, tf.int64)))]
    a, b = segments
    len_a, len_b = a.row_lengths(), b.row_lengths()
    budget = tf.constant(budget, tf.int64)
    new_b = tf.minimum(len_b, tf.maximum(budget // 2, budget - len_a))
    new_a = tf.minimum(len_a, budget - new_b)
    return [_keep_first(a, new_a), _keep_first(b, new_b)]


class ClassifierServer(tf.Module):
    """Tokeniser + fine-tuned Keras model behind string signatures."""

    def __init__(self, model, tokenizer, label_names, max_seq_length: int):
        super().__init__()
        self.model = model
        self.tokenizer = graph_tokenizer(tokenizer)
        self.label_names = tf.constant([str(n) for n in (label_names or [])], tf.string)
        self.regression = not label_names
        self.max_seq_length = max_seq_length
        self.cls_id, self.sep_id, self.pad_id = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id

    def encode(self, texts_a, texts_b=None):
        segments = [self.tokenizer(texts_a)]
        if texts_b is not None:
            segments.append(self.tokenizer(texts_b))
        budget = self.max_seq_length - 1 - len(segments)  # [CLS] and one [SEP] per segment
        segments = truncate_longest_first(segments, budget)
        ids, segment_ids = tf_text.combine_segments(segments, self.cls_id, self.sep_id)
        return pad_to_longest(ids, segment_ids, self.pad_id)

    def predict(self, texts_a, texts_b=None):
        outputs = self.model(self.encode(texts_a, texts_b), training=False)
        if self.regression:
            return {"score": outputs["predictions"]}
        probabilities = tf.nn.softmax(outputs["logits"], axis=-1)
        label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"logits": outputs["logits"], "probabilities": probabilities, "label_id": label_id,
                "label": tf.gather(self.label_names, label_id)}


def export_classifier(model, tokenizer, label_names, max_seq_length: int, path: str, two_texts: bool) -> str:
    """Writes the SavedModel of `model`'s portable copy (`serving.portable.serving_model`) to `path` (via a temporary
    directory renamed into place)."""
    server = ClassifierServer(serving_model(model, max_seq_length), tokenizer, label_names, max_seq_length)
    text = tf.TensorSpec([None], tf.string, name="text")
    archive = serving_archive(server.tokenizer)
    if two_texts:
        text_b = tf.TensorSpec([None], tf.string, name="text_b")
        add_serving_endpoint(archive, lambda text, text_b: server.predict(text, text_b), [text, text_b])
    else:
        add_serving_endpoint(archive, lambda text: server.predict(text), [text])
    return write_archive(archive, path)

