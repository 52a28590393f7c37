"""Held-out evaluation of a pre-training run: the same batches, masks and samples every time.

The official ELECTRA evaluates a checkpoint on held-out data with the generator's
masked-LM loss and accuracy and the discriminator's loss, AUC, accuracy, precision
and recall; this module measures the same on the held-out shards of a data
directory (`data_prep --eval_fraction`) or of `--eval_data_dir`.

What makes the numbers of two evaluations comparable (and those of two runs, of any
seed or objective, on the same data):

* the batches: the first `num_batches` batches of the shards in file order, read
  once (no shuffle) and kept in memory;
* the masks and the generator's samples: drawn from `EVAL_SEED` and each example's
  position in that list, never from the training step or the run's seed;
* no dropout (`training=False`). Evaluating reads the weights only, so it leaves
  the training exactly as it would have been without it.

Metrics are over all evaluated tokens at once (not a mean of batch means). The AUC
is exact: the Mann-Whitney statistic (ties counted half) over the collected
probabilities, not a thresholded approximation as the training log's
`keras.metrics.AUC` is. Accuracy, precision and recall threshold p(replaced) at 0.5.
Metrics an objective does not have (no discriminator for `mlm`) are left out.

Results go to TensorBoard (the run `<model_dir>/eval`, tags `<metric>` as in the training run
`<model_dir>/train`, so the two curves share a chart) and, one JSON
object per evaluation with its step, to `<model_dir>/eval_log.jsonl`.

Example (`metrics_from_outputs` on collected predictions):

>>> import numpy as np
>>> part = {"gen_loss_sum": 6.0, "gen_correct": np.array([[1., 0., 1.]]), "mlm_weights": np.ones([1, 3]),
...         "gen_loss_weights": np.ones([1, 3]), "disc_loss_sum": 2.0, "disc_probs": np.array([[0.9, 0.2, 0.6, 0.1]]),
...         "labels": np.array([[1., 0., 0., 0.]]), "disc_weights": np.ones([1, 4])}
>>> m = metrics_from_outputs([part], gen_weight=1.0, disc_weight=50.0)
>>> round(m["gen_loss"], 3), round(m["gen_accuracy"], 3), m["disc_auc"], m["disc_precision"], m["loss"]
(2.0, 0.667, 1.0, 0.5, 27.0)
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from absl import logging

from electra_tf.model import masking
from electra_tf.config import ElectraConfig
from electra_tf.model.networks import pretrainer_from_config
from electra_tf.model.pretrainer import ElectraPretrainer
from electra_tf.text import verify
from electra_tf.text.manifest import FEATURE_NAMES, eval_view, has_eval_split, load_manifest, validate_manifest
from electra_tf.text.vocabulary import Vocabulary, check_vocabulary
from electra_tf.training import input_pipeline, loop

EVAL_SEED = 2020  # fixed, not the run's --seed: every run is evaluated on the same masks
LOG_DIR, LOG_FILE = "eval", "eval_log.jsonl"
# Sums, not means: with unit normalisers `compute_losses` returns each loss's sum over the batch.
UNIT_NORMALIZERS = {"num_masked": 1.0, "num_tokens": 1.0, "num_candidates": 1.0}


def resolve_source(eval_data_dir: str | None, data_dir: str, train_manifest: dict,
                   config: ElectraConfig) -> tuple[str, dict] | None:
    """`(directory, manifest view whose "shards" are the ones to evaluate)`, or None: no held-out data.

    `eval_data_dir` unset: the held-out shards of `data_dir`, if its build made any. Set: its
    held-out shards if it has some, else all its shards (a separately built held-out corpus),
    checked against the model and the training data's vocabulary (ValueError naming the flag).
    """
    if not eval_data_dir:
        if not has_eval_split(train_manifest):
            return None
        verify.check_shard_sizes(data_dir, eval_view(train_manifest))
        return data_dir, eval_view(train_manifest)
    flag = f"--eval_data_dir {eval_data_dir}"
    try:
        manifest = load_manifest(eval_data_dir)
        validate_manifest(manifest, max_seq_length=config.max_seq_length, vocab_size=config.vocab_size,
                          data_dir=eval_data_dir)
        view = eval_view(manifest) if has_eval_split(manifest) else manifest
        verify.check_shard_sizes(eval_data_dir, view)
    except ValueError as e:
        raise ValueError(f"{flag}: {e}") from None
    check_vocabulary(Vocabulary.of_manifest(train_manifest, "the training data's vocabulary"),
                     Vocabulary.of_manifest(manifest, f"{flag}'s vocabulary"), allow_extension=False,
                     hint="build it with the same --vocab_file and casing")
    for key in ("special_token_ids", "do_lower_case"):
        if key in manifest and key in train_manifest and manifest[key] != train_manifest[key]:
            raise ValueError(f"{flag}: its manifest.json has another {key} than the training data's "
                             f"({manifest[key]} vs {train_manifest[key]}): build it with the same --vocab_file "
                             "and casing")
    if manifest.get("eval_shards") and not has_eval_split(manifest):
        raise ValueError(f"{flag}: its held-out shards hold no examples (eval_num_examples=0 in manifest.json)")
    if view is manifest and os.path.realpath(eval_data_dir) == os.path.realpath(data_dir):
        logging.warning("%s: it has no held-out shards, so the evaluation runs on the training data itself", flag)
    return eval_data_dir, view


def every_steps(options) -> int:
    """Steps between evaluations while training; 0: only at the end (`TrainOptions.eval_every_steps`)."""
    every = options.eval_every_steps
    return options.save_checkpoints_steps if every is None else every


class Evaluator:
    """Evaluates `model` on fixed batches of held-out shards; `evaluate(step)` also writes the results."""

    def __init__(self, model, source: tuple[str, dict], batch_size: int, num_batches: int,
                 model_dir: str | None):
        self.model, (self.data_dir, manifest) = model, source[:2]
        self.batch_size = min(batch_size, manifest["num_examples"])
        if len(source) > 2:  # (name, view, make_dataset(batch_size)): --train_text's held-out documents
            dataset = source[2](self.batch_size)
        else:
            dataset = input_pipeline.pretraining_dataset(self.data_dir, manifest, self.batch_size, shuffle_buffer=0,
                                                         repeat=False)
        self.batches = [{name: batch[name] for name in FEATURE_NAMES} for batch in dataset.take(num_batches)]
        if len(self.batches) < num_batches:
            logging.info("Held-out data in %s: %d batch(es) of %d, fewer than the %d asked for", self.data_dir,
                         len(self.batches), self.batch_size, num_batches)
        self.seeds = [masking.example_seeds(EVAL_SEED, 0, tf.range(i * self.batch_size, (i + 1) * self.batch_size))
                      for i in range(len(self.batches))]
        self.logger = loop.ScalarLogger(model_dir, LOG_DIR, LOG_FILE) if model_dir else None
        # No autograph: the model's code uses explicit TF control flow (as the training step does).
        self._forward = tf.function(self._outputs, autograph=False)

    @property
    def num_examples(self) -> int:
        return len(self.batches) * self.batch_size

    def _outputs(self, batch, seeds):
        out = self.model.compute_losses(batch, training=False, seeds=seeds, normalizers=UNIT_NORMALIZERS)
        masked = out["masked"]
        # Electric's cloze loss is over every candidate position, the others' over the masked ones.
        result = {"gen_loss_sum": out["gen_loss"], "mlm_weights": masked.weights,
                  "gen_loss_weights": out.get("gen_loss_weights", masked.weights),
                  "gen_correct": tf.cast(tf.equal(out["gen_predictions"], masked.original_ids), tf.float32)}
        if "sampled" in out:
            sampled = tf.cast(out["sampled"], masked.original_ids.dtype)
            result["sampled_correct"] = tf.cast(tf.equal(sampled, masked.original_ids), tf.float32)
            result["replaced"] = tf.gather(out["labels"], masked.positions, batch_dims=1)
        if "disc_logits" in out:
            result.update(disc_loss_sum=out["disc_loss"], disc_probs=tf.sigmoid(out["disc_logits"]),
                          labels=out["labels"], disc_weights=out["disc_weights"])
        if "main_loss" in out:
            result.update(main_loss_sum=out["main_loss"], main_correct=out["main_correct"],
                          main_weights=out["main_weights"])
        return result

    def collect(self) -> list[dict]:
        """Each batch's outputs as numpy arrays (what `metrics_from_outputs` reduces)."""
        return [{name: value.numpy() for name, value in self._forward(batch, seeds).items()}
                for batch, seeds in zip(self.batches, self.seeds)]

    def evaluate(self, step: int) -> dict:
        """The metrics of the model's current weights, logged and written at `step`."""
        config = self.model.config
        metrics = metrics_from_outputs(self.collect(), config.gen_weight, config.disc_weight)
        logging.info("eval at step %d (%d held-out examples of %s): %s", step, self.num_examples, self.data_dir,
                     "  ".join(f"{name}={value:.4g}" for name, value in metrics.items()))
        if self.logger is not None:
            self.logger.write(step, metrics, prefix="eval")
        return metrics


def metrics_from_outputs(parts: list[dict], gen_weight: float, disc_weight: float) -> dict:
    """Token-weighted metrics over all batches' outputs; `loss` combines them as the training loss does."""
    def total(name):
        return float(sum(np.sum(part[name]) for part in parts))

    def weighted(name, weights):
        return float(sum(np.sum(part[name] * part[weights]) for part in parts))

    num_masked = max(total("mlm_weights"), 1.0)
    metrics = {"gen_loss": total("gen_loss_sum") / max(total("gen_loss_weights"), 1.0),
               "gen_accuracy": weighted("gen_correct", "mlm_weights") / num_masked}
    metrics["loss"] = gen_weight * metrics["gen_loss"]
    if "sampled_correct" in parts[0]:
        metrics["gen_sampled_accuracy"] = weighted("sampled_correct", "mlm_weights") / num_masked
        metrics["replaced_fraction"] = weighted("replaced", "mlm_weights") / num_masked
    if "disc_probs" in parts[0]:
        metrics["disc_loss"] = total("disc_loss_sum") / max(total("disc_weights"), 1.0)
        metrics["loss"] += disc_weight * metrics["disc_loss"]
        selected = [part["disc_weights"] > 0 for part in parts]
        probs = np.concatenate([part["disc_probs"][s] for part, s in zip(parts, selected)])
        labels = np.concatenate([part["labels"][s] for part, s in zip(parts, selected)])
        metrics.update(binary_metrics(labels, probs))
    if "main_loss_sum" in parts[0]:
        num_main = max(total("main_weights"), 1.0)
        metrics["main_loss"] = total("main_loss_sum") / num_main
        metrics["main_accuracy"] = weighted("main_correct", "main_weights") / num_main
        metrics["loss"] += metrics["main_loss"]
    return metrics


def binary_metrics(labels: np.ndarray, probs: np.ndarray) -> dict:
    """Accuracy, precision, recall (p > 0.5, as Keras' metrics) and the exact AUC (left out when one class
    is absent, where it is undefined)."""
    labels, predicted = labels > 0.5, probs > 0.5
    true_positives = float(np.sum(labels & predicted))
    out = {"disc_accuracy": float(np.mean(labels == predicted)),
           "disc_precision": true_positives / max(float(np.sum(predicted)), 1.0),
           "disc_recall": true_positives / max(float(np.sum(labels)), 1.0)}
    auc = exact_auc(labels, probs)
    if auc is not None:
        out["disc_auc"] = auc
    return out


def exact_auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """P(score of a positive > score of a negative) + half P(equal): the Mann-Whitney U over the counts."""
    positives = int(np.sum(labels))
    negatives = labels.size - positives
    if not positives or not negatives:
        return None
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    # Each distinct score's average rank (1-based), ties sharing it.
    average_rank = np.cumsum(counts) - (counts - 1) / 2.0
    rank_sum = float(np.sum(average_rank[inverse][labels]))
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def for_training(model, source, options, config, chief: bool) -> Evaluator | None:
    """The chief's evaluator during training (None: no held-out data, `eval_batches=0`, or another worker)."""
    if source is None or not options.eval_batches or not chief:
        return None
    return Evaluator(model, source, options.eval_batch_size or config.train_batch_size, options.eval_batches,
                     options.model_dir)


def due(step: int, last: int, every: int) -> bool:
    """Evaluate at every `every`-th step (0: never in between) and at the invocation's last step."""
    return step >= last or bool(every and step % every == 0)


def build_model(config: ElectraConfig, manifest: dict, execution=None) -> ElectraPretrainer:
    """The model to restore checkpoints into for `--do_eval` (no optimizer: nothing is trained), computing with
    `execution` (resolved; the generator's sampling method is part of what an evaluation draws)."""
    return pretrainer_from_config(config, special_token_ids=manifest["special_token_ids"], execution=execution,
                                  whole_words=input_pipeline.whole_words_table(config, manifest)).build_all()


def evaluate_checkpoints(model, source: tuple[str, dict], model_dir: str, batch_size: int, num_batches: int,
                         all_checkpoints: bool = False) -> list[dict]:
    """`--do_eval`: evaluates the newest checkpoint of `model_dir` (or every one kept), writing the same
    outputs as evaluation during training; returns `{"step", **metrics}` per checkpoint."""
    paths = checkpoint_paths(model_dir, all_checkpoints)
    evaluator = Evaluator(model, source, batch_size, num_batches, model_dir)
    results = []
    for path in paths:
        tf.train.Checkpoint(model=model).restore(path).expect_partial().assert_existing_objects_matched()
        step = int(path.rsplit("-", 1)[1])  # checkpoints are numbered by their step
        results.append({"step": step, **evaluator.evaluate(step)})
    return results


def checkpoint_paths(model_dir: str, all_checkpoints: bool) -> list[str]:
    """The newest checkpoint of `model_dir` (or every one kept, oldest first); ValueError if none."""
    directory = os.path.join(model_dir, "checkpoints")
    state = tf.train.get_checkpoint_state(directory)
    if state is None or not state.model_checkpoint_path:
        raise ValueError(f"--do_eval: no checkpoint in {directory} to evaluate")
    paths = list(state.all_model_checkpoint_paths) if all_checkpoints else [state.model_checkpoint_path]
    # The checkpoint file may record the paths relative to the writer's working directory (a relative
    # --model_dir): the checkpoints are in `directory` whatever it says.
    return [os.path.join(directory, os.path.basename(p)) for p in paths]
