"""Token tagging (`--task=ner/chunk/tagging`): first-WordPiece labels, windows, BIOES, scores, files, errors."""

import json
import random

import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver

import run_finetuning
from electra_tf.config import get_config
from electra_tf.finetuning import conll, tagging, tagging_metrics
from electra_tf.finetuning.registry import get_task
from electra_tf.finetuning.task import EvalSet
from electra_tf.text.tokenization import WordPieceTokenizer

FLAGS = flags.FLAGS
WORDS = ["peter", "black", "##burn", "eu", "rejects", "german", "call", "to", "boy", "##cott", "british", "lamb",
         "in", "paris", "said", "the", "play", "##ing", "1996", "08", "22"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "-"] + WORDS
TINY = json.dumps({"num_layers": 1, "hidden_size": 16, "embedding_size": 8, "num_heads": 2,
                   "intermediate_size": 32, "max_position_embeddings": 64, "max_seq_length": 32})

# (word, POS, chunk, NER) rows of a few sentences; "1996-08-22" is 5 pieces, "Zorblax" and "\u200b" unknown.
SENTENCES = [
    [("EU", "NNP", "B-NP", "B-ORG"), ("rejects", "VBZ", "B-VP", "O"), ("German", "JJ", "B-NP", "B-MISC"),
     ("call", "NN", "I-NP", "O"), ("to", "TO", "B-VP", "O"), ("boycott", "VB", "I-VP", "O"),
     ("British", "JJ", "B-NP", "B-MISC"), ("lamb", "NN", "I-NP", "O"), (".", ".", "O", "O")],
    [("Peter", "NNP", "B-NP", "B-PER"), ("Blackburn", "NNP", "I-NP", "I-PER")],
    [("Paris", "NNP", "B-NP", "B-LOC"), ("1996-08-22", "CD", "I-NP", "O"), ("Zorblax", "NNP", "I-NP", "B-PER"),
     ("\u200b", "NNP", "I-NP", "O")],
]


def conll_text(sentences, docstart=True):
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for rows in sentences:
        lines += [" ".join(row) for row in rows] + [""]
    return "\n".join(lines)


@pytest.fixture
def tokenizer(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return WordPieceTokenizer(str(path))


def random_sentences(rng, count, min_words=1, max_words=30):
    """Random CoNLL rows (words from the vocabulary, some of several pieces) with IOB2 NER tags."""
    words = ["peter", "blackburn", "eu", "boycott", "playing", "paris", "1996-08-22", "the", ".", "qqq"]
    sentences = []
    for _ in range(count):
        rows, previous = [], "O"
        for _ in range(rng.randint(min_words, max_words)):
            kind = rng.choice(["O", "O", "B", "I"])
            chunk_type = rng.choice(["PER", "LOC"])
            if kind == "I" and previous != "O":
                tag = "I-" + previous[2:]
            elif kind in ("B", "I"):
                tag = "B-" + chunk_type
            else:
                tag = "O"
            rows.append((rng.choice(words), "NN", "B-NP", tag))
            previous = tag
        sentences.append(rows)
    return sentences


def as_sentences(rows_list, column=3):
    return [([r[0] for r in rows], [r[column] for r in rows]) for rows in rows_list]


# ---- label encodings ---------------------------------------------------------------------------

def random_iob2(rng, length):
    tags, previous = [], "O"
    for _ in range(length):
        choice = rng.random()
        if choice < 0.4:
            tag = "O"
        elif choice < 0.7 and previous != "O":
            tag = "I-" + previous[2:]
        else:
            tag = "B-" + rng.choice("XYZ")
        tags.append(tag)
        previous = tag
    return tags


def test_bioes_round_trips_iob1_and_iob2():
    rng = random.Random(0)
    for _ in range(500):
        iob2 = random_iob2(rng, rng.randint(1, 12))
        spans = tagging_metrics.chunks(iob2)
        bioes = tagging.to_bioes(iob2)
        assert tagging.bioes_spans(bioes) == spans
        assert tagging.from_bioes(bioes, "iob2") == iob2
        iob1 = tagging.from_bioes(bioes, "iob1")
        assert tagging_metrics.chunks(iob1) == spans and not any(  # B- only right after a chunk of its type
            t.startswith("B-") and (i == 0 or iob1[i - 1][2:] != t[2:]) for i, t in enumerate(iob1))
        assert tagging.to_bioes(iob1) == bioes


def test_predicted_bioes_is_decoded_tolerantly():
    assert tagging.bioes_spans(["I-X", "E-X", "E-X", "O", "B-Y", "I-Z", "S-Y", "B-Y"]) == [
        ("X", 0, 1), ("X", 2, 2), ("Y", 4, 4), ("Z", 5, 5), ("Y", 6, 6), ("Y", 7, 7)]


# ---- features ----------------------------------------------------------------------------------

def test_labels_on_the_first_wordpiece_only(tokenizer):
    sentences = as_sentences(SENTENCES)
    task = tagging.TaggingTask("ner", label_column=3)
    task._sentences["train"] = sentences
    labels = task.labels
    assert labels == ["O", "B-PER", "E-PER", "S-LOC", "S-MISC", "S-ORG", "S-PER"]
    features = task.train_features(tokenizer, max_seq_length=32)
    for row, (words, tags) in enumerate(sentences):
        # Independent: a word's first piece sits after [CLS] and the pieces of the words before it,
        # counted by tokenising that prefix as one text (a word without pieces counts as one [UNK]).
        # The first piece of word k follows [CLS] and the pieces of the words before it, counted by tokenising
        # those words as one text (plus one [UNK] for each of them that has no piece of its own).
        without_pieces = [not tokenizer.tokenize([w])[0] for w in words]
        expected_positions = [1 + len(tokenizer.tokenize([" ".join(words[:k])])[0]) + sum(without_pieces[:k])
                              for k in range(len(words))]
        weights = features["label_weights"][row]
        assert np.flatnonzero(weights).tolist() == expected_positions
        bioes = tagging.to_bioes(tags)
        assert features["label_ids"][row, expected_positions].tolist() == [labels.index(t) for t in bioes]
        assert features["label_ids"][row, weights == 0].tolist() == [0] * int((weights == 0).sum())
        length = int(features["input_mask"][row].sum())
        assert features["input_ids"][row, 0] == tokenizer.cls_id and features["input_ids"][row, length - 1] == \
            tokenizer.sep_id
    ids = features["input_ids"][2].tolist()
    assert ids[2:7] == tokenizer.tokenize(["1996-08-22"])[0] and len(ids[2:7]) == 5  # all its pieces, label on the first
    assert ids[7] == ids[8] == tokenizer.unk_id  # the unknown word and the one without pieces: one [UNK] each
    assert any(without_pieces)


@pytest.mark.parametrize("segment_id", [0, 1])
def test_segment_id_on_every_real_token_and_0_on_padding(tokenizer, segment_id):
    task = get_task("ner", labels=["O", "B-PER", "E-PER", "S-LOC", "S-MISC", "S-ORG", "S-PER"],
                    tagging_segment_id=segment_id)
    task._sentences["train"] = as_sentences(SENTENCES + [[("peter", "NNP", "B-NP", "B-PER")] * 9])
    features = task.train_features(tokenizer, max_seq_length=12)  # windows of every length, some padded
    mask = features["input_mask"]
    assert mask.min() == 0 and mask.max() == 1 and len(set(mask.sum(axis=1).tolist())) > 2
    np.testing.assert_array_equal(features["segment_ids"], segment_id * mask)
    assert task.training_settings() == {"tagging_segment_id": segment_id}


def test_the_default_segment_id_is_the_official_1(tokenizer):
    assert FLAGS["tagging_segment_id"].default == 1 == tagging.DEFAULT_SEGMENT_ID
    for name in ("ner", "chunk", "tagging"):
        assert get_task(name).segment_id == 1
    features, _, _ = tagging.align_features(tokenizer, as_sentences(SENTENCES), 32)
    np.testing.assert_array_equal(features["segment_ids"], features["input_mask"])


def test_windows_predict_every_word_exactly_once(tokenizer):
    rng = random.Random(1)
    sentences = as_sentences(random_sentences(rng, 40, max_words=25)
                             + [[("1996-08-22", "CD", "O", "O")] * 3, [("peter", "NN", "O", "B-PER")] * 60])
    label_ids = [[rng.randrange(7) for _ in words] for words, _ in sentences]
    max_seq_length = 10
    features, meta, counts = tagging.align_features(tokenizer, sentences, max_seq_length, label_ids)
    assert features["input_ids"].shape == (len(meta), max_seq_length)
    assert counts["windows"] == len(meta) > len(sentences) and counts["split_sentences"] >= 2
    assert counts["sentences"] == len(sentences) and counts["words"] == sum(len(w) for w, _ in sentences)
    assert counts["cut_words"] == 0
    # The label at every first piece, read back per word, is each word's label: all words, once each.
    assert tagging.words_of(features["label_ids"], meta, [len(w) for w, _ in sentences]) == label_ids
    assert int(features["label_weights"].sum()) == counts["words"]
    # Windows are consecutive runs of whole words: the pieces of a sentence's windows are its pieces.
    pieces = tagging.word_pieces(tokenizer, sentences)
    by_sentence = {}
    for row, m in zip(features["input_ids"], meta):
        length = int((row != tokenizer.pad_id).sum())
        by_sentence.setdefault(m["sentence"], []).extend(row[1:length - 1].tolist())
    assert all(by_sentence[s] == [i for word in pieces[s] for i in word] for s in range(len(sentences)))


def test_a_word_longer_than_a_window_is_cut_but_predicted(tokenizer):
    sentences = [(["1996-08-22", "peter"], ["O", "B-PER"])]  # 5 pieces + 1, windows of 4
    features, meta, counts = tagging.align_features(tokenizer, sentences, 6, [[0, 1]])
    assert counts == {"sentences": 1, "words": 2, "windows": 2, "split_sentences": 1, "cut_words": 1}
    assert tagging.words_of(features["label_ids"], meta, [2]) == [[0, 1]]
    with pytest.raises(AssertionError, match="predicted twice"):
        tagging.words_of(np.concatenate([features["label_ids"], features["label_ids"][:1]]), meta + meta[:1], [2])


# ---- the task: scores and files from given logits ----------------------------------------------

def perfect_logits(task, eval_set, tokenizer, sentences, seq):
    """Logits that predict every word's gold label (BIOES) at its first piece."""
    index = {label: i for i, label in enumerate(task.labels)}
    gold = [[index[t] for t in task.encode_tags(tags)] for _, tags in sentences]
    features, _, _ = tagging.align_features(tokenizer, sentences, seq, gold)
    return 10.0 * np.eye(len(index))[features["label_ids"]]


@pytest.mark.parametrize("scheme", ["iob1", "iob2"])
def test_gold_logits_score_100_and_write_the_gold_file(tmp_path, tokenizer, scheme):
    rows = SENTENCES if scheme == "iob2" else [[(w, p, c, "I-" + t[2:] if t != "O" else t) for w, p, c, t in s]
                                               for s in SENTENCES]
    (tmp_path / "train.txt").write_text(conll_text(rows), encoding="utf-8")
    (tmp_path / "dev.txt").write_text(conll_text(rows), encoding="utf-8")
    task = get_task("ner", data_dir=str(tmp_path), tagging_scheme=scheme)
    eval_set = task.eval_sets(tokenizer, 8)[0]
    outputs = {"logits": perfect_logits(task, eval_set, tokenizer, eval_set.examples, 8)}
    scores = task.score(eval_set, outputs, str(tmp_path))
    assert scores["f1"] == scores["accuracy"] == scores["PER_f1"] == 100.0
    assert {"LOC_precision", "MISC_recall", "ORG_f1"} <= set(scores)
    written = conll.read_conll(str(tmp_path / "dev_predictions.txt"), label_column=2)
    assert written == conll.read_conll(str(tmp_path / "dev.txt"))
    assert task.data_summary()["dev"]["split_sentences"] == 2  # 10 and 8 pieces: two windows of 6 each


def test_generic_tagging_without_chunks_scores_token_accuracy(tmp_path, tokenizer):
    (tmp_path / "train.txt").write_text(conll_text(SENTENCES, docstart=False), encoding="utf-8")
    task = get_task("tagging", data_dir=str(tmp_path), tagging_label_column=1, tagging_scheme="none")
    assert task.labels == [".", "CD", "JJ", "NN", "NNP", "TO", "VB", "VBZ"] and task.main_metric_key() == "accuracy"
    sentences = task.sentences("train")
    eval_set = EvalSet("dev", sentences, {}, extra={"meta": tagging.align_features(tokenizer, sentences, 32)[1],
                                                    "prefix": "dev_"})
    logits = perfect_logits(task, eval_set, tokenizer, sentences, 32)
    logits[0, 1] = 0.0  # the first word ("EU", NNP) predicted as label 0, "."
    assert task.score(eval_set, {"logits": logits}) == {"accuracy": pytest.approx(100 * 14 / 15)}


def test_every_tagging_task_builds_a_per_token_head():
    config = get_config("tiny")
    for name, column in (("ner", 3), ("chunk", 2), ("tagging", -1)):
        task = get_task(name, labels=["O", "B-X", "E-X"])
        assert task.label_column == column and task.main_metric_key() == "f1"
        head = task.build_head(config)
        assert tuple(head(np.zeros((2, 5, 16), "float32"), {})["logits"].shape) == (2, 5, 3)


# ---- run_finetuning ----------------------------------------------------------------------------

def run_main(args):
    with flagsaver.flagsaver():
        FLAGS.unparse_flags()
        FLAGS(["run_finetuning.py"] + args)
        run_finetuning.main(["run_finetuning.py"])


@pytest.fixture
def conll_dir(tmp_path):
    rng = random.Random(2)
    root = tmp_path / "conll"
    root.mkdir()
    long_sentence = [[("peter", "NNP", "B-NP", "B-PER"), ("blackburn", "NNP", "I-NP", "I-PER")] * 12]
    for split, count in (("train", 24), ("dev", 6), ("test", 5)):
        sentences = SENTENCES + random_sentences(rng, count, max_words=6) + long_sentence  # 30 pieces at most
        (root / f"{split}.txt").write_text(conll_text(sentences), encoding="utf-8")
    return root


def _common(tmp_path, out):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return [f"--output_dir={tmp_path / out}", "--model_size=tiny", f"--hparams={TINY}", f"--vocab_file={vocab}",
            "--max_seq_length=32", "--train_batch_size=4", "--log_steps=1"]


def test_ner_end_to_end_then_predict_with_the_saved_labels(tmp_path, conll_dir):
    run_main(_common(tmp_path, "out") + ["--task=ner", f"--data_dir={conll_dir}", "--max_train_steps=3",
                                         "--do_predict"])
    out = tmp_path / "out"
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["main_metric"] == "f1" and summary["task"] == "ner"
    final = summary["runs"][0]["final"]
    assert {"precision", "recall", "f1", "accuracy", "PER_f1", "LOC_precision", "ORG_recall"} <= set(final)
    assert all(0.0 <= v <= 100.0 for v in final.values())
    for split in ("train", "dev", "test"):
        assert summary["data"][split]["split_sentences"] == 1 and summary["data"][split]["cut_words"] == 0
    for split in ("dev", "test"):
        predicted = conll.read_conll(str(out / f"{split}_predictions.txt"), label_column=2, tags="iob2")
        gold = conll.read_conll(str(out / f"{split}_predictions.txt"), label_column=1)
        assert gold == conll.read_conll(str(conll_dir / f"{split}.txt"))
        assert [w for w, _ in predicted] == [w for w, _ in gold]  # every word, once, in order
    saved = json.loads((out / tagging.LABELS_FILE).read_text())
    assert saved["labels"][0] == "O" and saved["encoding"] == "bioes" and "E-PER" in saved["labels"]
    assert saved["segment_id"] == 1 and json.loads((out / "run_settings.json").read_text())["tagging_segment_id"] == 1
    assert json.loads((out / "finetune_config.json").read_text())["task_settings"] == {"tagging_segment_id": 1}

    # Prediction only, from the fine-tuned weights and the saved labels (no train file here).
    only_dev = tmp_path / "only_dev"
    only_dev.mkdir()
    (only_dev / "dev.txt").write_text((conll_dir / "dev.txt").read_text())
    before = (out / "dev_predictions.txt").read_text()
    run_main(_common(tmp_path, "out") + ["--task=ner", f"--data_dir={only_dev}", "--do_train=false",
                                         "--do_predict"])
    assert (out / "dev_predictions.txt").read_text() == before
    assert json.loads((out / "metrics.json").read_text())["runs"][0]["final"] == final

    # Another segment id than the weights were trained with: refused, for prediction and for resuming.
    written = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    for args, message in ((["--do_train=false", f"--data_dir={only_dev}"],
                           "the model was trained with --tagging_segment_id=1, not 0"),
                          ([f"--data_dir={conll_dir}", "--max_train_steps=3"], "tagging_segment_id: 1 there vs 0 now")):
        with pytest.raises(SystemExit) as info:
            run_main(_common(tmp_path, "out") + ["--task=ner", "--tagging_segment_id=0", "--do_predict"] + args)
        assert message in str(info.value.code) and "\n" not in str(info.value.code)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == written


@pytest.mark.parametrize("text, message", [
    ("a NN B-NP B-PER\nb NN I-NP\n", "train.txt:2: 3 columns, expected 4 (as on line 1)"),
    ("a NN B-NP B-PER\nb NN I-NP E-PER\n", "train.txt:2: tag 'E-PER' is not IOB"),
    ("a NN B-NP B-PER\n\nb NN I-NP I-LOC\n", "train.txt:3: tag 'I-LOC' at the start of a sentence is not IOB2"),
    ("a NN B-NP B-PER\nb NN I-NP I-LOC\n", "train.txt:2: tag 'I-LOC' after 'B-PER' is not IOB2"),
    ("a\n", "train.txt:1: no label column 3 (the line has 1 columns)"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, conll_dir, text, message):
    (conll_dir / "train.txt").write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        run_main(_common(tmp_path, "out") + ["--task=ner", f"--data_dir={conll_dir}"])
    assert message in str(info.value.code) and "\n" not in str(info.value.code)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["2", "-1"])
def test_a_bad_segment_id_is_one_line_naming_the_flag(tmp_path, conll_dir, value):
    with pytest.raises(SystemExit) as info:
        run_main(_common(tmp_path, "out") + ["--task=ner", f"--data_dir={conll_dir}", f"--tagging_segment_id={value}"])
    assert str(info.value.code) == f"run_finetuning.py: error: --tagging_segment_id: {value} is not 0 or 1"
    assert not (tmp_path / "out").exists()


def test_bad_dev_file_and_iob1_accepted_with_its_flag(tmp_path, conll_dir):
    (conll_dir / "dev.txt").write_text("a NN B-NP I-PER\n", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        run_main(_common(tmp_path, "out") + ["--task=ner", f"--data_dir={conll_dir}"])
    assert "dev.txt:1: tag 'I-PER' at the start of a sentence is not IOB2" in str(info.value.code)
    assert get_task("ner", data_dir=str(conll_dir), tagging_scheme="iob1").sentences("dev") == [(["a"], ["I-PER"])]
    assert not (tmp_path / "out").exists()


@pytest.mark.data
def test_shared_conll2003_windows_cover_every_word(shared_data):
    vocab = shared_data / "vocab" / "en_uncased" / "vocab.txt"
    if not (shared_data / "conll2003" / "dev.txt").is_file() or not vocab.is_file():
        pytest.skip("CoNLL-2003 or the en_uncased vocab is absent from ../shared/data")
    task = get_task("ner", data_dir=str(shared_data / "conll2003"))
    tokenizer = WordPieceTokenizer(str(vocab))
    eval_set = task.eval_sets(tokenizer, 32)[0]
    counts = task.data_summary()["dev"]
    assert (counts["sentences"], counts["words"]) == (3250, 51362) and counts["split_sentences"] > 0
    lengths = [len(w) for w, _ in eval_set.examples]
    predicted = tagging.words_of(np.ones_like(eval_set.features["input_ids"]), eval_set.extra["meta"], lengths)
    assert [len(p) for p in predicted] == lengths
    assert len(task.labels) == 1 + 4 * 4  # O and B/I/E/S of PER, LOC, ORG, MISC
