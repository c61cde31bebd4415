#!/usr/bin/env bash
# The PyTorch frontend's speed: the seed's CNN trained through pstrain.torch
# (2 ps + 2 Python workers, sync) against PyTorch DDP (gloo, 2 processes)
# running the same model, and against the C++ worker (2 ps + 2 workers,
# sync): what the Python path costs. Alternately in one go for ROUNDS
# rounds (each round's order rotates), on the same cores.
#
#   torch:  pstrain launch ... -- python3 benchmarks/pytorch_frontend_train.py
#   ddp:    benchmarks/pytorch_cpu_train.py --world_size=2
#   cpp:    pstrain launch (the C++ worker's mnist_cnn)
#
# The same job for all three: the seed's CNN (mnist_cnn; the Python sides
# build it layer for layer, benchmarks/pytorch_cpu_train.py), batch 128 per
# worker, SGD lr 0.02 momentum 0.5, one thread per worker, STEPS steps per
# worker (235: one epoch of real MNIST). images/s: all workers' images over
# the first to the last training step (summary.json's train_images_per_sec;
# DDP's loop timed between barriers); start-up and evaluation are outside.
#
# Prints one line per run, then the medians and their ratios:
#   RESULT bench=pytorch_frontend round=1 system=torch images_per_sec=N
#       train_seconds=S test_accuracy=A load1=L security=insecure
#   SUMMARY torch_median=N ddp_median=N cpp_median=N torch_vs_ddp=R
#       torch_vs_ddp_range=LO-HI torch_vs_cpp=R rounds=K
#
# Usage: benchmarks/pytorch_frontend.sh [ROUNDS]     (default 3)
# Environment: BUILD_DIR (default build), PYTHON (default /usr/bin/python3,
# Debian's python3-torch), STEPS (235), SECURITY=insecure|curve (default
# insecure: gloo encrypts nothing either), AVERAGE=1|0 (default 1: .grad
# holds the workers' average after backward, as DDP's; 0: each worker's
# own gradient goes to the ps, one exchange less a step). Needs a build with libpstrain.so
# (tools/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD_DIR:-$root/build}/bin
python=${PYTHON:-/usr/bin/python3}
rounds=${1:-3}
steps=${STEPS:-235}
security=${SECURITY:-insecure}
average=${AVERAGE:-1}  # 0: the script's workers do not average before step()
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

bench=pytorch_frontend
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
need_torch "$python"
need_build

flags=()
[[ $security == insecure ]] && flags=(--insecure)

# launch SYSTEM ROUND [-- COMMAND]: a pstrain job of 2 ps + 2 workers.
launch() {
  local system=$1 round=$2 dir="$out/$1-$2"
  shift 2
  OMP_NUM_THREADS=1 "$bin/pstrain" launch --cluster_spec="$root/cluster_specs/local_2ps_2w.json" \
    --free_ports --mode=sync --max_steps="$steps" --epochs=100 --batch_size=128 --lr=0.02 \
    --device=cpu --echo=none --log_every_steps=0 --run_dir="$dir" \
    --data_dir="$root/data/mnist" "${flags[@]}" "$@" >"$dir.log" 2>&1 ||
    { tail -n 30 "$dir.log" >&2; die "$system failed"; }
  field() { summary_field "$dir" "$1"; }
  printf 'RESULT bench=pytorch_frontend round=%s system=%s images_per_sec=%.0f train_seconds=%.2f test_accuracy=%.4f load1=%s security=%s\n' \
    "$round" "$system" "$(field train_images_per_sec)" "$(field train_seconds)" \
    "$(field final_test_accuracy)" "$(load1)" "$security"
}

run_torch() {
  launch torch "$1" -- "$python" "$root/benchmarks/pytorch_frontend_train.py" \
    --average_gradients="$average"
}
run_cpp() { launch cpp "$1"; }
run_ddp() {
  local line
  line=$(OMP_NUM_THREADS=1 "$python" "$root/benchmarks/pytorch_cpu_train.py" --world_size=2 \
    --steps="$steps" --data_dir="$root/data/mnist" | grep '^RESULT') || die "ddp failed"
  field() { result_field "$line" "$1"; }
  printf 'RESULT bench=pytorch_frontend round=%s system=ddp images_per_sec=%s train_seconds=%s test_accuracy=%s load1=%s\n' \
    "$1" "$(field images_per_sec)" "$(field train_seconds)" "$(field test_accuracy)" "$(load1)"
}

orders=("torch ddp cpp" "ddp cpp torch" "cpp torch ddp")
for round in $(seq "$rounds"); do
  for system in ${orders[$(( (round - 1) % 3 ))]}; do "run_$system" "$round"; done
done | tee "$out/results"

"$python" - "$out/results" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    runs.setdefault(f["system"], {})[f["round"]] = float(f["images_per_sec"])
rounds = sorted(set.intersection(*(set(r) for r in runs.values())))
med = {s: statistics.median(r[k] for k in rounds) for s, r in runs.items()}
vs_ddp = [runs["torch"][k] / runs["ddp"][k] for k in rounds]
print(f"SUMMARY torch_median={med['torch']:.0f} ddp_median={med['ddp']:.0f} "
      f"cpp_median={med['cpp']:.0f} torch_vs_ddp={med['torch'] / med['ddp']:.2f} "
      f"torch_vs_ddp_range={min(vs_ddp):.2f}-{max(vs_ddp):.2f} "
      f"torch_vs_cpp={med['torch'] / med['cpp']:.2f} rounds={len(rounds)}")
PY
