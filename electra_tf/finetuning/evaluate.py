"""Scoring the dev sets, and which weights (final or best dev evaluation) a run reports.

`evaluate` runs the task's scorer over all its dev sets; `BestTracker` logs
each evaluation and remembers the best by the task's main metric. As in the
official code, test predictions and the reported metrics come from the *final*
weights (`final.weights.h5`); `select_best_epoch` instead keeps the weights of
the best dev evaluation (`best.weights.h5`) and uses them for predictions and
the summary.

Example:

>>> class Log:
...     def write(self, step, scalars, prefix, nested=False): pass
>>> tracker = BestTracker(model=None, run_dir="unused", main_key="accuracy", writer=Log())
>>> tracker(10, {"accuracy": 71.0}); tracker(20, {"accuracy": 70.0})
>>> tracker.summary()
{'final': {'accuracy': 70.0}, 'best': {'accuracy': 71.0}, 'best_step': 10}
>>> tracker.select(select_best_epoch=False)
'final'
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Optional

from absl import logging

from electra_tf.finetuning.data import Padding
from electra_tf.finetuning.predict import predict
from electra_tf.finetuning.task import Task
from electra_tf.options import RunOptions

BEST_WEIGHTS = "best.weights.h5"
FINAL_WEIGHTS = "final.weights.h5"


@dataclasses.dataclass
class EvalContext:
    """What scoring the dev sets (and predicting the test sets) needs: where, how, with which strategy."""

    task: Task
    eval_sets: list
    options: RunOptions
    strategy: object
    padding: Padding
    run_dir: Optional[str]


def evaluate(model, context: EvalContext) -> dict[str, float]:
    """The task's metrics over all its dev sets."""
    results = {}
    for eval_set in context.eval_sets:
        outputs = predict(model, eval_set.features, context.options.eval_batch_size, context.strategy,
                          context.padding)
        results.update(context.task.score(eval_set, outputs, context.run_dir))
    return results


class BestTracker:
    """Logs every dev evaluation and remembers the best one by the main metric.

    `writer` is a `loop.ScalarLogger` (TensorBoard + log.jsonl). With
    `keep_best_weights` (`--select_best_epoch`) the weights of the best
    evaluation are saved to `best.weights.h5` so they can be restored.
    """

    def __init__(self, model, run_dir: str, main_key: str, writer, keep_best_weights=False):
        self.model, self.run_dir, self.main_key, self.writer = model, run_dir, main_key, writer
        self.keep_best_weights = keep_best_weights
        self.best_value, self.best, self.best_step, self.last = -math.inf, None, None, None

    def __call__(self, step: int, metrics: dict):
        self.last = metrics
        self.writer.write(step, metrics, "dev", nested=True)
        logging.info("dev @ step %d: %s", step, "  ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
        if metrics.get(self.main_key, -math.inf) > self.best_value:
            self.best_value, self.best, self.best_step = metrics[self.main_key], dict(metrics), step
            if self.keep_best_weights:
                self._save_best_weights()

    def _save_best_weights(self):
        # Written aside then renamed: a kill mid-write must not leave a broken best.weights.h5 behind.
        tmp = os.path.join(self.run_dir, "best.tmp.weights.h5")
        self.model.save_weights(tmp)
        os.replace(tmp, os.path.join(self.run_dir, BEST_WEIGHTS))

    def state(self) -> dict:
        """What a checkpoint keeps, so a resumed run selects the same best evaluation."""
        return {"best_value": self.best_value, "best": self.best, "best_step": self.best_step, "last": self.last}

    def load_state(self, state: dict):
        self.best_value, self.best, self.best_step, self.last = (
            state["best_value"], state["best"], state["best_step"], state["last"])

    def summary(self) -> dict:
        if self.best is None:
            return {"final": self.last or {}}
        return {"final": self.last, "best": self.best, "best_step": self.best_step}

    def select(self, select_best_epoch: bool) -> str:
        """Restores the best evaluation's weights if asked (and known); returns the selection name."""
        if not select_best_epoch:
            logging.info("Predictions and reported metrics use the final weights (--select_best_epoch "
                         "would use the best dev evaluation)")
            return "final"
        if self.best is None or not self.keep_best_weights:
            logging.warning("--select_best_epoch: no dev evaluation to select from; using the final weights")
            return "final"
        self.model.load_weights(os.path.join(self.run_dir, BEST_WEIGHTS))
        logging.info("--select_best_epoch: predictions and reported metrics use the best dev evaluation "
                     "(step %d, %s=%.4f)", self.best_step, self.main_key, self.best_value)
        return "best_epoch"


def restore_finetuned(model, run_dir: str, select_best_epoch: bool = False) -> Optional[str]:
    """For --do_train=false: the weights a previous run left in `run_dir` (final, or best if selected)."""
    names = (BEST_WEIGHTS, FINAL_WEIGHTS) if select_best_epoch else (FINAL_WEIGHTS, BEST_WEIGHTS)
    saved = [os.path.join(run_dir, name) for name in names if os.path.exists(os.path.join(run_dir, name))]
    if not saved:
        logging.warning("--do_train=false and no %s in %s: the task head is untrained", FINAL_WEIGHTS, run_dir)
        return None
    model.load_weights(saved[0])
    logging.info("Using the fine-tuned weights of %s", saved[0])
    return "best_epoch" if saved[0].endswith(BEST_WEIGHTS) else "final"


def selected_metrics(result: dict) -> dict:
    """The metrics of the weights a run reports (`result` has "final"): the best evaluation's after
    "best_epoch", else the final ones."""
    return result.get("best", result["final"]) if result["selection"] == "best_epoch" else result["final"]
