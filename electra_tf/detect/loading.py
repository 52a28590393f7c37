"""Loading a checkpoint of any format `electra_tf.convert` reads: the `ElectraPretrainer` and its tokenizer."""

from __future__ import annotations

import dataclasses
import json
import os

from electra_tf.detect.errors import UsageError
from electra_tf.detect.scoring import score_texts


@dataclasses.dataclass
class Detector:
    """A loaded model and tokenizer; `parts`: the networks the checkpoint held (others are random)."""

    pretrainer: object
    tokenizer: object
    config: object
    checkpoint_format: str
    parts: tuple

    def score(self, texts, **kwargs) -> list:
        return score_texts(self.pretrainer, self.tokenizer, texts, **kwargs)


def _first_line(error: Exception) -> str:
    return str(getattr(error, "message", None) or error).strip().splitlines()[0]


def _checkpoint_exists(path: str) -> bool:
    return os.path.exists(path) or os.path.exists(path + ".index")


def _lower_case_from(path: str) -> bool | None:
    """`do_lower_case` of a Hugging Face `tokenizer_config.json` beside the checkpoint, if any."""
    base = path if os.path.isdir(path) else os.path.dirname(path)
    for directory in (base, os.path.join(base, "discriminator")):
        candidate = os.path.join(directory, "tokenizer_config.json")
        if os.path.isfile(candidate):
            try:
                with open(candidate, encoding="utf-8") as f:
                    value = json.load(f).get("do_lower_case")
            except (OSError, ValueError):
                continue
            if isinstance(value, bool):
                return value
    return None


def load_detector(init_checkpoint: str, vocab_file: str | None = None, generator_checkpoint: str | None = None,
                  do_lower_case: bool | None = None) -> Detector:
    """The `ElectraPretrainer` of any checkpoint `electra_tf.convert` reads, and its tokenizer.

    Raises `UsageError` naming the flag to fix (`--init_checkpoint`,
    `--vocab_file`, `--generator_checkpoint`).
    """
    if not init_checkpoint:
        raise UsageError("--init_checkpoint", "required (an export directory, a Hugging Face folder or a "
                         "TF1 checkpoint)")
    if not _checkpoint_exists(init_checkpoint):
        raise UsageError("--init_checkpoint", f"{init_checkpoint} does not exist")
    if vocab_file and not os.path.isfile(vocab_file):
        raise UsageError("--vocab_file", f"{vocab_file} does not exist")
    if generator_checkpoint and not os.path.isdir(generator_checkpoint):
        raise UsageError("--generator_checkpoint", f"{generator_checkpoint} is not a directory")
    from electra_tf.text.tokenizers import load_tokenizer  # after the cheap checks: these import TensorFlow
    from electra_tf.convert import ConversionError, api, foreign
    from electra_tf.convert import vocab as vocab_lib

    try:
        fmt = api.detect_format(init_checkpoint)
    except ConversionError as e:
        raise UsageError("--init_checkpoint", _first_line(e)) from None
    if fmt not in ("ours", "hf", "official"):
        raise UsageError("--init_checkpoint", f"{init_checkpoint} is a {fmt.replace('_', ' ')}, which holds no "
                         "replaced-token detection head; pass an export directory (electra_config.json), a "
                         "Hugging Face ELECTRA folder or an official TF1 checkpoint")
    try:
        if fmt == "ours":
            if generator_checkpoint:
                raise UsageError("--generator_checkpoint", "only for Hugging Face checkpoints; an export "
                                 "directory already holds its generator")
            config, pretrainer, _ = api.load_any(init_checkpoint, source_format="ours")
            parts = ("discriminator", "discriminator_head", "generator", "generator_head")
            vocab_path = vocab_file or api.checkpoint_vocab(init_checkpoint)  # vocab.txt or sentencepiece.model
            if not vocab_path:
                raise UsageError("--vocab_file", f"{init_checkpoint} has no tokenizer file (vocab.txt or "
                                 "sentencepiece.model); pass --vocab_file")
        else:
            opened = api.open_foreign(init_checkpoint, fmt, generator_checkpoint)
            try:
                vocab_path = vocab_lib.find_vocab(vocab_file, opened.vocab_dirs)
            except ConversionError:
                raise UsageError("--vocab_file", f"no vocab.txt found with {init_checkpoint}; pass "
                                 "--vocab_file") from None
            config = opened.resolve()
            parts = opened.source.present_parts()
    except UsageError:
        raise
    except (ConversionError, ValueError, OSError) as e:
        raise UsageError("--init_checkpoint", f"cannot load {init_checkpoint}: {_first_line(e)}") from None
    if do_lower_case is None:
        do_lower_case = _lower_case_from(init_checkpoint)
    try:
        tokenizer = load_tokenizer(vocab_path, do_lower_case=True if do_lower_case is None else do_lower_case)
    except ValueError as e:
        raise UsageError("--vocab_file", _first_line(e)) from None
    if tokenizer.vocab_size != config.vocab_size:
        raise UsageError("--vocab_file", f"{vocab_path} has {tokenizer.vocab_size} tokens but the model's "
                         f"word embeddings have {config.vocab_size} rows")
    if fmt != "ours":
        try:
            config, pretrainer, _ = foreign.load(opened, config, vocab_path)
        except (ConversionError, ValueError, OSError) as e:
            raise UsageError("--init_checkpoint", f"cannot load {init_checkpoint}: {_first_line(e)}") from None
    if "discriminator_head" not in parts:
        raise UsageError("--init_checkpoint", f"{init_checkpoint} holds no discriminator head (a bare encoder?); "
                         "replaced-token detection needs ElectraForPreTraining / the pre-training export")
    return Detector(pretrainer, tokenizer, config, fmt, tuple(parts))
