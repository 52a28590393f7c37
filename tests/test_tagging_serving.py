"""The tagging SavedModel (text in, tags and entities out) tags as run_finetuning's Python prediction path does,
its entities are conlleval's chunks of those tags, and `python -m electra_tf.tag` prints them."""

import json
import os
import random
import subprocess
import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.finetuning import conll, tagging, tagging_metrics
from electra_tf.serving.tagging import BEGIN, OUTSIDE, TaggingServer, decode_bioes, iob_chunks, label_codes
from test_serving import ROOT
from test_tagging import SENTENCES, TINY, VOCAB, as_sentences, conll_text, random_sentences, run_main

SEQ = 32
# A sentence of 36 pieces (two windows of whole words) and a word of 31 pieces (alone in its window, cut).
LONG = [("peter", "NNP", "B-NP", "B-PER"), ("blackburn", "NNP", "I-NP", "I-PER")] * 12
CUT = [("eu", "NNP", "B-NP", "B-ORG"), ("-".join(["08"] * 16), "CD", "I-NP", "O"), ("paris", "NNP", "B-NP", "B-LOC")]


def sentences_of(count, seed):
    return SENTENCES + random_sentences(random.Random(seed), count, max_words=8) + [LONG, CUT]


def texts_of(sentences):
    """Each sentence's words joined by varied whitespace (what str.split() undoes)."""
    gaps = [" ", "  ", "\t", " \u3000 "]
    return ["".join(w + gaps[i % len(gaps)] for i, (w, *_) in enumerate(rows)).rstrip() for rows in sentences]


def padded(values, count):
    return [row[:n] for row, n in zip(values, count)]


def as_python(outputs):
    decode = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])  # astype(str) would read ASCII only
    return {k: decode(v.numpy()).tolist() if v.dtype == tf.string else v.numpy().tolist() for k, v in outputs.items()}


LOAD_AND_TAG = """
import json, sys
import numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401 (registers the tokenizer ops)
args = json.loads(sys.argv[1])
out = tf.saved_model.load(args["path"]).signatures["serving_default"](text=tf.constant(args["texts"]))
decode = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])
print(json.dumps({k: (decode(v.numpy()) if v.dtype == tf.string else v.numpy()).tolist() for k, v in out.items()}))
"""


def fresh_process_tags(path, texts):
    result = subprocess.run([sys.executable, "-c", LOAD_AND_TAG, json.dumps({"path": str(path), "texts": texts})],
                            capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def check_entities(served, texts):
    """Entities are tagging_metrics' chunks of the served tags; offsets slice the text."""
    tags = padded(served["tags"], served["num_words"])
    for i, text in enumerate(texts):
        n = served["num_entities"][i]
        chunks = list(zip(served["entity_type"][i][:n], served["entity_first_word"][i][:n],
                          served["entity_last_word"][i][:n]))
        assert chunks == tagging_metrics.chunks(tags[i])
        for k in range(n):
            first, last = served["entity_first_word"][i][k], served["entity_last_word"][i][k]
            start, end = served["entity_start"][i][k], served["entity_end"][i][k]
            assert text[start:end] == served["entity_text"][i][k]
            assert (start, end) == (served["word_start"][i][first], served["word_end"][i][last])
        words = padded(served["words"], served["num_words"])[i]
        assert words == text.split() and [text[s:e] for s, e in zip(served["word_start"][i], served["word_end"][i])
                                          if s >= 0] == words


# ---- decoding ----------------------------------------------------------------------------------

def flat_codes(sequences, labels):
    prefixes, type_ids, types = label_codes(labels)
    ids = [labels.index(t) for tags in sequences for t in tags]
    position = [i for tags in sequences for i in range(len(tags))]
    lengths = [len(tags) for tags in sequences for _ in tags]
    is_first = tf.constant([p == 0 for p in position])
    is_last = tf.constant([p == n - 1 for p, n in zip(position, lengths)])
    return tf.gather(prefixes, ids), tf.gather(type_ids, ids), is_first, is_last, types


def as_tags(prefix, type_id, types):
    names = {OUTSIDE: "O", BEGIN: "B", 2: "I"}
    return [names[p] if p == OUTSIDE else f"{names[p]}-{types[t]}" for p, t in zip(prefix, type_id)]


def split_back(flat, sequences):
    out, offset = [], 0
    for tags in sequences:
        out.append(flat[offset:offset + len(tags)])
        offset += len(tags)
    return out


@pytest.mark.parametrize("scheme", ["iob1", "iob2"])
def test_graph_decoding_and_chunks_equal_the_python_functions(scheme):
    labels = ["O"] + [f"{p}-{t}" for t in ("LOC", "PER") for p in "BIES"]
    rng = random.Random(3)
    sequences = [[rng.choice(labels) for _ in range(rng.randint(1, 9))] for _ in range(300)]
    prefix, type_id, is_first, is_last, types = flat_codes(sequences, labels)
    decoded = decode_bioes(prefix, type_id, is_first, is_last, scheme)
    tags = split_back(as_tags(decoded.numpy(), type_id.numpy(), types), sequences)
    assert tags == [tagging.from_bioes(s, scheme) for s in sequences]
    starts, ends = iob_chunks(decoded, type_id, is_first, is_last)
    firsts, lasts = split_back(starts.numpy().tolist(), sequences), split_back(ends.numpy().tolist(), sequences)
    for t, s, e in zip(tags, firsts, lasts):
        chunks = tagging_metrics.chunks(t)
        assert [i for i, x in enumerate(s) if x] == [c[1] for c in chunks]
        assert [i for i, x in enumerate(e) if x] == [c[2] for c in chunks]


def test_labels_that_are_not_bioes_are_refused():
    with pytest.raises(ValueError, match="label 'X-PER' is neither O nor BIOES"):
        label_codes(["O", "X-PER"])


# ---- the export against the Python path --------------------------------------------------------

@pytest.mark.parametrize("segment_id", [0, 1])
def test_served_features_equal_the_training_features(tmp_path, segment_id):
    from electra_tf.text.tokenization import WordPieceTokenizer

    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    tokenizer = WordPieceTokenizer(str(tmp_path / "vocab.txt"))
    sentences = as_sentences(sentences_of(8, seed=5))
    expected, _, _ = tagging.align_features(tokenizer, sentences, SEQ, segment_id=segment_id)
    server = TaggingServer(None, tokenizer, ["O"], "none", SEQ, segment_id)
    words = [w for sentence_words, _ in sentences for w in sentence_words]
    sentence = [s for s, (sentence_words, _) in enumerate(sentences) for _ in sentence_words]
    served, _, _ = server.window_features(tf.constant(words), tf.constant(sentence, tf.int64),
                                            tf.constant([len(w) for w, _ in sentences], tf.int64))
    assert set(served) == {"input_ids", "input_mask", "segment_ids"} and len(expected["input_ids"]) > len(sentences)
    for key, values in served.items():
        np.testing.assert_array_equal(values.numpy(), expected[key], err_msg=key)
    assert set(np.unique(expected["segment_ids"]).tolist()) == {0, segment_id}


def test_the_run_exports_with_the_trained_segment_id(monkeypatch):
    from electra_tf.serving import export
    from electra_tf.finetuning.registry import get_task
    from electra_tf.serving import tagging as serving_tagging

    exported = {}
    monkeypatch.setattr(serving_tagging, "export_tagging", lambda *args, **kwargs: exported.update(kwargs) or "p")
    for segment_id in (0, 1):
        task = get_task("ner", labels=["O", "S-PER"], tagging_segment_id=segment_id)
        export.export_tagging(None, task, None, types.SimpleNamespace(max_seq_length=SEQ, export_saved_model="p"))
        assert exported == {"segment_id": segment_id}

def python_tags(tmp_path, task_name, scheme, label_column, sentences):
    """A tiny random-weight tagger and run_finetuning's prediction path over `sentences` (dev and train)."""
    from electra_tf.config import get_config
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.predict import predict
    from electra_tf.finetuning.registry import get_task
    from electra_tf.model.encoder import ElectraEncoder
    from electra_tf.text.tokenization import WordPieceTokenizer

    for split in ("train", "dev"):
        (tmp_path / f"{split}.txt").write_text(conll_text(sentences), encoding="utf-8")
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    tokenizer = WordPieceTokenizer(str(tmp_path / "vocab.txt"))
    task = get_task(task_name, data_dir=str(tmp_path), tagging_scheme=scheme, tagging_label_column=label_column)
    keras.utils.set_random_seed(5)
    config = get_config("tiny", TINY, vocab_size=len(VOCAB))
    model = FinetuningModel(ElectraEncoder.from_config_object(config), task.build_head(config)).build_all(SEQ)
    eval_set = task.eval_sets(tokenizer, SEQ)[0]
    assert task.data_summary()["dev"]["split_sentences"] == 2 and task.data_summary()["dev"]["cut_words"] == 1
    return model, tokenizer, task, task.predicted_tags(eval_set, predict(model, eval_set.features, 8))


@pytest.fixture(scope="module")
def ner_export(tmp_path_factory):
    from electra_tf.serving.tagging import export_tagging

    tmp_path = tmp_path_factory.mktemp("tagging_serving")
    sentences = sentences_of(8, seed=4)
    model, tokenizer, task, predicted = python_tags(tmp_path, "ner", "iob2", None, sentences)
    path = export_tagging(model, tokenizer, task.labels, task.scheme, SEQ, str(tmp_path / "export"),
                          segment_id=task.segment_id)
    return tf.saved_model.load(path).signatures["serving_default"], texts_of(sentences), predicted


def test_saved_model_tags_as_the_python_path(ner_export):
    serve, texts, predicted = ner_export
    served = as_python(serve(text=tf.constant(texts)))
    assert padded(served["tags"], served["num_words"]) == predicted
    assert any(served["num_entities"]) and any(t != "O" for tags in predicted for t in tags)
    check_entities(served, texts)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["iob1", "none"])
def test_graph_tags_as_the_python_path_for_iob1_and_plain_tags(tmp_path, scheme):
    sentences = sentences_of(8, seed=6)
    if scheme == "iob1":
        sentences = [[(w, p, c, "I-" + t[2:] if t.startswith("B-") else t) for w, p, c, t in s] for s in sentences]
    task_name, column = ("ner", None) if scheme == "iob1" else ("tagging", 1)
    model, tokenizer, task, predicted = python_tags(tmp_path, task_name, scheme, column, sentences)
    texts = texts_of(sentences)
    server = TaggingServer(model, tokenizer, task.labels, scheme, SEQ, task.segment_id)
    served = as_python(tf.function(server.tag)(tf.constant(texts)))
    assert padded(served["tags"], served["num_words"]) == predicted
    if scheme == "none":
        assert "num_entities" not in served
    else:
        check_entities(served, texts)


def test_empty_texts_and_batches(ner_export):
    serve = ner_export[0]
    served = as_python(serve(text=tf.constant(["", " \t\n", "paris"])))
    assert served["num_words"] == [0, 0, 1] and served["words"] == [[""], [""], ["paris"]]
    assert as_python(serve(text=tf.constant([], tf.string)))["num_words"] == []


# ---- python -m electra_tf.tag ------------------------------------------------------------------

def tag_main(capsys, *args):
    from electra_tf import tag

    code = tag.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_tag_prints_the_entities(ner_export):
    from electra_tf.tag import render, tag

    serve, texts, predicted = ner_export
    for text, tags in zip(texts, predicted):
        result = json.loads(render(tag(serve, text), True))
        assert result["tags"] == tags and len(result["entity_type"]) == result["num_entities"]
        expected = [f"{k}\t{t}\t{s}:{e}" for k, t, s, e in zip(result["entity_type"], result["entity_text"],
                                                              result["entity_start"], result["entity_end"])]
        assert render(result, False).splitlines() == (expected or ["(no entities)"])


def test_tag_renders_plain_tags():
    from electra_tf.tag import render

    assert render({"words": ["EU", "rejects"], "tags": ["NNP", "VBZ"], "num_words": 2}, False) == "EU/NNP rejects/VBZ"
    assert render({"num_entities": 0, "words": [], "tags": []}, False) == "(no entities)"


@pytest.mark.parametrize("args, message", [
    (["--model", "/no/such/model", "--text", "t"], "no SavedModel at /no/such/model"),
    (["--model", ".", "--text_file", "/no/such/file"], "--text_file: cannot read"),
    (["--model", "."], "one of --text or --text_file"),
])
def test_tag_refuses_bad_input_in_one_line(args, message, capsys):
    code, out, err = tag_main(capsys, *args)
    assert code == 2 and out == "" and err.splitlines() == [err.strip()] and message in err


def test_tag_refuses_a_classifier_export(tmp_path, capsys):
    module = tf.Module()
    text = tf.TensorSpec([None], tf.string, name="text")
    module.f = tf.function(lambda text: {"label": text}, input_signature=[text])
    tf.saved_model.save(module, str(tmp_path / "classifier"), signatures=module.f)
    code, _, err = tag_main(capsys, "--model", str(tmp_path / "classifier"), "--text", "t")
    assert code == 2 and "is not a tagging export (its signature returns no num_words, tags, words)" in err


# ---- run_finetuning --export_saved_model ------------------------------------------------------

@pytest.mark.slow
def test_run_finetuning_export_tags_as_its_prediction_files_in_a_fresh_process(tmp_path):
    data = tmp_path / "conll"
    data.mkdir()
    for split, count, seed in (("train", 24, 1), ("dev", 6, 2), ("test", 5, 3)):
        (data / f"{split}.txt").write_text(conll_text(sentences_of(count, seed)), encoding="utf-8")
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    out, export = tmp_path / "out", tmp_path / "export"
    run_main([f"--output_dir={out}", "--model_size=tiny", f"--hparams={TINY}", f"--vocab_file={tmp_path / 'vocab.txt'}",
              f"--max_seq_length={SEQ}", "--train_batch_size=4", "--task=ner", f"--data_dir={data}",
              "--max_train_steps=3", "--do_predict", f"--export_saved_model={export}"])
    for split in ("dev", "test"):
        written = conll.read_conll(str(out / f"{split}_predictions.txt"), label_column=2)
        texts = [" ".join(words) for words, _ in written]
        served = fresh_process_tags(export, texts)
        assert padded(served["tags"], served["num_words"]) == [tags for _, tags in written]
        check_entities(served, texts)
    result = subprocess.run([sys.executable, "-m", "electra_tf.tag", "--model", str(export), "--text", texts[0],
                             "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["tags"] == written[0][1]
    np.testing.assert_equal(json.loads(result.stdout)["num_words"], len(written[0][0]))


def python_windows(sentence_counts, budget):
    """Each word's window (numbered across the batch) and first-piece position, from `tagging.word_windows`."""
    window, position, next_window = [], [], 0
    for counts in sentence_counts:
        ranges, _ = tagging.word_windows(counts, budget)
        for first, end in ranges:
            used = 1  # after [CLS]
            for i in range(first, end):
                window.append(next_window)
                position.append(used)
                used += counts[i]
            next_window += 1
    return window, position


@pytest.mark.parametrize("seed", range(4))
def test_served_windows_equal_word_windows_with_empty_and_long_sentences(seed):
    """The windows pack only the sentences longer than the budget word by word (a scan over their words); the
    others are one window each, a sentence without words none."""
    rng = np.random.default_rng(seed)
    budget = 10
    batches = [[list(rng.integers(1, budget + 1, size=rng.integers(0, 9))) for _ in range(7)],
               [[], [3, 3], [], [budget] * 3, []], [[]], [[budget, 1]], [[2, 2], [1]]]
    server = types.SimpleNamespace(budget=budget)  # all `_windows` reads of a server
    for sentence_counts in batches:
        counts = [c for sentence in sentence_counts for c in sentence]
        sentence = [s for s, sentence in enumerate(sentence_counts) for _ in sentence]
        served = TaggingServer._windows(server, tf.constant(counts, tf.int64), tf.constant(sentence, tf.int64),
                                        tf.constant([len(s) for s in sentence_counts], tf.int64))
        window, position = python_windows(sentence_counts, budget)
        assert served[0].numpy().tolist() == window, sentence_counts
        assert served[1].numpy().tolist() == position, sentence_counts
