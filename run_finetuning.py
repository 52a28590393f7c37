"""Fine-tune ELECTRA on GLUE, SQuAD 1.1/2.0, any tsv/csv text classification task or CoNLL tagging.

Examples:

    # GLUE (tsv layout of download_glue_data.py), pre-trained encoder:
    python run_finetuning.py --task=RTE --data_dir=glue_data --init_checkpoint=out/export \\
        --model_size=small --output_dir=out/rte --num_seeds=5 --do_predict

    # A tiny model from random init, capped at 300 steps:
    python run_finetuning.py --task=SST-2 --data_dir=../shared/data/glue --model_size=tiny \\
        --vocab_file=../shared/data/vocab/en_uncased/vocab.txt --output_dir=/tmp/sst2 --max_train_steps=300

    # Export a fine-tuned run alone (a checkpoint in, a SavedModel out):
    python run_finetuning.py --task=SST-2 --data_dir=../shared/data/glue --init_checkpoint=/tmp/sst2 \
        --output_dir=/tmp/sst2_export --nodo_train --nodo_eval --export_saved_model=/tmp/sst2_export/saved_model

    # CoNLL-2003 NER (entity F1 by conlleval; chunking: --task=chunk; other columns: --task=tagging):
    python run_finetuning.py --task=ner --data_dir=../shared/data/conll2003 --model_size=tiny \\
        --vocab_file=../shared/data/vocab/en_uncased/vocab.txt --output_dir=/tmp/ner --do_predict

    # Chinese sentiment, generic task:
    python run_finetuning.py --task=text_classification --data_dir=../shared/data/chinese/ChnSentiCorp \\
        --text_column=text_a --label_column=label --vocab_file=../shared/data/vocab/zh/vocab.txt ...

Hyper-parameters left unset come from `electra_tf.config.get_config(--model_size, --hparams)`
(`finetune_learning_rate`, `finetune_layerwise_lr_decay`, `finetune_batch_size`, ...), with the
official per-task epochs (10 for RTE and STS-B, 2 for SQuAD). With `--init_checkpoint` the
architecture always comes from the checkpoint, and `--model_size` defaults to the checkpoint's size
(an export's recorded size and `finetune_*` values; for Hugging Face / official checkpoints the
size with the same width and depth, else small), so a tiny export is fine-tuned with tiny's
learning rate and layer decay.

As in the official code the loss is summed over the batch before the global-norm clip at 1.0
(`finetune_loss_reduction`), the layer-wise decay keeps the official off-by-one
(`finetune_official_layerwise_lr_bug`; `--noofficial_layerwise_lr_bug` corrects it), and test
predictions and the reported metrics come from the final weights (`--select_best_epoch` picks the
best dev evaluation instead). Batches are cut to their longest example (`--dynamic_padding`) and
training batches are drawn from similar lengths (`--length_bucketing`).

`--num_seeds=N` trains N times and reports every run and the median of each metric in
`<output_dir>/metrics.json` ("median": of the selected evaluations, "selection" says which).

A killed run resumes when the same command is run again: each seed checkpoints every
`--save_checkpoints_steps` (default: once per epoch) and at each epoch end, seeds that finished
are not trained again, and a different command against the same `--output_dir` is refused
(`--overwrite_output_dir` starts over). See docs/finetuning.md, "Resuming". One run writes to an
`--output_dir` at a time: it holds `<output_dir>/run.lock` as `run_pretraining.py` holds its `--model_dir`'s.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from electra_tf.runtime import use_onednn_kernels, use_xla_cache

use_onednn_kernels()  # before TensorFlow is imported

from absl import app, flags  # noqa: E402

from electra_tf.config import MODEL_SIZES  # noqa: E402
from electra_tf.finetuning.conll import SCHEMES  # noqa: E402
from electra_tf.finetuning.errors import UsageError  # noqa: E402
from electra_tf.options import (PRECISIONS, STRATEGIES, RunOptions, SquadOptions, default,  # noqa: E402
                                define_execution_flags, execution_from_flags)

FLAGS = flags.FLAGS

flags.DEFINE_string("task", None, "GLUE task (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI), "
                    "squad, squad_v2, text_classification, ner, chunk (CoNLL-2003 columns) or tagging (any CoNLL columns).")
flags.DEFINE_string("data_dir", None, "Folder with the task's files (a GLUE root or task folder works).")
flags.DEFINE_string("output_dir", None, "Where metrics, logs, checkpoints and predictions go.")
flags.DEFINE_string("init_checkpoint", None, "Pre-trained model (export dir of run_pretraining.py, or "
                    "a Hugging Face / official checkpoint: see electra_tf.convert). Unset: random initialisation.")
flags.DEFINE_enum("model_size", None, list(MODEL_SIZES), "Defaults of electra_tf.config "
                    "(default: the --init_checkpoint's size, else small). The architecture of a "
                    "checkpoint always wins.")
flags.DEFINE_string("hparams", None, "JSON object or JSON file of get_config overrides.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt or SentencePiece .model (defaults to the "
                    "checkpoint's tokenizer).")
flags.DEFINE_boolean("do_lower_case", True, "Lower-case (and strip accents) before WordPiece (a SentencePiece "
                     "model normalises as it was built).")
flags.DEFINE_float("learning_rate", None, "Peak learning rate (config: finetune_learning_rate).")
flags.DEFINE_integer("train_batch_size", None, "Global batch size (config: finetune_batch_size).")
flags.DEFINE_integer("eval_batch_size", None, "Prediction batch size (default: the train batch size).")
flags.DEFINE_float("num_train_epochs", None, "Epochs (config: finetune_epochs; RTE/STS-B 10, SQuAD 2).")
flags.DEFINE_float("warmup_fraction", None, "Linear warm-up share of the steps (config: 0.1).")
flags.DEFINE_float("weight_decay", None, "Decoupled weight decay (config: finetune_weight_decay).")
flags.DEFINE_float("layerwise_lr_decay", None, "Per-layer LR decay; <=0 or 1 disables it.")
flags.DEFINE_boolean("official_layerwise_lr_bug", None, "Reproduce the official code's extra layer-wise decay "
                     "factor (default: the config's finetune_official_layerwise_lr_bug, true); "
                     "--noofficial_layerwise_lr_bug gives the corrected formula.")
flags.DEFINE_boolean("select_best_epoch", default(RunOptions, "select_best_epoch"),
                     "Predict and report with the weights of the best dev "
                     "evaluation (best.weights.h5) instead of the final weights.")
flags.DEFINE_boolean("dynamic_padding", default(RunOptions, "dynamic_padding"),
                     "Cut each batch to its longest example (rounded up to 16 "
                     "tokens per 128); false pads every batch to --max_seq_length (always on TPU).")
flags.DEFINE_boolean("length_bucketing", default(RunOptions, "length_bucketing"),
                     "Fill each training batch with examples of similar length "
                     "(deterministic per seed; with --dynamic_padding).")
flags.DEFINE_integer("max_seq_length", None, "Tokens per example (default 128; SQuAD 512, capped at "
                     "the model's max_position_embeddings).")
flags.DEFINE_integer("max_train_steps", None, "Cap on training steps (quick runs).")
flags.DEFINE_integer("seed", default(RunOptions, "seed"), "Random seed of the first run.")
flags.DEFINE_integer("num_seeds", 1, "Runs with seeds seed, seed+1, ...; metrics.json holds the medians.")
flags.DEFINE_boolean("do_train", default(RunOptions, "do_train"), "Fine-tune.")
flags.DEFINE_boolean("do_eval", default(RunOptions, "do_eval"),
                     "Score the dev set(s) after every epoch and at the end.")
flags.DEFINE_boolean("do_predict", default(RunOptions, "do_predict"),
                     "Write test-set predictions (GLUE submission files, "
                     "SQuAD predictions.json).")
flags.DEFINE_enum("strategy", "auto", STRATEGIES,
                  "tf.distribute strategy.")
flags.DEFINE_string("tpu", None, "TPU name or grpc:// address (with --strategy=tpu or auto).")
flags.DEFINE_integer("num_cpu_devices", None, "Split the CPU into this many logical devices (testing).")
flags.DEFINE_enum("mixed_precision", default(RunOptions, "mixed_precision"), list(PRECISIONS), "Compute precision.")
define_execution_flags(flags)
flags.DEFINE_integer("log_steps", default(RunOptions, "log_steps"), "Log train loss/LR every this many steps.")
flags.DEFINE_integer("save_checkpoints_steps", None, "Checkpoint every this many steps (default: once per epoch; "
                     "there is always one at each epoch end); a killed run re-run with the same command "
                     "resumes from the newest.")
flags.DEFINE_boolean("overwrite_output_dir", False, "Start over: remove the checkpoints, weights, logs and "
                     "results a previous run left in --output_dir (and its seed_N/ folders) instead of "
                     "resuming it or refusing a changed command.")
flags.DEFINE_string("export_saved_model", None, "Also write a TF SavedModel that takes raw text (text, "
                    "and text_b for pair tasks) and returns label probabilities and the label name "
                    "(tokenisation in the graph). With --num_seeds > 1, one per seed under seed_N/. With "
                    "--nodo_train --nodo_eval it is all the run does: the fine-tuned weights of --output_dir, else "
                    "those of --init_checkpoint (a fine-tuning run's folder), are exported.")
flags.DEFINE_string("train_file", None, "Replaces the task's train file.")
flags.DEFINE_string("dev_file", None, "Replaces the task's (first) dev file.")
flags.DEFINE_string("test_file", None, "Replaces the task's (first) test file.")
flags.DEFINE_string("diagnostic_file", None, "GLUE AX tsv, predicted with the MNLI model (AX.tsv).")
flags.DEFINE_boolean("use_tfds", False, "Read GLUE from TFDS (glue/*) instead of tsv files.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data_dir with prepared glue/* datasets (no download).")
flags.DEFINE_boolean("skip_malformed_rows", False, "GLUE: skip (and count) tsv lines with the wrong number of "
                     "fields instead of stopping there (the original QQP files need it).")
flags.DEFINE_boolean("double_unordered", True, "MRPC/STS-B: also train on swapped pairs (official).")
flags.DEFINE_string("text_column", "text_a", "text_classification: text column (name or index).")
flags.DEFINE_string("text_b_column", None, "text_classification: optional second text column.")
flags.DEFINE_string("label_column", "label", "text_classification: label column (name or index).")
flags.DEFINE_integer("doc_stride", SquadOptions.doc_stride, "SQuAD: stride between document windows.")
flags.DEFINE_integer("max_query_length", SquadOptions.max_query_length, "SQuAD: question tokens kept.")
flags.DEFINE_integer("n_best_size", SquadOptions.n_best_size,
                     "SQuAD: size of the n-best list (with squad_joint_prediction=false also "
                     "the starts/ends considered; the joint head's beam is squad_beam_size, via --hparams).")
flags.DEFINE_integer("max_answer_length", SquadOptions.max_answer_length, "SQuAD: longest answer in tokens.")
flags.DEFINE_float("null_score_threshold", None, "SQuAD 2.0: null-odds threshold (default -2.75, the official "
                   "qa_na_threshold) for the headline exact/f1 and predictions.json; best_exact/best_f1 and "
                   "their thresholds are reported beside.")
flags.DEFINE_string("squad_train_articles", None, "SQuAD: slice 'start:end' of the train file's articles.")
flags.DEFINE_string("squad_dev_articles", None, "SQuAD: slice 'start:end' of the dev file's articles.")
flags.DEFINE_integer("tagging_word_column", None, "ner/chunk/tagging: 0-based column of the words in the "
                     "CoNLL files (default 0).")
flags.DEFINE_integer("tagging_label_column", None, "ner/chunk/tagging: 0-based column of the tags, negative "
                     "from the end (default: ner 3, chunk 2, tagging -1, the last).")
flags.DEFINE_enum("tagging_scheme", None, list(SCHEMES), "ner/chunk/tagging: the files' tags "
                  "(default iob2); iob1/iob2 are scored by entity F1 (conlleval), none (e.g. POS) by token accuracy.")
flags.DEFINE_integer("tagging_segment_id", 1, "ner/chunk/tagging: segment id of every real token, 0 or 1 (padding "
                     "gets 0). The official code feeds 1 to every real token; 0 is what every other task and "
                     "pre-training feed a single text.")


def model_options():
    """--init_checkpoint, --model_size, --vocab_file and the hyper-parameter flags as the library's options."""
    from electra_tf.finetuning.prepare import ModelOptions

    return ModelOptions(
        init_checkpoint=FLAGS.init_checkpoint, model_size=FLAGS.model_size, hparams=FLAGS.hparams,
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case, learning_rate=FLAGS.learning_rate,
        train_batch_size=FLAGS.train_batch_size, num_train_epochs=FLAGS.num_train_epochs,
        warmup_fraction=FLAGS.warmup_fraction, weight_decay=FLAGS.weight_decay,
        layerwise_lr_decay=FLAGS.layerwise_lr_decay, official_layerwise_lr_bug=FLAGS.official_layerwise_lr_bug,
        max_seq_length=FLAGS.max_seq_length)


def make_task():
    from electra_tf.finetuning.registry import get_task

    if not FLAGS.task:
        raise UsageError("--task is required")
    overrides = {"train": FLAGS.train_file, "dev": FLAGS.dev_file, "test": FLAGS.test_file}
    for name, path in overrides.items():
        if path and not os.path.isfile(path):
            raise UsageError(f"--{name}_file: {path} does not exist")
    if FLAGS.data_dir and not os.path.isdir(FLAGS.data_dir):
        raise UsageError(f"--data_dir: {FLAGS.data_dir} is not a directory")
    return get_task(
        FLAGS.task, data_dir=FLAGS.data_dir, file_overrides=overrides, tfds_data_dir=FLAGS.tfds_data_dir,
        use_tfds=FLAGS.use_tfds, diagnostic_file=FLAGS.diagnostic_file, double_unordered=FLAGS.double_unordered,
        skip_malformed=FLAGS.skip_malformed_rows,
        text_column=FLAGS.text_column, label_column=FLAGS.label_column, text_b_column=FLAGS.text_b_column,
        max_query_length=FLAGS.max_query_length, doc_stride=FLAGS.doc_stride, n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length, train_articles=FLAGS.squad_train_articles,
        dev_articles=FLAGS.squad_dev_articles, null_score_threshold=FLAGS.null_score_threshold,
        do_lower_case=FLAGS.do_lower_case, tagging_word_column=FLAGS.tagging_word_column,
        tagging_label_column=FLAGS.tagging_label_column, tagging_scheme=FLAGS.tagging_scheme,
        tagging_segment_id=FLAGS.tagging_segment_id, output_dir=FLAGS.output_dir, do_train=FLAGS.do_train)


def make_strategy():
    from electra_tf.training.distribution import create_strategy, set_mixed_precision

    set_mixed_precision(FLAGS.mixed_precision)
    return create_strategy(FLAGS.strategy, FLAGS.tpu, cpu_devices=FLAGS.num_cpu_devices)


def check_flags():
    if not FLAGS.output_dir:
        raise UsageError("--output_dir is required")
    if FLAGS.num_seeds < 1:
        raise UsageError(f"--num_seeds must be >= 1, got {FLAGS.num_seeds}")
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or FLAGS.export_saved_model):
        raise UsageError("nothing to do: --do_train, --do_eval and --do_predict are all false and "
                         "--export_saved_model is unset")
    for name in ("train_batch_size", "eval_batch_size", "max_train_steps", "save_checkpoints_steps"):
        value = getattr(FLAGS, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} must be >= 1, got {value}")


def run_options(task, config, strategy, execution) -> RunOptions:
    """The run's options: the flags, and the config's fine-tuning values for those left unset."""
    from electra_tf.finetuning import prepare

    dynamic_padding = prepare.dynamic_padding_for(strategy, FLAGS.dynamic_padding)
    prepare.check_batch_size(config.finetune_batch_size, strategy)
    return RunOptions(
        output_dir=FLAGS.output_dir, learning_rate=config.finetune_learning_rate,
        train_batch_size=config.finetune_batch_size,
        eval_batch_size=FLAGS.eval_batch_size or config.finetune_batch_size,
        num_train_epochs=float(config.finetune_epochs), warmup_fraction=config.finetune_warmup_fraction,
        weight_decay=config.finetune_weight_decay, layerwise_lr_decay=config.finetune_layerwise_lr_decay,
        max_seq_length=prepare.resolve_max_seq_length(task, config, FLAGS.max_seq_length), seed=FLAGS.seed,
        official_layerwise_lr_bug=config.finetune_official_layerwise_lr_bug, max_train_steps=FLAGS.max_train_steps,
        do_train=FLAGS.do_train, do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict,
        select_best_epoch=FLAGS.select_best_epoch, dynamic_padding=dynamic_padding,
        export_saved_model=FLAGS.export_saved_model,
        length_bucketing=FLAGS.length_bucketing,
        mixed_precision=FLAGS.mixed_precision, log_steps=FLAGS.log_steps,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps, execution=execution)


def setup():
    """Everything before training; raises UsageError/ValueError/FileNotFoundError on bad input."""
    from electra_tf.finetuning import prepare

    check_flags()
    if FLAGS.num_cpu_devices:
        from electra_tf.training.distribution import split_cpu
        split_cpu(FLAGS.num_cpu_devices)
    task = make_task()
    config, encoder_fn, tokenizer = prepare.prepare_model(task, model_options())
    strategy = make_strategy()
    from electra_tf.finetuning.runner import finetuning_execution

    options = run_options(task, config, strategy, execution_from_flags(FLAGS))
    # Decided once for the run; the encoder, heads and loop take it explicitly.
    options = dataclasses.replace(options, execution=finetuning_execution(options, strategy, config))
    data = prepare.load_data(task, tokenizer, options)
    check_output_dir(task, config, options, data)
    return task, config, encoder_fn, tokenizer, strategy, options, data


def check_output_dir(task, config, options, data):
    """Before any work: --overwrite_output_dir clears the previous run; otherwise a previous run in
    --output_dir must be this one (same settings), which then resumes."""
    from electra_tf.finetuning import checkpointing
    from electra_tf.finetuning.runner import seed_options, seed_run_dir

    if not options.do_train:
        check_finetuned_weights(options)
        return  # scoring / predicting / exporting with the weights there, whatever trained them
    num_train = len(data["train"]["input_ids"])
    for k in range(FLAGS.num_seeds):
        seeded = seed_options(options, k, FLAGS.num_seeds)
        run_dir = seed_run_dir(options.output_dir, seeded.seed, FLAGS.num_seeds)
        if FLAGS.overwrite_output_dir:
            checkpointing.remove_run_state(run_dir)
        else:
            checkpointing.check_settings(run_dir, checkpointing.run_settings(
                task.name, config, seeded, FLAGS.init_checkpoint, num_train, task.training_settings()))
    if FLAGS.overwrite_output_dir:
        checkpointing.remove_run_state(options.output_dir, ("metrics.json", "finetune_config.json"))


def check_finetuned_weights(options):
    """--nodo_train with --export_saved_model: every seed's folder, or --init_checkpoint when it is a fine-tuning
    run, must hold fine-tuned weights (a serving model with an untrained head answers at random). Scoring or
    predicting alone still runs (with a warning)."""
    from electra_tf.finetuning.evaluate import BEST_WEIGHTS, FINAL_WEIGHTS
    from electra_tf.finetuning.runner import finetuned_weights_dir, seed_options, seed_run_dir

    if not options.export_saved_model:
        return
    for k in range(FLAGS.num_seeds):
        run_dir = seed_run_dir(options.output_dir, seed_options(options, k, FLAGS.num_seeds).seed, FLAGS.num_seeds)
        weights = finetuned_weights_dir(run_dir, FLAGS.init_checkpoint)
        if not any(os.path.isfile(os.path.join(weights, name)) for name in (FINAL_WEIGHTS, BEST_WEIGHTS)):
            raise UsageError(f"--export_saved_model with --nodo_train: no {FINAL_WEIGHTS} or {BEST_WEIGHTS} in "
                             f"{run_dir} or --init_checkpoint; give the fine-tuning run as --init_checkpoint (or "
                             "--output_dir) to export it")


def run(task, config, encoder_fn, tokenizer, strategy, options, data) -> dict:
    """All seeds; writes and returns the metrics.json content."""
    from electra_tf.finetuning.runner import run_seeds
    from electra_tf.serving.export import export_serving

    return run_seeds(task, config, encoder_fn, tokenizer, strategy, options, data, FLAGS.num_seeds,
                     FLAGS.init_checkpoint, export=export_serving)


def lock_output_dir():
    """--output_dir's run.lock (None on object stores), taken before anything is loaded or written, so that a
    second run on the directory is refused at once in one line (exit 1)."""
    from electra_tf.training import run_lock

    try:
        check_flags()  # --output_dir is set
        return run_lock.lock_run_dir(FLAGS.output_dir, flag="--output_dir")
    except (ValueError, run_lock.RunLockError) as e:
        sys.exit(f"run_finetuning.py: error: {e}")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        use_xla_cache(FLAGS.xla_cache_dir)  # before TensorFlow creates its devices (the run's log names it)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    lock = lock_output_dir()
    try:  # held through training, evaluation and export; released on every exit
        try:
            prepared = setup()
        except (ValueError, FileNotFoundError) as e:  # UsageError is a ValueError
            sys.exit(f"run_finetuning.py: error: {e}")
        run(*prepared)
    finally:
        if lock is not None:
            lock.release()


if __name__ == "__main__":
    app.run(main)
