"""Learning-rate schedule and AdamW as used by ELECTRA.

`WarmupLinearDecay` is the official schedule: polynomial (by default linear)
decay from the peak to zero over `num_train_steps`, multiplied by a linear
warm-up factor `min(1, step / num_warmup_steps)`.

`ElectraAdamW` is Keras' AdamW with four additions the official optimizer
has and Keras lacks:

* the official update without bias correction, `lr · (m / (√v + ε) + wd · w)`
  (`bias_correction=False`, the default; `True` gives Keras' corrected step);
* gradients may arrive already all-reduced across replicas and clipped by
  their *global* norm (`gradients_are_reduced=True`, what
  `loop.apply_gradients` does for pre-training and fine-tuning): Keras would
  otherwise clip each replica's partial gradient and sum afterwards;
* per-variable learning-rate multipliers (layer-wise decay for fine-tuning),
  applied to the Adam step and to the decoupled weight decay alike;
* no weight decay on LayerNorm parameters and biases.

Under TensorFlow the update runs, by default, as TF's fused `ResourceApplyAdam`
kernel per variable (`fused=True`): one kernel instead of about twenty graph
ops per variable, which shrinks the traced training step by a third and cuts
the first step's tracing and graph optimisation accordingly. Its arithmetic is
the same update; the one difference is that the kernel forms `1 − β2` in
float32 (0.00099998713 for β2 = 0.999, where the per-op update multiplies by
float32(0.001)), a relative difference of 1.3e-5 in the weight given to g².
`fused=False` runs the per-op update.

Example:

>>> from electra_tf.training.optimization import WarmupLinearDecay
>>> schedule = WarmupLinearDecay(1e-3, num_train_steps=100, num_warmup_steps=10)
>>> [round(float(schedule(s)), 6) for s in (0, 5, 10, 55, 100)]
[0.0, 0.000475, 0.0009, 0.00045, 0.0]
"""

import keras
from keras import ops

from electra_tf.config import ElectraConfig

NO_DECAY_NAMES = ("bias", "gamma", "beta", "output_bias")


@keras.saving.register_keras_serializable(package="electra_tf")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """peak × (1 − step/total)^power × min(1, step/warmup), as in the official code."""

    def __init__(self, peak_learning_rate, num_train_steps, num_warmup_steps=0, power=1.0):
        self.peak_learning_rate = float(peak_learning_rate)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.power = float(power)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        progress = ops.minimum(step, self.num_train_steps) / max(self.num_train_steps, 1)
        lr = self.peak_learning_rate * ops.power(1.0 - progress, self.power)
        if self.num_warmup_steps > 0:
            lr = lr * ops.minimum(1.0, step / self.num_warmup_steps)
        return lr

    def get_config(self):
        return dict(peak_learning_rate=self.peak_learning_rate, num_train_steps=self.num_train_steps,
                    num_warmup_steps=self.num_warmup_steps, power=self.power)


def uses_weight_decay(variable_name: str) -> bool:
    return variable_name not in NO_DECAY_NAMES


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraAdamW(keras.optimizers.AdamW):
    """The official AdamW: no bias correction, per-variable LR multipliers, reduced gradients.

    Args:
        bias_correction: False (official) applies `lr · m / (√v + ε)`; True
            scales the step by `√(1 − β2^t) / (1 − β1^t)` as Keras' Adam does.
        lr_multipliers: optional `{variable.path: multiplier}`; missing paths get 1.
        gradients_are_reduced: the caller passes gradients summed over replicas,
            so the optimizer must not all-reduce them again.
        fused: under TensorFlow, update each variable with the fused
            `ResourceApplyAdam` kernel (see the module docstring); False runs
            the same update as separate ops.
    """

    def __init__(self, learning_rate=1e-3, weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 bias_correction=False, lr_multipliers=None, gradients_are_reduced=True, fused=True, **kwargs):
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, beta_1=beta_1,
                         beta_2=beta_2, epsilon=epsilon, **kwargs)
        self.bias_correction = bool(bias_correction)
        self.lr_multipliers = dict(lr_multipliers or {})
        self.gradients_are_reduced = gradients_are_reduced
        self.fused = bool(fused)

    def build(self, variables):
        super().build(variables)
        # Inside update steps the TF backend hands over raw tf.Variables, which
        # have no Keras path: resolve per-variable settings by index instead.
        self._settings = [(self.lr_multipliers.get(v.path, 1.0), uses_weight_decay(v.name)) for v in variables]

    def _multiplier(self, variable) -> float:
        return self._settings[self._get_variable_index(variable)][0]

    def _use_weight_decay(self, variable):
        return self._settings[self._get_variable_index(variable)][1] and super()._use_weight_decay(variable)

    def update_step(self, gradient, variable, learning_rate):
        learning_rate = ops.cast(learning_rate, variable.dtype) * self._multiplier(variable)
        # Decoupled weight decay here rather than in `_apply_weight_decay`: this
        # runs inside the strategy's per-variable update, so it is replica-safe,
        # and it sees the variable's own (multiplied) learning rate.
        if self.weight_decay and self._use_weight_decay(variable):
            wd = ops.cast(self.weight_decay, variable.dtype)
            variable.assign(variable - variable * wd * learning_rate)
        if self.bias_correction:
            super().update_step(gradient, variable, learning_rate)
            return
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        gradient = ops.cast(gradient, variable.dtype)
        self.assign_add(m, (gradient - m) * (1.0 - self.beta_1))
        self.assign_add(v, (ops.square(gradient) - v) * (1.0 - self.beta_2))
        self.assign_sub(variable, learning_rate * m / (ops.sqrt(v) + self.epsilon))

    def _apply_weight_decay(self, variables):
        pass  # done per variable in update_step

    def can_apply_if(self, variables) -> bool:
        """Whether `apply_if` skips a step bit for bit: the fused update, with no state that Keras' `apply`
        changes outside it (gradient accumulators, EMA, constraints, variables overwritten with gradients)."""
        plain = (keras.backend.backend() == "tensorflow" and self.fused and not self.use_ema
                 and not self.gradient_accumulation_steps and type(self).update_step is ElectraAdamW.update_step)
        return plain and not any(v.constraint is not None or v.overwrite_with_gradient for v in variables)

    def apply_if(self, applied, grads, variables):
        """`apply(grads, variables)` where the boolean `applied` is true; where it is false the variables,
        slots and step counter keep their bits. `grads` must be finite either way (zeros where skipped:
        `model.step.clipped(..., keep=applied)`).

        No branch: the fused kernels run with their scalars chosen by `applied` (a skipped step's learning
        and decay rates 0, β1 = β2 = 1, so `m += (g − m)(1 − β1)` and `v` add exact zeros and the weight
        subtracts one), and the counter advances by `applied`. A `tf.cond` around `apply` has an input per
        gradient, variable and slot (about 1,600 for Small), each traced, matched in the other branch and
        instantiated. Needs `can_apply_if(variables)`.
        """
        import tensorflow as tf

        self._applied = applied
        try:
            self.apply(grads, variables)
        finally:
            self._applied = None
        # `apply` advanced the counter by one: take it back on a skipped step.
        self.iterations.assign_sub(1 - tf.cast(applied, self.iterations.dtype))

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        applied = getattr(self, "_applied", None)
        if applied is None:
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        import tensorflow as tf

        # Keras' own, with `applied` through the merge call: per replica under MirroredStrategy.
        variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
        grads_and_vars = self._all_reduce_sum_gradients(list(zip(grads, variables)))
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_tf_update_step, self._distribution_strategy, grads_and_vars, learning_rate,
            applied)

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate, applied=None):
        """TF backend only: the fused update, with the step's scalars computed once, not per variable;
        `applied` (from `apply_if`): where false, the scalars that leave every state as it is."""
        if not self.fused or type(self).update_step is not ElectraAdamW.update_step:
            return super()._distributed_tf_update_step(distribution, grads_and_vars, learning_rate)
        import tensorflow as tf

        beta_1, beta_2 = tf.constant(self.beta_1, "float32"), tf.constant(self.beta_2, "float32")
        epsilon = tf.constant(self.epsilon, "float32")
        if self.bias_correction:
            step = tf.cast(self.iterations + 1, "float32")
            beta_1_power, beta_2_power = tf.pow(beta_1, step), tf.pow(beta_2, step)
        else:  # alpha = lr · √(1 − 0) / (1 − 0) = lr exactly: the official uncorrected step
            beta_1_power = beta_2_power = tf.constant(0.0)
        # The learning rate arrives per replica (under MirroredStrategy each device has its own
        # tensor): the rates derived from it are made once per device and multiplier.
        scalars = {}

        def scalars_for(learning_rate, applied, multiplier):
            key = (id(learning_rate), id(applied), multiplier)  # the objects outlive this loop
            if key not in scalars:
                rate = tf.cast(learning_rate, "float32") * multiplier
                chosen = (rate, rate * self.weight_decay, beta_1, beta_2)
                if applied is not None:
                    skipped = (0.0, 0.0, 1.0, 1.0)
                    chosen = tuple(tf.where(applied, value, tf.constant(other, "float32"))
                                   for value, other in zip(chosen, skipped))
                scalars[key] = chosen
            return scalars[key]

        def update(variable, gradient, m, v, learning_rate, applied, multiplier, decays):
            rate, decay_rate, beta1, beta2 = scalars_for(learning_rate, applied, multiplier)
            if decays:  # w ← w − (lr · wd) · w, as one kernel
                tf.raw_ops.ResourceApplyGradientDescent(var=variable.handle, alpha=decay_rate,
                                                        delta=variable.value())  # read_value adds an Identity
            return tf.raw_ops.ResourceApplyAdam(
                var=variable.handle, m=m.handle, v=v.handle, beta1_power=beta_1_power, beta2_power=beta_2_power,
                lr=rate, beta1=beta1, beta2=beta2, epsilon=epsilon, grad=tf.cast(gradient, variable.dtype))

        for gradient, variable in grads_and_vars:
            if variable.dtype != tf.float32:
                raise TypeError(f"ElectraAdamW(fused=True) updates float32 variables; {variable.name} is "
                                f"{variable.dtype.name}: pass fused=False")
            index = self._get_variable_index(variable)
            decays = bool(self.weight_decay) and self._use_weight_decay(variable)
            m, v = self._momentums[index].value, self._velocities[index].value
            distribution.extended.update(
                variable, update, args=(gradient, m, v, learning_rate, applied),
                kwargs={"multiplier": self._settings[index][0], "decays": decays}, group=False)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        if self.gradients_are_reduced:
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)

    def get_config(self):
        config = super().get_config()
        config.update(bias_correction=self.bias_correction, lr_multipliers=self.lr_multipliers,
                      gradients_are_reduced=self.gradients_are_reduced, fused=self.fused)
        return config


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraLamb(ElectraAdamW):
    """LAMB (You et al., 2020) as in NVIDIA's BERT/ELECTRA large-batch recipes.

    Per variable: the bias-corrected Adam direction `u = m̂ / (√v̂ + ε) + wd · w`
    (weight decay inside the update, only where AdamW decays), scaled by the trust
    ratio `‖w‖ / ‖u‖` (1 where either norm is 0, and for the variables excluded from
    weight decay: LayerNorm parameters and biases, as NVIDIA excludes them from
    layer adaptation), then `w ← w − lr · ratio · u`. Layer-wise LR multipliers apply.
    """

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype) * self._multiplier(variable)
        gradient = ops.cast(gradient, variable.dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        step = ops.cast(self.iterations + 1, variable.dtype)
        self.assign_add(m, (gradient - m) * (1.0 - self.beta_1))
        self.assign_add(v, (ops.square(gradient) - v) * (1.0 - self.beta_2))
        m_hat = m / (1.0 - ops.power(ops.cast(self.beta_1, variable.dtype), step))
        v_hat = v / (1.0 - ops.power(ops.cast(self.beta_2, variable.dtype), step))
        update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
        if self._settings[index][1] and self.weight_decay:
            update = update + ops.cast(self.weight_decay, variable.dtype) * variable
            w_norm, u_norm = ops.norm(ops.reshape(variable, [-1])), ops.norm(ops.reshape(update, [-1]))
            ratio = ops.where((w_norm > 0) & (u_norm > 0), w_norm / ops.maximum(u_norm, 1e-30), 1.0)
            update = update * ratio
        self.assign_sub(variable, lr * update)


OPTIMIZERS = {"adamw": ElectraAdamW, "lamb": ElectraLamb}


def create_optimizer(config: ElectraConfig, fused: bool = True) -> ElectraAdamW:
    """The pre-training optimizer of `config` (fine-tuning builds its own `ElectraAdamW`); `fused`:
    TF's fused Adam kernel per variable (`ExecutionOptions.adam_kernel == "fused"`)."""
    schedule = WarmupLinearDecay(config.learning_rate, config.num_train_steps, config.num_warmup_steps,
                                 power=config.lr_decay_power)
    return OPTIMIZERS[config.optimizer](
        learning_rate=schedule,
        weight_decay=config.weight_decay,
        beta_1=config.adam_beta1,
        beta_2=config.adam_beta2,
        epsilon=config.adam_epsilon,
        bias_correction=config.adam_bias_correction,
        fused=fused,
    )
