r"""Benchmark: our ELECTRA pre-training step against Hugging Face (PyTorch) and plain keras-hub.

Not a test: it takes minutes to hours. All implementations run in ONE process, one after another
(TensorFlow and PyTorch never run at the same time), on the same synthetic batch, and are
interleaved over ``--rounds`` rounds (the order rotates every round) because the machine is shared
and noisy. Each round times ``--steps`` steps after ``--warmup`` steps; ratios are taken within a
round and reported as median and range over the rounds (``harness``).

Implementations of the replaced-token-detection step (mask 15 %, generator MLM loss at the masked
positions only, sampling without gradient, discriminator on the corrupted ids, loss = MLM + 50 x
BCE over real tokens, AdamW, global-norm clip 1.0, dropout 0.1, train mode):

* ``ours``      - ``electra_tf.training.pretraining.build_model`` timed through ``training.make_train_fn``
  under the execution options the scripts resolve for the bench's devices (``ours``).
* ``hf``        - transformers ``ElectraForMaskedLM`` + ``ElectraForPreTraining`` on PyTorch
  (``peers``).
* ``keras_hub`` - two plain ``keras_hub.models.ElectraBackbone`` with dense heads (``peers``).

The peers use the masked positions that our masking draws for this batch at step 0 (the same
positions, the same [MASK]/keep choice); they apply them in the step (gather, scatter of the
samples) but do not draw them (``workload``).

Also measured: a dense-matmul peak (2048² ``tf.linalg.matmul`` and ``torch.matmul``) for MFU; our
bf16 step against our fp32 step (``--only=precision``); the fine-tuning step (Small, sequence
classification, fp32) against ``ElectraForSequenceClassification`` (``--only=finetune``); the
tf.data pipeline alone (``--only=pipeline``); ablations (``--ablations``, ``--finetune_ablations``):
our step under other ``ExecutionOptions``, interleaved with the unchanged one (``ablations``);
and a TF-profiler trace summarised by op self time (``--profile``). ``--only=`` (empty) with
``--ablations`` runs the ablations alone.

FLOPs: ``electra_tf.model.flops.train_flops_per_step`` (matmul FLOPs × 3) for every implementation of
the same step. MFU = achieved FLOP/s ÷ the best measured matmul peak of that precision.

Every run writes one JSON document (``report``): the machine, the command line, the commit, every
round's timings and the ratios; by default to ``bench/results/scratch/`` (git-ignored). A result
that backs a claim in the docs is written under ``bench/results/`` with ``--json_out`` and committed.

Usage, from the repository root (``pip install -r requirements-bench.txt`` for torch/transformers):

    python -m bench.step_bench --sizes=small --rounds=3
    python -m bench.step_bench --sizes=base --rounds=3 --only=ours,hf,keras_hub
    python -m bench.step_bench --sizes=small --only=ours --ablations --profile --precisions=fp32
    python -m bench.step_bench --sizes=small --only=finetune --finetune_ablations=reference_kernels,keras_dropout
"""
