"""A serving export that loads and answers its first request fast: its weights in ONE variable, its signature's graph
pruned at export.

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

`pruned_endpoint`: the first request after a load instantiates the signature's function and runs grappler over it
(most of that request; its passes cost about in proportion to the nodes), and the load imports every node into a
Python graph. The traced graph repeats much (shape arithmetic, constants, identities, the ragged ops' assertions in
`If` branches): grappler's passes that remove, fold, inline or simplify (`PRUNING_PASSES`; no fusion, layout or
device-specific rewrite, so the result holds standard ops only) run once at export, and the export holds their
result instead of the traced graph (ELECTRA-Small's classifier: 6 functions of 1,481 nodes instead of 32 of 2,470).
The loader's grappler runs these passes too, so what the model computes is what it computed before. Grappler has no
public Python API, so this one function uses TensorFlow's private modules (`tensorflow.python.grappler.tf_optimizer`,
`tensorflow.python.eager.wrap_function`); where a TensorFlow release moves them, the export falls back to the
traced graph with a warning, and `tests/test_serving_speed.py::test_exports_hold_the_pruned_graph` fails.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from absl import logging

ROW = 16  # floats per row of the weight variable: 64 bytes, Eigen's largest alignment
# Grappler passes that remove, fold, inline or simplify nodes into standard ops (none that fuses, changes layouts or
# picks device kernels); the loader's grappler runs its full default set, these included, over the rest.
PRUNING_PASSES = ("pruning", "constfold", "common_subgraph_elimination", "dependency", "arithmetic", "shape", "loop",
                  "function", "debug_stripper")


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


def pruned_endpoint(function, input_signature):
    """`function` traced on `input_signature` (named `TensorSpec`s), its graph pruned by `PRUNING_PASSES`, as a
    `tf.function` over the same inputs; and the variables it reads (an `ExportArchive` must track them). The traced
    function itself where TensorFlow's private grappler or graph-import modules are not there (a warning says so)."""
    traced = tf.function(function).get_concrete_function(*input_signature)
    variables = list(traced.graph.variables)
    try:
        from tensorflow.python.eager import wrap_function
        from tensorflow.python.grappler import tf_optimizer

        graph_def = _pruned_graph_def(traced, tf_optimizer.OptimizeGraph)
        captures = {internal.name.split(":")[0]: external
                    for external, internal in zip(traced.captured_inputs, traced.graph.internal_captures)}
        num_inputs = len(traced.inputs) - len(traced.captured_inputs)
        pruned = wrap_function.function_from_graph_def(
            graph_def, [t.name for t in traced.inputs[:num_inputs]],
            {name: t.name for name, t in traced.structured_outputs.items()}, captures)
    except (ImportError, AttributeError, TypeError) as e:
        logging.warning("serving export: the signature's graph is not pruned (TensorFlow's grappler API moved: %s); "
                        "it loads and answers its first request slower, and computes the same", e)
        return tf.function(function, input_signature=input_signature), variables
    return tf.function(lambda *args: pruned(*args), input_signature=input_signature), variables


def _pruned_graph_def(traced, optimize_graph):
    """The traced graph after `PRUNING_PASSES` (`optimize_graph`: grappler's `tf_optimizer.OptimizeGraph`),
    keeping its inputs and outputs."""
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2

    meta_graph = tf.compat.v1.train.export_meta_graph(graph_def=traced.graph.as_graph_def(), graph=traced.graph)
    fetch = meta_graph_pb2.CollectionDef()
    fetch.node_list.value.extend(t.name for t in traced.inputs + traced.outputs)
    meta_graph.collection_def["train_op"].CopyFrom(fetch)  # what grappler must keep
    config = config_pb2.ConfigProto()
    config.graph_options.rewrite_options.min_graph_nodes = -1
    config.graph_options.rewrite_options.optimizers.extend(PRUNING_PASSES)
    graph_def = optimize_graph(config, meta_graph)
    _rename_functions(graph_def, suffix="_pruned")
    return graph_def


def _rename_functions(graph_def, suffix: str) -> None:
    """Renames the library's functions (grappler rewrote their bodies under the names the traced graph's functions,
    already registered in this process, hold) and every reference to them."""
    names = {f.signature.name: f.signature.name + suffix for f in graph_def.library.function}

    def rename(nodes):
        for node in nodes:
            for attr in node.attr.values():
                if attr.HasField("func") and attr.func.name in names:
                    attr.func.name = names[attr.func.name]
                for f in attr.list.func:
                    f.name = names.get(f.name, f.name)

    rename(graph_def.node)
    for function in graph_def.library.function:
        function.signature.name = names[function.signature.name]
        rename(function.node_def)
