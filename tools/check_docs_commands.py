r"""Runs the shell commands of README.md and docs/*.md as written, and says which ones fail.

    python -m tools.check_docs_commands                      # every page; an hour or more on 2 cores
    python -m tools.check_docs_commands --list               # what would run, what is skipped and why
    python -m tools.check_docs_commands docs/finetuning.md --workdir=/tmp/docs_check --match=SST-2

What runs. Every command of every ```bash (or ```sh) block of the pages, one after another, in
page order: README.md, then the docs pages in `PAGE_ORDER`, then any other docs/*.md. A command is
what bash would read as one: lines joined by a trailing backslash or by an open quote. Comments are
not commands. Each command runs in its own `bash -c` (nothing but files carries from one to the next).

Where. In a workspace `<tmp>/repo` that holds a copy of the repository's files (tracked and untracked,
not ignored ones), beside `<tmp>/shared`, a link to the checkout's `../shared`, so that
`../shared/data` resolves as it does in a checkout. HOME is `<tmp>/home`. All pages share the
workspace, so a page may use what an earlier page wrote (e.g. `runs/small/export`); checking one page
alone therefore needs `--workdir` with what the earlier pages left there.

Skipped. A command that cannot run on one CPU machine on small data (a TPU, several machines, GCS
paths, downloads, installs, hours of work) carries the marker as a comment on one of its lines:

    python run_pretraining.py --strategy=tpu --tpu=my-tpu ...  # not run by tools/check_docs_commands.py: needs a TPU

The checker never guesses: everything without the marker runs.

Overrides that keep runs small. Training commands run as written plus flags appended at the end
(absl takes a flag's last value):

* `python run_pretraining.py ...` gets `--stop_after_steps=2 --train_batch_size=8 --log_steps=1`
  (two steps of the same run at batch 8: a checkpoint, the TensorBoard summaries and the export are
  written at step 2), unless it has `--export_only`;
* `python run_finetuning.py ...` gets `--max_train_steps=2` (then the usual evaluation and outputs).

Overrides are appended only to a command that starts with the script (after `VAR=value` words) and
holds no shell operator; any other command that names one of these scripts fails as "cannot shorten"
unless it carries the marker, so no long training starts by accident.

Exit status: 0 when every command that ran succeeded, 1 otherwise. Each command's output is kept in
`<tmp>/logs/`; `--keep` (or `--workdir`) keeps the workspace. A full run took 57 minutes on 2 shared cores and
left about 15 GB in the workspace (mostly the `base` runs' checkpoints); without `--keep` or `--workdir` the
workspace is deleted at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = "not run by tools/check_docs_commands.py"
PAGE_ORDER = ("README.md", "docs/data.md", "docs/pretraining.md", "docs/finetuning.md", "docs/conversion.md",
              "docs/detect.md", "docs/distributed.md", "docs/performance.md", "docs/differences.md",
              "docs/results.md")
LANGUAGES = ("bash", "sh")
OVERRIDES = {
    "run_pretraining.py": ["--stop_after_steps=2", "--train_batch_size=8", "--log_steps=1"],
    "run_finetuning.py": ["--max_train_steps=2"],
}
NO_OVERRIDE_FLAGS = {"run_pretraining.py": ("--export_only",)}
SHELL_OPERATORS = set("|;&<>`") | {"$("}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclasses.dataclass
class Command:
    page: str
    line: int  # 1-based line of the page where the command starts
    text: str  # the command without its comments, continuation lines kept
    comments: list[str]

    @property
    def skip_reason(self) -> str | None:
        """The marker's reason, or None when the command runs."""
        for comment in self.comments:
            if MARKER in comment:
                reason = comment.split(MARKER, 1)[1].lstrip(" :")
                return reason or "marked"
        return None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


# ---------------------------------------------------------------------------------------------
# Extraction


def code_blocks(markdown: str) -> list[tuple[int, list[str]]]:
    """`(first content line, lines)` of each fenced bash block, indentation of the fence removed.

    >>> code_blocks("text\\n```bash\\necho hi\\n```\\n```python\\nprint(1)\\n```\\n")
    [(3, ['echo hi'])]
    """
    blocks, lines = [], markdown.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, language = match.groups()
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            line = lines[j]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            j += 1
        if language.lower() in LANGUAGES:
            blocks.append((i + 2, body))
        i = j + 1
    return blocks


def _scan_line(line: str, quote: str | None) -> tuple[str, str | None, str | None]:
    """`(code, comment, quote)`: the line's code and comment, and the quote still open at its end."""
    i, escaped = 0, False
    while i < len(line):
        c = line[i]
        if escaped:
            escaped = False
        elif quote == "'":
            if c == "'":
                quote = None
        elif c == "\\":
            escaped = True
        elif quote == '"':
            if c == '"':
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip(), None
        i += 1
    return line, None, quote


def split_commands(lines: list[str], page: str = "", first_line: int = 1) -> list[Command]:
    """The commands of a bash block's lines, as bash would group them.

    >>> [c.text for c in split_commands(["# set-up", "echo a \\\\", "  b  # note", "echo 'x", "y'"])]
    ['echo a \\\\\\n  b', "echo 'x\\ny'"]
    """
    commands: list[Command] = []
    code: list[str] = []
    comments: list[str] = []
    quote = None
    start = first_line
    for offset, line in enumerate(lines):
        if quote is None and not code:
            start = first_line + offset
        text, comment, quote = _scan_line(line, quote)
        if comment is not None:
            comments.append(comment)
        if text.strip() or code:
            code.append(text)
        continued = quote is not None or (text.endswith("\\") and not text.endswith("\\\\"))
        if not continued:
            if any(part.strip() for part in code):
                commands.append(Command(page, start, "\n".join(code).strip(), comments))
            code, comments = [], []  # a comment-only line is no command and belongs to none
    if code:
        commands.append(Command(page, start, "\n".join(code).strip(), comments))
    return commands


def page_commands(root: Path, page: str) -> list[Command]:
    text = (root / page).read_text(encoding="utf-8")
    return [command for first, lines in code_blocks(text) for command in split_commands(lines, page, first)]


def default_pages(root: Path) -> list[str]:
    """README.md and docs/*.md in `PAGE_ORDER`, pages not named there last, alphabetically."""
    found = ["README.md"] + sorted(p.relative_to(root).as_posix() for p in (root / "docs").glob("*.md"))
    found = [p for p in found if (root / p).is_file()]
    rank = {page: i for i, page in enumerate(PAGE_ORDER)}
    return sorted(found, key=lambda p: (rank.get(p, len(rank)), p))


# ---------------------------------------------------------------------------------------------
# Overrides


def _has_operator(text: str) -> bool:
    quote, escaped = None, False
    for i, c in enumerate(text):
        if escaped:
            escaped = False
        elif quote == "'":
            quote = None if c == "'" else quote
        elif c == "\\":
            escaped = True
        elif quote == '"':
            if c == '"':
                quote = None
            elif c in "`$" and text[i:i + 2] in ("`", "$("):
                return True
        elif c in "'\"":
            quote = c
        elif c in SHELL_OPERATORS or text[i:i + 2] == "$(":
            return True
    return False


def to_run(command: Command) -> tuple[str | None, str]:
    """`(shell text to run, note)`; text None when the command cannot be run as it is (the note says why).

    >>> to_run(Command("p", 1, "python run_finetuning.py --task=RTE", []))
    ('python run_finetuning.py --task=RTE --max_train_steps=2', 'appended --max_train_steps=2')
    >>> to_run(Command("p", 1, "echo hi", []))
    ('echo hi', '')
    """
    scripts = [s for s in OVERRIDES if s in command.text]
    if not scripts:
        return command.text, ""
    try:
        words = shlex.split(command.text.replace("\\\n", " "))
    except ValueError:
        words = []
    while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
        words.pop(0)
    script = os.path.basename(words[1]) if len(words) > 1 and words[0] in ("python", "python3") else None
    if script not in OVERRIDES or len(scripts) > 1 or _has_operator(command.text):
        return None, (f"cannot shorten: a command naming {', '.join(scripts)} must start with the script and hold no "
                      f"shell operator, or carry '# {MARKER}: REASON'")
    if any(flag in words for flag in NO_OVERRIDE_FLAGS.get(script, ())):
        return command.text, ""
    extra = OVERRIDES[script]
    return command.text + " " + " ".join(extra), "appended " + " ".join(extra)


# ---------------------------------------------------------------------------------------------
# Running


def repository_files(root: Path) -> list[str]:
    """The working tree's files that git knows or would add (tracked, and untracked not ignored)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout
    return sorted({name for name in out.decode().split("\0") if name and (root / name).is_file()})


def make_workspace(root: Path, workdir: Path) -> Path:
    """`workdir/repo` with a copy of the repository, `workdir/shared` linked to the checkout's ../shared."""
    repo = workdir / "repo"
    for name in repository_files(root):
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    shared = (root.parent / "shared").resolve()
    link = workdir / "shared"
    if shared.is_dir() and not link.exists():
        link.symlink_to(shared, target_is_directory=True)
    for folder in ("home", "logs"):
        (workdir / folder).mkdir(exist_ok=True)
    return repo


def run_command(text: str, workdir: Path, log: Path, timeout: float) -> tuple[bool, str]:
    """Runs `text` with bash in `workdir/repo`; `(ok, last lines of its output)`."""
    env = dict(os.environ, HOME=str(workdir / "home"), TF_CPP_MIN_LOG_LEVEL="2",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    with open(log, "w", encoding="utf-8") as out:
        out.write(f"$ {text}\n")
        out.flush()
        try:
            status = subprocess.run(["bash", "-c", text], cwd=workdir / "repo", env=env, stdout=out,
                                    stderr=subprocess.STDOUT, timeout=timeout, stdin=subprocess.DEVNULL).returncode
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout:.0f} s"
    tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-25:])
    return status == 0, tail if status == 0 else f"exit status {status}\n{tail}"


def one_line(text: str, width: int = 110) -> str:
    text = " ".join(text.replace("\\\n", " ").split())
    return text if len(text) <= width else text[:width - 1] + "…"


def check(pages: list[str], workdir: Path, timeout: float, match: str | None = None, root: Path = ROOT,
          list_only: bool = False, out=sys.stdout) -> int:
    commands = [c for page in pages for c in page_commands(root, page)]
    if match:
        commands = [c for c in commands if match in c.text]
    if not list_only:
        make_workspace(root, workdir)
    counts = {"ok": 0, "failed": 0, "skipped": 0}
    for number, command in enumerate(commands, 1):
        reason = command.skip_reason
        text, note = to_run(command)
        if reason is not None:
            status, detail = "skipped", reason
        elif text is None:
            status, detail = "failed", note
        elif list_only:
            print(f"run      {command.where}  {one_line(command.text)}" + (f"  [{note}]" if note else ""), file=out)
            continue
        else:
            print(f"...      {command.where}  {one_line(command.text)}", file=out, flush=True)
            started = time.time()
            ok, tail = run_command(text, workdir, workdir / "logs" / f"{number:03d}.log", timeout)
            status = "ok" if ok else "failed"
            detail = f"{time.time() - started:.0f} s" + (f", {note}" if note else "")
            if not ok:
                detail += "\n" + "\n".join("         | " + line for line in tail.splitlines())
        if list_only and status == "skipped":
            print(f"skip     {command.where}  {one_line(command.text)}  [{detail}]", file=out)
            continue
        counts[status] += 1
        print(f"{status:8} {command.where}  {one_line(command.text)}  ({detail})", file=out, flush=True)
    if not list_only:
        print(f"\n{counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped; workspace {workdir}",
              file=out)
    return 1 if counts["failed"] else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.check_docs_commands",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="*", help="pages relative to the repository root (default: README.md, "
                                                 "docs/*.md in PAGE_ORDER)")
    parser.add_argument("--list", action="store_true", help="print what would run and what is skipped; run nothing")
    parser.add_argument("--workdir", help="workspace to use and keep (created, or reused with what earlier runs "
                                          "left in it)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary workspace")
    parser.add_argument("--match", help="only the commands whose text contains this string")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per command (default 1800)")
    args = parser.parse_args(argv)
    pages = args.pages or default_pages(ROOT)
    if args.list:
        return check(pages, Path("."), args.timeout, args.match, list_only=True)
    workdir = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="docs_check_"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return check(pages, workdir, args.timeout, args.match)
    finally:
        if not (args.workdir or args.keep):
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
