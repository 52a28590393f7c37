"""The SQuAD SavedModel (question + context in, answer out) answers as run_finetuning's Python decoding does,
and `python -m electra_tf.ask` asks it."""

import json
import os
import subprocess
import sys

import pytest

from test_finetuning_run import TINY, run_main
from test_serving import ROOT, fresh_process_predictions
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


def served_and_python(out, export, data):
    questions, contexts, ids = [], [], []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                questions.append(qa["question"])
                contexts.append(paragraph["context"])
                ids.append(qa["id"])
    served = fresh_process_predictions(export, {"question": questions, "context": contexts})
    predictions = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
    return served, [predictions[i] for i in ids], ids, contexts


def check_offsets(served, contexts):
    for answer, start, end, context in zip(served.get("best_span", served["answer"]), served["start"], served["end"],
                                           contexts):
        if start >= 0:  # the text has the context's whitespace runs as single spaces
            assert " ".join(context[start:end].split()) == answer


@pytest.mark.parametrize("task", ["squad", "squad_v2"])
def test_saved_model_answers_as_the_python_decoding(tmp_path, task):
    out, export = finetune_and_export(tmp_path, task)
    served, expected, ids, contexts = served_and_python(out, export, dev_json(task == "squad_v2"))
    assert served["answer"] == expected
    nbest = json.loads((out / "nbest_predictions.json").read_text(encoding="utf-8"))
    for qid, score, span in zip(ids, served["score"], served.get("best_span", served["answer"])):
        top = nbest[qid][0]
        assert span == top["text"] and score == pytest.approx(top["start_logit"] + top["end_logit"], abs=1e-9)
    if task == "squad_v2":
        null_odds = json.loads((out / "null_odds.json").read_text())
        assert served["null_odds"] == pytest.approx([null_odds[i] for i in ids], abs=1e-9)
    check_offsets(served, contexts)
    ask = subprocess.run([sys.executable, "-m", "electra_tf.ask", "--model", str(export), "--question", QUESTIONS[0],
                          "--context", CONTEXTS[0], "--json"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert ask.returncode == 0, ask.stderr[-2000:]
    assert json.loads(ask.stdout)["answer"] == served["answer"][0]


@pytest.mark.parametrize("args, message", [
    (["--model", "/no/such/model", "--question", "q", "--context", "c"], "no SavedModel at /no/such/model"),
    (["--model", ".", "--question", "q", "--context_file", "/no/such/file"], "--context_file: cannot read"),
    (["--model", ".", "--question", "q"], "one of --context or --context_file"),
])
def test_ask_refuses_bad_input_in_one_line(args, message):
    result = subprocess.run([sys.executable, "-m", "electra_tf.ask", *args], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


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
    served, expected, _, contexts = served_and_python(out, export, dev)
    assert served["answer"] == expected
    check_offsets(served, contexts)
