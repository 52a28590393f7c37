"""The text contract: how text becomes ids, and what a pre-training data directory holds.

Shared by data preparation (`data_prep`, which writes shards), training (which reads them) and
fine-tuning, detection and serving (which tokenise text themselves); it imports nothing else of
`electra_tf`.

* `tokenization`        - BERT-exact WordPiece tokenizer on tensorflow-text (`WordPieceTokenizer`),
  vocab files (`read_vocab`, `validate_vocab`).
* `normalization`       - BERT's normalisation and word splitting, in Python and as TF ops, over character
  classes built from `unicodedata`.
* `reference_tokenizer` - the same in pure Python: the reference the fast path is tested against,
  and BERT's basic tokenizer for SQuAD's answer projection.
* `manifest`            - `manifest.json` of a data directory (`load_manifest`, `validate_manifest`);
  owns the TFRecord feature names, the special tokens and the shard file names.

Example:

>>> from electra_tf.text.manifest import SPECIAL_TOKENS, shard_name
>>> from electra_tf.text.reference_tokenizer import ReferenceTokenizer
>>> ReferenceTokenizer(list(SPECIAL_TOKENS.values()) + ["hello", "##s"]).tokenize_to_ids("Hellos!")
[5, 6, 1]
>>> shard_name(0, 8)
'pretrain_data.tfrecord-00000-of-00008'
"""
