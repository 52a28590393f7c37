"""ELECTRA fine-tuning: GLUE, SQuAD 1.1/2.0, generic text classification and CoNLL token tagging.

Modules:

* `task`: the `Task` interface a run works with (`InputExample`, `EvalSet`);
* `sentence`: `SentenceTask`, sentence(-pair) classification and regression;
* `glue`: the GLUE task table and `GlueTask`; `tfds_input`: GLUE from TFDS;
* `text_classification`: `TextClassificationTask` over any tsv/csv;
* `squad`: SQuAD features, decoding, scoring and `SquadTask`;
* `tagging`: `TaggingTask` (`ner`, `chunk`, `tagging`): first-piece labels, windows, BIOES;
* `registry`: `get_task` / `register_task` by name; `tasks`: all of their public names;
* `encoding` (`[CLS] a [SEP] b [SEP]` features), `readers` (tsv/csv rows, columns);
* `metrics` (GLUE metrics, official SQuAD EM/F1), `heads` (task heads + losses),
  `conll` (CoNLL tagging files), `tagging_metrics` (conlleval's chunk scores),
  `layerwise_lr` (layer-wise LR decay multipliers).

A run, by concern:

* `prepare`: config, tokenizer, encoder factory, sequence length and features
  from the user's choices (`ModelOptions`); `errors`: `UsageError`;
* `model`: `FinetuningModel` (encoder + task head) and `build_model`;
* `data`: `Padding` (batches cut to their longest example), training datasets;
* `train`: optimizer, schedule and the training loop;
* `predict`: outputs with dynamic padding, prediction files;
* `evaluate`: dev scores, best-evaluation tracking, which weights are reported;
* `runner`: one seed (`run_single`) and several with their medians (`run_seeds`); the SavedModel is written by
  the export function its caller passes (`electra_tf.serving.export`: serving imports fine-tuning, not the reverse).

The command-line entry point is `run_finetuning.py` at the repository root.
"""
