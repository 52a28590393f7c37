"""The CoNLL reader and prediction writer on tiny files, and on the shared CoNLL-2003 dev set."""

import os

import pytest

from electra_tf.finetuning import conll


def write(tmp_path, text, name="data.txt", newline="\n"):
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return str(path)


TWO_DOCS = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O


German JJ B-NP B-MISC
-DOCSTART- -X- -X- O
Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
"""
EXPECTED_NER = [(["EU", "rejects"], ["B-ORG", "O"]), (["German"], ["B-MISC"]),
                (["Peter", "Blackburn"], ["B-PER", "I-PER"]), (["BRUSSELS"], ["B-LOC"])]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_sentences_docstart_and_blank_line_runs(tmp_path, newline):
    path = write(tmp_path, TWO_DOCS, newline=newline)
    assert conll.read_conll(path) == EXPECTED_NER
    chunk = conll.read_conll(path, label_column=conll.CHUNK_COLUMN)
    assert [tags for _, tags in chunk] == [["B-NP", "B-VP"], ["B-NP"], ["B-NP", "I-NP"], ["B-NP"]]
    pos_as_words = conll.read_conll(path, word_column=1)
    assert pos_as_words[0][0] == ["NNP", "VBZ"]


def test_no_trailing_newline_tabs_and_bom(tmp_path):
    path = write(tmp_path, "\ufeffa\tB-X\nb  I-X\n\n\nc O")
    assert conll.read_conll(path, label_column=1) == [(["a", "b"], ["B-X", "I-X"]), (["c"], ["O"])]
    assert conll.read_conll(write(tmp_path, "\n\n-DOCSTART- O\n\n", "empty.txt"), label_column=1) == []


def test_label_list_sorted_with_o_first():
    assert conll.label_list(EXPECTED_NER) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    assert conll.label_list([(["a"], ["B-X"])]) == ["O", "B-X"]


def test_wrong_column_count_names_file_and_line(tmp_path):
    path = write(tmp_path, "-DOCSTART- -X- O\n\na NN B-X\nb NN I-X\n\nc O\n")
    with pytest.raises(ValueError) as error:
        conll.read_conll(path, label_column=2)
    assert str(error.value) == f"{path}:6: 2 columns, expected 3 (as on line 3)"


@pytest.mark.parametrize("tag", ["E-PER", "S-PER", "B-", "I", "B", "PER", "o", "B_PER"])
def test_tags_outside_iob_name_file_and_line(tmp_path, tag):
    path = write(tmp_path, f"a B-X\n\nb O\nc {tag}\n")
    with pytest.raises(ValueError) as error:
        conll.read_conll(path, label_column=1)
    assert str(error.value) == f"{path}:4: tag {tag!r} is not IOB (O, B-TYPE or I-TYPE)"


def test_missing_column_and_missing_file(tmp_path):
    path = write(tmp_path, "\na O\n")
    with pytest.raises(ValueError) as error:
        conll.read_conll(path)
    assert str(error.value) == f"{path}:2: no label column 3 (the line has 2 columns)"
    with pytest.raises(FileNotFoundError, match="data file not found"):
        conll.read_conll(str(tmp_path / "absent.txt"))


def test_write_predictions_round_trips_and_is_atomic(tmp_path):
    path = str(tmp_path / "pred.txt")
    predicted = [["B-ORG", "O"], ["O"], ["B-PER", "B-PER"], ["B-LOC"]]
    conll.write_predictions(path, EXPECTED_NER, predicted)
    text = open(path, encoding="utf-8").read()
    assert text.startswith("EU B-ORG B-ORG\nrejects O O\n\nGerman B-MISC O\n\n")
    assert conll.read_conll(path, label_column=1) == EXPECTED_NER
    assert [tags for _, tags in conll.read_conll(path, label_column=2)] == predicted
    assert os.listdir(tmp_path) == ["pred.txt"]  # no temp file left behind
    with pytest.raises(ValueError, match="sentence 1: 1 words, 1 gold tags, 2 predicted tags"):
        conll.write_predictions(path, EXPECTED_NER, [["O", "O"], ["O", "O"], ["O", "O"], ["O"]])
    with pytest.raises(ValueError, match="contains whitespace"):
        conll.write_predictions(path, [(["a b"], ["O"])], [["O"]])
    assert open(path, encoding="utf-8").read() == text  # a failed write leaves the old file


@pytest.mark.data
def test_conll2003_dev(shared_data):
    path = shared_data / "conll2003" / "dev.txt"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    sentences = conll.read_conll(str(path))
    assert len(sentences) == 3250
    assert conll.label_list(sentences) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER",
                                           "I-LOC", "I-MISC", "I-ORG", "I-PER"]


def test_the_experiment_records_the_segment_id_its_run_fed():
    import argparse
    import json
    import pathlib
    import shlex

    from experiments import conll_ner

    args = argparse.Namespace(name="x", task="ner", model_label=None, init_checkpoint=None, model_size="tiny")
    summary = {"median": {"f1": 50.0}, "runs": [{"train_steps": 3, "selected": {"f1": 50.0}}]}
    for segment_id in (0, 1):
        entry = conll_ner.record(args, ["python"], summary, 1.0, [], "abc", {"tagging_segment_id": segment_id})
        assert entry["tagging_segment_id"] == segment_id
    # Every committed record's command feeds the segment id it records (1 is run_finetuning's default).
    for path in sorted(pathlib.Path(conll_ner.RESULTS).glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        given = [a.split("=", 1)[1] for a in shlex.split(run["command"]) if a.startswith("--tagging_segment_id=")]
        assert int(given[-1] if given else 1) == run["tagging_segment_id"], path
