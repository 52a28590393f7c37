"""The shared command-line behaviour of the data_prep tools.

Every tool (``build_pretraining_dataset``, ``build_vocab``,
``inspect_shards``) ends the same way: ``run_cli(run, define_flags,
required=...)``.  It registers the flags, parses them with absl, refuses
stray positional arguments (usage error), quiets TensorFlow's C++ logging,
and then:

* a missing required flag -> ``error: --a and --b are required``, exit 2;
* an expected error (``CorpusError`` by default: bad input, bad vocab, bad
  options) -> one line ``error: <message>`` on stderr, exit 1, no traceback;
* otherwise ``run()``'s return value (``None`` = 0) is the exit status.

Example:

>>> from data_prep.cli import make_main, missing_flags_message
>>> missing_flags_message(["input", "output"])
'error: --input and --output are required'
>>> from data_prep.corpus.errors import CorpusError
>>> def run():
...     raise CorpusError("input x.txt: is empty")
>>> make_main(run, stderr=sys.stdout)(["prog"])
error: input x.txt: is empty
1
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional, Sequence

from data_prep.corpus.errors import CorpusError


def missing_flags_message(names: Sequence[str]) -> str:
    flags_text = " and ".join(f"--{name}" for name in names)
    return f"error: {flags_text} {'is' if len(names) == 1 else 'are'} required"


def refuse_args(args: Sequence[str]) -> None:
    """A usage error (absl prints usage, exit 1) naming stray command-line arguments, if any."""
    if args:
        from absl import app
        raise app.UsageError(f"unexpected arguments: {' '.join(args)}")


def make_main(run: Callable[..., Optional[int]], *, required: Sequence[str] = (),
              errors: tuple = (CorpusError,), stderr=None, takes_args: bool = False) -> Callable[[list], int]:
    """An absl ``main(argv)`` around ``run()`` (see the module docstring).

    ``takes_args``: call ``run(args)`` with the arguments absl left (``run_cli(known_only=True)``)
    instead of refusing them.
    """
    def main(argv) -> int:
        from absl import flags
        out = stderr or sys.stderr
        if not takes_args:
            refuse_args(argv[1:])
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        missing = [name for name in required if not getattr(flags.FLAGS, name)]
        if missing:
            print(missing_flags_message(missing), file=out)
            return 2
        try:
            status = run(argv[1:]) if takes_args else run()
        except errors as e:
            print(f"error: {e}", file=out)
            return 1
        return status or 0
    return main


def run_cli(run: Callable[..., Optional[int]], define_flags: Callable[[], None], *,
            required: Sequence[str] = (), errors: tuple = (CorpusError,), known_only: bool = False) -> None:
    """Register the flags, parse ``sys.argv`` and exit with ``run()``'s status.

    ``known_only``: arguments that are not our flags (e.g. Beam pipeline options) are passed
    to ``run(args)``, which decides what to do with them.
    """
    from absl import app
    define_flags()
    parser = _parse_known_flags if known_only else app.parse_flags_with_usage
    app.run(make_main(run, required=required, errors=errors, takes_args=known_only), flags_parser=parser)


def _parse_known_flags(argv: list) -> list:
    """absl's ``parse_flags_with_usage``, leaving unknown flags in the returned argv."""
    from absl import flags
    try:
        return flags.FLAGS(argv, known_only=True)
    except flags.Error as error:
        print(f"FATAL Flags parsing error: {error}", file=sys.stderr)
        print("Pass --helpshort or --helpfull to see help on flags.", file=sys.stderr)
        sys.exit(1)
