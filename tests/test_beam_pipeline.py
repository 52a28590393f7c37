"""--engine=beam: the pool engine's shards, byte for byte, from an Apache Beam pipeline.

The pipeline runs on Beam's in-process FnApiRunner (``data_prep.beam_pipeline``'s default);
the pool engine's output is the reference.  Beam is an optional dependency: the tests that
need it skip without it, the pool path must never import it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from data_prep.builder import BuildOptions, CorpusError, make_plan, run_build
from tests.data_prep_testutil import ENWIKI_DIR, EN_VOCAB, REPO_ROOT, build_options, write_text, write_vocab

# beam_pipeline imports apache_beam only when it builds: the tests without Beam run without it.
from data_prep.beam_pipeline import BEAM_MISSING, TEMP_MARK, build_shard_to_temps, finalize, run_beam_build

requires_beam = pytest.mark.skipif(importlib.util.find_spec("apache_beam") is None,
                                   reason="apache-beam is not installed (requirements-beam.txt)")

WORDS = "the cat sat on a mat and the dog ran it is hello world".split()


def corpus_files(directory: Path, num_files: int = 3, docs_per_file: int = 14) -> list[Path]:
    """Plain-text files of blank-line separated documents, different in every file."""
    paths = []
    for f in range(num_files):
        docs = []
        for d in range(docs_per_file):
            sentences = [" ".join(WORDS[(f * 7 + d * 3 + s + k) % len(WORDS)] for k in range(3 + (d + s) % 9))
                         + "." for s in range(2 + (f + d) % 5)]
            docs.append(" ".join(sentences))
        paths.append(write_text(directory / f"part{f}.txt", "\n\n".join(docs) + "\n"))
    return paths


def options(tmp_path: Path, inputs, name: str, **overrides) -> BuildOptions:
    return build_options(tmp_path, inputs, name, **{"num_shards": 5, **overrides})


def quiet(message: str) -> None:
    pass


def build_both(tmp_path: Path, inputs, **overrides) -> tuple[Path, Path]:
    pool_plan = make_plan(options(tmp_path, inputs, "pool", **overrides))
    beam_plan = make_plan(options(tmp_path, inputs, "beam", **overrides))
    run_build(pool_plan, num_processes=1, log=quiet)
    run_beam_build(beam_plan, [], log=quiet)
    return tmp_path / "pool", tmp_path / "beam"


def directory_bytes(directory: Path) -> dict:
    """Every file's bytes, with the output dir's path neutralised in the JSON files."""
    out = {}
    for path in sorted(directory.iterdir()):
        data = path.read_bytes()
        if path.suffix == ".json":
            data = data.replace(str(directory).encode(), b"<out>")
        out[path.name] = data
    return out


@requires_beam
def test_beam_writes_the_pool_engines_shards_byte_for_byte(tmp_path):
    inputs = corpus_files(tmp_path / "in")
    plan = make_plan(options(tmp_path, inputs, "probe", eval_fraction=0.25))
    # The cuts fall inside files: some shard reads two files, some file feeds two shards.
    assert any(len(ranges) > 1 for ranges in plan.shard_ranges)
    assert len({r.file_index for ranges in plan.shard_ranges for r in ranges}) == 3
    pool_dir, beam_dir = build_both(tmp_path, inputs, eval_fraction=0.25)
    pool_files, beam_files = directory_bytes(pool_dir), directory_bytes(beam_dir)
    assert sorted(pool_files) == sorted(beam_files)
    assert len([n for n in pool_files if n.startswith("eval_data") and n.endswith("-of-00005")]) == 5
    assert pool_files == beam_files  # shards, eval shards, sidecars and manifest
    manifest = json.loads(pool_files["manifest.json"])
    assert manifest["num_examples"] > 10 and manifest["eval_num_examples"] > 0


@requires_beam
def test_a_retried_shard_and_a_rerun_finaliser_leave_only_the_final_files(tmp_path):
    inputs = corpus_files(tmp_path / "in")
    pool_dir = tmp_path / "pool"
    run_build(make_plan(options(tmp_path, inputs, "pool", eval_fraction=0.25)), log=quiet)
    plan = make_plan(options(tmp_path, inputs, "beam", eval_fraction=0.25))
    os.makedirs(plan.output_dir)
    results = [build_shard_to_temps(plan, shard, None) for shard in range(plan.num_shards)]
    retried = build_shard_to_temps(plan, 2, None)  # a second attempt whose result is not committed
    assert all(os.path.exists(tmp) for tmp in retried["temps"])
    finalize(plan, results, quiet)
    first = directory_bytes(tmp_path / "beam")
    assert not [name for name in first if TEMP_MARK in name]
    assert first == directory_bytes(pool_dir)
    finalize(plan, results, quiet)  # the finaliser re-run (its temps are gone, the shards are there)
    assert directory_bytes(tmp_path / "beam") == first
    # The whole pipeline re-run: the build is up to date, nothing changes.
    run_beam_build(plan, [], log=quiet)
    assert directory_bytes(tmp_path / "beam") == first
    # A lost manifest or shard: the re-run rebuilds just that.
    (tmp_path / "beam" / "manifest.json").unlink()
    run_beam_build(plan, [], log=quiet)
    assert directory_bytes(tmp_path / "beam") == first
    (tmp_path / "beam" / "pretrain_data.tfrecord-00003-of-00005").unlink()
    lines = []
    run_beam_build(plan, [], log=lines.append)
    assert "resuming: 4 of 5 shards already built" in lines
    assert directory_bytes(tmp_path / "beam") == first


@requires_beam
def test_dedup_drops_the_known_duplicates_the_same_way_in_both_engines(tmp_path):
    unique = [f"{w} cat sat on the mat. the dog ran {w}." for w in dict.fromkeys(WORDS)] + ["hello world. it is."]
    # Copies of docs 0 and 3 inside the first file, of doc 5 and 0 in the second, doc 3 again in the third.
    files = [unique[:8] + [unique[0], unique[3]], unique[8:12] + [unique[5], unique[0]],
             unique[12:] + [unique[3]]]
    inputs = [write_text(tmp_path / "in" / f"f{i}.txt", "\n\n".join(docs) + "\n") for i, docs in enumerate(files)]
    pool_dir, beam_dir = build_both(tmp_path, inputs, dedup_documents=True, eval_fraction=0.2)
    assert directory_bytes(pool_dir) == directory_bytes(beam_dir)
    no_copies = make_plan(options(tmp_path, inputs[1:2], "no_copies", dedup_documents=True))
    assert run_beam_build(no_copies, [], log=quiet)["num_duplicate_documents"] == 0  # an empty side input
    manifest = json.loads((pool_dir / "manifest.json").read_text())
    assert manifest["num_duplicate_documents"] == 5
    assert manifest["num_documents"] + manifest["eval_num_documents"] == len(unique)
    # Independent check: one shard over the same documents with the copies removed by hand is the same.
    deduped = write_text(tmp_path / "in2" / "all.txt", "\n\n".join(unique) + "\n")
    together = write_text(tmp_path / "in3" / "all.txt", "\n\n".join(sum(files, [])) + "\n")
    reference = make_plan(options(tmp_path, [deduped], "reference", num_shards=1))
    run_build(reference, log=quiet)
    one_shard = make_plan(options(tmp_path, [together], "one_shard", num_shards=1, dedup_documents=True))
    run_beam_build(one_shard, [], log=quiet)
    shard = "pretrain_data.tfrecord-00000-of-00001"
    assert (tmp_path / "one_shard" / shard).read_bytes() == (tmp_path / "reference" / shard).read_bytes()
    assert one_shard.fingerprint != make_plan(options(tmp_path, [together], "x", num_shards=1)).fingerprint


@requires_beam
def test_bad_input_inside_a_worker_is_one_line_and_leaves_nothing(tmp_path):
    good = [json.dumps({"text": f"the cat sat on the mat number {i}. the dog ran."}) for i in range(40)]
    path = write_text(tmp_path / "in" / "docs.jsonl", "\n".join(good + ['{"text": 5}']) + "\n")
    write_vocab(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "data_prep.build_pretraining_dataset", f"--input={path}",
         f"--vocab_file={tmp_path / 'vocab.txt'}", f"--output_dir={out}", "--num_shards=3", "--engine=beam",
         "--direct_running_mode=in_memory", "--direct_num_workers=1"],  # Beam options pass through
        cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: input {path}: field 'text' is int, not a string"], proc.stderr
    assert "Traceback" not in proc.stderr
    assert os.listdir(out) == []


@requires_beam
def test_a_corpus_error_in_the_library_call_is_a_corpus_error(tmp_path):
    path = write_text(tmp_path / "in" / "docs.jsonl", '{"text": "the cat."}\n{"body": "x"}\n')
    for dedup in (False, True):  # with dedup, the first pass meets the bad record first
        plan = make_plan(options(tmp_path, [path], "out", num_shards=1, dedup_documents=dedup))
        with pytest.raises(CorpusError, match=r"^input .*docs.jsonl: a JSON Lines record has no 'text' field"):
            run_beam_build(plan, [], log=quiet)
        assert os.listdir(tmp_path / "out") == []  # no shard, temp, manifest or build_error.json


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2"),
                          timeout=240)


def test_the_pool_engine_never_imports_beam_and_refuses_beam_options(tmp_path):
    inputs = corpus_files(tmp_path / "in", num_files=1)
    write_vocab(tmp_path)
    argv = ["build_pretraining_dataset", f"--input={inputs[0]}", f"--vocab_file={tmp_path / 'vocab.txt'}",
            f"--output_dir={tmp_path / 'out'}", "--num_shards=2"]
    code = (f"import runpy, sys\nsys.argv = {argv!r} + sys.argv[1:]\n"
            "try:\n    runpy.run_module('data_prep.build_pretraining_dataset', run_name='__main__')\n"
            "except SystemExit as e:\n    print('exit', e.code)\n"
            "print('beam imported:', 'apache_beam' in sys.modules)\n")
    proc = _run_python(code)
    assert "exit 0" in proc.stdout and "beam imported: False" in proc.stdout, proc.stdout + proc.stderr
    assert (tmp_path / "out" / "manifest.json").exists()
    refused = _run_python(code.replace("+ sys.argv[1:]", "+ ['--runner=DataflowRunner']"))
    assert "exit 1" in refused.stdout and "unexpected arguments: --runner=DataflowRunner" in refused.stderr


def test_without_beam_the_engine_says_how_to_install_it(tmp_path):
    write_vocab(tmp_path)
    code = ("import runpy, sys\nsys.modules['apache_beam'] = None  # as if not installed\n"
            f"sys.argv = ['x', '--input=nowhere', '--vocab_file={tmp_path / 'vocab.txt'}', "
            f"'--output_dir={tmp_path / 'out'}', '--engine=beam']\n"
            "try:\n    runpy.run_module('data_prep.build_pretraining_dataset', run_name='__main__')\n"
            "except SystemExit as e:\n    print('exit', e.code)\n")
    proc = _run_python(code)
    assert "exit 1" in proc.stdout
    assert proc.stderr.strip().splitlines() == [f"error: {BEAM_MISSING}"]
    assert BEAM_MISSING == "--engine=beam needs apache-beam: pip install -r requirements-beam.txt"


def test_setup_py_builds_an_sdist_with_both_packages(tmp_path):
    """Beam ships our code to remote workers with --setup_file=./setup.py."""
    source = tmp_path / "src"  # a copy: sdist writes an egg-info next to setup.py
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name if source.exists() else _mkdir(source) / name)
    for package in ("data_prep", "electra_tf"):
        shutil.copytree(REPO_ROOT / package, source / package, ignore=ignore)
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", f"--dist-dir={tmp_path / 'dist'}"],
                          cwd=source, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (sdist,) = (tmp_path / "dist").glob("electra[-_]tf-*.tar.gz")  # setuptools < 69.3 keeps the dash
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert any(n.endswith("/data_prep/beam_pipeline.py") for n in names)
    assert any(n.endswith("/data_prep/corpus/documents.py") for n in names)
    assert any(n.endswith("/electra_tf/text/tokenization.py") for n in names)


@requires_beam
@pytest.mark.data
def test_beam_equals_pool_on_real_wikipedia_files(tmp_path, shared_data):
    files = sorted(ENWIKI_DIR.iterdir(), key=lambda p: p.stat().st_size)[:3]  # the smallest three
    assert sum(p.stat().st_size for p in files) < 4 << 20
    overrides = dict(vocab_file=str(EN_VOCAB), max_seq_length=128, num_shards=4, eval_fraction=0.05)
    pool_dir, beam_dir = build_both(tmp_path, files, **overrides)
    assert directory_bytes(pool_dir) == directory_bytes(beam_dir)
    manifest = json.loads((pool_dir / "manifest.json").read_text())
    assert manifest["num_examples"] > 1000 and manifest["eval_num_examples"] > 0


@requires_beam
def test_inputs_and_output_at_urls(tmp_path):
    """tf.io.gfile's in-memory file system stands in for gs:// (one process: the in_memory runner)."""
    import tensorflow as tf
    local = corpus_files(tmp_path / "in")
    root = f"ram://{tmp_path.name}"
    tf.io.gfile.makedirs(f"{root}/in/sub")
    for path, name in zip(local, ["in/a.txt", "in/sub/b.txt", "in/c.txt"]):
        tf.io.gfile.copy(str(path), f"{root}/{name}")
    url_plan = make_plan(options(tmp_path, [f"{root}/in"], "unused", output_dir=f"{root}/out", eval_fraction=0.25))
    assert [f.path for f in url_plan.files] == [f"{root}/in/a.txt", f"{root}/in/c.txt", f"{root}/in/sub/b.txt"]
    run_beam_build(url_plan, ["--direct_running_mode=in_memory"], log=quiet)
    ordered = [local[0], local[2], local[1]]
    run_build(make_plan(options(tmp_path, ordered, "pool", eval_fraction=0.25)), log=quiet)
    written = sorted(tf.io.gfile.listdir(f"{root}/out"))
    assert written == sorted(p.name for p in (tmp_path / "pool").iterdir())
    for name in written:
        if "tfrecord" in name and not name.endswith(".json"):
            with tf.io.gfile.GFile(f"{root}/out/{name}", "rb") as f:
                assert f.read() == (tmp_path / "pool" / name).read_bytes(), name
    with pytest.raises(CorpusError, match=r"^--output_dir=ram://.*: the pool engine writes to local directories"):
        run_build(url_plan, log=quiet)


@requires_beam
def test_workers_that_lack_the_vocab_file_use_the_plans_tokens(tmp_path):
    inputs = corpus_files(tmp_path / "in")
    pool_dir = tmp_path / "pool"
    run_build(make_plan(options(tmp_path, inputs, "pool")), log=quiet)
    plan = make_plan(options(tmp_path, inputs, "beam"))
    (tmp_path / "vocab.txt").rename(tmp_path / "elsewhere.txt")  # as on a remote worker
    run_beam_build(plan, [], log=quiet)
    assert directory_bytes(tmp_path / "beam") == directory_bytes(pool_dir)


@requires_beam
def test_a_worker_that_lacks_a_sentencepiece_model_refuses_instead_of_guessing(tmp_path):
    """A WordPiece vocab can be rebuilt from the plan's tokens; a SentencePiece model cannot (its scores,
    normaliser and byte pieces are not in them): the worker says so in one line rather than tokenise otherwise."""
    import dataclasses

    from data_prep.beam_pipeline import plan_with_local_vocab
    plan = make_plan(options(tmp_path, corpus_files(tmp_path / "in"), "beam"))
    remote = dataclasses.replace(plan, options=dataclasses.replace(plan.options, vocab_file="/elsewhere/sp.model"))
    with pytest.raises(CorpusError, match=r"^--vocab_file /elsewhere/sp.model: this worker cannot read the "
                                          r"SentencePiece model"):
        plan_with_local_vocab(remote)


@requires_beam
def test_beam_retrying_every_bundle_changes_nothing_and_counts_once(tmp_path):
    """FnApiRunner's bundle_repeat runs every bundle (the finaliser's too) once more and drops the repeat's output."""
    inputs = corpus_files(tmp_path / "in")
    run_build(make_plan(options(tmp_path, inputs, "pool", eval_fraction=0.25)), log=quiet)
    lines = []
    manifest = run_beam_build(make_plan(options(tmp_path, inputs, "beam", eval_fraction=0.25)),
                              ["--direct_runner_bundle_repeat=1"], log=lines.append)
    assert directory_bytes(tmp_path / "beam") == directory_bytes(tmp_path / "pool")  # no temp left either
    (counters,) = [line for line in lines if line.startswith("counters: ")]
    assert (f"documents {manifest['num_documents']:,}, examples {manifest['num_examples']:,}, "
            f"tokens {manifest['num_tokens']:,}") in counters
    assert f"eval_examples {manifest['eval_num_examples']:,}" in counters
