"""A serving export that loads and answers its first request fast: its weights in ONE variable, its signature's graph
pruned at export.

`tf.saved_model.load` of an export with a variable per weight (ELECTRA-Small's classifier: 201) spends much of its
time on them: it revives each variable as a Python object, restores each from the checkpoint, and imports the save
and restore functions TensorFlow writes for every variable (1,229 of the SavedModel's 3,712 function nodes), all in
Python. `FlatWeights` stores the model's weights in one `[rows, 16]` float32 variable, each weight in whole rows
(its size padded to a multiple of 16 floats, 64 bytes), and calls the model on them
(`keras.Model.stateless_call`): the signature splits the variable along rows (`SplitV` on the first dimension)
and reshapes each part, which copies nothing but a padded part. What it saves at load, and that a request costs
no more, is in `bench/results/inference-batch1-breakdown.json`. An encoder's layers' weights are a `Pack`: each
layer's in the layout its forward reads (`serving.forward.LayerLayout`: kernels in blocks, query, key and value
side by side), the layers side by side, so that the serving encoder's layer loop reads them as one
`[layers, rows, 16]` tensor (`stacked_weights`) and a layer's parts as one split of its rows, also without a copy.

The model's non-trainable variables (the dropout layers' int64 seed-generator states, unused at inference) are
passed as constants. TF Serving's TF1 session loader restores the one variable like any other
(`tests/test_serving_speed.py`).

`pruned_endpoint`: the first request after a load instantiates the signature's function and runs grappler over it
(most of that request; its passes cost about in proportion to the nodes), and the load imports every node into a
Python graph. The traced graph repeats much (shape arithmetic, constants, identities, the ragged ops' assertions in
`If` branches): grappler's passes that remove, fold, inline or simplify (`PRUNING_PASSES`; no fusion, layout or
device-specific rewrite, so the result holds standard ops only) run once at export, and the export holds their
result instead of the traced graph (ELECTRA-Small's classifier: 1,291 nodes instead of 2,470). `If` and `While` stay
functional there (TensorFlow lowers them at load). The assertions' `If`s (the ragged ops' validations, 12 in a
classifier export, two branch functions each) are left out before the passes run (`without_assertion_guards`):
`debug_stripper` makes their `Assert`s no-ops anyway, and a loader would still import and instantiate each branch.

Grappler would run those passes again on the first request, over a graph they no longer change: a SavedModel
carries no session options, and the loader's (TF Serving's, or `tf.saved_model.load`'s process) turn grappler on.
So the signature's function holds one call into the pruned graph (`PRUNED_FUNCTION`, a function marked `_noinline`,
which neither grappler nor TensorFlow's function inlining inlines) whose call node carries its own session options,
`GRAPPLER_OFF`: the `PartitionedCall` kernel optimizes the function it instantiates with its node's `config_proto`,
not the session's, and the loader's grappler optimizes the signature's few nodes only. It still reads the functions
they reach (its function optimizer builds the pruned graph's body to find it may not inline it; its MLIR pass imports
every reachable function): 29–55 ms of the first request, which a serving process can skip by turning grappler off
for itself (`bench/results/inference-first-request-loader-grappler-*.json`, docs/finetuning.md). What grappler no
longer does at load is fuse (its remapper's `MatMul` + `BiasAdd` + activation into oneDNN's fused matmul). Measured on
ELECTRA-Small's classifier (`bench/results/inference-first-request-call-options.json`,
`bench/results/inference-batch1-call-options.json`, a shared 2-core machine): the first request 0.84 → 0.47 s,
batch 1 18.2 → 16.4 ms, batch 32 about 5 % more CPU per sentence (the four-system runs of
`bench/results/inference-sst2-small.json` do not resolve it). TF Serving's TF1
session loader optimizes the library's functions with its own options at load, and serves the call
(`tests/test_serving_speed.py`).

Grappler has no public Python API, nor the call options of a traced call: this one function uses TensorFlow's
private modules (`tensorflow.python.grappler.tf_optimizer`, `tensorflow.python.eager.context`); where a TensorFlow
release moves them, the export falls back to the traced graph with a warning, and
`tests/test_serving_speed.py::test_exports_hold_the_pruned_graph` fails.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

ROW = 16  # floats per row of the weight variable: 64 bytes, Eigen's largest alignment
# Grappler passes that remove, fold, inline or simplify nodes into standard ops (none that fuses, changes layouts or
# picks device kernels); the loader's grappler runs its full default set, these included, over the rest.
PRUNING_PASSES = ("pruning", "constfold", "common_subgraph_elimination", "dependency", "arithmetic", "shape", "loop",
                  "function", "debug_stripper")


class Pack(NamedTuple):
    """Members of one layout (an encoder's layers) stored side by side: `stacked_weights(pack)` is one
    `[len(members), rows, ROW]` tensor of them, row block i member i.

    `members`: each member's variables (a tuple). `layout` owns what a member's rows hold: `layout.arrange(values)`
    gives a member's parts (tensors) from its variables' values, `layout.shapes` their shapes (every member's the
    same), `layout.restore(parts)` the variables' values back from the parts. Each part lies in whole rows (its size
    padded to a multiple of `ROW` floats), so that `parts_of(pack, rows)` reads a member's parts with one split
    along rows and a reshape each, which copy nothing but a padded part."""
    members: tuple
    layout: Any

    @property
    def key(self) -> tuple:
        return tuple(id(v) for member in self.members for v in member)

    @property
    def part_rows(self) -> list:
        return [rows_for(shape) for shape in self.layout.shapes]


def rows_for(shape) -> int:
    """The whole rows of `ROW` floats a weight of `shape` takes."""
    return -(-int(np.prod(shape)) // ROW)


def to_rows(value):
    """`value` as whole rows `[rows_for(shape), ROW]`: flattened, its last row padded with zeros (`from_rows`'
    inverse)."""
    flat = tf.reshape(value, [-1])
    return tf.reshape(tf.pad(flat, [[0, rows_for(value.shape) * ROW - flat.shape[0]]]), [-1, ROW])


def from_rows(rows, shape):
    """A weight of `shape` from its whole rows: a reshape, which copies nothing but a padded weight (its last row's
    padding cut off)."""
    size = int(np.prod(shape))
    if size % ROW:
        rows = tf.reshape(rows, [-1])[:size]
    return tf.reshape(rows, shape)


def arranged_rows(pack: Pack, values):
    """A member's rows: its variables' `values` arranged (`pack.layout.arrange`), each part in whole rows."""
    return tf.concat([to_rows(part) for part in pack.layout.arrange(values)], axis=0)


def parts_of(pack: Pack, rows) -> list:
    """A member's parts (`pack.layout.shapes`) from its rows `[sum(pack.part_rows), ROW]`."""
    return [from_rows(part, shape) for part, shape in zip(tf.split(rows, pack.part_rows, axis=0), pack.layout.shapes)]


class FlatWeights(tf.Module):
    """`model` (a built Keras model of float32 weights) called on its weights read from one variable:
    `flat(features, training=False)` computes `model(features, training=False)`.

    `packs`: `Pack`s of the model's weights to store in their layouts; while the model runs, `stacked_weights(pack)`
    is that pack as one tensor read from the variable, which copies nothing."""

    def __init__(self, model, packs=()):
        super().__init__()
        if any(v.dtype != "float32" for v in model.trainable_variables):
            raise ValueError(f"{model.name}: FlatWeights holds float32 weights only")
        self._model = model
        self.head = getattr(model, "head", None)  # what a server reads of the model's configuration (SQuAD's beam)
        variables = list(model.trainable_variables)
        position = {id(v): i for i, v in enumerate(variables)}
        # {a pack's key (`stacked_weights`'): (the pack, each member's variables' positions in `variables`)}
        self._packs = {pack.key: (pack, [[position[id(v)] for v in member] for member in pack.members])
                       for pack in packs}
        packed = {i for _, members in self._packs.values() for member in members for i in member}
        self._singles = [i for i in range(len(variables)) if i not in packed]
        self._shapes = [tuple(v.shape) for v in variables]
        self._rows = [rows_for(shape) for shape in self._shapes]
        # Storage order: the weights no pack holds, then each pack's members' rows in order.
        singles = [to_rows(variables[i]) for i in self._singles]
        members = [arranged_rows(pack, member) for pack, _ in self._packs.values() for member in pack.members]
        self.weights = tf.Variable(tf.concat(singles + members, axis=0), trainable=False, name="weights")
        self._others = [tf.constant(v.numpy()) for v in model.non_trainable_variables]

    def values(self):
        """The model's trainable weights, in `model.trainable_variables`' order, as tensors read from the variable."""
        return self.read()[0]

    def read(self):
        """The model's trainable weights read from the variable: (each, in `model.trainable_variables`' order;
        {a pack's key: the pack as one tensor})."""
        sizes = [self._rows[i] for i in self._singles] + [len(members) * sum(pack.part_rows)
                                                           for pack, members in self._packs.values()]
        parts = tf.split(self.weights, sizes, axis=0)
        values = [None] * len(self._shapes)
        for i, part in zip(self._singles, parts):
            values[i] = from_rows(part, self._shapes[i])  # padded: a small weight (a head's bias)
        stacks = {}
        for (key, (pack, members)), part in zip(self._packs.items(), parts[len(self._singles):]):
            stacks[key] = tf.reshape(part, [len(members), sum(pack.part_rows), ROW])
            for m, member in enumerate(members):  # (unused by the serving encoder: pruned)
                for i, value in zip(member, pack.layout.restore(parts_of(pack, stacks[key][m]))):
                    values[i] = value
        return values, stacks

    def __call__(self, features, training=False):
        if training:
            raise ValueError("FlatWeights serves inference only (training=False)")
        values, stacks = self.read()
        previous = _STACKS.current
        _STACKS.current = stacks
        try:
            outputs, _ = self._model.stateless_call(values, self._others, features, training=False)
        finally:
            _STACKS.current = previous
        return outputs


class _Stacks(threading.local):
    current = None  # while a `FlatWeights` model runs: {a pack's key: its stored tensor}


_STACKS = _Stacks()


def stacked_weights(pack: Pack):
    """`pack` as one `[len(members), rows, ROW]` tensor: the one a running `FlatWeights` holds (no copy), else its
    members' variables arranged and stacked."""
    stored = (_STACKS.current or {}).get(pack.key)
    if stored is not None:
        return stored
    return tf.stack([arranged_rows(pack, [tf.convert_to_tensor(v) for v in member]) for member in pack.members])


# The session options the call into the pruned graph carries: grappler's meta-optimizer off (its passes ran at
# export); soft placement, as TensorFlow's own function calls ask. Invariant: no matmul of the layer loop is fused,
# so `TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1` (a fused matmul keeps its first call's weights) cannot give every layer the
# first one's (`tests/test_serving_onednn.py`).
GRAPPLER_OFF = config_pb2.ConfigProto(
    allow_soft_placement=True,
    graph_options=config_pb2.GraphOptions(rewrite_options=rewriter_config_pb2.RewriterConfig(
        disable_meta_optimizer=True)))
PRUNED_FUNCTION = "pruned_graph"  # the name (prefix) of the function holding the pruned graph


def pruned_endpoint(function, input_signature):
    """`function` traced on `input_signature` (named `TensorSpec`s), its graph pruned by `PRUNING_PASSES`, as a
    Python function over the same inputs that calls the pruned graph with `GRAPPLER_OFF`; and the variables it reads
    (an `ExportArchive` must track them). `function` itself where TensorFlow's private grappler or call-options
    modules are not there (a warning says so).

    A Python function, not a `tf.function`: `ExportArchive.add_endpoint(name, fn, input_signature)` wraps `fn` in a
    `tf.function` of its own, and a `tf.function` there would be a second call level, a copy of the first, that a
    loader turns into a graph at load and runs through on every request."""
    traced = tf.function(function).get_concrete_function(*input_signature)
    variables = list(traced.graph.variables)
    try:
        from tensorflow.python.eager import context
        from tensorflow.python.grappler import tf_optimizer

        graph_def = _pruned_graph_def(traced, tf_optimizer.OptimizeGraph)
        call_options = context.FunctionCallOptions(config_proto=GRAPPLER_OFF)
        current_context = context.context
    except (ImportError, AttributeError, TypeError) as e:
        logging.warning("serving export: the signature's graph is not pruned (TensorFlow's grappler or call-options "
                        "API moved: %s); it loads and answers its first request slower, and computes the same", e)
        return function, variables
    pruned = _graph_function(graph_def, traced)

    def endpoint(*args):
        # A traced call node takes the calling thread's function-call options as its `config_proto`.
        eager_context = current_context()
        saved = eager_context.function_call_options
        eager_context.function_call_options = call_options
        try:
            return pruned(*args)
        finally:
            eager_context.function_call_options = saved

    return endpoint, variables


def _graph_function(graph_def, traced):
    """A `tf.function` marked `_noinline` whose graph is `graph_def` (`traced`'s graph pruned) imported: `traced`'s
    inputs in, its outputs (a dict) out, its captured tensors (the weights' variable) captured again."""
    num_inputs = len(traced.inputs) - len(traced.captured_inputs)
    inputs = [t.name for t in traced.inputs[:num_inputs]]
    captures = {internal.name: external
                for external, internal in zip(traced.captured_inputs, traced.graph.internal_captures)}
    names = list(traced.structured_outputs)
    outputs = [traced.structured_outputs[name].name for name in names]

    def pruned_graph(*args):
        input_map = dict(zip(inputs, args))
        input_map.update({name: tf.identity(external) for name, external in captures.items()})
        return dict(zip(names, tf.graph_util.import_graph_def(graph_def, input_map, outputs, name="")))

    pruned_graph.__name__ = PRUNED_FUNCTION
    return tf.function(pruned_graph, experimental_attributes={"_noinline": True})


def _pruned_graph_def(traced, optimize_graph):
    """The traced graph after `PRUNING_PASSES` (`optimize_graph`: grappler's `tf_optimizer.OptimizeGraph`),
    keeping its inputs and outputs."""
    from tensorflow.core.protobuf import meta_graph_pb2

    graph_def = without_assertion_guards(traced.graph.as_graph_def())
    meta_graph = tf.compat.v1.train.export_meta_graph(graph_def=graph_def, graph=traced.graph)
    fetch = meta_graph_pb2.CollectionDef()
    fetch.node_list.value.extend(t.name for t in traced.inputs + traced.outputs)
    meta_graph.collection_def["train_op"].CopyFrom(fetch)  # what grappler must keep
    config = config_pb2.ConfigProto()
    config.graph_options.rewrite_options.min_graph_nodes = -1
    config.graph_options.rewrite_options.optimizers.extend(PRUNING_PASSES)
    # Keeps `If` and `While` functional: grappler's function pass lowers them to Switch/Merge frames unless the
    # executor is this one (`MetaOptimizer::LowerControlFlow`), and TensorFlow's own lowering at load, which runs
    # on the call with grappler off, cannot lower an `If` left inside such a frame (SQuAD's windows loop).
    config.experimental.executor_type = "SINGLE_THREADED_EXECUTOR"
    graph_def = optimize_graph(config, meta_graph)
    _rename_functions(graph_def, suffix="_pruned")
    return graph_def


# What an assertion's `If` (`tf.debugging.assert_*` in a traced graph: "…/Assert/AssertGuard") runs in its branches.
ASSERTION_BRANCH_OPS = frozenset({"Assert", "Const", "NoOp", "Identity"})  # Const: its message


def without_assertion_guards(graph_def):
    """`graph_def` without its assertions' `If`s (whose branches run an `Assert` or nothing), the `Identity`s of
    their outputs and the control edges from them; their branch functions left out of the library.

    `PRUNING_PASSES`' `debug_stripper` makes every `Assert` a `NoOp` anyway, but leaves its guard: an `If` (the
    ragged ops' validations: 12 in a classifier export) that a loader imports and instantiates with two branch
    functions each, and that then selects between two no-ops. Unchanged where a guard's output feeds data."""
    from tensorflow.core.framework import graph_pb2

    functions = {f.signature.name: f for f in graph_def.library.function}

    def runs_assertion_only(node):
        if node.op not in ("If", "StatelessIf"):
            return False  # (reading a missing attr of a NodeDef would add it)
        branches = [node.attr[key].func.name for key in ("then_branch", "else_branch")]
        return all(name in functions and {n.op for n in functions[name].node_def} <= ASSERTION_BRANCH_OPS
                   for name in branches)

    removed = {node.name for node in graph_def.node if runs_assertion_only(node)}
    for node in graph_def.node:  # the graph is in topological order: an Identity follows its input
        if node.op == "Identity" and node.input and node.input[0].split(":")[0] in removed:
            removed.add(node.name)
    if not removed or any(not i.startswith("^") and i.split(":")[0] in removed and node.name not in removed
                          for node in graph_def.node for i in node.input):
        return graph_def
    pruned = graph_pb2.GraphDef(versions=graph_def.versions)
    for node in graph_def.node:
        if node.name not in removed:
            kept = pruned.node.add()
            kept.CopyFrom(node)
            del kept.input[:]
            kept.input.extend(i for i in node.input if not (i.startswith("^") and i[1:] in removed))
    used = functions_called(pruned.node, functions)
    pruned.library.function.extend(f for f in graph_def.library.function if f.signature.name in used)
    pruned.library.gradient.extend(g for g in graph_def.library.gradient if g.function_name in used)
    return pruned


def _function_refs(node):
    """The function references in `node`'s attributes (`NameAttrList`s: a `func` attribute's, a `list`'s items)."""
    for attr in node.attr.values():
        if attr.HasField("func"):
            yield attr.func
        yield from attr.list.func


def functions_called(nodes, functions) -> set:
    """The names of the library functions `nodes` call, directly or through other functions (`functions`: the
    library's `FunctionDef`s by name)."""
    called, pending = set(), list(nodes)
    while pending:
        for ref in _function_refs(pending.pop()):
            if ref.name in functions and ref.name not in called:
                called.add(ref.name)
                pending.extend(functions[ref.name].node_def)
    return called


def _rename_functions(graph_def, suffix: str) -> None:
    """Renames the library's functions (grappler rewrote their bodies under the names the traced graph's functions,
    already registered in this process, hold) and every reference to them."""
    names = {f.signature.name: f.signature.name + suffix for f in graph_def.library.function}

    def rename(nodes):
        for node in nodes:
            for ref in _function_refs(node):
                ref.name = names.get(ref.name, ref.name)

    rename(graph_def.node)
    for function in graph_def.library.function:
        function.signature.name = names[function.signature.name]
        rename(function.node_def)
