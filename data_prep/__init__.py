"""Data preparation for ELECTRA pre-training (electra-tf).

Modules:

* ``tokenization``        - BERT-exact WordPiece tokenizer on tensorflow-text (fast path).
* ``reference_tokenizer`` - the same in pure Python (reference for tests and benchmarks).
* ``corpus``              - input files/formats, cleaning, shard plans, documents, sentences.
* ``packing``             - official ELECTRA example packing + fast Example serialisation.
* ``build_pretraining_dataset`` - the shard builder's command line; its library:

  * ``builder``      - public API (``make_plan``, ``run_build``), progress, the manifest;
  * ``plan``         - options, validation, shard contents, fingerprint;
  * ``shard_writer`` - one shard: tokenise, pack, write atomically + sidecar;
  * ``pool``         - worker processes and their progress reports;
  * ``tfds_input``   - TFDS datasets as input.

* ``manifest``            - the manifest contract read by training; owns the
  TFRecord feature names and special-token keys.
* ``build_vocab``         - learn a WordPiece vocab (CLI).
* ``inspect_shards``      - summarise and decode a data directory (CLI).
* ``cli``                 - the tools' shared flag/error handling.
* ``demo``                - offline demo dataset from Python's own documentation.

Example:

>>> from data_prep.manifest import shard_name
>>> shard_name(0, 8)
'pretrain_data.tfrecord-00000-of-00008'
"""
