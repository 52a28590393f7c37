"""--train_text (electra_tf/training/text_input.py): raw text -> the batches data_prep's shards would give.

Exactness against data_prep where both are deterministic (short_seq_prob=0, single_segment_prob=1), the
packer's decisions against data_prep.packing's under the same random draws, the sentence rule against
data_prep's regex, distributions on real text, no Python in the graph, iterator checkpoints, resume after
kill -9 and one-line refusals.
"""

import collections
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from data_prep.builder import run_build
from data_prep.corpus.sentences import split_sentences as data_prep_sentences
from data_prep.packing import ExamplePacker, SpecialIds, assemble
from data_prep.plan import BuildOptions, make_plan
from data_prep_testutil import TINY_VOCAB, read_examples, write_text, write_vocab
from electra_tf.text.manifest import FEATURE_NAMES, eval_view, load_manifest
from electra_tf.training import text_input
from electra_tf.training.text_input import TextSource

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 16
PLAIN = ("The cat sat on the mat. A dog ran!\u00a0\n"
         "He is a cat? It is.\n"
         "\n"
         "\"Hello world.\" The dog sat on the mat and the cat ran and the dog ran and the cat sat on a mat.\n"
         "\n\n"
         "我爱中国。我是人。 It is the cat.\n"
         "\n"
         "a b c d e f g h i j k l m n o p q r s t u v w x y z. The end.\n")
WIKI = ("<doc id=\"1\" url=\"?curid=1\" title=\"Cat\">\nCat\n\nThe cat sat. The dog ran on the mat.\n"
        "It is a cat! He ran.\n</doc>\n<doc id=\"2\" url=\"?curid=2\" title=\"Empty\">\nEmpty\n\n</doc>\n"
        "<doc id=\"3\" url=\"?curid=3\" title=\"Dog\">\nDog\nThe dog. The cat sat on the mat and it ran.\n</doc>\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    return {"dir": d, "vocab": str(write_vocab(d)), "plain": str(write_text(d / "plain.txt", PLAIN)),
            "wiki": str(write_text(d / "wiki_00", WIKI))}


def degenerate_source(corpus, *files, **overrides):
    values = dict(patterns=files, vocab_file=corpus["vocab"], max_seq_length=SEQ, short_seq_prob=0.0,
                  single_segment_prob=1.0)
    return TextSource(**{**values, **overrides})


def text_examples(source, **kwargs) -> list[tuple]:
    rows = []
    for example in text_input.examples_dataset(source, repeat=False, **kwargs):
        rows.append(tuple(tuple(example[name].numpy().tolist()) for name in FEATURE_NAMES))
    return rows


def data_prep_examples(corpus, files, tmp_path, **options) -> list[tuple]:
    values = dict(inputs=",".join(files), output_dir=str(tmp_path / "shards"), vocab_file=corpus["vocab"],
                  max_seq_length=SEQ, num_shards=1, short_seq_prob=0.0, single_segment_prob=1.0)
    run_build(make_plan(BuildOptions(**{**values, **options})), log=lambda message: None)
    return [tuple(tuple(example[name]) for name in FEATURE_NAMES) for example in read_examples(tmp_path / "shards")]


# (a) exactness in the deterministic setting --------------------------------------------------------------

@pytest.mark.parametrize("name", ["plain", "wiki"])
def test_degenerate_packing_gives_data_prep_records_in_order(corpus, tmp_path, name):
    expected = data_prep_examples(corpus, [corpus[name]], tmp_path)
    got = text_examples(degenerate_source(corpus, corpus[name]))
    assert len(expected) >= 3 and got == expected


def test_two_files_and_eval_fraction_give_data_prep_training_records_as_a_multiset(corpus, tmp_path):
    files = [corpus["plain"], corpus["wiki"]]
    expected = data_prep_examples(corpus, files, tmp_path, eval_fraction=0.4)
    got = text_examples(degenerate_source(corpus, *files, eval_fraction=0.4))
    everything = text_examples(degenerate_source(corpus, *files))
    assert 0 < len(got) < len(everything)  # some documents held out, not all
    assert collections.Counter(got) == collections.Counter(expected)
    # the evaluation's examples (text_input.held_out_source) are those of data_prep's eval shards
    manifest = load_manifest(str(tmp_path / "shards"))
    held_out = [tuple(tuple(example[name].numpy().tolist()) for name in FEATURE_NAMES)
                for batch in text_input.held_out_source(degenerate_source(corpus, *files, eval_fraction=0.4), 0)[2](1)
                for example in [{name: batch[name][0] for name in FEATURE_NAMES}]]
    eval_records = [tuple(tuple(tf.train.Example.FromString(record.numpy()).features.feature[name].int64_list.value)
                          for name in FEATURE_NAMES)
                    for shard in eval_view(manifest)["shards"]
                    for record in tf.data.TFRecordDataset(str(tmp_path / "shards" / shard))]
    assert held_out and collections.Counter(held_out) == collections.Counter(eval_records)
    assert collections.Counter(held_out) + collections.Counter(got) == collections.Counter(everything)


@pytest.mark.parametrize("text", [
    "It rained. Then it stopped! 然后呢？好的。", "A. B. C. d. E", "He said \"Stop.\" Then left.",
    "Is it (really)? (Yes) it is.", "Mr. Smith went.\u3000Then 2 more!\u00a0 \u201cQuoted\u201d end",
    "ÉCOLE. École? Όχι. Да! а. x.\n\nY", "。！？", "no break here. lower case", "end.)\t ]Next",
])
def test_sentence_rule_cuts_as_data_prep_regex(text):
    got = [s.decode() for s in text_input.split_sentences(tf.constant(text)).numpy().tolist()]
    assert got == data_prep_sentences(text)


# packing decisions against data_prep.packing under the same draws ----------------------------------------

class ConstantRng:
    """`random.Random`'s two methods as `ExamplePacker` calls them, every draw the same uniform `u`."""

    def __init__(self, u):
        self.u = u

    def random(self):
        return self.u

    def randint(self, low, high):
        return low + int(self.u * (high - low + 1))


def test_packer_decisions_equal_data_prep_packing_under_the_same_draws():
    """u=0.03: single segment and short targets; 0.07: single, full targets; 0.3: A/B coin heads; 0.7: tails.
    Random documents with long sentences exercise truncation of A and B."""
    rng = np.random.default_rng(0)
    special = {"cls": 2, "sep": 3, "pad": 0}
    source = TextSource(patterns=(), vocab_file="", max_seq_length=SEQ, short_seq_prob=0.05,
                        single_segment_prob=0.1)
    compared = 0
    for u in [0.03, 0.07, 0.3, 0.7] * 8:
        lengths = rng.integers(0, 12, size=rng.integers(1, 9)).tolist()
        flat = np.arange(10, 10 + sum(lengths), dtype=np.int32)
        packer = ExamplePacker(SEQ, ConstantRng(u), short_seq_prob=0.05, single_segment_prob=0.1)
        specs = packer.pack_document(list(np.cumsum(lengths) - lengths), lengths)
        ids = tf.RaggedTensor.from_row_lengths(flat, tf.constant(lengths, tf.int64))
        draws = tf.fill([len(lengths), 4], tf.constant(u, tf.float32))
        parts = text_input._split_examples(tf.constant(lengths, tf.int32), draws, SEQ, source.short_seq_prob,
                                           source.single_segment_prob)
        got = text_input.assemble_examples(ids, *parts, SEQ, special)
        if not specs:
            assert got["input_ids"].shape[0] == 0
            continue
        want = assemble(flat, specs, SEQ, SpecialIds(cls=2, sep=3, pad=0))
        np.testing.assert_array_equal(got["input_ids"], want.input_ids)
        np.testing.assert_array_equal(got["input_mask"], want.input_mask)
        np.testing.assert_array_equal(got["segment_ids"], want.segment_ids)
        compared += len(specs)
    assert compared > 30


# (b) distributions on real text --------------------------------------------------------------------------

def summary(rows, unk_id):
    ids = np.array([r[0] for r in rows])
    mask = np.array([r[1] for r in rows])
    segments = np.array([r[2] for r in rows])
    return {"examples": len(rows), "mean_length": mask.sum(1).mean(),
            "single_segment": float((segments.max(1) == 0).mean()),
            "full": float((mask.sum(1) == mask.shape[1]).mean()),
            "unk_rate": float(((ids == unk_id) & (mask > 0)).sum() / mask.sum())}


@pytest.mark.data
def test_real_text_distributions_match_data_prep(shared_data, tmp_path):
    """An enwiki file (1 MB, ~1600 examples) at data_prep's defaults (short_seq_prob 0.05, single_segment_prob
    0.1, seq 128). Measured on wiki_00 + wiki_01 (3264 vs 3244 examples, mean length 104.5 vs 105.0, single
    segment 0.296 vs 0.308, [UNK] rate 6.74e-5 vs 6.75e-5); the tolerances are about 3 standard errors."""
    files = [str(shared_data / "pretrain/enwiki/AA/wiki_00")]
    vocab = str(shared_data / "vocab/en_uncased/vocab.txt")
    options = dict(max_seq_length=128, short_seq_prob=0.05, single_segment_prob=0.1)
    run_build(make_plan(BuildOptions(inputs=",".join(files), output_dir=str(tmp_path / "shards"), vocab_file=vocab,
                                     num_shards=1, **options)), log=lambda message: None)
    shards = [tuple(tuple(e[name]) for name in FEATURE_NAMES) for e in read_examples(tmp_path / "shards")]
    ours = text_examples(TextSource(patterns=tuple(files), vocab_file=vocab, **options))
    want, got = summary(shards, 100), summary(ours, 100)
    print("data_prep", want, "\ntrain_text", got)
    assert abs(got["examples"] - want["examples"]) <= 0.02 * want["examples"]
    assert abs(got["mean_length"] - want["mean_length"]) <= 0.02 * want["mean_length"]
    assert abs(got["single_segment"] - want["single_segment"]) <= 0.03
    assert abs(got["full"] - want["full"]) <= 0.03
    assert abs(got["unk_rate"] - want["unk_rate"]) <= 0.1 * want["unk_rate"] + 1e-4


# (c) no Python in the graph ------------------------------------------------------------------------------

def graph_ops(dataset) -> set:
    """The ops of the dataset's serialized graph, its functions' included. FAIL: a graph holding external state
    (a Python function, a resource) cannot be serialized, and tf.data service ships the serialized graph."""
    policy = tf.data.experimental.ExternalStatePolicy.FAIL
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph(external_state_policy=policy).numpy())
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops.update(node.op for node in function.node_def)
    return ops


def test_the_dataset_graph_has_no_python_ops(corpus):
    dataset = text_input.text_dataset(degenerate_source(corpus, corpus["plain"], corpus["wiki"], eval_fraction=0.1),
                                      batch_size=2)
    ops = graph_ops(dataset)
    assert {"TextLineDataset", "ScanDataset", "StaticRegexReplace"} <= ops and ops & {"While", "StatelessWhile"}
    assert not ops & {"PyFunc", "EagerPyFunc", "PyFuncStateless", "GeneratorDataset"}
    # the check can fail: a py_function in the same kind of pipeline is seen
    bad = dataset.map(lambda batch: tf.py_function(lambda x: x, [batch["input_ids"]], tf.int32))
    with pytest.raises(tf.errors.FailedPreconditionError):
        graph_ops(bad)


def test_a_tf_data_service_worker_yields_the_same_batches(corpus):
    """The graph is shipped to a (local, in-process) tf.data service worker and runs there as here."""
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer()
    worker = service.WorkerServer(service.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1]))
    dataset = text_input.text_dataset(degenerate_source(corpus, corpus["plain"]), 1, shuffle_buffer=0, repeat=False)
    here = [batch["input_ids"].numpy().tolist() for batch in dataset]
    remote = dataset.apply(service.distribute(processing_mode="parallel_epochs", service=dispatcher.target))
    assert len(here) >= 4 and [batch["input_ids"].numpy().tolist() for batch in remote] == here
    worker._stop()
    dispatcher._stop()


# (d) iterator checkpoint round trip ----------------------------------------------------------------------

def test_iterator_checkpoint_restores_the_next_batches(corpus, tmp_path):
    source = TextSource(patterns=(corpus["plain"], corpus["wiki"]), vocab_file=corpus["vocab"], max_seq_length=SEQ)
    iterator = iter(text_input.text_dataset(source, batch_size=2, seed=3, shuffle_buffer=5))
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    batch = next(iterator)  # the shard pipeline's format
    assert sorted(batch) == sorted(FEATURE_NAMES)
    assert all(batch[name].dtype == tf.int32 and batch[name].shape == (2, SEQ) for name in FEATURE_NAMES)
    for _ in range(2):
        next(iterator)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    expected = [next(iterator)["input_ids"].numpy() for _ in range(6)]  # crosses an epoch of the two files
    checkpoint.restore(path)
    got = [next(iterator)["input_ids"].numpy() for _ in range(6)]
    for want, have in zip(expected, got):
        np.testing.assert_array_equal(have, want)
    assert len({w.tobytes() for w in expected}) > 1


def test_per_worker_file_sharding_splits_the_files(corpus):
    source = degenerate_source(corpus, corpus["plain"], corpus["wiki"])
    whole = collections.Counter(text_examples(source))
    parts = [text_examples(source, input_context=tf.distribute.InputContext(2, i, 2)) for i in range(2)]
    assert parts[0] and parts[1] and collections.Counter(parts[0]) + collections.Counter(parts[1]) == whole


# (e) resume after kill -9 ---------------------------------------------------------------------------------

def cli(corpus, model_dir, steps, **flags):
    """`run_pretraining.py --train_text` on test_preemption's 1-layer tiny model (seq 16, batch 4)."""
    from pretrain_testutil import tiny_config
    from test_preemption import ARCHITECTURE

    config = tiny_config(num_layers=1, generator_num_layers=1, vocab_size=len(TINY_VOCAB), max_seq_length=SEQ)
    hparams = {k: v for k, v in config.to_dict().items() if k in ARCHITECTURE}
    flags = {"model_size": "tiny", "train_text": f"{corpus['plain']},{corpus['wiki']}", "vocab_file": corpus["vocab"],
             "model_dir": model_dir, "hparams": json.dumps(hparams), "max_seq_length": SEQ, "train_batch_size": 4,
             "num_train_steps": steps, "num_warmup_steps": 2, "shuffle_buffer": 8, "eval_batches": 0, **flags}
    return [sys.executable, os.path.join(ROOT, "run_pretraining.py")] + [f"--{k}={v}" for k, v in flags.items()]


def step_losses(model_dir) -> dict:
    if not os.path.exists(os.path.join(model_dir, "train_log.jsonl")):
        return {}
    with open(os.path.join(model_dir, "train_log.jsonl")) as f:
        lines = [json.loads(line) for line in f if line.endswith("\n")]
    return {line["step"]: line["step_loss"] for line in lines}  # a re-logged step keeps its last value


def latest_step(model_dir) -> int:
    """The step of the checkpoint a resume starts from (0: none; its index file alone is not enough)."""
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


@pytest.mark.slow
def test_resume_after_sigkill_gives_the_losses_of_an_uninterrupted_run(corpus, tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    flags = dict(log_steps=1, steps_per_loop=1, save_checkpoints_steps=4)
    killed_dir, full_dir = str(tmp_path / "killed"), str(tmp_path / "full")
    full = subprocess.run(cli(corpus, full_dir, 16, **flags), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert full.returncode == 0, full.stderr[-3000:]
    run = subprocess.Popen(cli(corpus, killed_dir, 16, **flags), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300  # killed between checkpoints: after step 5, the checkpoint at 4 done
        while not (latest_step(killed_dir) and max(step_losses(killed_dir), default=0) >= 5) \
                and time.time() < deadline and run.poll() is None:
            time.sleep(0.05)
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=60)
    finally:
        run.kill()
    reached = latest_step(killed_dir)
    assert 4 <= reached < 16 and run.returncode == -signal.SIGKILL
    rerun = subprocess.run(cli(corpus, killed_dir, 16, **flags), cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"from step {reached} to 16" in rerun.stderr
    resumed, uninterrupted = step_losses(killed_dir), step_losses(full_dir)
    assert sorted(resumed) == list(range(1, 17)) and resumed == uninterrupted


# (f) bad input: one line ----------------------------------------------------------------------------------

def test_a_glob_matching_nothing_is_refused_in_one_line_by_the_command(corpus, tmp_path):
    result = subprocess.run(cli(corpus, str(tmp_path / "run"), 2, train_text="/nonexistent/*.txt"), cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    errors = [line for line in result.stderr.splitlines() if line.startswith("run_pretraining.py: error:")]
    assert result.returncode == 2 and errors == [
        "run_pretraining.py: error: --train_text: no file matches '/nonexistent/*.txt' (expected text or "
        "WikiExtractor files)"], result.stderr[-2000:]
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("data_dir,train_text,vocab,message", [
    ("shards", "plain", "vocab", "--data_dir and --train_text both given: train from one of them"),
    (None, "", "vocab", "--train_text: no file pattern given"),
    (None, "plain", None, "--train_text needs --vocab_file"),
    (None, "plain", "/no/vocab.txt", "--train_text needs --vocab_file"),
])
def test_bad_flags_are_refused_in_one_line(corpus, data_dir, train_text, vocab, message):
    """The command prints these ValueErrors as one line, as the test above shows for one of them."""
    with pytest.raises(ValueError, match=message) as error:
        text_input.check_flags(data_dir, corpus.get(train_text, train_text), corpus.get(vocab, vocab))
    assert "\n" not in str(error.value)


def test_checked_source_refuses_a_vocab_size_mismatch(corpus):
    from electra_tf.options import TrainOptions
    from pretrain_testutil import tiny_config

    config = tiny_config(vocab_size=len(TINY_VOCAB), max_seq_length=SEQ)
    options = TrainOptions(data_dir=None, model_dir="unused", train_text=corpus["plain"], vocab_file=corpus["vocab"])
    assert text_input.checked_source(options, config).patterns == (corpus["plain"],)
    with pytest.raises(ValueError, match=f"has {len(TINY_VOCAB)} tokens but the model's vocab_size is 64"):
        text_input.checked_source(options, tiny_config(max_seq_length=SEQ))
    with pytest.raises(ValueError, match="--skip_corrupt_records is for --data_dir"):
        text_input.checked_source(dataclasses.replace(options, skip_corrupt_records=True), config)


def test_a_resume_with_other_text_is_refused_in_one_line(corpus, tmp_path):
    from electra_tf.options import TrainOptions
    from electra_tf.training import run_record
    from pretrain_testutil import fake_checkpoint, tiny_config

    config = tiny_config(vocab_size=len(TINY_VOCAB), max_seq_length=SEQ)
    model_dir = str(tmp_path / "run")
    options = TrainOptions(data_dir=None, model_dir=model_dir, train_text=corpus["plain"], vocab_file=corpus["vocab"])
    first = text_input.synthesized_manifest(text_input.checked_source(options, config))
    run_record.check_start(model_dir, config, options=run_record.recipe_options(options, first))
    fake_checkpoint(model_dir)  # a resume: the record binds
    other = TrainOptions(data_dir=None, model_dir=model_dir, train_text=corpus["wiki"], vocab_file=corpus["vocab"])
    second = text_input.synthesized_manifest(text_input.checked_source(other, config))
    with pytest.raises(ValueError, match=r"train_text \(--train_text\): .*wiki_00"):
        run_record.check_start(model_dir, config, options=run_record.recipe_options(other, second))
