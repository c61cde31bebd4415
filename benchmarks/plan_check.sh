#!/usr/bin/env bash
# `pstrain plan` against measurement: short calibration runs (1 ps + 1
# worker, sync, of mnist_cnn and cnn_large, at the start and after each
# pass so that the machine's drift is in them; and 1 ps + 4 workers, for what
# sharing a core costs), then held-out runs of other worker counts, ps
# counts, the other mode and other links, each cell PASSES times, and a
# table of cell, predicted, measured and error (`pstrain plan --check`).
# About eight minutes on 2 cores with two passes. The runs with --isolate=netns links need root; without
# it they are left out, and the script says so.
#
# Usage: benchmarks/plan_check.sh [OUT]     (default runs/plan-check-<time>)
# Environment:
#   STEPS_mnist_cnn=400 STEPS_cnn_large=40   steps per worker (fewer for slow cells)
#   PASSES=2                                 runs of each held-out cell
#   PSTRAIN=build/bin/pstrain
# Output: OUT/<cell>/ (each run), OUT/check/check.md (the table, also printed).
# docs/planning.md describes the model; benchmarks/log/plan_check.md holds a run of this script.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=plan_check
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
out=${1:-$root/runs/plan-check-$(date +%Y%m%d-%H%M%S)}
pstrain=${PSTRAIN:-$root/build/bin/pstrain}
mnist_steps=${STEPS_mnist_cnn:-400}
large_steps=${STEPS_cnn_large:-40}
passes=${PASSES:-2}
mkdir -p "$out/specs"
netns=yes
[[ $(id -u) -eq 0 ]] || { netns=no; echo "plan_check: not root: the --isolate=netns cells are left out" >&2; }

spec() { local_spec "$out/specs/ps$1_w$2.json" "$1" "$2"; }  # spec PS WORKERS

calibration=() held_out=()
run() {  # run KIND NAME MODEL MODE PS WORKERS STEPS [LINK_RATE]
  local kind=$1 name=$2 model=$3 mode=$4 ps=$5 workers=$6 steps=$7 rate=${8:-}
  local flags=()
  if [[ -n $rate ]]; then
    [[ $netns == yes ]] || return 0
    flags=(--isolate=netns --link_rate="$rate")
  fi
  echo "plan_check: $name: $model $mode, $ps ps, $workers worker(s), $steps steps${rate:+, $rate netns}" >&2
  "$pstrain" launch --cluster_spec="$(spec "$ps" "$workers")" --free_ports --echo=none \
      --model="$model" --mode="$mode" --epochs=1 --max_steps="$steps" --eval_every_steps=0 \
      --data_dir="$root/data/mnist" --run_dir="$out/$name" "${flags[@]}" > "$out/$name.log" 2>&1 ||
      { echo "plan_check: $name failed; see $out/$name.log" >&2; exit 1; }
  if [[ $kind == calibration ]]; then calibration+=("$out/$name"); else held_out+=("$out/$name"); fi
}

# Calibration: 1 ps + 1 worker of each model, at the start and after each
# pass, 4 workers on the 2 cores (what sharing a core costs), and 3 workers
# on 2 ps (how evenly the scheduler spreads workers that outnumber the
# cores unevenly).
run calibration cal_mnist_a mnist_cnn sync 1 1 "$mnist_steps"
run calibration cal_large_a cnn_large sync 1 1 "$large_steps"
run calibration cal_mnist_crowded mnist_cnn sync 1 4 "$mnist_steps"
run calibration cal_large_crowded cnn_large sync 1 4 $((large_steps * 3 / 4))
run calibration cal_mnist_uneven mnist_cnn sync 2 3 "$mnist_steps"
run calibration cal_large_uneven cnn_large sync 2 3 $((large_steps * 3 / 4))
# Another worker count, the other mode, another ps count, another link, for
# mnist_cnn (87 KB each way a step) and cnn_large (4.8 MB); each cell in
# every pass, so that a cell's measurement is the mean of PASSES runs.
for pass in $(seq "$passes"); do
  run held_out mnist_sync_ps1_w2.$pass mnist_cnn sync 1 2 "$mnist_steps"
  run held_out mnist_sync_ps1_w3.$pass mnist_cnn sync 1 3 "$mnist_steps"
  run held_out mnist_sync_ps2_w2.$pass mnist_cnn sync 2 2 "$mnist_steps"
  run held_out mnist_async_ps1_w1.$pass mnist_cnn async 1 1 "$mnist_steps"
  run held_out mnist_async_ps1_w2.$pass mnist_cnn async 1 2 "$mnist_steps"
  run held_out mnist_async_ps1_w4.$pass mnist_cnn async 1 4 "$mnist_steps"
  run held_out mnist_sync_ps1_w2_100mbit.$pass mnist_cnn sync 1 2 "$mnist_steps" 100mbit
  run held_out large_async_ps1_w1.$pass cnn_large async 1 1 "$large_steps"
  run held_out large_sync_ps1_w2.$pass cnn_large sync 1 2 "$large_steps"
  run held_out large_sync_ps2_w2.$pass cnn_large sync 2 2 "$large_steps"
  run held_out large_async_ps1_w2.$pass cnn_large async 1 2 "$large_steps"
  run held_out large_async_ps1_w4.$pass cnn_large async 1 4 $((large_steps * 3 / 4))
  run held_out large_sync_ps1_w1_1gbit.$pass cnn_large sync 1 1 "$large_steps" 1gbit
  run held_out large_sync_ps1_w1_100mbit.$pass cnn_large sync 1 1 $((large_steps * 3 / 10)) 100mbit
  run held_out large_sync_ps1_w2_1gbit.$pass cnn_large sync 1 2 "$large_steps" 1gbit
  run held_out large_async_ps1_w2_1gbit.$pass cnn_large async 1 2 "$large_steps" 1gbit
  run held_out large_sync_ps2_w2_1gbit.$pass cnn_large sync 2 2 "$large_steps" 1gbit
  # Several workers sharing a ps's limited link.
  run held_out mnist_sync_ps1_w4_100mbit.$pass mnist_cnn sync 1 4 "$mnist_steps" 100mbit
  run held_out mnist_async_ps1_w4_100mbit.$pass mnist_cnn async 1 4 "$mnist_steps" 100mbit
  run held_out mnist_sync_ps1_w4_20mbit.$pass mnist_cnn sync 1 4 $((mnist_steps * 3 / 8)) 20mbit
  run held_out large_sync_ps2_w3_300mbit.$pass cnn_large sync 2 3 $((large_steps * 3 / 8)) 300mbit
  # Pushes leaving during backward (--overlap, 2 ps) on a limited link.
  run held_out large_sync_ps2_w2_300mbit.$pass cnn_large sync 2 2 $((large_steps * 3 / 8)) 300mbit
  # The host's speed drifts: calibrate again between the passes.
  run calibration cal_mnist_$pass mnist_cnn sync 1 1 "$mnist_steps"
  run calibration cal_large_$pass cnn_large sync 1 1 "$large_steps"
done
join() { local IFS=,; echo "$*"; }
echo "plan_check: $PWD\$ $pstrain plan --calibrate=$(join "${calibration[@]}") --check=<the held-out runs> --out=$out/check" >&2
"$pstrain" plan --calibrate="$(join "${calibration[@]}")" --check="$(join "${held_out[@]}")" --out="$out/check"
