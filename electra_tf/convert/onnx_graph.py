"""The ONNX graph of a fine-tuned ELECTRA model, written op by op from its weights (no PyTorch, no TensorFlow).

`build_graph(config, encoder_weights, head, head_weights)` → `onnx.ModelProto` (opset 17) with

* inputs `input_ids`, `attention_mask`, `token_type_ids`: int64 `[batch, sequence]` (Hugging Face's names;
  the mask is 1 on real tokens);
* outputs by the head's kind (`finetuned.KINDS`), each what our Keras model returns:
  "classifier" `logits` `[batch, labels]`; "regression" `predictions` `[batch]`; "tagger" `logits`
  `[batch, sequence, labels]`; "squad" `start_logits` `[batch, sequence]` (non-context positions −1000, as
  `heads.answer_penalty`), with joint prediction the beam `start_top_log_probs` / `start_top_index`
  `[batch, K]` and `end_top_log_probs` / `end_top_index` `[batch, K, K]` (indices int64; a beam wider than
  the sequence is filled with log-prob −1e9 and indices ≥ sequence, as `heads.beam_top_k`), without it
  `end_logits`, and with the answerability classifier `answerable_logit` `[batch]`.

The encoder is the post-LayerNorm BERT block of `model.transformer_layer`: embeddings (word + position +
segment, LayerNormalization), the projection when the embedding size differs from the width, then per layer
multi-head attention (scores scaled before the softmax; masked keys get −1e9 added, so their weight is exactly
0 as under Keras' masked softmax), residual, LayerNormalization, dense → GELU (exact: `Erf`; "gelu_approximate":
the tanh form) → dense, residual, LayerNormalization. Only standard ONNX ops are used, so any runtime of opset
17 runs it.

Example:

>>> import numpy as np
>>> from electra_tf.config import get_config
>>> from electra_tf.convert import names
>>> from electra_tf.convert.finetuned import HeadSpec
>>> config = get_config("tiny", vocab_size=30, num_layers=1, hidden_size=8, embedding_size=8, num_heads=2,
...                     intermediate_size=16, max_position_embeddings=16, max_seq_length=16)
>>> rng = np.random.RandomState(0)
>>> weights = {k: rng.normal(size=s).astype("float32") for k, s in
...            names.expected_shapes(config, ("discriminator",)).items()}
>>> head = {"logits": (rng.normal(size=(8, 3)).astype("float32"), np.zeros(3, "float32"))}
>>> model = build_graph(config, weights, HeadSpec("classifier", num_labels=3), head)
>>> [o.name for o in model.graph.output], model.opset_import[0].version
(['logits'], 17)
"""

from __future__ import annotations

import math

import numpy as np

from electra_tf.config import ElectraConfig
from electra_tf.convert.errors import ConversionError

OPSET = 17  # LayerNormalization
IR_VERSION = 8  # the IR of opset 17: runtimes read it that are older than the onnx package writing it
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MASKED_KEY_BIAS = -1e9  # added to the scores of padding keys: exp() of it is 0 in float32
ANSWER_PENALTY = 1000.0  # heads.MASK_PENALTY
BEAM_FILLER = -1e9  # heads.BEAM_FILLER
REQUIREMENTS = "requirements-onnx.txt"


def import_onnx():
    """The `onnx` package, or one line naming the requirements file that installs it."""
    try:
        import onnx
    except ImportError:
        raise ConversionError(f"--to=onnx needs the onnx package: pip install -r {REQUIREMENTS}") from None
    return onnx


class _Graph:
    """Nodes and initializers under construction; every tensor gets a fresh, readable name."""

    def __init__(self, onnx):
        self.onnx, self.helper = onnx, onnx.helper
        self.nodes, self.initializers, self.count = [], [], 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, value, hint: str = "const", dtype=np.float32) -> str:
        name = self.name(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, inputs, hint: str | None = None, outputs: int = 1, name: str | None = None, **attrs):
        """One node; returns its output name (or names, when `outputs` > 1). `name` fixes the output's name."""
        out = [name] if name else [self.name(hint or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), out, **attrs))
        return out[0] if outputs == 1 else out

    # Composite layers ------------------------------------------------------------------------------
    def dense(self, x: str, kernel, bias, hint: str) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.const(kernel, f"{hint}_kernel")]),
                               self.const(bias, f"{hint}_bias")], hint)

    def layer_norm(self, x: str, gamma, beta, epsilon: float, hint: str) -> str:
        return self.op("LayerNormalization", [x, self.const(gamma, f"{hint}_gamma"), self.const(beta, f"{hint}_beta")],
                       hint, axis=-1, epsilon=float(epsilon))

    def gelu(self, x: str, activation: str) -> str:
        """x·½(1 + erf(x/√2)) (exact), or x·½(1 + tanh(√(2/π)(x + 0.044715x³))) ("gelu_approximate")."""
        if activation == "gelu":
            inner = self.op("Erf", [self.op("Mul", [x, self.const(1.0 / math.sqrt(2.0))])])
        else:
            cube = self.op("Mul", [self.op("Mul", [x, x]), x])
            poly = self.op("Add", [x, self.op("Mul", [cube, self.const(0.044715)])])
            inner = self.op("Tanh", [self.op("Mul", [poly, self.const(math.sqrt(2.0 / math.pi))])])
        half = self.op("Mul", [x, self.const(0.5)])
        return self.op("Mul", [half, self.op("Add", [inner, self.const(1.0)])], "gelu")

    def squeeze_last(self, x: str, hint: str) -> str:
        return self.op("Squeeze", [x, self.const([-1], dtype=np.int64)], hint)

    def top_k(self, log_probs: str, k: int, rank: int, hint: str):
        """`heads.beam_top_k`: pad the last axis with k fillers, then TopK (ties: the lower index first)."""
        pads = self.const([0] * (2 * rank - 1) + [k], dtype=np.int64)
        padded = self.op("Pad", [log_probs, pads, self.const(BEAM_FILLER)], mode="constant")
        return self.op("TopK", [padded, self.const([k], dtype=np.int64)], hint, outputs=2, axis=-1, largest=1,
                       sorted=1)


def _embeddings(g: _Graph, config: ElectraConfig, w: dict) -> str:
    words = g.op("Gather", [g.const(w["embeddings/word"], "word_embeddings"), "input_ids"], axis=0)
    length = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const(1, dtype=np.int64)], axis=0)
    length = g.op("Unsqueeze", [length, g.const([0], dtype=np.int64)])
    positions = g.op("Slice", [g.const(w["embeddings/position"], "position_embeddings"),
                               g.const([0], dtype=np.int64), length, g.const([0], dtype=np.int64)])
    segments = g.op("Gather", [g.const(w["embeddings/segment"], "segment_embeddings"), "token_type_ids"], axis=0)
    x = g.op("Add", [g.op("Add", [words, positions]), segments])
    x = g.layer_norm(x, w["embeddings/layer_norm/gamma"], w["embeddings/layer_norm/beta"],
                     config.layer_norm_epsilon, "embeddings_layer_norm")
    if "discriminator/projection/kernel" in w:
        x = g.dense(x, w["discriminator/projection/kernel"], w["discriminator/projection/bias"], "projection")
    return x


def _key_bias(g: _Graph) -> str:
    """`[B, 1, 1, L]`: 0 on real tokens, −1e9 on padding."""
    mask = g.op("Cast", ["attention_mask"], to=g.onnx.TensorProto.FLOAT)
    bias = g.op("Mul", [g.op("Sub", [g.const(1.0), mask]), g.const(MASKED_KEY_BIAS)])
    return g.op("Unsqueeze", [bias, g.const([1, 2], dtype=np.int64)], "key_bias")


def _attention(g: _Graph, x: str, key_bias: str, w: dict, prefix: str, heads: int, hidden: int) -> str:
    head_size = hidden // heads
    split = g.const([0, 0, heads, head_size], dtype=np.int64)

    def project(name, perm):
        y = g.dense(x, w[f"{prefix}/attention/{name}/kernel"], w[f"{prefix}/attention/{name}/bias"], name)
        return g.op("Transpose", [g.op("Reshape", [y, split])], perm=perm)

    query = g.op("Mul", [project("query", [0, 2, 1, 3]), g.const(1.0 / math.sqrt(head_size))])
    scores = g.op("Add", [g.op("MatMul", [query, project("key", [0, 2, 3, 1])]), key_bias])
    probs = g.op("Softmax", [scores], axis=-1)
    context = g.op("Transpose", [g.op("MatMul", [probs, project("value", [0, 2, 1, 3])])], perm=[0, 2, 1, 3])
    context = g.op("Reshape", [context, g.const([0, 0, hidden], dtype=np.int64)])
    return g.dense(context, w[f"{prefix}/attention/output/kernel"], w[f"{prefix}/attention/output/bias"],
                   "attention_output")


def _encoder(g: _Graph, config: ElectraConfig, w: dict) -> str:
    encoder = config.discriminator
    x, key_bias = _embeddings(g, config, w), _key_bias(g)
    for i in range(encoder.num_layers):
        prefix = f"discriminator/layer_{i}"
        attended = _attention(g, x, key_bias, w, prefix, encoder.num_heads, encoder.hidden_size)
        x = g.layer_norm(g.op("Add", [attended, x]), w[f"{prefix}/attention/layer_norm/gamma"],
                         w[f"{prefix}/attention/layer_norm/beta"], config.layer_norm_epsilon, "attention_layer_norm")
        inner = g.gelu(g.dense(x, w[f"{prefix}/ffn/intermediate/kernel"], w[f"{prefix}/ffn/intermediate/bias"],
                               "intermediate"), config.hidden_act)
        out = g.dense(inner, w[f"{prefix}/ffn/output/kernel"], w[f"{prefix}/ffn/output/bias"], "ffn_output")
        x = g.layer_norm(g.op("Add", [out, x]), w[f"{prefix}/ffn/layer_norm/gamma"],
                         w[f"{prefix}/ffn/layer_norm/beta"], config.layer_norm_epsilon, f"layer_{i}_output")
    return x


def _cls(g: _Graph, sequence: str) -> str:
    return g.op("Gather", [sequence, g.const(0, dtype=np.int64)], "cls", axis=1)


def _classifier_head(g: _Graph, sequence: str, spec, head: dict) -> list:
    logits = g.dense(_cls(g, sequence), *head["logits"], "logits_dense")
    if spec.kind == "regression":
        return [g.op("Identity", [g.squeeze_last(logits, "squeezed")], name="predictions")]
    return [g.op("Identity", [logits], name="logits")]


def _answer_penalty(g: _Graph) -> str:
    """`heads.answer_penalty`: 0 on context tokens (mask · segment) and position 0, −1000 elsewhere."""
    float_type = g.onnx.TensorProto.FLOAT
    context = g.op("Mul", [g.op("Cast", ["attention_mask"], to=float_type),
                           g.op("Cast", ["token_type_ids"], to=float_type)])
    positions = g.op("Range", [g.const(0, dtype=np.int64),
                               g.op("Gather", [g.op("Shape", ["input_ids"]), g.const(1, dtype=np.int64)], axis=0),
                               g.const(1, dtype=np.int64)])
    first = g.op("Cast", [g.op("Equal", [positions, g.const(0, dtype=np.int64)])], to=float_type)
    allowed = g.op("Min", [g.op("Add", [context, first]), g.const(1.0)])
    return g.op("Mul", [g.op("Sub", [allowed, g.const(1.0)]), g.const(ANSWER_PENALTY)], "answer_penalty")


def _span_head(g: _Graph, sequence: str, config: ElectraConfig, spec, head: dict) -> list:
    penalty = _answer_penalty(g)
    start_logits = g.op("Add", [g.squeeze_last(g.dense(sequence, *head["start_logits"], "start"), "start"), penalty],
                        name="start_logits")
    outputs = ["start_logits"]
    if not spec.joint_prediction:
        g.op("Add", [g.squeeze_last(g.dense(sequence, *head["end_logits"], "end"), "end"), penalty], name="end_logits")
        outputs.append("end_logits")
    else:
        outputs += _beam(g, sequence, start_logits, penalty, config, head)
    if spec.answerable:
        outputs.append(_answerable(g, sequence, start_logits, config, head))
    return outputs


def _beam(g: _Graph, sequence: str, start_logits: str, penalty: str, config: ElectraConfig, head: dict) -> list:
    """`SpanHead._beam`: the K best starts, and for each the K best ends of the joint end scorer."""
    k, hidden = config.squad_beam_size, config.discriminator.hidden_size
    start_values, start_index = g.top_k(g.op("LogSoftmax", [start_logits], axis=-1), k, 2, "start_top")
    length = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const(1, dtype=np.int64)], axis=0)
    one_hot = g.op("OneHot", [start_index, length, g.const([0.0, 1.0])], axis=-1)  # fillers (≥ L): all zeros
    start_states = g.op("MatMul", [one_hot, sequence])  # [B, K, H]
    kernel, bias = head["joint_hidden"]
    from_start = g.op("MatMul", [start_states, g.const(kernel[:hidden], "joint_from_start")])  # [B, K, J]
    from_end = g.op("MatMul", [sequence, g.const(kernel[hidden:], "joint_from_end")])  # [B, L, J]
    joint = g.op("Add", [g.op("Add", [g.op("Unsqueeze", [from_start, g.const([2], dtype=np.int64)]),
                                      g.op("Unsqueeze", [from_end, g.const([1], dtype=np.int64)])]),
                         g.const(bias, "joint_bias")])
    end_logits = g.squeeze_last(g.dense(g.gelu(joint, config.hidden_act), *head["end_logits"], "end"), "end")
    end_logits = g.op("Add", [end_logits, g.op("Unsqueeze", [penalty, g.const([1], dtype=np.int64)])])
    end_values, end_index = g.top_k(g.op("LogSoftmax", [end_logits], axis=-1), k, 3, "end_top")
    for value, name in ((start_values, "start_top_log_probs"), (start_index, "start_top_index"),
                        (end_values, "end_top_log_probs"), (end_index, "end_top_index")):
        g.op("Identity", [value], name=name)
    return ["start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index"]


def _answerable(g: _Graph, sequence: str, start_logits: str, config: ElectraConfig, head: dict) -> str:
    """concat([CLS], softmax(start) · hidden) → dense → GELU → dense(1)."""
    start_p = g.op("Unsqueeze", [g.op("Softmax", [start_logits], axis=-1), g.const([1], dtype=np.int64)])
    start_feature = g.op("Squeeze", [g.op("MatMul", [start_p, sequence]), g.const([1], dtype=np.int64)])
    features = g.op("Concat", [_cls(g, sequence), start_feature], axis=-1)
    hidden = g.gelu(g.dense(features, *head["answerable_hidden"], "answerable_hidden"), config.hidden_act)
    logit = g.squeeze_last(g.dense(hidden, *head["answerable_logit"], "answerable"), "answerable")
    return g.op("Identity", [logit], name="answerable_logit")


def _output_info(g: _Graph, name: str, spec):
    integer = name.endswith("_index")
    shape = {"logits": ["batch", "sequence", "labels"] if spec.kind == "tagger" else ["batch", "labels"],
             "predictions": ["batch"], "start_logits": ["batch", "sequence"], "end_logits": ["batch", "sequence"],
             "answerable_logit": ["batch"], "start_top_log_probs": ["batch", "beam"],
             "start_top_index": ["batch", "beam"], "end_top_log_probs": ["batch", "beam", "beam"],
             "end_top_index": ["batch", "beam", "beam"]}[name]
    element = g.onnx.TensorProto.INT64 if integer else g.onnx.TensorProto.FLOAT
    return g.helper.make_tensor_value_info(name, element, shape)


def build_graph(config: ElectraConfig, encoder_weights: dict, spec, head_weights: dict, name: str = "electra"):
    """The `onnx.ModelProto` of the encoder of `config` with `encoder_weights` and the head `spec` (see above)."""
    onnx = import_onnx()
    g = _Graph(onnx)
    sequence = _encoder(g, config, encoder_weights)
    if spec.kind in ("classifier", "regression"):
        outputs = _classifier_head(g, sequence, spec, head_weights)
    elif spec.kind == "tagger":
        outputs = [g.op("Identity", [g.dense(sequence, *head_weights["logits"], "logits_dense")], name="logits")]
    else:
        outputs = _span_head(g, sequence, config, spec, head_weights)
    inputs = [g.helper.make_tensor_value_info(n, onnx.TensorProto.INT64, ["batch", "sequence"]) for n in INPUTS]
    graph = g.helper.make_graph(g.nodes, name, inputs, [_output_info(g, o, spec) for o in outputs],
                                initializer=g.initializers)
    model = g.helper.make_model(graph, opset_imports=[g.helper.make_opsetid("", OPSET)], producer_name="electra-tf",
                                 ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model
