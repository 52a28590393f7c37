"""`TokenScores` shown: on a terminal (ANSI backgrounds white → red), in a pipe (`token(0.93)` or a table),
or as a self-contained HTML page."""

from __future__ import annotations

import html
from typing import Sequence

from electra_tf.detect.scoring import TokenScores
from electra_tf.text.tokenization import is_wordpiece_continuation
from electra_tf.text.sentencepiece_tokenizer import WORD_START


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


def shown_piece(token: str, word_start: bool) -> str:
    """The piece without its tokenizer's word mark: `▁` before a SentencePiece word start, `##` before a
    WordPiece continuation."""
    if word_start and token.startswith(WORD_START) and len(token) > 1:
        return token[1:]
    if not word_start and is_wordpiece_continuation(token):
        return token[2:]
    return token


def _html_tokens(scores: TokenScores) -> str:
    originals = scores.originals or [None] * len(scores.tokens)
    starts = scores.word_starts or [not is_wordpiece_continuation(t) for t in scores.tokens]
    out = []
    for token, prob, original, word_start in zip(scores.tokens, scores.probs, originals, starts):
        piece = not word_start
        classes = "tok" + (" piece" if piece else "") + (" replaced" if original is not None else "")
        title = f"p(replaced) = {prob:.3f}  ({token})"
        if original is not None:
            title += f"; replaced by the generator, original: {original}"
        r, g, b = shade_rgb(prob)
        span = (f'<span class="{classes}" style="background:rgb({r},{g},{b})" title="{html.escape(title)}">'
                f"{html.escape(shown_piece(token, word_start))}</span>")
        if original is not None:
            span += f'<s class="orig" title="original token">{html.escape(original)}</s>'
        out.append(span if piece or not out else " " + span)
    return "".join(out)


def render_html(results: Sequence[TokenScores], title: str = "ELECTRA replaced-token detection",
                source: str | None = None) -> str:
    """A self-contained HTML page: every wordpiece on its p(replaced) shade, the value in its tooltip.

    Pieces inside a word (WordPiece `##x`, SentencePiece pieces without `▁`) are drawn attached to the piece
    before them, without their marks; with
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
