"""CorpusError: bad corpus input."""


class CorpusError(ValueError):
    """Bad input; the message is one line naming the file and the problem."""
