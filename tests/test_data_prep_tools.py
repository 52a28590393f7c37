"""Tests for build_vocab, inspect_shards, the shared CLI handling and the demo dataset."""

import io
import os

import pytest

from data_prep.build_vocab import build_vocab
from data_prep.builder import BuildOptions, make_plan, run_build
from data_prep.corpus.errors import CorpusError
from electra_tf.text.manifest import load_manifest, validate_manifest
from electra_tf.text.tokenization import WordPieceTokenizer, read_vocab, validate_vocab

try:
    from tests.data_prep_testutil import run_module, write_text
except ImportError:  # tests/ is not a package
    from data_prep_testutil import run_module, write_text

CORPUS = """Tokenizers split words into pieces. Unaffable and unbelievable words share pieces.
The quick brown fox jumps over the lazy dog. Dogs and foxes jumped quickly!

Café naïve RÉSUMÉ. 我爱中国，中国人爱我。
"""


def test_build_vocab_exact_size_and_bert_layout(tmp_path):
    corpus = write_text(tmp_path / "c.txt", CORPUS * 20)
    out = tmp_path / "vocab.txt"
    tokens = build_vocab(str(corpus), str(out), vocab_size=300)
    assert read_vocab(str(out)) == tokens and len(tokens) == 300
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    validate_vocab(str(out))
    assert "##s" in tokens and "中" in tokens and "cafe" in tokens  # accents stripped
    assert not any(t != t.lower() for t in tokens[5:] if not t.startswith("["))
    assert tokens[-1].startswith("[unused")   # tiny corpus: padded
    tok = WordPieceTokenizer(str(out))
    ids = tok.tokenize(["The quick brown foxes jumped over unbelievably lazy dogs!"])[0]
    assert tok.unk_id not in ids
    assert tok.decode(ids) == "the quick brown foxes jumped over unbelievably lazy dogs !"
    assert tok.convert_tokens_to_ids(["##y"]) != [tok.unk_id]
    assert tok.tokenize([","]) == [[tok.unk_id]]  # no ASCII comma in the corpus


def test_build_vocab_cased_and_custom_reserved(tmp_path):
    corpus = write_text(tmp_path / "c.txt", CORPUS * 20)
    out = tmp_path / "vocab.txt"
    reserved = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<extra>"]
    tokens = build_vocab(str(corpus), str(out), vocab_size=400, do_lower_case=False,
                         reserved_tokens=reserved)
    assert tokens[:6] == reserved and len(tokens) == 400
    assert "RÉSUMÉ" in tokens or "É" in tokens


def test_build_vocab_cli_errors(tmp_path):
    empty = write_text(tmp_path / "empty.txt", "\n")
    result = run_module("data_prep.build_vocab", "--input", str(empty), "--output",
                        str(tmp_path / "v.txt"))
    assert result.returncode == 1
    assert "empty.txt: is empty" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "v.txt").exists()
    with pytest.raises(CorpusError, match="must include"):
        build_vocab(str(empty), str(tmp_path / "v.txt"), reserved_tokens=["[PAD]"])


def test_inspect_reports_stats_and_decodes(tmp_path):
    corpus = write_text(tmp_path / "c.txt", CORPUS * 30)
    vocab = tmp_path / "vocab.txt"
    build_vocab(str(corpus), str(vocab), vocab_size=300)
    plan = make_plan(BuildOptions(inputs=str(corpus), output_dir=str(tmp_path / "data"),
                                  vocab_file=str(vocab), max_seq_length=32, num_shards=2))
    manifest = run_build(plan, log=lambda m: None)
    from data_prep.inspect_shards import summarize
    out = io.StringIO()
    stats = summarize(str(tmp_path / "data"), num_examples=2, out=out)
    report = out.getvalue()
    assert stats["examples"] == manifest["num_examples"]
    assert stats["single_segment"] == manifest["num_single_segment_examples"]
    assert "length histogram" in report and "#" in report
    assert report.count("[CLS] ") == 2 and "example 1" in report
    assert f"num_examples          {manifest['num_examples']}" in report
    assert f"num_truncated_tokens  {manifest['num_truncated_tokens']}" in report
    assert "num_nul_bytes_removed 0" in report


def test_no_data_prep_module_shadows_the_standard_library():
    import sys
    from pathlib import Path
    import data_prep
    names = {p.stem for p in Path(data_prep.__file__).parent.glob("*.py")}
    assert "inspect_shards" in names
    assert not names & set(sys.stdlib_module_names)


def test_cli_errors_are_one_line_with_exit_status(capsys):
    from data_prep.cli import make_main

    def fails():
        raise CorpusError("input x.txt: is empty")

    def bug():
        raise KeyError("not an expected error")

    assert make_main(fails)(["prog"]) == 1
    assert capsys.readouterr().err == "error: input x.txt: is empty\n"
    assert make_main(lambda: None)(["prog"]) == 0
    with pytest.raises(KeyError):   # unexpected errors keep their traceback
        make_main(bug)(["prog"])


def _file_stamps(directory) -> dict:
    return {os.path.relpath(os.path.join(root, name), directory): os.stat(os.path.join(root, name)).st_mtime_ns
            for root, _, names in os.walk(directory) for name in names}


def test_demo_dataset_builds_validates_and_is_idempotent(tmp_path):
    from data_prep.demo import build_demo_dataset
    data_dir = str(tmp_path / "demo")
    assert build_demo_dataset(data_dir, log=lambda m: None) == data_dir
    manifest = load_manifest(data_dir)
    validate_manifest(manifest, max_seq_length=128, vocab_size=8192, data_dir=data_dir)
    assert len(read_vocab(manifest["vocab_file"])) == 8192
    assert manifest["num_examples"] > 1000 and manifest["unk_rate"] < 0.001
    before = _file_stamps(data_dir)
    build_demo_dataset(data_dir, log=lambda m: None)
    assert _file_stamps(data_dir) == before  # nothing rebuilt or rewritten
    with pytest.raises(ValueError, match="max_seq_length"):
        validate_manifest(manifest, max_seq_length=512)
