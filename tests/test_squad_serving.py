"""The SQuAD SavedModel (question + context in, answer out) answers as run_finetuning's Python decoding does,
and `python -m electra_tf.ask` asks it."""

import json
import os
import subprocess
import sys

import keras
import pytest
import tensorflow as tf

from electra_tf.serving.squad import NO_SPAN_TEXT
from test_finetuning_run import TINY, run_main
from test_serving import ROOT
from test_squad_features import CONTEXT_1, CONTEXT_2, VOCAB, squad_json

# Multi-space and newline gaps, accents, unknown words, "##s" pieces, punctuation inside words, a long document.
CONTEXTS = [
    CONTEXT_1,
    CONTEXT_2,
    "  Steve  Smith's\ncat   sat on the mat.\tThe tower was built by Gustave Eiffel in 1895.  ",
    "Héllo Paris! The capital of France is Paris, and Zürich (Suisse) is not; cats sat.",
    " ".join(["The cat sat on the mat in 1895, who was Steve Smith's cat?"] * 6),
    "Eiffel-tower's builder: Gustave Eiffel (1832–1923).",
    " \n ",  # no document token: no window, the official nonce answer
]
QUESTIONS = ["Who sat on the mat?", "What year was the tower built?", "Who built the tower?",
             "What is the capital of France?", "Where did the cat sit?", "Who was born in 1895?"]


def dev_json(v2):
    paragraphs = [{"context": c, "qas": [{"id": f"c{i}q{j}", "question": q, "is_impossible": False,
                                          "answers": [{"text": c[:1], "answer_start": 0}]}
                                         for j, q in enumerate(QUESTIONS)]}
                  for i, c in enumerate(CONTEXTS)]
    return {"version": "2.0" if v2 else "1.1", "data": [{"title": "T", "paragraphs": paragraphs}]}


def finetune_and_export(tmp_path, task, data_file=None, extra=()):
    data_dir = tmp_path / "squad"
    data_dir.mkdir(exist_ok=True)
    v2 = task == "squad_v2"
    suffix = "v2.0" if v2 else "v1.1"
    (data_dir / f"train-{suffix}.json").write_text(json.dumps(squad_json(v2)), encoding="utf-8")
    dev = data_file or data_dir / f"dev-{suffix}.json"
    if data_file is None:
        dev.write_text(json.dumps(dev_json(v2)), encoding="utf-8")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    out, export = tmp_path / task, tmp_path / f"{task}_serving"
    run_main([f"--output_dir={out}", "--model_size=tiny", f"--hparams={TINY}", f"--vocab_file={vocab}",
              "--train_batch_size=4", f"--task={task}", f"--data_dir={data_dir}", f"--dev_file={dev}",
              "--max_train_steps=2", "--max_seq_length=32", "--doc_stride=8", "--max_query_length=8",
              "--do_eval=false", "--do_predict", f"--export_saved_model={export}", *extra])
    return out, export


def check_offsets(served, contexts):
    for answer, start, end, context in zip(served.get("best_span", served["answer"]), served["start"], served["end"],
                                           contexts):
        if start >= 0:  # the text has the context's whitespace runs as single spaces
            assert " ".join(context[start:end].split()) == answer


def check_against_python(served, ids, contexts, predictions, nbest, null_odds=None):
    """Answers equal; scores and null odds up to the model's batch-dependent float noise."""
    assert served["answer"] == [predictions[i] for i in ids]
    for qid, score, span in zip(ids, served["score"], served.get("best_span", served["answer"])):
        top = nbest[qid][0]
        assert span == top["text"] and score == pytest.approx(top["start_logit"] + top["end_logit"], abs=1e-4)
    if null_odds is not None:
        assert served["null_odds"] == pytest.approx([null_odds[i] for i in ids], abs=1e-4)
    check_offsets(served, contexts)


def as_python(outputs):
    return {k: [x.decode("utf-8") for x in v.numpy()] if v.dtype == tf.string else v.numpy().tolist()
            for k, v in outputs.items()}


LOAD_AND_ASK = """
import json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401 (registers the tokenizer ops)
args = json.loads(sys.argv[1])
out = tf.saved_model.load(args["path"]).signatures["serving_default"](
    question=tf.constant(args["questions"]), context=tf.constant(args["contexts"]))
print(json.dumps({k: [x.decode() for x in v.numpy()] if v.dtype == tf.string else v.numpy().tolist()
                  for k, v in out.items()}))
"""


def fresh_process_answers(path, questions, contexts):
    result = subprocess.run([sys.executable, "-c", LOAD_AND_ASK, json.dumps(
        {"path": str(path), "questions": questions, "contexts": contexts})], capture_output=True, text=True,
        timeout=600, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def questions_of(data):
    rows = [(qa["question"], p["context"], qa["id"]) for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]
    return [list(column) for column in zip(*rows)]


def tiny_squad_model(tmp_path, joint):
    from electra_tf.config import get_config
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.squad.task import SquadTask
    from electra_tf.model.encoder import ElectraEncoder
    from electra_tf.text.tokenization import WordPieceTokenizer

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    keras.utils.set_random_seed(2)
    hparams = json.dumps({**json.loads(TINY), "squad_beam_size": 5, "squad_joint_prediction": joint})
    config = get_config("tiny", hparams, vocab_size=len(VOCAB))
    head = SquadTask().build_head(config)
    return FinetuningModel(ElectraEncoder.from_config_object(config), head).build_all(32), WordPieceTokenizer(str(vocab))


def python_decoding(model, tokenizer, v2, tmp_path):
    """run_finetuning's path: SquadTask features, the Keras model, decode_predictions, the null threshold."""
    from electra_tf.finetuning.predict import predict
    from electra_tf.finetuning.squad.task import SquadTask, apply_null_threshold

    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps(dev_json(v2)), encoding="utf-8")
    task = SquadTask(v2=v2, file_overrides={"dev": str(dev)}, doc_stride=8, max_query_length=8)
    eval_set = task.eval_sets(tokenizer, 32)[0]
    predictions, nbest, null_odds = task._decode(eval_set, predict(model, eval_set.features, 8))
    if v2:
        predictions = apply_null_threshold(predictions, null_odds, task.null_score_threshold)
    return task, predictions, nbest, (null_odds if v2 else None)


def settings_of(task):
    from electra_tf.serving.squad import SquadServingSettings
    return SquadServingSettings(32, task.doc_stride, task.max_query_length, task.max_answer_length, task.n_best_size,
                                task.v2, task.null_score_threshold)


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    """A tiny joint-head SQuAD 1.1 model's SavedModel and the Python decoding of the dev questions."""
    from electra_tf.serving.squad import export_squad

    tmp_path = tmp_path_factory.mktemp("squad_serving")
    model, tokenizer = tiny_squad_model(tmp_path, joint=True)
    task, *decoded = python_decoding(model, tokenizer, False, tmp_path)
    return export_squad(model, tokenizer, settings_of(task), str(tmp_path / "export")), decoded


def test_saved_model_answers_as_the_python_decoding(tiny_export):
    export, (predictions, nbest, _) = tiny_export
    questions, contexts, ids = questions_of(dev_json(False))
    signature = tf.saved_model.load(export).signatures["serving_default"]
    out = signature(question=tf.constant(questions), context=tf.constant(contexts))
    served = as_python(out)
    check_against_python(served, ids, contexts, predictions, nbest)


def test_a_context_without_words_gets_the_nonce_answer_alone_and_in_a_batch(tiny_export):
    """No document token, no window in the Python path: "empty", whichever questions share the batch (it crashed
    the whole batch when alone)."""
    signature = tf.saved_model.load(tiny_export[0]).signatures["serving_default"]
    for contexts in ([" \n "], [CONTEXTS[0], " \n "]):
        served = as_python(signature(question=tf.constant(QUESTIONS[:len(contexts)]), context=tf.constant(contexts)))
        assert (served["answer"][-1], served["start"][-1], served["end"][-1]) == (NO_SPAN_TEXT, -1, -1)


@pytest.mark.parametrize("joint, v2", [(True, True), pytest.param(False, False, marks=pytest.mark.slow),
                                       pytest.param(False, True, marks=pytest.mark.slow)])
def test_graph_answers_as_the_python_decoding(tmp_path, joint, v2):
    """The other heads and 2.0 (the same graph, traced without the export)."""
    from electra_tf.serving.squad import SquadServer

    model, tokenizer = tiny_squad_model(tmp_path, joint)
    task, predictions, nbest, null_odds = python_decoding(model, tokenizer, v2, tmp_path)
    questions, contexts, ids = questions_of(dev_json(v2))
    out = tf.function(SquadServer(model, tokenizer, settings_of(task)).answer)(tf.constant(questions),
                                                                               tf.constant(contexts))
    served = as_python(out)
    check_against_python(served, ids, contexts, predictions, nbest, null_odds)


def run_ask(*args):
    return subprocess.run([sys.executable, "-m", "electra_tf.ask", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)


def test_ask_prints_the_saved_models_answer(tiny_export, tmp_path):
    export, (predictions, _, _) = tiny_export
    context_file = tmp_path / "context.txt"
    context_file.write_text(CONTEXTS[0], encoding="utf-8")
    result = run_ask("--model", export, "--question", QUESTIONS[0], "--context_file", str(context_file), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    answer = json.loads(result.stdout)
    assert answer["answer"] == predictions["c0q0"] and CONTEXTS[0][answer["start"]:answer["end"]] == answer["answer"]


def test_ask_prints_one_line():
    from electra_tf.ask import render

    assert render({"answer": "Paris", "score": -1.23456, "start": 0, "end": 5}, False) == "Paris\tscore=-1.2346"
    assert render({"answer": "", "best_span": "Paris", "null_odds": 0.5, "score": -1.0, "start": 0, "end": 5},
                  False) == "(no answer)\tnull_odds=0.5000\tbest_span='Paris'"


@pytest.mark.slow
@pytest.mark.parametrize("task", ["squad", "squad_v2"])
def test_run_finetuning_export_answers_as_its_predictions_in_a_fresh_process(tmp_path, task):
    out, export = finetune_and_export(tmp_path, task)
    questions, contexts, ids = questions_of(dev_json(task == "squad_v2"))
    served = fresh_process_answers(export, questions, contexts)
    read = lambda name: json.loads((out / name).read_text(encoding="utf-8"))  # noqa: E731
    check_against_python(served, ids, contexts, read("predictions.json"), read("nbest_predictions.json"),
                         read("null_odds.json") if task == "squad_v2" else None)


@pytest.mark.parametrize("args, message", [
    (["--model", "/no/such/model", "--question", "q", "--context", "c"], "no SavedModel at /no/such/model"),
    (["--model", ".", "--question", "q", "--context_file", "/no/such/file"], "--context_file: cannot read"),
    (["--model", ".", "--question", "q"], "one of --context or --context_file"),
])
def test_ask_refuses_bad_input_in_one_line(args, message):
    result = run_ask(*args)
    assert result.returncode == 2 and message in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        result.stderr.strip().splitlines()[-1]]  # one line of ours (TensorFlow may log before it)


def test_ask_refuses_a_saved_model_that_is_not_a_squad_export(tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda text: {"label": text}, input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    tf.saved_model.save(module, str(tmp_path / "classifier"), signatures=module.f)
    result = run_ask("--model", str(tmp_path / "classifier"), "--question", "q", "--context", "c")
    assert result.returncode == 2 and "is not a SQuAD export" in result.stderr.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.data
def test_squad_dev_questions_answer_as_the_python_decoding(shared_data, tmp_path):
    dev = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    dev["data"] = dev["data"][:1]
    dev["data"][0]["paragraphs"] = dev["data"][0]["paragraphs"][:4]
    small = tmp_path / "dev-small.json"
    small.write_text(json.dumps(dev), encoding="utf-8")
    vocab = shared_data / "vocab" / "en_uncased" / "vocab.txt"
    if not vocab.exists():
        pytest.skip(f"{vocab} is absent")
    out, export = finetune_and_export(tmp_path, "squad", small, [f"--vocab_file={vocab}"])
    questions, contexts, ids = questions_of(dev)
    served = fresh_process_answers(export, questions, contexts)
    read = lambda name: json.loads((out / name).read_text(encoding="utf-8"))  # noqa: E731
    check_against_python(served, ids, contexts, read("predictions.json"), read("nbest_predictions.json"))


FINAL_TEXT_CASES = [("steve smith", "Steve Smith's"), ("smith", "Mr. Smith,"), ("bc", "abcabc"),
                    ("wörds", "Ünïcödé WÖRDS ö"), ("cat", "dog"), ("", "anything"), ("a b", "a  b"),
                    ("hello", "hello hello"), ("東京", "in 東京 today"), ("1990", "(1990)"), ("x", "")]


def test_graph_final_text_equals_the_python_decodings():
    """`get_final_text_tf` (its `_find_first` vectorised over byte offsets) against `decoding.get_final_text`, on
    matches at the start, repeated, after multi-byte characters, absent, and empty needles and haystacks."""
    from electra_tf.finetuning.squad.decoding import get_final_text
    from electra_tf.serving.squad import _BasicJoiner, _find_first, get_final_text_tf

    preds, origs = zip(*FINAL_TEXT_CASES)
    text, _, _ = get_final_text_tf(tf.constant(preds), tf.constant(origs), _BasicJoiner(True))
    assert [t.decode() for t in text.numpy()] == [get_final_text(p, o, True) for p, o in FINAL_TEXT_CASES]
    found, prefix = _find_first(tf.constant(origs), tf.constant(preds))
    for (needle, haystack), hit, before in zip(FINAL_TEXT_CASES, found.numpy(), prefix.numpy()):
        if needle:  # str.find; an empty needle is discarded by the caller
            at = haystack.find(needle)
            assert (bool(hit), before.decode()) == (at >= 0, haystack[:max(at, 0)]), (needle, haystack)
