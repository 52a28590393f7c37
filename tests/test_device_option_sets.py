"""Every device's default option set trains for real: 2 mirrored replicas × 2 micro-batches, fp32 and bf16.

The CPU set (XLA:CPU kernels, 16-bit dropout masks, inverse-CDF sampling, fused Adam, no XLA step,
grappler off) and the GPU/TPU set (reference kernels, Keras' masks, Gumbel sampling, Adam as ops,
the XLA-compiled step, grappler on) each run their first step under `MirroredStrategy` with
gradient accumulation, and their first step's `gen_loss` and `disc_loss` are compared with the
CPU path on one device (fp32, one micro-batch). With dropout 0 the masks are keyed by seed, step
and example whatever the layout, so the only random stream that differs between the sets is the
generator's sampling: the reference runs the set's own sampling method. Tolerances, per precision:
fp32 1e-5 relative (kernels and summation order); bf16 3e-2 relative (8-bit mantissas through two
encoders; a sampled token can flip at a near tie) — below what another masking seed changes, which
the test checks too, so the tolerance can tell a wrong step from a right one.
"""

import dataclasses
import functools

import keras
import pytest
import tensorflow as tf

from electra_tf.options import ExecutionOptions
from electra_tf.training import distribution, input_pipeline, pretraining
from pretrain_testutil import mirrored_cpus, write_shards
from test_training import small

CPU_SET = ExecutionOptions().resolve({"CPU"})
ACCELERATOR_SET = ExecutionOptions().resolve({"GPU"})
TOLERANCE = {"none": 1e-5, "bf16": 3e-2}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("shards"))
    write_shards(path, num_examples=64, num_shards=2)
    return path


def first_step(data_dir, execution, strategy, precision="none", seed=0):
    """The first step's gen_loss and disc_loss as a run computes them: `pretraining.build_model` under
    `strategy`, one call of the run's step driver on the run's input (no checkpoints, logs or preview)."""
    config = small(dropout_rate=0.0, train_batch_size=8)
    distribution.set_mixed_precision(precision)
    try:
        keras.utils.set_random_seed(seed)
        manifest = input_pipeline.load_checked_manifest(data_dir, config)
        model, _ = pretraining.build_model(config, strategy, manifest["special_token_ids"], seed, precision, execution)
    finally:
        keras.mixed_precision.set_global_policy("float32")  # the variables are built; the policy was the build's
    dataset = input_pipeline.worker_dataset(strategy, data_dir, manifest, config.train_batch_size, seed=seed)
    run = pretraining.make_train_fn(strategy, model, execution)
    outputs = run(iter(dataset), tf.constant(1))
    assert int(outputs["nonfinite_steps"]) == 0
    return {name: float(value) for name, value in model.metric_results().items()}


def cpu_path(data_dir, sampling, seed=0):
    """One device, fp32, one micro-batch: the CPU defaults, with the set's sampling method."""
    return first_step(data_dir, dataclasses.replace(CPU_SET, sampling=sampling),
                      tf.distribute.OneDeviceStrategy("/cpu:0"), seed=seed)


@pytest.fixture(scope="module")
def cpu_path_once(data_dir):
    """`cpu_path(data_dir, sampling, seed)` computed once per (sampling, seed) in this module: the accelerator
    set's reference (Gumbel, seed 0) is also the tolerance test's (`first_step` seeds its own build)."""
    return functools.cache(functools.partial(cpu_path, data_dir))


def assert_close(got, want, rtol):
    for name in ("gen_loss", "disc_loss"):
        assert abs(got[name] - want[name]) <= rtol * abs(want[name]), (name, got[name], want[name], rtol)


@pytest.mark.parametrize("option_set", ["cpu", "accelerator"])
def test_default_option_set_trains_under_two_replicas_with_accumulation_fp32_and_bf16(data_dir, option_set,
                                                                                    cpu_path_once):
    execution = dataclasses.replace(CPU_SET if option_set == "cpu" else ACCELERATOR_SET, gradient_accumulation_steps=2)
    reference = cpu_path_once(execution.sampling)
    assert_close(first_step(data_dir, execution, mirrored_cpus()), reference, TOLERANCE["none"])
    assert_close(first_step(data_dir, execution, mirrored_cpus(), "bf16"), reference, TOLERANCE["bf16"])


def test_the_bf16_tolerance_tells_another_step_apart(cpu_path_once):
    """What a wrong step looks like, at the least: another masking seed. It moves a loss by more than the
    bf16 tolerance, so passing within it says something."""
    reference, other = cpu_path_once("gumbel"), cpu_path_once("gumbel", seed=1)
    assert any(abs(other[name] - reference[name]) > TOLERANCE["bf16"] * abs(reference[name])
               for name in ("gen_loss", "disc_loss")), (other, reference)


def test_a_batch_that_replicas_times_micro_batches_do_not_divide_is_refused_before_anything_is_built(
        data_dir, tmp_path):
    config = small(num_train_steps=1, train_batch_size=6)
    model_dir = tmp_path / "run"
    options = pretraining.TrainOptions(data_dir=data_dir, model_dir=str(model_dir),
                                       execution=ExecutionOptions(gradient_accumulation_steps=2))
    with pytest.raises(ValueError) as error:
        pretraining.train(config, options, mirrored_cpus())
    assert str(error.value) == ("--train_batch_size=6 must be a multiple of 2 replica(s) × 2 micro-batch(es) "
                                "(--gradient_accumulation_steps) = 4")
    assert not model_dir.exists()


def test_a_run_whose_onednn_kernels_assume_frozen_weights_is_refused_before_anything_is_built(
        data_dir, tmp_path, monkeypatch):
    """Under TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 a fused matmul keeps its first call's weights, and a run changes
    them (before: the run trained, and evaluated with stale weights). A run on GPUs alone is not oneDNN's."""
    from electra_tf.runtime import onednn_enabled

    if not onednn_enabled():
        pytest.skip("TensorFlow runs no oneDNN kernels here (TF_ENABLE_ONEDNN_OPTS=0, or not an x86 build)")
    monkeypatch.setenv("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "1")
    model_dir = tmp_path / "run"
    options = pretraining.TrainOptions(data_dir=data_dir, model_dir=str(model_dir), execution=ExecutionOptions())
    with pytest.raises(ValueError) as error:
        pretraining.train(small(num_train_steps=1), options, mirrored_cpus())
    assert str(error.value) == ("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1: oneDNN's fused matmuls would keep the weights "
                                "of their first call while this run trains or evaluates changing ones; unset it (it "
                                "is for serving a fixed model)")
    assert not model_dir.exists()
    distribution.check_frozen_weights({"GPU"})
    monkeypatch.setenv("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "True")  # TensorFlow's spelling of on, any case
    with pytest.raises(ValueError, match="^TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=True: "):
        distribution.check_frozen_weights({"CPU"})
    monkeypatch.setenv("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "0")
    distribution.check_frozen_weights({"CPU"})


ACCELERATOR_FLAGS = ["--kernels=reference", "--dropout_masks=keras", "--sampling=gumbel", "--adam_kernel=ops",
                     "--jit_compile", "--graph_optimizer=on"]


@pytest.mark.slow
def test_fp16_trains_under_the_accelerator_set_with_two_replicas_and_accumulation(data_dir):
    execution = dataclasses.replace(ACCELERATOR_SET, gradient_accumulation_steps=2)
    reference = cpu_path(data_dir, execution.sampling)
    fp16 = first_step(data_dir, execution, mirrored_cpus(), "fp16")
    assert_close(fp16, reference, TOLERANCE["bf16"])  # fp16's 10-bit mantissas: no looser than bf16's


@pytest.mark.slow
def test_pretrain_export_finetune_chain_under_the_accelerator_set(data_dir, tmp_path):
    """The issue's command (mirrored, 2 CPU devices, --jit_compile) crashed before step 1; now the whole chain
    runs under the GPU/TPU set: pre-training, its export, fine-tuning from it and a serving SavedModel."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    model_dir = tmp_path / "run"
    common = ["--num_cpu_devices=2", "--strategy=mirrored", *ACCELERATOR_FLAGS]
    pretrain = subprocess.run(
        [sys.executable, os.path.join(root, "run_pretraining.py"), "--model_size=tiny", f"--data_dir={data_dir}",
         f"--model_dir={model_dir}", '--hparams={"num_layers": 1, "vocab_size": 64, "max_seq_length": 32}',
         "--train_batch_size=8", "--num_train_steps=2", "--gradient_accumulation_steps=2", "--log_steps=1",
         "--eval_batches=0", *common], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert pretrain.returncode == 0, pretrain.stderr[-3000:]
    assert "jit_compile=on" in pretrain.stderr and "2 replica(s)" in pretrain.stderr
    assert json.loads((model_dir / "export" / "electra_config.json").read_text())["step"] == 2
    glue = tmp_path / "glue" / "SST-2"
    glue.mkdir(parents=True)
    rows = ["sentence\tlabel"] + [f"tok{i} tok{i + 1} tok{i + 2}\t{i % 2}" for i in range(5, 45)]
    for split in ("train", "dev"):
        (glue / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    finetune = subprocess.run(
        [sys.executable, os.path.join(root, "run_finetuning.py"), "--task=SST-2", f"--data_dir={tmp_path / 'glue'}",
         f"--init_checkpoint={model_dir / 'export'}", f"--output_dir={tmp_path / 'sst2'}", "--max_seq_length=16",
         "--train_batch_size=8", "--max_train_steps=2", f"--export_saved_model={tmp_path / 'serving'}", *common],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert finetune.returncode == 0, finetune.stderr[-3000:]
    assert (tmp_path / "serving" / "saved_model.pb").exists()


def test_auto_mirrors_over_the_logical_cpus_the_entry_point_made():
    """`--num_cpu_devices=2 --strategy=auto` picked one device; the entry point now says how many it made."""
    assert distribution.create_strategy("auto", cpu_devices=2).num_replicas_in_sync == 2
    assert distribution.create_strategy("auto").num_replicas_in_sync == 1  # CPUs split by someone else: one device
