"""The one step protocol (`model.step.StepModel`): the pre-trainer of every objective and the fine-tuning model
implement it, and what their `step_context` hands over is what their `compute_losses` takes."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import objective_registry
from electra_tf.config import get_config
from electra_tf.finetuning.heads import ClassificationHead
from electra_tf.finetuning.model import FinetuningModel
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.model.networks import pretrainer_from_config
from electra_tf.model.step import StepModel

SPECIAL = {"pad": 0, "cls": 2, "sep": 3, "mask": 4}


def tiny(**overrides):
    return get_config("tiny", {"discriminator.num_layers": 1, "generator.num_layers": 1}, vocab_size=40,
                      max_seq_length=8, **overrides)


def batch():
    ids = np.random.RandomState(0).randint(5, 40, size=(2, 8)).astype("int32")
    return {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids),
            "label_ids": np.array([0, 1], "int32")}


def models():
    yield from ((name, pretrainer_from_config(tiny(objective=name), SPECIAL))
                for name in objective_registry.names() if name in ("rtd", "mlm", "replace_mlm", "electric"))
    yield "finetuning", FinetuningModel(ElectraEncoder.from_config_object(tiny()), ClassificationHead(2))


@pytest.mark.parametrize("name,model", list(models()), ids=lambda value: value if isinstance(value, str) else "")
def test_the_pretrainer_and_the_finetuning_model_are_step_models_whose_context_fits_their_losses(name, model):
    assert isinstance(model, StepModel), name
    context = model.step_context(batch())
    accepted = inspect.signature(model.compute_losses).parameters
    handed = {**context.get("per_example", {}), **context.get("kwargs", {})}
    assert handed and set(handed) <= set(accepted), (name, sorted(handed), sorted(accepted))
    outputs = model.compute_losses(batch(), training=False, **handed)
    assert outputs["loss"].shape == () and outputs["loss"].dtype == tf.float32 and np.isfinite(outputs["loss"])


def test_a_model_lacking_a_protocol_method_is_not_a_step_model():
    class NoMetrics:
        def compute_losses(self, batch, training=True):
            return {}

        def step_context(self, batch):
            return {}

    assert not isinstance(NoMetrics(), StepModel)
