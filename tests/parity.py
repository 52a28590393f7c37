"""Test helper: what a converted model computes, in the terms of a Hugging Face checkpoint's outputs.

`pretrainer_outputs` runs both encoders and heads of an `ElectraPretrainer` on
HF-style inputs and returns the arrays the parity fixtures hold
(`tools/make_parity_fixtures.py`), so a conversion can be checked number by
number; `max_differences` compares two such dicts. Tests import it as `parity`
(tests/ is on the path under pytest); its example runs in tests/test_doctests.py.

Example:

>>> import numpy as np
>>> from electra_tf.config import get_config
>>> from electra_tf.convert import keras_model
>>> import parity
>>> config = get_config("tiny", vocab_size=40, num_layers=1, generator_num_layers=1, max_seq_length=16)
>>> pretrainer = keras_model.build_pretrainer(config)
>>> inputs = {"input_ids": np.array([[2, 7, 4, 3]]), "token_type_ids": np.zeros((1, 4), int),
...           "attention_mask": np.ones((1, 4), int), "masked_positions": np.array([[2]])}
>>> out = parity.pretrainer_outputs(pretrainer, inputs)
>>> out["disc_logits"].shape, out["gen_logits"].shape, out["gen_top1"].shape
((1, 4), (1, 4, 40), (1, 1))
"""

import keras
import numpy as np


def encoder_inputs(inputs: dict) -> dict:
    """Our encoders' input dict from HF-style `input_ids`, `token_type_ids`, `attention_mask`."""
    return {"token_ids": np.asarray(inputs["input_ids"], np.int32),
            "segment_ids": np.asarray(inputs["token_type_ids"], np.int32),
            "padding_mask": np.asarray(inputs["attention_mask"], np.int32)}


def pretrainer_outputs(pretrainer, inputs: dict) -> dict:
    """disc_logits/disc_hidden, gen_logits (all positions)/gen_hidden and gen_top1 at `masked_positions`."""
    feed = encoder_inputs(inputs)
    disc_hidden = pretrainer.discriminator(feed, training=False)
    gen_hidden = pretrainer.generator(feed, training=False)
    out = {
        "disc_hidden": disc_hidden, "disc_logits": pretrainer.discriminator_head(disc_hidden),
        "gen_hidden": gen_hidden, "gen_logits": pretrainer.generator_head(gen_hidden),
    }
    out = {name: keras.ops.convert_to_numpy(value) for name, value in out.items()}
    if "masked_positions" in inputs:
        positions = np.asarray(inputs["masked_positions"])[..., None]
        out["gen_top1"] = np.take_along_axis(out["gen_logits"], positions, axis=1).argmax(-1)
    return out


def max_differences(got: dict, expected: dict) -> dict:
    """`{name: max |got − expected|}` over the float outputs both hold."""
    return {name: float(np.max(np.abs(np.asarray(got[name], np.float64) - expected[name])))
            for name in sorted(set(got) & set(expected)) if np.asarray(expected[name]).dtype.kind == "f"}
