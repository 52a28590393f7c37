"""SentencePiece vocabularies in pre-training: whole words by '▁', --train_text and shards from a .model,
the manifest's tokenizer_sha256 and its check at training start, the export's tokenizer path.

Whole words are checked against a rule written here from the pieces' text (a group of pieces decodes to one
whitespace-separated word of English; every Chinese word starts with an ideograph), not by the table's code.
"""

import hashlib
import json
import math
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from data_prep.build_vocab import build_sentencepiece
from data_prep.builder import run_build
from data_prep.plan import BuildOptions, make_plan
from data_prep_testutil import read_examples, write_text
from electra_tf.model import masking
from electra_tf.options import TrainOptions
from electra_tf.text.manifest import FEATURE_NAMES, MANIFEST_NAME
from electra_tf.text.reference_tokenizer import is_cjk_char
from electra_tf.text.sentencepiece_tokenizer import SentencePieceTokenizer
from electra_tf.text.tokenization import WordPieceTokenizer
from electra_tf.training import detection_preview, input_pipeline, pretraining, text_input, vocab_extension
from pretrain_testutil import tiny_config
from test_sentencepiece import _corpus_text
from test_text_input import PLAIN, graph_ops

SEQ = 32
SPACE = "\u2581"
ENGLISH = ["the cat sat on a mat", "a snowman \u2603 and na\u00efve caf\u00e9 here", "dogs ran across green fields"]
# 龘 (U+9F98) is not in the tiny model: it comes as three byte pieces, its lead byte 0xE9.
CHINESE = "我爱中国今天天气很好龘我们去公园散步"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_text(tmp_path_factory.mktemp("sp_corpus") / "corpus.txt", _corpus_text())


@pytest.fixture(scope="module")
def model_file(corpus, tmp_path_factory) -> str:
    prefix = tmp_path_factory.mktemp("sp_model") / "sp"
    build_sentencepiece(str(corpus), str(prefix), "unigram", vocab_size=360)
    return str(prefix) + ".model"


@pytest.fixture(scope="module")
def tokenizer(model_file) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(model_file)


def groups(ids, table) -> list[list[int]]:
    """The pieces of `ids` grouped into words by a continuation table."""
    words = []
    for index in ids:
        if table[index] and words:
            words[-1].append(index)
        else:
            words.append([index])
    return words


def expected_word_starts(tokenizer, ids) -> list[bool]:
    """The rule from the pieces' text: '▁', a special token, an ideograph, or the UTF-8 lead byte of one."""
    starts = []
    for piece in tokenizer.convert_ids_to_tokens(ids):
        if piece.startswith("<0x") and len(piece) == 6:
            char = bytes([int(piece[3:5], 16), 0x80, 0x80]).decode("utf-8", "replace")[0]  # what it leads
            starts.append(is_cjk_char(ord(char)))
        else:
            starts.append(piece.startswith(SPACE) or piece in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
                          or is_cjk_char(ord(piece[0])))
    return starts


# ---------------------------------------------------------------------------------------------------------
# The continuation table
# ---------------------------------------------------------------------------------------------------------

def test_english_words_are_the_pieces_after_each_space(tokenizer):
    table = tokenizer.continuation_table()
    assert table.dtype == bool and table.shape == (tokenizer.vocab_size,)
    for text in ENGLISH:
        ids = tokenizer.tokenize([text])[0]
        words = [tokenizer.decode(group).strip() for group in groups(ids, table)]
        assert words == text.split()  # the snowman's three byte pieces stay in its word
        assert [tokenizer.is_word_start(i) for i in ids] == [not table[i] for i in ids]


def test_chinese_words_start_at_each_ideograph_piece(tokenizer):
    table = tokenizer.continuation_table()
    ids = tokenizer.tokenize([CHINESE])[0]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert ["<0xE9>", "<0xBE>", "<0x98>"] == [p for p in pieces if p.startswith("<0x")]
    words = [tokenizer.decode(group).strip() for group in groups(ids, table)]
    assert "".join(words) == CHINESE
    assert "龘" in words and all(word and is_cjk_char(ord(word[0])) for word in words)
    assert len([w for w in words if w]) == len([p for p in pieces if p not in ("<0xBE>", "<0x98>", SPACE)])
    assert [not table[i] for i in ids] == expected_word_starts(tokenizer, ids)


def test_table_of_specials_bytes_and_wordpiece(tokenizer, model_file, tmp_path):
    table = tokenizer.continuation_table()
    assert not table[list(tokenizer.special_ids.values())].any()
    byte_pieces = {int(p[3:5], 16): i for i, p in enumerate(tokenizer.vocab) if len(p) == 6 and p.startswith("<0x")}
    assert len(byte_pieces) == 256
    assert [b for b, i in byte_pieces.items() if not table[i]] == list(range(0xE4, 0xEA))
    np.testing.assert_array_equal(masking.read_continuation_table(model_file), table)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "##lo", "##", "中", "##中"]
    vocab_file = write_text(tmp_path / "vocab.txt", "\n".join(vocab) + "\n")
    expected = [False] * 6 + [True, False, False, True]
    assert WordPieceTokenizer(str(vocab_file)).continuation_table().tolist() == expected
    assert masking.read_continuation_table(str(vocab_file)).tolist() == expected


def test_whole_word_masking_masks_sentencepiece_words_whole(tokenizer):
    table = tokenizer.continuation_table()
    texts = [" ".join(ENGLISH), CHINESE]
    rows = np.zeros([2, 64], np.int32)
    for row, text in enumerate(texts):
        ids = [tokenizer.cls_id] + tokenizer.tokenize([text])[0] + [tokenizer.sep_id]
        rows[row, :len(ids)] = ids
    mask = (rows > 0).astype(np.int32)
    specials = tuple(tokenizer.special_ids[name] for name in ("pad", "cls", "sep", "mask"))
    continuations_masked = 0
    for step in range(12):
        out = masking.mask_inputs(tf.constant(rows), tf.constant(mask), masking.example_seeds(3, step, tf.range(2)),
                                  mask_id=tokenizer.mask_id, special_ids=specials, mask_prob=0.3,
                                  max_predictions=20, whole_words=table)
        for row in range(2):
            chosen = set(out.positions.numpy()[row][out.weights.numpy()[row] > 0].tolist())
            length = int(mask[row].sum())
            starts = expected_word_starts(tokenizer, rows[row, :length])
            word_of = np.cumsum(starts) - 1
            for position in chosen:  # every masked continuation's word start is masked, and the whole word
                word = [p for p in range(length) if word_of[p] == word_of[position]]
                assert set(word) <= chosen
                continuations_masked += not starts[position]
            assert 0 < len(chosen) <= min(20, round(0.3 * length))
    assert continuations_masked > 0  # the check above met multi-piece words


# ---------------------------------------------------------------------------------------------------------
# Data: --train_text and shards from a .model; the manifest's tokenizer_sha256
# ---------------------------------------------------------------------------------------------------------

def build_shards(corpus_file, model_file, output_dir, **options):
    values = dict(inputs=str(corpus_file), output_dir=str(output_dir), vocab_file=model_file, max_seq_length=SEQ,
                  num_shards=1, short_seq_prob=0.0, single_segment_prob=1.0)
    return run_build(make_plan(BuildOptions(**{**values, **options})), log=lambda message: None)


def test_train_text_gives_data_prep_records_with_a_sentencepiece_model(model_file, tmp_path):
    plain = write_text(tmp_path / "plain.txt", PLAIN)
    build_shards(plain, model_file, tmp_path / "shards")
    expected = [tuple(tuple(example[name]) for name in FEATURE_NAMES) for example in read_examples(tmp_path / "shards")]
    source = text_input.TextSource(patterns=(str(plain),), vocab_file=model_file, max_seq_length=SEQ,
                                   short_seq_prob=0.0, single_segment_prob=1.0)
    got = [tuple(tuple(example[name].numpy().tolist()) for name in FEATURE_NAMES)
           for example in text_input.examples_dataset(source, repeat=False)]
    assert len(expected) >= 5 and got == expected
    ops = graph_ops(text_input.text_dataset(source, batch_size=2))  # serialisable: tf.data service workers run it
    assert "SentencepieceTokenizeOp" in ops and not ops & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
    manifest = text_input.synthesized_manifest(source)
    assert manifest["vocab_sha256"] == hashlib.sha256(open(model_file, "rb").read()).hexdigest()
    assert manifest["special_token_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def test_manifest_records_the_tokenizer_and_training_refuses_another(corpus, model_file, tmp_path):
    model = str(tmp_path / "sp.model")
    shutil.copy(model_file, model)
    manifest = build_shards(corpus, model, tmp_path / "shards")
    original = open(model, "rb").read()
    assert manifest["vocab_sha256"] == hashlib.sha256(original).hexdigest()
    config = tiny_config(vocab_size=manifest["vocab_size"], max_seq_length=SEQ)
    assert input_pipeline.load_checked_manifest(str(tmp_path / "shards"), config)["vocab_file"] == model
    # Another tokenizer of the same size at the same path: the ids would mean other pieces.
    build_sentencepiece(str(corpus), str(tmp_path / "other"), "bpe", vocab_size=360)
    other = open(tmp_path / "other.model", "rb").read()
    assert SentencePieceTokenizer(str(tmp_path / "other.model")).vocab_size == manifest["vocab_size"]
    open(model, "wb").write(other)
    with pytest.raises(ValueError) as error:
        input_pipeline.load_checked_manifest(str(tmp_path / "shards"), config)
    message = str(error.value)
    assert "\n" not in message and f"{model} (sha256 {hashlib.sha256(other).hexdigest()})" in message
    assert f"the tokenizer its manifest.json records (no file) (sha256 {manifest['vocab_sha256']})" in message
    assert message.startswith(f"data in {tmp_path / 'shards'} was built with a different tokenizer: ")
    assert message.endswith("; rebuild the data or pass the tokenizer it was built with")
    # ... and data_prep's plan for the same flags is another build (the fingerprint holds the file's sha256).
    assert make_plan(BuildOptions(inputs=str(corpus), output_dir=str(tmp_path / "shards"), vocab_file=model,
                                  max_seq_length=SEQ, num_shards=1, short_seq_prob=0.0,
                                  single_segment_prob=1.0)).fingerprint != manifest["fingerprint"]
    # An older manifest, without the field, keeps working.
    path = tmp_path / "shards" / MANIFEST_NAME
    old = {k: v for k, v in json.loads(path.read_text()).items() if k != "vocab_sha256"}
    path.write_text(json.dumps(old))
    assert "vocab_sha256" not in input_pipeline.load_checked_manifest(str(tmp_path / "shards"), config)


def test_a_beam_worker_without_the_model_gets_its_shipped_bytes(corpus, model_file, tmp_path):
    import dataclasses

    pytest.importorskip("apache_beam")
    from data_prep.beam_pipeline import plan_with_local_vocab, shipped_model

    plan = make_plan(BuildOptions(inputs=str(corpus), output_dir=str(tmp_path / "out"), vocab_file=model_file))
    shipped = shipped_model(plan)
    assert shipped == open(model_file, "rb").read()
    remote = dataclasses.replace(plan, options=dataclasses.replace(plan.options, vocab_file="/elsewhere/sp.model"))
    local = plan_with_local_vocab(remote, shipped).options.vocab_file
    assert local.endswith(".model") and open(local, "rb").read() == shipped
    assert SentencePieceTokenizer(local).tokenize(ENGLISH) == SentencePieceTokenizer(model_file).tokenize(ENGLISH)


def test_beam_build_from_a_model_the_workers_lack_equals_the_pool_build(corpus, model_file, tmp_path, monkeypatch):
    pytest.importorskip("apache_beam")
    from data_prep import beam_pipeline

    model = str(tmp_path / "sp.model")
    shutil.copy(model_file, model)
    pool = build_shards(corpus, model, tmp_path / "pool")
    plan = make_plan(BuildOptions(inputs=str(corpus), output_dir=str(tmp_path / "beam"), vocab_file=model,
                                  max_seq_length=SEQ, num_shards=1, short_seq_prob=0.0, single_segment_prob=1.0))
    shipped_model = beam_pipeline.shipped_model

    def read_then_hide(plan):
        """The launcher reads the model; then it is gone, as on a remote worker."""
        model_bytes = shipped_model(plan)
        os.rename(model, tmp_path / "elsewhere.model")
        return model_bytes

    monkeypatch.setattr(beam_pipeline, "shipped_model", read_then_hide)
    beam = beam_pipeline.run_beam_build(plan, [], log=lambda message: None)
    assert not os.path.exists(model)
    assert beam["vocab_sha256"] == pool["vocab_sha256"]
    assert read_examples(tmp_path / "beam") == read_examples(tmp_path / "pool")


def test_vocabulary_extension_refuses_a_sentencepiece_model(model_file):
    with pytest.raises(ValueError, match=r"^vocabulary extension supports WordPiece vocab files; the run's "
                                         r"vocabulary .*sp\.model is a SentencePiece model") as error:
        vocab_extension.check_growth("ckpt", 300, "ckpt/vocab.txt", 360, model_file, "the run's vocabulary")
    assert "\n" not in str(error.value)


def test_the_detection_preview_shows_pieces(tokenizer, model_file):
    assert detection_preview.read_vocab(model_file) == tokenizer.vocab


# ---------------------------------------------------------------------------------------------------------
# Pre-training a tiny model
# ---------------------------------------------------------------------------------------------------------

# train_text: ~6 s under -m slow; test_train_text_gives_data_prep_records_with_a_sentencepiece_model shows by default
# that --train_text gives the shards' records, which [shards] trains on.
@pytest.mark.parametrize("source", ["shards", pytest.param("train_text", marks=pytest.mark.slow)])
def test_a_tiny_model_pretrains_with_a_sentencepiece_model(corpus, model_file, tokenizer, tmp_path, monkeypatch,
                                                           source):
    """From data_prep's shards (whole-word masking by the manifest's .model; the export carries the .model) and
    from --train_text (tensorflow-text's SentencePiece op in tf.data)."""
    config = tiny_config(vocab_size=tokenizer.vocab_size, max_seq_length=SEQ, num_layers=1, generator_num_layers=1,
                         train_batch_size=4, num_train_steps=2, num_warmup_steps=1)
    common = dict(model_dir=str(tmp_path / "run"), log_steps=1, steps_per_loop=2, save_checkpoints_steps=2,
                  eval_batches=0)
    if source == "shards":
        build_shards(corpus, model_file, tmp_path / "shards", short_seq_prob=0.05, single_segment_prob=0.1)
        config, options = config.replace(mask_whole_words=True), TrainOptions(data_dir=str(tmp_path / "shards"),
                                                                              **common)
    else:
        options = TrainOptions(data_dir=None, train_text=str(corpus), vocab_file=model_file, export=False, **common)
    history = pretraining.train(config, options, tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert [h["step"] for h in history] == [1, 2] and all(math.isfinite(h["loss"]) for h in history)
    assert tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")).endswith("-2")
    if source == "shards":  # the export holds the data's .model under its kind's name, its sha256 recorded
        export = tmp_path / "run" / "export"
        with open(model_file, "rb") as f:
            model_bytes = f.read()
        assert (export / "sentencepiece.model").read_bytes() == model_bytes
        assert not (export / "vocab.txt").exists()
        assert json.loads((export / "electra_config.json").read_text())["vocab_sha256"] == \
            hashlib.sha256(model_bytes).hexdigest()


# ---------------------------------------------------------------------------------------------------------
# Real text
# ---------------------------------------------------------------------------------------------------------

def _paragraphs(path, count: int) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("<")][:count]


@pytest.mark.data
def test_the_table_on_a_model_of_english_and_chinese_wikipedia(shared_data, tmp_path):
    english = _paragraphs(shared_data / "pretrain/enwiki/AA/wiki_00", 300)
    chinese = _paragraphs(shared_data / "chinese/zhwiki/AA/wiki_00", 300)
    text = write_text(tmp_path / "mixed.txt", "\n\n".join(english + chinese) + "\n")
    build_sentencepiece(str(text), str(tmp_path / "sp"), "unigram", vocab_size=4000)
    tokenizer = SentencePieceTokenizer(str(tmp_path / "sp.model"))
    table = tokenizer.continuation_table()
    for paragraph in english[:100] + chinese[:100]:
        ids = tokenizer.tokenize([paragraph])[0]
        assert [not table[i] for i in ids] == expected_word_starts(tokenizer, ids)
        words = groups(ids, table)
        texts = [tokenizer.decode(word) for word in words]
        # A word follows a space ('▁'), or starts at an ideograph (Chinese writes no spaces).
        assert all(tokenizer.vocab[word[0]].startswith(SPACE) or (text and is_cjk_char(ord(text[0])))
                   for word, text in zip(words, texts))
        if not any(is_cjk_char(ord(c)) for c in paragraph):
            assert texts == tokenizer.decode(ids).split()
