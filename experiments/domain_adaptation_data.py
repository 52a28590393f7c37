"""What the domain-adaptation arms pre-train on and from: the task's text from CoNLL files, the start export's
identity and vocabulary, the TAPT shards and the vocabulary extended on the task's text.

Example:

>>> conll_text([[["EU", "rejects"], ["Peter"]], [["Bonn"]]])
'EU rejects\\nPeter\\n\\nBonn\\n\\n'
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

from experiments.domain_adaptation_plan import ROOT, Plan, log
from experiments.lib import workdir

DOCSTART = "-DOCSTART-"


# --------------------------------------------------------------------------- the task's text

def conll_documents(path: Path) -> list[list[list[str]]]:
    """The documents of a CoNLL file, each a list of sentences (lists of words, column 0).

    `-DOCSTART-` lines start a document and blank lines end a sentence. (`finetuning.conll.read_conll`
    reads the same files for tagging but drops the document boundaries, which the pre-training
    packing uses.)
    """
    documents, sentences, words = [], [], []
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0] == DOCSTART:
                if words:
                    sentences.append(words)
                    words = []
                if fields and sentences:
                    documents.append(sentences)
                    sentences = []
                continue
            words.append(fields[0])
    if words:
        sentences.append(words)
    if sentences:
        documents.append(sentences)
    return documents


def conll_text(documents: list[list[list[str]]]) -> str:
    """data_prep's `text` format: one sentence per line, a blank line after each document."""
    return "".join("".join(" ".join(words) + "\n" for words in sentences) + "\n" for sentences in documents)


def write_task_text(conll_dir: Path, work_dir: Path) -> tuple[Path, dict]:
    """`train.txt` of `conll_dir` as text (once); returns its path and its counts."""
    from electra_tf.text.manifest import write_json_atomic, write_text_atomic

    path, stats_path = work_dir / "text" / "conll_train.txt", work_dir / "text" / "conll_train.json"
    if not stats_path.exists():
        source = conll_dir / "train.txt"
        if not source.is_file():
            raise SystemExit(f"domain_adaptation: error: --conll_dir={conll_dir}: no train.txt (CoNLL-2003 format)")
        documents = conll_documents(source)
        if not documents:
            raise SystemExit(f"domain_adaptation: error: {source}: no sentences")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(str(path), conll_text(documents))
        write_json_atomic(str(stats_path), {
            "source": str(source), "documents": len(documents), "sentences": sum(len(d) for d in documents),
            "words": sum(len(s) for d in documents for s in d)})
    return path, json.loads(stats_path.read_text())


# --------------------------------------------------------------------------- the start export

def export_identity(export_dir: Path) -> dict:
    """What names an export: its path, the step its config records and the discriminator weights' sha256."""
    from electra_tf.text.manifest import sha256_file

    config_path = export_dir / "electra_config.json"
    weights = export_dir / "discriminator.weights.h5"
    if not config_path.is_file() or not weights.is_file():
        raise SystemExit(f"domain_adaptation: error: --start_export={export_dir}: no electra_config.json and "
                         "discriminator.weights.h5 there (an export of run_pretraining.py; the efficiency curve's "
                         "192k milestone appears when that run reaches it)")
    config = json.loads(config_path.read_text())
    return {"path": str(export_dir), "step": config.get("step"), "model_size": config["config"]["model_size"],
            "discriminator_sha256": sha256_file(str(weights))}


def check_same_start(identity: dict, recorded: Optional[dict], where: Path) -> None:
    """Refuses (one line) to go on from another export than the one `where` started from."""
    if recorded and recorded["discriminator_sha256"] != identity["discriminator_sha256"]:
        raise SystemExit(f"domain_adaptation: error: --start_export={identity['path']} (step {identity['step']}) is "
                         f"not the export {where} started from ({recorded['path']}, step {recorded['step']}): pass "
                         "that export, or move the records and work folder aside to start over")


def claim_work_dir(identity: dict, work_dir: Path) -> None:
    """The work folder's shards, vocab and runs belong to one start export: recorded on first use, checked after."""
    path = work_dir / "start_export.json"
    if path.exists():
        check_same_start(identity, json.loads(path.read_text()), work_dir)
    else:
        workdir.write_json_atomic(path, identity)


def export_vocab(export_dir: Path) -> Path:
    from electra_tf.convert.api import checkpoint_vocab

    vocab = checkpoint_vocab(str(export_dir))
    if vocab is None:
        raise SystemExit(f"domain_adaptation: error: {export_dir}: the export holds no vocabulary file")
    return Path(vocab)


def vocab_size(path: Path) -> int:
    from electra_tf.text.tokenizers import validate_tokenizer_file

    return len(validate_tokenizer_file(str(path)))


# --------------------------------------------------------------------------- the TAPT shards and vocab

def build_shards(vocab_file: Path, text: Path, out_dir: Path, plan: Plan) -> dict:
    """data_prep's shards of the task's text with `vocab_file` (once); returns the manifest."""
    if not (out_dir / "manifest.json").exists():
        log(f"building the TAPT shards in {out_dir} with {vocab_file}")
        subprocess.run([sys.executable, "-m", "data_prep.build_pretraining_dataset", f"--input={text}",
                        "--input_format=text", f"--vocab_file={vocab_file}", f"--output_dir={out_dir}",
                        f"--max_seq_length={plan.max_seq_length}", "--num_processes=1", "--num_shards=1"],
                       check=True, cwd=ROOT)
    return json.loads((out_dir / "manifest.json").read_text())


def extended_vocab(start_vocab: Path, text: Path, work_dir: Path, plan: Plan) -> Path:
    """The start export's vocab with `plan.added_words` words of the task's text appended (once)."""
    output = work_dir / "vocab" / "extended_vocab.txt"
    if not output.exists():  # extend_vocab writes it atomically, its report beside it
        output.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "data_prep.extend_vocab", f"--vocab_file={start_vocab}",
                        f"--input={text}", f"--add={plan.added_words}", f"--output={output}"], check=True, cwd=ROOT)
    return output
