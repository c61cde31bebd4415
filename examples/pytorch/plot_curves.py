"""Validation curves of transformer_lm.py runs (their --curve CSVs): loss
against step and against training time, one line per run, drawn by
gnuplot (Debian's gnuplot-nox, which tools/setup.sh installs).

    python3 examples/pytorch/plot_curves.py --out=curves.png \\
        "one process=single.csv" "pstrain 1 ps + 2 workers=pstrain.csv"

Each argument is LABEL=FILE, or FILE (labelled by its name).
"""

import argparse
import csv
import os
import shutil
import subprocess
import sys


def check_curve(path):
    """A --curve CSV with at least one evaluation, or ValueError."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"step", "train_s", "val_loss"} <= set(rows[0]):
        raise ValueError("%s: not a --curve CSV with evaluations" % path)


def parse_run(arg):
    """(label, path) of LABEL=FILE or FILE."""
    label, sep, path = arg.rpartition("=")
    if not sep or os.path.exists(arg):
        return os.path.splitext(os.path.basename(arg))[0], arg
    return label, path


def script(runs, out, title):
    """gnuplot's commands: two panels, val loss by step and by training time."""
    def plots(x):
        return ", ".join("'%s' using '%s':'val_loss' with linespoints title '%s'"
                         % (path.replace("'", "''"), x, label.replace("'", "''"))
                         for label, path in runs)
    return "\n".join([
        "set terminal pngcairo size 1200,450 font 'sans,10' noenhanced",
        "set output '%s'" % out.replace("'", "''"),
        "set datafile separator ','",
        "set key autotitle columnhead",
        "set multiplot layout 1,2 title '%s'" % title.replace("'", "''"),
        "set grid",
        "set ylabel 'validation loss (nats per byte)'",
        "set xlabel 'step'",
        "plot " + plots("step"),
        "set xlabel 'training seconds (evaluations left out)'",
        "plot " + plots("train_s"),
        "unset multiplot",
    ]) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="LABEL=FILE or FILE, a --curve CSV each")
    p.add_argument("--out", default="curves.png")
    p.add_argument("--title", default="transformer_lm.py: validation loss")
    args = p.parse_args()
    if shutil.which("gnuplot") is None:
        sys.exit("plot_curves.py: gnuplot is not installed (Debian: apt-get install gnuplot-nox)")
    runs = [parse_run(a) for a in args.runs]
    try:
        for _, path in runs:
            check_curve(path)
    except (OSError, ValueError) as e:
        sys.exit("plot_curves.py: %s" % e)
    subprocess.run(["gnuplot"], input=script(runs, args.out, args.title), text=True, check=True)
    print("wrote %s" % args.out)


if __name__ == "__main__":
    main()
