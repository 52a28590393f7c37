"""Numeric constants the reference ops (`ops.reference`) and the XLA:CPU kernels (`ops.xla_cpu`) share.

No framework import: both sides read the same numbers.

>>> from electra_tf.ops.numerics import dropout_threshold
>>> dropout_threshold(0.1), round(dropout_threshold(0.1) / DROPOUT_LEVELS, 6)
(6554, 0.100006)
"""

SQRT_HALF = 0.7071067811865476  # 1 / √2
INV_SQRT_2PI = 0.3989422804014327  # 1 / √(2π)

# Dropout keep decisions at 16-bit resolution: one 32-bit random number gives two decisions.
DROPOUT_LEVELS = 1 << 16


def dropout_threshold(rate: float) -> int:
    """`ops.reference.dropout16` drops an element iff its 16-bit random integer is below this."""
    return int(round(rate * DROPOUT_LEVELS))


def dropout_scale(threshold: int) -> float:
    """What a kept element is multiplied by at that threshold (1 / keep probability), so E[y] = x;
    0 when every element is dropped."""
    if threshold >= DROPOUT_LEVELS:
        return 0.0
    return DROPOUT_LEVELS / (DROPOUT_LEVELS - threshold)
