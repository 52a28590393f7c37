"""`--train_text` (raw text, tokenised and packed in tf.data) against data_prep shards of the same files.

Two measurements, each interleaved A/B/A/B in one process so both pipelines see the same machine load:

* input only: examples/s of `text_input.text_dataset` and of `input_pipeline.pretraining_dataset` over shards
  that `data_prep` built from the same files (same batch, sequence length, shuffle buffer);
* training: `pretraining.train` of the `tiny` model for the same steps from each source; examples/s of the
  steps after the first log window (the first includes tracing).

Also one pass of each over the files: examples, mean length, share of single-segment and of full-length
examples, [UNK] rate (the packers draw different random numbers: the distributions should agree, the examples
differ).

Prints a table and the command, and writes `bench/results/text_input-<name>.json` (CPU model, load average).

    python -m bench.text_input_bench --name=enwiki4 --num_files=4 --steps=30  # a few minutes on 2 cores
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.machine import cpu_model
from electra_tf.runtime import use_onednn_kernels

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
UNK_ID = 100  # BERT's en_uncased vocab



def build_shards(files, vocab, out_dir, max_seq_length) -> float:
    from data_prep.builder import run_build
    from data_prep.plan import BuildOptions, make_plan

    start = time.perf_counter()
    run_build(make_plan(BuildOptions(inputs=",".join(files), output_dir=out_dir, vocab_file=vocab,
                                     max_seq_length=max_seq_length, num_shards=len(files))), log=lambda m: None)
    return time.perf_counter() - start


def input_rate(dataset, batches: int, batch_size: int) -> float:
    iterator = iter(dataset)
    next(iterator)  # start-up (tracing, file opening, the shuffle buffer's first fill) not counted
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch_size / (time.perf_counter() - start)


def distribution(rows) -> dict:
    """Summary statistics of examples given as dicts of int lists / arrays (`input_ids`, `input_mask`, ...)."""
    import numpy as np

    ids = np.array([r["input_ids"] for r in rows])
    mask = np.array([r["input_mask"] for r in rows])
    segments = np.array([r["segment_ids"] for r in rows])
    return {"examples": len(rows), "mean_length": float(mask.sum(1).mean()),
            "single_segment_share": float((segments.max(1) == 0).mean()),
            "full_length_share": float((mask.sum(1) == mask.shape[1]).mean()),
            "unk_rate": float(((ids == UNK_ID) & (mask > 0)).sum() / mask.sum())}


def shard_rows(shards, manifest) -> list[dict]:
    import tensorflow as tf

    return [{name: list(feature.int64_list.value) for name, feature in
             tf.train.Example.FromString(record.numpy()).features.feature.items()}
            for shard in manifest["shards"] for record in tf.data.TFRecordDataset(os.path.join(shards, shard))]


def train_rate(source: str, args, files, shards, work, index) -> float:
    import tensorflow as tf

    from electra_tf.config import get_config
    from electra_tf.options import TrainOptions
    from electra_tf.text.tokenization import validate_vocab
    from electra_tf.training import pretraining

    config = get_config("tiny", vocab_size=len(validate_vocab(args.vocab_file)), max_seq_length=args.max_seq_length,
                        train_batch_size=args.batch_size, num_train_steps=args.steps, num_warmup_steps=2)
    data = dict(data_dir=shards) if source == "shards" else dict(data_dir=None, train_text=",".join(files),
                                                                  vocab_file=args.vocab_file)
    window = args.steps // 3
    options = TrainOptions(model_dir=os.path.join(work, f"run-{source}-{index}"), log_steps=window,
                           steps_per_loop=window, save_checkpoints_steps=args.steps, eval_batches=0, export=False,
                           **data)
    history = pretraining.train(config, options, tf.distribute.get_strategy())
    later = [line for line in history if line["step"] > window]
    return sum(line["examples_per_second"] for line in later) / len(later)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", default="enwiki")
    parser.add_argument("--input_dir", default=str(SHARED / "pretrain" / "enwiki" / "AA"))
    parser.add_argument("--num_files", type=int, default=4)
    parser.add_argument("--vocab_file", default=str(SHARED / "vocab" / "en_uncased" / "vocab.txt"))
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--input_batches", type=int, default=40, help="batches timed per input-only repeat")
    parser.add_argument("--steps", type=int, default=30, help="training steps per run (tiny model)")
    parser.add_argument("--repeats", type=int, default=2, help="A/B pairs of each measurement")
    args = parser.parse_args()

    from electra_tf.text.manifest import load_manifest
    from electra_tf.training import input_pipeline, text_input

    files = sorted(str(p) for p in Path(args.input_dir).iterdir() if p.is_file())[:args.num_files]
    work = tempfile.mkdtemp(prefix="text_input_bench-")
    try:
        shards = os.path.join(work, "shards")
        build_seconds = build_shards(files, args.vocab_file, shards, args.max_seq_length)
        manifest = load_manifest(shards)
        source = text_input.TextSource(patterns=tuple(files), vocab_file=args.vocab_file,
                                       max_seq_length=args.max_seq_length)
        make = {"train_text": lambda: text_input.text_dataset(source, args.batch_size, seed=0),
                "shards": lambda: input_pipeline.pretraining_dataset(shards, manifest, args.batch_size, seed=0)}
        rates = {"input": {name: [] for name in make}, "training": {name: [] for name in make}}
        distributions = {"train_text": distribution([{k: v.numpy() for k, v in row.items()} for row in
                                                     text_input.examples_dataset(source, repeat=False)]),
                         "shards": distribution(shard_rows(shards, manifest))}
        print(json.dumps(distributions), file=sys.stderr, flush=True)
        for repeat in range(args.repeats):
            for name in make:  # A/B/A/B
                rates["input"][name].append(input_rate(make[name](), args.input_batches, args.batch_size))
                print(f"input {name}: {rates['input'][name][-1]:.0f} examples/s", file=sys.stderr, flush=True)
        for repeat in range(args.repeats):
            for name in make:
                rates["training"][name].append(train_rate(name, args, files, shards, work, repeat))
                print(f"training {name}: {rates['training'][name][-1]:.1f} examples/s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    command = " ".join(["python -m bench.text_input_bench"] + sys.argv[1:])
    load = os.getloadavg()
    result = {"command": command, "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "load_average": load,
              "files": [os.path.basename(f) for f in files], "megabytes": sum(os.path.getsize(f) for f in files) / 1e6,
              "data_prep_build_seconds": build_seconds, "num_examples_in_shards": manifest["num_examples"],
              "batch_size": args.batch_size, "max_seq_length": args.max_seq_length, "steps": args.steps,
              "model_size": "tiny", "examples_per_second": rates, "one_pass_distributions": distributions}
    print(f"\n{len(files)} files ({result['megabytes']:.1f} MB) of {args.input_dir}; {cpu_model()}, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f}; data_prep built the shards in {build_seconds:.1f} s.\n")
    print("| examples/s (each A/B repeat) | --train_text | --data_dir shards |")
    print("|---|---|---|")
    for kind in ("input", "training"):
        cells = [", ".join(f"{v:.0f}" if kind == "input" else f"{v:.1f}" for v in rates[kind][name])
                 for name in ("train_text", "shards")]
        print(f"| {kind}{' (tiny, batch %d)' % args.batch_size if kind == 'training' else ''} | {cells[0]} | "
              f"{cells[1]} |")
    print("\n| one pass | examples | mean length | single-segment share | full-length share | [UNK] rate |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, d in distributions.items():
        print(f"| {name} | {d['examples']} | {d['mean_length']:.1f} | {d['single_segment_share']:.3f} | "
              f"{d['full_length_share']:.3f} | {d['unk_rate']:.2e} |")
    print(f"\nCommand: {command}")
    out = ROOT / "bench" / "results" / f"text_input-{args.name}.json"
    staging = out.with_suffix(".json.tmp")
    staging.write_text(json.dumps(result, indent=1) + "\n")
    staging.rename(out)
    print(f"Wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    use_onednn_kernels()  # before TensorFlow is imported
    main()
