"""Real-data checks on ../shared/data (marked `data`; skipped when absent)."""

import csv

import pytest

from data_prep.build_vocab import build_vocab
from data_prep.builder import BuildOptions, make_plan, run_build
from electra_tf.text.reference_tokenizer import ReferenceTokenizer
from electra_tf.text.tokenization import WordPieceTokenizer, read_vocab

try:
    from tests.data_prep_testutil import (EN_VOCAB, ENWIKI_DIR, SHARED_DATA, ZH_VOCAB, ZHWIKI_FILE,
                                          read_examples, requires_shared_data, write_text)
except ImportError:  # tests/ is not a package
    from data_prep_testutil import (EN_VOCAB, ENWIKI_DIR, SHARED_DATA, ZH_VOCAB, ZHWIKI_FILE,
                                    read_examples, requires_shared_data, write_text)

pytestmark = [pytest.mark.data, requires_shared_data]
QUIET = lambda message: None  # noqa: E731


def _build(inputs, output_dir, vocab, **overrides):
    options = dict(inputs=inputs, output_dir=str(output_dir), vocab_file=str(vocab))
    options.update(overrides)
    return run_build(make_plan(BuildOptions(**options)), log=QUIET)


def test_chinese_unk_rate_below_one_percent(tmp_path):
    reviews = SHARED_DATA / "chinese" / "ChnSentiCorp" / "dev.tsv"
    with open(reviews, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    corpus = write_text(tmp_path / "chnsenticorp.txt", "\n\n".join(r["text_a"] for r in rows) + "\n")
    # One segment per example, no short targets: the first example is the first review.
    manifest = _build(f"{corpus},{ZHWIKI_FILE}", tmp_path / "zh", ZH_VOCAB, max_seq_length=512,
                      single_segment_prob=1.0, short_seq_prob=0.0)
    assert manifest["input_formats"] == ["text", "wikiextractor"]
    assert manifest["num_documents"] > len(rows)
    assert manifest["num_text_tokens"] > 300_000
    assert manifest["unk_rate"] < 0.01, manifest["unk_rate"]
    reference = ReferenceTokenizer(read_vocab(str(ZH_VOCAB)))
    expected = reference.tokenize_to_ids(rows[0]["text_a"])
    assert len(expected) < 500
    first = read_examples(tmp_path / "zh")[0]
    tokenizer = WordPieceTokenizer(str(ZH_VOCAB))
    assert first["input_ids"][:len(expected) + 2] == [tokenizer.cls_id] + expected + [tokenizer.sep_id]
    assert tokenizer.decode(expected).replace(" ", "") == \
        rows[0]["text_a"].lower().replace(" ", "")


def test_english_vocab_from_build_vocab_has_low_unk_on_held_out_text(tmp_path):
    vocab = tmp_path / "vocab.txt"
    train = ",".join(str(ENWIKI_DIR / f"wiki_0{i}") for i in range(2))
    tokens = build_vocab(train, str(vocab), vocab_size=8000)
    assert len(tokens) == 8000
    held_out = f"{ENWIKI_DIR / 'wiki_40'},{ENWIKI_DIR / 'wiki_41'}"
    manifest = _build(held_out, tmp_path / "en", vocab)
    assert manifest["num_text_tokens"] > 300_000
    assert manifest["unk_rate"] < 0.005, manifest["unk_rate"]


def test_english_build_with_bert_vocab_matches_reference_ids(tmp_path):
    manifest = _build(str(ENWIKI_DIR / "wiki_07"), tmp_path / "en", EN_VOCAB,
                      max_seq_length=512, single_segment_prob=1.0, short_seq_prob=0.0)
    assert manifest["unk_rate"] < 0.001
    reference = ReferenceTokenizer(read_vocab(str(EN_VOCAB)))
    text = (ENWIKI_DIR / "wiki_07").read_text(encoding="utf-8")
    # The first non-stub document, whose first example starts with its first paragraph.
    docs = [d.split("\n", 2)[2] for d in text.split("</doc>") if d.strip().count("\n") > 2]
    first_paragraph = docs[0].strip().split("\n")[0]
    expected = reference.tokenize_to_ids(first_paragraph)
    example = read_examples(tmp_path / "en")[0]
    assert example["input_ids"][1:1 + len(expected)] == expected
