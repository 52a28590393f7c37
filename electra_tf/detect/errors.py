"""UsageError: bad command-line input of `python -m electra_tf.detect`, naming the flag to fix."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad command-line input; `flag` names the flag to fix (None: the positional texts)."""

    def __init__(self, flag: str | None, message: str):
        super().__init__(f"{flag}: {message}" if flag else message)
        self.flag = flag
