"""The peers: the same steps in Hugging Face transformers (PyTorch) and in plain keras-hub.

* `HFPair` - transformers `ElectraForMaskedLM` (generator) + `ElectraForPreTraining`
  (discriminator), embeddings block shared (the generator uses the discriminator's
  `ElectraEmbeddings`, its output layer tied to the word embeddings), MLM head run only on the
  gathered masked positions, `torch.optim.AdamW` (decay off for LayerNorm and biases) with a linear
  warm-up schedule, `clip_grad_norm_`; bf16 via `torch.autocast("cpu", torch.bfloat16)`.
* `KerasHubPair` - two plain `keras_hub.models.ElectraBackbone` (embeddings NOT shared, tanh GELU
  as keras-hub hard-codes), simple dense heads, the same losses, one `tf.function` step called per
  step from Python, `keras.optimizers.AdamW(global_clipnorm=1)`.
* `HFFinetune` - `ElectraForSequenceClassification` + AdamW + clip.

Both pre-training peers take the masked positions our masking drew (`workload.masked_positions`)
and apply them in the step (gather, scatter of the Gumbel-max samples) without drawing them.
Without torch/transformers (`TORCH_ERROR`) only `KerasHubPair` runs.
"""

import time

import keras
import numpy as np
import tensorflow as tf

from bench.step_bench import harness, workload

try:
    import torch
    import transformers
    TORCH_ERROR = None
except Exception as e:  # noqa: BLE001 - any import failure just drops the PyTorch peers
    torch = transformers = None
    TORCH_ERROR = f"{type(e).__name__}: {e}"


def set_torch_threads(cores: int):
    """The cores TF's intra-op pool uses by default."""
    torch.set_num_threads(cores)
    try:
        torch.set_num_interop_threads(cores)
    except RuntimeError:  # already set in this process
        pass


def torch_matmul_peak(precision: str, n=2048, reps=5) -> float:
    """Best GFLOP/s of an n×n×n `torch.matmul`."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    return 2 * n ** 3 / harness.best_seconds(lambda: torch.matmul(a, b), reps) / 1e9


class KerasHubPair(harness.Implementation):
    """Two plain keras-hub ElectraBackbones with dense heads, one tf.function step."""

    name = "keras_hub"

    def __init__(self, config, batch, precision, masks):
        import keras_hub

        workload.set_policy(precision)
        keras.utils.set_random_seed(0)
        start = time.perf_counter()
        common = dict(vocab_size=config.vocab_size, embedding_dim=config.embedding_size,
                      dropout=config.dropout_rate, max_sequence_length=config.max_position_embeddings)

        def backbone(role, name):
            sizes = getattr(config, role)
            return keras_hub.models.ElectraBackbone(
                num_layers=sizes.num_layers, num_heads=sizes.num_heads, hidden_dim=sizes.hidden_size,
                intermediate_dim=sizes.intermediate_size, name=name, **common)

        self.gen, self.disc = backbone("generator", "kh_generator"), backbone("discriminator", "kh_discriminator")
        gelu = lambda x: keras.activations.gelu(x, approximate=True)  # noqa: E731 (keras-hub's GELU)
        disc_hidden = config.discriminator.hidden_size
        self.gen_dense = keras.layers.Dense(config.embedding_size, activation=gelu, name="gen_dense")
        self.gen_ln = keras.layers.LayerNormalization(epsilon=1e-12, name="gen_ln")
        self.disc_dense = keras.layers.Dense(disc_hidden, activation=gelu, name="disc_dense")
        self.disc_out = keras.layers.Dense(1, name="disc_logits")
        self.gen_dense.build((None, None, config.generator.hidden_size))
        self.gen_ln.build((None, None, config.embedding_size))
        self.disc_dense.build((None, None, disc_hidden))
        self.disc_out.build((None, None, disc_hidden))
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
        workload.set_policy("fp32")
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

    def call(self, steps):
        for _ in range(steps):
            loss = self.step(*self.args)
        return float(loss)

    def close(self):
        del self.gen, self.disc, self.optimizer, self.step


def hf_config(config, role: str, **extra):
    sizes = getattr(config, role)
    return transformers.ElectraConfig(
        vocab_size=config.vocab_size, embedding_size=config.embedding_size, hidden_size=sizes.hidden_size,
        num_hidden_layers=sizes.num_layers, num_attention_heads=sizes.num_heads,
        intermediate_size=sizes.intermediate_size, hidden_act="gelu", hidden_dropout_prob=config.dropout_rate,
        attention_probs_dropout_prob=config.dropout_rate,
        max_position_embeddings=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.layer_norm_epsilon, initializer_range=config.initializer_range,
        pad_token_id=workload.SPECIAL_IDS["pad"], **extra)


def torch_adamw(named_parameters, lr, weight_decay, config):
    decay, no_decay, seen = [], [], set()
    for name, p in named_parameters:
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon)


def as_long(x):
    return torch.as_tensor(np.asarray(x)).long()


class EagerTorchStep(harness.Implementation):
    """What the PyTorch peers share: the eager update after the loss. Subclasses define `_step`."""

    framework = "torch"

    def _update(self, loss, params):
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, self.clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    def call(self, steps):
        for _ in range(steps):
            loss = self._step()
        return loss


class HFPair(EagerTorchStep):
    """transformers ElectraForMaskedLM + ElectraForPreTraining on PyTorch, the same RTD step."""

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
        self.autocast = precision == "bf16"
        self.disc_weight, self.temperature, self.clip = config.disc_weight, config.temperature, config.clip_norm
        self.masked_ids, self.input_ids = as_long(masks["masked_ids"]), as_long(batch["input_ids"])
        self.segment_ids, self.attention_mask = as_long(batch["segment_ids"]), as_long(batch["input_mask"])
        self.positions, self.original_ids = as_long(masks["positions"]), as_long(masks["original_ids"])
        self.weights = torch.as_tensor(masks["weights"]).float()
        self.real = self.attention_mask.float()

    def facts(self):
        return {"attn_implementation": getattr(self.disc.config, "_attn_implementation", "?")}

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


class HFFinetune(EagerTorchStep):
    """ElectraForSequenceClassification (two labels) + AdamW + clip, fp32."""

    name = "hf"

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
        self.inputs = dict(input_ids=as_long(batch["input_ids"]), attention_mask=as_long(batch["input_mask"]),
                           token_type_ids=as_long(batch["segment_ids"]), labels=as_long(batch["label_ids"]))

    def _step(self):
        return self._update(self.model(**self.inputs).loss, self.model.parameters())

    def close(self):
        del self.model, self.optimizer
