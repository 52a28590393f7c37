"""What a run is, checked at every start (issue #55): the combination table of data sources and starts, the
starts that were silent or ended in a traceback, and the one owner of the run record.

Pre-training: data source {shards, --train_text, --data_service} x start {fresh, resume after a stop,
--init_checkpoint from an export, phase 2}, each with the held-out evaluation on, on a held-out part smaller than
one batch. Every cell trains as documented or refuses in one line before anything is written (`CELLS`). The
default suite runs one cell per start and per source (`PAIRWISE`); `-m slow` runs the whole product. A new source
or start is a new entry of `SOURCES` or `STARTS`.
"""

import ast
import dataclasses
import json
import logging
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import service_config_pb2

from data_prep_testutil import TINY_VOCAB, write_text, write_vocab
from electra_tf.convert import save_ours
from electra_tf.convert.keras_model import build_pretrainer
from electra_tf.options import ExecutionOptions, TrainOptions
from electra_tf.text.manifest import sha256_file
from electra_tf.training import pretraining, restore, run_record
from pretrain_testutil import SPECIAL_IDS, tiny_config, write_shards
from test_evaluation import add_eval_shards
from test_finetuning_run import glue_dir, vocab_file  # noqa: F401 (fixtures)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, BATCH = 32, 8
TEXT = ("The cat sat on the mat. A dog ran! He is a cat? It is.\n\nThe dog sat on the mat and the cat ran.\n\n"
        "a b c d e f g h i j k l m n o p q r s t u v w x y z. The end.\n\nIt is the cat. The dog ran on a mat.\n\n"
        "hello world. the cat is a cat.\n\nthe dog is a dog. he ran and ran.\n\n")


def config_for(vocab_size, **overrides):
    """One layer per encoder (tracing dominates the time), 2 steps of batch 8 at length 32."""
    return tiny_config(**{"num_layers": 1, "generator_num_layers": 1, "vocab_size": vocab_size,
                          "max_seq_length": SEQ, "train_batch_size": BATCH, "num_train_steps": 2,
                          "num_warmup_steps": 1, **overrides})


def cpu():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Shards (64-token vocab) with 2 held-out examples (fewer than one batch), their shards at length 64 for
    phase 2, raw text (its own vocab) and an export of each vocabulary for --init_checkpoint."""
    root = tmp_path_factory.mktemp("combinations")
    shards, shards64 = str(root / "shards"), str(root / "shards64")
    write_shards(shards, num_examples=32, num_shards=2, seq_length=SEQ)
    add_eval_shards(shards, root / "held", num_examples=2)
    write_shards(shards64, num_examples=16, num_shards=1, seq_length=64)
    held64 = str(root / "held64")  # phase 2's held-out data: 2 examples, fewer than one batch
    write_shards(held64, num_examples=2, num_shards=1, seq_length=64, seed=3)
    text_dir = root / "text"
    text_dir.mkdir()
    corpus = str(write_text(text_dir / "corpus.txt", TEXT * 4))
    text_vocab = str(write_vocab(text_dir, TINY_VOCAB))
    exports = {}
    for name, vocab_file, size in (("shards", os.path.join(shards, "vocab.txt"), 64),
                                   ("text", text_vocab, len(TINY_VOCAB))):
        exports[name] = str(root / f"export_{name}")
        save_ours(build_pretrainer(config_for(size), SPECIAL_IDS), exports[name], vocab_file, keras_hub=False)
    return dict(root=root, shards=shards, shards64=shards64, held64=held64, corpus=corpus, text_vocab=text_vocab, exports=exports)


@pytest.fixture(scope="module")
def service():
    """An in-process tf.data service: a dispatcher and one worker.

    The dispatcher collects a job once its last reader is gone (a run's iterator, each start's own job) and the
    worker learns it at its next heartbeat, deleting the job's task on its heartbeat thread. With the defaults
    (DYNAMIC jobs never collected, a 30 s heartbeat) every task was still on the worker when the module ended, and
    `worker._stop()` deleting them there took 0-42 s (21-42 s in full runs of this file; no other Python thread
    ran meanwhile), where the heartbeat thread deletes one in milliseconds."""
    api = tf.data.experimental.service
    dispatcher = api.DispatchServer(service_config_pb2.DispatcherConfig(
        protocol="grpc", job_gc_check_interval_ms=100, job_gc_timeout_ms=1, gc_dynamic_sharding_jobs=True))
    worker = api.WorkerServer(api.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1],
                                               heartbeat_interval_ms=100))
    yield dispatcher.target
    worker._stop()
    dispatcher._stop()


def source_options(source, data, service_address):
    """`(config, TrainOptions fields, export)` of a data source."""
    if source == "train_text":
        return (config_for(len(TINY_VOCAB)),
                dict(data_dir=None, train_text=data["corpus"], vocab_file=data["text_vocab"], eval_fraction=0.3),
                data["exports"]["text"])
    fields = dict(data_dir=data["shards"])
    if source == "data_service":
        fields["data_service"] = service_address
    return config_for(64), fields, data["exports"]["shards"]


def train(config, model_dir, **fields):
    options = TrainOptions(model_dir=model_dir, **{
        "log_steps": 1, "steps_per_loop": 1, "save_checkpoints_steps": 1, "export": False, "eval_batches": 1,
        "eval_every_steps": 0, "shuffle_buffer": 8, **fields})
    return pretraining.train(config, options, cpu())


def eval_steps(model_dir):
    with open(os.path.join(model_dir, "eval_log.jsonl")) as f:
        return [json.loads(line)["step"] for line in f]


def start_fresh(config, fields, export, model_dir, data):
    history = train(config, model_dir, **fields)
    assert [h["step"] for h in history] == [1, 2]
    return model_dir


def start_resume(config, fields, export, model_dir, data):
    assert [h["step"] for h in train(config, model_dir, stop_after_steps=1, **fields)] == [1]
    assert [h["step"] for h in train(config, model_dir, **fields)] == [2]  # resumed after the stop
    return model_dir


def start_init_checkpoint(config, fields, export, model_dir, data):
    history = train(config, model_dir, init_checkpoint=export, **fields)
    assert [h["step"] for h in history] == [1, 2]
    return model_dir


def start_phase2(config, fields, export, model_dir, data, refused=False):
    if not refused:  # a refused phase 2 is refused before it looks at phase 1
        train(config, model_dir, **fields)
    phase2 = restore.phase2_dir(model_dir)
    fields = dict(fields, data_dir=data["shards64"], eval_data_dir=data["held64"], phase2_from=model_dir)
    history = train(config.replace(max_seq_length=64, train_batch_size=4), phase2, **fields)
    assert [h["step"] for h in history] == [1, 2]
    return phase2


SOURCES = ("shards", "train_text", "data_service")
STARTS = {"fresh": start_fresh, "resume": start_resume, "init_checkpoint": start_init_checkpoint,
          "phase2": start_phase2}
# The cells that refuse, with the one line's start: phase 2 reads phase 2's shards (--data_dir).
REFUSED = {("train_text", "phase2"): "--phase2 reads phase 2's shards in --data_dir, not --train_text"}
CELLS = [(source, start) for source in SOURCES for start in STARTS]
# Every source and every start at least once (the whole product under -m slow).
PAIRWISE = [("shards", "phase2"), ("train_text", "init_checkpoint"), ("data_service", "resume"),
            ("train_text", "phase2")]


def beyond_pairwise(cells, pairwise) -> dict:
    """`parametrize`'s argvalues and ids of the cells the default suite's pairwise subset leaves out."""
    rest = [cell for cell in cells if cell not in pairwise]
    return {"argvalues": rest, "ids": ["-".join(cell) for cell in rest]}


def run_cell(source, start, data, service, tmp_path):
    config, fields, export = source_options(source, data, service)
    model_dir = str(tmp_path / f"{source}-{start}")
    if (source, start) in REFUSED:
        with pytest.raises(ValueError) as refused:
            STARTS[start](config, fields, export, model_dir, data, refused=True)
        assert str(refused.value).startswith(REFUSED[source, start]) and "\n" not in str(refused.value)
        assert not os.path.exists(restore.phase2_dir(model_dir))  # nothing written
        return
    run_dir = STARTS[start](config, fields, export, model_dir, data)
    assert eval_steps(run_dir)[-1] == 2  # the held-out evaluation ran, on fewer examples than one batch
    assert os.path.isfile(os.path.join(run_dir, "run_config.json"))
    assert not os.path.exists(os.path.join(run_dir, run_record.LEGACY_EXECUTION_FILE))


@pytest.mark.parametrize("source, start", PAIRWISE, ids=[f"{s}-{t}" for s, t in PAIRWISE])
def test_combination(source, start, data, service, tmp_path):
    run_cell(source, start, data, service, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("source, start", **beyond_pairwise(CELLS, PAIRWISE))
def test_combination_whole_product(source, start, data, service, tmp_path):
    run_cell(source, start, data, service, tmp_path)



# Fine-tuning: {fresh, resume} x {fp32, fp16}, evaluating on a dev set smaller than one evaluation batch ---------

FINETUNING_CELLS = [(start, precision) for start in ("fresh", "resume") for precision in ("fp32", "fp16")]
FINETUNING_PAIRWISE = [("fresh", "fp32"), ("resume", "fp16")]


def run_finetuning_cell(start, precision, tmp_path, vocab_file, glue_dir):
    import keras

    from test_finetuning_resume import _assert_same_run, crash_after_saving
    from test_finetuning_run import _common, run_main

    # SST-2: 40 training examples, batch 4; its dev set's 10 examples are fewer than one evaluation batch of 16.
    args = [f"--data_dir={glue_dir}", "--task=SST-2", "--max_train_steps=4", "--save_checkpoints_steps=2",
            f"--mixed_precision={precision}", "--eval_batch_size=16"]
    try:
        run_main(_common(tmp_path, vocab_file, "clean") + args)
        if start == "resume":
            with crash_after_saving(2):
                run_main(_common(tmp_path, vocab_file, "resumed") + args)
            run_main(_common(tmp_path, vocab_file, "resumed") + args)
            _assert_same_run(tmp_path / "clean", tmp_path / "resumed")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    metrics = json.loads((tmp_path / "clean" / "metrics.json").read_text())
    assert metrics["runs"][0]["train_steps"] == 4 and "accuracy" in metrics["median"]


@pytest.mark.parametrize("start, precision", FINETUNING_PAIRWISE, ids=[f"{s}-{p}" for s, p in FINETUNING_PAIRWISE])
def test_finetuning_combination(start, precision, tmp_path, vocab_file, glue_dir):
    run_finetuning_cell(start, precision, tmp_path, vocab_file, glue_dir)


@pytest.mark.slow
@pytest.mark.parametrize("start, precision", **beyond_pairwise(FINETUNING_CELLS, FINETUNING_PAIRWISE))
def test_finetuning_combination_whole_product(start, precision, tmp_path, vocab_file, glue_dir):
    run_finetuning_cell(start, precision, tmp_path, vocab_file, glue_dir)

# The starts that were silent or ended in a traceback on f0b01fb ---------------------------------------------

def other_vocabulary_of_the_same_size(path, size=64):
    """A vocabulary of `size` tokens with the same special tokens and other words (what build_vocab makes for
    another domain at the checkpoint's size)."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"word{i}" for i in range(size - 5)]
    with open(path, "w") as f:
        f.write("\n".join(tokens) + "\n")
    return path


def test_init_checkpoint_onto_data_of_another_vocabulary_of_the_same_size_is_refused_before_anything_is_written(
        data, tmp_path):
    """It trained silently: equal sizes returned early, every embedding row now meaning another token."""
    other = str(tmp_path / "domain")
    manifest = write_shards(other, num_examples=16, num_shards=1, seq_length=SEQ)
    other_vocabulary_of_the_same_size(manifest["vocab_file"])
    with open(os.path.join(other, "manifest.json")) as f:
        values = json.load(f)
    values["vocab_sha256"] = sha256_file(manifest["vocab_file"])
    with open(os.path.join(other, "manifest.json"), "w") as f:
        json.dump(values, f)
    model_dir = str(tmp_path / "run")
    with pytest.raises(ValueError) as refused:
        train(config_for(64), model_dir, data_dir=other, init_checkpoint=data["exports"]["shards"], eval_batches=0)
    message = str(refused.value)
    assert "\n" not in message
    export_vocab = os.path.join(data["exports"]["shards"], "vocab.txt")
    for named in (manifest["vocab_file"], values["vocab_sha256"], export_vocab,
                  sha256_file(export_vocab), "its line 6 is 'word0'"):
        assert named in message, message
    assert not os.path.exists(os.path.join(model_dir, "run_config.json"))


def test_run_pretraining_train_text_with_init_checkpoint_trains_and_applies_the_vocabulary_rule(data, tmp_path):
    """--train_text with --init_checkpoint called load_manifest(None): a TypeError traceback."""
    def cli(model_dir, vocab_file):
        return subprocess.run(
            [sys.executable, os.path.join(ROOT, "run_pretraining.py"), f"--train_text={data['corpus']}",
             f"--vocab_file={vocab_file}", f"--init_checkpoint={data['exports']['text']}",
             f"--model_dir={model_dir}", f"--max_seq_length={SEQ}", "--train_batch_size=4", "--num_train_steps=1",
             "--num_warmup_steps=0", "--eval_batches=0", "--shuffle_buffer=4"],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})

    model_dir = str(tmp_path / "continued")
    result = cli(model_dir, data["text_vocab"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.isdir(os.path.join(model_dir, "export"))
    other = other_vocabulary_of_the_same_size(str(tmp_path / "other.txt"), len(TINY_VOCAB))
    refused = cli(str(tmp_path / "refused"), other)
    assert refused.returncode == 2, refused.stderr[-3000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(f"run_pretraining.py: error: --train_text's --vocab_file {other}'s vocabulary {other} "
                           "(sha256 "), last
    assert "Traceback" not in refused.stderr
    assert not os.path.exists(str(tmp_path / "refused" / "run_config.json"))  # (only run.lock: the lock comes first)


def phase1_record(model_dir, config, vocab_sha256):
    """A phase-1 run directory as a run writes it (its record and a checkpoint), on data of `vocab_sha256`."""
    os.makedirs(model_dir)
    values = dict(config.to_dict(), training={"seed": 0, "shuffle_buffer": 8, "input_sharding": "batch",
                                              "mixed_precision": "float32", "vocab_sha256": vocab_sha256})
    with open(os.path.join(model_dir, "run_config.json"), "w") as f:
        json.dump(values, f)
    tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), os.path.join(model_dir, "checkpoints"),
                               max_to_keep=1).save(checkpoint_number=2)


def test_phase2_on_data_of_another_vocabulary_than_phase1s_is_refused_in_one_line(data, tmp_path):
    config = config_for(64)
    phase1 = str(tmp_path / "phase1")
    phase1_record(phase1, config, "f" * 64)  # phase 1 trained on another vocabulary of the same size
    with pytest.raises(ValueError) as refused:
        train(config.replace(max_seq_length=64, train_batch_size=4), restore.phase2_dir(phase1),
              data_dir=data["shards64"], phase2_from=phase1, eval_batches=0)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("--phase2's --data_dir vocabulary ") and f"phase 1's vocabulary ({phase1})" in message
    assert "f" * 64 in message and "build its shards with phase 1's vocabulary" in message
    assert not os.path.exists(restore.phase2_dir(phase1))


def test_a_retry_of_a_start_that_died_before_any_checkpoint_may_change_the_recipe(data, tmp_path, monkeypatch,
                                                                                  caplog):
    """The recipe was written before the first step: a start that died before any checkpoint (out of memory, a
    wrong path) left a record that refused the retry with another batch size."""
    model_dir = str(tmp_path / "run")

    def out_of_memory(*args, **kwargs):
        raise MemoryError("simulated: the model does not fit")

    monkeypatch.setattr(pretraining, "build_model", out_of_memory)
    with pytest.raises(MemoryError):
        train(config_for(64), model_dir, data_dir=data["shards"], eval_batches=0)
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING):
        history = train(config_for(64, train_batch_size=4, num_train_steps=1), model_dir, data_dir=data["shards"],
                        eval_batches=0)
    assert [h["step"] for h in history] == [1]
    assert (f"--model_dir {model_dir}: the record of an earlier start that wrote no checkpoint is replaced "
            "(train_batch_size: 8 -> 4; num_train_steps: 2 -> 1)") in caplog.text
    with open(os.path.join(model_dir, "run_config.json")) as f:
        assert json.load(f)["train_batch_size"] == 4
    with pytest.raises(ValueError, match=r"train_batch_size \(--train_batch_size\): 4 there vs 8 now"):
        train(config_for(64, num_train_steps=1), model_dir, data_dir=data["shards"], eval_batches=0)  # after one


def test_a_resume_with_other_sampling_or_dropout_masks_says_what_now_differs_in_one_line(data, tmp_path, caplog):
    """A resume that changed --sampling or --dropout_masks (or ran where `auto` resolves otherwise) was accepted
    with no word: the record held only the micro-batches."""
    model_dir = str(tmp_path / "run")
    train(config_for(64), model_dir, data_dir=data["shards"], eval_batches=0, stop_after_steps=1)
    recorded = ExecutionOptions().resolve({"CPU"})
    other = dict(sampling="gumbel" if recorded.sampling != "gumbel" else "inverse_cdf",
                 dropout_masks="keras" if recorded.dropout_masks != "keras" else "16bit",
                 kernels="reference")  # the XLA:CPU kernels need 16-bit masks
    with caplog.at_level(logging.WARNING):
        history = train(config_for(64), model_dir, data_dir=data["shards"], eval_batches=0,
                        execution=ExecutionOptions(**other))
    assert [h["step"] for h in history] == [2]
    lines = [r.getMessage() for r in caplog.records if "resumes with other execution choices" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    for name in ("sampling", "dropout_masks"):
        assert f"{name}: {getattr(recorded, name)} there vs {other[name]} now" in lines[0]
    assert "the random stream or arithmetic now differs from the uninterrupted run's" in lines[0]


# One owner of the run record ---------------------------------------------------------------------------------

OWNER = os.path.join("electra_tf", "training", "run_record.py")
RECORD_NAMES = {"RUN_OPTIONS_KEY", "RUN_RECORD_KEY", "load_run_config", "EXECUTION_KEY", "DATA_KEY",
                "LEGACY_EXECUTION_FILE"}
RECORD_STRINGS = {"vocab_sha256", "execution.json"}
# Modules that write or read a data *manifest's* vocab_sha256 (not a run record's): text_input synthesises
# --train_text's manifest; the vocabulary rule reads any manifest.
MANIFEST_WRITERS = {os.path.join("electra_tf", "training", "text_input.py")}


def python_files():
    for folder in ("electra_tf/training", "electra_tf/finetuning"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
            yield from (os.path.join(dirpath, n) for n in names if n.endswith(".py"))
    yield from (os.path.join(ROOT, n) for n in os.listdir(ROOT) if n.startswith("run_") and n.endswith(".py"))


def record_reads(path) -> list:
    """Where `path` names the run record's keys or readers, or the recorded vocabulary digest."""
    with open(path) as f:
        tree = ast.parse(f.read())
    found = []
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in RECORD_NAMES:
            found.append(f"{name} (line {node.lineno})")
        if isinstance(node, ast.Attribute) and node.attr == "run_record" and getattr(node.value, "id", "") in (
                "convert_api", "api"):  # convert.api's reader of a record's parts (not this module's name)
            found.append(f"convert_api.run_record (line {node.lineno})")
        if isinstance(node, ast.ImportFrom) and any(alias.name in RECORD_NAMES for alias in node.names):
            found.append(f"import (line {node.lineno})")
        if isinstance(node, ast.Constant) and node.value in RECORD_STRINGS:
            found.append(f"{node.value!r} (line {node.lineno})")
    return found


def test_only_the_owner_reads_the_recorded_recipe_and_vocabulary():
    offenders = {}
    for path in python_files():
        relative = os.path.relpath(path, ROOT)
        if relative == OWNER or relative in MANIFEST_WRITERS:
            continue
        found = record_reads(path)
        if found:
            offenders[relative] = found
    assert offenders == {}, offenders
    assert record_reads(os.path.join(ROOT, OWNER))  # the check sees what it looks for


# Newcomer friction ---------------------------------------------------------------------------------------------

def test_the_model_takes_the_vocabulary_size_of_the_datas_manifest_unless_hparams_sets_one(data, tmp_path):
    """`--data_dir` with a 64-token vocabulary was refused until --hparams repeated the manifest's vocab_size."""
    architecture = {k: v for k, v in config_for(64).to_dict().items() if k in (
        "embedding_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "generator_hidden_size",
        "generator_num_heads", "generator_intermediate_size", "generator_num_layers", "max_position_embeddings")}

    def cli(model_dir, hparams):
        return subprocess.run(
            [sys.executable, os.path.join(ROOT, "run_pretraining.py"), "--model_size=tiny",
             f"--data_dir={data['shards']}", f"--model_dir={model_dir}", f"--hparams={json.dumps(hparams)}",
             f"--max_seq_length={SEQ}", "--train_batch_size=4", "--num_train_steps=1", "--num_warmup_steps=0",
             "--eval_batches=0"],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})

    model_dir = str(tmp_path / "run")
    result = cli(model_dir, architecture)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"vocab_size 64: from --data_dir {data['shards']}'s manifest.json" in result.stderr
    with open(os.path.join(model_dir, "run_config.json")) as f:
        assert json.load(f)["vocab_size"] == 64
    refused = cli(str(tmp_path / "refused"), dict(architecture, vocab_size=80))
    assert refused.returncode == 2, refused.stderr[-3000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("run_pretraining.py: error: data in ") and "has vocab_size=64" in last, last
    assert "expects vocab_size=80" in last and not os.path.exists(str(tmp_path / "refused" / "run_config.json"))
