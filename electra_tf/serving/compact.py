"""The weights of a serving export in ONE variable, so that it loads fast.

`tf.saved_model.load` of an export with a variable per weight (ELECTRA-Small's classifier: 201) spends much of its
time on them: it revives each variable as a Python object, restores each from the checkpoint, and imports the save
and restore functions TensorFlow writes for every variable (1,229 of the SavedModel's 3,712 function nodes), all in
Python. `FlatWeights` stores the model's weights in one `[rows, 16]` float32 variable, each weight in whole rows
(its size padded to a multiple of 16 floats, 64 bytes), and calls the model on them
(`keras.Model.stateless_call`): the signature splits the variable along rows (`SplitV` on the first dimension)
and reshapes each part, which copies nothing but a padded part. What it saves at load, and that a request costs
no more, is in `bench/results/inference-batch1-breakdown.json`.

The model's non-trainable variables (the dropout layers' int64 seed-generator states, unused at inference) are
passed as constants. TF Serving's TF1 session loader restores the one variable like any other
(`tests/test_serving_speed.py`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

ROW = 16  # floats per row of the weight variable: 64 bytes, Eigen's largest alignment


class FlatWeights(tf.Module):
    """`model` (a built Keras model of float32 weights) called on its weights read from one variable:
    `flat(features, training=False)` computes `model(features, training=False)`."""

    def __init__(self, model):
        super().__init__()
        if any(v.dtype != "float32" for v in model.trainable_variables):
            raise ValueError(f"{model.name}: FlatWeights holds float32 weights only")
        self._model = model
        self.head = getattr(model, "head", None)  # what a server reads of the model's configuration (SQuAD's beam)
        arrays = [np.asarray(v.numpy(), np.float32).reshape(-1) for v in model.trainable_variables]
        self._shapes = [tuple(v.shape) for v in model.trainable_variables]
        self._rows = [-(-a.size // ROW) for a in arrays]
        padded = [np.pad(a, (0, rows * ROW - a.size)) for a, rows in zip(arrays, self._rows)]
        self.weights = tf.Variable(np.concatenate(padded).reshape(-1, ROW), trainable=False, name="weights")
        self._others = [tf.constant(v.numpy()) for v in model.non_trainable_variables]

    def values(self):
        """The model's trainable weights, in `model.trainable_variables`' order, as tensors read from the variable."""
        values = []
        for part, shape in zip(tf.split(self.weights, self._rows, axis=0), self._shapes):
            size = int(np.prod(shape))
            if size % ROW:  # the padding of its last row: a copy, of a small weight (a head's bias)
                part = tf.reshape(part, [-1])[:size]
            values.append(tf.reshape(part, shape))
        return values

    def __call__(self, features, training=False):
        if training:
            raise ValueError("FlatWeights serves inference only (training=False)")
        outputs, _ = self._model.stateless_call(self.values(), self._others, features, training=False)
        return outputs
