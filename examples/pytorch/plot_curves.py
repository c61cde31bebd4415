"""Validation curves of transformer_lm.py runs (their --curve CSVs): loss
and perplexity against step and against wall time, one line per run.

    python3 examples/pytorch/plot_curves.py --out=curves.png \\
        "one process=single.csv" "pstrain 1 ps + 2 workers=pstrain.csv"

Each argument is LABEL=FILE, or FILE (labelled by its name). Needs
matplotlib (Debian: python3-matplotlib).
"""

import argparse
import csv
import os
import sys


def read_curve(path):
    """{column: [float, ...]} of a --curve CSV."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError("%s: no evaluations" % path)
    return {k: [float(r[k]) for r in rows] for k in rows[0]}


def parse_run(arg):
    """(label, path) of LABEL=FILE or FILE."""
    label, sep, path = arg.rpartition("=")
    if not sep or os.path.exists(arg):
        return os.path.splitext(os.path.basename(arg))[0], arg
    return label, path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="LABEL=FILE or FILE")
    parser.add_argument("--out", default="curves.png")
    parser.add_argument("--time", choices=["wall_s", "train_s"], default="wall_s",
                        help="the x axis of the right column: wall time, or training time "
                             "without the evaluations")
    parser.add_argument("--title", default="transformer_lm.py: validation")
    args = parser.parse_args()
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except ImportError:
        sys.exit("plot_curves.py needs matplotlib (Debian: apt-get install python3-matplotlib)")

    runs = [(label, read_curve(path)) for label, path in map(parse_run, args.runs)]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharey="row")
    for label, curve in runs:
        for row, (key, name) in enumerate([("val_loss", "loss (nats/byte)"),
                                           ("perplexity", "perplexity")]):
            for col, x in enumerate(["step", args.time]):
                ax = axes[row][col]
                ax.plot(curve[x], curve[key], marker=".", label=label)
                ax.set_xlabel("step" if x == "step" else
                              "wall time (s)" if x == "wall_s" else "training time (s)")
                ax.set_ylabel("validation " + name)
                ax.grid(True, alpha=0.3)
    for ax in axes[1]:
        ax.set_yscale("log")
    axes[0][0].legend()
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print("wrote %s (%s)" % (args.out, ", ".join(label for label, _ in runs)))


if __name__ == "__main__":
    main()
