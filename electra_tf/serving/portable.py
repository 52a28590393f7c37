"""The model a serving SavedModel holds: the trained weights in a copy of the model built to run wherever
TensorFlow runs, computing inference in few ops.

Training chooses its kernels for its devices (`ExecutionOptions.resolve`: XLA-compiled element-wise kernels on
CPUs) and its precision for the run (`--mixed_precision`). A SavedModel traced from that model would carry both:
functions marked `_XlaMustCompile`, which TF Serving does not compile on CPU unless an experimental flag is set
and fails on in its GPU build (tensorflow/serving#2214). So every export traces `serving_copy(model)` instead: the
same encoder and head rebuilt with `ExecutionOptions.portable()` (TensorFlow's standard ops, no XLA) in float32,
holding the trained weights, served by `serving_model` with those weights in one variable (`serving.compact`).
Its encoder is `serving.forward.ServingEncoder`: the same layers and weights, its inference forward in a few
standard ops per layer (a served request is short, so op count is much of its time).

Example:

>>> from electra_tf.config import get_config
>>> from electra_tf.finetuning.heads import ClassificationHead
>>> from electra_tf.finetuning.model import FinetuningModel
>>> from electra_tf.model.encoder import ElectraEncoder
>>> from electra_tf.options import ExecutionOptions
>>> config = get_config("tiny", vocab_size=50, num_layers=1)
>>> xla = ExecutionOptions(kernels="xla_cpu").resolve({"CPU"})
>>> model = FinetuningModel(ElectraEncoder.from_config_object(config, execution=xla), ClassificationHead(2))
>>> copy = serving_copy(model.build_all(8), seq_length=8)
>>> copy.encoder.execution.kernels, copy.compute_dtype
('reference', 'float32')
"""

from __future__ import annotations

from electra_tf.finetuning.model import FinetuningModel
from electra_tf.options import ExecutionOptions
from electra_tf.serving.compact import FlatWeights
from electra_tf.serving.forward import FEW_TOKENS, ServingEncoder

SERVING_DTYPE = "float32"  # what every device computes; bf16 and fp16 are training choices


def serving_model(model: FinetuningModel, seq_length: int, few_tokens: int = FEW_TOKENS) -> FlatWeights:
    """What every export serves: `serving_copy(model, seq_length, few_tokens)` with its weights in one variable
    (`serving.compact.FlatWeights`); call it as the model, `served(features, training=False)`."""
    copy = serving_copy(model, seq_length, few_tokens)
    return FlatWeights(copy, packs=[copy.encoder.weight_pack()])


def serving_copy(model: FinetuningModel, seq_length: int, few_tokens: int = FEW_TOKENS) -> FinetuningModel:
    """`model` (a built `FinetuningModel`) rebuilt with the portable execution options in float32 and the serving
    encoder's forward (`few_tokens`: see `ServingEncoder`), its weights copied in; built for `seq_length` tokens
    (any length runs afterwards)."""
    encoder = ServingEncoder(**{**model.encoder.get_config(), "dtype": SERVING_DTYPE},
                             execution=ExecutionOptions.portable(), few_tokens=few_tokens)
    head = type(model.head).from_config({**model.head.get_config(), "dtype": SERVING_DTYPE})
    copy = FinetuningModel(encoder, head, clip_norm=model.clip_norm, loss_reduction=model.loss_reduction,
                           name=model.name, dtype=SERVING_DTYPE)
    copy.build_all(seq_length)
    copy_weights(model, copy)
    return copy


def copy_weights(source, target) -> None:
    """Assigns `target`'s variables the values of `source`'s, pair by pair in their order: both models are built
    by the same classes, which track their variables in one order whatever kernels compute them (a variable's
    path is no key: it depends on where the layer was first built). ValueError where the pairs disagree."""
    pairs = list(zip(source.weights, target.weights))
    mismatched = [f"{a.path} {tuple(a.shape)} vs {b.path} {tuple(b.shape)}" for a, b in pairs
                  if (a.name, tuple(a.shape)) != (b.name, tuple(b.shape))]
    if mismatched or len(source.weights) != len(target.weights):
        raise ValueError(f"cannot export {source.name}: its {len(source.weights)} weights do not match the serving "
                         f"model's {len(target.weights)} ({'; '.join(mismatched[:3]) or 'counts differ'})")
    for a, b in pairs:
        b.assign(a.numpy())
