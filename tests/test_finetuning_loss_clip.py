"""Fine-tuning loss and clipping as the official code: per-example losses summed over the batch,
gradient clipped to global norm 1.0, then the official AdamW step (no bias correction).

The reference update is computed independently: the gradient of the summed cross-entropy (written
out here from the logits) on a separate copy of the model, then clip and AdamW in NumPy. The
moments' weights are `1 − β` as the optimizer forms them: the official ops round `1 − β` from
double, TF's fused Adam kernel (our default) subtracts in float32 (1 − float32(0.999) =
0.00099998713). Tiny gradients in the token embeddings amplify that 1.3e-5 relative difference in
step 1 to ~6e-5 in the weights after step 2, above the tolerance, so each path is checked against
its own rounding.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import get_config
from electra_tf.finetuning.heads import ClassificationHead
from electra_tf.finetuning.model import FinetuningModel
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.training.optimization import ElectraAdamW

LR, WD, B1, B2, EPS = 1e-2, 0.01, 0.9, 0.999, 1e-6
NO_DECAY = ("bias", "gamma", "beta")  # the official exclude_from_weight_decay: LayerNorm and biases
BATCH, SEQ, LABELS = 8, 12, 3
TOLERANCE = 1e-5  # float32 against float64 NumPy; the clipped and unclipped rules differ by ~0.07
FUSED = True  # the optimizer's default


def _model(loss_reduction="sum", clip_norm=1.0, fused=FUSED):
    config = get_config("tiny", vocab_size=30, num_layers=1, hidden_size=16, embedding_size=8, num_heads=2,
                        intermediate_size=32, max_position_embeddings=32, max_seq_length=32, dropout_rate=0.0)
    keras.utils.set_random_seed(0)
    encoder = ElectraEncoder.from_config_object(config)
    encoder.build()
    model = FinetuningModel(encoder, ClassificationHead(LABELS, dropout_rate=0.0), clip_norm=clip_norm,
                            loss_reduction=loss_reduction).build_all(SEQ)
    optimizer = ElectraAdamW(learning_rate=LR, weight_decay=WD, beta_1=B1, beta_2=B2, epsilon=EPS, fused=fused)
    model.compile(optimizer=optimizer)
    optimizer.build(model.trainable_variables)
    return model


def _batch(seed):
    rng = np.random.RandomState(seed)
    lengths = rng.randint(4, SEQ + 1, size=BATCH)
    mask = (np.arange(SEQ)[None] < lengths[:, None]).astype("int32")
    return {"input_ids": (rng.randint(5, 30, size=(BATCH, SEQ)) * mask).astype("int32"), "input_mask": mask,
            "segment_ids": np.zeros((BATCH, SEQ), "int32"), "label_ids": rng.randint(0, LABELS, BATCH).astype("int32")}


def _summed_gradient(reference, weights, batch):
    """Gradient of Σ_examples −log softmax(logits)[label] at `weights`, with per-example losses."""
    reference.set_weights(weights)
    variables = reference.trainable_variables
    with tf.GradientTape() as tape:
        logits = reference(batch)["logits"]
        per_example = -tf.gather(tf.nn.log_softmax(logits), batch["label_ids"], batch_dims=1)
        total = tf.reduce_sum(per_example)
    return [tf.convert_to_tensor(g).numpy().astype(np.float64) for g in tape.gradient(total, variables)], \
        per_example.numpy()


def _one_minus(beta, fused):
    return float(np.float32(1) - np.float32(beta)) if fused else 1 - beta


def _official_steps(batches, clip=True, divide_by_batch=False, clip_norm=1.0, fused=FUSED):
    """NumPy: (weights after each step, pre-clip gradient norms) of the official rule."""
    reference = _model()
    c1, c2 = _one_minus(B1, fused), _one_minus(B2, fused)
    weights = [w.astype(np.float64) for w in reference.get_weights()]
    trainable = {id(v): i for i, v in enumerate(reference.weights)}
    index = [trainable[id(v)] for v in reference.trainable_variables]
    decays = [v.name not in NO_DECAY for v in reference.trainable_variables]
    m = [np.zeros_like(weights[i]) for i in index]
    v = [np.zeros_like(weights[i]) for i in index]
    norms = []
    for batch in batches:
        grads, _ = _summed_gradient(reference, [w.astype(np.float32) for w in weights], batch)
        if divide_by_batch:
            grads = [g / BATCH for g in grads]
        norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
        norms.append(norm)
        if clip:
            grads = [g * clip_norm / max(norm, clip_norm) for g in grads]
        for k, (i, g) in enumerate(zip(index, grads)):
            m[k] = m[k] + (g - m[k]) * c1
            v[k] = v[k] + (g ** 2 - v[k]) * c2
            weights[i] = weights[i] - LR * (m[k] / (np.sqrt(v[k]) + EPS) + (WD * weights[i] if decays[k] else 0))
    return weights, norms


def _max_difference(a, b):
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


@pytest.mark.parametrize("fused", [True, False])
def test_sum_then_clip_matches_the_official_rule(fused):
    batches = [_batch(1), _batch(2)]
    model = _model("sum", fused=fused)
    reported = [model.train_step(batch) for batch in batches]
    clipped, norms = _official_steps(batches, clip=True, fused=fused)
    unclipped, _ = _official_steps(batches, clip=False, fused=fused)
    ours = model.get_weights()

    # Clipping is active: the summed gradient's norm is well above 1, and the weights follow the clipped rule.
    assert min(norms) > 2.0
    np.testing.assert_allclose([float(r["grad_norm"]) for r in reported], norms, rtol=1e-4)
    assert _max_difference(ours, clipped) < TOLERANCE
    assert _max_difference(ours, unclipped) > 100 * TOLERANCE  # fails if the clip is removed


def test_mean_reduction_divides_before_the_clip():
    """With the clip above the mean gradient's norm but below the summed one's, "mean" is not
    clipped and "sum" is, so the reductions give different updates (the issue: "mean" rarely clips)."""
    batches = [_batch(1), _batch(2)]
    expected, mean_norms = _official_steps(batches, clip=False, divide_by_batch=True)
    clip_norm = 2.0 * max(mean_norms)
    model = _model("mean", clip_norm=clip_norm)
    reported = [model.train_step(batch) for batch in batches]
    np.testing.assert_allclose([float(r["grad_norm"]) for r in reported], mean_norms, rtol=1e-4)
    assert _max_difference(model.get_weights(), expected) < TOLERANCE
    summed, summed_norms = _official_steps(batches, clip=True, clip_norm=clip_norm)
    assert min(summed_norms) > clip_norm
    assert _max_difference(model.get_weights(), summed) > 100 * TOLERANCE


def test_logged_loss_is_the_per_example_mean():
    batch = _batch(3)
    model = _model("sum")
    _, per_example = _summed_gradient(_model(), model.get_weights(), batch)
    out = model.train_step(batch)
    assert float(out["loss"]) == pytest.approx(per_example.mean(), rel=1e-5)


def test_two_replicas_sum_over_the_global_batch():
    """Each replica sums its half; the all-reduced gradient is the global sum, clipped once."""
    if len(tf.config.list_logical_devices("CPU")) < 2:
        pytest.skip("needs the two logical CPUs set up by conftest.py")
    from electra_tf.training import distribution
    from test_finetuning_distributed import two_cpu_strategy

    strategy = two_cpu_strategy()
    with strategy.scope():
        model = _model("sum")
    model.set_weights(_model("sum").get_weights())  # the reference's initial weights, whatever the scope
    batches = [_batch(1), _batch(2)]

    @tf.function
    def step(batch):
        outputs = strategy.run(model.train_step, args=(distribution.split_for_replicas(strategy, batch),))
        return {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for k, v in outputs.items()}

    reported = [step(batch) for batch in batches]
    expected, norms = _official_steps(batches, clip=True)
    np.testing.assert_allclose([float(r["grad_norm"]) for r in reported], norms, rtol=1e-4)
    assert _max_difference(model.get_weights(), expected) < TOLERANCE


def test_loss_reduction_round_trips_and_is_checked():
    model = _model("mean")
    clone = FinetuningModel.from_config(model.get_config())
    assert clone.loss_reduction == "mean" and clone.clip_norm == 1.0
    with pytest.raises(ValueError, match="loss_reduction"):
        FinetuningModel(model.encoder, model.head, loss_reduction="avg")
