"""The shared loop: the gradient-apply sequence, the step driver, logging and progress."""

import io
import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import logging

from electra_tf.model import step as model_step
from electra_tf.training import loop
from electra_tf.training.optimization import ElectraAdamW, WarmupLinearDecay
from electra_tf.options import STEP_LOOPS

RESOLVED_STEP_LOOPS = tuple(choice for choice in STEP_LOOPS if choice != "auto")  # what the driver takes


class Quadratic(keras.Model):
    """loss = mean((x·w − y)²): gradients known in closed form."""

    def __init__(self):
        super().__init__()
        self.w = self.add_weight(shape=(2,), initializer="zeros")

    def compute_losses(self, batch, training=True):
        residual = tf.linalg.matvec(batch["x"], self.w) - batch["y"]
        return {"loss": tf.reduce_mean(residual ** 2)}

    def update_metrics(self, batch, outputs):
        pass


@pytest.mark.parametrize("step_loop", RESOLVED_STEP_LOOPS)
@pytest.mark.parametrize("jit_compile", [False, True])
def test_step_driver_runs_the_clipped_sgd_update_for_each_batch(jit_compile, step_loop):
    model = Quadratic()
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5))
    rng = np.random.RandomState(0)
    batches = [{"x": rng.normal(size=(4, 2)).astype("float32"), "y": rng.normal(size=4).astype("float32")}
               for _ in range(3)]
    strategy = tf.distribute.get_strategy()
    run = loop.make_step_driver(strategy, lambda b: model_step.train_step(model, b, clip_norm=0.3, jit_compile=jit_compile),
                                ["loss", "grad_norm"], step_loop=step_loop)
    outputs = run(iter(tf.data.Dataset.from_tensor_slices(
        {k: np.stack([b[k] for b in batches]) for k in batches[0]})), tf.constant(3))
    w = np.zeros(2)
    for b in batches:  # the same rule in NumPy: gradient, global-norm clip at 0.3, SGD
        grad = 2 * b["x"].T @ (b["x"] @ w - b["y"]) / 4
        norm = np.linalg.norm(grad)
        w -= 0.5 * grad * min(1.0, 0.3 / norm)
    np.testing.assert_allclose(model.w.numpy(), w, rtol=1e-5)
    np.testing.assert_allclose(float(outputs["grad_norm"]), norm, rtol=1e-5)


def test_next_stop_honours_every_interval_and_the_end():
    assert loop.next_stop(0, 1000, 100, 25, 40) == 25
    assert loop.next_stop(25, 1000, 100, 25, 40) == 40
    assert loop.next_stop(990, 1000, 100, 25, 40) == 1000
    assert loop.next_stop(10, 1000, 100, extra_stops=(5, 12)) == 12


def test_scalar_logger_writes_tensorboard_and_jsonl(tmp_path):
    logger = loop.ScalarLogger(str(tmp_path), "train", "log.jsonl")
    logger.write(3, {"loss": 1.5})
    logger.write(4, {"accuracy": 0.5}, prefix="dev", nested=True)
    rows = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert rows == [{"step": 3, "loss": 1.5}, {"step": 4, "dev": {"accuracy": 0.5}}]
    assert os.listdir(tmp_path / "train")


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_on_a_terminal_and_log_lines_otherwise(monkeypatch, capsys):
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stdout", terminal)  # Keras' Progbar writes to sys.stdout
    bar = loop.ProgressReporter(100, 0, batch_size=8, keys=("loss",), stream=terminal)
    bar.update(50, {"loss": 2.5, "ignored": 1.0}, log=True)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", terminal.getvalue())  # without ANSI styling
    assert "50/100" in shown and "loss: 2.5" in shown and "examples/s" in shown and "/step" in shown

    lines = []
    monkeypatch.setattr(logging, "info", lambda fmt, *args: lines.append(fmt % args))
    plain = loop.ProgressReporter(100, 0, batch_size=8, keys=("loss",), stream=io.StringIO())
    plain.update(10, {"loss": 2.5}, log=False)
    plain.update(20, {"loss": 2.0}, log=True)
    assert len(lines) == 1 and re.fullmatch(r"step 20/100  ETA [0-9.]+ (s|min)  loss=2", lines[0]), lines


@pytest.mark.parametrize("step_loop", RESOLVED_STEP_LOOPS)
def test_step_driver_stops_when_asked(step_loop):
    model = Quadratic()
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1))
    stop = tf.Variable(False)

    def step(batch):
        outputs = model_step.train_step(model, batch, clip_norm=10.0)
        stop.assign(model.optimizer.iterations >= 2)  # as a signal handler would, from outside
        return outputs

    data = tf.data.Dataset.from_tensors({"x": np.ones((4, 2), "float32"), "y": np.ones(4, "float32")}).repeat()
    run = loop.make_step_driver(tf.distribute.get_strategy(), step, ["loss"], stop_requested=stop, step_loop=step_loop)
    run(iter(data), tf.constant(10))
    assert int(model.optimizer.iterations.numpy()) == 2


def test_clip_by_global_norm_matches_tensorflow_and_propagates_nan():
    import numpy as np

    from electra_tf.model.step import clip_by_global_norm

    rng = np.random.RandomState(0)
    grads = [tf.constant(rng.normal(size=s).astype("float32")) for s in ((3, 4), (5,), (2, 2))]
    for clip_norm in (0.5, 100.0):  # clipping, then not
        ours, norm = clip_by_global_norm(grads, clip_norm)
        theirs, their_norm = tf.clip_by_global_norm(grads, clip_norm)
        assert float(norm) == float(their_norm)
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    clipped, norm = clip_by_global_norm([grads[0], tf.constant([np.inf])], 1.0)
    assert not np.isfinite(float(norm)) and np.isnan(clipped[0].numpy()).all()


def test_step_driver_takes_resolved_options_only():
    with pytest.raises(ValueError, match="resolved graph_optimizer"):
        loop.make_step_driver(tf.distribute.get_strategy(), lambda b: {}, ["loss"], graph_optimizer="auto")
    with pytest.raises(ValueError, match="resolved step_loop"):
        loop.make_step_driver(tf.distribute.get_strategy(), lambda b: {}, ["loss"], step_loop="auto")


def _meta_optimizer_disabled() -> bool:
    return bool(tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False))


def test_grappler_context_sets_the_option_and_restores_it_even_on_error():
    assert not _meta_optimizer_disabled()
    with loop.grappler(False):
        assert _meta_optimizer_disabled()
        with loop.grappler(True):
            assert not _meta_optimizer_disabled()
        assert _meta_optimizer_disabled()
    assert not _meta_optimizer_disabled()
    try:
        with loop.grappler(False):
            raise KeyError("boom")
    except KeyError:
        pass
    assert not _meta_optimizer_disabled()


def test_step_driver_runs_its_steps_under_the_chosen_graph_optimizer_with_the_same_results():
    """The option is in force while the loop executes (read back from inside the step), is
    restored afterwards, and grappler on or off gives the same weights."""
    rng = np.random.RandomState(1)
    data = {"x": rng.normal(size=(3, 4, 2)).astype("float32"), "y": rng.normal(size=(3, 4)).astype("float32")}
    weights, seen = {}, {}
    for mode in ("on", "off"):
        model = Quadratic()
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.1))
        seen[mode] = []

        def step(batch, model=model, log=seen[mode]):
            outputs = model_step.train_step(model, batch, clip_norm=1.0)
            with tf.control_dependencies([outputs["loss"]]):
                flag = tf.py_function(lambda: log.append(_meta_optimizer_disabled()) or 0.0, [], tf.float32)
            return {**outputs, "loss": outputs["loss"] + 0.0 * tf.ensure_shape(flag, [])}

        run = loop.make_step_driver(tf.distribute.get_strategy(), step, ["loss"], graph_optimizer=mode)
        assert run.grappler is (mode == "on")
        run(iter(tf.data.Dataset.from_tensor_slices(data)), tf.constant(3))
        assert not _meta_optimizer_disabled()
        weights[mode] = model.w.numpy()
    assert seen == {"on": [False] * 3, "off": [True] * 3}
    np.testing.assert_allclose(weights["off"], weights["on"], rtol=1e-6)


class AlwaysNaN(Quadratic):
    def compute_losses(self, batch, training=True):
        return {"loss": super().compute_losses(batch)["loss"] * np.nan}


def _skipping_run(optimizer, tolerate, step_loop="graph"):
    model = AlwaysNaN()
    model.compile(optimizer=optimizer)
    optimizer.build(model.trainable_variables)  # as the runs do: the loss scale is a variable from here
    data = tf.data.Dataset.from_tensors({"x": np.ones((4, 2), "float32"), "y": np.ones(4, "float32")}).repeat()
    run = loop.make_step_driver(tf.distribute.get_strategy(), lambda b: model_step.train_step(model, b, clip_norm=1.0),
                                ["loss"], stop_on_nonfinite=not tolerate, step_loop=step_loop)
    return model, iter(data), run


@pytest.mark.parametrize("step_loop", RESOLVED_STEP_LOOPS)
def test_fp16_steps_that_never_become_finite_stop_the_run_after_the_limit(step_loop):
    """Keras' loss-scale optimizer halves its scale forever on a NaN loss and never advances `iterations`:
    the loop must still end, with the one-line error, after `LIMIT` steps skipped in a row."""
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=0.1))
    model, iterator, run = _skipping_run(optimizer, tolerate=True, step_loop=step_loop)
    skipped = loop.SkippedSteps(tolerate=True, limit=8)
    calls = 0
    with pytest.raises(loop.NonFiniteError) as error:
        for calls in range(1, 100):
            outputs = run(iterator, tf.constant(3))
            assert int(outputs["nonfinite_steps"]) == 3  # counted, not hidden
            skipped.observe(0, loop.current_step(optimizer), 3, int(outputs["nonfinite_steps"]), optimizer,
                            lambda: "ckpt-0")
    assert calls == 3 and int(optimizer.iterations.numpy()) == 0  # 9 ≥ 8 skipped in a row
    message = str(error.value)
    assert "\n" not in message and "9 steps in a row were skipped" in message and "fp16 loss scale down to" in message
    assert "Last good checkpoint: ckpt-0" in message


@pytest.mark.parametrize("step_loop", RESOLVED_STEP_LOOPS)
def test_fp32_non_finite_step_stops_at_once_without_the_skip_flag(step_loop):
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    model, iterator, run = _skipping_run(optimizer, tolerate=False, step_loop=step_loop)
    outputs = run(iterator, tf.constant(5))
    assert int(outputs["nonfinite_steps"]) == 1  # the driver stopped at the first
    with pytest.raises(loop.NonFiniteError, match="pass --skip_nonfinite_steps"):
        loop.SkippedSteps(tolerate=False).observe(0, 0, 5, 1, optimizer, lambda: None)


def test_a_step_applied_ends_a_run_of_skipped_steps():
    skipped = loop.SkippedSteps(tolerate=True, limit=4)
    optimizer = keras.optimizers.SGD()
    skipped.observe(0, 0, 3, 3, optimizer, lambda: None)
    skipped.observe(0, 1, 3, 2, optimizer, lambda: None)  # one applied: the run of skips ends
    skipped.observe(1, 1, 3, 3, optimizer, lambda: None)
    assert skipped.total == 8 and skipped.consecutive == 3


class Affine(keras.Model):
    """loss = mean((x·kernel + bias − y)²), NaN where `y` is: a kernel that decays and a bias that does not."""

    def __init__(self):
        super().__init__(name="affine")  # the learning-rate multiplier's path: the same in every run
        self.kernel = self.add_weight(shape=(2,), initializer="ones", name="kernel")
        self.bias = self.add_weight(shape=(), initializer="zeros", name="bias")

    def compute_losses(self, batch, training=True):
        residual = tf.linalg.matvec(batch["x"], self.kernel) + self.bias - batch["y"]
        return {"loss": tf.reduce_mean(residual ** 2)}

    def update_metrics(self, batch, outputs):
        pass


class BranchingAdamW(ElectraAdamW):
    """The fused update skipped by `train_step`'s `tf.cond` around `apply` (what every step did before `apply_if`)."""

    def can_apply_if(self, variables):
        return False


def _fused_adamw_run(optimizer_class, strategy, batches):
    """Per step (one batch each, fused `ElectraAdamW` with a multiplier and bias correction): the weights, slots,
    step counter and `nonfinite` output, and the traced step's op types."""
    with strategy.scope():
        model = Affine()
        optimizer = optimizer_class(learning_rate=WarmupLinearDecay(0.1, 10, 2), weight_decay=0.5,
                                    bias_correction=True, lr_multipliers={"affine/kernel": 0.5})
        model.compile(optimizer=optimizer)
        optimizer.build(model.trainable_variables)
    assert model.kernel.path in optimizer.lr_multipliers

    @tf.function
    def step(batch):
        outputs = strategy.run(lambda b: model_step.train_step(model, b, clip_norm=0.5), args=(batch,))
        return strategy.experimental_local_results(outputs["nonfinite"])[0]

    states = []
    for batch in batches:
        nonfinite = step(strategy.experimental_distribute_values_from_function(lambda _: batch))
        states.append([float(nonfinite), int(optimizer.iterations.numpy())]
                      + [v.numpy().copy() for v in model.trainable_variables + optimizer.variables])
    graph = step.get_concrete_function(strategy.experimental_distribute_values_from_function(
        lambda _: batches[0])).graph
    op_types = {op.type for f in [graph, *graph._functions.values()] for op in getattr(f, "get_operations",
                                                                                          lambda: [])()}
    return states, {node.op for function in graph.as_graph_def().library.function for node in function.node_def} \
        | op_types


@pytest.mark.parametrize("replicas", [1, 2])
def test_fused_adamw_skips_a_non_finite_step_without_a_branch_and_changes_no_bit(replicas):
    """`apply_if` (no `tf.cond`) against the `tf.cond` around `apply`: an applied step, a NaN one, an infinite one
    and two applied ones again give the same bits of every weight, slot and the step counter, one device or two
    replicas; the skipped steps change nothing and are reported; the traced step holds no `If`."""
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)]) if replicas > 1 \
        else tf.distribute.get_strategy()
    rng = np.random.RandomState(0)
    batches = [{"x": rng.normal(size=(4, 2)).astype("float32"), "y": rng.normal(size=4).astype("float32")}
               for _ in range(5)]
    batches[1]["y"][0] = np.nan
    batches[2]["x"][1, 0] = np.inf
    (without_branch, ops), (with_branch, branching_ops) = (
        _fused_adamw_run(cls, strategy, batches) for cls in (ElectraAdamW, BranchingAdamW))
    assert [state[:2] for state in without_branch] == [[0.0, 1], [1.0, 1], [1.0, 1], [0.0, 2], [0.0, 3]]
    for ours, theirs in zip(without_branch, with_branch):
        assert ours[:2] == theirs[:2]
        for a, b in zip(ours[2:], theirs[2:]):
            np.testing.assert_array_equal(a, b)
    for before, after in ((without_branch[0], without_branch[1]), (without_branch[0], without_branch[2])):
        for a, b in zip(before[2:], after[2:]):
            np.testing.assert_array_equal(a, b)
    assert not ops & {"If", "StatelessIf"} and "ResourceApplyAdam" in ops
    assert branching_ops & {"If", "StatelessIf"}  # the comparison is with the branching step
