"""What drawing one pre-training step's dropout masks costs: keyed by the example against the old per-layer stream.

    python -m bench.dropout_bits_bench --size=small --rounds=5

Draws the uint16 keep bits of every dropout of one step of `--size` (`bench.step_bench`'s batch, 128 tokens):
the discriminator's and the generator's attention probabilities `[B, heads, S, S]` and hidden states
`[B, S, H]` in every layer, and the embeddings, as the CPU option set draws them (16-bit masks): with
`ops.random_bits.example_keyed_bits` (per example, the stream since #56, interleaved into the masks' shape),
with `example_keyed_words` (the same draws before the interleave, as the XLA:CPU kernels take them: they
interleave inside their own fused loops) and with `dropout_keep_bits` (one seed per layer, before #56). They
alternate, `--rounds` times, in one process; the result,
`bench/results/dropout_bits-<size>.json`, holds each round's milliseconds, the medians and the machine. Read it
beside a step's time (`bench.step_compare`): a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import tensorflow as tf

from bench.step_bench.workload import BATCH, SEQ_LENGTH
from electra_tf.config import get_config
from electra_tf.model.example_dropout import example_streams
from electra_tf.ops.random_bits import dropout_keep_bits, example_keyed_bits, example_keyed_words
from electra_tf.text.manifest import write_text_atomic
from experiments.provenance import machine_line

ROOT = Path(__file__).resolve().parents[1]


def mask_shapes(size: str) -> list[tuple]:
    """The shapes of one step's dropout inputs (discriminator and generator, embeddings included)."""
    config = get_config(size, max_seq_length=SEQ_LENGTH)
    batch, seq = BATCH[size], SEQ_LENGTH
    shapes = []
    for encoder in (config.discriminator, config.generator):
        shapes.append((batch, seq, config.embedding_size))
        for _ in range(encoder.num_layers):
            shapes += [(batch, encoder.num_heads, seq, seq), (batch, seq, encoder.hidden_size),
                       (batch, seq, encoder.hidden_size)]
    return shapes


def drawing_functions(shapes):
    """tf.functions drawing every mask of `shapes`: (keyed by the example, one seed per layer)."""
    batch = shapes[0][0]

    @tf.function
    def keyed(step):
        streams = example_streams(0, step, tf.range(batch))
        return [tf.reduce_sum(tf.cast(example_keyed_bits(tf.zeros(s), streams, i), tf.int32))
                for i, s in enumerate(shapes)]

    @tf.function
    def keyed_words(step):  # what the XLA:CPU kernels take: the interleave happens inside their fusions
        streams = example_streams(0, step, tf.range(batch))
        return [tf.add_n([tf.reduce_sum(tf.cast(w, tf.int32)) for w in example_keyed_words(tf.zeros(s), streams, i)[:4]])
                for i, s in enumerate(shapes)]

    @tf.function
    def per_layer(step):
        return [tf.reduce_sum(tf.cast(dropout_keep_bits(tf.zeros(s), tf.stack([i, tf.cast(step, tf.int32)])),
                                      tf.int32)) for i, s in enumerate(shapes)]

    return {"keyed_by_example": keyed, "keyed_words": keyed_words, "per_layer_seed": per_layer}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=sorted(BATCH))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    shapes = mask_shapes(args.size)
    functions = drawing_functions(shapes)
    for fn in functions.values():
        fn(tf.constant(0, tf.int64))  # trace and compile
    ms = {name: [] for name in functions}
    for round_ in range(args.rounds):
        order = list(functions) if round_ % 2 == 0 else list(reversed(functions))
        for name in order:
            start = time.perf_counter()
            [t.numpy() for t in functions[name](tf.constant(round_ + 1, tf.int64))]
            ms[name].append(1e3 * (time.perf_counter() - start))
    result = {"size": args.size, "batch": BATCH[args.size], "seq_length": SEQ_LENGTH, "machine": machine_line(),
              "command": f"python -m bench.dropout_bits_bench --size={args.size} --rounds={args.rounds}",
              "elements": sum(int(tf.reduce_prod(s)) for s in shapes), "masks": len(shapes), "ms": ms,
              "median_ms": {name: statistics.median(v) for name, v in ms.items()}}
    out = ROOT / "bench" / "results" / f"dropout_bits-{args.size}.json"
    write_text_atomic(out, json.dumps(result, indent=1) + "\n")
    print(f"{result['masks']} masks, {result['elements'] / 1e6:.1f}M elements: "
          + ", ".join(f"{name} {value:.0f} ms" for name, value in result["median_ms"].items()) + f"; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
