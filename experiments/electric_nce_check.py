"""Electric's noise-contrastive loss taken apart on a pre-trained checkpoint.

Electric's logit that token t is one of the k noise samples is s_t = E_t + log q_t + log(k / (n − k))
(`electra_tf/model/electric.py`): the energy E of the main model plus the cloze model's log-probability
of the token, a constant of the problem. A loss above the constant predictor's (the binary entropy
of the noise fraction) can mean an energy that learnt nothing, or an energy that learnt to cancel
log q (the first thing NCE asks of it) but not the residual that tells noise from data. This check
measures which: the loss with the learnt energy and with E = 0, the AUC of s, of log q alone and of
E alone, and the correlation of E with log q.

It reads an arm's pre-training folder (`run_config.json`, `checkpoints/`) and its data directory,
and scores the first `--num_batches` batches in file order with the masks and samples of the
held-out evaluation (`electra_tf.training.evaluation`: `EVAL_SEED`, no dropout); the data's
held-out shards where it has them, else its training shards (the record says which). The record
goes to `--output` (default `docs/results/electric_nce_check.json`), with the command and commit:

    python -m experiments.electric_nce_check \\
        --pretrain_dir=~/.cache/electra_tf/compare_objectives/cpu/arms/electric/pretrain \\
        --data_dir=~/.cache/electra_tf/compare_objectives/cpu/data

Example (`decompose` on made-up per-token values):

>>> import numpy as np
>>> d = decompose(energy=np.array([2., 0., 0., 1.]), log_q=np.array([-1., -1., -2., -1.]),
...               labels=np.array([1., 0., 0., 0.]), mask_prob=0.25)
>>> round(d["constant_predictor_loss"], 4), d["auc_energy_alone"], round(d["auc_log_q_alone"], 3)
(0.5623, 1.0, 0.667)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from pathlib import Path

import numpy as np

from experiments.provenance import git_commit, machine_line

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "results" / "electric_nce_check.json"


def sigmoid_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean binary cross-entropy of sigmoid(logits) with labels, computed stably in float64."""
    logits = logits.astype(np.float64)
    return float(np.mean(np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))))


def decompose(energy: np.ndarray, log_q: np.ndarray, labels: np.ndarray, mask_prob: float) -> dict:
    """The NCE loss and AUCs of the logit, of its log q part and of its energy part, over real tokens."""
    from electra_tf.training.evaluation import exact_auc

    energy, log_q, labels = (np.asarray(a, np.float64).reshape(-1) for a in (energy, log_q, labels))
    noise_ratio = math.log(mask_prob / (1 - mask_prob))
    noise_fraction = float(labels.mean())
    is_noise = labels > 0.5
    return {
        "tokens": int(labels.size),
        "noise_fraction": noise_fraction,
        "constant_predictor_loss": sigmoid_cross_entropy(
            np.full_like(labels, math.log(noise_fraction / (1 - noise_fraction))), labels),
        "loss": sigmoid_cross_entropy(energy + log_q + noise_ratio, labels),
        "loss_without_energy": sigmoid_cross_entropy(log_q + noise_ratio, labels),
        "auc": exact_auc(is_noise, energy + log_q),
        "auc_log_q_alone": exact_auc(is_noise, log_q),
        "auc_energy_alone": exact_auc(is_noise, energy),
        "corr_energy_log_q": float(np.corrcoef(energy, log_q)[0, 1]) if energy.std() and log_q.std() else None,
        "mean_log_q": {"noise": float(log_q[is_noise].mean()), "data": float(log_q[~is_noise].mean())},
        "mean_energy": {"noise": float(energy[is_noise].mean()), "data": float(energy[~is_noise].mean())},
    }


def collect(model, batches, seeds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per real token of `batches`: the energy, log q of the token seen and the noise label."""
    from electra_tf.training.evaluation import UNIT_NORMALIZERS

    parts = {"energy": [], "log_q": [], "labels": []}
    for batch, batch_seeds in zip(batches, seeds):
        out = model.compute_losses(batch, training=False, seeds=batch_seeds, normalizers=UNIT_NORMALIZERS)
        real = out["disc_weights"].numpy() > 0
        for name in parts:
            parts[name].append(out[name].numpy()[real])
    return tuple(np.concatenate(parts[name]) for name in ("energy", "log_q", "labels"))


def load(pretrain_dir: str, data_dir: str, checkpoint: str | None):
    """The electric pre-trainer restored from `pretrain_dir` (newest checkpoint unless named) and its data."""
    import tensorflow as tf

    from electra_tf.convert import api
    from electra_tf.text.manifest import eval_view, has_eval_split, load_manifest
    from electra_tf.training import evaluation

    config_path = api.run_config_path(pretrain_dir)
    if config_path is None:
        raise ValueError(f"--pretrain_dir: {pretrain_dir} holds no run_config.json (not a run_pretraining.py "
                         "--model_dir)")
    config = api.load_run_config(config_path)
    if config.objective != "electric":
        raise ValueError(f"--pretrain_dir: {pretrain_dir} was trained with objective {config.objective!r}, "
                         "not 'electric'")
    directory = os.path.join(pretrain_dir, "checkpoints")
    path = os.path.join(directory, checkpoint) if checkpoint else tf.train.latest_checkpoint(directory)
    if path is None or not tf.io.gfile.exists(path + ".index"):
        raise ValueError(f"--{'checkpoint' if checkpoint else 'pretrain_dir'}: no checkpoint "
                         f"{path or directory}")
    try:
        manifest = load_manifest(data_dir)
    except ValueError as e:
        raise ValueError(f"--data_dir: {e}") from None
    held_out = has_eval_split(manifest)
    model = evaluation.build_model(config, manifest)
    tf.train.Checkpoint(model=model).restore(path).expect_partial().assert_existing_objects_matched()
    return model, path, (eval_view(manifest) if held_out else manifest), held_out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretrain_dir", required=True, help="an electric run's --model_dir")
    parser.add_argument("--data_dir", required=True, help="its pre-training data directory")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint name in <pretrain_dir>/checkpoints "
                        "(default: the newest)")
    parser.add_argument("--num_batches", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args(argv)
    args.pretrain_dir, args.data_dir = (os.path.expanduser(p) for p in (args.pretrain_dir, args.data_dir))
    from electra_tf.text.manifest import write_json_atomic
    from electra_tf.training import evaluation

    try:
        model, path, manifest, held_out = load(args.pretrain_dir, args.data_dir, args.checkpoint)
    except ValueError as e:
        print(f"electric_nce_check: {e}", file=sys.stderr)
        return 2
    evaluator = evaluation.Evaluator(model, (args.data_dir, manifest), args.batch_size, args.num_batches, None)
    energy, log_q, labels = collect(model, evaluator.batches, evaluator.seeds)
    record = {
        "command": "python -m experiments.electric_nce_check " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
        "commit": git_commit(("electra_tf", "experiments")), "machine": machine_line(),
        "checkpoint": os.path.basename(path), "examples": evaluator.num_examples,
        "data": "held-out shards" if held_out else "training shards (the data has no held-out split)",
        **decompose(energy, log_q, labels, model.config.mask_prob)}
    write_json_atomic(args.output, record)
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
