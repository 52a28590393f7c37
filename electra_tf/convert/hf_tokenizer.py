"""A SentencePiece model → a Hugging Face `tokenizer.json` (the `tokenizers` package; no transformers).

`sentencepiece_tokenizer(model_file)` builds a `tokenizers.Tokenizer` from the
model proto (``sentencepiece_model_pb2``) that gives the ids of
`load_tokenizer(model_file).tokenize` (tests check English and Chinese text):

* model: `Unigram` (pieces + scores, unk id, byte fallback) or `BPE` (vocab +
  merges derived as transformers' `SpmConverter` does: every split of a piece
  into two pieces of the vocabulary, ranked by the merged piece's id); the
  control, unknown and byte pieces, which SentencePiece never reads from text,
  are kept out of reach (`unigram_scores`, `bpe_merges(skip=...)`);
* normalizer: the model's own (`Precompiled` charsmap: NFKC, + case folding
  for `nmt_nfkc_cf`), then SentencePiece's whitespace rule (leading and
  trailing spaces dropped, runs of spaces collapsed to one);
* pre-tokenizer `Metaspace("▁", prepend_scheme="always")`; decoder
  `ByteFallback`, `Metaspace`, `Fuse`;
* post-processor `[CLS] $A [SEP]` / `[CLS] $A [SEP] $B [SEP]` with token types;
* `[PAD] [UNK] [CLS] [SEP] [MASK]` (the control and unknown pieces) as
  special added tokens.  Hugging Face matches special added tokens in the raw
  text, so a literal "[MASK]" typed in the text becomes the mask id, where
  ours (a control symbol) reads it as characters; `tokenizer.encode_special_tokens
  = True` (transformers: `split_special_tokens=True`) gives our ids.

`write_tokenizer_files(directory, model_file, max_length)` writes
`tokenizer.json`, `tokenizer_config.json` (`PreTrainedTokenizerFast`: the
`ElectraTokenizer` of transformers is WordPiece-only), `special_tokens_map.json`
and a copy of the model (`sentencepiece.model`, read back by our converter).

Example (a model trained on the fly; `python -m data_prep.build_vocab --model_type=unigram` writes real ones):

>>> import os, tempfile
>>> from data_prep.build_vocab import train_sentencepiece
>>> from electra_tf.convert.hf_tokenizer import sentencepiece_tokenizer
>>> from electra_tf.text.tokenizers import load_tokenizer
>>> prefix = os.path.join(tempfile.mkdtemp(), "sp")
>>> _ = train_sentencepiece(["hello world", "hello there"] * 50, prefix, vocab_size=300)
>>> path = prefix + ".model"
>>> hf = sentencepiece_tokenizer(path)
>>> ours = load_tokenizer(path).tokenize(["hello there world"])[0]
>>> hf.encode("hello there world").ids == [2] + ours + [3]
True
"""

import json
import os
import shutil

from electra_tf.convert.errors import ConversionError
from electra_tf.text.manifest import SPECIAL_TOKENS
from electra_tf.text.sentencepiece_tokenizer import WORD_START
from electra_tf.text.tokenizers import SENTENCEPIECE_EXPORT_NAME, validate_tokenizer_file

# sentencepiece_model.proto: ModelProto.SentencePiece.Type and TrainerSpec.ModelType.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED = 1, 2, 3, 4
MATCHED_TYPES = (NORMAL, USER_DEFINED)  # the pieces SentencePiece reads from text
UNIGRAM, BPE = 1, 2
UNREACHABLE = -1e9  # Unigram score of the other pieces (control, unknown, byte, unused)


def read_model_proto(model_file: str):
    """The parsed `ModelProto` of a checked SentencePiece model (one clear line if it is not one)."""
    from sentencepiece import sentencepiece_model_pb2
    try:
        validate_tokenizer_file(model_file)
    except ValueError as e:
        raise ConversionError(str(e)) from None
    proto = sentencepiece_model_pb2.ModelProto()
    with open(model_file, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def bpe_merges(vocab: dict, skip: frozenset = frozenset()) -> list:
    """BPE merges of SentencePiece piece-id `vocab`, as transformers' `generate_merges(vocab, None, skip)`.

    Every split of a piece into two pieces of the vocabulary is a merge; merges
    are ranked by the merged piece's id (SentencePiece's BPE ids follow its
    merge order), then by the lengths of the left and right parts.  Pieces in
    `skip` take part in no merge.
    """
    merges = []
    for piece, piece_id in vocab.items():
        if piece in skip:
            continue
        splits = [(piece[:i], piece[i:]) for i in range(1, len(piece))]
        splits = sorted((pair for pair in splits if pair[0] in vocab and pair[1] in vocab
                         and pair[0] not in skip and pair[1] not in skip),
                        key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        merges += [(left, right, piece_id) for left, right in splits]
    merges.sort(key=lambda merge: (merge[2], len(merge[0]), len(merge[1])))
    return [(left, right) for left, right, _ in merges]


def unigram_scores(proto) -> list:
    """`(piece, score)` in id order, the pieces SentencePiece never reads from text made unreachable.

    SentencePiece matches only normal and user-defined pieces; Hugging Face's
    Unigram matches every piece, so the text "<0x41>" (or "[MASK]" under a
    cased model) would become the byte (control) piece.  Their proto score (0,
    the best) becomes `UNREACHABLE`: no segmentation takes them while the text
    has another one.  Byte fallback finds byte pieces by name, not by score.
    """
    return [(p.piece, p.score if p.type in MATCHED_TYPES else UNREACHABLE) for p in proto.pieces]


def _model(proto):
    from tokenizers import models
    spec = proto.trainer_spec
    if spec.model_type == UNIGRAM:
        return models.Unigram(unigram_scores(proto), unk_id=spec.unk_id, byte_fallback=spec.byte_fallback)
    if spec.model_type == BPE:
        vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
        skip = frozenset(p.piece for p in proto.pieces if p.type not in MATCHED_TYPES)
        return models.BPE(vocab, bpe_merges(vocab, skip), unk_token=spec.unk_piece, fuse_unk=True,
                          byte_fallback=spec.byte_fallback, dropout=None)
    raise ConversionError(f"SentencePiece model type {spec.model_type} has no Hugging Face equivalent here "
                          "(only unigram and bpe: python -m data_prep.build_vocab --model_type=unigram|bpe)")


def _normalizer(proto):
    """The model's charsmap, then SentencePiece's whitespace rule (which it applies after the charsmap)."""
    from tokenizers import Regex, normalizers
    steps = []
    if proto.normalizer_spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap))
    if proto.normalizer_spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex("^ +| +$"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    return normalizers.Sequence(steps)


def sentencepiece_tokenizer(model_file: str):
    """The `tokenizers.Tokenizer` equal to our `SentencePieceTokenizer` of `model_file` (see the module docstring)."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
    proto = read_model_proto(model_file)
    tokenizer = Tokenizer(_model(proto))
    tokenizer.normalizer = _normalizer(proto)
    prepend = "always" if proto.normalizer_spec.add_dummy_prefix else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme=prepend,
                                                       split=proto.trainer_spec.split_by_whitespace)
    # ByteFallback first turns runs of byte pieces into their characters; Metaspace then maps '▁' to ' ' per
    # token and drops the first token's leading space, so it must see the tokens before Fuse joins them.
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(),
                                           decoders.Metaspace(replacement=WORD_START, prepend_scheme=prepend),
                                           decoders.Fuse()])
    # Control and unknown pieces are special (never produced from text by SentencePiece); user-defined are not.
    tokenizer.add_tokens([AddedToken(p.piece, special=p.type in (UNKNOWN, CONTROL), normalized=False)
                          for p in proto.pieces if p.type in (UNKNOWN, CONTROL, USER_DEFINED)])
    cls, sep = SPECIAL_TOKENS["cls"], SPECIAL_TOKENS["sep"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))])
    return tokenizer


def write_tokenizer_files(directory: str, model_file: str, max_length: int) -> None:
    """tokenizer.json + the configs `transformers.AutoTokenizer` needs, and the model itself."""
    sentencepiece_tokenizer(model_file).save(os.path.join(directory, "tokenizer.json"))
    shutil.copyfile(model_file, os.path.join(directory, SENTENCEPIECE_EXPORT_NAME))
    write_tokenizer_configs(directory, {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
                                        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
                                        "clean_up_tokenization_spaces": False})


def write_tokenizer_configs(directory: str, tokenizer_config: dict) -> None:
    """`tokenizer_config.json` (`tokenizer_config` and the special tokens) and `special_tokens_map.json`, as
    `transformers.AutoTokenizer` reads them (both tokenizer kinds)."""
    special = {f"{name}_token": token for name, token in SPECIAL_TOKENS.items()}
    for name, content in (("tokenizer_config.json", {**tokenizer_config, **special}),
                          ("special_tokens_map.json", special)):
        with open(os.path.join(directory, name), "w") as f:
            json.dump(content, f, indent=2)
