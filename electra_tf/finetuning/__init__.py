"""ELECTRA fine-tuning: GLUE, SQuAD 1.1/2.0 and generic text classification.

Modules:

* `task`: the `Task` interface the trainer works with (`InputExample`, `EvalSet`);
* `sentence`: `SentenceTask`, sentence(-pair) classification and regression;
* `glue`: the GLUE task table and `GlueTask`; `tfds_input`: GLUE from TFDS;
* `text_classification`: `TextClassificationTask` over any tsv/csv;
* `squad`: SQuAD features, decoding, scoring and `SquadTask`;
* `registry`: `get_task` / `register_task` by name; `tasks`: all of their public names;
* `encoding` (`[CLS] a [SEP] b [SEP]` features), `readers` (tsv/csv rows, columns);
* `metrics` (GLUE metrics, official SQuAD EM/F1), `heads` (task heads + losses),
  `layerwise_lr` (layer-wise LR decay multipliers), `trainer` (the fine-tuning loop).

The command-line entry point is `run_finetuning.py` at the repository root.
"""
