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

from data_prep_testutil import TINY_VOCAB, write_text, write_vocab
from electra_tf.convert import save_ours
from electra_tf.convert.keras_model import build_pretrainer
from electra_tf.options import ExecutionOptions, TrainOptions
from electra_tf.training import pretraining, restore, run_record
from pretrain_testutil import SPECIAL_IDS, tiny_config, write_shards
from test_evaluation import add_eval_shards

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
    """An in-process tf.data service: a dispatcher and one worker."""
    api = tf.data.experimental.service
    dispatcher = api.DispatchServer()
    worker = api.WorkerServer(api.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1]))
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
@pytest.mark.parametrize("source, start", [c for c in CELLS if c not in PAIRWISE],
                         ids=[f"{s}-{t}" for s, t in CELLS if (s, t) not in PAIRWISE])
def test_combination_whole_product(source, start, data, service, tmp_path):
    run_cell(source, start, data, service, tmp_path)
