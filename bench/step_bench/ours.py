"""Our steps as the training scripts run them, under given `ExecutionOptions`.

* `OursPretraining`: `electra_tf.training.pretraining.build_model` (`ElectraPretrainer` + `ElectraAdamW`) under
  the bench's strategy, timed through `electra_tf.training.pretraining.make_train_fn` (the compiled multi-step
  loop that `run_pretraining.py` runs) called as `run(iterator, steps)` on an iterator over a
  repeated in-memory dataset of the batch. Masking (per-example stateless RNG), the metrics and the
  non-finite guard run inside the step, as in training.
* `OursFinetuning`: what `finetuning.runner.run_single` and `finetuning.train.train` build and run
  for sequence classification: `finetuning.model.build_model` (encoder + the task's head),
  `finetuning.train.make_optimizer` (`ElectraAdamW` with layer-wise rates) and `finetuning.train.make_train_fn`.
* `pipeline_throughput`: the tf.data pipeline alone (TFRecord shards → parsed batches).

The execution options decide every "how it is computed" choice, as `--kernels`, `--dropout_masks`,
`--sampling`, `--adam_kernel`, `--jit_compile` and `--graph_optimizer` do for the scripts.
"""

import dataclasses
import os
import statistics
import time

import keras
import tensorflow as tf

from bench.step_bench import harness, workload
from electra_tf.training import distribution, pretraining
from electra_tf.options import ExecutionOptions, RunOptions


def baseline_execution(strategy) -> ExecutionOptions:
    """What the scripts run by default on `strategy`'s devices (one batch per step: no micro-batches)."""
    requested = ExecutionOptions(gradient_accumulation_steps=1)
    return requested.resolve(distribution.device_types(strategy), keras.backend.backend())


def repeated_batch(batch: dict):
    tensors = {key: tf.constant(value) for key, value in batch.items()}
    return iter(tf.data.Dataset.from_tensors(tensors).repeat())


class OursStep(harness.Implementation):
    """What our steps share: `fn(iterator, steps)`, the loop the scripts run, over the repeated batch."""

    def call(self, steps):
        return float(self.fn(self.iterator, tf.constant(steps))["loss"])

    def facts(self):
        return {"execution": dataclasses.asdict(self.execution)}

    def close(self):
        del self.model, self.optimizer, self.iterator, self.fn


class OursPretraining(OursStep):
    """ElectraPretrainer + optimizer from `pretraining.build_model`, timed through `pretraining.make_train_fn`."""

    def __init__(self, config, batch, precision, strategy, execution: ExecutionOptions, name="ours"):
        self.name, self.execution = name, execution
        workload.set_policy(precision)
        keras.utils.set_random_seed(0)
        start = time.perf_counter()
        self.model, self.optimizer = pretraining.build_model(
            config, strategy, workload.SPECIAL_IDS, 0, "bf16" if precision == "bf16" else "none", execution)
        self.build_seconds = time.perf_counter() - start
        workload.set_policy("fp32")
        self.iterator = repeated_batch(batch)
        self.fn = pretraining.make_train_fn(strategy, self.model, execution)


class OursFinetuning(OursStep):
    """Sequence classification (two labels) as `runner.run_single` builds it and `train.train` runs it."""

    def __init__(self, config, batch, strategy, tmpdir, execution: ExecutionOptions, name="ours"):
        from electra_tf.finetuning import model as finetuning_model
        from electra_tf.finetuning import train
        from electra_tf.finetuning.text_classification import TextClassificationTask

        self.name, self.execution = name, execution
        workload.set_policy("fp32")
        keras.utils.set_random_seed(0)
        start = time.perf_counter()
        seq = batch["input_ids"].shape[1]
        task = TextClassificationTask(name="bench", labels=("0", "1"))
        options = RunOptions(
            output_dir=tmpdir, learning_rate=config.finetune_learning_rate,
            train_batch_size=batch["input_ids"].shape[0], eval_batch_size=32, num_train_epochs=3,
            warmup_fraction=config.finetune_warmup_fraction, weight_decay=config.finetune_weight_decay,
            layerwise_lr_decay=config.finetune_layerwise_lr_decay, max_seq_length=seq, execution=execution)
        encoder_fn = finetuning_model.new_encoder_fn(config)
        self.model = finetuning_model.build_model(task, config, encoder_fn, strategy, seq, execution)
        with strategy.scope():  # as train.train: optimizer, compile, optimizer.build
            self.optimizer = train.make_optimizer(self.model, options, config, 10_000)
            self.model.compile(optimizer=self.optimizer)
            self.optimizer.build(self.model.trainable_variables)
        self.build_seconds = time.perf_counter() - start
        self.iterator = repeated_batch(batch)
        self.fn = train.make_train_fn(strategy, self.model, execution)


def pipeline_throughput(config, rows, num_batches, tmp) -> dict:
    """Examples/s of `input_pipeline.pretraining_dataset` over 8 synthetic shards (median of 3 runs)."""
    from electra_tf.training import input_pipeline
    from tests.pretrain_testutil import write_shards

    data_dir = os.path.join(tmp, "shards")
    start = time.perf_counter()
    manifest = write_shards(data_dir, num_examples=4096, num_shards=8, seq_length=config.max_seq_length,
                            vocab_size=config.vocab_size)
    write_seconds = time.perf_counter() - start
    iterator = iter(input_pipeline.pretraining_dataset(data_dir, manifest, rows, seed=0, shuffle_buffer=1000))
    start = time.perf_counter()
    for _ in range(20):  # warm-up: fills the shuffle buffer and the prefetch
        next(iterator)
    warmup_seconds = time.perf_counter() - start
    rates = []
    for _ in range(3):
        harness.settle()
        start = time.perf_counter()
        for _ in range(num_batches):
            next(iterator)
        rates.append(num_batches * rows / (time.perf_counter() - start))
    return {"examples_s": statistics.median(rates), "examples_s_all": rates, "batches": num_batches,
            "batch_size": rows, "shards": len(manifest["shards"]), "write_s": write_seconds,
            "warmup_s": warmup_seconds}
