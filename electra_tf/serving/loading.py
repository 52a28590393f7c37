"""What the serving commands (`python -m electra_tf.ask`, `python -m electra_tf.tag`) share: loading an
export's signature, and refusing a missing or different export in one line.

TensorFlow is imported only once the directory holds a SavedModel, so a wrong path fails fast.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np


class UsageError(Exception):
    """Bad input: one line for the user, exit status 2."""


def text_or_file(text: str | None, path: str | None, name: str) -> str:
    """The text given by `--<name>` or read from `--<name>_file` (exactly one of them)."""
    if (text is None) == (path is None):
        raise UsageError(f"give one of --{name} or --{name}_file")
    if text is not None:
        return text
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--{name}_file: cannot read {path} ({e})") from None


def load_signature(path: str, input_names: Sequence[str], kind: str, output_names: Sequence[str] = ()):
    """The `serving_default` signature of the SavedModel at `path`, which must take exactly `input_names` and
    return at least `output_names` (`kind` names the export in the error, e.g. "a SQuAD export")."""
    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise UsageError(f"--model: no SavedModel at {path} (saved_model.pb is missing)")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    signature = tf.saved_model.load(path).signatures.get("serving_default")
    inputs = set(signature.structured_input_signature[1]) if signature is not None else set()
    if inputs != set(input_names):
        raise UsageError(f"--model: {path} is not {kind} (its signature takes {sorted(inputs)}, "
                         f"not {' and '.join(input_names)})")
    missing = set(output_names) - set(signature.structured_outputs)
    if missing:
        raise UsageError(f"--model: {path} is not {kind} (its signature returns no {', '.join(sorted(missing))})")
    return signature


def _python(value):
    """A NumPy output element as plain Python: strings decoded, arrays as lists."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [_python(v) for v in value]
    return value.item()


def first_row(outputs) -> dict:
    """The first batch row of every output of a signature, as plain Python values."""
    return {name: _python(value.numpy()[0]) for name, value in sorted(outputs.items())}
