"""`--init_checkpoint` with a larger vocabulary: new rows from their pieces' mean, the old ids compute as before."""

import logging

import numpy as np
import pytest

import parity  # tests/parity.py
from electra_tf.convert import save_ours
from electra_tf.convert.keras_model import build_pretrainer
from electra_tf.model.networks import pretrainer_from_config
from electra_tf.text.manifest import sha256_file
from electra_tf.training import restore, vocab_extension
from pretrain_testutil import SPECIAL_IDS, tiny_config

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# 64 tokens: the tiny config's vocab_size.
OLD = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "bio", "##logy", "##marker", "mark", "##er", "gene"]
       + list(LETTERS) + ["##" + c for c in LETTERS])
# What each appended token's pieces are under OLD (by hand): the rule of vocab_extension's docstring.
NEW = {"biology": ["bio", "##logy"], "biomarker": ["bio", "##marker"], "genes": ["gene", "##s"],
       "xyz": ["x", "##y", "##z"],
       "##ology": ["##o", "##logy"],  # a continuation: "ology" is o ##logy, its first piece in ## form
       "ωmega": ["[UNK]"]}  # ω is not in OLD: the [UNK] row
ATOL = 1e-5


@pytest.fixture
def vocabs(tmp_path):
    assert len(OLD) == 64
    old, new = tmp_path / "old_vocab.txt", tmp_path / "new_vocab.txt"
    old.write_text("\n".join(OLD) + "\n")
    new.write_text("\n".join(OLD + list(NEW)) + "\n")
    return str(old), str(new)


def expected_pieces():
    return [[OLD.index(piece) for piece in pieces] for pieces in NEW.values()]


def test_pieces_under_the_old_vocabulary(vocabs):
    old, _ = vocabs
    assert vocab_extension.piece_ids(list(NEW), old) == expected_pieces()


def exported_model(config, vocab_file, directory):
    """A pretrainer of `config` with random weights (output biases too: they start at 0), exported."""
    model = build_pretrainer(config, SPECIAL_IDS)
    rng = np.random.default_rng(0)
    model.generator_head.output_bias.assign(rng.normal(size=config.vocab_size).astype("float32"))
    save_ours(model, directory, vocab_file, keras_hub=False)
    return model


def vocab_weights(model) -> dict:
    """The weights with a vocabulary axis: `{name: array}`."""
    weights = {"embeddings": model.discriminator.embeddings.token_embedding.embeddings,
               "generator_bias": model.generator_head.output_bias}
    if model.config.untied_generator_embeddings:
        weights["generator_embeddings"] = model.generator.embeddings.token_embedding.embeddings
    return {name: np.asarray(weight.numpy()) for name, weight in weights.items()}


@pytest.mark.parametrize("options", [{}, {"untied_generator_embeddings": True}],
                         ids=["shared_embeddings_and_projection", "generator_embeddings_of_its_own"])
def test_old_ids_compute_as_before_and_new_rows_are_their_pieces_mean(vocabs, tmp_path, caplog, options):
    old_vocab, new_vocab = vocabs
    config = tiny_config(num_layers=1, generator_num_layers=1, dropout_rate=0.0, **options)
    original = exported_model(config, old_vocab, str(tmp_path / "export"))
    extended = pretrainer_from_config(config.replace(vocab_size=len(OLD) + len(NEW)),
                                      special_token_ids=SPECIAL_IDS).build_all()
    with caplog.at_level(logging.INFO):
        restore.initialize_from(extended, str(tmp_path / "export"), new_vocab)
    assert "extended vocabulary: 64 -> 70 (6 new rows from their pieces' mean)" in caplog.text

    rng = np.random.default_rng(1)
    inputs = {"input_ids": rng.integers(5, len(OLD), size=(2, 12)), "token_type_ids": np.zeros((2, 12), int),
              "attention_mask": np.ones((2, 12), int)}
    inputs["attention_mask"][1, 9:] = 0
    before, after = parity.pretrainer_outputs(original, inputs), parity.pretrainer_outputs(extended, inputs)
    for name in ("disc_hidden", "disc_logits", "gen_hidden"):
        np.testing.assert_allclose(after[name], before[name], atol=ATOL, rtol=0, err_msg=name)
    assert after["gen_logits"].shape[-1] == 70
    np.testing.assert_allclose(after["gen_logits"][..., :64], before["gen_logits"], atol=ATOL, rtol=0)

    old_rows, new_rows = vocab_weights(original), vocab_weights(extended)
    assert len(new_rows) == 2 + bool(options)
    for name, rows in new_rows.items():
        np.testing.assert_array_equal(rows[:64], old_rows[name], err_msg=name)
        for index, pieces in enumerate(expected_pieces()):
            np.testing.assert_allclose(rows[64 + index], old_rows[name][pieces].mean(axis=0), atol=1e-7,
                                       err_msg=f"{name} row {64 + index}")


def test_a_vocabulary_that_reorders_the_checkpoints_is_refused(vocabs, tmp_path):
    old_vocab, _ = vocabs
    config = tiny_config(num_layers=1, generator_num_layers=1)
    exported_model(config, old_vocab, str(tmp_path / "export"))
    reordered = tmp_path / "reordered.txt"
    reordered.write_text("\n".join([OLD[1], OLD[0]] + OLD[2:] + list(NEW)) + "\n")
    model = pretrainer_from_config(config.replace(vocab_size=70), special_token_ids=SPECIAL_IDS).build_all()
    with pytest.raises(ValueError, match=f"{reordered} \\(sha256 {sha256_file(str(reordered))}\\) is not "
                                         f"--init_checkpoint .*{tmp_path}/export/vocab.txt \\(sha256 [0-9a-f]{{64}}\\): "
                                         "its line 1 is '\\[UNK\\]' there but '\\[PAD\\]'"):
        restore.initialize_from(model, str(tmp_path / "export"), str(reordered))


def test_the_datas_vocabulary_decides_the_rows_or_is_refused(vocabs, tmp_path):
    old_vocab, new_vocab = vocabs
    manifest = {"vocab_size": 70, "vocab_file": new_vocab, "vocab_sha256": sha256_file(new_vocab)}
    assert vocab_extension.data_vocab_size("ckpt", 64, old_vocab, manifest, "--data_dir data") == 70
    assert vocab_extension.data_vocab_size("ckpt", 70, None, manifest, "--data_dir data") == 70  # the checkpoint's size
    with pytest.raises(ValueError, match="--data_dir data's vocabulary has 70 tokens .* but --init_checkpoint ckpt "
                                         "has 80 .*: a vocabulary may only grow"):
        vocab_extension.data_vocab_size("ckpt", 80, old_vocab, manifest, "--data_dir data")
    with pytest.raises(ValueError, match="--init_checkpoint ckpt holds no vocab.txt to compare with"):
        vocab_extension.data_vocab_size("ckpt", 64, None, manifest, "--data_dir data")
    with pytest.raises(ValueError, match=f"{new_vocab} is not the vocab the data was built with"):
        vocab_extension.data_vocab_size("ckpt", 64, old_vocab, dict(manifest, vocab_sha256="0" * 64),
                                        "--data_dir data")
    with pytest.raises(ValueError, match="is not on disk"):
        vocab_extension.data_vocab_size("ckpt", 64, old_vocab, dict(manifest, vocab_file=str(tmp_path / "x")),
                                        "--data_dir data")


def test_another_vocabulary_of_the_checkpoints_size_is_refused_naming_both_files_and_digests(vocabs, tmp_path, caplog):
    """Issue #55: equal sizes returned early, so data built with another vocabulary of the checkpoint's size
    trained silently, every embedding row now standing for another token."""
    old_vocab, _ = vocabs
    other = tmp_path / "domain_vocab.txt"  # 64 tokens, the same specials, other words
    other.write_text("\n".join(OLD[:5] + [f"w{i}" for i in range(59)]) + "\n")
    manifest = {"vocab_size": 64, "vocab_file": str(other), "vocab_sha256": sha256_file(str(other))}
    with pytest.raises(ValueError) as refused:
        vocab_extension.data_vocab_size("ckpt", 64, old_vocab, manifest, "--data_dir data")
    message = str(refused.value)
    assert "\n" not in message
    for named in (str(other), sha256_file(str(other)), old_vocab, sha256_file(old_vocab), "its line 6 is 'w0'"):
        assert named in message
    copy = tmp_path / "copy.txt"  # the same tokens, other bytes (no final newline): the same vocabulary
    copy.write_text("\n".join(OLD))
    same = {"vocab_size": 64, "vocab_file": str(copy), "vocab_sha256": sha256_file(str(copy))}
    assert vocab_extension.data_vocab_size("ckpt", 64, old_vocab, same, "--data_dir data") == 64
    with caplog.at_level(logging.WARNING):  # a checkpoint without a vocabulary file: one line, it goes on
        assert vocab_extension.data_vocab_size("ckpt", 64, None, same, "--data_dir data") == 64
    assert "could not be compared with --init_checkpoint ckpt's" in caplog.text
