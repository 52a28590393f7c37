"""`ElectraPretrainer`: the generic pre-training model over injected networks and an objective.

The networks (`networks.build_networks`: the generator, the discriminator and their heads, as the objective
needs them) and the objective (`model/objectives/`: `rtd`, `mlm`, the paper's ablations, `electric`, or one
registered by name) are given. The objective owns the forward composition (masking → generator → sampling →
discriminator for rtd), the losses, the metrics, the loss normalisers, the step outputs, the FLOP count and the
encoder fine-tuning keeps; this shell owns what every objective shares: the masking seeds and dropout streams
keyed by the example, the masking itself (`mask`), the step (`replica_step`, `train_step`, `step_context`) and
the plumbing of the running metrics. It satisfies the step protocol of `model/step.py` (`step.StepModel`).

The official generator options (`ElectraConfig`): `untied_generator=False` makes
the discriminator's encoder the generator (its own MLM head only);
`untied_generator_embeddings` gives the generator embeddings of its own;
`uniform_generator` replaces it by uniform draws over the vocabulary (no
generator weights; the generator loss is the constant log V of the official
code's all-zero logits); `disallow_correct` never samples the original token.
`mask_whole_words` masks whole words (`whole_words`: the tokenizer's
`continuation_table()`, `masking.read_continuation_table(vocab_file)`).

Losses are global means: each replica divides its sums by the token counts
all-reduced over replicas, and gradients are summed over replicas before the
global-norm clip, so N replicas compute what one device computes on the same
global batch. `replica_step` returns these *replica partials* (sum them across
replicas to get the global value); running means live in `self.metrics`, and `train_step` (Keras' `fit`)
returns their global values.

Example:

>>> import numpy as np
>>> from electra_tf.config import get_config
>>> from electra_tf.training.optimization import create_optimizer
>>> from electra_tf.model.networks import pretrainer_from_config
>>> config = get_config("tiny", {"discriminator.num_layers": 1, "generator.num_layers": 1},
...                     vocab_size=64, max_seq_length=16)
>>> model = pretrainer_from_config(config, special_token_ids={"pad": 0, "cls": 2, "sep": 3, "mask": 4})
>>> model.compile(optimizer=create_optimizer(config))
>>> ids = np.random.RandomState(0).randint(5, 64, size=(4, 16)).astype("int32")
>>> batch = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
>>> sorted(model.replica_step(batch))
['disc_loss', 'gen_loss', 'grad_norm', 'loss', 'nonfinite']
"""

import keras
import numpy as np
import tensorflow as tf

from electra_tf import objective_registry
from electra_tf.config import ElectraConfig
from electra_tf.model import example_dropout, masking, step
from electra_tf.model.execution import layer_execution
from electra_tf.ops.replicas import all_reduce_sum, replica_context_info
from electra_tf.options import ExecutionOptions

REQUIRED_SPECIAL_TOKENS = ("pad", "cls", "sep", "mask")


class ElectraPretrainer(keras.Model):
    """The injected networks trained by the injected objective (`model/objectives/`).

    The networks are given (`networks.build_networks(config, execution)` makes them from the
    config; `networks.pretrainer_from_config` does both): `generator` (an encoder, Electric's two
    towers, or None), `discriminator` (None for "mlm"), and the heads; their attribute names are
    the checkpoint's keys. `objective` (default: `objective_registry.get(config.objective)`) computes
    the losses and metrics. `execution` (resolved `ExecutionOptions`; default: the portable ones) says
    how the MLM loss, the sampling and the step are computed.
    """

    def __init__(self, config: ElectraConfig, generator, discriminator, generator_head, discriminator_head=None,
                 discriminator_mlm_head=None, special_token_ids=None, seed=0,
                 execution: ExecutionOptions | None = None, whole_words=None, objective=None, **kwargs):
        super().__init__(name=kwargs.pop("name", "electra_pretrainer"), **kwargs)
        self.config = config
        self.objective = objective or objective_registry.get(config.objective)
        self.execution = layer_execution(execution)
        # Ids come from the data manifest / vocab, never assumed (a BERT-id default would silently
        # mask the wrong tokens under another vocabulary); checked when masking needs them.
        self.special_token_ids = dict(special_token_ids or {})
        self.seed = int(seed)
        # The vocabulary's "is a ## continuation" table (from the data manifest's vocab file).
        self.whole_words = None if whole_words is None else np.asarray(whole_words, bool)
        self.max_predictions = masking.max_predictions_per_seq(config.mask_prob, config.max_seq_length)
        # Attribute names are the checkpoint's keys: keep them stable.
        self.discriminator, self.generator = discriminator, generator
        self.generator_head = generator_head
        self.discriminator_head = discriminator_head
        self.discriminator_mlm_head = discriminator_mlm_head
        self.tracked = self.objective.create_metrics()
        missing = {"loss", "grad_norm"} - set(self.tracked)
        if missing:
            raise ValueError(f"{type(self.objective).__name__}.create_metrics() lacks {sorted(missing)}: the step "
                             "logs the loss and the gradient norm of every objective")

    @property
    def step_output_names(self) -> list[str]:
        """The loss partials `train_step` returns for this objective."""
        return list(self.objective.step_output_names)

    def _required_special_ids(self) -> dict:
        missing = [name for name in REQUIRED_SPECIAL_TOKENS if name not in self.special_token_ids]
        if missing:
            raise ValueError(f"ElectraPretrainer needs special_token_ids for {missing} (from the data "
                             f"manifest or the vocab); got {self.special_token_ids}")
        return self.special_token_ids

    @property
    def encoder_for_finetuning(self):
        """The encoder kept after pre-training (the objective's: the discriminator, the MLM encoder, or under GDES
        a plain copy of the discriminator with the embedding deltas folded in)."""
        return self.objective.encoder_for_finetuning(self)

    @property
    def finetuning_role(self) -> str:
        return self.objective.finetuning_role(self.config)

    @property
    def metrics(self):
        return list(self.tracked.values())

    def build_all(self, seq_length=None):
        """Creates every variable by running the model once on a dummy batch."""
        seq_length = seq_length or self.config.max_seq_length
        ids = tf.fill([1, seq_length], tf.constant(self._required_special_ids()["mask"] + 1, tf.int32))
        batch = {"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)}
        table = self.whole_words
        if self.config.mask_whole_words and table is None:
            # No variable depends on the table: an export or a conversion needs no vocabulary.
            self.whole_words = np.zeros([self.config.vocab_size], bool)
        try:
            self.compute_losses(batch, training=False, seeds=masking.example_seeds(self.seed, 0, tf.range(1)))
        finally:
            self.whole_words = table
        self.built = True
        return self

    def call(self, batch, training=False):
        """Unmasked forward pass: the main model's logits (the objective's: `[B, S]` for RTD, `[B, S, V]` for MLM)."""
        return self.objective.call(self, batch, training=training)

    @staticmethod
    def encoder_inputs(token_ids, batch):
        """An encoder's inputs: `token_ids` in `batch`'s segments and padding."""
        return {"token_ids": token_ids, "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]}

    def _example_seeds(self, batch_size):
        return masking.example_seeds(self.seed, self._step(), example_dropout.global_indices(batch_size))

    def _dropout_streams(self, batch_size):
        return example_dropout.example_streams(self.seed, self._step(), example_dropout.global_indices(batch_size))

    def _step(self):
        optimizer = getattr(self, "optimizer", None)  # none before `compile` (e.g. `build_all`)
        return optimizer.iterations if optimizer else 0

    def special_id_tuple(self):
        """(pad, cls, sep, mask): the ids masking never picks."""
        special = self._required_special_ids()
        return special["pad"], special["cls"], special["sep"], special["mask"]

    def step_context(self, batch) -> step.StepContext:
        """What micro-batches of `batch`, or a compiled step, need to compute exactly the whole batch's
        step (`model.step`): `per_example`, sliced with the batch, the masking seeds of each
        example's global index, and its dropout stream; `kwargs`, the objective's loss normalisers of the
        whole batch, all-reduced (the step's only collective before its gradients)."""
        batch_size = tf.shape(batch["input_ids"])[0]
        seeds = self._example_seeds(batch_size)
        return {"per_example": {"seeds": seeds, "dropout_streams": self._dropout_streams(batch_size)},
                "kwargs": {"normalizers": self.objective.global_normalizers(self, batch, seeds)}}

    def global_counts(self, batch, seeds) -> dict:
        """Masked positions, real tokens and maskable candidates of `batch`, all-reduced over replicas."""
        input_ids, input_mask = tf.cast(batch["input_ids"], tf.int32), tf.cast(batch["input_mask"], tf.int32)
        candidates = masking.candidate_positions(input_ids, input_mask, self.special_id_tuple())
        if self.config.mask_whole_words:
            # How many tokens whole words fill depends on the draw: mask the whole batch once.
            masked = tf.reduce_sum(self.mask(input_ids, input_mask, seeds).weights, axis=-1)
        else:
            masked = masking.num_predictions(input_mask, candidates, self.config.mask_prob, self.max_predictions)
        counts = all_reduce_sum([tf.reduce_sum(tf.cast(masked, tf.float32)),
                                 tf.reduce_sum(tf.cast(input_mask, tf.float32)),
                                 tf.reduce_sum(tf.cast(candidates, tf.float32))])
        return {"num_masked": counts[0], "num_tokens": counts[1], "num_candidates": counts[2]}

    def _whole_words_table(self):
        if not self.config.mask_whole_words:
            return None
        if self.whole_words is None:
            raise ValueError("mask_whole_words=True needs the vocabulary's continuation table: pass "
                             "whole_words=masking.read_continuation_table(<the data manifest's vocab_file>)")
        return self.whole_words

    def mask(self, input_ids, input_mask, seeds) -> masking.MaskedBatch:
        """The config's dynamic masking of `input_ids` with the examples' `seeds`."""
        config = self.config
        return masking.mask_inputs(
            input_ids, input_mask, seeds, mask_id=self._required_special_ids()["mask"],
            special_ids=self.special_id_tuple(), mask_prob=config.mask_prob, max_predictions=self.max_predictions,
            mask_token_prob=config.mask_token_prob, whole_words=self._whole_words_table())

    def compute_losses(self, batch, training=True, seeds=None, normalizers=None, dropout_streams=None):
        """The objective's loss partials and metric inputs.

        Loss partials are sums divided by global counts: this batch's, all-reduced over
        replicas, or `normalizers` (a whole batch's, when this is one of its micro-batches).
        Dropout is keyed by the example (`example_dropout`): `dropout_streams`, or this batch's.
        """
        if dropout_streams is None:
            dropout_streams = self._dropout_streams(tf.shape(batch["input_ids"])[0])
        with example_dropout.keyed_by(dropout_streams):
            batch = {name: tf.cast(batch[name], tf.int32) for name in ("input_ids", "input_mask", "segment_ids")}
            if seeds is None:
                seeds = self._example_seeds(tf.shape(batch["input_ids"])[0])
            return self.objective.compute_losses(self, batch, seeds, normalizers, training)

    def train_step(self, batch):
        """Keras' `train_step` (what `fit` runs): one step, and the global values of the running metrics.

        Under a strategy each replica returns the same values, the metrics' states summed over the
        replicas (`fit` reduces replica outputs by their mean, or takes the first on TPUs): the values
        `run_pretraining.py` logs, AUC and accuracies included.
        """
        self.replica_step(batch)
        return self.global_metric_results()

    def global_metric_results(self) -> dict:
        """The running metrics over every replica, from inside a replica (one all-reduce of their states)."""
        states = all_reduce_sum([[tf.convert_to_tensor(v) for v in metric.variables] for metric in self.metrics])
        return {name: metric.stateless_result(state) for (name, metric), state in zip(self.tracked.items(), states)}

    def replica_step(self, batch):
        """One step; returns this replica's partials of the global values (the run's step driver sums them)."""
        out = step.train_step(self, batch, self.config.clip_norm, self.execution.gradient_accumulation_steps,
                              self.execution.jit_compile)
        _, num_replicas = replica_context_info()
        results = {name: out[name] for name in self.step_output_names}
        # The grad norm is the same on every replica; make it a partial like the losses.
        results["grad_norm"] = out["grad_norm"] / num_replicas
        results["nonfinite"] = out["nonfinite"]
        # Summed over replicas: one global value per step (see update_metrics).
        self.tracked["grad_norm"].update_state(out["grad_norm"], sample_weight=1.0 / num_replicas)
        return results

    def update_metrics(self, batch, out):
        """Running metrics (the objective's); `out` is one replica's (micro-)batch outputs."""
        _, num_replicas = replica_context_info()
        parts = num_replicas * self.execution.gradient_accumulation_steps  # partials that make one step's value

        def add_partial(name, partial):
            # Summed over replicas and micro-batches: total += partial, count += 1 per step.
            self.tracked[name].update_state(partial * parts, sample_weight=1.0 / parts)

        self.objective.update_metrics(self, batch, out, add_partial)

    def metric_results(self) -> dict:
        return {name: metric.result() for name, metric in self.tracked.items()}
