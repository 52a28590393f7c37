"""Replaced-token detection you can see: the discriminator's p(replaced) for every wordpiece.

`python -m electra_tf.detect --init_checkpoint=CKPT "some text" ...` tokenises each
text as one segment (`[CLS] wordpieces [SEP]`, truncated to `--max_seq_length`),
runs the pre-trained discriminator and prints every wordpiece with the
probability that the discriminator gives to "this token was replaced":

* on a terminal, each token on a background shaded from white (0) to red (1)
  (ANSI 256 colours; `--color=auto|always|never`, `NO_COLOR` is honoured);
* when piped (or `--color=never`), plain text `token(0.93)`, one line per text,
  or an aligned table with `--table`;
* `--html out.html` writes a self-contained page with the same shading (each
  token a `<span>` whose tooltip holds its probability).

`--corrupt` first lets the checkpoint's generator replace tokens the way
pre-training does (`electra_tf.model.masking`: `mask_inputs` picks `--mask_prob` of
the tokens, 85 % of them shown as [MASK]; `sample_tokens` draws from the
generator at `--temperature`; `corrupt` writes the samples in), reproducibly
from `--seed`. Tokens that really changed are marked, with the original shown.

`CKPT` is anything `electra_tf.convert` loads: an export directory of ours
(`electra_config.json` + `pretrainer.weights.h5`), a Hugging Face folder
(`discriminator/` + `generator/`, or a discriminator folder with
`--generator_checkpoint`), or an official TF1 checkpoint (`model.ckpt-N`). The
vocabulary is `--vocab_file`, else the `vocab.txt` the checkpoint carries;
lower-casing follows a Hugging Face `tokenizer_config.json` when there is one,
else `--[no]do_lower_case` (default: lower-case). Wordpieces are shown as the
model scores them, `##` continuation marks included (the HTML page draws a
continuation piece attached to its word, each piece with its own shade and
tooltip); [CLS]/[SEP] are scored but not shown. Bad input exits with status 2 and a one-line error naming the
flag.

Example (the CLI, then the library on a hand-made result):

>>> from electra_tf.detect import TokenScores, main, render_html, render_terminal
>>> main(["--init_checkpoint=runs/small/export", "the chef cooked the meal"])  # doctest: +SKIP
>>> scores = TokenScores(text="the chef ate the meal", tokens=["the", "chef", "ate", "the", "meal"],
...                      probs=[0.02, 0.05, 0.91, 0.03, 0.10],
...                      originals=[None, None, "cooked", None, None])
>>> print(render_terminal([scores], color=False))
# 1: the chef ate the meal  (1 of 5 replaced)
the(0.02) chef(0.05) ate(0.91)[was:cooked] the(0.03) meal(0.10)
>>> print(render_terminal([scores], color=False, table=True))
# 1: the chef ate the meal  (1 of 5 replaced)
  pos  token  p(replaced)                        replaced  original
    1  the           0.02
    2  chef          0.05  #
    3  ate           0.91  ##################    yes       cooked
    4  the           0.03  #
    5  meal          0.10  ##
>>> "\\x1b[48;5;" in render_terminal([scores], color=True)  # ANSI background colours
True
>>> page = render_html([scores])
>>> '<span class="tok replaced" style="background:rgb(223,50,50)"' in page, 'title="p(replaced) = 0.910' in page
(True, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import math
import os
import sys
from typing import Sequence

# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TokenScores:
    """The discriminator's verdict on one text.

    `tokens`: the wordpieces the discriminator saw ([CLS]/[SEP] left out; with
    `--corrupt` the corrupted ones); `probs`: p(replaced) of each; `originals`:
    `None` when nothing was corrupted, else per token the original wordpiece
    where the generator changed it and `None` where the token is the original.
    `truncated`: wordpieces dropped to fit the sequence length.
    """

    text: str
    tokens: list
    probs: list
    originals: list | None = None
    truncated: int = 0

    @property
    def corrupted(self) -> bool:
        return self.originals is not None

    @property
    def replaced(self) -> list:
        """Per token, whether it was really replaced (all False without corruption)."""
        return [o is not None for o in (self.originals or [None] * len(self.tokens))]

    def summary(self) -> str:
        notes = []
        if self.corrupted:
            notes.append(f"{sum(self.replaced)} of {len(self.tokens)} replaced")
        if self.truncated:
            notes.append(f"{self.truncated} wordpieces truncated")
        return f"  ({'; '.join(notes)})" if notes else ""


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------


def _encode(tokenizer, texts: Sequence[str], max_seq_length: int):
    """`[CLS] ids [SEP]` per text, truncated; returns (rows, number of pieces dropped per text)."""
    rows, dropped = [], []
    for ids in tokenizer.tokenize(list(texts)):
        keep = max_seq_length - 2
        dropped.append(max(0, len(ids) - keep))
        rows.append([tokenizer.cls_id, *ids[:keep], tokenizer.sep_id])
    return rows, dropped


def _corrupt_batch(pretrainer, input_ids, input_mask, segment_ids, seeds, special, mask_prob, temperature):
    """The pre-training corruption: mask → generator → sample (`pretrainer.execution.sampling`) → write samples in."""
    import tensorflow as tf

    from electra_tf.model import masking
    from electra_tf.model.heads import gather_positions

    length = int(input_ids.shape[1])
    max_predictions = min(length, max(1, math.ceil(mask_prob * length)))
    masked = masking.mask_inputs(
        input_ids, input_mask, seeds, mask_id=special["mask"],
        special_ids=(special["pad"], special["cls"], special["sep"], special["mask"]),
        mask_prob=mask_prob, max_predictions=max_predictions, mask_token_prob=pretrainer.config.mask_token_prob)
    hidden = pretrainer.generator({"token_ids": masked.input_ids, "segment_ids": segment_ids,
                                   "padding_mask": input_mask}, training=False)
    logits = pretrainer.generator_head(gather_positions(hidden, masked.positions))
    sampled = masking.sample_tokens(logits, seeds, temperature, pretrainer.execution.sampling)
    fake_ids, labels = masking.corrupt(input_ids, masked, sampled)
    return fake_ids, tf.cast(labels, tf.bool)


def score_texts(pretrainer, tokenizer, texts: Sequence[str], corrupt: bool = False, seed: int = 0,
                max_seq_length: int = 128, mask_prob: float | None = None, temperature: float | None = None,
                batch_size: int = 32) -> list:
    """A `TokenScores` per text: the discriminator's p(replaced) for every wordpiece.

    `pretrainer` is an `ElectraPretrainer` (discriminator + head; with `corrupt`
    the generator too), `tokenizer` an `electra_tf.text.tokenization.WordPieceTokenizer`
    over the same vocabulary. With `corrupt`, text i is corrupted with the
    stateless seeds of example i at step 0 of run `seed`, so a text's corruption
    does not depend on the batch it is in. `mask_prob`/`temperature` default to
    the model's config. Sequences are capped at `max_position_embeddings`.
    """
    import numpy as np
    import tensorflow as tf

    from electra_tf.model import masking

    if pretrainer.discriminator is None or pretrainer.discriminator_head is None:
        raise ValueError("the model has no replaced-token discriminator (objective "
                         f"{pretrainer.config.objective!r})")
    config = pretrainer.config
    max_seq_length = max(3, min(int(max_seq_length), config.max_position_embeddings))
    mask_prob = config.mask_prob if mask_prob is None else float(mask_prob)
    temperature = config.temperature if temperature is None else float(temperature)
    special = tokenizer.special_ids
    rows, dropped = _encode(tokenizer, texts, max_seq_length)
    results = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        length = max(len(r) for r in chunk)
        ids = np.full((len(chunk), length), special["pad"], np.int32)
        for i, r in enumerate(chunk):
            ids[i, :len(r)] = r
        input_ids = tf.constant(ids)
        input_mask = tf.constant((np.arange(length)[None] < np.array([len(r) for r in chunk])[:, None])
                                 .astype(np.int32))
        segment_ids = tf.zeros_like(input_ids)
        replaced = tf.zeros_like(input_ids, tf.bool)
        if corrupt:
            seeds = masking.example_seeds(seed, 0, tf.range(start, start + len(chunk)))
            input_ids, replaced = _corrupt_batch(pretrainer, input_ids, input_mask, segment_ids, seeds, special,
                                                 mask_prob, temperature)
        hidden = pretrainer.discriminator({"token_ids": input_ids, "segment_ids": segment_ids,
                                           "padding_mask": input_mask}, training=False)
        probs = tf.sigmoid(tf.cast(pretrainer.discriminator_head(hidden), tf.float32)).numpy()
        seen, replaced = input_ids.numpy(), replaced.numpy()
        for i, row in enumerate(chunk):
            inner = slice(1, len(row) - 1)  # drop [CLS] and [SEP]
            originals = None
            if corrupt:
                originals = [tokenizer.vocab[o] if r else None
                             for o, r in zip(row[inner], replaced[i, inner])]
            results.append(TokenScores(
                text=texts[start + i], tokens=tokenizer.convert_ids_to_tokens(seen[i, inner]),
                probs=[round(float(p), 6) for p in probs[i, inner]], originals=originals,
                truncated=dropped[start + i]))
    return results


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

# White → red in the xterm 256-colour cube: (5,5,5), (5,4,4), ..., (5,0,0).
_ANSI_RAMP = (231, 224, 217, 210, 203, 196)
_RESET = "\x1b[0m"


def shade_rgb(prob: float) -> tuple:
    """Background colour for `prob`: white at 0, red (220, 30, 30) at 1, linear in between."""
    p = min(max(float(prob), 0.0), 1.0)
    return (round(255 - 35 * p), round(255 - 225 * p), round(255 - 225 * p))


def ansi_background(prob: float) -> str:
    """The ANSI escape for `prob`'s background (black text), from a six-step white → red ramp."""
    p = min(max(float(prob), 0.0), 1.0)
    return f"\x1b[48;5;{_ANSI_RAMP[min(int(p * len(_ANSI_RAMP)), len(_ANSI_RAMP) - 1)]}m\x1b[30m"


def _header(index: int, scores: TokenScores) -> str:
    text = " ".join(scores.text.split())
    if len(text) > 100:
        text = text[:97] + "..."
    return f"# {index}: {text}{scores.summary()}"


def _legend() -> str:
    steps = [i / (len(_ANSI_RAMP) - 1) for i in range(len(_ANSI_RAMP))]
    swatches = "".join(f"{ansi_background(p)} {p:.1f} {_RESET}" for p in steps)
    return f"p(replaced): {swatches}   \x1b[4mreplaced\x1b[24m \x1b[2m(was: original)\x1b[22m"


def _table(scores: TokenScores, color: bool) -> list:
    width = max([len("token"), *(len(t) for t in scores.tokens)])
    extra = "  replaced  original" if scores.corrupted else ""
    lines = [f"  pos  {'token':<{width}}  p(replaced){' ' * 24 if extra else ''}{extra[2:]}".rstrip()]
    originals = scores.originals or [None] * len(scores.tokens)
    for pos, (token, prob, original) in enumerate(zip(scores.tokens, scores.probs, originals), 1):
        cell = f"{prob:11.2f}"
        if color:
            cell = f"{ansi_background(prob)}{cell}{_RESET}"
        bar = "#" * int(round(prob * 20))
        line = f"  {pos:>3}  {token:<{width}}  {cell}  {bar:<20}"
        if scores.corrupted:
            line += f"  {'yes' if original is not None else '':<8}  {original or ''}"
        lines.append(line.rstrip())
    return lines


def _inline(scores: TokenScores, color: bool) -> str:
    originals = scores.originals or [None] * len(scores.tokens)
    parts = []
    for token, prob, original in zip(scores.tokens, scores.probs, originals):
        if not color:
            parts.append(f"{token}({prob:.2f})" + (f"[was:{original}]" if original is not None else ""))
        elif original is not None:
            parts.append(f"{ansi_background(prob)}\x1b[4m{token}{_RESET}\x1b[2m(was: {original}){_RESET}")
        else:
            parts.append(f"{ansi_background(prob)}{token}{_RESET}")
    return " ".join(parts)


def render_terminal(results: Sequence[TokenScores], color: bool = True, table: bool = False) -> str:
    """Text for a terminal (`color`: ANSI backgrounds white → red) or a pipe (`token(0.93)` / a table)."""
    lines = [_legend()] if color and results else []
    for index, scores in enumerate(results, 1):
        if index > 1:
            lines.append("")
        lines.append(_header(index, scores))
        lines.extend(_table(scores, color) if table else [_inline(scores, color)])
    return "\n".join(lines)


_HTML_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #111; }
h1 { font-size: 1.3rem; } .meta { color: #555; font-size: .9rem; }
.text { line-height: 2.3; margin: 1.2rem 0; padding: .6rem .8rem; border: 1px solid #ddd; border-radius: 6px; }
.text h2 { font-size: .95rem; font-weight: normal; color: #555; margin: 0; line-height: 1.5; }
.tok { padding: .15rem .2rem; border-radius: 3px; font-family: ui-monospace, monospace; cursor: help; }
.tok.piece { margin-left: 1px; border-top-left-radius: 0; border-bottom-left-radius: 0; }
.tok.replaced { outline: 2px solid #1f4fd1; outline-offset: 1px; font-weight: bold; }
.orig { color: #1f4fd1; font-size: .8em; text-decoration: line-through; margin-left: .15rem; }
.legend span { display: inline-block; width: 3rem; text-align: center; font-size: .8rem; }
"""


def _html_tokens(scores: TokenScores) -> str:
    originals = scores.originals or [None] * len(scores.tokens)
    out = []
    for token, prob, original in zip(scores.tokens, scores.probs, originals):
        piece = token.startswith("##") and len(token) > 2
        classes = "tok" + (" piece" if piece else "") + (" replaced" if original is not None else "")
        title = f"p(replaced) = {prob:.3f}  ({token})"
        if original is not None:
            title += f"; replaced by the generator, original: {original}"
        r, g, b = shade_rgb(prob)
        span = (f'<span class="{classes}" style="background:rgb({r},{g},{b})" title="{html.escape(title)}">'
                f"{html.escape(token[2:] if piece else token)}</span>")
        if original is not None:
            span += f'<s class="orig" title="original token">{html.escape(original)}</s>'
        out.append(span if piece or not out else " " + span)
    return "".join(out)


def render_html(results: Sequence[TokenScores], title: str = "ELECTRA replaced-token detection",
                source: str | None = None) -> str:
    """A self-contained HTML page: every wordpiece on its p(replaced) shade, the value in its tooltip.

    Continuation pieces (`##x`) are drawn attached to the piece before them; with
    corruption, replaced tokens are outlined and followed by the struck-out original.
    """
    legend = "".join(f'<span style="background:rgb({",".join(map(str, shade_rgb(p / 5)))})">{p / 5:.1f}</span>'
                     for p in range(6))
    corrupted = any(s.corrupted for s in results)
    note = (" Outlined tokens were replaced by the generator; the struck-out word after one is the original."
            if corrupted else "")
    body = [f"<h1>{html.escape(title)}</h1>",
            f'<p class="meta">{html.escape(source) + " &middot; " if source else ""}Background: the '
            f"discriminator's probability that the token was replaced (hover for the value).{note}</p>",
            f'<p class="legend">{legend}</p>']
    for index, scores in enumerate(results, 1):
        body.append(f'<div class="text"><h2>{html.escape(_header(index, scores)[2:])}</h2>'
                    f"{_html_tokens(scores)}</div>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{_HTML_STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


# --------------------------------------------------------------------------------------------
# Loading a checkpoint of any format
# --------------------------------------------------------------------------------------------


class UsageError(ValueError):
    """Bad command-line input; `flag` names the flag to fix (None: the positional texts)."""

    def __init__(self, flag: str | None, message: str):
        super().__init__(f"{flag}: {message}" if flag else message)
        self.flag = flag


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
    from electra_tf.text.tokenization import WordPieceTokenizer  # after the cheap checks: these import TensorFlow
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
            config, pretrainer, found_vocab = api.load_any(init_checkpoint, source_format="ours")
            parts = ("discriminator", "discriminator_head", "generator", "generator_head")
            vocab_path = vocab_file or found_vocab
            if not vocab_path:
                raise UsageError("--vocab_file", f"{init_checkpoint} has no vocab.txt; pass --vocab_file")
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
        tokenizer = WordPieceTokenizer(vocab_path, do_lower_case=True if do_lower_case is None else do_lower_case)
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


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m electra_tf.detect",
        description="Show the ELECTRA discriminator's probability that each token was replaced.")
    parser.add_argument("texts", nargs="*", help="texts to score (one sequence each)")
    parser.add_argument("--init_checkpoint", help="export directory, Hugging Face folder or TF1 checkpoint")
    parser.add_argument("--generator_checkpoint", help="Hugging Face generator folder, if not beside the "
                        "discriminator (for --corrupt)")
    parser.add_argument("--vocab_file", help="vocab.txt (default: the checkpoint's)")
    parser.add_argument("--do_lower_case", action=argparse.BooleanOptionalAction, default=None,
                        help="lower-case and strip accents (default: the checkpoint's tokenizer_config.json, "
                        "else yes)")
    parser.add_argument("--input_file", help="file with one text per line (blank lines skipped); '-' = stdin")
    parser.add_argument("--max_seq_length", type=int, default=128,
                        help="wordpieces per sequence incl. [CLS]/[SEP] (capped by max_position_embeddings)")
    parser.add_argument("--corrupt", action="store_true",
                        help="let the generator replace tokens first, as in pre-training")
    parser.add_argument("--seed", type=int, default=0, help="seed of --corrupt's masking and sampling")
    parser.add_argument("--mask_prob", type=float, default=None,
                        help="share of tokens --corrupt masks (default: the model's, 0.15)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="generator sampling temperature for --corrupt (default: the model's)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="ANSI colours: auto = when stdout is a terminal and NO_COLOR is unset")
    parser.add_argument("--table", action="store_true", help="one aligned row per token instead of one line")
    parser.add_argument("--html", metavar="OUT.html", help="also write a self-contained HTML page")
    parser.add_argument("--batch_size", type=int, default=32)
    return parser


def _read_texts(args) -> list:
    texts = [t for t in args.texts if t.strip()]
    if args.input_file:
        try:
            if args.input_file == "-":
                lines = sys.stdin.read().split("\n")
            else:
                with open(args.input_file, encoding="utf-8") as f:
                    lines = f.read().split("\n")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError("--input_file", f"cannot read {args.input_file} "
                             f"({getattr(e, 'strerror', None) or e})") from None
        texts += [line.rstrip("\r") for line in lines if line.strip()]
    if not texts:
        raise UsageError(None, "no text to score: pass texts as arguments or --input_file")
    return texts


def _use_color(choice: str, stream) -> bool:
    if choice != "auto":
        return choice == "always"
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR") \
        and os.environ.get("TERM") != "dumb"


def _check_args(args):
    if args.max_seq_length < 3:
        raise UsageError("--max_seq_length", f"must be at least 3 ([CLS] token [SEP]), got {args.max_seq_length}")
    if args.mask_prob is not None and not 0.0 < args.mask_prob < 1.0:
        raise UsageError("--mask_prob", f"must be in (0, 1), got {args.mask_prob}")
    if args.temperature is not None and args.temperature <= 0:
        raise UsageError("--temperature", f"must be positive, got {args.temperature}")
    if args.batch_size < 1:
        raise UsageError("--batch_size", f"must be positive, got {args.batch_size}")
    if args.html and not os.path.isdir(os.path.dirname(os.path.abspath(args.html))):
        raise UsageError("--html", f"the folder of {args.html} does not exist")


def main(argv: Sequence[str] | None = None, stdout=None) -> int:
    """The CLI; returns the exit status (2 for bad input)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    stdout = stdout or sys.stdout
    args = _parser().parse_args(argv)
    try:
        _check_args(args)
        texts = _read_texts(args)
        detector = load_detector(args.init_checkpoint, args.vocab_file, args.generator_checkpoint,
                                 args.do_lower_case)
    except UsageError as e:
        print(f"detect: error: {e}", file=sys.stderr)
        return 2
    if args.corrupt and not {"generator", "generator_head"} <= set(detector.parts):
        print(f"detect: warning: {args.init_checkpoint} holds no trained generator; --corrupt samples from a "
              "random one (pass --generator_checkpoint for a Hugging Face generator)", file=sys.stderr)
    results = detector.score(texts, corrupt=args.corrupt, seed=args.seed, max_seq_length=args.max_seq_length,
                             mask_prob=args.mask_prob, temperature=args.temperature, batch_size=args.batch_size)
    print(render_terminal(results, color=_use_color(args.color, stdout), table=args.table), file=stdout)
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(render_html(results, source=args.init_checkpoint))
        print(f"detect: wrote {args.html}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from electra_tf.runtime import use_onednn_kernels

    use_onednn_kernels()  # TensorFlow is imported later, by load_detector
    sys.exit(main())
