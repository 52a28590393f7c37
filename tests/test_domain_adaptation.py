"""The domain-adaptation experiment: the task's text from CoNLL files, the plan, resuming from the records, the
report from the records alone, and (slow) the whole pipeline on a tiny export and a tiny CoNLL file."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments import domain_adaptation as da
from experiments import domain_adaptation_data as da_data
from experiments import domain_adaptation_plan as da_plan
from experiments import domain_adaptation_report as da_report
from experiments.lib import protocol, runner, workdir

ROOT = Path(__file__).resolve().parents[1]
HF_VOCAB = ROOT / "tests" / "fixtures" / "hf_electra" / "discriminator" / "vocab.txt"
CPU = da_plan.PLANS["cpu"]

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O
"""


def test_the_text_is_one_sentence_per_line_and_a_blank_line_at_each_docstart(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(CONLL)
    documents = da_data.conll_documents(path)
    assert documents == [[["EU", "rejects", "German"], ["Peter", "Blackburn"]], [["BRUSSELS", "1996-08-22"]]]
    assert da_data.conll_text(documents) == "EU rejects German\nPeter Blackburn\n\nBRUSSELS 1996-08-22\n\n"
    path.write_text(CONLL.replace("-DOCSTART- -X- -X- O\n\n", ""))  # copies without the markers: one document
    assert da_data.conll_documents(path) == [[["EU", "rejects", "German"], ["Peter", "Blackburn"],
                                         ["BRUSSELS", "1996-08-22"]]]


def test_the_plan_is_fixed_up_front_and_the_finetuning_is_the_objectives_protocol():
    assert (CPU.steps, CPU.train_batch_size, CPU.warmup_steps, CPU.added_words) == (1000, 128, 100, 500)
    assert CPU.warmup_steps / CPU.steps == protocol.BUDGETS["cpu"].warmup_steps / protocol.BUDGETS["cpu"].rtd_steps
    assert CPU.finetune.learning_rates == protocol.BUDGETS["cpu"].learning_rates == (1e-4, 3e-4)
    assert CPU.finetune.seeds == (0, 1, 2) and CPU.finetune.finetune_max_train_steps is None
    assert [(a.tapt, a.extended_vocab) for a in da_plan.ARMS.values()] == [(False, False), (True, False), (True, True)]


def test_the_pretraining_continues_from_the_start_export_with_the_plans_schedule():
    start = {"path": "/exports/x1", "model_size": "mini"}
    command = da.pretrain_command(CPU, start, Path("d"), Path("m"), stop_after_steps=None)
    assert {"--init_checkpoint=/exports/x1", "--model_size=mini", "--num_train_steps=1000", "--num_warmup_steps=100",
            "--train_batch_size=128", "--seed=0"} <= set(command)
    assert not any(flag.startswith("--stop_after_steps") for flag in command)
    assert da.pretrain_command(CPU, start, Path("d"), Path("m"), 300)[-1] == "--stop_after_steps=300"


def test_the_finetuning_command_is_the_protocols_with_the_exports_vocab_and_test_predictions(tmp_path):
    command = runner.finetune_command(CPU.finetune, tmp_path / "export", "NER", 3e-4, 2, tmp_path / "out",
                                          data_dir=tmp_path / "conll", vocab_file=tmp_path / "v.txt",
                                          extra_flags=("--do_predict",))
    assert {"--task=ner", f"--data_dir={tmp_path / 'conll'}", f"--vocab_file={tmp_path / 'v.txt'}",
            "--learning_rate=0.0003", "--seed=2", "--num_train_epochs=3", "--train_batch_size=32",
            f"--init_checkpoint={tmp_path / 'export'}", "--do_predict"} <= set(command)
    default = runner.finetune_command(CPU.finetune, None, "NER", 3e-4, 2, tmp_path / "out")
    assert f"--data_dir={protocol.CONLL}" in default and f"--vocab_file={protocol.EN_VOCAB}" in default


def test_test_f1_is_conllevals_entity_f1_of_the_predictions_file(tmp_path):
    # 3 gold entities (PER, LOC, ORG), 2 predicted, 1 right: P 50, R 33.3, F1 40.
    (tmp_path / "test_predictions.txt").write_text(
        "Peter B-PER B-PER\nBlackburn I-PER I-PER\nin O O\nParis B-LOC O\n\nEU B-ORG B-LOC\n\n")
    assert da.test_f1(tmp_path) == pytest.approx(40.0)
    assert da.test_f1(tmp_path / "missing") is None


def record_with(runs: dict, arm="base", **extra) -> dict:
    """A record whose fine-tuning holds `runs` = {lr: [(dev, test) per seed]}."""
    record = da_plan.new_record(CPU, da_plan.ARMS[arm])
    record["finetune"] = {lr: {str(seed): {"dev_f1": dev, "test_f1": test} for seed, (dev, test) in enumerate(values)}
                          for lr, values in runs.items()}
    record.update(extra)
    return record


def test_a_run_the_record_holds_is_not_redone_and_nothing_starts_after_the_deadline(tmp_path, monkeypatch):
    records = da_plan.Records(CPU, tmp_path)
    done = record_with({"0.0001": [(60.0, 55.0)] * 3, "0.0003": [(61.0, 56.0)] * 2})
    workdir.write_json_atomic(records.path("base"), done)
    started = []
    monkeypatch.setattr(runner, "run_all", lambda runs, progress, jobs: started.extend(r[2:4] for r in runs))
    da.finetune_arm(CPU, da_plan.ARMS["base"], tmp_path / "export", tmp_path / "work", tmp_path, records, None,
                    da.Deadline(None), jobs=1)
    assert started == [(3e-4, 2)]  # the one seed the record lacks
    started.clear()
    da.finetune_arm(CPU, da_plan.ARMS["base"], tmp_path / "export", tmp_path / "work", tmp_path, records, None,
                    da.Deadline(1e-9), jobs=1)
    assert started == []


def test_a_pretraining_past_the_deadline_is_stopped(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.time()
    deadline = da.Deadline(1e-9)
    assert runner.watch_pretraining(process, tmp_path, "tapt", CPU.steps, 0, stop_reason=deadline.stop_reason,
                                        say=lambda line: None, poll_seconds=0.05) == "--max_minutes reached"
    assert process.returncode is not None and time.time() - started < 30
    assert da.Deadline(None).stop_reason() is None


def test_another_start_export_is_refused_in_one_line(tmp_path):
    recorded = {"path": "/a/x1", "step": 1500, "discriminator_sha256": "aaa"}
    da_data.check_same_start(dict(recorded, path="/elsewhere/x1"), recorded, tmp_path / "tapt.json")  # same weights
    with pytest.raises(SystemExit, match=r"--start_export=/b/x0.5 \(step 750\) is not the export .*tapt.json started "
                                         r"from \(/a/x1, step 1500\)"):
        da_data.check_same_start({"path": "/b/x0.5", "step": 750, "discriminator_sha256": "bbb"}, recorded,
                            tmp_path / "tapt.json")
    with pytest.raises(SystemExit, match="--start_export=.*no electra_config.json and discriminator.weights.h5"):
        da_data.export_identity(tmp_path / "missing")


def test_the_report_is_built_from_the_records_alone(tmp_path):
    records = da_plan.records_dir(tmp_path, CPU)
    records.mkdir(parents=True)
    start = {"path": "/x1", "step": 1500, "model_size": "mini", "discriminator_sha256": "ab" * 32}
    base = record_with({"0.0001": [(60.0, 50.0), (62.0, 52.0), (61.0, 51.0)],
                        "0.0003": [(66.0, 58.0), (67.0, 59.0), (64.5, 57.0)]}, start_export=start,
                       vocab={"size": 30522, "added": 0}, data={"tokens_seen": 0})
    tapt = record_with({"0.0001": [(70.0, 60.0), (69.0, 61.0), (68.0, 62.0)], "0.0003": [(65.0, 55.0)] * 3},
                       arm="tapt", start_export=start, pretrain_steps_done=1000, vocab={"size": 30522, "added": 0},
                       data={"tokens_seen": 16_000_000}, pretrain_plan={"steps": 1000})
    under_way = record_with({}, arm="tapt_vocab", start_export=start, pretrain_steps_done=250,
                            vocab={"size": 31022, "added": 500}, data={"tokens_seen": 16_000_000},
                            pretrain_plan={"steps": 1000})
    for record in (base, tapt, under_way):
        (records / f"{record['arm']}.json").write_text(json.dumps(record))
    results = da_report.report(CPU, tmp_path)
    by_arm = {a["arm"]: a for a in results["arms"]}
    assert by_arm["base"]["lr"] == "0.0003" and by_arm["tapt"]["lr"] == "0.0001"  # medians 66 > 61; 69 > 65
    assert by_arm["base"]["dev"] == {"median": 66.0, "seeds": [66.0, 67.0, 64.5], "spread": 2.5}
    assert by_arm["base"]["test"]["median"] == 58.0 and by_arm["tapt"]["test"]["median"] == 61.0
    assert results["differences_from_base"]["tapt"] == {"dev": 3.0, "test": 3.0}
    assert results["largest_seed_spread"] == 2.5
    text = (tmp_path / "domain_adaptation.md").read_text()
    assert "| tapt | 1000 | 16,000,000 | 30522 | **69.00** [70.00, 69.00, 68.00] | **61.00** [60.00, 61.00, 62.00] | " \
           "0.0001 | 6/6 |" in text
    assert "- tapt − base: dev +3.00, test +3.00" in text and "largest dev-F1 spread" in text
    assert "| tapt_vocab | 250 | 4,000,000 | 31022 | – | – | – | 0/6 |" in text  # the budget's tokens × 250/1000
    assert json.loads((tmp_path / "domain_adaptation.json").read_text())["arms"][0]["arm"] == "base"


def test_an_arm_is_reported_only_once_its_whole_grid_is_in_the_record(tmp_path):
    """Runs are committed as they finish: three of six are shown as done, with no lr chosen and no F1 (a chosen lr
    from a half grid would read as a result)."""
    records = da_plan.records_dir(tmp_path, CPU)
    records.mkdir(parents=True)
    base = record_with({"0.0001": [(60.0, 50.0), (62.0, 52.0), (61.0, 51.0)]}, vocab={"size": 30522, "added": 0},
                       data={"tokens_seen": 0})
    (records / "base.json").write_text(json.dumps(base))
    (summary,) = da_report.report(CPU, tmp_path)["arms"]
    assert summary["runs"] == "3/6" and summary["lr"] is None and "dev" not in summary
    assert summary["grid"]["0.0001"]["median"] == 61.0  # the runs so far, in the grid table
    assert "| base | 0 | 0 | 30522 | – | – | – | 3/6 |" in (tmp_path / "domain_adaptation.md").read_text()


# --------------------------------------------------------------------------- the whole pipeline (slow)

WORDS = ("john", "smith", "visited", "paris", "and", "london", "with", "acme", "corporation", "yesterday",
         "berlin", "reported", "that", "the", "minister", "met", "maria", "garcia", "in", "madrid")
TAGS = {"john": "B-PER", "smith": "B-PER", "maria": "B-PER", "garcia": "B-PER", "paris": "B-LOC",
        "london": "B-LOC", "berlin": "B-LOC", "madrid": "B-LOC", "acme": "B-ORG"}  # one-word entities: IOB2 anywhere


def write_conll(directory: Path, sentences: int, offset: int) -> None:
    """A CoNLL-2003-format file per split: `sentences` sentences of 6-9 of `WORDS`, deterministic."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", sentences), ("dev", 6), ("test", 6)):
        lines = ["-DOCSTART- -X- -X- O", ""]
        for i in range(count):
            n = 6 + (i + offset) % 4
            words = [WORDS[(i * 7 + j * 3 + offset) % len(WORDS)] for j in range(n)]
            lines += [f"{w.capitalize()} NN O {TAGS.get(w, 'O')}" for w in words] + [""]
            if i % 5 == 4:
                lines += ["-DOCSTART- -X- -X- O", ""]
        (directory / f"{split}.txt").write_text("\n".join(lines) + "\n")


def tiny_export(tmp_path: Path, conll_dir: Path) -> Path:
    """A tiny run_pretraining export (2 steps) with the conversion fixtures' 1000-token WordPiece vocab."""
    text = tmp_path / "pretrain.txt"
    text.write_text(da_data.conll_text(da_data.conll_documents(conll_dir / "train.txt")))
    subprocess.run([sys.executable, "-m", "data_prep.build_pretraining_dataset", f"--input={text}",
                    "--input_format=text", f"--vocab_file={HF_VOCAB}", f"--output_dir={tmp_path / 'shards'}",
                    "--max_seq_length=32", "--num_shards=1"], check=True, cwd=ROOT, capture_output=True)
    subprocess.run([sys.executable, "run_pretraining.py", "--model_size=tiny", f"--data_dir={tmp_path / 'shards'}",
                    f"--model_dir={tmp_path / 'start'}", '--hparams={"vocab_size": 1000}', "--num_train_steps=2",
                    "--train_batch_size=4", "--max_seq_length=32", "--save_checkpoints_steps=2", "--log_steps=1", "--steps_per_loop=1"],
                   check=True, cwd=ROOT, capture_output=True)
    return tmp_path / "start" / "export"


@pytest.mark.slow  # 4 min on 2 busy cores: two data builds, a vocab extension, three pre-trainings, six fine-tunings
def test_the_whole_pipeline_on_a_tiny_export_then_a_rerun_does_nothing(tmp_path):
    conll_dir = tmp_path / "conll"
    write_conll(conll_dir, sentences=60, offset=0)  # 8+ examples of 32 tokens with the extended vocab
    export = tiny_export(tmp_path, conll_dir)
    results_dir, work_dir = tmp_path / "results", tmp_path / "work"
    flags = ["--budget=smoke", f"--start_export={export}", f"--conll_dir={conll_dir}", f"--work_dir={work_dir}",
             f"--results_dir={results_dir}"]
    da.main(flags + ["--stage=all"])
    records = {arm: json.loads((results_dir / "domain_adaptation_smoke" / f"{arm}.json").read_text())
               for arm in da_plan.ARMS}
    start = da_data.export_identity(export)
    for arm, record in records.items():
        assert record["start_export"] == start
        assert set(record["finetune"]) == {"0.0001", "0.0003"}
        assert all(0.0 <= run["dev_f1"] <= 100.0 and run["test_f1"] is not None
                   for runs in record["finetune"].values() for run in runs.values())
    assert records["base"]["vocab"]["size"] == 1000 and "pretrain_steps_done" not in records["base"]
    assert records["tapt"]["pretrain_steps_done"] == 2 and records["tapt"]["vocab"]["size"] == 1000
    assert records["tapt_vocab"]["vocab"]["size"] == 1000 + records["tapt_vocab"]["vocab"]["added"] > 1000
    assert records["tapt"]["export"]["step"] == 2 and records["tapt"]["data"]["examples_seen"] == 8
    extended = json.loads((work_dir / "arms" / "tapt_vocab" / "pretrain" / "export" / "electra_config.json")
                          .read_text())["config"]["vocab_size"]
    assert extended == records["tapt_vocab"]["vocab"]["size"]

    before = {p: p.stat().st_mtime_ns for p in work_dir.rglob("*") if p.is_file()}
    da.main(flags + ["--stage=all"])
    after = {p: p.stat().st_mtime_ns for p in work_dir.rglob("*") if p.is_file()}
    assert after == before  # nothing ran again
    again = {arm: json.loads((results_dir / "domain_adaptation_smoke" / f"{arm}.json").read_text()) for arm in da_plan.ARMS}
    assert [r["finetune"] for r in again.values()] == [r["finetune"] for r in records.values()]
    assert [r["pretrain_invocations"] for r in again.values()] == [r["pretrain_invocations"] for r in records.values()]

    import shutil

    shutil.rmtree(work_dir)  # the report reads the records alone
    results = da.main(flags + ["--stage=report"])
    assert [a["arm"] for a in results["arms"]] == list(da_plan.ARMS)
    assert "| tapt_vocab | 2 |" in (results_dir / "domain_adaptation_smoke.md").read_text()
