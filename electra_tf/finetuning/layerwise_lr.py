"""Layer-wise learning-rate decay multipliers (ELECTRA paper, appendix A).

Layers closer to the input get smaller learning rates. For an encoder with
`L` transformer layers and decay `d`, the corrected formula
(`official_bug=False`, `run_finetuning.py --noofficial_layerwise_lr_bug`) is

=====================================  =======================
variables                              corrected multiplier
=====================================  =======================
task head                              1 = d^0
transformer layer i (0-based)          d^(L - i)
embeddings (+ embedding projection)    d^(L + 1)
=====================================  =======================

so each step down the stack multiplies by `d` exactly once (the head counts as
one layer on top of the encoder).

`official_bug=True`, the default (`ElectraConfig.finetune_official_layerwise_lr_bug`),
reproduces google-research/electra `model/optimization.py` `_get_layer_lrs`,
which assigns depths embeddings=0, layer i=i+1, task_specific=L+2 and uses
`d^(L + 2 - depth)`:

=====================================  =======================
variables                              official multiplier
=====================================  =======================
task head                              1
transformer layer i (0-based)          d^(L + 1 - i)
embeddings (+ embedding projection)    d^(L + 2)
=====================================  =======================

Depth L+1 is unused (it was a pooler layer before next-sentence prediction
was removed; see google-research/electra issues #51 and #64), so every
encoder variable gets one extra factor of `d`: the top layer trains at
`d^2` instead of `d` times the head's rate. The paper's learning rates and
decays were tuned, and its results produced, with this behaviour, which is
why it is the default.

Example:

>>> from electra_tf.config import get_config
>>> from electra_tf.model.encoder import ElectraEncoder
>>> encoder = ElectraEncoder.from_config_object(get_config("tiny"))
>>> encoder.build()
>>> m = layerwise_lr_multipliers(encoder, [], decay=0.5, official_bug=False)
>>> m["discriminator/transformer_layer_1/self_attention_layer/query/kernel"]
0.5
>>> m["discriminator/embeddings/token_embedding/embeddings"]
0.125
>>> layer_depth_exponents(2)  # official: one extra factor of d everywhere below the head
{'embeddings': 4, 'layer_0': 3, 'layer_1': 2, 'head': 0}
"""

from __future__ import annotations

from typing import Iterable


def layer_depth_exponents(num_layers: int, official_bug: bool = True) -> dict[str, int]:
    """The exponent of `decay` for each group of an encoder with `num_layers` layers."""
    extra = 1 if official_bug else 0
    exponents = {"embeddings": num_layers + 1 + extra}
    for i in range(num_layers):
        exponents[f"layer_{i}"] = num_layers - i + extra
    exponents["head"] = 0
    return exponents


def _encoder_groups(encoder) -> dict[str, list]:
    """Variables of `encoder` (an `ElectraEncoder`) by group name."""
    groups = {"embeddings": list(encoder.embeddings.weights)}
    if getattr(encoder, "embeddings_projection", None) is not None:
        groups["embeddings"] += list(encoder.embeddings_projection.weights)
    for i, layer in enumerate(encoder.transformer_layers):
        groups[f"layer_{i}"] = list(layer.weights)
    return groups


def layerwise_lr_multipliers(encoder, head_variables: Iterable, decay: float,
                             official_bug: bool = True) -> dict[str, float]:
    """`{variable.path: multiplier}` for every encoder and head variable.

    Args:
      encoder: a built `ElectraEncoder` (needs `.embeddings`,
        `.embeddings_projection` and `.transformer_layers`).
      head_variables: the task head's variables (multiplier 1).
      decay: the per-layer decay `d`; `d <= 0` or `d == 1` disables decay
        (every multiplier is 1), like the official code's `layerwise_lr_decay`.
      official_bug: reproduce the official off-by-one (see module docstring);
        the default, as the paper's hyper-parameters were tuned with it.

    Raises:
      ValueError: if an encoder variable belongs to no known group, or two
        variables share a path (the optimizer keys multipliers by path).
    """
    groups = _encoder_groups(encoder)
    exponents = layer_depth_exponents(len(encoder.transformer_layers), official_bug)
    use_decay = decay > 0 and decay != 1
    multipliers: dict[str, float] = {}

    def add(variable, exponent):
        path = variable.path
        if path in multipliers:
            raise ValueError(f"two variables share the path {path!r}; layer-wise rates need unique paths")
        multipliers[path] = float(decay) ** exponent if use_decay else 1.0

    for group, variables in groups.items():
        for variable in variables:
            add(variable, exponents[group])
    grouped = set(multipliers)
    unknown = [v.path for v in encoder.weights if v.path not in grouped]
    if unknown:
        raise ValueError(f"encoder variables outside embeddings/transformer layers: {unknown}")
    for variable in head_variables:
        add(variable, exponents["head"])
    return multipliers
