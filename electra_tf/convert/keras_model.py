"""Our Keras `ElectraPretrainer` seen through canonical names: build, read and assign weights.

The only module that knows where each canonical tensor lives in the Keras
model (attention kernels are `[in, heads, head_dim]` there, canonical ones
`[in, out]`: a reshape, never a transpose).

Example:

>>> from electra_tf.config import get_config
>>> from electra_tf.convert import keras_model
>>> config = get_config("tiny", {"discriminator.num_layers": 1, "generator.num_layers": 1},
...                     vocab_size=40, max_seq_length=16)
>>> pretrainer = keras_model.build_pretrainer(config)
>>> weights = keras_model.read_weights(pretrainer)
>>> weights["discriminator/layer_0/attention/query/kernel"].shape
(128, 128)
>>> keras_model.assign_weights(pretrainer, weights)  # a no-op copy
"""

import keras
import numpy as np
from absl import logging

from electra_tf import objective_registry
from electra_tf.config import ElectraConfig
from electra_tf.convert import names
from electra_tf.convert.errors import ConversionError
from electra_tf.model.networks import pretrainer_from_config
from electra_tf.model.objectives.base import ENCODER_ONLY, WHOLE
from electra_tf.model.pretrainer import ElectraPretrainer


def converts_encoder_only(config: ElectraConfig) -> bool:
    """Whether only the fine-tuning encoder of the config's objective has a standard form (Electric's
    discriminator): the objective says (`Objective.conversion`)."""
    return objective_registry.get(config.objective).conversion == ENCODER_ONLY


def refuse_two_tower_generator(config: ElectraConfig, target: str) -> None:
    """One-line `ConversionError` for a model whose objective converts its encoder alone (Electric's two-tower
    generator) bound for `target`, which holds one generator encoder; the objective words it."""
    if converts_encoder_only(config):
        raise ConversionError(objective_registry.get(config.objective).conversion_refusal(config, target))


def build_pretrainer(config: ElectraConfig, special_token_ids: dict | None = None) -> ElectraPretrainer:
    """An `ElectraPretrainer` with every variable created (without running it): objectives whose conversion
    is `WHOLE` (rtd)."""
    refuse_two_tower_generator(config, "the converters' generator + discriminator model")
    if objective_registry.get(config.objective).conversion != WHOLE:
        raise ValueError(f"conversion needs objective='rtd' (generator + discriminator), got {config.objective!r}")
    pretrainer = pretrainer_from_config(config, special_token_ids=special_token_ids)
    for layer, shape in ((pretrainer.discriminator, None), (pretrainer.generator, None),
                         (pretrainer.discriminator_head, (None, None, config.discriminator.hidden_size)),
                         (pretrainer.generator_head, (None, None, config.generator.hidden_size))):
        if layer is not None and not layer.built:  # no generator under uniform_generator
            layer.build(shape)
    pretrainer.built = True
    return pretrainer


def _dense(prefix, layer):
    return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}


def _layer_norm(prefix, layer):
    return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def embedding_variables(embeddings) -> dict:
    """Canonical `embeddings/*` of an `ElectraEmbeddings` (or a keras-hub ElectraBackbone: same names)."""
    return {
        "embeddings/word": embeddings.token_embedding.embeddings,
        "embeddings/position": embeddings.position_embedding.position_embeddings,
        "embeddings/segment": embeddings.segment_embedding.embeddings,
        **_layer_norm("embeddings/layer_norm", embeddings.embeddings_layer_norm),
    }


def encoder_variables(encoder, role: str) -> dict:
    """Canonical `role/*` variables of an encoder's projection and transformer layers."""
    variables = {}
    if getattr(encoder, "embeddings_projection", None) is not None:
        variables.update(_dense(f"{role}/projection", encoder.embeddings_projection))
    for i, layer in enumerate(encoder.transformer_layers):
        prefix, attention = f"{role}/layer_{i}", layer._self_attention_layer
        for name, dense in (("query", attention._query_dense), ("key", attention._key_dense),
                            ("value", attention._value_dense), ("output", attention._output_dense)):
            variables.update(_dense(f"{prefix}/attention/{name}", dense))
        variables.update(_layer_norm(f"{prefix}/attention/layer_norm", layer._self_attention_layer_norm))
        variables.update(_dense(f"{prefix}/ffn/intermediate", layer._feedforward_intermediate_dense))
        variables.update(_dense(f"{prefix}/ffn/output", layer._feedforward_output_dense))
        variables.update(_layer_norm(f"{prefix}/ffn/layer_norm", layer._feedforward_layer_norm))
    return variables


def canonical_parts(config: ElectraConfig) -> tuple:
    """The parts of a pretrainer of `config` that canonical (Hugging Face / official) names hold."""
    if config.uniform_generator or config.untied_generator_embeddings:
        return ("discriminator", "discriminator_head")
    return names.PARTS


def check_canonical(config: ElectraConfig, parts) -> None:
    """Refuses generator parts that canonical names cannot hold, naming the option."""
    generator_parts = [part for part in parts if part not in canonical_parts(config)]
    if generator_parts and config.uniform_generator:
        raise ConversionError(f"uniform_generator=True: this model has no generator, so it has no "
                              f"{' or '.join(generator_parts)} to read or write")
    if generator_parts:
        raise ConversionError("untied_generator_embeddings=True: the generator's own embeddings have no "
                              "Hugging Face / official counterpart here (canonical names share one "
                              "embeddings block); keep this model in our export format")


def pretrainer_variables(pretrainer, parts=names.PARTS) -> dict:
    """`{canonical key: keras.Variable}` of `parts` of an `ElectraPretrainer`.

    Under `untied_generator=False` the generator's keys name the discriminator's own variables.
    """
    check_canonical(pretrainer.config, parts)
    variables = {}
    if "discriminator" in parts:
        variables.update(embedding_variables(pretrainer.discriminator.embeddings))
        variables.update(encoder_variables(pretrainer.discriminator, "discriminator"))
    if "discriminator_head" in parts:
        head = pretrainer.discriminator_head
        variables.update({**_dense("discriminator_head/dense", head.dense),
                          **_dense("discriminator_head/logits", head.logits)})
    if "generator" in parts:
        variables.update(encoder_variables(pretrainer.generator, "generator"))
    if "generator_head" in parts:
        head = pretrainer.generator_head
        variables.update({**_dense("generator_head/dense", head.dense),
                          **_layer_norm("generator_head/layer_norm", head.layer_norm),
                          "generator_head/output_bias": head.output_bias})
    return variables


def read_weights(pretrainer, parts=names.PARTS) -> dict:
    """`{canonical key: float32 array in canonical layout}`."""
    out = {}
    for key, variable in pretrainer_variables(pretrainer, parts).items():
        value = keras.ops.convert_to_numpy(variable).astype(np.float32)
        out[key] = value.reshape(names.expected_shapes(pretrainer.config, parts)[key])
    return out


def assign_variables(variables: dict, tensors: dict) -> None:
    """Copies canonical `tensors` into `variables` (same keys), reshaping to each variable's shape."""
    missing = sorted(set(variables) - set(tensors))
    if missing:
        raise ValueError(f"no value for {len(missing)} variable(s): {missing[:10]}")
    for key, variable in variables.items():
        value = np.asarray(tensors[key])
        if value.size != int(np.prod(variable.shape)):
            raise ValueError(f"{key}: {value.shape} does not fit variable {variable.path} {tuple(variable.shape)}")
        variable.assign(value.reshape(tuple(variable.shape)).astype(variable.dtype))


def assign_weights(pretrainer, tensors: dict, parts=names.PARTS) -> None:
    """Copies canonical `tensors` of `parts` into `pretrainer`."""
    if not pretrainer.config.untied_generator and "generator" in parts:
        raise ConversionError("untied_generator=False: the generator is the discriminator's encoder, so a "
                              "checkpoint's separate generator encoder cannot be loaded into it")
    assign_variables(pretrainer_variables(pretrainer, parts), tensors)


def pretrainer_from_source(source, config: ElectraConfig, special_token_ids: dict) -> ElectraPretrainer:
    """A pretrainer holding the parts present in `source` (a checked `SourceTensors`); others stay random."""
    pretrainer = build_pretrainer(config, special_token_ids)
    parts = source.present_parts()
    assign_weights(pretrainer, source.arrays(names.expected_shapes(config, parts)), parts)
    absent = [part for part in names.PARTS if part not in parts]
    if absent:
        logging.warning("%s holds no %s: left randomly initialised", source.path, ", ".join(absent))
    return pretrainer
