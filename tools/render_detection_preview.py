"""Renders a run's TensorBoard detection preview (`rtd/*` summaries) as a PNG, for the README.

    python tools/render_detection_preview.py --model_dir=electra_demo/model_tiny --output=docs/tensorboard_rtd.png

Reads the newest step's `rtd/example` table and the `rtd/p_replaced/{original,replaced}` histograms from
`<model_dir>/train/events.*` and draws what TensorBoard's Text and Histograms tabs show: the two probability
distributions, and the example's tokens shaded by p(replaced) with replaced tokens outlined. Needs matplotlib
(requirements-bench.txt).
"""

import argparse
import glob
import os

import numpy as np
import tensorflow as tf


def read_preview(model_dir: str, step=None) -> dict:
    """{step: {"example": markdown, "original": [[left, right, count]], "replaced": ...}}."""
    found = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "train", "events.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if not value.tag.startswith("rtd/"):
                    continue
                entry = found.setdefault(event.step, {})
                array = tf.make_ndarray(value.tensor)
                if value.tag == "rtd/example":
                    entry["example"] = array.item().decode()
                else:
                    entry[value.tag.rsplit("/", 1)[-1]] = array
    if not found:
        raise SystemExit(f"no rtd/* summaries under {model_dir}/train (train with an RTD objective)")
    chosen = step if step is not None else max(s for s, e in found.items() if len(e) == 3)
    return chosen, found[chosen]


def parse_table(markdown: str) -> list[tuple[str, str, bool, float]]:
    """(original, shown, replaced, p) per row of the example table."""
    rows = []
    for line in markdown.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        replaced = cells[2].endswith("(replaced)")
        shown = cells[2].replace("(replaced)", "").replace("**", "").strip()
        rows.append((cells[1], shown, replaced, float(cells[3])))
    return rows


def render(step, preview, output):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(12, 7))
    hist_ax = fig.add_axes([0.06, 0.62, 0.4, 0.32])
    for name, color in (("original", "tab:blue"), ("replaced", "tab:red")):
        buckets = preview[name]
        if len(buckets):
            centers, counts = (buckets[:, 0] + buckets[:, 1]) / 2, buckets[:, 2]
            hist_ax.bar(centers, counts / max(counts.sum(), 1), width=buckets[:, 1] - buckets[:, 0],
                        alpha=0.6, color=color, label=f"{name} tokens")
    hist_ax.set_xlabel("discriminator p(replaced)")
    hist_ax.set_ylabel("share of tokens")
    hist_ax.set_title(f"rtd/p_replaced at step {step}")
    hist_ax.legend()

    text_ax = fig.add_axes([0.02, 0.02, 0.96, 0.52])
    text_ax.axis("off")
    text_ax.set_title("rtd/example: the discriminator's input, shaded by p(replaced); outlined = replaced "
                      "(original after the arrow)", fontsize=10, loc="left")
    x, y = 0.0, 0.95
    cmap = plt.get_cmap("Reds")
    for original, shown, replaced, p in parse_table(preview["example"]):
        label = f"{shown}→{original}" if replaced else shown
        width = 0.011 * len(label) + 0.012
        if x + width > 1.0:
            x, y = 0.0, y - 0.09
        text_ax.text(x, y, label, fontsize=9, family="monospace", va="top",
                     bbox=dict(boxstyle="round,pad=0.2", facecolor=cmap(0.1 + 0.8 * p),
                               edgecolor="black" if replaced else "none", linewidth=1.2))
        x += width
    fig.savefig(output, dpi=90)
    return output


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--step", type=int, default=None)
    args = parser.parse_args()
    step, preview = read_preview(args.model_dir, args.step)
    print(render(step, preview, args.output))


if __name__ == "__main__":
    main()
