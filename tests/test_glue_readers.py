"""GLUE / generic tsv readers, features and TFDS loading (mocked, never downloaded)."""

import numpy as np
import pytest

from electra_tf.finetuning import tasks
from electra_tf.finetuning.tasks import get_task, truncate_pair


def _write(path, lines, bom=False):
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")


class FakeTokenizer:
    """Whitespace tokenizer: word i of the vocabulary has id 10 + i."""

    pad_id, cls_id, sep_id = 0, 2, 3

    def tokenize(self, texts):
        return [[10 + len(w) for w in t.split()] for t in texts]


def test_truncate_pair_pops_the_longer_segment_first():
    a, b = [1, 2, 3, 4, 5], [6, 7]
    truncate_pair(a, b, 5)
    assert (a, b) == ([1, 2, 3], [6, 7])
    a, b = [1, 2], [3, 4]
    truncate_pair(a, b, 3)  # tie: b loses first
    assert (a, b) == ([1, 2], [3])


def test_encode_pairs_layout():
    features = tasks.encode_pairs(FakeTokenizer(), ["aa bbb c", "x"], ["dd", None], max_seq_length=8)
    np.testing.assert_array_equal(features["input_ids"][0], [2, 12, 13, 11, 3, 12, 3, 0])
    np.testing.assert_array_equal(features["segment_ids"][0], [0, 0, 0, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(features["input_mask"][1], [1, 1, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(features["input_ids"][1][:3], [2, 11, 3])


def test_glue_layouts(tmp_path):
    cola = tmp_path / "CoLA"
    cola.mkdir()
    _write(cola / "train.tsv", ["gj04\t1\t\tGood sentence .", "gj04\t0\t*\tBad sentence sentence ."])
    _write(cola / "test.tsv", ["index\tsentence", "0\tA test ."])
    task = get_task("cola", data_dir=str(tmp_path))  # GLUE root works too
    train = task.get_examples("train")
    assert [(e.text_a, e.label) for e in train] == [("Good sentence .", "1"), ("Bad sentence sentence .", "0")]
    assert task.get_examples("test")[0].guid == "0" and task.get_examples("test")[0].label is None

    mrpc = tmp_path / "MRPC"
    mrpc.mkdir()
    _write(mrpc / "dev.tsv", ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t1\t2\tSame .\tSame !"], bom=True)
    example = get_task("MRPC", data_dir=str(mrpc)).get_examples("dev")[0]
    assert (example.text_a, example.text_b, example.label) == ("Same .", "Same !", "1")

    qqp = tmp_path / "QQP"
    qqp.mkdir()
    _write(qqp / "dev.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                             "1\t1\t2\tWhy ?\tHow ?\t0", "2\t3\t4\tbroken line", "3\t5\t6\tA ?\tB ?\t1"])
    with pytest.raises(ValueError, match=r"QQP/dev.tsv: line 3 has 4 fields, expected 6"):
        get_task("qqp", data_dir=str(qqp)).get_examples("dev")
    task = get_task("qqp", data_dir=str(qqp), skip_malformed=True)  # --skip_malformed_rows
    assert [e.label for e in task.get_examples("dev")] == ["0", "1"]
    assert task.malformed["dev"] == 1

    mnli = tmp_path / "MNLI"
    mnli.mkdir()
    header = "\t".join(["index", "promptID", "pairID", "genre", "s1b", "s2b", "s1p", "s2p", "sentence1",
                        "sentence2", "label1", "gold_label"])
    row = "\t".join(["0", "1", "1", "g", "", "", "", "", "P .", "H .", "neutral", "neutral"])
    for split in ("dev_matched", "dev_mismatched"):
        _write(mnli / f"{split}.tsv", [header, row])
    task = get_task("MNLI", data_dir=str(mnli))
    assert task.dev_splits() == ("dev_matched", "dev_mismatched")
    assert task.get_examples("dev_mismatched")[0].label == "neutral"
    assert task.main_metric_key() == "matched_accuracy"


def test_text_classification_columns(tmp_path):
    _write(tmp_path / "train.tsv", ["label\ttext_a", "1\tgood", "0\tbad"])
    _write(tmp_path / "dev.tsv", ["qid\tlabel\ttext_a", "7\t1\tfine"])
    _write(tmp_path / "test.tsv", ["qid\ttext_a", "9\tnew"])
    task = get_task("text_classification", data_dir=str(tmp_path), text_column="text_a", label_column="label")
    assert task.labels == ("0", "1")
    assert task.get_examples("dev")[0] == tasks.InputExample("7", "fine", None, "1")
    assert task.get_examples("test")[0] == tasks.InputExample("9", "new", None, None)
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "train.csv").write_text('label,review\n1,"good, really"\n0,bad\n', encoding="utf-8")
    by_index = get_task("text_classification", data_dir=str(tmp_path / "csv"), text_column="1", label_column="0")
    assert [(e.text_a, e.label) for e in by_index.get_examples("train")] == [("good, really", "1"), ("bad", "0")]
    with pytest.raises(ValueError, match="--text_column"):
        get_task("text_classification", data_dir=str(tmp_path), text_column="nope").get_examples("train")


def test_unknown_task_names_the_flag():
    with pytest.raises(ValueError, match="--task: unknown task 'foo'"):
        get_task("foo")


def test_tfds_glue_mock():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):
        mnli = get_task("MNLI", use_tfds=True, tfds_data_dir="/nonexistent")
        examples = mnli.get_examples("dev_mismatched")
        assert len(examples) == 6
        assert all(e.label in mnli.labels and e.text_b is not None for e in examples)
        stsb = get_task("STS-B", use_tfds=True, tfds_data_dir="/nonexistent")
        assert all(isinstance(e.label, float) for e in stsb.get_examples("train"))
        assert get_task("SST-2", use_tfds=True).get_examples("test")[0].text_b is None


EXPECTED_COUNTS = {
    "CoLA": (8551, 1043, 1063), "SST-2": (67349, 872, 1821), "MRPC": (3668, 408, 1725),
    "STS-B": (5749, 1500, 1379), "RTE": (2490, 277, 3000), "WNLI": (635, 71, 146), "QNLI": (None, 5463, 5463),
}


@pytest.mark.data
@pytest.mark.parametrize("name", sorted(EXPECTED_COUNTS))
def test_real_glue_counts(shared_data, name):
    task = get_task(name, data_dir=str(shared_data / "glue"))
    for split, expected in zip(("train", "dev", "test"), EXPECTED_COUNTS[name]):
        if expected is None:
            continue
        examples = task.get_examples(split)
        assert len(examples) == expected, (name, split)
        assert task.malformed[split] == 0
        if split != "test":
            labels = {e.label for e in examples}
            assert labels <= set(task.labels) if task.labels else all(0 <= float(x) <= 5 for x in labels)


@pytest.mark.data
def test_real_diagnostic_and_chnsenticorp(shared_data):
    mnli = get_task("MNLI", data_dir=str(shared_data / "glue"))
    assert len(mnli.get_examples("diagnostic")) == 1104
    assert ("diagnostic", "AX.tsv") in mnli.test_splits()
    chn = get_task("text_classification", data_dir=str(shared_data / "chinese" / "ChnSentiCorp"),
                   text_column="text_a", label_column="label")
    assert [len(chn.get_examples(s)) for s in ("train", "dev", "test")] == [9600, 1200, 1200]
    assert chn.labels == ("0", "1")
