#!/usr/bin/env bash
# pstrain against PyTorch on the CPU, training the same network on the same
# data, alternately in one go for ROUNDS rounds:
#   1w:  pstrain 1 ps + 1 worker (sync)  vs  PyTorch, 1 process, 1 thread
#   2w:  pstrain 2 ps + 2 workers (sync) vs  PyTorch DDP (gloo), 2 processes,
#        1 thread each, DistributedSampler
# mnist_cnn, batch 128 per worker or rank, pstrain's default SGD (lr 0.01 x
# workers, momentum 0.5), one epoch of MNIST each (STEPS_1W / STEPS_2W
# steps per worker). PyTorch's side is benchmarks/pytorch_cpu_train.py.
# images/s is images of all workers over the first to the last training
# step (pstrain's train_images_per_sec; evaluation and start-up excluded).
# Peak RSS: GNU time's maximum resident set of the job's largest process
# (the launcher's or DDP's children included).
#
# Prints one line per run, then the medians and their ratio per setup:
#   RESULT bench=vs_pytorch round=1 setup=1w system=pstrain images_per_sec=N
#       train_seconds=S test_accuracy=A peak_rss_mb=M load1=L
#   SUMMARY setup=1w pstrain_median=N pytorch_median=N ratio=R ratio_range=LO-HI
#
# Usage: benchmarks/vs_pytorch.sh [ROUNDS]        (default 3)
# Environment: BUILD_DIR (default build), PYTHON (default /usr/bin/python3:
# Debian's python3-torch, installed here when missing), STEPS_1W (469),
# STEPS_2W (235), SECURITY=insecure|curve (default insecure), SETUPS="1w 2w".
# Needs a build (tools/setup.sh) and GNU time. Run it on a quiet machine;
# each line carries the 1-minute load average when its run ended.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD_DIR:-$root/build}/bin
python=${PYTHON:-/usr/bin/python3}
rounds=${1:-3}
read -r -a setups <<< "${SETUPS:-1w 2w}"
security=${SECURITY:-insecure}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

bench=vs_pytorch
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
PROG=vs_pytorch
# shellcheck source=tools/lib/apt.sh
source "$root/tools/lib/apt.sh"
[[ -x /usr/bin/time ]] || install_packages time
"$python" -c 'import torch' 2>/dev/null || install_packages python3-torch
"$python" -c 'import torch' || die "$python cannot import torch"
[[ -x $bin/pstrain ]] || die "no $bin/pstrain; run tools/setup.sh"

peak_mb() { echo $(( $(tail -n 1 "$1") / 1024 )); }

# pstrain SETUP ROUND: one epoch on the setup's local spec.
run_pstrain() {
  local setup=$1 round=$2 spec steps dir flags=()
  if [[ $setup == 1w ]]; then spec=local_1ps_1w steps=${STEPS_1W:-469}; else spec=local_2ps_2w steps=${STEPS_2W:-235}; fi
  [[ $security == insecure ]] && flags=(--insecure)
  dir="$out/pstrain-$setup-$round"
  /usr/bin/time -f "%M" -o "$dir.rss" "$bin/pstrain" launch --cluster_spec="$root/cluster_specs/$spec.json" \
    --free_ports --mode=sync --max_steps="$steps" --epochs=100 --device=cpu --echo=none \
    --run_dir="$dir" --data_dir="$root/data/mnist" "${flags[@]}" >"$dir.log" 2>&1 ||
    { tail -n 20 "$dir.log" >&2; die "pstrain $setup failed"; }
  field() { summary_field "$dir" "$1"; }
  printf 'RESULT bench=vs_pytorch round=%s setup=%s system=pstrain images_per_sec=%.0f train_seconds=%.2f test_accuracy=%.4f peak_rss_mb=%s load1=%s security=%s\n' \
    "$round" "$setup" "$(field train_images_per_sec)" "$(field train_seconds)" \
    "$(field final_test_accuracy)" "$(peak_mb "$dir.rss")" "$(load1)" "$security"
}

run_pytorch() {
  local setup=$1 round=$2 world=1 steps=${STEPS_1W:-469} line
  [[ $setup == 2w ]] && world=2 steps=${STEPS_2W:-235}
  line=$(OMP_NUM_THREADS=1 /usr/bin/time -f "%M" -o "$out/pytorch.rss" "$python" \
    "$root/benchmarks/pytorch_cpu_train.py" --world_size="$world" --steps="$steps" \
    --data_dir="$root/data/mnist" | grep '^RESULT') || die "pytorch $setup failed"
  field() { result_field "$line" "$1"; }
  printf 'RESULT bench=vs_pytorch round=%s setup=%s system=pytorch images_per_sec=%s train_seconds=%s test_accuracy=%s peak_rss_mb=%s load1=%s rank_peak_rss_mb=%s\n' \
    "$round" "$setup" "$(field images_per_sec)" "$(field train_seconds)" "$(field test_accuracy)" \
    "$(peak_mb "$out/pytorch.rss")" "$(load1)" "$(field peak_rss_mb)"
}

# Odd rounds start with pstrain, even rounds with PyTorch.
for round in $(seq "$rounds"); do
  for setup in "${setups[@]}"; do
    if (( round % 2 )); then
      run_pstrain "$setup" "$round"; run_pytorch "$setup" "$round"
    else
      run_pytorch "$setup" "$round"; run_pstrain "$setup" "$round"
    fi
  done
done | tee "$out/results"

"$python" - "$out/results" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    runs.setdefault((f["setup"], f["system"]), {})[f["round"]] = f
for setup in sorted({s for s, _ in runs}):
    ps, pt = runs.get((setup, "pstrain"), {}), runs.get((setup, "pytorch"), {})
    both = sorted(set(ps) & set(pt))
    if not both:
        continue
    rate = lambda r: float(r["images_per_sec"])
    ratios = [rate(ps[r]) / rate(pt[r]) for r in both]
    med = lambda d: statistics.median(rate(d[r]) for r in both)
    rss = lambda d: max(int(d[r]["peak_rss_mb"]) for r in both)
    print(f"SUMMARY setup={setup} rounds={len(both)} pstrain_median={med(ps):.0f} "
          f"pytorch_median={med(pt):.0f} ratio={med(ps) / med(pt):.2f} "
          f"ratio_range={min(ratios):.2f}-{max(ratios):.2f} "
          f"pstrain_peak_rss_mb={rss(ps)} pytorch_peak_rss_mb={rss(pt)}")
EOF
