"""Fine-tuned models as TF SavedModels that take raw text, with everything from tokenisation to decoding in
the graph (load them with TensorFlow and tensorflow-text only).

* `text`: what every export shares: the in-graph tokeniser (WordPiece or SentencePiece), whitespace words with their
  character offsets, writing the SavedModel atomically;
* `portable`: the model every export holds: the trained weights in a copy built with TensorFlow's standard
  ops (no XLA) in float32, whatever device and precision trained them;
* `classifier`: sentence (pair) classification and regression: text in, label or score out;
* `squad`: SQuAD 1.1 / 2.0: question + context in, answer out (`python -m electra_tf.ask`);
* `tagging`: NER, chunking, any CoNLL tags: text in, tags and entity spans out (`python -m electra_tf.tag`);
* `export`: a fine-tuning task's SavedModel (`export_serving`, which `run_finetuning.py` hands the runner);
* `loading`: the commands' loading of an export, with one-line errors.

Serving depends on fine-tuning (its model, tasks and label schemes); fine-tuning never imports serving.
"""
