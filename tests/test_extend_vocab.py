"""`python -m data_prep.extend_vocab`: the words that save most pieces, appended; refusals in one line."""

import json
import os
import subprocess
import sys

import pytest

from data_prep.corpus.errors import CorpusError
from data_prep.extend_vocab import REPORT_SUFFIX, extend_vocab
from electra_tf.text.tokenization import read_vocab
from electra_tf.training.vocab_extension import check_extends

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LETTERS = "abcdefghijklmnopqrstuvwxyz"
OLD_VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cell", "bio", "##logy", "##marker", "mark",
              "##er", "gene"] + list(LETTERS) + ["##" + c for c in LETTERS])
# Each word's frequency and WordPiece split under OLD_VOCAB, counted by hand:
#   marker    ×4  mark ##er          2 pieces  score 4·1 = 4
#   biology   ×3  bio ##logy         2 pieces  score 3
#   genes     ×3  gene ##s           2 pieces  score 3   (ties biology on score and frequency: "biology" < "genes")
#   Café      ×1  c ##a ##f ##e      4 pieces  score 3   (lower-cased, accent stripped: "cafe"; frequency 1 < 3)
#   biomarker ×2  bio ##marker       2 pieces  score 2
#   xyz       ×1  x ##y ##z          3 pieces  score 2   (ties biomarker on score: frequency 1 < 2)
#   of        ×1  o ##f              2 pieces  score 1
#   the, cell, a (in the vocab: 1 piece), ωmega ×5 and , . ; (not in the vocab: [UNK]): never added
CORPUS = ("The cell marker, marker marker marker.\n"
          "Biology biology biology of genes genes genes.\n"
          "\n"
          "A biomarker biomarker; Café xyz ωmega ωmega ωmega ωmega ωmega.\n")
EXPECTED = [("marker", 4, 4, 2), ("biology", 3, 3, 2), ("genes", 3, 3, 2), ("cafe", 3, 1, 4),
            ("biomarker", 2, 2, 2), ("xyz", 2, 1, 3), ("of", 1, 1, 2)]  # (word, score, frequency, pieces), best first


@pytest.fixture
def files(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(OLD_VOCAB) + "\n")
    corpus = tmp_path / "domain.txt"
    corpus.write_text(CORPUS)
    return str(vocab), str(corpus), str(tmp_path / "out" / "domain_vocab.txt")


def test_appends_the_words_that_save_most_pieces(files):
    vocab, corpus, output = files
    report = extend_vocab(vocab, corpus, 5, output)
    assert read_vocab(output) == OLD_VOCAB + [word for word, *_ in EXPECTED[:5]]
    with open(output + REPORT_SUFFIX) as f:
        assert json.load(f) == report
    assert [(a["word"], a["score"], a["frequency"], a["pieces"]) for a in report["added"]] == EXPECTED[:5]
    assert [a["id"] for a in report["added"]] == list(range(len(OLD_VOCAB), len(OLD_VOCAB) + 5))
    assert (report["old_size"], report["new_size"]) == (len(OLD_VOCAB), len(OLD_VOCAB) + 5)
    assert not [name for name in os.listdir(os.path.dirname(output)) if ".tmp" in name]


def test_fewer_words_than_asked_when_fewer_save_pieces(files):
    vocab, corpus, output = files
    lines = []
    report = extend_vocab(vocab, corpus, 50, output, log=lines.append)
    assert [a["word"] for a in report["added"]] == [word for word, *_ in EXPECTED]
    assert any(f"adding {len(EXPECTED)}, not --add=50" in line for line in lines)


@pytest.mark.parametrize("add", [0, -3, None])
def test_refuses_a_count_that_is_not_positive(files, add):
    vocab, corpus, output = files
    with pytest.raises(CorpusError, match=f"--add={add}: must be a positive number"):
        extend_vocab(vocab, corpus, add, output)
    assert not os.path.exists(os.path.dirname(output))


def test_refuses_missing_files_and_an_output_that_replaces_the_vocab(files, tmp_path):
    vocab, corpus, output = files
    with pytest.raises(CorpusError, match=f"--vocab_file={tmp_path}/none.txt: no such file"):
        extend_vocab(str(tmp_path / "none.txt"), corpus, 5, output)
    with pytest.raises(CorpusError, match="input path .*nowhere.txt: does not exist"):
        extend_vocab(vocab, str(tmp_path / "nowhere.txt"), 5, output)
    with pytest.raises(CorpusError, match="the extended vocab must be a new file"):
        extend_vocab(vocab, corpus, 5, vocab)
    assert read_vocab(vocab) == OLD_VOCAB


def test_a_vocabulary_that_shrinks_or_reorders_is_no_extension():
    old = ["[PAD]", "[UNK]", "bio"]
    check_extends(old, old + ["biology"], "old.txt", "new.txt")
    with pytest.raises(ValueError, match="new.txt .* is not .* old.txt .*: it has 2 tokens, fewer than the 3 of old.txt"):
        check_extends(old, old[:2], "old.txt", "new.txt")
    with pytest.raises(ValueError, match="new.txt .* is not .* old.txt .*: its line 2 is 'bio' there but '\\[UNK\\]'"):
        check_extends(old, ["[PAD]", "bio", "[UNK]", "biology"], "old.txt", "new.txt")


def test_command_line(files):
    """The flags reach `extend_vocab` (its refusals are the `CorpusError`s above: data_prep.cli prints them as one
    `error:` line, exit 1)."""
    vocab, corpus, output = files
    done = subprocess.run([sys.executable, "-m", "data_prep.extend_vocab", f"--vocab_file={vocab}", f"--input={corpus}",
                           "--add=2", f"--output={output}"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert read_vocab(output) == OLD_VOCAB + ["marker", "biology"]
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"[extend_vocab] wrote {output}: {len(OLD_VOCAB)} + 2 tokens")
