r"""Benchmark: our ELECTRA pre-training step against Hugging Face (PyTorch) and plain keras-hub.

Not a test: it takes minutes to hours. All implementations run in ONE process,
one after another (TensorFlow and PyTorch never run at the same time), on the
same synthetic batch, and are interleaved over ``--rounds`` rounds (the order
rotates every round) because the machine is shared and noisy. Each round times
``--steps`` steps after ``--warmup`` steps; ratios are taken within a round and
reported as median and range over the rounds.

Implementations of the replaced-token-detection step (mask 15 %, generator MLM
loss at the masked positions only, Gumbel sampling without gradient,
discriminator on the corrupted ids, loss = MLM + 50 x BCE over real tokens,
AdamW, global-norm clip 1.0, dropout 0.1, train mode):

* ``ours``      - ``electra_tf.training.build_model`` (``ElectraPretrainer`` +
  ``ElectraAdamW``) under ``OneDeviceStrategy``; the timed function is
  ``electra_tf.training.make_train_fn`` (the compiled multi-step loop that
  ``run_pretraining.py`` runs), called as ``run(iterator, steps)`` on an
  iterator over a repeated in-memory dataset of the batch. Masking (per-example
  stateless RNG), metrics (accuracy/precision/recall/AUC) and the non-finite
  guard run inside the step, as in training.
* ``hf``        - transformers ``ElectraForMaskedLM`` (generator) +
  ``ElectraForPreTraining`` (discriminator) on PyTorch, embeddings block shared
  (the generator uses the discriminator's ``ElectraEmbeddings``, its output
  layer tied to the word embeddings), MLM head run only on the gathered masked
  positions (``generator.electra`` → gather → ``generator_predictions`` →
  ``generator_lm_head``), ``torch.optim.AdamW`` (decay off for LayerNorm and
  biases) with a linear warm-up schedule, ``clip_grad_norm_``; bf16 via
  ``torch.autocast("cpu", torch.bfloat16)``.
* ``keras_hub`` - two plain ``keras_hub.models.ElectraBackbone`` (generator-
  and discriminator-sized; embeddings NOT shared, tanh GELU as keras-hub
  hard-codes), simple dense heads, the same losses, one ``tf.function`` step
  called per step from Python, ``keras.optimizers.AdamW(global_clipnorm=1)``.

The peers use the masked positions that our masking draws for this batch at
step 0 (the same positions, the same [MASK]/keep choice); they apply them in
the step (gather, scatter of the samples) but do not draw them.

Also measured: a dense-matmul peak (2048² ``tf.linalg.matmul`` and
``torch.matmul``, fp32 and bf16) for MFU; the fine-tuning step (Small, sequence
classification, ours ``FinetuningModel`` + ``ClassificationHead`` +
``ElectraAdamW`` with layer-wise rates vs ``ElectraForSequenceClassification``
+ AdamW, fp32); the tf.data pipeline alone (TFRecord shards → parsed batches);
optional ablations of our step (``--ablations``: monkeypatched variants,
interleaved with the unchanged step; ``unfused_kernels`` runs keras-hub's layer
ops and TF's cross-entropy instead of the XLA-fused kernels (``fused_kernels``),
``gumbel_sampling`` the official Gumbel-max sampling instead of the two-level
inverse CDF; ``keras_gelu``, ``keras_layernorm`` and ``keras_gelu_layernorm``
undo the model's closed-form GELU / LayerNorm backward passes and
``keras_dropout`` its 16-bit dropout masks in the unfused layers, so they run
with ``fused_kernels`` off (compare them with ``unfused_kernels``);
``unfused_adam`` undoes the fused AdamW kernel, ``grappler_on`` runs TF's graph
optimizer on the loop, which ``--graph_optimizer=auto`` turns off on CPUs;
``--finetune_ablations`` does the same for the fine-tuning step) and a
TF-profiler trace summarised by op self time (``--profile``).
``--only=`` (empty) with ``--ablations`` runs the ablations alone.

FLOPs: ``electra_tf.flops.train_flops_per_step`` (matmul FLOPs × 3) for every
implementation of the same step. MFU = achieved FLOP/s ÷ the best measured
matmul peak of that precision (TF or torch, whichever is higher).

Usage, from the repository root (``pip install -r requirements-bench.txt`` for torch/transformers):

    python -m bench.step_bench --sizes=small --rounds=3
    python -m bench.step_bench --sizes=base --rounds=3 --only=ours,hf,keras_hub
    python -m bench.step_bench --sizes=small --only=ours --ablations --profile --precisions=fp32
    python -m bench.step_bench --sizes=small --only=finetune --finetune_ablations=full_last_layer,keras_dropout
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import glob
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# PyTorch's OpenMP workers busy-wait at barriers by default; on a shared, oversubscribed machine a
# spinning worker starves its partner and single steps took 10x longer (0.2 s → 3.4 s, tiny model).
# PASSIVE makes them block like TF's Eigen pool (TF does not use OpenMP). Override from the environment.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from electra_tf.runtime import onednn_enabled, use_onednn_kernels  # noqa: E402

use_onednn_kernels()  # before TensorFlow is imported, as in run_pretraining.py

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")  # each implementation traces its own step: no retracing warnings

from electra_tf import distribution, flops, masking, modeling, training  # noqa: E402
from electra_tf.config import get_config  # noqa: E402

SPECIAL_IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
BATCH = {"small": 32, "base": 8, "tiny": 8, "mini": 32}
PEERS = ("hf", "keras_hub")
ALL_ONLY = ("ours", "hf", "keras_hub", "finetune", "pipeline", "precision")
SETTLE_SECONDS = 0.3  # between implementations: lets idle OpenMP/Eigen workers stop spinning
ABLATIONS = ("train_step_fn", "no_metrics", "no_auc", "batched_gumbel_rng", "batched_rng_all",
             "no_optimizer_apply", "no_nonfinite_guard", "no_dropout", "gelu_approximate", "xla",
             "keras_gelu", "keras_layernorm", "keras_gelu_layernorm", "keras_dropout", "unfused_adam",
             "grappler_on", "unfused_kernels", "gumbel_sampling")

try:
    import torch
    import transformers
    TORCH_ERROR = None
except Exception as e:  # noqa: BLE001 - any import failure just drops the PyTorch columns
    torch = transformers = None
    TORCH_ERROR = f"{type(e).__name__}: {e}"


def log(message):
    print(message, file=sys.stderr, flush=True)


def settle():
    gc.collect()
    time.sleep(SETTLE_SECONDS)


# --------------------------------------------------------------------------
# Hardware, peaks
# --------------------------------------------------------------------------

def num_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def hardware_line() -> str:
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        model = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("model name")), model)
        flags = set(next((l.split(":", 1)[1].split() for l in lines if l.startswith("flags")), []))
    except OSError:
        pass
    isa = ",".join(f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
                   if f in flags) or "-"
    onednn = "on" if onednn_enabled() else "off"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    versions = f"TF {tf.__version__}, Keras {keras.__version__}"
    try:
        import keras_hub
        versions += f", keras-hub {keras_hub.__version__}"
    except Exception:  # noqa: BLE001
        pass
    if torch is not None:
        versions += f", torch {torch.__version__}, transformers {transformers.__version__}"
    return (f"{model}, {num_cores()} cores ({os.cpu_count()} CPUs online; ISA {isa}), "
            f"load average {load:.1f} at start; TF oneDNN kernels {onednn}; {versions}; Python {platform.python_version()}")


def tf_matmul_peak(dtype: str, n=2048, reps=5) -> float:
    """Best GFLOP/s of an n×n×n tf.linalg.matmul."""
    tf_dtype = {"fp32": tf.float32, "bf16": tf.bfloat16}[dtype]
    a = tf.cast(tf.random.normal([n, n]), tf_dtype)
    b = tf.cast(tf.random.normal([n, n]), tf_dtype)
    matmul = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.linalg.matmul(x, y)[0, :8], tf.float32)))
    float(matmul(a, b))
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        float(matmul(a, b))
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def torch_matmul_peak(dtype: str, n=2048, reps=5) -> float:
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    a = torch.randn(n, n).to(torch_dtype)
    b = torch.randn(n, n).to(torch_dtype)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def measure_peaks(precisions) -> dict:
    peaks = {}
    for p in precisions:
        peaks[("tf", p)] = tf_matmul_peak(p)
        settle()
        if torch is not None:
            peaks[("torch", p)] = torch_matmul_peak(p)
            settle()
    return peaks


# --------------------------------------------------------------------------
# The synthetic batch and its masking
# --------------------------------------------------------------------------

def synthetic_batch(batch_size, seq_length, vocab_size, seed=0) -> dict:
    """[CLS] a [SEP] b [SEP] rows: 90 % full length, 10 % shorter (as packed pre-training data)."""
    rng = np.random.RandomState(seed)
    ids = np.zeros((batch_size, seq_length), np.int32)
    mask = np.zeros_like(ids)
    segments = np.zeros_like(ids)
    for row in range(batch_size):
        length = seq_length if rng.rand() < 0.9 else rng.randint(16, seq_length)
        split = rng.randint(2, length - 1)
        ids[row, :length] = rng.randint(5, vocab_size, length)
        ids[row, 0], ids[row, split], ids[row, length - 1] = SPECIAL_IDS["cls"], SPECIAL_IDS["sep"], SPECIAL_IDS["sep"]
        mask[row, :length] = 1
        segments[row, split + 1:length] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def masked_positions(config, batch) -> dict:
    """What our masking draws for this batch at step 0 (seed 0): the peers' masked positions."""
    n = batch["input_ids"].shape[0]
    out = masking.mask_inputs(
        tf.constant(batch["input_ids"]), tf.constant(batch["input_mask"]),
        masking.example_seeds(0, 0, tf.range(n)), mask_id=SPECIAL_IDS["mask"],
        special_ids=(SPECIAL_IDS["pad"], SPECIAL_IDS["cls"], SPECIAL_IDS["sep"], SPECIAL_IDS["mask"]),
        mask_prob=config.mask_prob, max_predictions=masking.max_predictions_per_seq(config.mask_prob,
                                                                                    config.max_seq_length),
        mask_token_prob=config.mask_token_prob)
    return {"masked_ids": out.input_ids.numpy(), "positions": out.positions.numpy(),
            "original_ids": out.original_ids.numpy(), "weights": out.weights.numpy()}


def bench_config(size: str, **overrides):
    config = get_config(size, max_seq_length=128)
    return config.replace(**overrides) if overrides else config


def set_policy(precision: str):
    distribution.set_mixed_precision("bf16" if precision == "bf16" else "none")


# --------------------------------------------------------------------------
# Implementations: each has first_step() -> (seconds, loss), run(n) -> seconds
# --------------------------------------------------------------------------

class Ours:
    """ElectraPretrainer + optimizer from training.build_model, timed through training.make_train_fn."""

    framework = "tf"

    def __init__(self, config, batch, precision, *, strategy, variant="baseline", jit_compile=False,
                 graph_optimizer="auto"):
        self.name = "ours" if variant == "baseline" else f"ours[{variant}]"
        self.variant = variant
        set_policy(precision)
        keras.utils.set_random_seed(0)
        start = time.perf_counter()
        self.model, self.optimizer = training.build_model(config, strategy, SPECIAL_IDS, 0,
                                                          "bf16" if precision == "bf16" else "none")
        self.build_seconds = time.perf_counter() - start
        set_policy("fp32")
        tensors = {k: tf.constant(v) for k, v in batch.items()}
        self.iterator = iter(tf.data.Dataset.from_tensors(tensors).repeat())
        if variant == "train_step_fn":
            step = tf.function(self.model.train_step)
            self.fn = lambda iterator, n: _repeat_calls(step, iterator, n)
        else:
            self.fn = training.make_train_fn(strategy, self.model, jit_compile=jit_compile,
                                             graph_optimizer=graph_optimizer)
        self.patches = _ablation_patches(variant, self.model, self.optimizer)

    def _call(self, n):
        out = self.fn(self.iterator, tf.constant(n))
        return float(out["loss"])

    def first_step(self):
        start = time.perf_counter()
        with self.patches():  # monkeypatches act while the step is traced
            loss = self._call(1)
        return time.perf_counter() - start, loss

    def run(self, n):
        start = time.perf_counter()
        self._call(n)
        return time.perf_counter() - start

    def close(self):
        del self.model, self.optimizer, self.iterator, self.fn


def _repeat_calls(step, iterator, n):
    out = None
    for _ in range(int(n)):
        out = step(next(iterator))
    return out


class KerasHubPair:
    """Two plain keras-hub ElectraBackbones with dense heads, one tf.function step."""

    framework = "tf"
    name = "keras_hub"

    def __init__(self, config, batch, precision, masks):
        import keras_hub
        set_policy(precision)
        keras.utils.set_random_seed(0)
        start = time.perf_counter()
        common = dict(vocab_size=config.vocab_size, embedding_dim=config.embedding_size,
                      dropout=config.dropout_rate, max_sequence_length=config.max_position_embeddings)
        self.gen = keras_hub.models.ElectraBackbone(
            num_layers=config.generator.num_layers, num_heads=config.generator.num_heads,
            hidden_dim=config.generator.hidden_size, intermediate_dim=config.generator.intermediate_size,
            name="kh_generator", **common)
        self.disc = keras_hub.models.ElectraBackbone(
            num_layers=config.discriminator.num_layers, num_heads=config.discriminator.num_heads, hidden_dim=config.discriminator.hidden_size,
            intermediate_dim=config.discriminator.intermediate_size, name="kh_discriminator", **common)
        gelu = lambda x: keras.activations.gelu(x, approximate=True)  # noqa: E731 (keras-hub's GELU)
        self.gen_dense = keras.layers.Dense(config.embedding_size, activation=gelu, name="gen_dense")
        self.gen_ln = keras.layers.LayerNormalization(epsilon=1e-12, name="gen_ln")
        self.disc_dense = keras.layers.Dense(config.discriminator.hidden_size, activation=gelu, name="disc_dense")
        self.disc_out = keras.layers.Dense(1, name="disc_logits")
        self.gen_dense.build((None, None, config.generator.hidden_size))
        self.gen_ln.build((None, None, config.embedding_size))
        self.disc_dense.build((None, None, config.discriminator.hidden_size))
        self.disc_out.build((None, None, config.discriminator.hidden_size))
        self.gen_bias = tf.Variable(tf.zeros([config.vocab_size]), name="bias")
        layers = [self.gen, self.disc, self.gen_dense, self.gen_ln, self.disc_dense, self.disc_out]
        # pooled_dense (tanh pooler) gets no gradient from these losses.
        self.variables = [v for layer in layers for v in layer.trainable_variables
                          if "pooled_dense" not in v.path] + [self.gen_bias]
        schedule = keras.optimizers.schedules.PolynomialDecay(config.learning_rate, config.num_train_steps, 0.0)
        self.optimizer = keras.optimizers.AdamW(
            learning_rate=schedule, weight_decay=config.weight_decay, beta_1=config.adam_beta1,
            beta_2=config.adam_beta2, epsilon=config.adam_epsilon, global_clipnorm=config.clip_norm)
        self.optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        self.optimizer.build(self.variables)
        self.build_seconds = time.perf_counter() - start
        set_policy("fp32")
        self.disc_weight, self.temperature = config.disc_weight, config.temperature
        self.args = [tf.constant(x) for x in (
            masks["masked_ids"], batch["input_ids"], batch["segment_ids"], batch["input_mask"],
            masks["positions"], masks["original_ids"], masks["weights"])]
        self.step = tf.function(self._step)

    def _step(self, masked_ids, input_ids, segment_ids, input_mask, positions, original_ids, weights):
        with tf.GradientTape() as tape:
            gen_seq = self.gen({"token_ids": masked_ids, "segment_ids": segment_ids, "padding_mask": input_mask},
                               training=True)["sequence_output"]
            gathered = tf.gather(gen_seq, positions, batch_dims=1)
            x = self.gen_ln(self.gen_dense(gathered))
            logits = tf.cast(self.gen.token_embedding(x, reverse=True), tf.float32) + self.gen_bias
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(original_ids, logits)
            mlm = tf.reduce_sum(ce * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
            noisy = tf.stop_gradient(logits) / self.temperature
            uniform = tf.random.uniform(tf.shape(noisy))
            sampled = tf.argmax(noisy - tf.math.log(-tf.math.log(uniform + 1e-9) + 1e-9), -1, output_type=tf.int32)
            sampled = tf.where(weights > 0, sampled, original_ids)
            rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
            fake_ids = tf.tensor_scatter_nd_update(input_ids, tf.stack([rows, positions], -1), sampled)
            labels = tf.cast(tf.not_equal(fake_ids, input_ids), tf.float32)
            disc_seq = self.disc({"token_ids": fake_ids, "segment_ids": segment_ids, "padding_mask": input_mask},
                                 training=True)["sequence_output"]
            disc_logits = tf.cast(tf.squeeze(self.disc_out(self.disc_dense(disc_seq)), -1), tf.float32)
            real = tf.cast(input_mask, tf.float32)
            bce = tf.nn.sigmoid_cross_entropy_with_logits(labels, disc_logits)
            loss = mlm + self.disc_weight * tf.reduce_sum(bce * real) / tf.reduce_sum(real)
        grads = tape.gradient(loss, self.variables)
        self.optimizer.apply(grads, self.variables)
        return loss

    def first_step(self):
        start = time.perf_counter()
        loss = float(self.step(*self.args))
        return time.perf_counter() - start, loss

    def run(self, n):
        start = time.perf_counter()
        for _ in range(n):
            loss = self.step(*self.args)
        float(loss)
        return time.perf_counter() - start

    def close(self):
        del self.gen, self.disc, self.optimizer, self.step


def hf_config(config, role: str, **extra):
    sizes = {"discriminator": (config.discriminator.hidden_size, config.discriminator.num_layers, config.discriminator.num_heads, config.discriminator.intermediate_size),
             "generator": (config.generator.hidden_size, config.generator.num_layers, config.generator.num_heads,
                           config.generator.intermediate_size)}[role]
    hidden, layers, heads, intermediate = sizes
    return transformers.ElectraConfig(
        vocab_size=config.vocab_size, embedding_size=config.embedding_size, hidden_size=hidden,
        num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=intermediate,
        hidden_act="gelu", hidden_dropout_prob=config.dropout_rate,
        attention_probs_dropout_prob=config.dropout_rate,
        max_position_embeddings=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.layer_norm_epsilon, initializer_range=config.initializer_range,
        pad_token_id=SPECIAL_IDS["pad"], **extra)


def torch_adamw(named_parameters, lr, weight_decay, config):
    decay, no_decay = [], []
    seen = set()
    for name, p in named_parameters:
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon)


class EagerTorchStep:
    """What the PyTorch peers share: the eager update after the loss, and the timing of `_step`."""

    def _update(self, loss, params):
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, self.clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    def first_step(self):
        start = time.perf_counter()
        loss = self._step()
        return time.perf_counter() - start, loss

    def run(self, n):
        start = time.perf_counter()
        for _ in range(n):
            self._step()
        return time.perf_counter() - start


class HFPair(EagerTorchStep):
    """transformers ElectraForMaskedLM + ElectraForPreTraining on PyTorch, the same RTD step."""

    framework = "torch"
    name = "hf"

    def __init__(self, config, batch, precision, masks):
        torch.manual_seed(0)
        start = time.perf_counter()
        self.disc = transformers.ElectraForPreTraining(hf_config(config, "discriminator"))
        self.gen = transformers.ElectraForMaskedLM(hf_config(config, "generator"))
        # Share the whole embeddings block (word, position, segment + LayerNorm) as the official code does;
        # the generator's output layer stays tied to the (now shared) word embeddings.
        self.gen.electra.embeddings = self.disc.electra.embeddings
        self.gen.generator_lm_head.weight = self.disc.electra.embeddings.word_embeddings.weight
        self.disc.train()
        self.gen.train()
        named = list(self.disc.named_parameters()) + list(self.gen.named_parameters())
        self.params = list({id(p): p for _, p in named}.values())
        self.optimizer = torch_adamw(named, config.learning_rate, config.weight_decay, config)
        self.scheduler = transformers.get_linear_schedule_with_warmup(
            self.optimizer, config.num_warmup_steps, config.num_train_steps)
        self.build_seconds = time.perf_counter() - start
        self.attn_implementation = getattr(self.disc.config, "_attn_implementation", "?")
        self.autocast = precision == "bf16"
        self.disc_weight, self.temperature, self.clip = config.disc_weight, config.temperature, config.clip_norm
        t = lambda x: torch.as_tensor(np.asarray(x)).long()  # noqa: E731
        self.masked_ids, self.input_ids = t(masks["masked_ids"]), t(batch["input_ids"])
        self.segment_ids, self.attention_mask = t(batch["segment_ids"]), t(batch["input_mask"])
        self.positions, self.original_ids = t(masks["positions"]), t(masks["original_ids"])
        self.weights = torch.as_tensor(masks["weights"]).float()
        self.real = self.attention_mask.float()

    def _step(self):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=self.autocast):
            gen_seq = self.gen.electra(self.masked_ids, attention_mask=self.attention_mask,
                                       token_type_ids=self.segment_ids).last_hidden_state
            index = self.positions.unsqueeze(-1).expand(-1, -1, gen_seq.shape[-1])
            gathered = torch.gather(gen_seq, 1, index)
            logits = self.gen.generator_lm_head(self.gen.generator_predictions(gathered)).float()
            ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), self.original_ids.flatten(),
                                                   reduction="none").view_as(self.weights)
            mlm = (ce * self.weights).sum() / self.weights.sum().clamp(min=1.0)
            with torch.no_grad():
                uniform = torch.rand_like(logits)
                gumbel = -torch.log(-torch.log(uniform + 1e-9) + 1e-9)
                sampled = torch.argmax(logits / self.temperature + gumbel, -1)
                sampled = torch.where(self.weights > 0, sampled, self.original_ids)
                fake_ids = self.input_ids.scatter(1, self.positions, sampled)
                labels = (fake_ids != self.input_ids).float()
            disc_logits = self.disc(fake_ids, attention_mask=self.attention_mask,
                                    token_type_ids=self.segment_ids).logits.float()
            bce = torch.nn.functional.binary_cross_entropy_with_logits(disc_logits, labels, reduction="none")
            loss = mlm + self.disc_weight * (bce * self.real).sum() / self.real.sum()
        return self._update(loss, self.params)

    def close(self):
        del self.disc, self.gen, self.optimizer


# --------------------------------------------------------------------------
# Fine-tuning implementations
# --------------------------------------------------------------------------

class OursFinetune:
    framework = "tf"
    name = "ours_finetune"

    def __init__(self, config, batch, strategy, tmpdir, graph_optimizer="auto"):
        from electra_tf.finetuning import trainer
        from electra_tf.finetuning.text_classification import TextClassificationTask
        set_policy("fp32")
        keras.utils.set_random_seed(0)
        start = time.perf_counter()
        seq = batch["input_ids"].shape[1]
        # As run_single does: trainer.build_model (encoder + the head of task.build_head), then
        # trainer.make_optimizer + compile + optimizer.build as trainer.train does.
        task = TextClassificationTask(name="bench", labels=("0", "1"))
        self.model = trainer.build_model(task, config, trainer.new_encoder_fn(config), strategy, seq)
        with strategy.scope():
            options = trainer.RunOptions(
                output_dir=tmpdir, learning_rate=config.finetune_learning_rate,
                train_batch_size=batch["input_ids"].shape[0], eval_batch_size=32, num_train_epochs=3,
                warmup_fraction=config.finetune_warmup_fraction, weight_decay=config.finetune_weight_decay,
                layerwise_lr_decay=config.finetune_layerwise_lr_decay, max_seq_length=seq)
            self.optimizer = trainer.make_optimizer(self.model, options, config, 10_000)
            self.model.compile(optimizer=self.optimizer)
            self.optimizer.build(self.model.trainable_variables)
        self.build_seconds = time.perf_counter() - start
        tensors = {k: tf.constant(v) for k, v in batch.items()}
        self.iterator = iter(tf.data.Dataset.from_tensors(tensors).repeat())
        self.fn = trainer._make_train_fn(strategy, self.model, graph_optimizer=graph_optimizer)  # as trainer.train

    def first_step(self):
        start = time.perf_counter()
        loss = float(self.fn(self.iterator, tf.constant(1))["loss"])
        return time.perf_counter() - start, loss

    def run(self, n):
        start = time.perf_counter()
        float(self.fn(self.iterator, tf.constant(n))["loss"])
        return time.perf_counter() - start

    def close(self):
        del self.model, self.optimizer, self.fn


# Ablations of the unfused layers' ops (keras-hub's call), run with fused_kernels off.
UNFUSED_LAYER_ABLATIONS = ("keras_gelu", "keras_layernorm", "keras_gelu_layernorm", "keras_dropout")
FINETUNE_ABLATIONS = ("full_last_layer", "keras_dropout", "unfused_adam", "grappler_on", "unfused_kernels")


class OursFinetuneAblation(OursFinetune):
    """Ours with one of the fine-tuning step's speed-ups undone while the step is traced
    (`--finetune_ablations`): `full_last_layer` runs the last encoder layer at every position
    (before the [CLS]-only shortcut, `ElectraEncoder.call(output_length=...)`), `keras_dropout`
    draws Keras' one-float-per-element masks instead of `dropout16`'s, `unfused_adam` runs AdamW as
    separate ops instead of the fused kernel, `grappler_on` runs TF's graph optimizer on the loop,
    `unfused_kernels` runs keras-hub's layer ops instead of the XLA-fused kernels (`fused_kernels`)."""

    def __init__(self, config, batch, strategy, tmpdir, variant):
        if variant in ("unfused_kernels",) + UNFUSED_LAYER_ABLATIONS:
            config = config.replace(fused_kernels=False)
        super().__init__(config, batch, strategy, tmpdir, graph_optimizer="on" if variant == "grappler_on" else "auto")
        if variant not in FINETUNE_ABLATIONS:
            raise ValueError(f"unknown fine-tuning ablation {variant!r}; choose from {FINETUNE_ABLATIONS}")
        self.name = f"ours_finetune_{variant}"
        if variant == "full_last_layer":
            self.model.head.output_length = None  # instance attribute shadows ClassificationHead's 1
        self.patches = _ablation_patches(variant, self.model, self.optimizer)

    def first_step(self):
        with self.patches():  # monkeypatches act while the step is traced
            return super().first_step()


class HFFinetune(EagerTorchStep):
    framework = "torch"
    name = "hf_finetune"

    def __init__(self, config, batch):
        torch.manual_seed(0)
        start = time.perf_counter()
        self.model = transformers.ElectraForSequenceClassification(hf_config(config, "discriminator", num_labels=2))
        self.model.train()
        self.optimizer = torch_adamw(list(self.model.named_parameters()), config.finetune_learning_rate,
                                     config.finetune_weight_decay, config)
        self.scheduler = transformers.get_linear_schedule_with_warmup(self.optimizer, 1000, 10_000)
        self.build_seconds = time.perf_counter() - start
        self.clip = config.clip_norm
        t = lambda x: torch.as_tensor(np.asarray(x)).long()  # noqa: E731
        self.inputs = dict(input_ids=t(batch["input_ids"]), attention_mask=t(batch["input_mask"]),
                           token_type_ids=t(batch["segment_ids"]), labels=t(batch["label_ids"]))

    def _step(self):
        return self._update(self.model(**self.inputs).loss, self.model.parameters())

    def close(self):
        del self.model, self.optimizer


# --------------------------------------------------------------------------
# Ablations (monkeypatches active while our step is traced)
# --------------------------------------------------------------------------

def _batched_uniform(only_purpose=None):
    original = masking.per_example_uniform

    def per_example_uniform(seeds, purpose, shape):
        if only_purpose is not None and purpose != only_purpose:
            return original(seeds, purpose, shape)
        seed = tf.random.experimental.stateless_fold_in(seeds[0], purpose)
        return tf.random.stateless_uniform(tf.concat([tf.shape(seeds)[:1], list(shape)], 0), seed=seed)

    return per_example_uniform


def _batched_example_seeds(seed, step, global_indices):
    base = tf.random.experimental.stateless_fold_in(tf.constant([seed, 0x5EED], tf.int64), tf.cast(step, tf.int64))
    indices = tf.cast(global_indices, tf.int64)
    return tf.stack([base[0] + indices, base[1] + indices * 7919], axis=1)


class _NoOpMetric:
    def update_state(self, *args, **kwargs):
        pass

    def result(self):
        return tf.constant(0.0)

    def reset_state(self):
        pass


def _apply_gradients_without_guard(optimizer, grads, variables, clip_norm, loss=None):
    grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v) for g, v in zip(grads, variables)]
    grads, grad_norm = tf.clip_by_global_norm(grads, clip_norm)
    optimizer.apply(grads, variables)
    return grad_norm, tf.constant(0.0)


def _ablation_patches(variant, model, optimizer):
    """A context manager factory applying `variant`'s monkeypatches (used while tracing)."""
    from electra_tf import loop

    @contextlib.contextmanager
    def patches():
        saved = []

        def patch(obj, name, value):
            saved.append((obj, name, getattr(obj, name), name in vars(obj)))
            setattr(obj, name, value)

        if variant == "no_metrics":
            patch(model, "update_metrics", lambda batch, out: None)
        elif variant == "no_auc":
            model.tracked["disc_auc"] = _NoOpMetric()
        elif variant == "batched_gumbel_rng":
            patch(masking, "per_example_uniform", _batched_uniform(only_purpose=masking._GUMBEL))
        elif variant == "batched_rng_all":
            patch(masking, "per_example_uniform", _batched_uniform())
            patch(masking, "example_seeds", _batched_example_seeds)
        elif variant == "no_optimizer_apply":
            patch(optimizer, "apply", lambda grads, variables: None)
        elif variant == "no_nonfinite_guard":
            patch(loop, "apply_gradients", _apply_gradients_without_guard)
        # The model's closed-form GELU / LayerNorm backward passes undone, one at a time or both.
        if variant in ("keras_gelu", "keras_gelu_layernorm"):
            patch(modeling, "gelu_erf", lambda x: keras.activations.gelu(x, approximate=False))
        if variant in ("keras_layernorm", "keras_gelu_layernorm"):
            patch(modeling.ElectraLayerNormalization, "call", keras.layers.LayerNormalization.call)
        if variant == "keras_dropout":  # Keras' one-float-per-element masks instead of dropout16
            patch(modeling.ElectraDropout, "call", keras.layers.Dropout.call)
        if variant == "unfused_adam":  # AdamW as ~20 graph ops per variable instead of ResourceApplyAdam
            patch(optimizer, "fused", False)
        try:
            yield
        finally:
            for obj, name, value, own in reversed(saved):
                if own:
                    setattr(obj, name, value)
                else:
                    delattr(obj, name)

    return patches


def build_ablation(variant, config, batch, precision, strategy):
    if variant == "no_dropout":
        return Ours(config.replace(dropout_rate=0.0), batch, precision,
                    strategy=strategy, variant=variant)
    if variant == "gelu_approximate":
        return Ours(config.replace(hidden_act="gelu_approximate"), batch, precision, strategy=strategy,
                    variant=variant)
    if variant in UNFUSED_LAYER_ABLATIONS:  # they patch the unfused layers' GELU, LayerNorm or dropout
        config = config.replace(fused_kernels=False)
    if variant == "gumbel_sampling":  # the official Gumbel-max sampling instead of the two-level inverse CDF
        return Ours(config.replace(sampling="gumbel"), batch, precision, strategy=strategy, variant=variant)
    if variant == "unfused_kernels":  # keras-hub's layer ops instead of the XLA-fused kernels
        return Ours(config.replace(fused_kernels=False), batch, precision, strategy=strategy, variant=variant)
    if variant == "grappler_on":  # TF's graph optimizer on, as before --graph_optimizer=auto turned it off on CPUs
        return Ours(config, batch, precision, strategy=strategy, variant=variant, graph_optimizer="on")
    return Ours(config, batch, precision, strategy=strategy, variant=variant, jit_compile=variant == "xla")


# --------------------------------------------------------------------------
# Interleaved timing
# --------------------------------------------------------------------------

def interleave(impls: list, rounds: int, steps: int, warmup: int, batch_size: int, label: str,
               notes=None) -> dict:
    """First-step times, then `rounds` rounds of (warm-up, timed steps) with a rotating order.

    An implementation whose first step fails is dropped (with a note)."""
    results = {impl.name: {"build_s": getattr(impl, "build_seconds", float("nan")), "seq_s": [],
                           "cpu_s_per_step": [], "framework": impl.framework} for impl in impls}
    for impl in list(impls):
        settle()
        try:
            seconds, loss = impl.first_step()
        except Exception as e:  # noqa: BLE001
            if notes is None:
                raise
            lines = [l.strip() for l in str(e).splitlines() if l.strip()]
            notes.append(f"{label} {impl.name}: first step failed ({type(e).__name__}: "
                         f"{(lines[-1] if lines else '')[:300]})")
            log(notes[-1])
            impls.remove(impl)
            del results[impl.name]
            continue
        results[impl.name].update(first_step_s=seconds, first_loss=loss)
        log(f"[{label}] {impl.name}: build {results[impl.name]['build_s']:.1f}s, first step {seconds:.1f}s, "
            f"loss {loss:.3f}")
    for r in range(rounds):
        order = impls[r % len(impls):] + impls[:r % len(impls)]
        for impl in order:
            settle()
            if warmup:
                impl.run(warmup)
            cpu_start = time.process_time()
            seconds = impl.run(steps)
            cpu = (time.process_time() - cpu_start) / steps
            results[impl.name]["seq_s"].append(steps * batch_size / seconds)
            results[impl.name].setdefault("cpu_s_per_step", []).append(cpu)
            log(f"[{label}] round {r + 1}/{rounds} {impl.name}: {steps * batch_size / seconds:.2f} seq/s "
                f"({seconds / steps:.3f} s/step wall, {cpu:.3f} CPU-s/step)")
    return results


def ratio_stats(ours: list, peer: list) -> dict:
    ratios = [a / b for a, b in zip(ours, peer)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "per_round": ratios}


def close_group(report: dict, group: dict, reference: str, impls: list) -> None:
    """Adds `group` (ratios to `reference`) to the report and frees its implementations."""
    add_ratios(group, reference)
    report["groups"].append(group)
    for impl in impls:
        impl.close()
    gc.collect()


def add_ratios(group: dict, reference: str) -> None:
    """`group`'s ratios of `reference` to every other implementation: throughput and CPU time per step."""
    results = group["results"]
    group["cpu_ratios"] = {}
    for name in results:
        if name != reference:
            group["ratios"][name] = ratio_stats(results[reference]["seq_s"], results[name]["seq_s"])
            group["cpu_ratios"][name] = ratio_stats(results[name]["cpu_s_per_step"],
                                                    results[reference]["cpu_s_per_step"])


# --------------------------------------------------------------------------
# The tf.data pipeline
# --------------------------------------------------------------------------

def bench_pipeline(config, batch_size, num_batches, tmp) -> dict:
    from electra_tf import input_pipeline
    from tests.pretrain_testutil import write_shards

    data_dir = os.path.join(tmp, "shards")
    start = time.perf_counter()
    manifest = write_shards(data_dir, num_examples=4096, num_shards=8, seq_length=config.max_seq_length,
                            vocab_size=config.vocab_size)
    write_seconds = time.perf_counter() - start
    dataset = input_pipeline.pretraining_dataset(data_dir, manifest, batch_size, seed=0, shuffle_buffer=1000)
    iterator = iter(dataset)
    first_start = time.perf_counter()
    for _ in range(20):  # warm-up: fills the shuffle buffer and the prefetch
        next(iterator)
    warmup_seconds = time.perf_counter() - first_start
    rates = []
    for _ in range(3):
        settle()
        start = time.perf_counter()
        for _ in range(num_batches):
            next(iterator)
        rates.append(num_batches * batch_size / (time.perf_counter() - start))
    return {"examples_s": statistics.median(rates), "examples_s_all": rates, "batches": num_batches,
            "batch_size": batch_size, "shards": len(manifest["shards"]), "write_s": write_seconds,
            "warmup_s": warmup_seconds}


# --------------------------------------------------------------------------
# Profiling
# --------------------------------------------------------------------------

MATMUL_TYPES = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_MklMatMul", "_MklBatchMatMulV2",
                "_FusedMatMul", "_MklFusedMatMul", "Einsum", "_MklEinsum", "_MklNativeFusedMatMul",
                "_MklNativeBatchMatMulV2", "_MklFusedBatchMatMulV2", "_MklNativeMatMul"}


def profile_ours(config, batch, precision, strategy, steps, logdir) -> dict:
    impl = Ours(config, batch, precision, strategy=strategy)
    impl.first_step()
    impl.run(2)
    settle()
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    impl.run(steps)
    wall = time.perf_counter() - start
    tf.profiler.experimental.stop()
    impl.close()
    paths = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
    if not paths:
        return {"error": f"no .xplane.pb under {logdir}"}
    summary = summarize_xplane(paths[-1], steps)
    summary.update(wall_s_per_step=wall / steps, steps=steps, precision=precision, xplane=paths[-1])
    return summary


MAP_FN_PURPOSE = {"map": "example_seeds", "map_1": "mask positions", "map_2": "[MASK]/keep draw",
                  "map_3": "Gumbel noise [B, N, V]"}


def _scope(node: str) -> str:
    """Where in our step an op runs, from its node name (keras layers name-scope their ops;
    masking, sampling, losses and metrics are top-level ops, reported by their own names)."""
    name = re.sub(r"^((while/)?(body|cond)/_\d+/)+", "", node)
    name = re.sub(r"^(while/)+", "", name)
    backward = name.startswith("gradient_tape/")
    if backward:
        name = re.sub(r"^gradient_tape/(while/)?", "", name)
    first = name.split("/")[0]
    if "electra_adam_w" in name or "adam" in name.lower():
        return "optimizer: AdamW variable updates"
    if first == "cond":
        return "non-finite guard (tf.cond)"
    if re.fullmatch(r"map(_\d+)?", first):
        return f"per-example RNG map_fn ({MAP_FN_PURPOSE.get(first, first)})"
    role = re.sub(r"_\d+$", "", first)
    if role in ("discriminator", "generator", "generator_head", "discriminator_head"):
        return f"{role} {'backward' if backward else 'forward'} (non-matmul ops)"
    if role in ("clip_by_global_norm", "global_norm"):
        return "global-norm clip"
    return ("backward, unscoped: " if backward else "unscoped: ") + role


FUNCTIONS = (  # (substring of the lower-cased node name, function); first match wins; matmuls are split off first
    ("electra_adam_w", "optimizer: AdamW variable updates"), ("clip_by_global_norm", "global-norm clip"),
    ("global_norm", "global-norm clip"), ("map_3/", "Gumbel noise: per-example map_fn RNG [B, N, V]"),
    ("map/", "masking: per-example map_fn RNG"), ("map_1/", "masking: per-example map_fn RNG"),
    ("map_2/", "masking: per-example map_fn RNG"), ("dropout", "dropout (RNG + mask, fwd + bwd)"),
    ("gelu", "GELU (exact erf, fwd + bwd)"), ("layer_norm", "LayerNorm (fwd + bwd)"),
    ("softmax_1/", "attention softmax + mask (fwd + bwd)"), ("/softmax", "attention softmax + mask (fwd + bwd)"),
    ("self_attention", "attention: other (reshape/transpose/scale)"),
    ("sparsesoftmaxcrossentropy", "generator MLM loss (softmax CE over V)"),
    ("embedding", "embeddings (gather, scatter-add grads)"),
    ("biasadd", "bias add (fwd + bwd)"), ("cond/", "non-finite guard (tf.cond)"),
)


def _function(node: str, kind: str) -> str:
    if kind in MATMUL_TYPES:
        return "matmul (MatMul/BatchMatMul/Einsum)"
    lowered = node.lower()
    for key, label in FUNCTIONS:
        if key in lowered:
            return label
    if kind in ("BiasAdd", "BiasAddGrad"):
        return "bias add (fwd + bwd)"
    if kind in ("Log", "ArgMax", "AddV2") and "gradient_tape" not in lowered and "/while/" in node \
            and re.search(r"while/(Log|Log_1|ArgMax|add_\d+)$", node):
        return "Gumbel max / accuracy argmax (log, add, argmax over V)"
    if kind == "AddN":
        return "gradient accumulation (AddN)"
    return "other: " + kind


def _is_tf_op(meta) -> bool:
    """Executor op events are named "node/name:OpType" with display name "OpType"."""
    return bool(meta.display_name) and meta.name.endswith(":" + meta.display_name)


def summarize_xplane(path, steps) -> dict:
    """Op self time per op type, per scope and per node from the host plane of a TF profiler XSpace.

    An op's self time is its duration on the executor thread minus ops nested in it; work it hands to
    the Eigen pool (ParallelFor, oneDNN) counts to the op. Two executor threads run ops concurrently
    (inter-op parallelism), so op time summed over threads can exceed the wall time.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    by_type, by_scope, by_name = defaultdict(float), defaultdict(float), defaultdict(float)
    by_function = defaultdict(float)
    count_by_type = defaultdict(int)
    total = 0.0
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            events = sorted(((e.offset_ps, e.offset_ps + e.duration_ps, plane.event_metadata[e.metadata_id])
                             for e in line.events if _is_tf_op(plane.event_metadata[e.metadata_id])),
                            key=lambda e: (e[0], -e[1]))
            stack, self_ps = [], []
            for i, (begin, end, meta) in enumerate(events):
                while stack and events[stack[-1]][1] <= begin:
                    stack.pop()
                if stack:
                    self_ps[stack[-1]] -= min(end, events[stack[-1]][1]) - begin
                self_ps.append(end - begin)
                stack.append(i)
            for (begin, end, meta), ps in zip(events, self_ps):
                ms = ps / 1e9
                kind = meta.display_name
                node = meta.name.rsplit(":", 1)[0]
                by_type[kind] += ms
                count_by_type[kind] += 1
                by_scope["matmul (all)" if kind in MATMUL_TYPES else _scope(node)] += ms
                by_name[node] += ms
                by_function[_function(node, kind)] += ms
                total += ms
    per_step = lambda d: sorted(((k, v / steps) for k, v in d.items()), key=lambda kv: -kv[1])  # noqa: E731
    matmul = sum(v for k, v in by_type.items() if k in MATMUL_TYPES) / steps
    return {"op_ms_per_step_total": total / steps, "matmul_ms_per_step": matmul,
            "by_type": per_step(by_type)[:40], "by_scope": per_step(by_scope),
            "by_node": per_step(by_name)[:60], "by_function": per_step(by_function)[:40],
            "count_by_type_per_step": {k: v / steps for k, v in count_by_type.items()}}


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

REFERENCES = ("ours", "ours_finetune", "ours_bf16")  # the implementation each group's ratios divide


def fmt_ratio(stats) -> str:
    if not stats:
        return "-"
    return f"{stats['median']:.2f}x ({stats['min']:.2f}-{stats['max']:.2f})"


def print_report(report, args):
    print(f"\nCommand: {report['command']}")
    print(f"Hardware: {report['hardware']}")
    print(f"Threads: TF intra-op {report['threads']['tf_intra_op']} (0 = all cores), inter-op "
          f"{report['threads']['tf_inter_op']}; torch {report['threads'].get('torch', '-')} "
          f"(OMP_WAIT_POLICY={report['threads']['OMP_WAIT_POLICY']}); "
          f"{args.rounds} rounds × {args.steps} timed steps after {args.warmup} warm-up steps, order rotating")
    if report.get("notes"):
        for note in report["notes"]:
            print(f"Note: {note}")
    peaks = report["peaks_gflops"]
    print("\nDense matmul peak (2048³, best of 5 at the start and 5 at the end, GFLOP/s): " + ", ".join(
        f"{k} {v:.0f}" for k, v in peaks.items()))
    print("\n| size | precision | implementation | seq/s (median) | seq/s range | GFLOP/s | MFU | "
          "first step s | build s | ours ÷ this (throughput, median (range)) | CPU-s/step | "
          "ours ÷ this by CPU time |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for group in report["groups"]:
        for name, r in group["results"].items():
            seq = statistics.median(r["seq_s"])
            gflops = seq / group["batch_size"] * group["flops_per_step"] / 1e9
            ratio = group["ratios"].get(name)
            print(f"| {group['size']} {group['batch_size']}×{group['seq_length']} | {group['precision']} | "
                  f"{name} | {seq:.2f} | {min(r['seq_s']):.2f}-{max(r['seq_s']):.2f} | {gflops:.1f} | "
                  f"{100 * gflops / group['peak_gflops']:.1f} % | {r['first_step_s']:.1f} | {r['build_s']:.1f} | "
                  f"{fmt_ratio(ratio) if ratio else ('1' if name in REFERENCES else '-')} | "
                  f"{statistics.median(r['cpu_s_per_step']) if r.get('cpu_s_per_step') else float('nan'):.2f} | "
                  f"{'1' if name in REFERENCES else fmt_ratio(group.get('cpu_ratios', {}).get(name))} |")
    attn = sorted({g["hf_attn_implementation"] for g in report["groups"] if "hf_attn_implementation" in g})
    if attn:
        print(f"\nHF attention implementation: {', '.join(attn)}; FLOPs per step: " + ", ".join(
            f"{g['size']} {g['flops_per_step'] / 1e9:.0f} GFLOP" for g in report["groups"] if g["precision"] == "fp32"))
    if report.get("pipeline"):
        p = report["pipeline"]
        multiples = ", ".join(f"{k}: {v:.1f}x" for k, v in p.get("multiple_of_step", {}).items())
        print(f"\ntf.data pipeline alone (input_pipeline.pretraining_dataset, {p['shards']} shards, batch "
              f"{p['batch_size']} × 128, {p['batches']} batches × 3): {p['examples_s']:.0f} examples/s "
              f"(runs {', '.join(f'{x:.0f}' for x in p['examples_s_all'])}); multiple of what our step "
              f"consumes: {multiples or '-'}")
    if report.get("ablations"):
        a = report["ablations"]
        print(f"\nAblations of our step ({a['size']} {a['batch_size']}×128, {a['precision']}; each variant "
              f"all interleaved with the unchanged step in each round; saving = 1 − variant time ÷ unchanged time):")
        print("| variant | CPU-s/step | CPU saving, median (range) | CPU-ms/step saved | wall s/step | "
              "wall saving, median (range) | wall ms/step saved | first step s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, row in a["rows"].items():
            print(f"| {name} | {row['cpu_s_per_step']:.2f} | {row.get('cpu_saving', '-')} | "
                  f"{row.get('cpu_ms_saved', '-')} | {row['s_per_step']:.2f} | {row.get('saving', '-')} | "
                  f"{row.get('ms_saved', '-')} | {row['first_step_s']:.1f} |")
    if report.get("profile"):
        p = report["profile"]
        if "error" in p:
            print(f"\nProfile: {p['error']}")
        else:
            print(f"\nTF profiler, ours {p['precision']} ({p['steps']} steps, {1000 * p['wall_s_per_step']:.0f} ms "
                  f"wall per step; op self time summed over threads {p['op_ms_per_step_total']:.0f} ms/step, "
                  f"matmuls {p['matmul_ms_per_step']:.0f} ms/step):")
            print("| function (node-name classification; top 25) | ms/step | % of op time |")
            print("|---|---:|---:|")
            for k, v in p.get("by_function", [])[:25]:
                print(f"| {k} | {v:.1f} | {100 * v / p['op_ms_per_step_total']:.1f} % |")
            print("\n| where (node-name scope; top 30) | ms/step | % of op time |")
            print("|---|---:|---:|")
            for k, v in p["by_scope"][:30]:
                print(f"| {k} | {v:.1f} | {100 * v / p['op_ms_per_step_total']:.1f} % |")
            print("\n| op type (top 25 by self time) | ms/step | % of op time | calls/step |")
            print("|---|---:|---:|---:|")
            for k, v in p["by_type"][:25]:
                print(f"| {k} | {v:.1f} | {100 * v / p['op_ms_per_step_total']:.1f} % | "
                      f"{p['count_by_type_per_step'].get(k, 0):.0f} |")
    print(f"\nCommand: {report['command']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="small,base")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--only", default=",".join(ALL_ONLY), help=f"subset of {','.join(ALL_ONLY)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per implementation per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before each timed run")
    parser.add_argument("--pipeline_batches", type=int, default=300)
    parser.add_argument("--finetune_ablations", default="",
                        help=f"with finetune: also time ours with these speed-ups undone ({', '.join(FINETUNE_ABLATIONS)})")
    parser.add_argument("--ablations", action="store_true", help="time monkeypatched variants of our step")
    parser.add_argument("--ablation_list", default=",".join(ABLATIONS))
    parser.add_argument("--ablation_size", default="small")
    parser.add_argument("--ablation_precision", default="fp32")
    parser.add_argument("--ablation_steps", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="TF-profile a few steps of ours (first size)")
    parser.add_argument("--profile_steps", type=int, default=3)
    parser.add_argument("--profile_precision", default="fp32")
    parser.add_argument("--json_out", default=None)
    args = parser.parse_args()
    only = [x for x in args.only.split(",") if x]
    unknown = set(only) - set(ALL_ONLY)
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)}; choose from {ALL_ONLY}")
    sizes = [s for s in args.sizes.split(",") if s]
    precisions = [p for p in args.precisions.split(",") if p]

    cores = num_cores()
    notes = []
    if torch is not None:
        torch.set_num_threads(cores)  # the cores TF's intra-op pool uses by default
        try:
            torch.set_num_interop_threads(cores)
        except RuntimeError:
            pass
    elif any(x in only for x in ("hf", "finetune")):
        notes.append(f"torch/transformers unavailable ({TORCH_ERROR}): HF columns skipped "
                     "(pip install -r requirements-bench.txt)")
    report = {
        "command": " ".join(["python -m bench.step_bench"] + sys.argv[1:]),
        "hardware": hardware_line(),
        "threads": {"tf_intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "tf_inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                    **({"torch": torch.get_num_threads()} if torch is not None else {}),
                    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")},
        "notes": notes, "groups": [],
    }
    log(report["hardware"])
    strategy = distribution.create_strategy("one_device")
    peak_precisions = sorted(set(precisions) | {"fp32"} | ({"bf16"} if "precision" in only else set()))
    peaks = measure_peaks(peak_precisions)
    tmp = tempfile.mkdtemp(prefix="step_bench-")
    try:
        step_impls = [x for x in ("ours", "hf", "keras_hub") if x in only]
        if "hf" in step_impls and torch is None:
            step_impls.remove("hf")
        for size in sizes if step_impls else []:
            config = bench_config(size)
            batch_size = BATCH.get(size, 8)
            batch = synthetic_batch(batch_size, config.max_seq_length, config.vocab_size)
            masks = masked_positions(config, batch)
            flops_per_step = flops.train_flops_per_step(config, batch_size=batch_size)
            for precision in precisions:
                label = f"{size}/{precision}"
                impls = []
                for name in step_impls:
                    try:
                        if name == "ours":
                            impls.append(Ours(config, batch, precision, strategy=strategy))
                        elif name == "hf":
                            impls.append(HFPair(config, batch, precision, masks))
                        else:
                            impls.append(KerasHubPair(config, batch, precision, masks))
                    except Exception as e:  # noqa: BLE001 - report and go on with the others
                        notes.append(f"{label} {name}: could not build ({type(e).__name__}: {e})")
                        log(notes[-1])
                results = interleave(impls, args.rounds, args.steps, args.warmup, batch_size, label, notes)
                group = {"size": size, "precision": precision, "batch_size": batch_size,
                         "seq_length": config.max_seq_length, "flops_per_step": flops_per_step,
                         "peak_gflops": max(v for (fw, p), v in peaks.items() if p == precision),
                         "results": results, "ratios": {}}
                hf_impl = next((i for i in impls if i.name == "hf"), None)
                if hf_impl is not None:
                    group["hf_attn_implementation"] = hf_impl.attn_implementation
                if "ours" in results:
                    add_ratios(group, "ours")
                report["groups"].append(group)
                for impl in impls:
                    impl.close()
                del impls
                gc.collect()

        for size in sizes if "precision" in only else []:
            # Our bf16 step against our fp32 step, interleaved in the same rounds (the ratio of two
            # groups would compare different minutes of a noisy machine).
            config = bench_config(size)
            batch_size = BATCH.get(size, 8)
            batch = synthetic_batch(batch_size, config.max_seq_length, config.vocab_size)
            impls = [Ours(config, batch, "bf16", strategy=strategy), Ours(config, batch, "fp32", strategy=strategy)]
            impls[0].name, impls[1].name = "ours_bf16", "ours_fp32"
            results = interleave(impls, args.rounds, args.steps, args.warmup, batch_size, f"{size}/precision")
            group = {"size": size, "precision": "bf16 vs fp32 (MFU: bf16 peak)", "peak_precision": "bf16",
                     "batch_size": batch_size, "seq_length": config.max_seq_length,
                     "flops_per_step": flops.train_flops_per_step(config, batch_size=batch_size),
                     "peak_gflops": max(v for (fw, p), v in peaks.items() if p == "bf16"),
                     "results": results, "ratios": {}}
            close_group(report, group, "ours_bf16", impls)

        if "finetune" in only:
            config = bench_config("small")
            batch = synthetic_batch(32, 128, config.vocab_size, seed=1)
            batch["label_ids"] = np.random.RandomState(1).randint(0, 2, 32).astype(np.int32)
            impls = [OursFinetune(config, batch, strategy, tmp)]
            for variant in filter(None, args.finetune_ablations.split(",")):
                impls.append(OursFinetuneAblation(config, batch, strategy, tmp, variant))
            if torch is not None:
                impls.append(HFFinetune(config, batch))
            results = interleave(impls, args.rounds, args.steps, args.warmup, 32, "finetune")
            encoder = flops.encoder_forward_flops(128, config.embedding_size, config.discriminator.hidden_size,
                                                  config.discriminator.num_layers, config.discriminator.intermediate_size)
            group = {"size": "small finetune (cls, 2 labels)", "precision": "fp32", "batch_size": 32,
                     "seq_length": 128, "flops_per_step": flops.BACKWARD_FACTOR * 32 * encoder,
                     "peak_gflops": max(v for (fw, p), v in peaks.items() if p == "fp32"),
                     "results": results, "ratios": {}}
            close_group(report, group, "ours_finetune", impls)

        if "pipeline" in only:
            settle()
            config = bench_config("small")
            report["pipeline"] = bench_pipeline(config, BATCH["small"], args.pipeline_batches, tmp)
            consumed = {f"{g['size']} {g['precision']}": statistics.median(g["results"]["ours"]["seq_s"])
                        for g in report["groups"] if g["size"] == "small" and "ours" in g["results"]}
            report["pipeline"]["multiple_of_step"] = {k: report["pipeline"]["examples_s"] / v
                                                      for k, v in consumed.items()}

        if args.ablations:
            config = bench_config(args.ablation_size)
            batch_size = BATCH.get(args.ablation_size, 8)
            batch = synthetic_batch(batch_size, config.max_seq_length, config.vocab_size)
            variants = [v for v in args.ablation_list.split(",") if v]
            impls = [Ours(config, batch, args.ablation_precision, strategy=strategy)]
            for variant in variants:
                try:
                    impls.append(build_ablation(variant, config, batch, args.ablation_precision, strategy))
                except Exception as e:  # noqa: BLE001
                    notes.append(f"ablation {variant}: could not build ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0][:200]})")
                    log(notes[-1])
            res = interleave(impls, args.rounds, args.ablation_steps, args.warmup, batch_size, "ablation",
                             notes=notes)
            base = res["ours"]["seq_s"]
            rows = {"ours (unchanged)": {"s_per_step": statistics.median(batch_size / b for b in base),
                                         "cpu_s_per_step": statistics.median(res["ours"]["cpu_s_per_step"]),
                                         "first_step_s": res["ours"]["first_step_s"]}}
            for impl in impls[1:]:
                if impl.name not in res or not res[impl.name]["seq_s"]:
                    continue
                var = res[impl.name]["seq_s"]
                savings = [1 - b / v for b, v in zip(base, var)]  # 1 - variant time / unchanged time
                ms_saved = [1000 * batch_size * (1 / b - 1 / v) for b, v in zip(base, var)]
                cpu_base, cpu_var = res["ours"]["cpu_s_per_step"], res[impl.name]["cpu_s_per_step"]
                cpu_savings = [1 - v / b for b, v in zip(cpu_base, cpu_var)]
                rows[impl.variant] = {
                    "cpu_s_per_step": statistics.median(cpu_var),
                    "cpu_saving": f"{100 * statistics.median(cpu_savings):.1f} % ({100 * min(cpu_savings):.1f} to "
                                  f"{100 * max(cpu_savings):.1f})",
                    "cpu_ms_saved": f"{1000 * statistics.median(b - v for b, v in zip(cpu_base, cpu_var)):.0f}",
                    "s_per_step": statistics.median(batch_size / v for v in var),
                    "saving": f"{100 * statistics.median(savings):.1f} % ({100 * min(savings):.1f} to "
                              f"{100 * max(savings):.1f})",
                    "ms_saved": f"{statistics.median(ms_saved):.0f}",
                    "first_step_s": res[impl.name]["first_step_s"], "savings": savings, "ms_saved_all": ms_saved}
            for impl in impls:
                impl.close()
            del impls
            gc.collect()
            report["ablations"] = {"size": args.ablation_size, "precision": args.ablation_precision,
                                   "batch_size": batch_size, "rows": rows}

        if args.profile:
            config = bench_config(sizes[0] if sizes else "small")
            batch_size = BATCH.get(config.model_size, 8)
            batch = synthetic_batch(batch_size, config.max_seq_length, config.vocab_size)
            settle()
            report["profile"] = profile_ours(config, batch, args.profile_precision, strategy, args.profile_steps,
                                             os.path.join(tmp, "profile"))
            if args.json_out and "xplane" in report["profile"]:
                keep = os.path.splitext(args.json_out)[0] + ".xplane.pb"
                shutil.copy(report["profile"]["xplane"], keep)
                report["profile"]["xplane"] = keep
        settle()
        for key, value in measure_peaks(peak_precisions).items():  # again at the end: the best of both
            peaks[key] = max(peaks.get(key, 0.0), value)
    finally:
        report["peaks_gflops"] = {f"{fw} {p}": v for (fw, p), v in sorted(peaks.items())}
        for group in report["groups"]:  # MFU against the best peak of the whole run
            peak_precision = group.get("peak_precision", group["precision"])
            group["peak_gflops"] = max(v for (fw, p), v in peaks.items() if p == peak_precision)
        report["load_average_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        if args.json_out:
            os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
            with open(args.json_out, "w") as f:
                json.dump(report, f, indent=2, default=str)
        shutil.rmtree(tmp, ignore_errors=True)
    print_report(report, args)


if __name__ == "__main__":
    main()
