"""Reading pre-training corpora: input discovery, formats, shard plans, documents.

Formats (``--input_format``, ``auto`` detects them per file):

* ``text``: one sentence or paragraph per line, a blank line ends a document.
* ``wikiextractor``: ``<doc ...>`` ... ``</doc>`` blocks; the title line right
  after ``<doc>`` is dropped, documents with no text after it (stubs) are
  skipped.
* ``jsonl``: one JSON object per line, the document is its ``--text_field``
  (newlines inside it separate paragraphs).

Any of them may be ``.gz`` or ``.bz2`` compressed.

Policies (decided here, documented in docs/data_prep.md):

* **Invalid UTF-8**: a line that is not valid UTF-8 is skipped and counted
  (``num_skipped_lines`` in the manifest); the same for a JSON Lines line that
  is not valid JSON.  A file in which more than 20 % of the lines of a block
  are invalid is rejected as binary.
* **NUL bytes**: a text file with stray NUL (``\\x00``) bytes is cleaned, not
  rejected: every NUL byte is deleted while reading (UTF-8 never uses the
  byte 0 inside a character, so this cannot break one) and counted
  (``num_nul_bytes_removed`` in the manifest and the build's last line).
  BERT's tokenizer deletes NUL characters anyway, so the ids are those of the
  text without them.  A file is rejected as binary when NUL bytes make up
  more than 1 % (``BINARY_NUL_FRACTION``) of its first 64 KiB (and number
  more than ``MAX_STRAY_NULS``, so that a tiny file may hold a few): UTF-16
  text, images, archives and executables are far above that, text with a
  stray NUL far below.
* **Very long lines**: lines longer than ``MAX_LINE_BYTES`` (256 KiB) are cut
  into pieces at the last space before the limit (or at a character boundary
  if there is none), each piece acting as a paragraph of the same document.
  Memory and time stay bounded for a 10 MB single-line file; the text is not
  lost (a sentence longer than ``max_seq_length`` tokens is truncated by the
  packer anyway, as in the official code).  JSON Lines records are never cut;
  one larger than 64 MiB is rejected.
* **Sentence splitting** (``split_sentences``) is a regex: a break after
  ``.``, ``!`` or ``?`` (plus closing quotes/brackets) followed by whitespace
  and an upper-case letter, digit or opening quote; and after CJK ``。！？``
  (plus closing quotes).  Abbreviations such as "Dr. Smith" are split too;
  for ELECTRA this only moves a segment boundary.

Sharding: the inputs are concatenated (sorted order) into one virtual byte
stream which is cut into ``num_shards`` equal byte ranges; each cut is moved
forward to the next document boundary of its file (compressed files are never
cut).  A shard is thus a fixed list of ``(file, start, end)`` ranges that
depends only on the inputs and ``num_shards`` - not on the number of
processes - and can be re-read independently by any worker.

Modules: `inputs` (discovery, sniffing, formats), `cleaning` (NUL bytes, long lines, invalid UTF-8),
`byte_ranges` (the shard plan's byte ranges), `lines` (a byte range read as lines), `documents` (lines →
documents per format), `sentences` (the sentence splitter), `errors` (`CorpusError`).
"""
