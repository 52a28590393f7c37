"""Data preparation for ELECTRA pre-training (electra-tf).

Modules:

* ``tokenization``        - BERT-exact WordPiece tokenizer on tensorflow-text (fast path).
* ``reference_tokenizer`` - the same in pure Python (reference for tests and benchmarks).
* ``corpus``              - input files/formats, shard plans, documents, sentence splitting.
* ``packing``             - official ELECTRA example packing + fast Example serialisation.
* ``builder`` / ``build_pretraining_dataset`` - shards + ``manifest.json`` (CLI).
* ``manifest``            - the manifest contract read by training.
* ``build_vocab``         - learn a WordPiece vocab (CLI).
* ``inspect``             - summarise and decode a data directory (CLI).
* ``demo``                - offline demo dataset from Python's own documentation.

Example:

>>> from data_prep.manifest import shard_name
>>> shard_name(0, 8)
'pretrain_data.tfrecord-00000-of-00008'
"""
