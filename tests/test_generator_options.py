"""The official generator options and whole-word masking, checked against independent NumPy computations."""

import math
import os

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from electra_tf.config import ElectraConfig, get_config
from electra_tf.convert import export_dir as export_format, hf, keras_model, names
from electra_tf.convert.errors import ConversionError
from electra_tf.model import flops, masking
from electra_tf.model.heads import gather_positions
from electra_tf.model.networks import pretrainer_from_config
from electra_tf.text.tokenization import WordPieceTokenizer
from electra_tf.training.optimization import create_optimizer
from electra_tf.training.input_pipeline import whole_words_table
from pretrain_testutil import SPECIAL_IDS, tiny_config, write_vocab
from test_objectives import main_hidden, sigmoid_ce
from test_pretrainer import log_softmax, make_batch, numpy_mlm_logits

SEEDS = masking.example_seeds(0, 0, tf.range(4))


def tied_config(**overrides):
    config = tiny_config(dropout_rate=0.0, **overrides)
    return config.replace(untied_generator=False, generator=config.discriminator)


def build(config):
    return pretrainer_from_config(config, special_token_ids=SPECIAL_IDS).build_all()


# --------------------------------------------------------------------------- config

def test_defaults_are_the_official_recipe():
    config = ElectraConfig()
    assert (config.untied_generator, config.untied_generator_embeddings, config.disallow_correct,
            config.uniform_generator, config.mask_whole_words) == (True, False, False, False, False)


@pytest.mark.parametrize("overrides,message", [
    ({"untied_generator": False}, "untied_generator=False makes the discriminator's encoder the generator"),
    ({"objective": "mlm", "uniform_generator": True}, "uniform_generator=True: needs an objective with a generator"),
    ({"objective": "mlm", "disallow_correct": True}, "disallow_correct=True: needs an objective with a generator"),
    ({"uniform_generator": True, "untied_generator_embeddings": True}, "uniform_generator=True has no generator"),
    ({"embedding_sharing": "gdes", "untied_generator_embeddings": True}, "embedding_sharing='gdes' shares"),
    ({"embedding_sharing": "gdes", "uniform_generator": True}, "cannot be combined with uniform_generator"),
])
def test_incompatible_generator_options_are_refused_in_one_message(overrides, message):
    with pytest.raises(ValueError, match="Invalid ELECTRA config: ") as error:
        get_config("small", overrides)
    assert message in str(error.value)
    with pytest.raises(ValueError, match="cannot have untied_generator_embeddings"):
        tied_config(untied_generator_embeddings=True)


# --------------------------------------------------------------------------- sampling

def draw(method, logits, original, temperature=1.0, draws=20_000):
    """`draws` samples at one position (one example's N slots share its logits)."""
    tiled = tf.tile(tf.constant(logits, tf.float32)[None, None], [1, draws, 1])
    disallow = tf.fill([1, draws], original)
    sampled = masking.sample_tokens(tiled, SEEDS[:1], temperature, method, disallow=disallow)
    return sampled.numpy().ravel()


@pytest.mark.parametrize("method", ["inverse_cdf", "gumbel"])
def test_disallow_correct_samples_the_renormalised_softmax_without_the_original(method):
    logits, original, temperature = np.array([2.0, 0.5, 3.0, -1.0, 1.0, 0.0]), 2, 2.0
    sampled = draw(method, logits, original, temperature)
    assert not np.any(sampled == original)
    probs = np.exp(logits / temperature)
    probs[original] = 0.0
    expected = probs / probs.sum() * len(sampled)
    counts = np.bincount(sampled, minlength=len(logits))
    assert stats.chisquare(np.delete(counts, original), np.delete(expected, original)).pvalue > 1e-3


def test_disallow_correct_never_samples_a_near_certain_original():
    logits = np.array([0.0, 0.0, 30.0, 0.0])  # softmax puts 1 − 1e-12 on the original
    for method in ("inverse_cdf", "gumbel"):
        assert not np.any(draw(method, logits, 2, draws=2_000) == 2)


def test_uniform_sampling_is_uniform_and_skips_the_original_when_disallowed():
    vocab, n = 7, 21_000
    originals = tf.constant(np.arange(n) % vocab, tf.int32)[None]
    plain = masking.uniform_sample(SEEDS[:1], vocab, originals).numpy().ravel()
    assert stats.chisquare(np.bincount(plain, minlength=vocab)).pvalue > 1e-3
    skipped = masking.uniform_sample(SEEDS[:1], vocab, originals, disallow_original=True).numpy().ravel()
    assert not np.any(skipped == originals.numpy().ravel())
    for original in range(vocab):  # uniform over the V − 1 others
        others = np.delete(np.bincount(skipped[originals.numpy().ravel() == original], minlength=vocab), original)
        assert stats.chisquare(others).pvalue > 1e-4


# --------------------------------------------------------------------------- generator structure

def test_uniform_generator_has_no_generator_and_the_official_constant_loss():
    config = tiny_config(dropout_rate=0.0, uniform_generator=True)
    model, batch = build(config), make_batch()
    assert model.generator is None and model.generator_head is None
    assert not [v for v in model.trainable_variables if "generator" in v.path]
    out = model.compute_losses(batch, training=False, seeds=SEEDS)
    # The official generator loss: cross-entropy of all-zero logits, log V at every masked slot.
    np.testing.assert_allclose(out["gen_loss"].numpy(), math.log(config.vocab_size), rtol=1e-6)
    logits = model.discriminator_head(main_hidden(model, batch, out)).numpy().astype(np.float64)
    mask = batch["input_mask"].numpy()
    disc = (sigmoid_ce(logits, out["labels"].numpy()) * mask).sum() / mask.sum()
    np.testing.assert_allclose(out["loss"].numpy(), math.log(config.vocab_size) + 50 * disc, rtol=1e-5)


def test_tied_generator_is_the_discriminator_encoder_with_its_own_mlm_head():
    model, batch = build(tied_config()), make_batch()
    assert model.generator is model.discriminator and model.generator_head is not model.discriminator_head
    own = [layer.trainable_variables for layer in (model.discriminator, model.discriminator_head, model.generator_head)]
    # No generator encoder of its own (the MLM head's output is tied to the embedding table).
    assert len(model.trainable_variables) == len({id(v) for variables in own for v in variables})
    with tf.GradientTape() as tape:
        out = model.compute_losses(batch, training=False, seeds=SEEDS)
    kernel = model.discriminator.transformer_layers[0]._feedforward_output_dense.kernel
    assert np.abs(tape.gradient(out["gen_loss"], kernel.value).numpy()).sum() > 0  # the MLM loss trains it too
    masked = out["masked"]
    inputs = {"token_ids": masked.input_ids, "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]}
    hidden = gather_positions(model.discriminator(inputs, training=False), masked.positions).numpy()
    logits = numpy_mlm_logits(model, hidden.astype(np.float64))
    np.testing.assert_allclose(out["gen_logits"].numpy(), logits, rtol=1e-4, atol=1e-4)
    expected = -np.take_along_axis(log_softmax(logits), masked.original_ids.numpy()[..., None], -1)[..., 0]
    weights = masked.weights.numpy()
    np.testing.assert_allclose(out["gen_loss"].numpy(), (expected * weights).sum() / weights.sum(), rtol=1e-4)


def test_tied_generator_checkpoint_has_no_separate_generator_encoder(tmp_path):
    model = build(tied_config())
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path) if "transformer_layer" in name]
    assert saved and not [name for name in saved if name.startswith("model/generator/")]
    assert len(saved) == len(model.discriminator.transformer_layers[0].weights) * 2


def test_untied_generator_embeddings_are_the_generators_own_and_as_wide_as_it():
    model, batch = build(tiny_config(dropout_rate=0.0, untied_generator_embeddings=True)), make_batch()
    generator, discriminator = model.generator, model.discriminator
    assert generator.embeddings is not discriminator.embeddings and generator.embeddings_projection is None
    assert generator.embeddings.token_embedding.embeddings.shape == (64, generator.hidden_size)
    assert model.generator_head.token_embedding is generator.embeddings.token_embedding
    with tf.GradientTape(persistent=True) as tape:
        out = model.compute_losses(batch, training=False, seeds=SEEDS)
    own, shared = generator.embeddings.token_embedding.embeddings, discriminator.embeddings.token_embedding.embeddings
    assert tape.gradient(out["disc_loss"], own.value) is None  # the samples carry no gradient
    assert tape.gradient(out["gen_loss"], shared.value) is None


# --------------------------------------------------------------------------- whole-word masking

EN_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "un", "##aff", "##able", "dog", "##s", "run",
            "##ning", "a", "cat", "sat", "on", "mat", "##ted", "中", "国", "人", "##中", "好"]
EN_TEXT = "the unaffable dogs running on a matted mat the cat sat on the unaffable dog"
ZH_TEXT = "中国人好中国人好人中国好好中国人中国"


def encode(tokenizer, text, seq_length=40):
    ids = [2] + tokenizer.tokenize([text])[0] + [3]
    row = np.zeros(seq_length, np.int32)
    row[:len(ids)] = ids
    return row


def numpy_words(ids, vocab):
    """Lists of positions, one per word: a first piece and its ## continuations (specials excluded)."""
    words = []
    for position, token in enumerate(vocab[i] for i in ids):
        if token.startswith("[") and token.endswith("]"):
            continue
        if token.startswith("##") and words and words[-1][-1] == position - 1:
            words[-1].append(position)
        else:
            words.append([position])
    return words


def test_whole_word_masking_masks_whole_words_within_the_budget(tmp_path):
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(EN_VOCAB) + "\n")
    tokenizer, table = WordPieceTokenizer(str(vocab_file)), masking.read_continuation_table(str(vocab_file))
    rows = np.stack([encode(tokenizer, EN_TEXT), encode(tokenizer, ZH_TEXT)])
    assert "##aff" in [EN_VOCAB[i] for i in rows[0]] and "##中" not in [EN_VOCAB[i] for i in rows[1]]
    mask, max_predictions = (rows > 0).astype(np.int32), 12
    for step in range(16):
        seeds = masking.example_seeds(7, step, tf.range(2))
        out = masking.mask_inputs(tf.constant(rows), tf.constant(mask), seeds, mask_id=4, special_ids=(0, 2, 3, 4),
                                  mask_prob=0.3, max_predictions=max_predictions, whole_words=table)
        for row in range(2):
            chosen = set(out.positions.numpy()[row][out.weights.numpy()[row] > 0])
            budget = min(max_predictions, round(0.3 * mask[row].sum()))
            words = numpy_words(rows[row], EN_VOCAB)
            masked_words = [w for w in words if set(w) <= chosen]
            assert sum(map(len, masked_words)) == len(chosen) <= budget  # whole words only, within budget
            left = budget - len(chosen)
            assert all(len(w) > left for w in words if not set(w) <= chosen)  # no skipped word would fit
            if row == 1:  # every CJK character is a word: the budget is met exactly
                assert len(chosen) == budget and all(len(w) == 1 for w in words)
        alone = masking.mask_inputs(tf.constant(rows[:1]), tf.constant(mask[:1]), seeds[:1], mask_id=4,
                                    special_ids=(0, 2, 3, 4), mask_prob=0.3, max_predictions=max_predictions,
                                    whole_words=table)
        np.testing.assert_array_equal(alone.input_ids.numpy()[0], out.input_ids.numpy()[0])  # per-example draws


def test_pretrainer_needs_the_table_and_training_reads_it_from_the_manifest(tmp_path):
    config = tiny_config(dropout_rate=0.0, mask_whole_words=True)
    model = build(config)  # building needs no vocabulary
    with pytest.raises(ValueError, match="mask_whole_words=True needs the vocabulary's continuation table"):
        model.compute_losses(make_batch(), training=False, seeds=SEEDS)
    vocab_file = write_vocab(str(tmp_path / "vocab.txt"), 64)
    table = whole_words_table(config, {"vocab_file": vocab_file})
    assert table.shape == (64,) and not table.any()
    with pytest.raises(ValueError, match="is not the vocab the data was built with"):
        whole_words_table(config, {"vocab_file": vocab_file, "vocab_sha256": "0" * 64})
    model.whole_words = table
    model.compile(optimizer=create_optimizer(config))
    context = model.step_context(make_batch())
    out = model.compute_losses(make_batch(), training=False, seeds=context["per_example"]["seeds"])
    assert float(context["kwargs"]["normalizers"]["num_masked"]) == float(tf.reduce_sum(out["masked"].weights))


# --------------------------------------------------------------------------- FLOPs and converters

def test_flops_count_the_generator_each_option_runs():
    base = get_config("small")
    seq, masked = base.max_seq_length, masking.max_predictions_per_seq(base.mask_prob, base.max_seq_length)
    disc = flops.encoder_forward_flops(seq, 128, 256, 12, 1024)
    disc_total = disc + flops.discriminator_head_forward_flops(seq, 256)

    def generator(embed, width, inner):
        return flops.encoder_forward_flops(seq, embed, width, 12, inner) + \
            flops.mlm_head_forward_flops(masked, width, embed, base.vocab_size)

    tied = base.replace(untied_generator=False, generator=base.discriminator)
    for config, gen in ((base, generator(128, 64, 256)), (tied, generator(128, 256, 1024)),
                        (base.replace(untied_generator_embeddings=True), generator(64, 64, 256)),
                        (base.replace(uniform_generator=True), 0)):
        assert flops.forward_flops_per_sequence(config) == disc_total + gen


def test_converters_write_what_the_format_holds_and_name_the_option_otherwise(tmp_path):
    vocab_file = write_vocab(str(tmp_path / "vocab.txt"), 64)
    tied = build(tied_config())
    assert sorted(hf.save_hf(tied, tied.config, str(tmp_path / "tied"), vocab_file)) == ["discriminator", "generator"]
    with pytest.raises(ConversionError, match="^untied_generator=False: the generator is the discriminator's"):
        keras_model.assign_weights(tied, keras_model.read_weights(tied))
    uniform = build(tiny_config(uniform_generator=True))
    assert sorted(hf.save_hf(uniform, uniform.config, str(tmp_path / "uniform"), vocab_file)) == ["discriminator"]
    with pytest.raises(ConversionError, match="^uniform_generator=True: this model has no generator"):
        keras_model.read_weights(uniform, names.PARTS)
    untied = build(tiny_config(untied_generator_embeddings=True))
    with pytest.raises(ConversionError, match="^untied_generator_embeddings=True: the generator's own embeddings"):
        hf.save_hf(untied, untied.config, str(tmp_path / "untied"), vocab_file)
    export = export_format.save_ours(untied, str(tmp_path / "export"), vocab_file, keras_hub=False)
    _, reloaded, _ = export_format.load_ours(export)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(untied.weights, reloaded.weights))
    assert os.path.isdir(export)
