#!/usr/bin/env bash
# What forward ahead buys a pstrain.torch worker in async and SSP: the
# seed's CNN (benchmarks/pytorch_frontend_train.py: batch 128, SGD with
# momentum 0.5, one thread a worker) for STEPS steps a worker, each mode
# with and without DistributedOptimizer(forward_ahead=True), alternately
# for ROUNDS rounds (each round's order rotates), the same updates either
# way. Forward ahead: step() sends the gradient and returns; the next step
# computes on the parameters the model holds while the reply comes in, so
# each gradient is one update staler. Reported beside the speed: the test
# accuracy after the run and the pushes' staleness (summary.json).
#
# Prints one line per run, then per mode the medians:
#   RESULT bench=forward_ahead round=1 mode=async ahead=1 model=cnn
#       images_per_sec=N step_ms=T test_accuracy=A mean_staleness=S
#       max_staleness=M load1=L security=curve
#   SUMMARY mode=async plain_median=N ahead_median=N speedup=R plain_step_ms=T
#       ahead_step_ms=T plain_accuracy=A ahead_accuracy=A plain_staleness=S
#       ahead_staleness=S rounds=K
# (step_ms: the script's median step, from zero_grad to step()'s return;
# the mlp's only, nan for the cnn)
#
# MODEL=mlp: instead, benchmarks/step_overhead_train.py's MLP of 59,635
# parameters at batch 64 on fixed synthetic batches (a step whose wire is
# most of it; no accuracy), with the median step in ms.
#
# Usage: benchmarks/forward_ahead.sh [ROUNDS]      (default 3)
# Environment: BUILD_DIR (default build), PYTHON (default /usr/bin/python3,
# Debian's python3-torch), CLUSTER (default cluster_specs/local_1ps_1w.json),
# MODES ("async ssp"; ssp at --staleness=2), MODEL (cnn or mlp), STEPS (cnn
# 469: one epoch of real MNIST at batch 128 for one worker; mlp 1500),
# SECURITY=curve|insecure (curve), LR (0.01). Needs a build with
# libpstrain.so (tools/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD_DIR:-$root/build}/bin
python=${PYTHON:-/usr/bin/python3}
rounds=${1:-3}
model=${MODEL:-cnn}
case $model in
  cnn) steps=${STEPS:-469} ;;
  mlp) steps=${STEPS:-1500} ;;
  *) echo "forward_ahead: error: MODEL=$model (cnn or mlp)" >&2; exit 2 ;;
esac
cluster=${CLUSTER:-$root/cluster_specs/local_1ps_1w.json}
security=${SECURITY:-curve}
lr=${LR:-0.01}
read -r -a modes <<< "${MODES:-async ssp}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

bench=forward_ahead
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
need_torch "$python"
need_build
[[ -f $cluster ]] || die "no cluster spec $cluster"

flags=()
[[ $security == insecure ]] && flags=(--insecure)

# run MODE AHEAD ROUND
run() {
  local mode=$1 ahead=$2 round=$3 dir="$out/$1-$2-$3" script
  if [[ $model == cnn ]]; then
    script=("$root/benchmarks/pytorch_frontend_train.py" --average_gradients=0
            --forward_ahead="$ahead")
  else
    script=("$root/benchmarks/step_overhead_train.py")
    ((ahead)) && script+=(--forward_ahead)
  fi
  OMP_NUM_THREADS=1 "$bin/pstrain" launch --cluster_spec="$cluster" --free_ports --mode="$mode" \
    --staleness=2 --max_steps="$steps" --epochs=100 --batch_size=128 --lr="$lr" --device=cpu \
    --echo=none --log_every_steps=0 --run_dir="$dir" --data_dir="$root/data/mnist" \
    "${flags[@]}" -- "$python" "${script[@]}" >"$dir.log" 2>&1 ||
    { tail -n 30 "$dir.log" >&2; die "$mode (forward ahead $ahead) failed"; }
  field() { summary_field "$dir" "$1"; }
  local step_ms accuracy
  step_ms=$(grep -rhs -o 'STEP_MS median=[0-9.]*' "$dir/logs" | head -n 1 | cut -d= -f2)
  accuracy=$(field final_test_accuracy)
  [[ $model == mlp ]] && accuracy=nan
  printf 'RESULT bench=forward_ahead round=%s mode=%s ahead=%s model=%s images_per_sec=%.0f step_ms=%s test_accuracy=%s mean_staleness=%.3f max_staleness=%s load1=%s security=%s\n' \
    "$round" "$mode" "$ahead" "$model" "$(field train_images_per_sec)" "${step_ms:-nan}" \
    "$accuracy" "$(field mean_staleness)" "$(field max_staleness)" "$(load1)" "$security"
}

for round in $(seq "$rounds"); do
  for mode in "${modes[@]}"; do
    if ((round % 2)); then run "$mode" 0 "$round"; run "$mode" 1 "$round"
    else run "$mode" 1 "$round"; run "$mode" 0 "$round"; fi
  done
done | tee "$out/results"

"$python" - "$out/results" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    runs.setdefault((f["mode"], f["ahead"]), []).append(f)
for mode in dict.fromkeys(m for m, _ in runs):
    med = {a: {k: statistics.median(float(r[k]) for r in runs[(mode, a)])
               for k in ("images_per_sec", "test_accuracy", "mean_staleness", "step_ms")}
           for a in ("0", "1")}
    print(f"SUMMARY mode={mode} plain_median={med['0']['images_per_sec']:.0f} "
          f"ahead_median={med['1']['images_per_sec']:.0f} "
          f"speedup={med['1']['images_per_sec'] / med['0']['images_per_sec']:.2f} "
          f"plain_step_ms={med['0']['step_ms']:.3f} ahead_step_ms={med['1']['step_ms']:.3f} "
          f"plain_accuracy={med['0']['test_accuracy']:.4f} "
          f"ahead_accuracy={med['1']['test_accuracy']:.4f} "
          f"plain_staleness={med['0']['mean_staleness']:.2f} "
          f"ahead_staleness={med['1']['mean_staleness']:.2f} rounds={len(runs[(mode, '0')])}")
PY
