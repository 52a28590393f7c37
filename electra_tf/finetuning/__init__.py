"""ELECTRA fine-tuning: GLUE, SQuAD 1.1/2.0 and generic text classification.

Modules: `tasks` (GLUE / tsv-csv readers and features), `squad` (SQuAD
features, decoding, scoring), `metrics` (GLUE metrics, official SQuAD
EM/F1), `heads` (task heads + losses), `layerwise_lr` (layer-wise LR decay
multipliers), `trainer` (the fine-tuning loop). The command-line entry point
is `run_finetuning.py` at the repository root.
"""
