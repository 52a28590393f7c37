"""Bad fine-tuning inputs: one line naming the file (and line), a non-zero exit, nothing written."""

import pytest

from test_finetuning_run import TINY, VOCAB, _common, _write, glue_dir, run_main, vocab_file  # noqa: F401


def fails(tmp_path, args):
    with pytest.raises(SystemExit) as info:
        run_main(args)
    text = str(info.value.code)
    assert info.value.code not in (0, None) and "\n" not in text
    assert not (tmp_path / "out").exists()  # nothing written
    return text


def test_a_row_with_the_wrong_number_of_columns(tmp_path, vocab_file, glue_dir):
    train = glue_dir / "SST-2" / "train.tsv"
    lines = train.read_text().splitlines()
    lines[2] += "\textra"
    _write(train, lines)
    text = fails(tmp_path, _common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}"])
    assert f"{train}: line 3 has 3 fields, expected 2" in text


def test_a_label_outside_the_label_set(tmp_path, vocab_file, glue_dir):
    dev = glue_dir / "SST-2" / "dev.tsv"
    lines = dev.read_text().splitlines()
    lines[4] = lines[4].rsplit("\t", 1)[0] + "\tmaybe"
    _write(dev, lines)
    text = fails(tmp_path, _common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}"])
    assert f"{dev}:5: label 'maybe' is not one of ['0', '1']" in text


def test_an_empty_dev_file(tmp_path, vocab_file, glue_dir):
    dev = glue_dir / "SST-2" / "dev.tsv"
    dev.write_text("")
    text = fails(tmp_path, _common(tmp_path, vocab_file) + ["--task=SST-2", f"--data_dir={glue_dir}"])
    assert f"{dev}: no examples (empty file)" in text


def test_a_missing_text_column(tmp_path, vocab_file):
    data = tmp_path / "reviews"
    data.mkdir()
    _write(data / "train.tsv", ["text\tlabel", "the movie is good .\t1", "the plot is bad .\t0"])
    text = fails(tmp_path, _common(tmp_path, vocab_file) + [
        "--task=text_classification", f"--data_dir={data}", "--text_column=review", "--do_eval=false"])
    assert "--text_column: column 'review' is not in the header of" in text and "train.tsv" in text


def test_an_init_checkpoint_whose_vocab_disagrees_with_vocab_file(tmp_path, vocab_file, glue_dir):
    from electra_tf.convert import export_dir as export_format
    from electra_tf.config import get_config
    from electra_tf.model.networks import pretrainer_from_config

    config = get_config("tiny", TINY, vocab_size=len(VOCAB), generator_num_layers=1, generator_hidden_size=8,
                        generator_num_heads=1, generator_intermediate_size=16, max_seq_length=16)
    pretrainer = pretrainer_from_config(config, special_token_ids={"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4})
    pretrainer.build_all()
    export_dir = tmp_path / "export"
    export_format.save_ours(pretrainer, str(export_dir), vocab_file=vocab_file, keras_hub=False)
    other = tmp_path / "other_vocab.txt"
    swapped = list(VOCAB)
    swapped[7], swapped[8] = swapped[8], swapped[7]
    other.write_text("\n".join(swapped) + "\n")
    args = [a for a in _common(tmp_path, vocab_file) if not a.startswith("--vocab_file")]
    text = fails(tmp_path, args + ["--task=SST-2", f"--data_dir={glue_dir}", f"--init_checkpoint={export_dir}",
                                   f"--vocab_file={other}"])
    assert f"--vocab_file {other} (sha256 " in text and f"is not the tokenizer of --init_checkpoint {export_dir} " in text
    assert "its line 8 is 'great' there but" in text
    shorter = tmp_path / "short_vocab.txt"
    shorter.write_text("\n".join(VOCAB[:-1]) + "\n")
    text = fails(tmp_path, args + ["--task=SST-2", f"--data_dir={glue_dir}", f"--init_checkpoint={export_dir}",
                                   f"--vocab_file={shorter}"])
    assert f"has {len(VOCAB) - 1} tokens but --init_checkpoint's embeddings have {len(VOCAB)} rows" in text
