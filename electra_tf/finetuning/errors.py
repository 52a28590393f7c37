"""`UsageError`: bad options or input files, which the command line reports as one line.

It imports nothing, so `run_finetuning.py` raises it while checking its flags,
before TensorFlow is imported.

Example:

>>> isinstance(UsageError("--task is required"), ValueError)
True
"""


class UsageError(ValueError):
    """A problem with the options or input files: reported as one line."""
