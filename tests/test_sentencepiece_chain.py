"""Issue #40's acceptance, one chain of the real commands: a SentencePiece `tiny` model pre-trains, its export
fine-tunes on SST-2 and exports a serving SavedModel that answers raw text, and the export converts to a Hugging
Face `tokenizer.json` whose ids equal ours on English and Chinese Wikipedia text.

Each link also has its own default-suite test (tests/test_sentencepiece_pretraining.py,
tests/test_sentencepiece_finetuning.py, tests/test_sentencepiece_convert.py); this one runs them as a user does,
from a `.model` built on `../shared/data`, through the export each step hands to the next.
"""

import json
import os
import subprocess
import sys

import pytest

from test_finetuning_run import glue_dir  # noqa: F401 (fixture)
from test_serving import fresh_process_predictions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIECES = 4000


def run(*args, timeout=600):
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, (args, result.stderr[-3000:])
    return result


def paragraphs(path, count):
    lines = [line.strip() for line in open(path, encoding="utf-8")]
    return [line for line in lines if len(line) > 40 and not line.startswith("<")][:count]


@pytest.mark.slow  # ~2 min: four CLIs and a fresh process
@pytest.mark.data
def test_a_sentencepiece_model_pretrains_fine_tunes_serves_and_converts(shared_data, glue_dir, tmp_path):  # noqa: F811
    import tokenizers

    from electra_tf.text.tokenizers import load_tokenizer

    english = paragraphs(shared_data / "pretrain" / "enwiki" / "AA" / "wiki_00", 300)
    chinese = paragraphs(shared_data / "chinese" / "zhwiki" / "AA" / "wiki_00", 300)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(english[:250] + chinese[:250]) + "\n", encoding="utf-8")
    run("-m", "data_prep.build_vocab", "--model_type=unigram", f"--input={corpus}", f"--vocab_size={PIECES}",
        f"--output={tmp_path / 'sp'}")
    model = str(tmp_path / "sp.model")
    run("-m", "data_prep.build_pretraining_dataset", f"--input={corpus}", f"--vocab_file={model}",
        f"--output_dir={tmp_path / 'shards'}", "--max_seq_length=64")

    # Pre-training: the export carries the .model.
    run("run_pretraining.py", "--model_size=tiny", f"--data_dir={tmp_path / 'shards'}",
        f"--model_dir={tmp_path / 'run'}", "--num_train_steps=3", "--train_batch_size=4",
        f'--hparams={{"vocab_size": {PIECES}, "max_seq_length": 64, "mask_whole_words": true}}')
    export = tmp_path / "run" / "export"
    assert (export / "sentencepiece.model").read_bytes() == open(model, "rb").read()

    # Fine-tuning from the export (its tokenizer by default), a serving SavedModel answering raw text.
    serving = tmp_path / "serving"
    run("run_finetuning.py", "--task=SST-2", f"--data_dir={glue_dir}", f"--init_checkpoint={export}",
        f"--output_dir={tmp_path / 'sst2'}", "--max_seq_length=32", "--train_batch_size=4", "--max_train_steps=2",
        f"--export_saved_model={serving}")
    texts = [english[260][:200], chinese[260][:100], "a literal [MASK] typed in text"]
    served = fresh_process_predictions(serving, {"text": texts})
    assert len(served["probabilities"]) == 3
    assert all(abs(sum(row) - 1) < 1e-5 for row in served["probabilities"])

    # Hugging Face: the tokenizer.json gives our ids on text the model was not built from.
    run("-m", "electra_tf.convert", "--to=hf", f"--input={export}", f"--output={tmp_path / 'hf'}")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "discriminator" / "tokenizer.json"))
    ours = load_tokenizer(model)
    held_out = english[250:300] + chinese[250:300]
    theirs = [encoding.ids for encoding in hf.encode_batch(held_out, add_special_tokens=False)]
    assert theirs == ours.tokenize(held_out)
    config = json.loads((tmp_path / "hf" / "discriminator" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
