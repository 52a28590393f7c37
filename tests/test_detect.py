"""`electra_tf.detect`: a tiny model trained here really flags replaced tokens, and the CLI shows it.

The fixture trains a 1-layer discriminator for 200 steps (~10 s on 2 cores) on
structured synthetic text: sequences repeat a short motif of "common" words
(the first 40 of 95 two-letter words; the other 55 never occur), and the
generator samples at temperature 10000, i.e. uniformly, as in the README's
sanity check. Replacements are then easy to spot, as an untrained generator's
samples are in real text: most are words the data never shows. The tests
replace tokens themselves (random vocabulary words) and check the
discriminator's p(replaced) separates them from the originals.
"""

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from electra_tf.detect import cli, loading, rendering, scoring

REPO = Path(__file__).resolve().parents[1]
WORDS = [c + v for c in "bcdfghjklmnprstvwxz" for v in "aeiou"]  # 95 two-letter words
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIAL_IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
COMMON = 40  # only WORDS[:COMMON] occur in the training text
SEQ = 32
TRAIN_STEPS = 200


def motif_words(rng, max_words=SEQ - 2):
    """A text: a motif of 3-5 distinct common words, repeated to 8..max_words words."""
    motif = rng.choice(COMMON, rng.randint(3, 6), replace=False)
    return [WORDS[i] for i in np.resize(motif, rng.randint(8, max_words + 1))]


def training_batch(rng, batch_size=32):
    ids = np.zeros((batch_size, SEQ), np.int32)
    for row in range(batch_size):
        words = [len(SPECIALS) + WORDS.index(w) for w in motif_words(rng)]
        ids[row, :len(words) + 2] = [SPECIAL_IDS["cls"], *words, SPECIAL_IDS["sep"]]
    return {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32), "segment_ids": np.zeros_like(ids)}


def replace_some(rng, words, share=0.2):
    """`words` with ~`share` of them replaced by other random vocabulary words; also the replaced flags."""
    words = list(words)
    flags = [False] * len(words)
    for pos in rng.choice(len(words), max(1, int(round(share * len(words)))), replace=False):
        words[pos] = rng.choice([w for w in WORDS if w != words[pos]])
        flags[pos] = True
    return words, flags


@pytest.fixture(scope="module")
def trained_export(tmp_path_factory):
    """An export directory (ours) of a tiny ELECTRA whose discriminator has learnt to spot samples."""
    import keras
    import tensorflow as tf

    from electra_tf.config import get_config
    from electra_tf.convert.export_dir import save_ours
    from electra_tf.training.optimization import create_optimizer
    from electra_tf.model.networks import pretrainer_from_config

    root = tmp_path_factory.mktemp("detect")
    vocab_file = root / "vocab.txt"
    vocab_file.write_text("\n".join(SPECIALS + WORDS) + "\n")
    keras.utils.set_random_seed(0)
    config = get_config(
        "tiny", hparams={"temperature": 10000.0}, vocab_size=len(SPECIALS) + len(WORDS), num_layers=1,
        generator_num_layers=1, hidden_size=64, intermediate_size=256, embedding_size=32,
        max_seq_length=SEQ, max_position_embeddings=SEQ, learning_rate=2e-3,
        num_train_steps=TRAIN_STEPS, num_warmup_steps=TRAIN_STEPS // 10)
    model = pretrainer_from_config(config, special_token_ids=SPECIAL_IDS).build_all()
    model.compile(optimizer=create_optimizer(config))
    step = tf.function(model.train_step)
    rng = np.random.RandomState(0)
    for _ in range(TRAIN_STEPS):
        step(training_batch(rng))
    auc = float(model.metric_results()["disc_auc"])
    export_dir = save_ours(model, str(root / "export"), vocab_file=str(vocab_file), step=TRAIN_STEPS,
                       keras_hub=False)
    return {"export": export_dir, "vocab": str(vocab_file), "root": root, "train_auc": auc}


@pytest.fixture(scope="module")
def detector(trained_export):
    return loading.load_detector(trained_export["export"])


def test_discriminator_scores_replaced_tokens_higher(detector, trained_export):
    rng = np.random.RandomState(123)
    texts, flags = [], []
    for _ in range(40):
        words, replaced = replace_some(rng, motif_words(rng))
        texts.append(" ".join(words).upper() if not texts else " ".join(words))  # one upper-case: lower-cased
        flags.append(replaced)
    results = scoring.score_texts(detector.pretrainer, detector.tokenizer, texts)
    assert len(results) == len(texts)
    on_replaced, on_original = [], []
    for text, replaced, scores in zip(texts, flags, results):
        assert scores.tokens == text.lower().split()  # every two-letter word is one wordpiece
        assert not scores.corrupted and scores.truncated == 0
        assert all(0.0 <= p <= 1.0 for p in scores.probs)
        for p, r in zip(scores.probs, replaced):
            (on_replaced if r else on_original).append(p)
    replaced_mean, original_mean = float(np.mean(on_replaced)), float(np.mean(on_original))
    print(f"\ntraining AUC {trained_export['train_auc']:.3f}; mean p(replaced) on {len(on_replaced)} replaced "
          f"tokens {replaced_mean:.3f}, on {len(on_original)} original tokens {original_mean:.3f}")
    assert replaced_mean > original_mean + 0.3, (replaced_mean, original_mean)
    assert original_mean < 0.2
    # The score of a text does not depend on the batch it is scored in (padding is masked).
    alone = scoring.score_texts(detector.pretrainer, detector.tokenizer, texts[3:4])[0]
    np.testing.assert_allclose(alone.probs, results[3].probs, atol=1e-5)


def test_corrupt_uses_the_generator_reproducibly(detector):
    rng = np.random.RandomState(7)
    texts = [" ".join(motif_words(rng, max_words=28)) for _ in range(12)]
    first = scoring.score_texts(detector.pretrainer, detector.tokenizer, texts, corrupt=True, seed=3)
    again = scoring.score_texts(detector.pretrainer, detector.tokenizer, texts, corrupt=True, seed=3, batch_size=5)
    other = scoring.score_texts(detector.pretrainer, detector.tokenizer, texts, corrupt=True, seed=4)
    assert [(s.tokens, s.originals) for s in first] == [(s.tokens, s.originals) for s in again]
    assert [s.tokens for s in first] != [s.tokens for s in other]
    num_replaced = num_tokens = 0
    on_replaced, on_original = [], []
    for text, scores in zip(texts, first):
        words = text.split()
        assert scores.corrupted and len(scores.tokens) == len(words)
        # Exactly round(15 % of [CLS] + words + [SEP]) positions were masked; a sample can equal the original.
        assert sum(scores.replaced) <= max(1, round(0.15 * (len(words) + 2)))
        for token, original, word, p in zip(scores.tokens, scores.originals, words, scores.probs):
            if original is None:
                assert token == word
                on_original.append(p)
            else:
                assert original == word and token != word
                on_replaced.append(p)
        num_replaced += sum(scores.replaced)
        num_tokens += len(words)
    assert 0.05 < num_replaced / num_tokens < 0.2
    assert np.mean(on_replaced) > np.mean(on_original) + 0.3


def test_cli_plain_text_and_html_when_piped(trained_export, tmp_path):
    """End to end through `python -m electra_tf.detect`, stdout a pipe."""
    texts = ["ba be bi ba be bi ba be zu ba be bi", "ca ce ci co ca ce ci co"]
    input_file = tmp_path / "texts.txt"
    input_file.write_text(texts[1] + "\n\n")
    html_file = tmp_path / "out.html"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "electra_tf.detect", f"--init_checkpoint={trained_export['export']}", texts[0],
         f"--input_file={input_file}", f"--html={html_file}", "--color=auto"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out  # piped: no colours
    lines = out.splitlines()
    assert lines[0] == f"# 1: {texts[0]}" and lines[3] == f"# 2: {texts[1]}"
    for text, line in zip(texts, (lines[1], lines[4])):
        pairs = re.findall(r"(\S+?)\((\d\.\d\d)\)", line)
        assert [token for token, _ in pairs] == text.split()
        assert all(0.0 <= float(p) <= 1.0 for _, p in pairs)
    # "zu" is a word the training text never holds: the discriminator calls it replaced.
    probs = dict(re.findall(r"(\S+?)\((\d\.\d\d)\)", lines[1]))
    assert float(probs["zu"]) > 0.5 > float(probs["ba"])
    page = html_file.read_text()
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    spans = re.findall(r'<span class="tok[^"]*" style="background:rgb\((\d+),(\d+),(\d+)\)" '
                       r'title="p\(replaced\) = (\d\.\d+)[^"]*">([^<]+)</span>', page)
    assert [s[-1] for s in spans] == texts[0].split() + texts[1].split()
    zu = next(s for s in spans if s[-1] == "zu")
    ba = next(s for s in spans if s[-1] == "ba")
    assert int(zu[1]) < int(ba[1])  # redder: less green
    assert "http" not in page.split("<body>")[0]  # self-contained: nothing fetched


def test_cli_corrupt_marks_replaced_tokens(trained_export, tmp_path):
    stdout = io.StringIO()
    html_file = tmp_path / "corrupt.html"
    text = "da de di do da de di do da de di do da de di do da de di do"
    argv = [f"--init_checkpoint={trained_export['export']}", "--corrupt", "--seed=1", f"--html={html_file}", text]
    assert cli.main(argv, stdout=stdout) == 0
    out = stdout.getvalue()
    marks = re.findall(r"(\S+?)\((\d\.\d\d)\)\[was:(\S+?)\]", out)
    assert marks, out
    assert all(token != original for token, _, original in marks)
    assert "replaced)" in out.splitlines()[0]  # "(k of n replaced)"
    page = html_file.read_text()
    assert page.count('class="tok replaced"') == len(marks)
    assert page.count('<s class="orig"') == len(marks)
    for token, _, original in marks:
        assert f"original: {original}" in page
    table = io.StringIO()
    assert cli.main(argv[:-2] + ["--table", text], stdout=table) == 0
    rows = [line.split() for line in table.getvalue().splitlines()[2:]]
    assert len(rows) == len(text.split())
    assert sum("yes" in row for row in rows) == len(marks)


def test_cli_colour_and_truncation(trained_export):
    stdout = io.StringIO()
    long_text = " ".join(["fa", "fe", "fi"] * 30)
    assert cli.main([f"--init_checkpoint={trained_export['export']}", "--color=always", long_text],
                    stdout=stdout) == 0
    out = stdout.getvalue()
    assert "\x1b[48;5;" in out and "\x1b[0m" in out
    assert "60 wordpieces truncated" in out  # capped at max_position_embeddings = 32: 30 wordpieces shown
    plain = io.StringIO()
    assert cli.main([f"--init_checkpoint={trained_export['export']}", "--max_seq_length=8", long_text],
                    stdout=plain) == 0
    assert len(re.findall(r"\(\d\.\d\d\)", plain.getvalue())) == 6


def test_bad_input_exits_2_naming_the_flag(trained_export, tmp_path, capsys):
    def run(*argv):
        code = cli.main(list(argv), stdout=io.StringIO())
        return code, capsys.readouterr().err.strip()

    code, err = run("--init_checkpoint=/no/such/export", "ba be")
    assert code == 2 and err.startswith("detect: error: --init_checkpoint:") and "does not exist" in err
    code, err = run("ba be")
    assert code == 2 and "--init_checkpoint" in err
    code, err = run(f"--init_checkpoint={tmp_path}", "ba be")  # an empty folder
    assert code == 2 and err.startswith("detect: error: --init_checkpoint:") and "unrecognised" in err
    code, err = run(f"--init_checkpoint={trained_export['export']}")
    assert code == 2 and "no text" in err
    code, err = run(f"--init_checkpoint={trained_export['export']}", "--input_file=/no/such.txt")
    assert code == 2 and err.startswith("detect: error: --input_file:")
    no_vocab = tmp_path / "export_without_vocab"
    shutil.copytree(trained_export["export"], no_vocab)
    os.remove(no_vocab / "vocab.txt")
    code, err = run(f"--init_checkpoint={no_vocab}", "ba be")
    assert code == 2 and err.startswith("detect: error: --vocab_file:")
    assert len(err.splitlines()) == 1
    short_vocab = tmp_path / "short_vocab.txt"
    short_vocab.write_text("\n".join(SPECIALS + WORDS[:10]) + "\n")
    code, err = run(f"--init_checkpoint={trained_export['export']}", f"--vocab_file={short_vocab}", "ba be")
    assert code == 2 and err.startswith("detect: error: --vocab_file:") and "15 tokens" in err
    # With --vocab_file the export without one works.
    assert cli.main([f"--init_checkpoint={no_vocab}", f"--vocab_file={trained_export['vocab']}", "ba be"],
                    stdout=io.StringIO()) == 0


def test_bad_checkpoint_exit_code_from_the_shell(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "electra_tf.detect", f"--init_checkpoint={tmp_path}/missing",
                           "some text"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("detect: error: --init_checkpoint:")


def test_hugging_face_checkpoint():
    """Any format the converter loads: the Hugging Face fixture (discriminator/ + generator/)."""
    loaded = loading.load_detector(str(REPO / "tests" / "fixtures" / "hf_electra"))
    assert loaded.checkpoint_format == "hf" and "generator_head" in loaded.parts
    results = loaded.score(["The quick brown fox"], corrupt=True, seed=0)
    assert results[0].tokens and len(results[0].probs) == len(results[0].tokens)
    assert results[0].corrupted


def test_rendering_of_wordpieces_without_a_model():
    scores = scoring.TokenScores(text="Unbelievable <b>", tokens=["un", "##believ", "##able", "<", "b", ">"],
                                 probs=[0.1, 0.6, 0.2, 0.0, 1.0, 0.5])
    assert rendering.render_terminal([scores], color=False).splitlines()[1] == \
        "un(0.10) ##believ(0.60) ##able(0.20) <(0.00) b(1.00) >(0.50)"
    page = rendering.render_html([scores])
    # Continuation pieces are glued to the word (no space, no ##) and keep their own shade and tooltip.
    assert re.search(r">un</span><span class=\"tok piece\" style=\"background:rgb\(\d+,\d+,\d+\)\" "
                     r"title=\"p\(replaced\) = 0\.600  \(##believ\)\">believ</span><span", page)
    assert "&lt;b&gt;" in page and "<b>" not in page  # escaped
    assert rendering.shade_rgb(0.0) == (255, 255, 255) and rendering.shade_rgb(1.0) == (220, 30, 30)
