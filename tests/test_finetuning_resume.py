"""Fine-tuning resumes after a crash: same batches, same weights, same metrics.json; finished seeds are
not trained again; a changed command is refused."""

import contextlib
import dataclasses
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from electra_tf.finetuning import checkpointing, runner
from electra_tf.finetuning.data import batch_plan
from pretrain_testutil import h5_arrays
from test_finetuning_run import TINY, _common, glue_dir, run_main, vocab_file  # noqa: F401 (fixtures)

REPO_ROOT = Path(__file__).resolve().parents[1]
# STS-B: 20 pairs, doubled by swapping = 40 examples, batch 4: 10 steps per epoch, 20 in all.
RUN = ["--task=STS-B", "--num_train_epochs=2", "--save_checkpoints_steps=3", "--select_best_epoch",
       "--learning_rate=3e-3"]


def _metrics(out) -> dict:
    """metrics.json without the wall-clock times, which no two runs share."""
    summary = json.loads((Path(out) / "metrics.json").read_text())
    for run in summary["runs"]:
        run.pop("train_seconds")
    return summary


def _assert_same_run(a, b):
    assert _metrics(a) == _metrics(b)
    wa, wb = h5_arrays(Path(a) / "final.weights.h5"), h5_arrays(Path(b) / "final.weights.h5")
    assert wa.keys() == wb.keys() and wa
    for name in wa:
        np.testing.assert_array_equal(wa[name], wb[name], err_msg=name)


@pytest.mark.parametrize("bucketed", [False, True])
def test_batch_plan_from_any_step_continues_the_same_batches(bucketed):
    keys = np.random.default_rng(0).integers(0, 3, 50) if bucketed else np.zeros(50, np.int64)
    full = list(itertools.islice(batch_plan(keys, 8, seed=5), 40))
    for start in (1, 6, 7, 13, 29):
        resumed = list(itertools.islice(batch_plan(keys, 8, seed=5, start_step=start), 40 - start))
        assert all(np.array_equal(a, b) for a, b in zip(full[start:], resumed))
    assert all(len(set(keys[b])) == 1 for b in full)  # one length bucket per batch
    if not bucketed:
        assert len(set(np.concatenate(full[:6]).tolist())) == 48  # the first epoch: distinct examples
    counts = np.bincount(np.concatenate(full), minlength=50)
    assert counts.max() - counts.min() <= 2  # nothing left out or favoured: about 6.4 epochs each
    other = list(itertools.islice(batch_plan(keys, 8, seed=6), 40))
    assert not all(np.array_equal(a, b) for a, b in zip(full, other))


class Crash(Exception):
    pass


@contextlib.contextmanager
def crash_after_saving(crash_step: int, saved: list | None = None):
    """Within: checkpoints are written as usual, and the run dies (`Crash`, which the block must raise) once the one
    at `crash_step` or later is written; `saved` receives (step, batches consumed) of each checkpoint."""
    save = checkpointing.TrainingCheckpoints.save

    def save_then_crash(self, step, batches):
        save(self, step, batches)
        if saved is not None:
            saved.append((step, self.progress.batches))
        if step >= crash_step:
            raise Crash()

    checkpointing.TrainingCheckpoints.save = save_then_crash
    try:
        with pytest.raises(Crash):
            yield
    finally:
        checkpointing.TrainingCheckpoints.save = save


def test_resumed_after_a_crash_equals_uninterrupted(tmp_path, vocab_file, glue_dir):
    args = [f"--data_dir={glue_dir}"] + RUN
    run_main(_common(tmp_path, vocab_file, "clean") + args)
    with crash_after_saving(7):  # step 9's checkpoint is written, the evaluation at 10 is lost
        run_main(_common(tmp_path, vocab_file, "crashed") + args)
    crashed = tmp_path / "crashed"
    assert sorted(os.listdir(crashed / "checkpoints"))[-1].startswith("ckpt-9.")
    run_main(_common(tmp_path, vocab_file, "crashed") + args)
    _assert_same_run(tmp_path / "clean", crashed)
    assert not (crashed / "checkpoints").exists()  # a finished seed keeps its weights, not its checkpoints


def _record_training(monkeypatch) -> list:
    trained = []

    def recording_train(model, task, config, features, options, *rest, **kw):
        trained.append(options.seed)
        return train(model, task, config, features, options, *rest, **kw)

    train = runner.train
    monkeypatch.setattr(runner, "train", recording_train)
    return trained


def test_finished_seeds_are_not_trained_again(tmp_path, vocab_file, glue_dir, monkeypatch):
    args = _common(tmp_path, vocab_file) + [f"--data_dir={glue_dir}", "--task=SST-2", "--max_train_steps=2",
                                            "--num_seeds=2"]
    run_main(args)
    out = tmp_path / "out"
    first = _metrics(out)
    (out / "seed_1" / "train_result.json").unlink()  # as if killed before seed 1 finished
    trained = _record_training(monkeypatch)
    run_main(args)
    assert trained == [1]
    assert _metrics(out) == first and [r["seed"] for r in first["runs"]] == [0, 1]
    run_main(args + ["--do_predict"])  # predictions from the finished seeds' weights, no training
    assert trained == [1]
    assert (out / "seed_0" / "SST-2.tsv").exists() and (out / "seed_1" / "SST-2.tsv").exists()
    assert {k: v for k, v in _metrics(out).items() if k != "runs"} == {k: v for k, v in first.items() if k != "runs"}


def test_a_changed_command_is_refused_until_overwrite(tmp_path, vocab_file, glue_dir, monkeypatch):
    args = _common(tmp_path, vocab_file) + [f"--data_dir={glue_dir}", "--task=SST-2", "--max_train_steps=2"]
    run_main(args)
    with pytest.raises(SystemExit) as refused:
        run_main(args + ["--learning_rate=5e-3"])
    message = str(refused.value)
    assert message.startswith("run_finetuning.py: error: --output_dir: ") and "\n" not in message
    assert "learning_rate: 0.001 there vs 0.005 now" in message
    with pytest.raises(SystemExit, match="config.discriminator.hidden_size: 16 there vs 32 now"):
        run_main(args + ["--hparams=" + json.dumps({**json.loads(TINY), "hidden_size": 32})])
    trained = _record_training(monkeypatch)
    run_main(args + ["--learning_rate=5e-3", "--overwrite_output_dir"])
    assert trained == [0]
    settings = json.loads((tmp_path / "out" / "run_settings.json").read_text())
    assert settings["learning_rate"] == 5e-3


def _wait_for_checkpoint(checkpoint_dir: Path, process, timeout=180) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if checkpoint_dir.is_dir() and list(checkpoint_dir.glob("ckpt-*.index")):
            return True
        time.sleep(0.02)
    return False


@pytest.mark.slow
def test_sigkill_at_a_random_step_then_rerun_gives_the_same_metrics(tmp_path, vocab_file, glue_dir):
    """The command line, killed with SIGKILL anywhere after its first checkpoint (~60 s)."""
    def command(out):
        return [sys.executable, "run_finetuning.py", *_common(tmp_path, vocab_file, out), f"--data_dir={glue_dir}",
                *RUN]

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    quiet = dict(cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    clean = subprocess.Popen(command("clean"), env=env, **quiet)
    killed = subprocess.Popen(command("killed"), env={**env, "ELECTRA_TEST_PAUSE_AFTER_CHECKPOINT": "0.4"},
                              **quiet)
    try:
        assert _wait_for_checkpoint(tmp_path / "killed" / "checkpoints", killed), "no checkpoint was written"
        time.sleep(random.uniform(0, 2.0))  # 8 checkpoints × 0.4 s: the kill lands before the end
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        clean.communicate()
    assert clean.returncode == 0
    assert not (tmp_path / "killed" / "train_result.json").exists()
    resumed = subprocess.run(command("killed"), env=env, **quiet, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Resuming fine-tuning from" in resumed.stderr
    _assert_same_run(tmp_path / "clean", tmp_path / "killed")


def test_fp16_resume_after_skipped_steps_reads_the_batches_the_uninterrupted_run_read(tmp_path, vocab_file, glue_dir,
                                                                                      monkeypatch):
    """Issue #55: fp16 fine-tuning saved `optimizer.iterations` as the step and a resume skipped that many
    batches, so after loss-scale overflows (a skipped step reads a batch but applies nothing) the resumed run
    read batches again. A huge initial loss scale forces skipped steps; the resumed run must equal the
    uninterrupted one."""
    import keras

    class HugeInitialScale(keras.optimizers.LossScaleOptimizer):
        def __init__(self, inner_optimizer, **kwargs):
            super().__init__(inner_optimizer, initial_scale=2.0 ** 24)

    monkeypatch.setattr(keras.optimizers, "LossScaleOptimizer", HugeInitialScale)
    args = [f"--data_dir={glue_dir}", "--task=SST-2", "--max_train_steps=6", "--save_checkpoints_steps=2",
            "--mixed_precision=fp16", "--learning_rate=3e-3"]
    saved = []
    try:
        run_main(_common(tmp_path, vocab_file, "clean") + args)
        with crash_after_saving(4, saved):
            run_main(_common(tmp_path, vocab_file, "crashed") + args)
        assert saved[-1][0] == 4 and saved[-1][1] > 4, saved  # overflowed steps read batches, applied nothing
        run_main(_common(tmp_path, vocab_file, "crashed") + args)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    _assert_same_run(tmp_path / "clean", tmp_path / "crashed")


def test_a_resume_with_other_execution_choices_is_named_in_one_line_and_older_folders_resume(tmp_path, caplog):
    """The execution choices (resolved) are recorded beside the settings: a resume that changes them goes on,
    with one warning naming each; a folder recorded before them resumes without one."""
    import logging

    from electra_tf.options import ExecutionOptions

    run_dir = str(tmp_path / "run")
    recorded = dataclasses.asdict(ExecutionOptions(dropout_masks="16bit").resolve({"CPU"}))
    settings = {"task": "SST-2", "learning_rate": 1e-3, checkpointing.EXECUTION: recorded}
    checkpointing.start_run(run_dir, settings)
    os.makedirs(os.path.join(run_dir, checkpointing.CHECKPOINT_DIR))  # a checkpoint was written: a resume
    other = dict(recorded, dropout_masks="keras", kernels="reference")
    caplog.set_level(logging.WARNING)
    checkpointing.check_settings(run_dir, dict(settings, **{checkpointing.EXECUTION: other}))
    lines = [r.getMessage() for r in caplog.records if "other execution choices" in r.getMessage()]
    assert len(lines) == 1 and "dropout_masks: 16bit there vs keras now" in lines[0], lines
    assert "kernels: xla_cpu there vs reference now" in lines[0]
    with pytest.raises(ValueError, match="learning_rate: 0.001 there vs 0.002 now"):  # the settings still refuse
        checkpointing.check_settings(run_dir, dict(settings, learning_rate=2e-3))
    older = {k: v for k, v in settings.items() if k != checkpointing.EXECUTION}
    checkpointing.start_run(str(tmp_path / "older"), older)
    caplog.clear()
    checkpointing.check_settings(str(tmp_path / "older"), settings)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
