#!/usr/bin/env bash
# Time to a test accuracy against the worker count, in each mode, with the
# defaults: `pstrain scale` once per mode, then one table (Markdown, on
# stdout and in OUT/README.md) and one plot (OUT/time_to_accuracy.png) of
# all modes, from the reports' own figures (training seconds, evaluation
# pauses charged as the reports charge them).
#
#   benchmarks/time_to_accuracy.sh [WORKERS] [PS] [EPOCHS] [-- training flags]
#   benchmarks/time_to_accuracy.sh 1,2,4,8 2 10                # OUT, MODES, TARGET
#   benchmarks/time_to_accuracy.sh 1,2,4,8,12 2 8 -- --device=cpu
#
# Every task a process on this machine; about 6 minutes on 2 cores for the
# defaults (1-8 workers, 2 ps, 10 epochs: mnist_cnn passes 97% in the
# sixth; sync, async and ssp:2).
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${1:-1,2,4,8}
ps=${2:-2}
epochs=${3:-10}
shift $(( $# < 3 ? $# : 3 ))
[[ ${1:-} == -- ]] && shift
out=${OUT:-runs/time_to_accuracy}
modes=${MODES:-sync,async,ssp:2}
target=${TARGET:-0.97}
bin=build/bin/pstrain
[[ -x $bin ]] || { echo "build first: $bin is missing" >&2; exit 2; }
mkdir -p "$out"

for m in ${modes//,/ }; do
  flags=(--mode="${m%%:*}")
  [[ $m == *:* ]] && flags+=(--staleness="${m#*:}")
  "$bin" scale --workers="$workers" --ps="$ps" --epochs="$epochs" --target_accuracy="$target" \
    --out="$out/${m/:/-}" "${flags[@]}" "$@" >"$out/${m/:/-}.log" 2>&1 \
    || { echo "pstrain scale failed: $out/${m/:/-}.log" >&2; exit 1; }
done

python3 - "$out" "$modes" "$target" "$ps" "$epochs" <<'PY'
import os, subprocess, sys
out, modes, target, ps, epochs = sys.argv[1], sys.argv[2].split(","), float(sys.argv[3]), sys.argv[4], sys.argv[5]
pct = "%g%%" % (target * 100)
rows = {}  # (mode, workers) -> {column: value}
for m in modes:
    lines = [l for l in open(os.path.join(out, m.replace(":", "-"), "report.md")) if l.startswith("| ")]
    header = [c.strip() for c in lines[0].strip().strip("|").split("|")]
    for l in lines[2:]:
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        if len(cells) != len(header) or cells[0] != ps:
            continue
        rows[(m, int(cells[1]))] = dict(zip(header, cells))
workers = sorted({w for _, w in rows})
table = ["| workers | " + " | ".join("%s: time to %s (final acc, lr, images/s)" % (m, pct) for m in modes) + " |",
         "| --- |" + " --- |" * len(modes)]
for w in workers:
    cells = []
    for m in modes:
        r = rows.get((m, w))
        cells.append("-" if r is None else "%s (%s, %s, %s)" % (
            r["time to " + pct], r["final test acc"], r["lr"], r["train images/s"]))
    table.append("| %d | %s |" % (w, " | ".join(cells)))
text = "\n".join(table) + "\n"
print(text, end="")
with open(os.path.join(out, "time_to_accuracy.dat"), "w") as f:
    for i, m in enumerate(modes):
        if i:
            f.write("\n\n")
        f.write("# %s\n" % m)
        for w in workers:
            t = rows.get((m, w), {}).get("time to " + pct, "not reached")
            if t.endswith(" s"):
                f.write("%d %s\n" % (w, t[:-2]))
plot = ["set terminal pngcairo size 800,500", "set output 'time_to_accuracy.png'",
        "set title 'Training seconds to %s test accuracy, %s ps, defaults of each mode'" % (pct, ps),
        "set xlabel 'workers'", "set ylabel 'training seconds to %s'" % pct, "set key top right",
        "set logscale x 2", "set xtics (%s)" % ", ".join(str(w) for w in workers),
        "set xrange [%g:%g]" % (workers[0] / 1.25, workers[-1] * 1.25),
        "set yrange [0:*]", "set grid",
        "plot " + ", ".join("'time_to_accuracy.dat' index %d with linespoints lw 2 title '%s'"
                            % (i, m) for i, m in enumerate(modes))]
with open(os.path.join(out, "time_to_accuracy.gp"), "w") as f:
    f.write("\n".join(plot) + "\n")
try:
    made = subprocess.call(["gnuplot", "time_to_accuracy.gp"], cwd=out) == 0
except OSError:  # no gnuplot: the table and the .dat/.gp files still stand
    made = False
with open(os.path.join(out, "README.md"), "w") as f:
    f.write("# Time to %s test accuracy, %s ps, %s epochs\n\n%s\n" % (pct, ps, epochs, text))
    f.write("![time to accuracy](time_to_accuracy.png)\n" if made else "No plot: gnuplot failed.\n")
PY
