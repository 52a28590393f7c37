"""Fine-tune ELECTRA on GLUE, SQuAD 1.1/2.0 or any tsv/csv text classification task.

Examples:

    # GLUE (tsv layout of download_glue_data.py), pre-trained encoder:
    python run_finetuning.py --task=RTE --data_dir=glue_data --init_checkpoint=out/export \\
        --model_size=small --output_dir=out/rte --num_seeds=5 --do_predict

    # A tiny model from random init, capped at 300 steps:
    python run_finetuning.py --task=SST-2 --data_dir=../shared/data/glue --model_size=tiny \\
        --vocab_file=../shared/data/vocab/en_uncased/vocab.txt --output_dir=/tmp/sst2 --max_train_steps=300

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
"""

from __future__ import annotations

import json
import os
import sys

from electra_tf.runtime import use_onednn_kernels

use_onednn_kernels()  # before TensorFlow is imported

from absl import app, flags, logging  # noqa: E402

from electra_tf.config import MODEL_SIZES  # noqa: E402
from electra_tf.options import (PRECISIONS, STRATEGIES, RunOptions, SquadOptions, default,  # noqa: E402
                                define_execution_flags, execution_from_flags)

FLAGS = flags.FLAGS

flags.DEFINE_string("task", None, "GLUE task (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI), "
                    "squad, squad_v2 or text_classification.")
flags.DEFINE_string("data_dir", None, "Folder with the task's files (a GLUE root or task folder works).")
flags.DEFINE_string("output_dir", None, "Where metrics, logs, checkpoints and predictions go.")
flags.DEFINE_string("init_checkpoint", None, "Pre-trained model (export dir of run_pretraining.py, or "
                    "a Hugging Face / official checkpoint: see electra_tf.convert). Unset: random initialisation.")
flags.DEFINE_enum("model_size", None, list(MODEL_SIZES), "Defaults of electra_tf.config "
                    "(default: the --init_checkpoint's size, else small). The architecture of a "
                    "checkpoint always wins.")
flags.DEFINE_string("hparams", None, "JSON object or JSON file of get_config overrides.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab (defaults to the checkpoint's vocab.txt).")
flags.DEFINE_boolean("do_lower_case", True, "Lower-case (and strip accents) before WordPiece.")
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
flags.DEFINE_string("export_saved_model", None, "Also write a TF SavedModel that takes raw text (text, "
                    "and text_b for pair tasks) and returns label probabilities and the label name "
                    "(tokenisation in the graph). With --num_seeds > 1, one per seed under seed_N/.")
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


class UsageError(ValueError):
    """A problem with the flags or input files: reported as one line."""


def read_checkpoint():
    """`(config, recorded fine-tuning fields)` of --init_checkpoint, or None without one."""
    if not FLAGS.init_checkpoint:
        return None
    if not os.path.exists(FLAGS.init_checkpoint):
        raise UsageError(f"--init_checkpoint: {FLAGS.init_checkpoint} does not exist")
    from electra_tf.convert import read_config

    try:
        return read_config(FLAGS.init_checkpoint)
    except ValueError as e:  # convert.ConversionError: an unknown format or inconsistent files
        raise UsageError(f"--init_checkpoint: {e}") from None


def checkpoint_model_size(checkpoint_config) -> str:
    """The checkpoint's size: recorded (our exports), else the known size of its width and depth, else small."""
    from electra_tf.config import get_config

    if checkpoint_config.model_size in MODEL_SIZES:
        return checkpoint_config.model_size
    shape = (checkpoint_config.discriminator.hidden_size, checkpoint_config.discriminator.num_layers)
    for size in MODEL_SIZES:
        candidate = get_config(size)
        if (candidate.discriminator.hidden_size, candidate.discriminator.num_layers) == shape:
            return size
    logging.warning("--init_checkpoint: no model size has hidden_size %d and %d layers; using the fine-tuning "
                    "defaults of 'small' (set --model_size or --hparams to change them)", *shape)
    return "small"


def choose_model_size(checkpoint) -> tuple[str, dict]:
    """(size whose defaults apply, fine-tuning fields recorded by the checkpoint for that size)."""
    if checkpoint is None:
        return FLAGS.model_size or "small", {}
    checkpoint_config, recorded = checkpoint
    size = checkpoint_model_size(checkpoint_config)
    if FLAGS.model_size is None:
        logging.info("--model_size=%s, from --init_checkpoint", size)
        return size, recorded if size == checkpoint_config.model_size else {}
    if FLAGS.model_size != size:
        logging.warning("--model_size=%s but --init_checkpoint is a %s model: the architecture comes from the "
                        "checkpoint, the fine-tuning hyper-parameters from %s", FLAGS.model_size, size,
                        FLAGS.model_size)
    return FLAGS.model_size, {}


def build_config(task, checkpoint=None):
    """The ElectraConfig: size defaults, --hparams, then the fine-tuning flags; a checkpoint's architecture wins.

    `checkpoint` is `read_checkpoint()`'s result: the size defaults to its size,
    and fine-tuning fields it recorded count as that size's defaults.
    """
    from electra_tf.config import get_config, merge_architecture, parse_hparams

    hparams = parse_hparams(FLAGS.hparams)
    size, recorded = choose_model_size(checkpoint)
    epochs = FLAGS.num_train_epochs
    if epochs is None and "finetune_epochs" not in hparams:
        epochs = task.default_epochs  # the official per-task epochs beat the size's generic default
    config = get_config(size, {**recorded, **hparams}, finetune_learning_rate=FLAGS.learning_rate,
                        finetune_batch_size=FLAGS.train_batch_size, finetune_epochs=epochs,
                        finetune_warmup_fraction=FLAGS.warmup_fraction, finetune_weight_decay=FLAGS.weight_decay,
                        finetune_layerwise_lr_decay=FLAGS.layerwise_lr_decay,
                        finetune_official_layerwise_lr_bug=FLAGS.official_layerwise_lr_bug)
    if checkpoint is not None:
        config = merge_architecture(checkpoint[0], config, FLAGS.init_checkpoint)
    return config


def load_encoder(config):
    """(encoder factory, config, vocab file from the checkpoint or None)."""
    from electra_tf.finetuning.model import new_encoder_fn

    if not FLAGS.init_checkpoint:
        return new_encoder_fn(config), config, None
    from electra_tf.convert import api

    checkpoint_vocab = api.checkpoint_vocab(FLAGS.init_checkpoint)

    def build():  # a fresh copy of the pre-trained weights for every seed
        encoder, _, _ = api.load_encoder(FLAGS.init_checkpoint, config, vocab_file=FLAGS.vocab_file or checkpoint_vocab,
                                         strict=False)
        return encoder

    return build, config, checkpoint_vocab


def check_vocab_matches_checkpoint(vocab_file, checkpoint_vocab, vocab_size, embedding_rows):
    """--vocab_file must be the checkpoint's vocabulary: other ids would index the wrong embeddings."""
    if vocab_size != embedding_rows:
        raise UsageError(f"--vocab_file: {vocab_file} has {vocab_size} tokens but --init_checkpoint's "
                         f"embeddings have {embedding_rows} rows; use the checkpoint's own vocab")
    if checkpoint_vocab and os.path.abspath(checkpoint_vocab) != os.path.abspath(vocab_file):
        from electra_tf.text.tokenization import read_vocab

        mine, theirs = read_vocab(vocab_file), read_vocab(checkpoint_vocab)
        differs = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
        if differs is not None:
            raise UsageError(f"--vocab_file: {vocab_file} line {differs + 1} is {mine[differs]!r} but the vocab of "
                             f"--init_checkpoint ({checkpoint_vocab}) has {theirs[differs]!r} there")


def make_tokenizer(config, checkpoint_vocab):
    """The tokenizer and the config with vocab_size matching it."""
    from electra_tf.text.tokenization import WordPieceTokenizer

    vocab_file = FLAGS.vocab_file or checkpoint_vocab
    if not vocab_file:
        raise UsageError("--vocab_file is required" +
                         (" (no vocab.txt in --init_checkpoint)" if FLAGS.init_checkpoint else ""))
    if not os.path.isfile(vocab_file):
        raise UsageError(f"--vocab_file: {vocab_file} does not exist")
    tokenizer = WordPieceTokenizer(vocab_file, do_lower_case=FLAGS.do_lower_case)
    if FLAGS.init_checkpoint:
        check_vocab_matches_checkpoint(vocab_file, checkpoint_vocab, tokenizer.vocab_size, config.vocab_size)
    if tokenizer.vocab_size != config.vocab_size:
        if not FLAGS.init_checkpoint:
            logging.warning("*** vocab_size %d of model size %r replaced by %d, the size of %s ***",
                            config.vocab_size, config.model_size, tokenizer.vocab_size, vocab_file)
            config = config.replace(vocab_size=tokenizer.vocab_size)
    return tokenizer, config


def resolve_max_seq_length(task, config) -> int:
    if FLAGS.max_seq_length is not None:
        if FLAGS.max_seq_length > config.max_position_embeddings:
            raise UsageError(f"--max_seq_length={FLAGS.max_seq_length} exceeds the model's "
                             f"max_position_embeddings={config.max_position_embeddings}")
        if FLAGS.max_seq_length < 8:
            raise UsageError(f"--max_seq_length={FLAGS.max_seq_length} is too small")
        return FLAGS.max_seq_length
    default = task.default_max_seq_length
    if default > config.max_position_embeddings:
        logging.warning("max_seq_length %d capped at max_position_embeddings=%d", default,
                        config.max_position_embeddings)
    return min(default, config.max_position_embeddings)


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
        do_lower_case=FLAGS.do_lower_case)


def make_strategy():
    from electra_tf.distribution import create_strategy, set_mixed_precision

    set_mixed_precision(FLAGS.mixed_precision)
    return create_strategy(FLAGS.strategy, FLAGS.tpu)


def check_flags():
    if not FLAGS.output_dir:
        raise UsageError("--output_dir is required")
    if FLAGS.num_seeds < 1:
        raise UsageError(f"--num_seeds must be >= 1, got {FLAGS.num_seeds}")
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise UsageError("nothing to do: --do_train, --do_eval and --do_predict are all false")
    for name in ("train_batch_size", "eval_batch_size", "max_train_steps"):
        value = getattr(FLAGS, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} must be >= 1, got {value}")


def setup():
    """Everything before training; raises UsageError/ValueError/FileNotFoundError on bad input."""
    check_flags()
    if FLAGS.num_cpu_devices:
        from electra_tf.distribution import split_cpu
        split_cpu(FLAGS.num_cpu_devices)
    task = make_task()
    config = build_config(task, read_checkpoint())
    encoder_fn, config, checkpoint_vocab = load_encoder(config)
    tokenizer, config = make_tokenizer(config, checkpoint_vocab)
    if not FLAGS.init_checkpoint:
        from electra_tf.finetuning.model import new_encoder_fn
        encoder_fn = new_encoder_fn(config)
    strategy = make_strategy()
    from electra_tf.distribution import resolve_execution
    from electra_tf.modeling import set_default_execution

    execution = resolve_execution(execution_from_flags(FLAGS), strategy)
    set_default_execution(execution)  # the encoder and heads are built later, inside the strategy
    dynamic_padding = FLAGS.dynamic_padding
    if dynamic_padding and "TPU" in type(strategy).__name__:
        logging.info("TPU: batches padded to max_seq_length (XLA on TPU needs static shapes)")
        dynamic_padding = False
    if config.finetune_batch_size % strategy.num_replicas_in_sync:
        raise UsageError(f"--train_batch_size={config.finetune_batch_size} is not divisible by the "
                         f"{strategy.num_replicas_in_sync} replicas")
    options = RunOptions(
        output_dir=FLAGS.output_dir, learning_rate=config.finetune_learning_rate,
        train_batch_size=config.finetune_batch_size,
        eval_batch_size=FLAGS.eval_batch_size or config.finetune_batch_size,
        num_train_epochs=float(config.finetune_epochs), warmup_fraction=config.finetune_warmup_fraction,
        weight_decay=config.finetune_weight_decay, layerwise_lr_decay=config.finetune_layerwise_lr_decay,
        max_seq_length=resolve_max_seq_length(task, config), seed=FLAGS.seed,
        official_layerwise_lr_bug=config.finetune_official_layerwise_lr_bug, max_train_steps=FLAGS.max_train_steps,
        do_train=FLAGS.do_train, do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict,
        select_best_epoch=FLAGS.select_best_epoch, dynamic_padding=dynamic_padding,
        export_saved_model=FLAGS.export_saved_model,
        length_bucketing=FLAGS.length_bucketing,
        mixed_precision=FLAGS.mixed_precision, log_steps=FLAGS.log_steps, execution=execution)
    return task, config, encoder_fn, tokenizer, strategy, options, load_data(task, tokenizer, options)


def load_data(task, tokenizer, options) -> dict:
    """Features of every split the run needs (read up front so bad files fail early)."""
    data = {}
    if options.do_train:
        data["train"] = task.train_features(tokenizer, options.max_seq_length)
        if not len(data["train"]["input_ids"]):
            raise UsageError(f"task {task.name}: the training set is empty")
    if options.do_eval:
        data["eval"] = task.eval_sets(tokenizer, options.max_seq_length)
    if options.do_predict:
        data["predict"] = task.predict_sets(tokenizer, options.max_seq_length)
    return data


def run(task, config, encoder_fn, tokenizer, strategy, options, data) -> dict:
    """All seeds; writes and returns the metrics.json content."""
    import dataclasses

    from electra_tf.finetuning.runner import median_metrics, run_single

    os.makedirs(options.output_dir, exist_ok=True)
    with open(os.path.join(options.output_dir, "finetune_config.json"), "w") as f:
        json.dump({"task": task.name, "config": config.to_dict(), "options": dataclasses.asdict(options),
                   "init_checkpoint": FLAGS.init_checkpoint, "vocab_file": tokenizer.vocab_file}, f, indent=2)
    runs = []
    for k in range(FLAGS.num_seeds):
        seed_options = dataclasses.replace(options, seed=options.seed + k)
        if options.export_saved_model and FLAGS.num_seeds > 1:
            seed_options = dataclasses.replace(seed_options, export_saved_model=os.path.join(
                options.export_saved_model, f"seed_{seed_options.seed}"))
        run_dir = options.output_dir if FLAGS.num_seeds == 1 else os.path.join(
            options.output_dir, f"seed_{seed_options.seed}")
        result = run_single(task, config, encoder_fn, tokenizer, seed_options, strategy, run_dir, data)
        logging.info("seed %d: %s", seed_options.seed, json.dumps(result.get("selected", {})))
        runs.append(result)
    selection = "best_epoch" if any(r.get("selection") == "best_epoch" for r in runs) else "final"
    summary = {"task": task.name, "main_metric": task.main_metric_key(), "selection": selection, "runs": runs,
               "median": median_metrics(runs, "selected"), "median_final": median_metrics(runs, "final"),
               "median_best": median_metrics(runs, "best")}
    with open(os.path.join(options.output_dir, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    if summary["median"]:
        what = "best dev epoch (--select_best_epoch)" if selection == "best_epoch" else "final weights"
        logging.info("median over %d run(s), %s: %s", len(runs), what,
                     "  ".join(f"{k}={v:.2f}" for k, v in summary["median"].items()))
    return summary


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        prepared = setup()
    except (ValueError, FileNotFoundError) as e:  # UsageError is a ValueError
        sys.exit(f"run_finetuning.py: error: {e}")
    run(*prepared)


if __name__ == "__main__":
    app.run(main)
