"""Tests for electra_tf.text.tokenization: BERT-exact ids, vocab checks, decoding."""

import numpy as np
import pytest

from electra_tf.text.reference_tokenizer import ReferenceTokenizer
from electra_tf.text.tokenization import WordPieceTokenizer, read_vocab, validate_vocab

try:
    from tests.data_prep_testutil import (EN_VOCAB, ENWIKI_DIR, TINY_VOCAB, ZH_VOCAB,
                                          ZHWIKI_FILE, requires_shared_data, write_vocab)
except ImportError:  # tests/ is not a package
    from data_prep_testutil import (EN_VOCAB, ENWIKI_DIR, TINY_VOCAB, ZH_VOCAB,
                                    ZHWIKI_FILE, requires_shared_data, write_vocab)

TRICKY_TEXTS = [
    "Hello, World! The cat sat on the mat.",
    "Héllo Café naïve RÉSUMÉ",
    "unaffable runs, ran; dogs",
    "我爱中国。中国人，文学的是",
    "mixed中文and english字",
    "tabs\tand\nnew lines\r\n and\u00a0nbsp and\u3000ideographic space",
    "control\x00chars\x07 inside\x1cword and \ufffd replacement",
    "zero\u200bwidth and bidi\u202emarks",
    "line\u2028separator and para\u2029separator",
    "x" * 100 + " " + "y" * 101 + " short",
    "é" * 101 + " fine",
    "a" * 60 + "." + "b" * 120 + "!" + "c" * 50,
    "ΣΙΣΥΦΟΣ ΟΔΥΣΣΕΥΣ İstanbul straße ǅ",
    "emoji 😀 and math 𝒜𝒷 and astral 𠀀𠀁",
    "한국어 문장입니다 " + "한" * 40,
    "",
    "   ",
    "....!!!???",
]


@pytest.fixture()
def tiny_vocab_file(tmp_path):
    return write_vocab(tmp_path)


@pytest.mark.parametrize("lower,strip", [(True, None), (False, None), (True, False), (False, True)])
def test_ids_match_reference_on_tricky_text(tiny_vocab_file, lower, strip):
    tok = WordPieceTokenizer(str(tiny_vocab_file), do_lower_case=lower, strip_accents=strip)
    ref = ReferenceTokenizer(TINY_VOCAB, do_lower_case=lower, strip_accents=strip)
    got = tok.tokenize(TRICKY_TEXTS)
    for text, ids in zip(TRICKY_TEXTS, got):
        assert ids == ref.tokenize_to_ids(text), repr(text)


def test_known_tokenization(tiny_vocab_file):
    tok = WordPieceTokenizer(str(tiny_vocab_file))
    tokens = tok.convert_ids_to_tokens(tok.tokenize(["Hello, Wörld! unaffable 中国"])[0])
    assert tokens == ["hello", ",", "world", "!", "un", "##aff", "##able", "中", "国"]


def test_accent_and_case_options(tiny_vocab_file):
    cased = WordPieceTokenizer(str(tiny_vocab_file), do_lower_case=False)
    keep_accents = WordPieceTokenizer(str(tiny_vocab_file), do_lower_case=True, strip_accents=False)
    uncased = WordPieceTokenizer(str(tiny_vocab_file))
    assert cased.convert_ids_to_tokens(cased.tokenize(["Cafe"])[0]) == ["[UNK]"]
    assert keep_accents.convert_ids_to_tokens(keep_accents.tokenize(["café"])[0]) == ["[UNK]"]
    assert uncased.convert_ids_to_tokens(uncased.tokenize(["CAFÉ"])[0]) == ["cafe"]


def test_long_words_become_unk_counting_characters(tiny_vocab_file):
    tok = WordPieceTokenizer(str(tiny_vocab_file), do_lower_case=False, max_chars_per_word=10)
    ids = tok.tokenize(["a" * 10, "a" * 11, "é" * 10, "é" * 11 + " cat", "aaaaaaaaaaa.cat"])
    assert ids[0] == [tok.token_to_id["a"]] + [tok.token_to_id["##a"]] * 9
    assert ids[1] == [tok.unk_id]
    assert ids[2] == [tok.unk_id]  # é is not in the tiny vocab, but a single [UNK]
    assert ids[3] == [tok.unk_id, tok.token_to_id["cat"]]
    assert ids[4] == [tok.unk_id, tok.token_to_id["."], tok.token_to_id["cat"]]


def test_special_ids_are_looked_up_not_hard_coded(tmp_path):
    vocab = ["hello", "[MASK]", "[SEP]", "x", "[CLS]", "[UNK]", "[PAD]"]
    tok = WordPieceTokenizer(str(write_vocab(tmp_path, vocab)))
    assert tok.special_ids == {"pad": 6, "unk": 5, "cls": 4, "sep": 2, "mask": 1}
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (6, 5, 4, 2, 1)
    assert tok.tokenize(["hello zzz"]) == [[0, 5]]
    assert tok.vocab_size == 7


def test_decode_and_conversions(tiny_vocab_file):
    tok = WordPieceTokenizer(str(tiny_vocab_file))
    ids = [tok.cls_id] + tok.tokenize(["Hello world, unaffable"])[0] + [tok.sep_id, tok.pad_id]
    assert tok.decode(ids) == "[CLS] hello world , unaffable [SEP]"
    assert tok.convert_tokens_to_ids(["cat", "nope"]) == [TINY_VOCAB.index("cat"), tok.unk_id]


def test_tokenize_rejects_single_string(tiny_vocab_file):
    with pytest.raises(TypeError):
        WordPieceTokenizer(str(tiny_vocab_file)).tokenize("the cat")


def test_tokenize_to_ragged_eager_and_in_tf_data(tiny_vocab_file):
    import tensorflow as tf
    tok = WordPieceTokenizer(str(tiny_vocab_file))
    texts = ["the cat sat", "", "Hello world"]
    expected = tok.tokenize(texts)
    assert tok.tokenize_to_ragged(texts).to_list() == expected
    assert tok.tokenize_to_ragged(tf.constant(texts)).to_list() == expected
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(3).map(tok.tokenize_to_ragged)
    assert next(iter(dataset)).to_list() == expected


def test_vocab_read_splits_on_newline_only(tmp_path):
    path = tmp_path / "v.txt"
    path.write_bytes("[PAD]\n[UNK]\n\u2028\n##\u2028\nx\r\n[CLS]\n[SEP]\n[MASK]\n".encode())
    assert read_vocab(str(path)) == ["[PAD]", "[UNK]", "\u2028", "##\u2028", "x", "[CLS]", "[SEP]", "[MASK]"]
    tok = WordPieceTokenizer(str(path))
    assert tok.vocab_size == 8
    # A vocab token made of whitespace must not stop whitespace from splitting words.
    assert tok.tokenize(["x\u2028x x"]) == [[4, 4, 4]]


@pytest.mark.parametrize("content,message", [
    ("", "is empty"),
    ("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", "missing special token(s) [MASK]"),
    ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nhello\n", "duplicate token 'hello' on lines 6 and 7"),
])
def test_validate_vocab_errors_name_file_and_problem(tmp_path, content, message):
    path = tmp_path / "bad_vocab.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as info:
        validate_vocab(str(path))
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_missing_vocab_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        WordPieceTokenizer(str(tmp_path / "nope.txt"))


def _sample_lines(path, limit):
    lines = [l for l in path.read_text(encoding="utf-8").split("\n")
             if l.strip() and not l.startswith("<")]
    return lines[:limit]


@pytest.mark.data
@requires_shared_data
@pytest.mark.parametrize("vocab,corpus,limit", [
    (EN_VOCAB, ENWIKI_DIR / "wiki_05", 1500),
    (ZH_VOCAB, ZHWIKI_FILE, 800),
])
def test_real_vocab_matches_reference(vocab, corpus, limit):
    lines = _sample_lines(corpus, limit)
    tok = WordPieceTokenizer(str(vocab))
    ref = ReferenceTokenizer(read_vocab(str(vocab)))
    got = tok.tokenize(lines)
    mismatches = [l for l, ids in zip(lines, got) if ids != ref.tokenize_to_ids(l)]
    assert not mismatches, mismatches[:3]
    assert sum(map(len, got)) > 10 * len(lines)
    flat, lengths = tok.tokenize_flat(lines)
    assert flat.dtype == np.int32 and lengths.sum() == len(flat)


@pytest.mark.parametrize("lower,strip", [(True, True), (False, False), (True, False), (False, True)])
def test_tf_normalisation_equals_python_normalisation(lower, strip):
    from electra_tf.text.normalization import normalize_text, normalize_tf
    texts = TRICKY_TEXTS + ["lone \ud800 surrogate", "Å̊ Ǆ ﬁ ẞ 𝔄"]
    got = [s.decode("utf-8") for s in normalize_tf(texts, lower, strip).numpy()]
    expected = [normalize_text(t.encode("utf-8", "ignore").decode("utf-8"), lower, strip) for t in texts]
    assert got == expected
