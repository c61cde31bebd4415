#!/usr/bin/env bash
# Final test accuracy of mnist_cnn after one epoch, with the default learning
# rate and momentum of each mode, for several worker counts and seeds: the
# table of docs/training.md ("Default learning rate and momentum").
#
#   benchmarks/lr_by_mode.sh [WORKERS] [SEEDS] [MODES] [-- extra training flags]
#   benchmarks/lr_by_mode.sh 1,2,4,8,12,16 1,2,3,4 sync,async,ssp:2
#
# 1 ps up to 1 worker, 2 up to 4, 4 beyond; every task a process on this
# machine. Prints one Markdown row per worker count: mean (lowest-highest)
# over the seeds, per mode, with the learning rate and (async, ssp) the mean
# staleness in updates; the run directories and their output (DIR.log)
# stay under $OUT
# (default /tmp/lr_by_mode).
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${1:-1,2,4,8,12}
seeds=${2:-1,2,3,4}
modes=${3:-sync,async,ssp:2}
shift $(( $# < 3 ? $# : 3 ))
[[ ${1:-} == -- ]] && shift
out=${OUT:-/tmp/lr_by_mode}
bin=build/bin/pstrain
[[ -x $bin ]] || { echo "build first: $bin is missing" >&2; exit 2; }
mkdir -p "$out/specs"

spec() {  # spec WORKERS -> path of a local spec with 1, 2 or 4 ps
  local w=$1 ps=4
  ((w <= 4)) && ps=2
  ((w == 1)) && ps=1
  local f="$out/specs/${ps}ps_${w}w.json"
  python3 - "$w" "$ps" "$f" <<'PY'
import json, sys
w, ps, f = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
json.dump({"cluster": {"worker": ["localhost:%d" % (3000 + i) for i in range(w)],
                       "ps": ["localhost:%d" % (3200 + i) for i in range(ps)]}}, open(f, "w"))
PY
  echo "$f"
}

header="| workers |"
rule="| --- |"
for m in ${modes//,/ }; do header+=" $m |"; rule+=" --- |"; done
echo "$header"
echo "$rule"
for w in ${workers//,/ }; do
  f=$(spec "$w")
  row="| $w |"
  for m in ${modes//,/ }; do
    runs=()  # "accuracy mean_staleness learning_rate" of each run, read as it ends
    for s in ${seeds//,/ }; do
      d="$out/${m/:/}_${w}w_seed$s"
      flags=(--mode="${m%%:*}")
      [[ $m == *:* ]] && flags+=(--staleness="${m#*:}")
      "$bin" launch --cluster_spec="$f" --epochs=1 --seed="$s" --run_dir="$d" --echo=none \
        --free_ports "${flags[@]}" "$@" >"$d.log" 2>&1 || { echo "run failed: $d.log" >&2; exit 1; }
      runs+=("$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(s["final_test_accuracy"], s["mean_staleness"], s["learning_rate"])' "$d/summary.json")")
    done
    cell=$(python3 -c '
import sys
mode, runs = sys.argv[1], [[float(x) for x in r.split()] for r in sys.argv[2:]]
a = [r[0] for r in runs]
cell = "%.4f (%.4f-%.4f), lr %g" % (sum(a) / len(a), min(a), max(a), runs[-1][2])
if mode != "sync":
    cell += ", staleness %.1f" % (sum(r[1] for r in runs) / len(runs))
print(cell)' "${m%%:*}" "${runs[@]}")
    row+=" $cell |"
  done
  echo "$row"
done
