"""`ElectraPretrainer`: generator + discriminator trained jointly by replaced-token detection.

`train_step` runs, per batch and in graph: dynamic masking → generator MLM at
the masked positions → sampling from its softmax (no gradient) → discriminator on
the corrupted input → `gen_weight × MLM loss + disc_weight × sigmoid CE`.
With `objective="mlm"` only the MLM part runs (the BERT baseline). The
paper's ablations (section 3.2, `config.OBJECTIVES`) change only what the main
model's loss covers: `rtd_masked_only` (sigmoid CE at the masked positions),
`replace_mlm` (MLM on the corrupted input at the masked positions) and
`all_tokens_mlm` (MLM over every real token with a copy gate).

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

from electra_tf.config import ElectraConfig
from electra_tf.model import electric, example_dropout, masking, step
from electra_tf.model.embeddings import GdesEmbeddings
from electra_tf.model.encoder import ElectraEncoder
from electra_tf.model.execution import layer_execution
from electra_tf.model.heads import gather_positions, vocabulary_log_probs
from electra_tf.ops import xla_cpu
from electra_tf.ops.replicas import all_reduce_sum, replica_context_info
from electra_tf.options import ExecutionOptions

REQUIRED_SPECIAL_TOKENS = ("pad", "cls", "sep", "mask")


class ElectraPretrainer(keras.Model):
    """Generator and discriminator with shared embeddings and the ELECTRA objective.

    The networks are given (`networks.build_networks(config, execution)` makes them from the
    config; `networks.pretrainer_from_config` does both): `generator` (an encoder, Electric's two
    towers, or None for the uniform generator), `discriminator` (None for "mlm"), and the heads.
    The config gives the objective and its weights. `execution` (resolved `ExecutionOptions`;
    default: the portable ones) says how the MLM loss, the sampling and the step are computed.
    """

    def __init__(self, config: ElectraConfig, generator, discriminator, generator_head, discriminator_head=None,
                 discriminator_mlm_head=None, special_token_ids=None, seed=0,
                 execution: ExecutionOptions | None = None, whole_words=None, **kwargs):
        super().__init__(name=kwargs.pop("name", "electra_pretrainer"), **kwargs)
        self.config = config
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
        self._create_metrics()

    @property
    def step_output_names(self) -> list[str]:
        """The loss partials `train_step` returns for this objective."""
        names = ["loss", "gen_loss", "grad_norm"]
        if self.discriminator_mlm_head is not None:
            return names + ["main_loss"]
        return names + (["disc_loss"] if self.discriminator is not None else [])

    def _required_special_ids(self) -> dict:
        missing = [name for name in REQUIRED_SPECIAL_TOKENS if name not in self.special_token_ids]
        if missing:
            raise ValueError(f"ElectraPretrainer needs special_token_ids for {missing} (from the data "
                             f"manifest or the vocab); got {self.special_token_ids}")
        return self.special_token_ids

    @property
    def encoder_for_finetuning(self) -> ElectraEncoder:
        """The encoder kept after pre-training: the discriminator (or the MLM encoder).

        Under GDES it is a plain copy of the discriminator with the embedding deltas folded in.
        """
        if self.discriminator is None:
            return self.generator
        if isinstance(self.discriminator.embeddings, GdesEmbeddings):
            return self._folded_discriminator()
        return self.discriminator

    def _folded_discriminator(self) -> ElectraEncoder:
        source = self.discriminator
        encoder = ElectraEncoder.from_config_object(self.config, "discriminator",
                                                    embeddings=source.embeddings.fold(), execution=self.execution)
        encoder.build()
        pairs = list(zip(encoder.transformer_layers, source.transformer_layers))
        if source.embeddings_projection is not None:
            pairs.append((encoder.embeddings_projection, source.embeddings_projection))
        for target, layer in pairs:
            target.set_weights(layer.get_weights())
        return encoder

    @property
    def finetuning_role(self) -> str:
        return "discriminator" if self.discriminator is not None else self.config.mlm_encoder

    def _create_metrics(self):
        mean = keras.metrics.Mean
        tracked = {
            "loss": mean(name="loss"),
            "gen_loss": mean(name="gen_loss"),
            "gen_accuracy": mean(name="gen_accuracy"),
            "grad_norm": mean(name="grad_norm"),
        }
        if self.discriminator_mlm_head is not None:
            tracked.update(main_loss=mean(name="main_loss"), main_accuracy=mean(name="main_accuracy"),
                           replaced_fraction=mean(name="replaced_fraction"))
        elif self.discriminator is not None:
            tracked.update(
                disc_loss=mean(name="disc_loss"),
                disc_accuracy=keras.metrics.BinaryAccuracy(name="disc_accuracy"),
                disc_precision=keras.metrics.Precision(name="disc_precision"),
                disc_recall=keras.metrics.Recall(name="disc_recall"),
                disc_auc=keras.metrics.AUC(num_thresholds=500, name="disc_auc"),
                replaced_fraction=mean(name="replaced_fraction"),
            )
        self.tracked = tracked

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
        """Unmasked forward pass: the main model's logits, `[B, S]` (RTD) or `[B, S, V]` (MLM)."""
        inputs = self._encoder_inputs(batch["input_ids"], batch)
        if self.discriminator is None:
            return self.generator_head(self.generator(inputs, training=training))
        hidden = self.discriminator(inputs, training=training)
        if self.discriminator_head is not None:
            return self.discriminator_head(hidden)
        return self.discriminator_mlm_head(hidden)

    @staticmethod
    def _encoder_inputs(token_ids, batch):
        return {"token_ids": token_ids, "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]}

    def _example_seeds(self, batch_size):
        return masking.example_seeds(self.seed, self._step(), example_dropout.global_indices(batch_size))

    def _dropout_streams(self, batch_size):
        return example_dropout.example_streams(self.seed, self._step(), example_dropout.global_indices(batch_size))

    def _step(self):
        optimizer = getattr(self, "optimizer", None)  # none before `compile` (e.g. `build_all`)
        return optimizer.iterations if optimizer else 0

    def _special_id_tuple(self):
        special = self._required_special_ids()
        return special["pad"], special["cls"], special["sep"], special["mask"]

    def step_context(self, batch) -> dict:
        """What micro-batches of `batch`, or a compiled step, need to compute exactly the whole batch's
        step (`model.step`): `per_example`, sliced with the batch, the masking seeds of each
        example's global index, and its dropout stream; `kwargs`, the whole batch's counts, all-reduced
        (the step's only collective before its gradients)."""
        batch_size = tf.shape(batch["input_ids"])[0]
        seeds = self._example_seeds(batch_size)
        return {"per_example": {"seeds": seeds, "dropout_streams": self._dropout_streams(batch_size)},
                "kwargs": {"normalizers": self._global_counts(batch, seeds)}}

    def _global_counts(self, batch, seeds) -> dict:
        """Masked positions, real tokens and maskable candidates of `batch`, all-reduced over replicas."""
        input_ids, input_mask = tf.cast(batch["input_ids"], tf.int32), tf.cast(batch["input_mask"], tf.int32)
        candidates = masking.candidate_positions(input_ids, input_mask, self._special_id_tuple())
        if self.config.mask_whole_words:
            # How many tokens whole words fill depends on the draw: mask the whole batch once.
            masked = tf.reduce_sum(self._mask(input_ids, input_mask, seeds).weights, axis=-1)
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

    def _mask(self, input_ids, input_mask, seeds) -> masking.MaskedBatch:
        config = self.config
        return masking.mask_inputs(
            input_ids, input_mask, seeds, mask_id=self._required_special_ids()["mask"],
            special_ids=self._special_id_tuple(), mask_prob=config.mask_prob, max_predictions=self.max_predictions,
            mask_token_prob=config.mask_token_prob, whole_words=self._whole_words_table())

    def _generator_outputs(self, masked, batch, training):
        """(logits or None, per-position losses, predictions, `VocabularySoftmax` or None) at the masked slots."""
        if self.generator is None:
            # The official uniform generator's all-zero logits: loss log V everywhere, argmax id 0.
            log_vocab = tf.math.log(tf.cast(self.config.vocab_size, tf.float32))
            return None, tf.fill(tf.shape(masked.original_ids), log_vocab), tf.zeros_like(masked.original_ids), None
        gen_hidden = self.generator(self._encoder_inputs(masked.input_ids, batch), training=training)
        gen_logits = self.generator_head(gather_positions(gen_hidden, masked.positions))
        if self.execution.kernels == "xla_cpu":
            softmax = xla_cpu.vocabulary_softmax(gen_logits, masked.original_ids)
            return gen_logits, softmax.losses, softmax.predictions, softmax
        gen_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(masked.original_ids, gen_logits)
        return gen_logits, gen_losses, tf.argmax(gen_logits, -1, output_type=tf.int32), None

    def _sample(self, gen_logits, masked, seeds, softmax):
        config = self.config
        if self.generator is None:
            return masking.uniform_sample(seeds, config.vocab_size, masked.original_ids, config.disallow_correct)
        disallow = masked.original_ids if config.disallow_correct else None
        return masking.sample_tokens(gen_logits, seeds, config.temperature, self.execution.sampling, softmax,
                                     disallow=disallow)

    def compute_losses(self, batch, training=True, seeds=None, normalizers=None, dropout_streams=None):
        """Masks, runs both networks and returns loss partials and metric inputs.

        Loss partials are sums divided by global counts: this batch's, all-reduced over
        replicas, or `normalizers` (a whole batch's, when this is one of its micro-batches).
        Dropout is keyed by the example (`example_dropout`): `dropout_streams`, or this batch's.
        """
        if dropout_streams is None:
            dropout_streams = self._dropout_streams(tf.shape(batch["input_ids"])[0])
        with example_dropout.keyed_by(dropout_streams):
            return self._compute_losses(batch, training, seeds, normalizers)

    def _compute_losses(self, batch, training, seeds, normalizers):
        config = self.config
        input_ids = tf.cast(batch["input_ids"], tf.int32)
        input_mask = tf.cast(batch["input_mask"], tf.int32)
        batch = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": tf.cast(batch["segment_ids"], tf.int32)}
        if seeds is None:
            seeds = self._example_seeds(tf.shape(input_ids)[0])
        masked = self._mask(input_ids, input_mask, seeds)
        if config.objective == "electric":
            normalizers = normalizers or self._global_counts(batch, seeds)
            normalizers = {name: tf.maximum(count, 1.0) for name, count in normalizers.items()}
            return electric.compute_losses(self, batch, masked, seeds, normalizers, training)
        gen_logits, gen_losses, gen_predictions, softmax = self._generator_outputs(masked, batch, training)
        if normalizers is None:
            num_masked, num_tokens = all_reduce_sum(
                [tf.reduce_sum(masked.weights), tf.reduce_sum(tf.cast(input_mask, tf.float32))])
        else:
            num_masked, num_tokens = normalizers["num_masked"], normalizers["num_tokens"]
        num_masked, num_tokens = tf.maximum(num_masked, 1.0), tf.maximum(num_tokens, 1.0)
        out = {"masked": masked, "gen_logits": gen_logits, "gen_predictions": gen_predictions,
               "gen_loss": tf.reduce_sum(gen_losses * masked.weights) / num_masked}
        out["loss"] = config.gen_weight * out["gen_loss"]
        if self.discriminator is None:
            return out
        sampled = self._sample(gen_logits, masked, seeds, softmax)
        fake_ids, labels = masking.corrupt(input_ids, masked, sampled)
        disc_hidden = self.discriminator(self._encoder_inputs(fake_ids, batch), training=training)
        out.update(fake_ids=fake_ids, labels=labels, sampled=sampled)
        token_mask = tf.cast(input_mask, tf.float32)
        if config.objective == "replace_mlm":
            out.update(self._masked_mlm_loss(disc_hidden, masked, num_masked))
        elif config.objective == "all_tokens_mlm":
            out.update(self._all_tokens_mlm_loss(disc_hidden, input_ids, fake_ids, token_mask, num_tokens))
        else:
            if config.objective == "rtd_masked_only":
                _, covered = masking.scatter_to_sequence(tf.ones_like(masked.positions), masked.positions,
                                                         masked.weights, tf.shape(input_ids)[1])
                disc_weights, num_covered = tf.cast(covered, tf.float32), num_masked
            else:
                disc_weights, num_covered = token_mask, num_tokens
            disc_logits = tf.cast(self.discriminator_head(disc_hidden), tf.float32)
            disc_losses = tf.nn.sigmoid_cross_entropy_with_logits(labels, disc_logits)
            out.update(disc_logits=disc_logits, disc_weights=disc_weights,
                       disc_loss=tf.reduce_sum(disc_losses * disc_weights) / num_covered)
            out["loss"] += config.disc_weight * out["disc_loss"]
            return out
        out["loss"] += out["main_loss"]
        return out

    def _masked_mlm_loss(self, hidden, masked, num_masked):
        """replace_mlm: predict the original tokens at the (corrupted) masked positions."""
        logits = self.discriminator_mlm_head(gather_positions(hidden, masked.positions))
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(masked.original_ids, logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), masked.original_ids), tf.float32)
        return {"main_loss": tf.reduce_sum(losses * masked.weights) / num_masked, "main_logits": logits,
                "main_correct": correct, "main_weights": masked.weights}

    def _all_tokens_mlm_loss(self, hidden, input_ids, fake_ids, token_mask, num_tokens):
        """all_tokens_mlm: p(x_t) = D_t·1[x_t = input_t] + (1 − D_t)·softmax_t(x_t) at every real token.

        D_t = sigmoid(copy logit) is the paper's copy mechanism; without it the model
        could lower most of its loss by learning the identity map.
        """
        logits = self.discriminator_mlm_head(hidden)  # [B, S, V], float32
        copy_logit = tf.cast(self.discriminator_head(hidden), tf.float32)
        log_probs = vocabulary_log_probs(logits, input_ids, self.execution.kernels)
        log_keep, log_change = tf.math.log_sigmoid(copy_logit), tf.math.log_sigmoid(-copy_logit)
        is_copy = tf.equal(fake_ids, input_ids)
        log_p_change = log_change + log_probs.at_labels
        log_p = tf.where(is_copy, tf.math.reduce_logsumexp(tf.stack([log_keep, log_p_change]), 0), log_p_change)
        # Predicted token: the input (copy) unless some other word is more probable under the mixture.
        copy_score = tf.math.reduce_logsumexp(tf.stack([log_keep, log_change + log_probs.at(logits, fake_ids)]), 0)
        log_p_best = log_probs.top - log_probs.log_norm
        prediction = tf.where(copy_score >= log_change + log_p_best, fake_ids, log_probs.predictions)
        correct = tf.cast(tf.equal(prediction, input_ids), tf.float32)
        return {"main_loss": -tf.reduce_sum(log_p * token_mask) / num_tokens,
                "main_correct": correct, "main_weights": token_mask, "main_logits": logits, "copy_logit": copy_logit}

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
        """Running metrics; `out` is one replica's (micro-)batch outputs."""
        _, num_replicas = replica_context_info()
        parts = num_replicas * self.execution.gradient_accumulation_steps  # partials that make one step's value

        def add_partial(name, partial):
            # Summed over replicas and micro-batches: total += partial, count += 1 per step.
            self.tracked[name].update_state(partial * parts, sample_weight=1.0 / parts)

        masked = out["masked"]
        add_partial("loss", out["loss"])
        add_partial("gen_loss", out["gen_loss"])
        gen_correct = tf.cast(tf.equal(out["gen_predictions"], masked.original_ids), tf.float32)
        self.tracked["gen_accuracy"].update_state(gen_correct, sample_weight=masked.weights)
        if "main_loss" in out:
            add_partial("main_loss", out["main_loss"])
            self.tracked["main_accuracy"].update_state(out["main_correct"], sample_weight=out["main_weights"])
        elif "disc_loss" in out:
            add_partial("disc_loss", out["disc_loss"])
            probs = tf.sigmoid(out["disc_logits"])
            for name in ("disc_accuracy", "disc_precision", "disc_recall", "disc_auc"):
                self.tracked[name].update_state(out["labels"], probs, sample_weight=out["disc_weights"])
        else:
            return
        replaced = tf.gather(out["labels"], masked.positions, batch_dims=1)
        self.tracked["replaced_fraction"].update_state(replaced, sample_weight=masked.weights)

    def metric_results(self) -> dict:
        return {name: metric.result() for name, metric in self.tracked.items()}
