"""The `Task` interface: every task builds its own head and owns its defaults; the run asks nothing else.

Also: the fine-tuning modules import on their own and import one another without a cycle.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from keras import layers, ops

from electra_tf.config import get_config
from electra_tf.finetuning import registry
from electra_tf.finetuning.data import padding_for
from electra_tf.finetuning.model import new_encoder_fn
from electra_tf.finetuning.registry import get_task, register_task, task_names
from electra_tf.finetuning.runner import run_single
from electra_tf.finetuning.task import EvalSet, Task
from electra_tf.options import RunOptions

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "electra_tf" / "finetuning"
PACKAGE = "electra_tf.finetuning"
MODULES = sorted(path.stem for path in PACKAGE_DIR.glob("*.py") if path.stem != "__init__")

BATCH, SEQ, HIDDEN = 2, 8, 16
# Every registered task: (output checked, its shape for a [BATCH, SEQ, HIDDEN] encoder output).
HEAD_OUTPUTS = {
    "CoLA": ("logits", (BATCH, 2)), "SST-2": ("logits", (BATCH, 2)), "MRPC": ("logits", (BATCH, 2)),
    "STS-B": ("predictions", (BATCH,)), "QQP": ("logits", (BATCH, 2)), "MNLI": ("logits", (BATCH, 3)),
    "QNLI": ("logits", (BATCH, 2)), "RTE": ("logits", (BATCH, 2)), "WNLI": ("logits", (BATCH, 2)),
    "text_classification": ("logits", (BATCH, 4)),  # with labels=("a", "b", "c", "d")
    "squad": ("start_logits", (BATCH, SEQ)), "squad_v2": ("start_logits", (BATCH, SEQ)),
    "ner": ("logits", (BATCH, SEQ, 4)), "chunk": ("logits", (BATCH, SEQ, 4)),  # tagging tasks take labels too
    "tagging": ("logits", (BATCH, SEQ, 4)),
}


@pytest.mark.parametrize("name", sorted(HEAD_OUTPUTS))
def test_every_registered_task_builds_its_own_head(name):
    task = get_task(name, labels=("a", "b", "c", "d"))  # text_classification and the tagging tasks take labels
    head = task.build_head(get_config("tiny", squad_beam_size=4))
    hidden = np.random.RandomState(0).normal(size=(BATCH, SEQ, HIDDEN)).astype("float32")
    batch = {"input_mask": np.ones((BATCH, SEQ), "int32"), "segment_ids": np.array([[0] * 3 + [1] * 5] * BATCH)}
    key, shape = HEAD_OUTPUTS[name]
    assert tuple(head(hidden, batch)[key].shape) == shape


def test_the_table_above_covers_every_registered_task():
    assert sorted(HEAD_OUTPUTS) == task_names()


@pytest.mark.parametrize("name, epochs, max_seq_length", [
    ("RTE", 10, 128), ("STS-B", 10, 128), ("SST-2", None, 128), ("MNLI", None, 128),
    ("text_classification", None, 128), ("squad", 2, 512), ("squad_v2", 2, 512),
])
def test_tasks_own_their_defaults(name, epochs, max_seq_length):
    task = get_task(name)
    assert (task.default_epochs, task.default_max_seq_length) == (epochs, max_seq_length)


def test_span_tasks_keep_batches_long_enough_for_their_beam():
    assert get_task("squad").min_sequence_length(get_config("tiny", squad_beam_size=80)) == 80
    assert get_task("squad").min_sequence_length(get_config("tiny")) == 64
    assert get_task("RTE").min_sequence_length(get_config("tiny")) == 1


# The modules that build, train, evaluate, export and run a model: they know tasks only through `Task`.
RUN_MODULES = ("data", "evaluate", "model", "predict", "prepare", "runner", "train")
RUN_MODULE_PATHS = [PACKAGE_DIR / f"{module}.py" for module in RUN_MODULES] + [
    ROOT / "electra_tf" / "serving" / "export.py"]


@pytest.mark.parametrize("path", RUN_MODULE_PATHS, ids=lambda path: path.stem)
def test_the_run_never_asks_for_a_task_kind(path):
    tree = ast.parse(path.read_text())
    assert not [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "kind"]


# --------------------------------------------------------------------------
# A task the run has never heard of
# --------------------------------------------------------------------------

class MeanTokenHead(layers.Layer):
    """Regression on the mean hidden state (a head unlike the built-in ones)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = layers.Dense(1, name="score")

    def build(self, sequence_shape, batch_shape=None):
        self.dense.build((sequence_shape[0], sequence_shape[-1]))
        self.built = True

    def call(self, sequence, batch=None, training=None):
        mask = ops.expand_dims(ops.cast(batch["input_mask"], sequence.dtype), -1)
        mean = ops.sum(sequence * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1.0)
        return {"score": ops.squeeze(ops.cast(self.dense(mean), "float32"), -1)}

    def per_example_loss(self, batch, outputs):
        return ops.square(outputs["score"] - ops.cast(batch["length"], "float32"))


class LengthTask(Task):
    """Predict the number of real tokens of random sequences."""

    default_epochs = 1
    main_metric = "neg_mse"
    metric_names = ("neg_mse",)

    def __init__(self, data_dir=None, num_examples=16):
        super().__init__("length")
        self.num_examples = num_examples
        self.heads = []

    def build_head(self, config):
        self.heads.append(MeanTokenHead(name="mean_token_head"))
        return self.heads[-1]

    def min_sequence_length(self, config):
        return 16

    def _features(self, max_seq_length, seed):
        rng = np.random.RandomState(seed)
        lengths = rng.randint(2, max_seq_length + 1, size=self.num_examples)
        mask = (np.arange(max_seq_length)[None] < lengths[:, None]).astype("int32")
        return {"input_ids": rng.randint(5, 30, size=mask.shape).astype("int32") * mask, "input_mask": mask,
                "segment_ids": np.zeros_like(mask), "length": lengths.astype("float32")}

    def train_features(self, tokenizer, max_seq_length):
        return self._features(max_seq_length, seed=0)

    def eval_sets(self, tokenizer, max_seq_length):
        return [EvalSet("dev", [], self._features(max_seq_length, seed=1))]

    def predict_sets(self, tokenizer, max_seq_length):
        return [EvalSet("test", [], self._features(max_seq_length, seed=2))]

    def score(self, eval_set, outputs, output_dir=None):
        return {"neg_mse": -float(np.mean((outputs["score"] - eval_set.features["length"]) ** 2))}

    def write_predictions(self, eval_set, outputs, output_dir):
        path = str(Path(output_dir) / "lengths.json")
        Path(path).write_text(json.dumps([float(x) for x in outputs["score"]]))
        return path


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    monkeypatch.setattr(registry, "_NAMES", set(registry._NAMES))


def test_the_run_takes_a_registered_custom_task(tmp_path, clean_registry):
    register_task("length", LengthTask, aliases=("token_count",))
    task = get_task("Token_Count", data_dir="ignored", text_column="ignored too", num_examples=12)
    assert isinstance(task, LengthTask) and task.num_examples == 12 and "length" in task_names()
    config = get_config("tiny", vocab_size=30, num_layers=1, hidden_size=16, embedding_size=8, num_heads=2,
                        intermediate_size=32, max_seq_length=32, max_position_embeddings=32)
    options = RunOptions(output_dir=str(tmp_path), learning_rate=1e-3, train_batch_size=4,
                         eval_batch_size=4, num_train_epochs=task.default_epochs, warmup_fraction=0.0,
                         weight_decay=0.0, layerwise_lr_decay=0.8, max_seq_length=32, do_predict=True,
                         log_steps=1, steps_per_loop=1)
    assert padding_for(task, config, options).min_length == 16
    result = run_single(task, config, new_encoder_fn(config), None, options, tf.distribute.get_strategy(),
                        str(tmp_path), {})
    assert result["train_steps"] == 3 and "neg_mse" in result["final"]
    assert len(json.loads((tmp_path / "lengths.json").read_text())) == 12
    assert len(task.heads) == 1 and task.heads[0].built  # the run's model holds the task's own head


def test_a_run_asked_for_a_saved_model_without_an_export_function_is_refused_before_training(tmp_path):
    """Fine-tuning does not import serving: the caller hands the runner the export function."""
    options = RunOptions(output_dir=str(tmp_path), learning_rate=1e-3, train_batch_size=4, eval_batch_size=4,
                         num_train_epochs=1, warmup_fraction=0.0, weight_decay=0.0, layerwise_lr_decay=1.0,
                         max_seq_length=16, export_saved_model=str(tmp_path / "serving"))
    with pytest.raises(ValueError, match="export_saved_model is set but the run was given no export function"):
        run_single(LengthTask(), None, None, None, options, None, str(tmp_path / "run"), {})
    assert not (tmp_path / "run").exists()  # refused before anything was written


# --------------------------------------------------------------------------
# Imports
# --------------------------------------------------------------------------

def _imported_package_modules(module: str) -> set[str]:
    """The `electra_tf.finetuning` modules that `module` imports, anywhere in its source."""
    found = set()
    for node in ast.walk(ast.parse((PACKAGE_DIR / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith(PACKAGE + "."))
    return found & set(MODULES)


def test_no_import_cycle_between_finetuning_modules():
    graph = {module: _imported_package_modules(module) for module in MODULES}
    done, path = set(), []

    def visit(module):
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(module):] + [module]))
        if module not in done:
            path.append(module)
            for imported in sorted(graph[module]):
                visit(imported)
            path.pop()
            done.add(module)

    for module in MODULES:
        visit(module)


def test_every_module_imports_on_its_own():
    """In a fresh interpreter, each module is imported with no `electra_tf` module loaded before it."""
    script = (
        "import importlib, sys, traceback\n"
        f"for name in {MODULES!r}:\n"
        "    for loaded in [m for m in sys.modules if m == 'electra_tf' or m.startswith('electra_tf.')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        f"        importlib.import_module('{PACKAGE}.' + name)\n"
        "    except Exception:\n"
        "        print('FAILED', name, traceback.format_exc())\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "FAILED" not in result.stdout, result.stdout + result.stderr[-3000:]
