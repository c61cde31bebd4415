#!/usr/bin/env bash
# End-to-end training throughput of a local cluster in each update mode:
# real ps and worker processes over loopback TCP, real MNIST, the seed CNN.
# Prints one machine-readable line per mode:
#   RESULT bench=train spec=local_2ps_2w mode=sync steps=... images_per_sec=... test_accuracy=...
#
# Usage: benchmarks/train_throughput.sh [SPEC] [STEPS] [MODES...]
#   SPEC   cluster spec (default cluster_specs/local_2ps_2w.json)
#   STEPS  training steps per worker (default 235: one epoch at 2 workers x 128)
#   MODES  default: sync async
# Environment:
#   SECURITY="curve insecure"  run each mode with CURVE (a fresh job secret,
#                              the default) and/or --insecure, alternating,
#   ROUNDS=N                   N times over (default 1), to see the spread.
#   EXTRA_FLAGS="--ps_replicas=1"  more flags for every launch (printed as extra=).
# Needs a build (tools/setup.sh). Run it on a quiet machine: the figure is
# wall-clock throughput.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD_DIR:-$root/build}/bin
bench=train_throughput
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
spec=${1:-$root/cluster_specs/local_2ps_2w.json}
steps=${2:-235}
shift $(( $# > 2 ? 2 : $# )) || true
modes=("$@")
[[ ${#modes[@]} -eq 0 ]] && modes=(sync async)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

read -r -a securities <<< "${SECURITY:-curve}"
for round in $(seq "${ROUNDS:-1}"); do
  for mode in "${modes[@]}"; do
    for security in "${securities[@]}"; do
      flags=()
      [[ $security == insecure ]] && flags=(--insecure)
      read -r -a extra <<< "${EXTRA_FLAGS:-}"
      flags+=("${extra[@]}")
      dir="$out/$round-$mode-$security"
      "$bin/pstrain" launch --cluster_spec="$spec" --mode="$mode" --max_steps="$steps" --epochs=100 \
        --free_ports --device=cpu --echo=none --run_dir="$dir" --data_dir="$root/data/mnist" \
        "${flags[@]}" >/dev/null 2>&1
      field() { summary_field "$dir" "$1"; }
      printf 'RESULT bench=train spec=%s mode=%s security=%s extra=%s workers=%s ps=%s steps=%s images_per_sec=%.0f train_seconds=%.2f test_accuracy=%.4f mean_staleness=%.2f\n' \
        "$(basename "$spec" .json)" "$mode" "$security" "${EXTRA_FLAGS:-none}" "$(field num_workers)" "$(field num_ps)" \
        "$(field steps_per_worker)" "$(field train_images_per_sec)" "$(field train_seconds)" \
        "$(field final_test_accuracy)" "$(field mean_staleness)"
    done
  done
done
