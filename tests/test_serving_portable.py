"""Serving SavedModels are portable: TensorFlow's standard ops, no XLA, only the serving signature, and the trained
model's outputs; the weights-plus-config exports hold no execution options at all.

The trained models here are built with the XLA:CPU kernels on purpose (what a CPU run trains with by default): the
export must rebuild them with the reference kernels, whatever trained the weights.
"""

import json
import os
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from electra_tf.config import get_config
from electra_tf.finetuning.heads import ClassificationHead
from electra_tf.finetuning.model import FinetuningModel
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.options import ExecutionOptions
from electra_tf.text.tokenization import WordPieceTokenizer
from test_finetuning_run import TINY, VOCAB as CLASSIFIER_VOCAB
from test_squad_features import VOCAB as SQUAD_VOCAB
from test_tagging import VOCAB as TAGGING_VOCAB

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
XLA_CPU = ExecutionOptions(kernels="xla_cpu").resolve({"CPU"})
SEQ = 32
# Names TensorFlow gives the functions of custom gradients and of our kernels' backward passes.
GRADIENT_MARKERS = ("grad_fn", "_backward", "gradient")
# What stock TF Serving links besides TensorFlow: tensorflow_text's ops_lib (docs/finetuning.md cites the BUILD file).
TF_TEXT_OPS = {"FastWordpieceTokenizeWithOffsets", "NormalizeUTF8", "RegexSplitWithOffsets"}
CLASSIFIER_TEXTS = ["a gripping , funny film", "dull", "", "the film was not funny ? ."]
TAGGING_TEXTS = ["peter blackburn  of paris", "", "eu\trejects german call"]
SQUAD_QUESTIONS = ["Who sat on the mat?", "What year was the tower built?", "Who built the tower?", "Who?"]
SQUAD_CONTEXTS = ["The cat sat on the mat.", " ".join(["The tower was built by Gustave Eiffel in 1895."] * 4),
                  "  Steve  Smith's\ncat   sat on the mat.\tThe tower was built in 1895.  ", " \n "]


def write_vocab(path, words):
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return WordPieceTokenizer(str(path))


def trained_model(head, vocab_size, hparams=TINY, seed=3, policy="float32"):
    """A tiny fine-tuning model as a CPU run builds it (XLA:CPU kernels), with random 'trained' weights, under
    the dtype policy `--mixed_precision` sets."""
    keras.utils.set_random_seed(seed)
    config = get_config("tiny", hparams, vocab_size=vocab_size)
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        encoder = ElectraEncoder.from_config_object(config, execution=XLA_CPU)
        return FinetuningModel(encoder, head(config)).build_all(SEQ)
    finally:
        keras.mixed_precision.set_global_policy(previous)


def saved_model_proto(path):
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def functions(path):
    return [f for graph in saved_model_proto(path).meta_graphs for f in graph.graph_def.library.function]


def xla_marked(path) -> list[str]:
    """Every function, and every node of a function or graph, that carries `_XlaMustCompile`."""
    marked = [f.signature.name for f in functions(path) if "_XlaMustCompile" in f.attr]
    for graph in saved_model_proto(path).meta_graphs:
        nodes = list(graph.graph_def.node) + [n for f in graph.graph_def.library.function for n in f.node_def]
        marked += [node.name for node in nodes if "_XlaMustCompile" in node.attr]
    return marked


def check_portable(path, served_names):
    assert xla_marked(path) == []
    assert [f.signature.name for f in functions(path) if any(m in f.signature.name for m in GRADIENT_MARKERS)] == []
    signatures = {name for graph in saved_model_proto(path).meta_graphs for name in graph.signature_def}
    assert signatures - {"__saved_model_init_op"} == {"serving_default"}
    served = tf.saved_model.load(path).signatures["serving_default"]
    assert set(served.structured_input_signature[1]) == set(served_names)
    return served


def assert_same_outputs(served, expected):
    assert set(served) == set(expected)
    for name, value in expected.items():
        value, got = value.numpy(), served[name].numpy()
        if value.dtype.kind == "f":
            np.testing.assert_allclose(got, value, atol=1e-5, rtol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(got, value, err_msg=name)


# ---- the three serving exports ------------------------------------------------------------------

@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    from electra_tf.serving.classifier import ClassifierServer, export_classifier

    tmp_path = tmp_path_factory.mktemp("classifier")
    tokenizer = write_vocab(tmp_path / "vocab.txt", CLASSIFIER_VOCAB)
    model = trained_model(lambda config: ClassificationHead(3, name="classification_head"), len(CLASSIFIER_VOCAB))
    path = export_classifier(model, tokenizer, ["neg", "neutral", "pos"], SEQ, str(tmp_path / "export"), False)
    return model, tokenizer, path, ClassifierServer


@pytest.fixture(scope="module")
def squad(tmp_path_factory):
    from electra_tf.finetuning.squad.task import SquadTask
    from electra_tf.serving.squad import SquadServer, SquadServingSettings, export_squad

    tmp_path = tmp_path_factory.mktemp("squad")
    tokenizer = write_vocab(tmp_path / "vocab.txt", SQUAD_VOCAB)
    hparams = json.dumps({**json.loads(TINY), "squad_beam_size": 5, "squad_joint_prediction": True})
    model = trained_model(SquadTask().build_head, len(SQUAD_VOCAB), hparams)
    settings = SquadServingSettings(max_seq_length=SEQ, doc_stride=8, max_query_length=8, max_answer_length=30,
                                    n_best_size=20, v2=True, null_score_threshold=0.0)
    path = export_squad(model, tokenizer, settings, str(tmp_path / "export"))
    return model, tokenizer, settings, path, SquadServer


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    from electra_tf.finetuning.registry import get_task
    from electra_tf.serving.tagging import TaggingServer, export_tagging

    tmp_path = tmp_path_factory.mktemp("tagging")
    tokenizer = write_vocab(tmp_path / "vocab.txt", TAGGING_VOCAB)
    task = get_task("ner", labels=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], tagging_segment_id=1)
    model = trained_model(task.build_head, len(TAGGING_VOCAB))
    path = export_tagging(model, tokenizer, task.labels, task.scheme, SEQ, str(tmp_path / "export"),
                          segment_id=task.segment_id)
    return model, tokenizer, task, path, TaggingServer


def test_classifier_export_is_portable_and_predicts_as_the_trained_model(classifier):
    model, tokenizer, path, server_class = classifier
    served = check_portable(path, ["text"])(text=tf.constant(CLASSIFIER_TEXTS))
    trained = server_class(model, tokenizer, ["neg", "neutral", "pos"], SEQ)
    assert_same_outputs(served, tf.function(trained.predict)(tf.constant(CLASSIFIER_TEXTS)))


def test_squad_export_is_portable_and_answers_as_the_trained_model(squad):
    model, tokenizer, settings, path, server_class = squad
    questions, contexts = tf.constant(SQUAD_QUESTIONS), tf.constant(SQUAD_CONTEXTS)
    served = check_portable(path, ["question", "context"])(question=questions, context=contexts)
    expected = tf.function(server_class(model, tokenizer, settings).answer)(questions, contexts)
    assert_same_outputs(served, expected)


def test_tagging_export_is_portable_and_tags_as_the_trained_model(tagger):
    model, tokenizer, task, path, server_class = tagger
    served = check_portable(path, ["text"])(text=tf.constant(TAGGING_TEXTS))
    trained = server_class(model, tokenizer, task.labels, task.scheme, SEQ, task.segment_id)
    assert_same_outputs(served, tf.function(trained.tag)(tf.constant(TAGGING_TEXTS)))


def test_a_mixed_precision_model_serves_its_float32_outputs(tmp_path):
    """The serving model computes in float32 whatever precision trained the weights."""
    from electra_tf.serving.classifier import ClassifierServer, export_classifier

    tokenizer = write_vocab(tmp_path / "vocab.txt", CLASSIFIER_VOCAB)
    head = lambda config: ClassificationHead(2, name="classification_head")  # noqa: E731
    trained = trained_model(head, len(CLASSIFIER_VOCAB), policy="mixed_bfloat16")
    assert trained.encoder.compute_dtype == "bfloat16"
    path = export_classifier(trained, tokenizer, ["0", "1"], SEQ, str(tmp_path / "export"), False)
    float32 = trained_model(head, len(CLASSIFIER_VOCAB), seed=4)
    float32.set_weights(trained.get_weights())
    served = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(CLASSIFIER_TEXTS))
    expected = tf.function(ClassifierServer(float32, tokenizer, ["0", "1"], SEQ).predict)(
        tf.constant(CLASSIFIER_TEXTS))
    assert_same_outputs(served, expected)


LIST_OPS = """
import json, sys
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry  # TensorFlow's own ops only: tensorflow_text not imported
unknown = set()
for path in sys.argv[1:]:
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(path + "/saved_model.pb", "rb").read())
    for graph in proto.meta_graphs:
        library = graph.graph_def.library.function
        names = {f.signature.name for f in library}
        nodes = list(graph.graph_def.node) + [n for f in library for n in f.node_def]
        unknown |= {n.op for n in nodes if n.op not in names and op_def_registry.get(n.op) is None}
print(json.dumps(sorted(unknown)))
"""


def test_the_exports_need_only_tensorflow_and_the_tf_text_ops_tf_serving_links(classifier, squad, tagger):
    paths = [classifier[2], squad[3], tagger[3]]
    result = subprocess.run([sys.executable, "-c", LIST_OPS, *paths], capture_output=True, text=True, timeout=300,
                            cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert set(json.loads(result.stdout.strip().splitlines()[-1])) <= TF_TEXT_OPS


# ---- the weights-plus-config exports ------------------------------------------------------------

EXECUTION_KEYS = {"kernels", "dropout_masks", "sampling", "adam_kernel", "jit_compile", "graph_optimizer", "step_loop",
                  "execution", "fused_kernels", "adam_fused_kernel", "fused"}


def json_keys(value):
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in json_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in json_keys(v)}
    return set()


def config_texts(directory):
    """Every JSON file under `directory`, and those inside its `.keras` archives, as (name, text)."""
    for parent, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(parent, name)
            if name.endswith(".json"):
                yield path, open(path, encoding="utf-8").read()
            elif name.endswith(".keras"):
                with zipfile.ZipFile(path) as archive:
                    for member in archive.namelist():
                        if member.endswith(".json"):
                            yield f"{path}:{member}", archive.read(member).decode("utf-8")


def test_weights_plus_config_exports_hold_no_execution_options(tmp_path):
    """Ours (`electra_config.json`, `discriminator.keras`, the keras-hub preset), Hugging Face's, and a `.keras` file
    and keras-hub preset written from an encoder that computes with the XLA:CPU kernels: none says how it computed."""
    from electra_tf.convert import load_any
    from electra_tf.convert.hf import save_hf
    from electra_tf.convert.keras_hub_preset import save_keras_hub_preset
    from electra_tf.convert.export_dir import save_ours

    config, pretrainer, vocab = load_any(os.path.join(ROOT, "tests", "fixtures", "hf_electra"))
    save_ours(pretrainer, str(tmp_path / "ours"), vocab)
    save_hf(pretrainer, config, str(tmp_path / "hf"), vocab)
    encoder = ElectraEncoder.from_config_object(config, execution=XLA_CPU)
    encoder.build()
    assert encoder.execution.kernels == "xla_cpu"
    (tmp_path / "xla").mkdir()
    encoder.save(tmp_path / "xla" / "encoder.keras")
    save_keras_hub_preset(encoder, config, str(tmp_path / "xla" / "keras_hub"), vocab)
    texts = dict(config_texts(tmp_path))
    assert {os.path.relpath(name, tmp_path) for name in texts} >= {
        "ours/electra_config.json", "ours/discriminator.keras:config.json", "ours/keras_hub/config.json",
        "hf/discriminator/config.json", "xla/encoder.keras:config.json", "xla/keras_hub/config.json"}
    for name, text in texts.items():
        assert "xla_cpu" not in text and not json_keys(json.loads(text)) & EXECUTION_KEYS, name
