#!/usr/bin/env bash
# `pstrain plan` against the 16-core host's matrix (docs/reports/scaling_16core_2026-11-27/README.md),
# from the run directories in docs/reports/scaling_16core_2026-11-27/runs_16core.tar.gz. Their
# launcher recorded no task_cpu.csv and no host cores, so the costs come
# from the step logs (`--ps_share`, docs/planning.md) and the host's 16
# cores are given (`--runs_host_cores`). No run is made: a few seconds.
#
#   calibration  every 1-worker CPU cell: mnist_cnn and cnn_large, sync and
#                async, 1, 2 and 4 ps (12 runs)
#   held out     every other CPU cell: 2, 4, 8 and 12 workers (48 runs)
#   GPU          the GPU cells, calibrated from their own 1-worker cells
#   plans        64 workers at 10 Gbit/s, a host per task: cnn_large, and a
#                25M-parameter model with cnn_large's compute
#
# Usage: benchmarks/plan_check_16core.sh [OUT]     (default runs/plan-16core)
# Environment: PSTRAIN=build/bin/pstrain, PS_SHARE=0.5
# Output: OUT/check/check.md (the CPU table, also printed), OUT/check_gpu/,
# OUT/plan-64/plan.md, OUT/plan-25m/plan.md; the runs under OUT/runs/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/runs/plan-16core}
pstrain=${PSTRAIN:-$root/build/bin/pstrain}
share=${PS_SHARE:-0.5}
mkdir -p "$out/runs"
tar xzf "$root/docs/reports/scaling_16core_2026-11-27/runs_16core.tar.gz" -C "$out/runs"
runs=$out/runs

cells() {  # cells DEVICE WORKER_COUNTS... -> comma-separated run directories
  local device=$1 w dir list=()
  shift
  for dir in "$runs/${device}"_*_{sync,async}; do
    for w in "$@"; do
      for p in 1 2 4; do [[ -d $dir/ps${p}_w$w ]] && list+=("$dir/ps${p}_w$w"); done
    done
  done
  local IFS=,
  echo "${list[*]}"
}

cal=$(cells cpu 1)
plan() { echo "plan_check_16core: pstrain plan $*" >&2; "$pstrain" plan --runs_host_cores=16 --ps_share="$share" "$@"; }

plan --calibrate="$cal" --check="$cal,$(cells cpu 2 4 8 12)" --out="$out/check"
plan --calibrate="$(cells gpu 1)" --check="$(cells gpu 1),$(cells gpu 2 4 8)" --out="$out/check_gpu" > /dev/null
plan --calibrate="$cal" --model=cnn_large --workers=1,2,4,8,16,32,64 --ps=1,2,4,8,16,32 \
    --placement=host_per_task --link_rate=10gbit --out="$out/plan-64"
plan --calibrate="$cal" --model=cnn_large --params=25000000 --workers=1,2,4,8,16,32,64 \
    --ps=4,8,16,32,64,128 --placement=host_per_task --link_rate=10gbit --out="$out/plan-25m"
