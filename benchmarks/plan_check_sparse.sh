#!/usr/bin/env bash
# `pstrain plan` against measurement for a script's job with embedding
# tables: the DLRM example (examples/pytorch/dlrm.py, 26 tables as
# pst.Embedding) on tools/criteo_synth.py's data. Calibration runs as
# plan_check.sh makes them (1 ps + 1 worker, sync, at the start and after
# each pass; 2 ps + 1 worker, another request size; 1 ps + 4 workers, what
# sharing a core costs; 3 ps + 2 workers, what a full host adds to the
# compute), then held-out runs of other worker and ps counts
# and the other mode, each PASSES times, and `pstrain plan --check`'s table
# of cell, predicted, measured and error. A script's bytes a step are what
# its calibration runs' ps tasks counted (launcher/plan/plan_calibration.h).
# About five minutes on 2 cores a pass.
#
# Usage: benchmarks/plan_check_sparse.sh [OUT]     (default runs/plan-check-sparse-<time>)
# Environment: STEPS (300) steps per worker, PASSES (1), DATA_DIR (made with
# SCALE 0.01 when it holds no data), PSTRAIN (build/bin/pstrain), PYTHON
# (/usr/bin/python3).
# Output: OUT/<cell>/ (each run), OUT/check/check.md (the table, also printed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=plan_check_sparse
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
out=${1:-$root/runs/plan-check-sparse-$(date +%Y%m%d-%H%M%S)}
pstrain=${PSTRAIN:-$root/build/bin/pstrain}
python=${PYTHON:-/usr/bin/python3}
steps=${STEPS:-300}
passes=${PASSES:-1}
data=${DATA_DIR:-$out/data}
mkdir -p "$out/specs"
if [[ ! -f $data/meta.json ]]; then
  "$python" "$root/tools/criteo_synth.py" --out "$data" --scale="${SCALE:-0.01}" \
    --train=400000 --test=50000 > "$out/data.log" 2>&1
fi

spec() { local_spec "$out/specs/ps$1_w$2.json" "$1" "$2"; }  # spec PS WORKERS

calibration=() held_out=()
run() {  # run KIND NAME MODE PS WORKERS STEPS
  local kind=$1 name=$2 mode=$3 ps=$4 workers=$5 n=$6
  echo "plan_check_sparse: $name: $mode, $ps ps, $workers worker(s), $n steps" >&2
  "$pstrain" launch --cluster_spec="$(spec "$ps" "$workers")" --free_ports --echo=none \
      --mode="$mode" --run_dir="$out/$name" -- "$python" "$root/examples/pytorch/dlrm.py" \
      --data_dir="$data" --max_steps="$n" > "$out/$name.log" 2>&1 ||
      { echo "plan_check_sparse: $name failed; see $out/$name.log" >&2; exit 1; }
  if [[ $kind == calibration ]]; then calibration+=("$out/$name"); else held_out+=("$out/$name"); fi
}

run calibration cal_a sync 1 1 "$steps"
run calibration cal_ps2 sync 2 1 "$steps"
run calibration cal_crowded sync 1 4 $((steps * 2 / 3))
run calibration cal_full sync 3 2 "$steps"
for pass in $(seq "$passes"); do
  run held_out sync_ps2_w2.$pass sync 2 2 "$steps"
  run held_out sync_ps1_w2.$pass sync 1 2 "$steps"
  run held_out sync_ps4_w2.$pass sync 4 2 "$steps"
  run held_out async_ps2_w2.$pass async 2 2 "$steps"
  run held_out async_ps1_w2.$pass async 1 2 "$steps"
  run calibration cal_$pass sync 1 1 "$steps"
done
join() { local IFS=,; echo "$*"; }
echo "plan_check_sparse: $PWD\$ $pstrain plan --calibrate=$(join "${calibration[@]}") --check=<the held-out runs> --out=$out/check" >&2
"$pstrain" plan --calibrate="$(join "${calibration[@]}")" --check="$(join "${held_out[@]}")" --out="$out/check"
