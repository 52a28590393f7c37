"""Data preparation for ELECTRA pre-training (electra-tf): the command-line tools that write shards.

The text contract they write to (tokenizer, ``manifest.json``, feature names) is the library's
``electra_tf.text``; this package uses it and nothing in ``electra_tf`` imports this package.

Modules:

* ``corpus``              - input files/formats, cleaning, shard byte ranges, documents, sentences (a package).
* ``packing``             - official ELECTRA example packing + fast Example serialisation.
* ``build_pretraining_dataset`` - the shard builder's command line; its library:

  * ``builder``      - public API (``make_plan``, ``run_build``), progress, the manifest;
  * ``plan``         - options, validation, shard contents, fingerprint;
  * ``shard_writer`` - one shard: tokenise, pack, write atomically + sidecar;
  * ``pool``         - worker processes and their progress reports;
  * ``beam_pipeline`` - ``--engine=beam``: the same shards from an Apache Beam pipeline;
  * ``dedup``        - ``--dedup_documents``' rule (both engines);
  * ``fs``           - file operations: ``os`` for local paths, ``tf.io.gfile`` for URLs;
  * ``tfds_input``   - TFDS datasets as input.

* ``build_vocab``         - learn a WordPiece vocab (CLI).
* ``inspect_shards``      - summarise and decode a data directory (CLI).
* ``cli``                 - the tools' shared flag/error handling.
* ``demo``                - offline demo dataset from Python's own documentation.

Example:

>>> from data_prep.plan import BuildOptions
>>> BuildOptions(inputs="corpus/", output_dir="shards/", vocab_file="vocab.txt").max_seq_length
128
"""
