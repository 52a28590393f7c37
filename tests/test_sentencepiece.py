"""SentencePiece vocabularies: build_vocab --model_type=unigram|bpe, SentencePieceTokenizer, load_tokenizer.

Ids of the tokenizer's Python path (``sentencepiece``) and graph path
(``tensorflow_text.SentencepieceTokenizer``) are compared with each other on a
tiny self-made corpus (default suite) and on English/Chinese Wikipedia
(``-m data``); shards built with a ``.model`` are compared with the tokenizer.
"""

import hashlib
import io
import random
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from data_prep.build_vocab import build_sentencepiece
from data_prep.builder import BuildOptions, make_plan, run_build
from data_prep.corpus.errors import CorpusError
from electra_tf.text.manifest import SPECIAL_TOKENS, load_manifest
from electra_tf.text.sentencepiece_tokenizer import SentencePieceTokenizer
from electra_tf.text.tokenization import WordPieceTokenizer
from electra_tf.text.tokenizers import load_tokenizer, validate_tokenizer_file

try:
    from tests.data_prep_testutil import read_examples, run_module, write_text, write_vocab
except ImportError:  # tests/ is not a package
    from data_prep_testutil import read_examples, run_module, write_text, write_vocab

WORDS = ("the cat sat on a mat while dogs ran across green fields and birds sang songs of "
         "morning light over quiet rivers near old stone bridges").split()
CHINESE = "我爱中国中国人文学的是天气很好今天我们去公园散步"
TEXTS = ["Hello world, the cat sat.", "Dogs ran across GREEN fields!", "我爱中国。今天天气很好",
         "a snowman ☃ and naïve café", "literal [MASK] and [CLS] in text", "", "  spaces   here  "]


def _corpus_text(seed: int = 0, paragraphs: int = 300, every_tenth: str = "") -> str:
    """About 30 KB of paragraphs over a small English + Chinese alphabet, separated by blank lines; `every_tenth`
    is appended to every tenth paragraph (characters a model must have pieces for)."""
    rng = random.Random(seed)
    out = []
    for i in range(paragraphs):
        english = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 15))).capitalize() + "."
        chinese = "".join(rng.choice(CHINESE) for _ in range(rng.randint(3, 10))) + "。"
        out.append(english + " " + chinese + (" " + every_tenth if every_tenth and i % 10 == 0 else ""))
    return "\n\n".join(out) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_text(tmp_path_factory.mktemp("sp_corpus") / "corpus.txt", _corpus_text())


@pytest.fixture(scope="module")
def model_file(corpus, tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("sp_model") / "sp"
    build_sentencepiece(str(corpus), str(prefix), "unigram", vocab_size=360)
    return Path(str(prefix) + ".model")


@pytest.fixture(scope="module")
def tokenizer(model_file) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(str(model_file))


def test_special_tokens_at_fixed_ids_as_control_symbols(tokenizer, model_file):
    assert tokenizer.special_ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert tokenizer.convert_ids_to_tokens(range(5)) == list(SPECIAL_TOKENS.values())
    processor = spm.SentencePieceProcessor(model_file=str(model_file))
    assert [processor.is_control(i) for i in range(5)] == [True, False, True, True, True]
    assert processor.is_unknown(1)
    assert processor.bos_id() == -1 and processor.eos_id() == -1
    # The .vocab file lists the model's pieces in id order.
    vocab_lines = Path(str(model_file)[:-len(".model")] + ".vocab").read_text(encoding="utf-8")
    assert [line.split("\t")[0] for line in vocab_lines.splitlines()] == tokenizer.vocab
    assert tokenizer.vocab_size == processor.get_piece_size() == len(tokenizer.vocab)


def test_literal_special_token_text_is_not_a_special_id(tokenizer):
    ids = tokenizer.tokenize(["[MASK] [CLS] [SEP] [PAD]"])[0]
    assert ids and not set(ids) & set(tokenizer.special_ids.values())
    assert tokenizer.decode(ids) == "[mask] [cls] [sep] [pad]"  # lower-cased by nmt_nfkc_cf, as text


def test_byte_fallback_leaves_no_unknown_and_decodes_back(tokenizer):
    ids = tokenizer.tokenize(["a snowman ☃ here"])[0]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert tokenizer.unk_id not in ids
    assert ["<0xE2>", "<0x98>", "<0x83>"] == [p for p in pieces if p.startswith("<0x")]  # UTF-8 of ☃
    assert tokenizer.decode(ids) == "a snowman ☃ here"


def test_python_and_graph_paths_give_equal_ids(tokenizer, corpus):
    texts = TEXTS + [p for p in corpus.read_text(encoding="utf-8").split("\n\n")[:50]]
    python_ids = tokenizer.tokenize(texts)
    eager = tokenizer.tokenize_to_ragged(texts)
    assert eager.dtype == tf.int64 and eager.to_list() == python_ids
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(8).map(tokenizer.tokenize_to_ragged)
    in_graph = [row for batch in dataset for row in batch.to_list()]
    assert in_graph == python_ids
    flat, lengths = tokenizer.tokenize_flat(texts)
    assert flat.dtype == np.int32 and lengths.dtype == np.int64
    assert lengths.tolist() == [len(r) for r in python_ids]
    assert flat.tolist() == [i for r in python_ids for i in r]
    with pytest.raises(TypeError):
        tokenizer.tokenize("one string")


def test_decode_names_specials_and_drops_padding(tokenizer):
    ids = tokenizer.tokenize(["hello world"])[0]
    decoded = tokenizer.decode([tokenizer.cls_id] + ids + [tokenizer.sep_id] + [tokenizer.pad_id] * 3)
    assert decoded == "[CLS] hello world [SEP]"


def test_word_starts_mark_one_piece_per_word(tokenizer):
    for text in ["the cat sat on a mat", "morning light over quiet rivers", "birds sang songs"]:
        ids = tokenizer.tokenize([text])[0]
        starts = [tokenizer.is_word_start(i) for i in ids]
        assert starts[0] and sum(starts) == len(text.split())
        words = tokenizer.decode(ids).split()
        assert words == text.split()
    assert all(tokenizer.is_word_start(i) for i in tokenizer.special_ids.values())


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_is_deterministic(corpus, tmp_path, model_type):
    first = build_sentencepiece(str(corpus), str(tmp_path / "a"), model_type, vocab_size=360)
    second = build_sentencepiece(str(corpus), str(tmp_path / "b"), model_type, vocab_size=360)
    assert first == second == (tmp_path / "a.model").read_bytes()
    assert (tmp_path / "a.vocab").read_bytes() == (tmp_path / "b.vocab").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.model", "a.vocab", "b.model", "b.vocab"]
    tokenizer = SentencePieceTokenizer(str(tmp_path / "a.model"))
    assert tokenizer.tokenize_to_ragged(TEXTS).to_list() == tokenizer.tokenize(TEXTS)


def test_an_output_ending_in_model_names_the_model_file_not_a_prefix(corpus, tmp_path):
    """Issue #55: `build_vocab --model_type=unigram --output=x.model` wrote x.model.model."""
    model = build_sentencepiece(str(corpus), str(tmp_path / "x.model"), "unigram", vocab_size=360)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.model", "x.vocab"]
    assert (tmp_path / "x.model").read_bytes() == model


def test_bad_model_files_give_one_line_naming_file_and_token(tmp_path, corpus):
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(  # spm's defaults: <unk> <s> </s>, no [PAD]/[CLS]/...
        input=str(corpus), model_writer=proto, vocab_size=360, hard_vocab_limit=False,
        control_symbols=["[CLS]", "[SEP]"], pad_id=3, pad_piece="[PAD]", unk_piece="[UNK]",
        minloglevel=2)
    no_mask = tmp_path / "no_mask.model"
    no_mask.write_bytes(proto.getvalue())
    with pytest.raises(ValueError, match=r"^sentencepiece model .*no_mask\.model: missing special "
                                         r"token \[MASK\]") as error:
        SentencePieceTokenizer(str(no_mask))
    assert "\n" not in str(error.value)
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"not a model")
    with pytest.raises(ValueError, match=r"^sentencepiece model .*garbage\.model: not a SentencePiece"):
        validate_tokenizer_file(str(garbage))
    with pytest.raises(ValueError, match=r"absent\.model: cannot read it"):
        load_tokenizer(str(tmp_path / "absent.model"))
    with pytest.raises(CorpusError, match=r"--model_type=wordpiece"):
        build_sentencepiece(str(corpus), str(tmp_path / "x"), "wordpiece")


def test_load_tokenizer_chooses_by_suffix(model_file, tmp_path):
    assert isinstance(load_tokenizer(str(model_file)), SentencePieceTokenizer)
    vocab = write_vocab(tmp_path)
    assert isinstance(load_tokenizer(str(vocab)), WordPieceTokenizer)
    assert validate_tokenizer_file(str(model_file)) == SentencePieceTokenizer(str(model_file)).vocab
    assert validate_tokenizer_file(str(vocab)) == vocab.read_text().split("\n")[:-1]


def test_pretraining_shards_with_a_sentencepiece_model(model_file, tokenizer, tmp_path):
    docs = ["The cat sat on a mat.", "我爱中国。", "Dogs ran across green fields near old bridges."]
    corpus = write_text(tmp_path / "docs.txt", "\n\n".join(docs) + "\n")
    options = BuildOptions(inputs=str(corpus), output_dir=str(tmp_path / "out"),
                           vocab_file=str(model_file), max_seq_length=32, num_shards=1)
    run_build(make_plan(options), num_processes=1, log=lambda m: None)
    manifest = load_manifest(str(tmp_path / "out"))
    assert manifest["vocab_sha256"] == hashlib.sha256(model_file.read_bytes()).hexdigest()
    assert manifest["vocab_size"] == tokenizer.vocab_size
    examples = read_examples(tmp_path / "out")
    assert len(examples) == len(docs)
    specials = {tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id}
    for example, doc in zip(examples, docs):
        assert example["input_ids"][0] == tokenizer.cls_id
        assert [i for i in example["input_ids"] if i not in specials] == tokenizer.tokenize([doc])[0]


def test_build_vocab_command_line(corpus, tmp_path):
    result = run_module("data_prep.build_vocab", "--model_type=bpe", f"--input={corpus}",
                        "--vocab_size=360", f"--output={tmp_path / 'cli'}")
    assert result.returncode == 0, result.stderr
    assert SentencePieceTokenizer(str(tmp_path / "cli.model")).special_ids["mask"] == 4
    assert (tmp_path / "cli.vocab").exists()


def _paragraphs(path: Path, count: int) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("<")][:count]


@pytest.mark.data
@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
@pytest.mark.parametrize("source", ["pretrain/enwiki/AA/wiki_00", "chinese/zhwiki/AA/wiki_00"])
def test_python_and_graph_ids_equal_on_wikipedia(shared_data, tmp_path, source, model_type):
    path = shared_data / source
    build_sentencepiece(str(path), str(tmp_path / "sp"), model_type, vocab_size=8000)
    tokenizer = SentencePieceTokenizer(str(tmp_path / "sp.model"))
    texts = _paragraphs(path, 400)
    python_ids = tokenizer.tokenize(texts)
    assert tokenizer.tokenize_to_ragged(texts).to_list() == python_ids
    flat = np.concatenate([np.asarray(r) for r in python_ids])
    assert (flat == tokenizer.unk_id).sum() == 0  # byte fallback
    assert tokenizer.decode(python_ids[0]).replace(" ", "") in texts[0].lower().replace(" ", "")
