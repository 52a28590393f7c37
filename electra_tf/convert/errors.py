"""The one error type of `electra_tf.convert`: a checkpoint that does not fit, with the variables concerned.

Example:

>>> from electra_tf.convert.errors import ConversionError
>>> print(ConversionError("ckpt does not match", missing=["electra/embeddings/word_embeddings"]))
ckpt does not match
  1 missing:
    electra/embeddings/word_embeddings
"""

MAX_LISTED = 25


class ConversionError(ValueError):
    """A checkpoint that does not fit; `missing`/`unexpected`/`mismatched` list source names."""

    def __init__(self, message, missing=(), unexpected=(), mismatched=()):
        self.message = message
        self.missing, self.unexpected, self.mismatched = list(missing), list(unexpected), list(mismatched)
        lines = [message]
        for title, items in (("missing", self.missing), ("unexpected", self.unexpected),
                             ("shape mismatch", self.mismatched)):
            if items:
                lines.append(f"  {len(items)} {title}:")
                lines += [f"    {item}" for item in items[:MAX_LISTED]]
                if len(items) > MAX_LISTED:
                    lines.append(f"    ... and {len(items) - MAX_LISTED} more")
        super().__init__("\n".join(lines))
