"""Everything a fine-tuning run needs before training, from the user's choices (`ModelOptions`).

* the config: the model size's defaults (the checkpoint's size unless one is
  named), `hparams`, then the fine-tuning overrides; a checkpoint's
  architecture always wins (`build_config`);
* the tokenizer (`tokenizers.load_tokenizer`: a WordPiece `vocab.txt` or a SentencePiece `.model`), checked
  against the checkpoint's (`make_tokenizer`, `check_vocab_matches_checkpoint`);
* the encoder factory: fresh, or a new copy of the pre-trained weights per seed;
* the sequence length (`resolve_max_seq_length`) and the features (`load_data`).

Bad input raises `UsageError` (a `ValueError`) with a one-line message naming
the option (as its command-line flag) at fault.

Example:

>>> from electra_tf.finetuning.registry import get_task
>>> task = get_task("RTE")
>>> config = build_config(task, ModelOptions(model_size="tiny", learning_rate=3e-4))
>>> config.model_size, config.finetune_learning_rate, config.finetune_epochs
('tiny', 0.0003, 10)
>>> resolve_max_seq_length(task, config), resolve_max_seq_length(task, config, requested=64)
(128, 64)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from absl import logging

from electra_tf.config import MODEL_SIZES, get_config, merge_architecture, parse_hparams
from electra_tf.finetuning.errors import UsageError
from electra_tf.finetuning.model import new_encoder_fn
from electra_tf.finetuning.task import Task
from electra_tf.options import RunOptions
from electra_tf.text.tokenizers import load_tokenizer
from electra_tf.text.vocabulary import Vocabulary, check_vocabulary


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """Which model, vocabulary and hyper-parameters a run fine-tunes; None leaves the config's value."""

    init_checkpoint: Optional[str] = None  # our export, a Hugging Face or official checkpoint; None: random init
    model_size: Optional[str] = None  # default: the checkpoint's size, else small
    hparams: Optional[str] = None  # JSON object or JSON file of get_config overrides
    vocab_file: Optional[str] = None  # default: the checkpoint's vocabulary
    do_lower_case: bool = True
    learning_rate: Optional[float] = None
    train_batch_size: Optional[int] = None
    num_train_epochs: Optional[float] = None  # default: the task's official epochs, else the config's
    warmup_fraction: Optional[float] = None
    weight_decay: Optional[float] = None
    layerwise_lr_decay: Optional[float] = None
    official_layerwise_lr_bug: Optional[bool] = None
    max_seq_length: Optional[int] = None  # default: the task's, capped at max_position_embeddings


def read_checkpoint(init_checkpoint: Optional[str]):
    """`(config, recorded fine-tuning fields)` of `init_checkpoint`, or None without one."""
    if not init_checkpoint:
        return None
    if not os.path.exists(init_checkpoint):
        raise UsageError(f"--init_checkpoint: {init_checkpoint} does not exist")
    from electra_tf.convert import read_config

    try:
        return read_config(init_checkpoint)
    except ValueError as e:  # convert.ConversionError: an unknown format or inconsistent files
        raise UsageError(f"--init_checkpoint: {e}") from None


def checkpoint_model_size(checkpoint_config) -> str:
    """The checkpoint's size: recorded (our exports), else the known size of its width and depth, else small."""
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


def choose_model_size(checkpoint, model_size: Optional[str] = None) -> tuple[str, dict]:
    """(size whose defaults apply, fine-tuning fields recorded by the checkpoint for that size)."""
    if checkpoint is None:
        return model_size or "small", {}
    checkpoint_config, recorded = checkpoint
    size = checkpoint_model_size(checkpoint_config)
    if model_size is None:
        logging.info("--model_size=%s, from --init_checkpoint", size)
        return size, recorded if size == checkpoint_config.model_size else {}
    if model_size != size:
        logging.warning("--model_size=%s but --init_checkpoint is a %s model: the architecture comes from the "
                        "checkpoint, the fine-tuning hyper-parameters from %s", model_size, size, model_size)
    return model_size, {}


def build_config(task: Task, options: ModelOptions, checkpoint=None):
    """The ElectraConfig: size defaults, `hparams`, then the fine-tuning options; a checkpoint's architecture wins.

    `checkpoint` is `read_checkpoint()`'s result: the size defaults to its size,
    and fine-tuning fields it recorded count as that size's defaults.
    """
    hparams = parse_hparams(options.hparams)
    size, recorded = choose_model_size(checkpoint, options.model_size)
    epochs = options.num_train_epochs
    if epochs is None and "finetune_epochs" not in hparams:
        epochs = task.default_epochs  # the official per-task epochs beat the size's generic default
    config = get_config(size, {**recorded, **hparams}, finetune_learning_rate=options.learning_rate,
                        finetune_batch_size=options.train_batch_size, finetune_epochs=epochs,
                        finetune_warmup_fraction=options.warmup_fraction, finetune_weight_decay=options.weight_decay,
                        finetune_layerwise_lr_decay=options.layerwise_lr_decay,
                        finetune_official_layerwise_lr_bug=options.official_layerwise_lr_bug)
    if checkpoint is not None:
        config = merge_architecture(checkpoint[0], config, options.init_checkpoint)
    return config


def checkpoint_vocab(init_checkpoint: Optional[str]) -> Optional[str]:
    """The vocabulary file stored with the checkpoint, or None."""
    if not init_checkpoint:
        return None
    from electra_tf.convert import api

    return api.checkpoint_vocab(init_checkpoint)


def encoder_factory(config, options: ModelOptions, vocab_file: Optional[str] = None):
    """A factory of encoders, `build(execution=None)`: fresh ones, or a new copy of the checkpoint's weights per
    call (per seed), computing with the run's resolved execution options."""
    if not options.init_checkpoint:
        return new_encoder_fn(config)
    from electra_tf.convert import api, finetuned

    def build(execution=None):
        if finetuned.is_finetuning_run(options.init_checkpoint):
            # A fine-tuned model's encoder: rebuilt here, as convert does not import fine-tuning's heads.
            from electra_tf.finetuning.finetuned_run import load_finetuned_encoder

            return load_finetuned_encoder(options.init_checkpoint, execution=execution)[0]
        encoder, _, _ = api.load_encoder(options.init_checkpoint, config, vocab_file=options.vocab_file or vocab_file,
                                         strict=False, execution=execution)
        return encoder

    return build


def recorded_tokenizer_sha256(init_checkpoint: Optional[str]) -> Optional[str]:
    """The `vocab_sha256` an export of ours records, or None (other formats, older exports)."""
    from electra_tf.convert import export_dir

    if not init_checkpoint or not export_dir.is_export_dir(init_checkpoint):
        return None
    return export_dir.read_export_metadata(init_checkpoint).get(export_dir.VOCAB_SHA256)


def check_vocab_matches_checkpoint(vocab_file, checkpoint_vocab, vocab_size, embedding_rows,
                                   recorded_sha256: Optional[str] = None, init_checkpoint: Optional[str] = None):
    """`vocab_file` must be the checkpoint's tokenizer: other ids would index the wrong embeddings. The
    vocabulary rule (`text.vocabulary.check_vocabulary`, no extension: the encoder's rows are the checkpoint's):
    two WordPiece vocabs token by token (bytes that change no token, such as a final newline, pass); otherwise
    (a SentencePiece model, mixed kinds, or no tokenizer file beside the checkpoint) the sha256 of `vocab_file`
    against the checkpoint's, the `recorded_sha256` of its config where it has one. Refused with a UsageError
    naming both files and digests."""
    if vocab_size != embedding_rows:
        raise UsageError(f"--vocab_file: {vocab_file} has {vocab_size} tokens but --init_checkpoint's "
                         f"embeddings have {embedding_rows} rows; use the checkpoint's own vocab")
    theirs = Vocabulary(f"the tokenizer of --init_checkpoint {init_checkpoint or ''}".rstrip(), checkpoint_vocab,
                        recorded_sha256)
    try:
        check_vocabulary(theirs, Vocabulary("--vocab_file", vocab_file), allow_extension=False,
                         hint="use the checkpoint's own tokenizer")
    except ValueError as e:
        raise UsageError(str(e)) from None


def make_tokenizer(config, options: ModelOptions, checkpoint_vocab: Optional[str] = None):
    """The tokenizer (`tokenizers.load_tokenizer`: WordPiece or SentencePiece by the file) and the config with
    vocab_size matching it."""
    vocab_file = options.vocab_file or checkpoint_vocab
    if not vocab_file:
        raise UsageError("--vocab_file is required" + (" (no tokenizer file, vocab.txt or sentencepiece.model, in "
                                                       "--init_checkpoint)" if options.init_checkpoint else ""))
    if not os.path.isfile(vocab_file):
        raise UsageError(f"--vocab_file: {vocab_file} does not exist")
    try:
        tokenizer = load_tokenizer(vocab_file, do_lower_case=options.do_lower_case)
    except ValueError as e:  # a bad vocab or model: the tokenizer's line names the file
        raise UsageError(f"--vocab_file: {e}") from None
    if options.init_checkpoint:
        check_vocab_matches_checkpoint(vocab_file, checkpoint_vocab, tokenizer.vocab_size, config.vocab_size,
                                       recorded_tokenizer_sha256(options.init_checkpoint), options.init_checkpoint)
    elif tokenizer.vocab_size != config.vocab_size:
        logging.warning("*** vocab_size %d of model size %r replaced by %d, the size of %s ***",
                        config.vocab_size, config.model_size, tokenizer.vocab_size, vocab_file)
        config = config.replace(vocab_size=tokenizer.vocab_size)
    return tokenizer, config


def prepare_model(task: Task, options: ModelOptions):
    """`(config, encoder factory, tokenizer)` of the run: the config's vocab_size is the tokenizer's."""
    config = build_config(task, options, read_checkpoint(options.init_checkpoint))
    vocab = checkpoint_vocab(options.init_checkpoint)
    tokenizer, config = make_tokenizer(config, options, vocab)
    return config, encoder_factory(config, options, vocab), tokenizer


def resolve_max_seq_length(task: Task, config, requested: Optional[int] = None) -> int:
    """`requested` (checked against the model), else the task's default capped at max_position_embeddings."""
    if requested is not None:
        if requested > config.max_position_embeddings:
            raise UsageError(f"--max_seq_length={requested} exceeds the model's "
                             f"max_position_embeddings={config.max_position_embeddings}")
        if requested < 8:
            raise UsageError(f"--max_seq_length={requested} is too small")
        return requested
    default = task.default_max_seq_length
    if default > config.max_position_embeddings:
        logging.warning("max_seq_length %d capped at max_position_embeddings=%d", default,
                        config.max_position_embeddings)
    return min(default, config.max_position_embeddings)


def dynamic_padding_for(strategy, requested: bool) -> bool:
    """Dynamic padding where asked for, except on TPUs (XLA on TPU needs static shapes)."""
    if requested and "TPU" in type(strategy).__name__:
        logging.info("TPU: batches padded to max_seq_length (XLA on TPU needs static shapes)")
        return False
    return requested


def check_batch_size(batch_size: int, strategy):
    """The global batch must split evenly over the replicas."""
    if batch_size % strategy.num_replicas_in_sync:
        raise UsageError(f"--train_batch_size={batch_size} is not divisible by the "
                         f"{strategy.num_replicas_in_sync} replicas")


def load_data(task: Task, tokenizer, options: RunOptions) -> dict:
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
