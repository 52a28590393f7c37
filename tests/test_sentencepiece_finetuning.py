"""SentencePiece vocabularies in fine-tuning, serving and detect (issue #40 item 1).

A tiny SentencePiece model (``data_prep.build_vocab.train_sentencepiece`` on a small English + Chinese corpus,
byte fallback for the rest) and fresh tiny encoders: SST-2 trains through ``run_finetuning.py`` and its SavedModel
answers raw English and Chinese text in a fresh process with the model file gone; the in-graph ids equal the
Python tokenizer's; SQuAD spans map back to the exact original characters, in Python and in the graph; tagging
labels the first piece of each word; a different model of the same size is refused; detect shows the pieces.
``-m data``: in-graph ids equal on GLUE SST-2 dev lines and a Chinese set.
"""

import json
import os
import random
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from data_prep.build_vocab import train_sentencepiece
from electra_tf.finetuning.errors import UsageError
from electra_tf.finetuning.tasks import encode_pairs
from electra_tf.text.tokenizers import load_tokenizer, tokenizer_sha256
from test_finetuning_run import TINY, WORDS, _read_tsv, glue_dir, run_main  # noqa: F401
from test_serving import fresh_process_predictions
from test_serving_portable import xla_marked
from test_squad_serving import CONTEXTS, QUESTIONS, as_python, check_against_python, dev_json, python_decoding, \
    questions_of, settings_of

CHINESE = "我爱中国今天天气很好我们去公园散步电影很好看"
ACCENTED = ["café", "naïve", "Zoë's", "Zürich", "Héllo", "Suisse", "«Le", "Zinc»,"]
SQUAD_WORDS = sorted({w for c in CONTEXTS + QUESTIONS for w in c.split()})
# Raw text for the serving checks: English, Chinese, accents, punctuation, byte-fallback characters, a literal
# "[MASK]" (ordinary characters, never the mask id) and a text longer than the sequence (truncated).
TEXTS = ["the movie was good .", "a plot is awful", "我爱中国。今天天气很好", "a naïve café ☃ film!",
         "literal [MASK] and [CLS]", "", " ".join(["the good movie was great"] * 6), "Zürich (Suisse) 1921"]


def _corpus(seed=0, lines=400):
    rng = random.Random(seed)
    english = WORDS + SQUAD_WORDS + ACCENTED
    return [" ".join(rng.choice(english) for _ in range(rng.randint(4, 12))) + " "
            + "".join(rng.choice(CHINESE) for _ in range(rng.randint(2, 8))) + "。" for _ in range(lines)]


def _build(path, do_lower_case=True, seed=0):
    train_sentencepiece(_corpus(seed), str(path), vocab_size=420, do_lower_case=do_lower_case)
    return str(path) + ".model"


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("sp") / "sp")


@pytest.fixture(scope="module")
def sp_tokenizer(sp_model):
    return load_tokenizer(sp_model)


def _classifier(vocab_size, num_labels, seq, hparams=TINY):
    from electra_tf.config import get_config
    from electra_tf.finetuning.heads import ClassificationHead
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.model.encoder import ElectraEncoder

    encoder = ElectraEncoder.from_config_object(get_config("tiny", hparams, vocab_size=vocab_size))
    return FinetuningModel(encoder, ClassificationHead(num_labels, name="classification_head")).build_all(seq)


# ---- GLUE-style classification and its SavedModel ------------------------------------------------

def test_sst2_trains_and_its_saved_model_serves_the_python_ids_without_the_model_file(tmp_path, sp_model,
                                                                                        sp_tokenizer, glue_dir):
    from electra_tf.finetuning.predict import predict

    model_file = tmp_path / "copy" / "sp.model"  # removed before loading: the SavedModel must hold the proto
    model_file.parent.mkdir()
    shutil.copy(sp_model, model_file)
    export = tmp_path / "serving"
    run_main([f"--output_dir={tmp_path / 'out'}", "--model_size=tiny", f"--hparams={TINY}",
              f"--vocab_file={model_file}", "--max_seq_length=16", "--train_batch_size=4", "--task=SST-2",
              f"--data_dir={glue_dir}", "--max_train_steps=2", "--kernels=xla_cpu",
              f"--export_saved_model={export}"])
    shutil.rmtree(model_file.parent)
    assert xla_marked(export) == []  # trained with the XLA:CPU kernels, served without
    texts = [r[0] for r in _read_tsv(glue_dir / "SST-2" / "dev.tsv")[1:4]] + TEXTS
    served = fresh_process_predictions(export, {"text": texts})
    model = _classifier(sp_tokenizer.vocab_size, 2, 16)
    model.load_weights(str(tmp_path / "out" / "final.weights.h5"))
    logits = predict(model, encode_pairs(sp_tokenizer, texts, None, 16), 4)["logits"]
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    np.testing.assert_allclose(served["probabilities"], probabilities, atol=1e-5)


def test_in_graph_ids_equal_the_python_features_for_single_texts_and_pairs(sp_tokenizer):
    """[CLS]/[SEP], segment ids, padding and longest-first truncation, as encode_pairs gives them."""
    from electra_tf.serving.classifier import ClassifierServer

    server = ClassifierServer(None, sp_tokenizer, ["0", "1"], 16)
    assert "SentencepieceTokenizeOp" in {op.type for op in tf.function(server.tokenizer).get_concrete_function(
        tf.TensorSpec([None], tf.string)).graph.get_operations()}
    assert server.tokenizer(tf.constant(TEXTS)).to_list() == sp_tokenizer.tokenize(TEXTS)
    pairs = TEXTS[::-1]
    for texts_b in (None, pairs):
        expected = encode_pairs(sp_tokenizer, TEXTS, texts_b, 16)
        served = server.encode(tf.constant(TEXTS), None if texts_b is None else tf.constant(texts_b))
        for key in ("input_ids", "input_mask", "segment_ids"):
            np.testing.assert_array_equal(served[key].numpy(), expected[key], err_msg=key)
    assert sp_tokenizer.mask_id not in expected["input_ids"]  # the literal "[MASK]" is ordinary text


# ---- SQuAD ---------------------------------------------------------------------------------------

SQUAD_CONTEXT = "Zoë's café, «Le Zinc», opened in 1921 in Zürich (Suisse); a cup cost ($5) and it served 200 cups."
# Whole words, words with punctuation cut off, and answers that begin inside a whitespace word ("Le Zinc" in
# "«Le Zinc»,", "Suisse" in "(Suisse);", "$5" in "($5)").
SQUAD_ANSWERS = {"q1": "café", "q2": "1921", "q3": "Zoë's", "q4": "Zürich", "q5": "200 cups", "q6": "Zinc»,",
                 "q7": "Le Zinc", "q8": "Suisse", "q9": "$5", "q10": "Zoë"}


def _squad_examples():
    from electra_tf.finetuning.squad.examples import read_examples

    qas = [{"id": qid, "question": f"what is {qid}?", "answers": [{"text": text,
                                                                   "answer_start": SQUAD_CONTEXT.index(text)}]}
           for qid, text in SQUAD_ANSWERS.items()]
    data = [{"title": "t", "paragraphs": [{"context": SQUAD_CONTEXT, "qas": qas}]}]
    examples, failures = read_examples(data, is_training=True, v2=False)
    assert failures == 0
    return examples


def test_squad_answer_spans_map_back_to_the_exact_original_text(sp_tokenizer):
    """Accents, punctuation glued to words and byte-fallback characters: the answer's pieces (found by the training
    features from the answer's characters) decode to the answer's exact characters, not the normalised or
    lower-cased pieces nor whole words."""
    from electra_tf.finetuning.squad.decoding import decode_predictions
    from electra_tf.finetuning.squad.features import convert_examples_to_features

    examples = _squad_examples()
    features, meta = convert_examples_to_features(examples, sp_tokenizer, 128, 128, 8, is_training=True)
    logits = np.full((len(meta), 128), -10.0)  # a window without the answer points at [CLS]: never a valid span
    outputs = {"start_logits": logits.copy(), "end_logits": logits.copy()}
    for i in range(len(meta)):
        outputs["start_logits"][i, features["start_positions"][i]] = 10.0
        outputs["end_logits"][i, features["end_positions"][i]] = 10.0
    predictions, _, _ = decode_predictions(examples, meta, outputs, sp_tokenizer, n_best_size=3)
    assert dict(predictions) == SQUAD_ANSWERS


def test_squad_pieces_tile_their_words(sp_tokenizer):
    """Each piece's characters, piece after piece, rebuild its word exactly (what decoding slices); the ids the
    offsets come from are the ids the model saw."""
    words = SQUAD_CONTEXT.split() + ["☃", "ﬁne", "我爱中国。", "(Hello)"]
    spans = sp_tokenizer.char_spans(words)
    for word, word_spans, ids in zip(words, spans, sp_tokenizer.tokenize(words)):
        assert len(word_spans) == len(ids), word
        assert word_spans[0][0] == 0 and word_spans[-1][1] == len(word), word
        assert all(a[1] == b[0] for a, b in zip(word_spans, word_spans[1:])), word


def _tiny_squad_model(tokenizer, joint):
    from electra_tf.config import get_config
    from electra_tf.finetuning.model import FinetuningModel
    from electra_tf.finetuning.squad.task import SquadTask
    from electra_tf.model.encoder import ElectraEncoder

    keras.utils.set_random_seed(2)
    hparams = json.dumps({**json.loads(TINY), "squad_beam_size": 5, "squad_joint_prediction": joint})
    config = get_config("tiny", hparams, vocab_size=tokenizer.vocab_size)
    return FinetuningModel(ElectraEncoder.from_config_object(config), SquadTask().build_head(config)).build_all(32)


@pytest.mark.parametrize("saved", [False, pytest.param(True, marks=pytest.mark.slow)])  # the export: ~20 s
def test_squad_serving_answers_as_the_python_decoding(tmp_path, sp_tokenizer, saved):
    """The served spans (tensorflow-text's offsets in the graph) equal the Python decoding's (sentencepiece's
    offsets): texts, scores and context offsets, on contexts with accents, punctuation and odd whitespace."""
    from electra_tf.serving.squad import SquadServer, export_squad

    model = _tiny_squad_model(sp_tokenizer, joint=False)
    task, predictions, nbest, _ = python_decoding(model, sp_tokenizer, False, tmp_path)
    questions, contexts, ids = questions_of(dev_json(False))
    if saved:
        answer = tf.saved_model.load(export_squad(model, sp_tokenizer, settings_of(task), str(tmp_path / "export"))
                                     ).signatures["serving_default"]
        out = answer(question=tf.constant(questions), context=tf.constant(contexts))
    else:  # eagerly: the same ops, without the ~13 s of tracing
        out = SquadServer(model, sp_tokenizer, settings_of(task)).answer(tf.constant(questions), tf.constant(contexts))
    served = as_python(out)
    check_against_python(served, ids, contexts, predictions, nbest)
    assert any(p and p not in c.split() for p, c in zip(served["answer"], contexts))  # some spans cut words


# ---- tagging -------------------------------------------------------------------------------------

def test_tagging_labels_the_first_piece_of_each_word_in_python_and_in_the_graph(sp_tokenizer):
    from electra_tf.finetuning import tagging
    from electra_tf.serving.tagging import TaggingServer

    sentences = [("Zoë's café opened in 1921 .".split(), None), ("我爱中国 ☃ naïve".split(), None),
                 (["the", "movie", "was", "good"] * 5, None)]
    labels = [list(range(1, len(words) + 1)) for words, _ in sentences]
    features, meta, _ = tagging.align_features(sp_tokenizer, sentences, 16, labels)
    assert len(meta) > len(sentences)  # the long sentence is split into windows of whole words
    labelled = 0
    for i, m in enumerate(meta):  # a word's label sits on its first piece, and its pieces are the word's own
        words = sentences[m["sentence"]][0]
        row = features["input_ids"][i]
        for k, position in enumerate(m["positions"]):
            word = words[m["first_word"] + k]
            assert row[position:position + len(sp_tokenizer.tokenize([word])[0])].tolist() == \
                sp_tokenizer.tokenize([word])[0], word
            assert sp_tokenizer.is_word_start(row[position]), word
            assert features["label_ids"][i, position] == labels[m["sentence"]][m["first_word"] + k]
            labelled += 1
    assert labelled == features["label_weights"].sum() == sum(len(words) for words, _ in sentences)
    server = TaggingServer(None, sp_tokenizer, ["O"], "none", 16, tagging.DEFAULT_SEGMENT_ID)
    words = [w for sentence_words, _ in sentences for w in sentence_words]
    sentence = [s for s, (sentence_words, _) in enumerate(sentences) for _ in sentence_words]
    expected, _, _ = tagging.align_features(sp_tokenizer, sentences, 16)
    served, _, _ = server.window_features(tf.constant(words), tf.constant(sentence, tf.int64),
                                            tf.constant([len(w) for w, _ in sentences], tf.int64))
    for key, values in served.items():
        np.testing.assert_array_equal(values.numpy(), expected[key], err_msg=key)


# ---- the tokenizer against the checkpoint's ------------------------------------------------------

@pytest.fixture(scope="module")
def other_model(tmp_path_factory, sp_tokenizer):
    """A model of the same size as sp_model but different ids: trained on another sample of the corpus."""
    path = _build(tmp_path_factory.mktemp("sp_other") / "other", seed=1)
    assert load_tokenizer(path).vocab_size == sp_tokenizer.vocab_size
    return path


def test_a_different_sentencepiece_model_of_the_same_size_is_refused(sp_model, other_model, sp_tokenizer, tmp_path):
    from electra_tf.finetuning.prepare import check_vocab_matches_checkpoint

    size = sp_tokenizer.vocab_size
    assert tokenizer_sha256(other_model) != tokenizer_sha256(sp_model)
    with pytest.raises(UsageError) as refused:
        check_vocab_matches_checkpoint(other_model, sp_model, size, size)
    message = str(refused.value)
    assert "\n" not in message and other_model in message and sp_model in message
    copy = tmp_path / "copy.model"
    shutil.copy(sp_model, copy)
    check_vocab_matches_checkpoint(str(copy), sp_model, size, size)  # the same bytes elsewhere: accepted
    with pytest.raises(UsageError, match=re.escape(other_model)):  # mixed kinds: compared by sha256 too
        vocab = tmp_path / "vocab.txt"
        vocab.write_text("\n".join(sp_tokenizer.vocab) + "\n", encoding="utf-8")
        check_vocab_matches_checkpoint(other_model, str(vocab), size, size)


def test_the_sha256_an_export_records_is_checked(sp_model, other_model, sp_tokenizer, tmp_path):
    """An export's electra_config.json records vocab_sha256: make_tokenizer refuses another model of the same
    size even where the checkpoint offers no tokenizer file."""
    from electra_tf.config import get_config
    from electra_tf.finetuning.prepare import ModelOptions, make_tokenizer

    export = tmp_path / "export"
    export.mkdir()
    (export / "electra_config.json").write_text(json.dumps({"vocab_sha256": tokenizer_sha256(sp_model)}))
    (export / "discriminator.weights.h5").write_bytes(b"")  # what makes a folder an export (export_dir.is_export_dir)
    config = get_config("tiny", vocab_size=sp_tokenizer.vocab_size)
    tokenizer, _ = make_tokenizer(config, ModelOptions(init_checkpoint=str(export), vocab_file=sp_model))
    assert tokenizer.vocab_file == sp_model
    recorded = tokenizer_sha256(sp_model)  # what the export's config records; it holds no tokenizer file here
    with pytest.raises(UsageError, match=f"^--vocab_file {re.escape(other_model)} .* is not the tokenizer of "
                                         f"--init_checkpoint {re.escape(str(export))} .*sha256 {recorded}"):
        make_tokenizer(config, ModelOptions(init_checkpoint=str(export), vocab_file=other_model))


# ---- detect --------------------------------------------------------------------------------------

def test_detect_scores_and_shows_sentencepiece_pieces(tmp_path, sp_model, sp_tokenizer):
    from electra_tf.config import get_config
    from electra_tf.convert.export_dir import save_ours
    from electra_tf.detect import loading, rendering
    from electra_tf.model.networks import pretrainer_from_config

    keras.utils.set_random_seed(0)
    config = get_config("tiny", vocab_size=sp_tokenizer.vocab_size, num_layers=1, generator_num_layers=1,
                        hidden_size=32, intermediate_size=64, embedding_size=16, max_seq_length=32,
                        max_position_embeddings=32)
    model = pretrainer_from_config(config, special_token_ids=sp_tokenizer.special_ids).build_all()
    export = save_ours(model, str(tmp_path / "export"), keras_hub=False)
    detector = loading.load_detector(export, vocab_file=sp_model)
    text = "Zoë's café 我爱中国"
    scores = detector.score([text])[0]
    ids = sp_tokenizer.tokenize([text])[0]
    assert scores.tokens == sp_tokenizer.convert_ids_to_tokens(ids) and len(scores.probs) == len(ids)
    assert scores.word_starts == [sp_tokenizer.is_word_start(i) for i in ids]
    page = rendering.render_html([scores])
    shown = re.findall(r'<span class="(tok[^"]*)"[^>]*>([^<]*)</span>', page)
    assert [cls == "tok piece" for cls, _ in shown] == [not s for s in scores.word_starts]
    assert "\u2581" not in "".join(text for _, text in shown)  # the ▁ marks are not drawn
    terminal = rendering.render_terminal([scores], color=False)
    assert terminal.splitlines()[1].startswith(f"{scores.tokens[0]}(")  # pieces as the model saw them


# ---- real text -----------------------------------------------------------------------------------

@pytest.mark.data
@pytest.mark.slow  # builds an 8000-piece model from Wikipedia: ~25 s on 2 cores
def test_in_graph_ids_equal_python_ids_on_sst2_dev_and_chinese_text(shared_data, tmp_path):
    from data_prep.build_vocab import build_sentencepiece
    from electra_tf.serving.classifier import ClassifierServer

    sources = [shared_data / "pretrain" / "enwiki" / "AA" / "wiki_00", shared_data / "chinese" / "zhwiki" / "AA" / "wiki_00"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(open(s, encoding="utf-8").read() for s in sources), encoding="utf-8")
    build_sentencepiece(str(corpus), str(tmp_path / "sp"), "unigram", vocab_size=8000)
    tokenizer = load_tokenizer(str(tmp_path / "sp.model"))
    texts = [r[0] for r in _read_tsv(shared_data / "glue" / "SST-2" / "dev.tsv")[1:301]]
    texts += [r[2] for r in _read_tsv(shared_data / "chinese" / "ChnSentiCorp" / "dev.tsv")[1:201]]
    server = ClassifierServer(None, tokenizer, ["0", "1"], 128)
    assert server.tokenizer(tf.constant(texts)).to_list() == tokenizer.tokenize(texts)
    expected = encode_pairs(tokenizer, texts, None, 128)
    np.testing.assert_array_equal(server.encode(tf.constant(texts))["input_ids"].numpy(), expected["input_ids"])
