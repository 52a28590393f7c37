"""SentencePiece (unigram / BPE) tokenization with the ``WordPieceTokenizer`` interface.

``SentencePieceTokenizer(model_file)`` reads a SentencePiece model proto (as
written by ``python -m data_prep.build_vocab --model_type=unigram|bpe``) and
offers the same methods as ``electra_tf.text.tokenization.WordPieceTokenizer``
(``tokenize``, ``tokenize_flat``, ``tokenize_to_ragged``, ``tokenize_in_graph``,
``special_ids``, ``unk_id``, ``vocab_size``, ``convert_ids_to_tokens``, ``decode``,
and for whole-word masking ``continuation_table`` / ``is_word_start``: the rule
by '▁', CJK ideographs and byte pieces is ``piece_continuations``'s).  Two
engines, same ids (tests check it on English and Chinese text):

* the Python ``sentencepiece`` processor (``tokenize``, ``tokenize_flat``);
* ``tensorflow_text.SentencepieceTokenizer`` built from the same proto
  (``tokenize_in_graph``, ``tokenize_to_ragged``: graph ops, usable inside ``tf.data``).

Normalisation (NFKC, lower-casing with ``nmt_nfkc_cf``) lives in the model,
so ``do_lower_case``/``strip_accents`` are not applied again here.
``[PAD]``/``[UNK]``/``[CLS]``/``[SEP]``/``[MASK]`` are looked up by name;
``[CLS] [SEP] [MASK]`` are CONTROL symbols, so the text "[MASK]" typed in the
input is tokenised as ordinary characters, never as the mask id.

Example (a model trained on the fly; ``build_vocab`` writes real ones):

>>> import io, tempfile, os
>>> import sentencepiece as spm
>>> from electra_tf.text.sentencepiece_tokenizer import SentencePieceTokenizer
>>> proto = io.BytesIO()
>>> spm.SentencePieceTrainer.train(
...     sentence_iterator=iter(["hello world", "hello there"] * 50), model_writer=proto,
...     vocab_size=40, hard_vocab_limit=False, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
...     pad_piece="[PAD]", unk_piece="[UNK]", control_symbols=["[CLS]", "[SEP]", "[MASK]"],
...     minloglevel=2)
>>> path = os.path.join(tempfile.mkdtemp(), "sp.model")
>>> _ = open(path, "wb").write(proto.getvalue())
>>> tok = SentencePieceTokenizer(path)
>>> tok.special_ids
{'pad': 0, 'unk': 1, 'cls': 2, 'sep': 3, 'mask': 4}
>>> ids = tok.tokenize(["hello world"])[0]
>>> tok.decode([tok.cls_id] + ids + [tok.sep_id, tok.pad_id])
'[CLS] hello world [SEP]'
>>> tok.mask_id in tok.tokenize(["[MASK]"])[0]
False
>>> tok.convert_ids_to_tokens(ids)  # a tiny vocabulary: mostly characters
['▁', 'he', 'l', 'l', 'o', '▁', 'w', 'o', 'r', 'l', 'd']
>>> "".join("S" if tok.is_word_start(i) else "-" for i in ids)  # whole-word masking's two words
'S----S-----'
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np

from electra_tf.text.manifest import SPECIAL_TOKENS
from electra_tf.text.reference_tokenizer import is_cjk_char
from electra_tf.text.tokenization import VocabularyLookups

WORD_START = "\u2581"  # '▁': SentencePiece's mark of a piece that begins a word
# UTF-8 lead bytes of U+4000-U+9FFF: a byte-fallback piece of one of them begins a CJK ideograph.
CJK_LEAD_BYTES = (0xE4, 0xE9)


def _processor(model_file: str, proto: bytes):
    """A ``SentencePieceProcessor`` for ``proto``; one clear line if it is not a model."""
    import sentencepiece as spm
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(proto)
    except (RuntimeError, OSError) as e:
        raise ValueError(f"sentencepiece model {model_file}: not a SentencePiece model proto "
                         f"({str(e).strip()})") from None
    return processor


def _read_model(model_file: str) -> bytes:
    try:
        with open(model_file, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"sentencepiece model {model_file}: cannot read it ({e.strerror})") from None


def _special_ids(model_file: str, processor) -> dict[str, int]:
    """Ids of the special tokens by name; ValueError naming the first one missing."""
    ids = {}
    for name, token in SPECIAL_TOKENS.items():
        index = processor.piece_to_id(token)  # an absent piece maps to the unk id
        if processor.id_to_piece(index) != token:
            raise ValueError(
                f"sentencepiece model {model_file}: missing special token {token} "
                f"(an ELECTRA model needs {', '.join(SPECIAL_TOKENS.values())}; "
                "build it with python -m data_prep.build_vocab --model_type=unigram)")
        ids[name] = index
    return ids


def validate_sentencepiece_model(model_file: str) -> list[str]:
    """Read and check a SentencePiece model; return its pieces in id order."""
    processor = _processor(model_file, _read_model(model_file))
    _special_ids(model_file, processor)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def piece_continuations(processor) -> np.ndarray:
    """`[V]` bool over a ``SentencePieceProcessor``'s pieces: True for a piece inside a word.

    SentencePiece marks the piece that begins a word with '▁' (a space before it; the text's first word
    too: its dummy prefix), so every other piece continues a word, with these exceptions, which start one:

    * control and unknown pieces ([PAD] [UNK] [CLS] [SEP] [MASK]): never part of a word;
    * a piece whose first character is a CJK ideograph (BERT's ranges, as the WordPiece tokenizer splits
      them): Chinese has no spaces, so SentencePiece makes long pieces without '▁'; as with WordPiece each
      such piece is a word of its own (a piece of several ideographs is one word: a piece cannot be split);
    * the byte-fallback piece of a UTF-8 lead byte 0xE4-0xE9 (U+4000-U+9FFF: CJK ideographs but for the 64
      Yijing hexagrams U+4DC0-U+4DFF), an ideograph the vocabulary lacks, by the same rule.

    The other byte pieces ``<0xNN>`` (the other lead bytes, all continuation bytes) belong to the word they
    are in: the bytes of one character are never split, and a character written in bytes stays with its
    word (after a space SentencePiece puts a '▁' piece before the bytes).
    """
    table = np.zeros(processor.get_piece_size(), dtype=bool)
    for index in range(len(table)):
        piece = processor.id_to_piece(index)
        if processor.is_control(index) or processor.is_unknown(index) or piece.startswith(WORD_START):
            continue
        if processor.is_byte(index):
            table[index] = not CJK_LEAD_BYTES[0] <= int(piece[3:5], 16) <= CJK_LEAD_BYTES[1]
        else:
            table[index] = not (piece and is_cjk_char(ord(piece[0])))
    return table


class SentencePieceTokenizer(VocabularyLookups):
    """SentencePiece tokenizer with the ``WordPieceTokenizer`` interface.

    Args:
      model_file: path of a SentencePiece model proto (``*.model``).
      do_lower_case, strip_accents: accepted for interface compatibility;
        the model's own normalizer decides (see the module docstring).
    """

    def __init__(self, model_file: str, do_lower_case: bool = True,
                 strip_accents: Optional[bool] = None):
        self.vocab_file = str(model_file)
        self.model_proto = _read_model(self.vocab_file)
        self._sp = _processor(self.vocab_file, self.model_proto)
        self.special_ids = _special_ids(self.vocab_file, self._sp)
        self.vocab: list[str] = [self._sp.id_to_piece(i) for i in range(self._sp.get_piece_size())]
        self._graph = None  # built lazily: tensorflow import is slow

    # ---- vocabulary: VocabularyLookups ------------------------------------------

    def continuation_table(self) -> np.ndarray:
        """`[V]` bool: True for a piece that continues the word before it (`piece_continuations`' rule)."""
        return piece_continuations(self._sp)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of the ids; special tokens shown by name and separated by spaces, [PAD] dropped."""
        specials = {index: SPECIAL_TOKENS[name] for name, index in self.special_ids.items()}
        parts: list[str] = []
        run: list[int] = []
        for index in (int(i) for i in ids):
            if index in specials and index != self.unk_id:
                if run:
                    parts.append(self._sp.decode(run))
                    run = []
                if index != self.pad_id:
                    parts.append(specials[index])
            else:
                run.append(index)
        if run:
            parts.append(self._sp.decode(run))
        return " ".join(p for p in parts if p)

    # ---- tokenisation -------------------------------------------------------
    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (no [CLS]/[SEP] added)."""
        if isinstance(texts, (str, bytes)):
            raise TypeError("tokenize* take a list of strings, not a single string")
        return self._sp.encode(list(texts))

    def tokenize_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All ids concatenated (int32) and the number of ids of each text (int64)."""
        rows = self.tokenize(texts)
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        flat = np.fromiter((i for r in rows for i in r), dtype=np.int32, count=int(lengths.sum()))
        return flat, lengths

    def tokenize_to_ragged(self, texts):
        """Ids as a ``tf.RaggedTensor`` (int64), from tensorflow-text's graph op (eager or tf.data)."""
        import tensorflow as tf
        if not isinstance(texts, tf.Tensor):
            texts = tf.constant(list(texts), dtype=tf.string)
        return tf.cast(self.tokenize_in_graph(texts), tf.int64)

    def tokenize_in_graph(self, strings, op=None):
        """Ids (int32 ``tf.RaggedTensor``) of a string tensor by TensorFlow ops alone (tf.data service
        workers, checkpointed iterators): tensorflow-text's op, the same ids as ``tokenize``. ``op``: one
        from ``in_graph_op()`` to run instead of this tokenizer's own (a SavedModel runs the one it holds)."""
        if op is None:
            if self._graph is None:
                self._graph = self.in_graph_op()
            op = self._graph
        return op.tokenize(strings)

    def char_spans(self, words: Sequence[str]) -> list[list[tuple[int, int]]]:
        """Per word, its pieces' ``(begin, end)`` characters in the word as the model tokenises the word on its
        own (SQuAD's per-word features). SentencePiece reports them through its normalisation; a piece with no
        character of its own (the lone ``▁``, the leading bytes of a byte-fallback character) has
        ``begin == end``."""
        encoded = self._sp.encode(list(words), out_type="immutable_proto")
        return [[(piece.begin, piece.end) for piece in word.pieces] for word in encoded]

    def in_graph_op(self):
        """A new tensorflow-text ``SentencepieceTokenizer`` of this model (what ``tokenize_in_graph`` runs): it
        holds the model proto, so a SavedModel that tracks it needs no file (``electra_tf.serving.text``). New
        at each call: the op owns a TensorFlow resource, and one SavedModel's must not be another's (a
        SavedModel loaded and dropped in this process deletes the resource of the name it restored)."""
        import tensorflow as tf
        import tensorflow_text as tf_text
        return tf_text.SentencepieceTokenizer(model=self.model_proto, out_type=tf.int32, add_bos=False,
                                              add_eos=False)
