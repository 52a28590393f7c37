"""Serving computes on each request's own length: the model's inputs are padded to the batch's longest row (SQuAD:
window), not to `max_seq_length`, and the outputs stay the trained model's on inputs padded to `max_seq_length`
(≤ 1e-5), batch by batch whatever lengths a batch mixes."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.eager import context

from electra_tf.finetuning.encoding import encode_pairs
from electra_tf.finetuning.heads import MASK_PENALTY
from electra_tf.serving import compact
from electra_tf.serving.compact import ROW, FlatWeights
from electra_tf.serving.forward import ATTENTION_KERNELS
from electra_tf.serving.text import python_whitespace
from test_finetuning_run import TINY, VOCAB
from test_serving_portable import (SEQ, SQUAD_CONTEXTS, SQUAD_QUESTIONS, TAGGING_TEXTS,  # noqa: F401 (fixtures)
                                   assert_same_outputs, classifier, functions, squad, tagger, trained_model,
                                   write_vocab)

# Rows of 3, 10, 2 (an empty text) and more than SEQ tokens (truncated) with [CLS] and [SEP].
TEXTS = ["good movie", "the movie was great . the plot is fine ?", "", " ".join(["bad"] * (SEQ + 8))]
BATCHES = [TEXTS[:1], TEXTS[:3], TEXTS[2:3], TEXTS, TEXTS[::-1]]


def trained_logits(model, tokenizer, texts):
    """What `run_finetuning` predicts: the trained model on inputs padded to max_seq_length."""
    return model(encode_pairs(tokenizer, texts, None, SEQ), training=False)["logits"].numpy()


@pytest.mark.parametrize("texts,length", [(TEXTS[:1], 4), (TEXTS[:3], 12), (TEXTS[2:3], 2), (TEXTS, SEQ)])
def test_the_model_computes_on_the_batch_longest_row(classifier, texts, length):  # noqa: F811
    model, tokenizer, _, server_class = classifier
    server = server_class(model, tokenizer, ["neg", "neutral", "pos"], SEQ)
    features = server.encode(tf.constant(texts))
    assert {name: tuple(value.shape) for name, value in features.items()} == {
        name: (len(texts), length) for name in ("input_ids", "input_mask", "segment_ids")}
    expected = encode_pairs(tokenizer, texts, None, SEQ)
    for name, value in features.items():  # the same rows as the Python path's, cut at the longest
        np.testing.assert_array_equal(value.numpy(), expected[name][:, :length], err_msg=name)


def test_served_logits_equal_the_trained_model_padded_to_max_seq_length(classifier):  # noqa: F811
    model, tokenizer, path, _ = classifier
    served = tf.saved_model.load(path).signatures["serving_default"]
    for texts in BATCHES:
        logits = served(text=tf.constant(texts))["logits"].numpy()
        np.testing.assert_allclose(logits, trained_logits(model, tokenizer, texts), atol=1e-5, rtol=0,
                                   err_msg=repr(texts))


def stored_values(path) -> int:
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    return sum(int(np.prod(shape)) for name, shape in reader.get_variable_to_shape_map().items()
               if name != "_CHECKPOINTABLE_OBJECT_GRAPH")  # the object graph, not a weight


def test_exports_store_each_weight_once_in_one_variable(classifier):  # noqa: F811
    """Loading restores one variable holding every weight once (ExportArchive's `track(model)` stored each twice, and
    a variable per weight costs the loader a Python object, a restore and save/restore function nodes each), each
    weight in whole rows of `compact.ROW` floats (the encoder's layers' in parts of `forward.LayerLayout`, each padded
    to whole rows: at most one row's padding per weight or part); the seed generators' states (dropout's) are not
    stored."""
    from electra_tf.serving.portable import serving_model

    model, _, path, _ = classifier
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    assert len([name for name in reader.get_variable_to_shape_map() if name != "_CHECKPOINTABLE_OBJECT_GRAPH"]) == 1
    weights = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    pack = serving_model(model, SEQ)._model.encoder.weight_pack()  # noqa: SLF001
    pieces = len(model.trainable_weights) + len(pack.members) * (len(pack.layout.shapes) - len(pack.members[0]))
    assert weights <= stored_values(path) < weights + ROW * pieces


def signature_nodes(path) -> int:
    return max(len(f.node_def) for f in functions(path))


def test_exports_hold_the_pruned_graph(classifier, monkeypatch, tmp_path):  # noqa: F811
    """The export's signature graph is grappler's pruned one (`compact.pruned_endpoint`), not the traced one: fewer
    nodes, the same outputs. Fails where TensorFlow's private grappler API moved and the export fell back."""
    from electra_tf.serving import compact
    from electra_tf.serving.classifier import export_classifier

    model, tokenizer, path, _ = classifier
    def moved(*args):
        raise ImportError("tf_optimizer moved")

    monkeypatch.setattr(compact, "_pruned_graph_def", moved)  # the fallback: the traced graph, as before
    traced = export_classifier(model, tokenizer, ["neg", "neutral", "pos"], SEQ, str(tmp_path / "traced"), False)
    assert signature_nodes(path) < 0.8 * signature_nodes(traced)
    served = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(TEXTS))
    assert_same_outputs(served, tf.saved_model.load(traced).signatures["serving_default"](text=tf.constant(TEXTS)))


@pytest.mark.parametrize("export", ["classifier", "tagger", "squad"])
def test_the_signature_calls_the_pruned_graph_with_grappler_off(export, request):
    """The loader's grappler would rerun on the first request the passes the export ran (a SavedModel carries no
    session options): the signature calls the pruned graph, the one function marked `_noinline` (not inlined into
    the signature, so the loader's grappler optimizes the one-node signature only, though it reads the functions that
    node reaches), through one call node carrying `compact.GRAPPLER_OFF`, which the `PartitionedCall` kernel
    optimizes the function it instantiates with."""
    path = request.getfixturevalue(export)[-2]
    library = functions(path)
    not_inlined = [f for f in library if f.attr["_noinline"].b]
    assert [len(f.node_def) for f in not_inlined] == [signature_nodes(path)]  # the whole pruned graph
    name = not_inlined[0].signature.name
    calls = [node for f in library for node in f.node_def if node.attr["f"].func.name == name]
    assert [node.op for node in calls] in (["PartitionedCall"], ["StatefulPartitionedCall"])
    options = config_pb2.ConfigProto.FromString(calls[0].attr["config_proto"].s)
    assert options.graph_options.rewrite_options.disable_meta_optimizer
    callers = [f for f in library if any(node.attr["f"].func.name == name for node in f.node_def)]
    # What the loader's grappler still optimizes: the call and the identities of its outputs.
    assert {node.op for node in callers[0].node_def} <= {calls[0].op, "Identity", "NoOp"}


@pytest.mark.parametrize("export,inputs", [("classifier", {"text": TEXTS}), ("tagger", {"text": TAGGING_TEXTS}),
                                           ("squad", {"question": SQUAD_QUESTIONS, "context": SQUAD_CONTEXTS})])
def test_a_loading_process_with_grappler_off_serves_the_same_outputs(export, inputs, request):
    """What docs/finetuning.md offers a serving process: grappler's meta-optimizer off for the whole process (which
    skips the loader's pass over the signature's call) serves the default's outputs. The export's own call into the
    pruned graph already runs with grappler off; an `If` or `While` only grappler could lower would fail here."""
    path = request.getfixturevalue(export)[-2]
    feed = {name: tf.constant(value) for name, value in inputs.items()}
    expected = tf.saved_model.load(path).signatures["serving_default"](**feed)
    before = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    try:  # a second load: functions of new names, instantiated under the option (what an eager call passes on)
        options = config_pb2.ConfigProto.FromString(context.context().function_call_options.config_proto_serialized)
        assert options.graph_options.rewrite_options.disable_meta_optimizer
        served = tf.saved_model.load(path).signatures["serving_default"](**feed)
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": before})
    assert_same_outputs(served, expected)


@pytest.mark.parametrize("export", ["classifier", "tagger", "squad"])
def test_the_signature_reaches_the_pruned_graph_through_one_endpoint_function(export, request):
    """The saved signature's wrapper calls the endpoint, which calls the pruned graph: two call levels, each a function
    the loader turns into a graph at load and instantiates on the first request. `ExportArchive.add_endpoint` given
    an `input_signature` wraps the function it gets in a `tf.function` of its own, which for the endpoint (already
    one) was a third level, a copy of the second."""
    from electra_tf.serving.compact import PRUNED_FUNCTION

    library = {f.signature.name: f for f in functions(request.getfixturevalue(export)[-2])}

    def callers(name):
        return [f.signature.name for f in library.values() if any(n.attr["f"].func.name == name for n in f.node_def)]

    (pruned,) = [name for name in library if PRUNED_FUNCTION in name]
    (endpoint,) = callers(pruned)
    (wrapper,) = callers(endpoint)
    assert callers(wrapper) == []
    calls_only = {"PartitionedCall", "StatefulPartitionedCall", "Identity", "NoOp"}
    wrappers = [f for f in library.values() if {n.op for n in f.node_def} <= calls_only]
    assert sorted(f.signature.name for f in wrappers) == sorted([endpoint, wrapper])


def test_flat_weights_hold_the_model_weights_and_compute_its_outputs(classifier):  # noqa: F811
    model, tokenizer, _, _ = classifier
    flat = FlatWeights(model)
    assert any(int(np.prod(w.shape)) % ROW for w in model.trainable_weights)  # a padded weight is covered
    for value, weight in zip(flat.values(), model.trainable_weights):
        np.testing.assert_array_equal(value.numpy(), weight.numpy(), err_msg=weight.path)
    features = encode_pairs(tokenizer, TEXTS, None, SEQ)
    np.testing.assert_allclose(flat(features)["logits"].numpy(), model(features, training=False)["logits"].numpy(),
                               atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="inference only"):
        flat(features, training=True)


def session_logits(path, texts):
    """The logits TF Serving's loader (a TF1 session) serves."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta_graph.signature_def["serving_default"]
        return session.run(signature.outputs["logits"].name, {signature.inputs["text"].name: texts})


def test_the_tf1_session_loader_serves_the_trained_weights(classifier):  # noqa: F811
    """TF Serving's loader (a TF1 session) restores the variables the signature reads."""
    model, tokenizer, path, _ = classifier
    np.testing.assert_allclose(session_logits(path, TEXTS), trained_logits(model, tokenizer, TEXTS), atol=1e-5, rtol=0)


@pytest.mark.parametrize("export,inputs", [("tagger", {"text": TAGGING_TEXTS}),
                                           ("squad", {"question": SQUAD_QUESTIONS, "context": SQUAD_CONTEXTS})])
def test_the_tf1_session_loader_serves_what_tf2_serves(export, inputs, request):
    """TF Serving's loader runs the call into the pruned graph (grappler off, its `If`s and SQuAD's windows `While`
    lowered by TensorFlow at instantiation) to the outputs `tf.saved_model.load` serves."""
    path = request.getfixturevalue(export)[-2]
    expected = tf.saved_model.load(path).signatures["serving_default"](
        **{name: tf.constant(value) for name, value in inputs.items()})
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["serving_default"]
        names = sorted(signature.outputs)
        served = session.run([signature.outputs[name].name for name in names],
                             {signature.inputs[name].name: value for name, value in inputs.items()})
    assert names == sorted(expected)
    for name, value in zip(names, served):
        if value.dtype.kind in "fc":
            np.testing.assert_allclose(value, expected[name].numpy(), atol=1e-5, rtol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(value, expected[name].numpy(), err_msg=name)


def padded_to(features, length):
    return {name: np.pad(value.numpy(), [[0, 0], [0, length - value.shape[1]]]) for name, value in features.items()}


@pytest.mark.parametrize("texts", [TAGGING_TEXTS, TAGGING_TEXTS + [" ".join(["paris"] * (SEQ + 8))]])
def test_tagger_windows_are_padded_to_the_longest_with_the_outputs_of_max_seq_length(tagger, texts):  # noqa: F811
    model, tokenizer, task, _, server_class = tagger
    server = server_class(model, tokenizer, task.labels, task.scheme, SEQ, task.segment_id)
    words, _, _ = tf_text.regex_split_with_offsets(tf.constant(texts), python_whitespace(), "")
    features, _, _ = server.window_features(words.flat_values, words.value_rowids(), words.row_lengths())
    width = int(tf.reduce_max(tf.reduce_sum(features["input_mask"], axis=1)))
    assert features["input_ids"].shape[1] == width  # the longest window's [CLS] pieces [SEP]
    if len(texts) == len(TAGGING_TEXTS):
        assert width < SEQ
    logits = model(features, training=False)["logits"].numpy()
    full = model(padded_to(features, SEQ), training=False)["logits"].numpy()  # pad_id and the mask are 0
    np.testing.assert_allclose(logits, full[:, :width], atol=1e-5, rtol=0)


# Short windows only (each question + context under SEQ tokens), then one context over several full windows.
SQUAD_BATCHES = [(SQUAD_QUESTIONS[:1], SQUAD_CONTEXTS[:1]), (SQUAD_QUESTIONS[::3], SQUAD_CONTEXTS[::3]),
                 (SQUAD_QUESTIONS, SQUAD_CONTEXTS), (SQUAD_QUESTIONS[::-1], SQUAD_CONTEXTS[::-1])]


def squad_features(server, questions, contexts):
    _, _, doc_ids, tok_to_orig, _ = server._documents(tf.constant(contexts))
    return server._windows(tf.constant(questions), doc_ids, tok_to_orig)


@pytest.mark.parametrize("questions,contexts", SQUAD_BATCHES)
def test_squad_windows_are_padded_to_the_longest_with_the_outputs_of_max_seq_length(squad, questions,  # noqa: F811
                                                                                     contexts):
    model, tokenizer, settings, _, server_class = squad
    server = server_class(model, tokenizer, settings)
    features, windows = squad_features(server, questions, contexts)
    width = features["input_ids"].shape[1]
    if len(contexts) < 3:  # short contexts: one window each, under SEQ tokens
        assert width < SEQ
    assert width == max(int(tf.reduce_max(windows["num_tokens"])), server.min_width)
    outputs = model(features, training=False)
    full = model(padded_to(features, SEQ), training=False)  # pad_id and the mask are 0
    assert set(outputs) >= {"start_logits", "start_top_index", "end_top_index", "answerable_logit"}
    # A beam wider than a window's answer positions fills up with masked ones (log-prob near −MASK_PENALTY), which
    # differ with the padding and which decoding never takes: compare the entries of positions that can answer.
    answers = {name: full[name.replace("index", "log_probs")].numpy() > -MASK_PENALTY / 2
               for name in ("start_top_index", "end_top_index")}
    answers.update({name.replace("index", "log_probs"): keep for name, keep in answers.items()})
    assert answers["start_top_index"].any() and answers["end_top_index"].any()
    for name, value in outputs.items():
        value, expected = value.numpy(), full[name].numpy()
        if name == "start_logits":
            expected = expected[:, :width]
        keep = answers.get(name, np.ones(value.shape, bool))
        if value.dtype.kind == "f":
            np.testing.assert_allclose(value[keep], expected[keep], atol=1e-5, rtol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(value[keep], expected[keep], err_msg=name)


@pytest.mark.parametrize("questions,contexts", SQUAD_BATCHES)
def test_served_answers_equal_those_of_windows_padded_to_max_seq_length(squad, questions, contexts):  # noqa: F811
    model, tokenizer, settings, path, server_class = squad
    served = tf.saved_model.load(path).signatures["serving_default"](question=tf.constant(questions),
                                                                      context=tf.constant(contexts))
    padded = server_class(model, tokenizer, settings)
    padded.min_width = SEQ  # every window row max_seq_length long, as before serving padded to the longest
    assert_same_outputs(served, tf.function(padded.answer)(tf.constant(questions), tf.constant(contexts)))


# ---- the layers as one loop, the assertions' guards left out ------------------------------------------------

def deep_model(layers: int):
    """A classifier of `layers` transformer layers (the fixtures' have one)."""
    from electra_tf.finetuning.heads import ClassificationHead

    hparams = json.dumps({**json.loads(TINY), "num_layers": layers})
    return trained_model(lambda config: ClassificationHead(3, name="classification_head"), len(VOCAB), hparams)


def deep_classifier(tmp_path, layers: int):
    """`deep_model(layers)`, its tokenizer and its export."""
    from electra_tf.serving.classifier import export_classifier

    tokenizer = write_vocab(tmp_path / "vocab.txt", VOCAB)
    model = deep_model(layers)
    path = export_classifier(model, tokenizer, ["neg", "neutral", "pos"], SEQ, str(tmp_path / f"export{layers}"), False)
    return model, tokenizer, path


def test_the_export_holds_one_transformer_layer_whatever_the_depth(tmp_path):
    """The serving encoder runs its layers (all but a [CLS] head's last) as one `While` over their weights stacked in
    the weights variable: a loader imports, optimises and instantiates one layer, not one per layer (before: 2 layers'
    nodes grew by a layer's for each layer more). The outputs stay the trained model's."""
    counts = {}
    for layers in (2, 4):
        model, tokenizer, path = deep_classifier(tmp_path, layers)
        nodes = [node for f in functions(path) for node in f.node_def]
        counts[layers] = (len(nodes), sum(node.op == "MatMul" for node in nodes))
        served = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(TEXTS))["logits"].numpy()
        np.testing.assert_allclose(served, trained_logits(model, tokenizer, TEXTS), atol=1e-5, rtol=0)
        np.testing.assert_allclose(session_logits(path, TEXTS), served, atol=1e-6, rtol=0)  # TF Serving's way in
        assert {"While", "StatelessWhile"} & {node.op for node in nodes}
        # The stacks are the variable's rows (`stacked_weights` under `FlatWeights`), not float Packs of the weights.
        assert not [node.name for node in nodes if node.op == "Pack" and node.attr["T"].type == tf.float32]
    assert counts[2][1] == counts[4][1]  # the same matmuls
    assert abs(counts[4][0] - counts[2][0]) <= 4  # a layer is about 40 nodes (the loop's bounds differ)


def test_flat_weights_store_the_layers_weights_in_the_layout_the_forward_reads():
    """The layers' weights are one `[layers, rows, ROW]` tensor of the variable's rows (`stacked_weights`), each
    layer's parts (`compact.parts_of`) its weights in `forward.LayerLayout`: per block, the query's, key's and
    value's columns for its heads side by side, the output projection's rows for them, the first feed-forward
    kernel's columns and the second's rows for its inner units. Every weight reads back unchanged (`values()`);
    the tiny model's query, key and value bias block (24 floats) is a padded part."""
    from electra_tf.serving.portable import serving_model

    flat = serving_model(deep_model(3), SEQ)
    values, stacks = flat.read()
    for value, weight in zip(values, flat._model.trainable_weights):  # noqa: SLF001
        np.testing.assert_array_equal(value.numpy(), weight.numpy(), err_msg=weight.path)
    pack = flat._model.encoder.weight_pack()  # noqa: SLF001
    assert list(stacks) == [pack.key] and pack.layout.blocks == 2
    stored = stacks[pack.key]
    assert stored.shape == (3, sum(pack.part_rows), ROW)
    np.testing.assert_array_equal(compact.stacked_weights(pack).numpy(), stored.numpy())  # outside: arranged anew
    for i, member in enumerate(pack.members):
        q, qb, k, kb, v, vb, o, ob, _, _, w1, b1, w2, b2, _, _ = [w.numpy() for w in member]
        hidden, width, inner = q.shape[0], q.shape[1] * q.shape[2], w1.shape[1]
        q, k, v, o = q.reshape(hidden, width), k.reshape(hidden, width), v.reshape(hidden, width), o.reshape(width, -1)
        qb, kb, vb = qb.reshape(-1), kb.reshape(-1), vb.reshape(-1)
        parts = pack.layout.parts([p.numpy() for p in compact.parts_of(pack, stored[i])])
        for j, (heads, units) in enumerate([(slice(0, width // 2), slice(0, inner // 2)),
                                             (slice(width // 2, None), slice(inner // 2, None))]):
            np.testing.assert_array_equal(parts.qkv_kernels[j], np.concatenate([q[:, heads], k[:, heads], v[:, heads]],
                                                                                axis=1))
            np.testing.assert_array_equal(parts.qkv_biases[j], np.concatenate([qb[heads], kb[heads], vb[heads]]))
            np.testing.assert_array_equal(parts.output_kernels[j], o[heads])
            np.testing.assert_array_equal(parts.intermediate_kernels[j], w1[:, units])
            np.testing.assert_array_equal(parts.intermediate_biases[j], b1[units])
            np.testing.assert_array_equal(parts.ffn_kernels[j], w2[units])
        np.testing.assert_array_equal(parts.output_bias[0], ob)
        np.testing.assert_array_equal(parts.ffn_bias[0], b2)


def assertion_graph():
    @tf.function
    def add(x, y):
        tf.debugging.assert_less(x, y, message="x ≥ y")  # float data: an `If` guards the `Assert`
        return x + y

    spec = tf.TensorSpec([None], tf.float32)
    return add.get_concrete_function(spec, spec).graph.as_graph_def()


def if_nodes(graph_def):
    return [node.name for node in graph_def.node if node.op in ("If", "StatelessIf")]


def test_assertion_guards_are_left_out_with_their_branch_functions():
    graph_def = assertion_graph()
    assert if_nodes(graph_def) and graph_def.library.function
    stripped = compact.without_assertion_guards(graph_def)
    assert not if_nodes(stripped) and not stripped.library.function
    assert all(not i.startswith("^") or i[1:] in {n.name for n in stripped.node}
               for node in stripped.node for i in node.input)
    with tf.Graph().as_default():  # what is left imports and computes x + y
        x, y = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])
        inputs = [n.name for n in stripped.node if n.op == "Placeholder"]
        output = [n.name for n in stripped.node if n.op == "AddV2"][0]
        (result,) = tf.graph_util.import_graph_def(stripped, dict(zip(inputs, (x, y))), [output + ":0"], name="")
        with tf.compat.v1.Session() as session:
            np.testing.assert_array_equal(session.run(result), [4.0, 6.0])


def test_a_guard_whose_output_feeds_data_is_kept():
    @tf.function
    def chosen(x, flag):
        return tf.cond(flag, lambda: tf.identity(x), lambda: tf.identity(x)) * 2.0

    graph_def = chosen.get_concrete_function(tf.TensorSpec([None]), tf.TensorSpec([], tf.bool)).graph.as_graph_def()
    assert if_nodes(graph_def)
    assert compact.without_assertion_guards(graph_def) is graph_def


def test_exports_hold_no_assertion_guards(classifier, tagger, squad):  # noqa: F811
    """The ragged ops' validations (`tf.debugging.assert_*`: an `If` of two branch functions each, which the export's
    `debug_stripper` left selecting between no-ops) are left out: 36 functions to import and instantiate at load
    were 12 in an ELECTRA-Small classifier export."""
    for export in (classifier, tagger, squad):
        path = [value for value in export if isinstance(value, str)][0]
        guards = [node.name for f in functions(path) for node in f.node_def if node.name.endswith("AssertGuard")]
        assert not guards, (path, guards[:3])


def conditionals(path):
    return [(f.signature.name, node) for f in functions(path) for node in f.node_def
            if node.op in ("If", "StatelessIf")]


def test_exports_hold_no_conditional_but_the_attention_kernels(classifier, tagger, squad):  # noqa: F811
    """No `If` but attention's choice of kernels (`serving.forward.attention`): the truncation, the windows and the
    answer spans compare ragged positions with per-row bounds on flat values (`serving.text.rows_within`), not by
    broadcasting a ragged against a `[batch, 1]` tensor, whose `DynamicRaggedShape` traced about 20 `tf.cond`s per
    comparison (the SQuAD export kept 6, with 24 branch functions, to import and instantiate at load). SQuAD's
    requests run past `FEW_TOKENS`: its export holds no choice at all."""
    for export in (classifier, tagger):
        path = [value for value in export if isinstance(value, str)][0]
        names = [node.name for _, node in conditionals(path)]
        # (grappler's function inlining may suffix the name: "…/attention_kernels_tfg_inlined_…")
        assert names and all(any(part.startswith(ATTENTION_KERNELS) for part in name.split("/")) for name in names), \
            (path, names[:3])
    assert conditionals([value for value in squad if isinstance(value, str)][0]) == []


def test_exports_find_each_values_row_without_tf_repeat(classifier, tagger, squad):  # noqa: F811
    """Each value's row of a ragged (`value_rowids`) is one `UpperBound` over the row splits (`serving.text.row_ids`),
    and the masks, joins, repeats and `from_tensor`s that need it are written with it: TensorFlow's own traces a
    `tf.repeat` of about 30 nodes for each, and a loader converts, rewrites and instantiates every node on the first
    request."""
    for export in (classifier, tagger, squad):
        path = [value for value in export if isinstance(value, str)][0]
        repeats = [(f.signature.name, node.name) for f in functions(path) for node in f.node_def
                   if "RaggedSplitsToSegmentIds" in node.name or "Repeat" in node.name.split("/")[0]]
        assert not repeats, (path, repeats[:3])


def test_exports_hold_no_loop_but_the_layers(classifier, tagger, squad):  # noqa: F811
    """The loops an export may hold: the encoder's layer loop (`serving.forward.loop_layers`) and the tagger's window
    numbering, a `tf.scan` over the batch's words (a sequential rule, `tagging.word_windows`). SQuAD's answer text
    finds the predicted words in the joined span without a `map_fn` (`serving.squad._find_first`), whose loop a
    loader lowered and instantiated on the first request."""
    for export in (classifier, tagger, squad):
        path = [value for value in export if isinstance(value, str)][0]
        loops = [node.name for f in functions(path) for node in f.node_def if node.op in ("While", "StatelessWhile")]
        assert not [name for name in loops if name.startswith("map")], (path, loops)  # a map_fn's loop
    tagger_loops = {name.split("/")[0] for f in functions(tagger[-2]) for node in f.node_def
                    if node.op in ("While", "StatelessWhile") for name in [node.name]}
    assert "scan" in tagger_loops  # the check sees loops outside the encoder
