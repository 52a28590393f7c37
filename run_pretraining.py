"""Pre-trains ELECTRA (replaced-token detection) or an MLM baseline.

With no arguments it runs the offline demo: it builds a small corpus from the
Python installation's own documentation (shards + an 8192-word vocab) under
`./electra_demo/`, trains the `tiny` model for a few minutes on the CPU and
prints where the TensorBoard logs, checkpoints and export are.

Real runs:

    python run_pretraining.py --model_size=base --data_dir=shards/ \
        --model_dir=runs/base --strategy=mirrored --mixed_precision=bf16

Re-running the same command resumes from the newest checkpoint in
`--model_dir`. SIGTERM (what schedulers and pre-emptible VMs send) stops after
the step in progress, writes a checkpoint at that step and exits 0.

Phase 2 of BERT's two-phase recipe (most steps at length 128, then 512): the
phase-1 command with `--phase2`, the 512-token shards and phase 2's batch and
schedule; it starts from phase 1's model and optimizer state at step 0 and
writes into `<model_dir>/phase2/`:

    python run_pretraining.py --model_size=base --data_dir=shards_512/ \
        --model_dir=runs/base --phase2 --train_batch_size=256 --num_train_steps=...

One run writes to a `--model_dir` at a time: a run holds a kernel lock on
`<model_dir>/run.lock` (which names its host, pid and start time) until it exits,
and a second run there is refused naming them; the kernel frees a killed run's
lock and the next run takes the file over with a warning (see
`electra_tf/training/run_lock.py`; not on gs:// and other object stores).

Several machines (MultiWorkerMirroredStrategy; `--model_dir` on storage all of
them reach, e.g. GCS or NFS), the same command on each, only --task_index
differs (0 is the chief):

    python run_pretraining.py --strategy=multi_worker \
        --worker_hosts=host1:2222,host2:2222 --task_index=0 ...
"""

import dataclasses
import os
import re
import signal
import sys

from electra_tf.runtime import use_onednn_kernels, use_xla_cache

use_onednn_kernels()  # before TensorFlow is imported

from absl import app, flags, logging  # noqa: E402

from electra_tf.options import TrainOptions, execution_from_flags  # noqa: E402
from electra_tf.training import pretraining_flags  # noqa: E402

pretraining_flags.define_flags()
flags.adopt_module_key_flags(pretraining_flags)  # `--help` lists them as this script's

FLAGS = flags.FLAGS
DEMO_DIR = "electra_demo"
DEMO_EVAL_EVERY_STEPS = 100  # the demo's eval curve: a point per log line


def resolve_data(model_size):
    """`(data_dir, model_dir, demo_vocab_size)`: the demo corpus (built at the size's sequence
    length, in a folder of the size's own) when --data_dir is unset; demo_vocab_size is None otherwise.
    With --train_text data_dir is None and demo_vocab_size --vocab_file's size."""
    if FLAGS.train_text is not None:
        return resolve_text()
    if FLAGS.data_dir:
        if not FLAGS.model_dir:
            raise app.UsageError("--model_dir is required with --data_dir")
        return FLAGS.data_dir, FLAGS.model_dir, None
    from data_prep.demo import build_demo_dataset
    from electra_tf.config import get_config
    from electra_tf.text.manifest import load_manifest

    max_seq_length = FLAGS.max_seq_length or get_config(model_size).max_seq_length
    data_dir = build_demo_dataset(os.path.join(DEMO_DIR, model_size, "data"), max_seq_length=max_seq_length)
    return data_dir, FLAGS.model_dir or os.path.join(DEMO_DIR, model_size, "model"), load_manifest(data_dir)["vocab_size"]


def resolve_text():
    """`resolve_data` for --train_text: its flags checked in one line each."""
    from electra_tf.text.tokenizers import validate_tokenizer_file
    from electra_tf.training import text_input

    text_input.check_flags(FLAGS.data_dir, FLAGS.train_text, FLAGS.vocab_file)
    if not FLAGS.model_dir:
        raise ValueError("--model_dir is required with --train_text")
    try:
        return None, FLAGS.model_dir, len(validate_tokenizer_file(FLAGS.vocab_file))
    except ValueError as e:
        raise ValueError(f"--vocab_file: {e}") from None


def demo_lines(model_size, data_dir, model_dir, config, size_vocab_size) -> list[str]:
    """What the no-data run does, in plain words, for the first log lines."""
    seq = config.max_seq_length
    return [
        f"No --data_dir: training `{model_size}` on the offline demo corpus (Python's own documentation) in "
        f"{data_dir}, built at {model_size}'s sequence length {seq}; its {config.vocab_size}-word vocabulary "
        f"replaces {model_size}'s {size_vocab_size}.",
        f"Checkpoints, TensorBoard logs and the export go to {model_dir}; the same command resumes there.",
        "Your own text: python -m data_prep.build_pretraining_dataset --input=corpus/ --vocab_file=vocab.txt "
        f"--output_dir=shards/ --max_seq_length={seq}, then python run_pretraining.py --model_size={model_size} "
        f"--data_dir=shards/ --model_dir=runs/{model_size}",
    ]


def create_strategy():
    """The strategy, created before anything runs a TensorFlow op (multi_worker requires it)."""
    from electra_tf.training import distribution

    if FLAGS.num_cpu_devices:
        distribution.split_cpu(FLAGS.num_cpu_devices)
    name = FLAGS.strategy
    if FLAGS.worker_hosts:
        if name not in ("auto", "multi_worker"):
            raise app.UsageError(f"--worker_hosts needs --strategy=multi_worker, not {name}")
        os.environ["TF_CONFIG"] = distribution.tf_config_from_hosts(",".join(FLAGS.worker_hosts), FLAGS.task_index)
        name = "multi_worker"
    elif FLAGS.task_index is not None:
        raise app.UsageError("--task_index needs --worker_hosts")
    if FLAGS.export_only or FLAGS.do_eval:
        return None
    return distribution.create_strategy(name, FLAGS.tpu, collective_timeout_seconds=FLAGS.collective_timeout_seconds,
                                        cpu_devices=FLAGS.num_cpu_devices)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    try:
        use_xla_cache(FLAGS.xla_cache_dir)  # before TensorFlow creates its devices (the run's log names it)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    strategy = create_strategy()  # first: MultiWorkerMirroredStrategy must precede every TF op
    from electra_tf.training import distribution, run_lock

    model_size = FLAGS.model_size or ("small" if FLAGS.data_dir or FLAGS.train_text else "tiny")
    max_seq_length = sequence_length(model_size)  # refused before anything is written
    data_dir, model_dir, demo_vocab_size = resolve_data(model_size)
    # The chief is the only writer of checkpoints and the export, so it alone holds the lock.
    lock = run_lock.lock_for_worker(model_dir, chief=strategy is None or distribution.is_chief(strategy))
    try:
        train_or_export(strategy, model_size, data_dir, model_dir, demo_vocab_size, max_seq_length)
    finally:
        if lock is not None:
            lock.release()


def sequence_length(model_size):
    """--max_seq_length (with --phase2 unset: the shards'), refused in one line above the position table."""
    from electra_tf.config import get_config, parse_hparams
    from electra_tf.training import restore

    if FLAGS.phase2 and (not FLAGS.data_dir or not FLAGS.model_dir or FLAGS.init_checkpoint):
        raise app.UsageError("--phase2 needs --data_dir (phase 2's shards) and --model_dir (phase 1's run), and takes "
                             "no --init_checkpoint (it starts from phase 1's checkpoint in --model_dir)")
    if FLAGS.init_checkpoint:  # the checkpoint's table decides (config.merge_architecture)
        return FLAGS.max_seq_length
    if FLAGS.phase2:  # phase 2 keeps phase 1's model
        table = restore.phase1_config(FLAGS.model_dir).max_position_embeddings
    else:  # the size's table, as --hparams sets it (a length of 1 fits any table: the length is checked below)
        table = get_config(model_size, parse_hparams(FLAGS.hparams), max_seq_length=1).max_position_embeddings
    return restore.requested_sequence_length(FLAGS.max_seq_length, FLAGS.data_dir if FLAGS.phase2 else None, table)


def train_or_export(strategy, model_size, data_dir, model_dir, demo_vocab_size, max_seq_length):
    from electra_tf.training import distribution, pretraining, restore
    from electra_tf.config import get_config, parse_hparams

    if FLAGS.do_eval:
        if FLAGS.train_text:
            raise ValueError("--do_eval reads held-out shards (--data_dir or --eval_data_dir), not --train_text")
        return evaluate_run(data_dir, model_dir)
    precision = distribution.set_mixed_precision(FLAGS.mixed_precision)
    hparams = parse_hparams(FLAGS.hparams)
    if demo_vocab_size is not None:  # the demo's vocabulary, unless --hparams names one
        hparams = {"vocab_size": demo_vocab_size, **hparams}
    elif data_dir and not FLAGS.phase2 and not FLAGS.init_checkpoint:  # (those take the vocabulary of their start)
        hparams = {"vocab_size": data_vocab_size(data_dir, hparams), **hparams}
    flag_values = dict(num_train_steps=FLAGS.num_train_steps, num_warmup_steps=FLAGS.num_warmup_steps,
                       train_batch_size=FLAGS.train_batch_size, learning_rate=FLAGS.learning_rate,
                       max_seq_length=max_seq_length, objective=FLAGS.objective, optimizer=FLAGS.optimizer)
    if FLAGS.phase2:  # phase 1's recorded config; the flags change only what phase 2 is for
        config = restore.phase2_config(model_dir, hparams, dict(flag_values, model_size=FLAGS.model_size))
    else:
        config = get_config(model_size, hparams, **flag_values)
    if FLAGS.init_checkpoint:
        from electra_tf.config import merge_architecture
        from electra_tf.convert import read_config
        from electra_tf.convert.api import checkpoint_vocab
        from electra_tf.training import vocab_extension

        config = merge_architecture(read_config(FLAGS.init_checkpoint)[0], config,
                                    FLAGS.init_checkpoint)
        # The data's vocabulary decides the rows: the checkpoint's, or an extension of it (new rows at init);
        # another vocabulary is refused here, before anything is written.
        manifest, name = data_manifest(data_dir, config)
        vocab_size = vocab_extension.data_vocab_size(FLAGS.init_checkpoint, config.vocab_size,
                                                     checkpoint_vocab(FLAGS.init_checkpoint), manifest, name)
        config = config.replace(vocab_size=vocab_size)
    phase1_dir = model_dir if FLAGS.phase2 else None
    if FLAGS.phase2:
        model_dir = restore.phase2_dir(model_dir)
    if FLAGS.export_only:
        from electra_tf.training.input_pipeline import load_checked_manifest

        if FLAGS.train_text:
            from electra_tf.training.text_input import TextSource, synthesized_manifest

            manifest = synthesized_manifest(TextSource((), FLAGS.vocab_file, config.max_seq_length))
        else:
            manifest = load_checked_manifest(data_dir, config)
        path = pretraining.export_latest(config, model_dir, manifest["special_token_ids"], manifest.get("vocab_file"))
        print(f"Exported to {path}")
        return
    if demo_vocab_size is not None and not FLAGS.train_text:
        for line in demo_lines(model_size, data_dir, model_dir, config, get_config(model_size).vocab_size):
            logging.info("%s", line)
    options = TrainOptions(
        data_dir=data_dir, model_dir=model_dir, seed=FLAGS.seed,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps, keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        log_steps=FLAGS.log_steps, steps_per_loop=FLAGS.steps_per_loop, execution=execution_from_flags(FLAGS),
        mixed_precision=FLAGS.mixed_precision, shuffle_buffer=FLAGS.shuffle_buffer,
        init_checkpoint=FLAGS.init_checkpoint, phase2_from=phase1_dir, stop_after_steps=FLAGS.stop_after_steps,
        skip_nonfinite_steps=FLAGS.skip_nonfinite_steps, skip_corrupt_records=FLAGS.skip_corrupt_records,
        input_sharding=FLAGS.input_sharding, data_service=FLAGS.data_service,
        stop_signals=(signal.SIGTERM,), eval_data_dir=FLAGS.eval_data_dir,
        eval_every_steps=eval_every_steps(demo=demo_vocab_size is not None and not FLAGS.train_text),
        eval_batches=FLAGS.eval_batches,
        eval_batch_size=FLAGS.eval_batch_size, train_text=FLAGS.train_text, vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case, eval_fraction=FLAGS.eval_fraction,
    )
    logging.info("Config (%s): %s", precision, config.to_json())
    history = pretraining.train(config, options, strategy)
    if distribution.is_chief(strategy):
        summarize(history, model_dir)


def data_vocab_size(data_dir, hparams) -> int:
    """The model's vocab_size for --data_dir: its manifest's, unless --hparams sets one (a size that differs
    from the data's is then refused in one line by the manifest check, before anything is written)."""
    from electra_tf.text.manifest import load_manifest

    size = load_manifest(data_dir)["vocab_size"]
    if "vocab_size" not in hparams:
        logging.info("vocab_size %d: from --data_dir %s's manifest.json (--hparams may set it)", size, data_dir)
    return size


def data_manifest(data_dir, config):
    """`(manifest, name)` of the run's data before the model is known: --data_dir's manifest, or for
    --train_text the one `text_input` synthesises from --vocab_file; `name` names it in messages."""
    if FLAGS.train_text:
        from electra_tf.training.text_input import TextSource, synthesized_manifest

        source = TextSource((), FLAGS.vocab_file, config.max_seq_length)
        return synthesized_manifest(source), f"--train_text's --vocab_file {FLAGS.vocab_file}"
    from electra_tf.text.manifest import load_manifest

    return load_manifest(data_dir), f"--data_dir {data_dir}"


def eval_every_steps(demo: bool):
    """--eval_every_steps; unset in the demo, often enough to draw a curve."""
    if FLAGS.eval_every_steps is None and demo:
        return DEMO_EVAL_EVERY_STEPS
    return FLAGS.eval_every_steps


def evaluate_run(data_dir, model_dir):
    """--do_eval: the run's own config (stored in --model_dir) on the held-out data; nothing is trained."""
    from electra_tf.training import distribution, evaluation, run_record
    from electra_tf.training.input_pipeline import load_checked_manifest

    config = run_record.recorded_config(model_dir, "--do_eval: --model_dir", "train there first")
    manifest = load_checked_manifest(data_dir, config)
    source = evaluation.resolve_source(FLAGS.eval_data_dir, data_dir, manifest, config)
    if source is None:
        raise ValueError(f"--do_eval: {data_dir} has no held-out shards (build it with --eval_fraction) and "
                         "--eval_data_dir is unset")
    if FLAGS.eval_batches < 1:
        raise ValueError(f"--do_eval needs --eval_batches >= 1, not {FLAGS.eval_batches}")
    import tensorflow as tf

    # The entry point resolves the execution options for this process's devices, as training does; the
    # sampling method is part of what an evaluation draws.
    requested = dataclasses.replace(execution_from_flags(FLAGS), gradient_accumulation_steps=1)
    execution, _ = distribution.resolve_execution(requested, tf.distribute.get_strategy(), config)
    model = evaluation.build_model(config, manifest, execution)
    batch_size = FLAGS.eval_batch_size or config.train_batch_size
    results = evaluation.evaluate_checkpoints(model, source, model_dir, batch_size, FLAGS.eval_batches,
                                              FLAGS.eval_all_checkpoints)
    for result in results:
        print(f"eval at step {result['step']}: " + "  ".join(
            f"{k}={v:.4f}" for k, v in result.items() if k != "step"))
    print(f"Eval results: {os.path.join(model_dir, evaluation.LOG_FILE)}, "
          f"TensorBoard {os.path.join(model_dir, evaluation.LOG_DIR)}")


def summarize(history, model_dir):
    if history:
        first, last = history[0], history[-1]
        keys = [k for k in ("disc_auc", "gen_accuracy", "disc_loss", "gen_loss", "loss") if k in last]
        print("\n" + "  ".join(f"{k}: {first[k]:.4f} -> {last[k]:.4f}" for k in keys))
        print(f"Throughput at the end: {last['examples_per_second']:.1f} examples/s")
    eval_lines = _read_jsonl(os.path.join(model_dir, "eval_log.jsonl"))
    if eval_lines:
        first, last = eval_lines[0], eval_lines[-1]
        keys = [k for k in ("disc_auc", "gen_accuracy", "disc_loss", "gen_loss", "loss") if k in last]
        print(f"held-out eval, step {first['step']} -> {last['step']}:  "
              + "  ".join(f"{k}: {first[k]:.4f} -> {last[k]:.4f}" for k in keys))
    print(f"Checkpoints:  {os.path.join(model_dir, 'checkpoints')}")
    print(f"TensorBoard:  tensorboard --logdir {model_dir}")
    if os.path.isdir(os.path.join(model_dir, "export")):
        print(f"Export:       {os.path.join(model_dir, 'export')} (fine-tune with run_finetuning.py --init_checkpoint)")
    if not FLAGS.data_dir and not FLAGS.train_text and history and "disc_auc" in history[-1]:
        print(DEMO_CURVE_NOTE)


def _read_jsonl(path) -> list[dict]:
    import json

    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


DEMO_CURVE_NOTE = """
What the demo's curve means (train_log.jsonl, TensorBoard): the discriminator's AUC jumps early, because an
untrained generator samples near-uniform words that are easy to spot; it dips (to ~0.55 around steps 200-500)
once the generator has learned word frequencies and its samples are plausible; it climbs again as the
discriminator learns to use context. That dip is expected at this scale, not a bug: the same recipe in an
independent PyTorch implementation shows it. eval_log.jsonl (TensorBoard: eval/) measures the same on held-out
documents with fixed masks: a training loss that falls while the eval loss rises means the model memorises the
corpus. A tiny model trained for minutes on CPU is far from the paper's scale; experiments/compare_objectives.py
measures what pre-training is worth downstream."""


def lost_worker_message(error) -> str | None:
    """One line for a multi-worker collective that failed because another worker died or hung, else None."""
    import tensorflow as tf

    if not os.environ.get("TF_CONFIG") or not isinstance(error, (
            tf.errors.DeadlineExceededError, tf.errors.UnavailableError, tf.errors.AbortedError,
            tf.errors.CancelledError)):
        return None
    text = str(error)
    if "unhealthy" in text:
        tasks = sorted(set(re.findall(r"/job:\w+/replica:\d+/task:\d+", text.split("unhealthy", 1)[1])))
        what = f"{', '.join(tasks) or 'a worker'} stopped sending heartbeats (crashed, killed or pre-empted)"
    elif isinstance(error, tf.errors.DeadlineExceededError):
        what = "a collective waited longer than --collective_timeout_seconds for another worker"
    else:
        remote = re.findall(r"remote target (/job:\w+/replica:\d+/task:\d+)", text)
        reasons = re.findall(r'grpc_message:"([^"]+)"', text) or [
            line.strip(" :") for line in text.splitlines()
            if re.search(r"reset by peer|Socket closed|failed to connect|Connection refused", line, re.I)]
        reason = reasons[0] if reasons else ""
        what = f"lost the connection to {remote[0] if remote else 'another worker'}"
        what += f" ({reason})" if reason else ""
    return (f"{what} [{type(error).__name__}]; stopping. Re-launch every worker with the same command to resume "
            "from the last checkpoint")


if __name__ == "__main__":
    try:
        app.run(main)
    except ValueError as e:  # configuration and data errors: one clear line, no traceback
        print(f"run_pretraining.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as e:  # NaN/Inf losses, a corrupt record, a --model_dir in use: one line, exit 1
        if type(e).__name__ not in ("NonFiniteError", "CorruptDataError", "RunLockError"):
            raise
        print(f"run_pretraining.py: error: {e}", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 -- tf.errors.OpError from a collective whose peer is gone
        message = lost_worker_message(e)
        if message is None:
            raise
        print(f"run_pretraining.py: error: {message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        from electra_tf.training import run_lock
        run_lock.release_all()  # os._exit skips finally blocks and atexit
        os._exit(1)  # with sys.exit, TensorFlow's shutdown waits ~10 s more for the lost worker
