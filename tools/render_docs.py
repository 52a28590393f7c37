"""Regenerates the results tables of the documentation from committed JSON.

    python -m tools.render_docs            # rewrite every generated block that is out of date
    python -m tools.render_docs --check    # change nothing; exit 1 naming each page whose blocks are stale

A page marks a generated block with a pair of HTML comments, which Markdown does not show:

    <!-- begin generated: NAME -->
    (anything here is replaced)
    <!-- end generated: NAME -->

NAME picks a renderer in `tools.docs_renderers.RENDERERS`; each reads one JSON file under `docs/results/` and returns the
Markdown of the block (a table, or one sentence), starting with a line that names its source file and the
command that produced the numbers. The pages scanned are `README.md`, `CHANGELOG.md`, `docs/*.md` and
`bench/*.md`. The JSON files:

* `docs/results/compare_objectives.json`: written by `python -m experiments.compare_objectives
  --stage=report` (which also writes `docs/results/compare_objectives.md` itself; that page has no markers).
* `docs/results/conll/*.json`: one per run of `python -m experiments.conll_ner --name=NAME`.
* `docs/results/demo_curve.json`: written by `python -m experiments.demo_curve` (runs the offline demo).
* `bench/results/inference-sst2-small.json`: written by `python -m bench.inference_bench --stage=run`.
* `bench/results/inference-conll-tagger-small.json`: written by `python -m bench.inference_bench_tagger --stage=run`.
* `docs/results/finetuning_smoke.json`, `data_prep.json`, `step_bench_latest.json`:
  the numbers of runs recorded before this tool existed, each with its command, commit and machine.

A new result: add or replace its JSON file, run `python -m tools.render_docs`, commit both.
`tests/test_render_docs.py` runs `--check` on the repository, so a stale page fails the test suite.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from tools.docs_renderers import RENDERERS, Context

ROOT = Path(__file__).resolve().parents[1]
PAGE_GLOBS = ("README.md", "CHANGELOG.md", "docs/*.md", "bench/*.md")

BEGIN = re.compile(r"<!-- begin generated: ([\w.-]+) -->")
END = re.compile(r"<!-- end generated: ([\w.-]+) -->")


class DocsError(ValueError):
    """A page whose markers do not pair up, or that names an unknown block."""


# ---------------------------------------------------------------------------------------------
# Markers


def find_blocks(text: str) -> list[tuple[str, int, int]]:
    """`(name, start, end)` of each generated block: `text[start:end]` is what lies between the
    begin line and the end line (the lines themselves stay).

    >>> text = "a\\n<!-- begin generated: x -->\\nold\\n<!-- end generated: x -->\\nb\\n"
    >>> [(name, text[s:e]) for name, s, e in find_blocks(text)]
    [('x', 'old\\n')]
    """
    blocks = []
    position = 0
    while True:
        begin = BEGIN.search(text, position)
        end = END.search(text, position)
        if begin is None:
            if end is not None:
                raise DocsError(f"'end generated: {end.group(1)}' without a begin marker")
            return blocks
        name = begin.group(1)
        if end is None or end.start() < begin.end():
            raise DocsError(f"'begin generated: {name}' without its end marker")
        following = BEGIN.search(text, begin.end())
        if following is not None and following.start() < end.start():
            raise DocsError(f"'begin generated: {following.group(1)}' inside block {name!r}")
        if end.group(1) != name:
            raise DocsError(f"block {name!r} ends with 'end generated: {end.group(1)}'")
        start = text.index("\n", begin.end()) + 1 if "\n" in text[begin.end():end.start()] else begin.end()
        blocks.append((name, start, end.start()))
        position = end.end()


def render_page(text: str, page: Path, root: Path = ROOT) -> str:
    """`text` with every generated block rebuilt; `page` is the page's path relative to `root`."""
    out, position = [], 0
    for name, start, end in find_blocks(text):
        if name not in RENDERERS:
            raise DocsError(f"unknown generated block {name!r} (known: {', '.join(sorted(RENDERERS))})")
        body = RENDERERS[name](Context(root, page)).rstrip("\n") + "\n"
        if text[start - 1] != "\n":  # begin and end markers on one line
            body = "\n" + body
        out += [text[position:start], body]
        position = end
    out.append(text[position:])
    return "".join(out)


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that may hold generated blocks, relative to `root`."""
    found = set()
    for pattern in PAGE_GLOBS:
        found.update(p.relative_to(root) for p in root.glob(pattern) if p.is_file())
    return sorted(found)


# ---------------------------------------------------------------------------------------------


def run(check: bool, root: Path = ROOT, only: list[str] | None = None) -> int:
    """Rewrites (or, with `check`, only compares) the pages; returns the exit status."""
    stale, errors = [], []
    for page in [Path(p) for p in only] if only else pages(root):
        text = (root / page).read_text(encoding="utf-8")
        try:
            new = render_page(text, page, root)
        except (DocsError, KeyError, FileNotFoundError, json.JSONDecodeError) as e:
            errors.append(f"{page}: {type(e).__name__}: {e}")
            continue
        if new != text:
            stale.append(page)
            if not check:
                (root / page).write_text(new, encoding="utf-8")
    for message in errors:
        print(f"error: {message}", file=sys.stderr)
    for page in stale:
        names = [name for name, _, _ in find_blocks((root / page).read_text(encoding="utf-8"))]
        if check:
            print(f"stale: {page} (generated blocks: {', '.join(names)}); run python -m tools.render_docs")
        else:
            print(f"rewrote {page}")
    return 1 if errors or (check and stale) else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.render_docs", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 naming each page with a stale generated block")
    parser.add_argument("pages", nargs="*", help="pages relative to the repository root (default: all)")
    args = parser.parse_args(argv)
    return run(args.check, ROOT, args.pages)


if __name__ == "__main__":
    sys.exit(main())
