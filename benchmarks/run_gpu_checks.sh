#!/usr/bin/env bash
# Everything the CUDA backend has to show on a GPU, in one run,
# for a machine with an NVIDIA GPU, the CUDA toolkit, cuDNN 9 and PyTorch
# (the lent H100/H200 machines):
#   1. builds with the CUDA backend (fails if CMake did not enable it);
#   2. runs the CUDA tests, which must not skip there, and collects the
#      relative errors they reached against the CPU;
#   3. trains mnist_cnn end to end with 1 ps and 2 workers, sync and async,
#      with --device=cuda and with --device=cpu, and compares accuracies;
#   4. runs cuda_model_bench (GPU and CPU backends), model_bench (CPU) and
#      pytorch_mnist_cnn_bench.py (PyTorch on the same GPU);
#   5. prints a short table. Everything is kept under OUT_DIR.
#
# Usage: benchmarks/run_gpu_checks.sh [EPOCHS]     (default 1)
#   BUILD_DIR  build directory (default build/)
#   OUT_DIR    where logs and run directories go (default a new temp dir)
#   PSTRAIN_PREBUILT=DIR  use what benchmarks/gpu_pack.sh packed into DIR
#              (binaries, their libraries, MNIST) instead of building: for a
#              GPU machine without our -dev packages or a package registry.
#              cuBLAS, cuDNN and the CUDA runtime are looked for there under
#              /usr/local and /opt (PyTorch's wheels carry them too).
#   DEADLINE_S steps not started within this many seconds are skipped and
#              reported (default: none)
# Exit status: 0 when every step passed, 1 otherwise (the table still prints).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
out=${OUT_DIR:-$(mktemp -d -t pstrain-gpu-XXXXXX)}
epochs=${1:-1}
mkdir -p "$out"
cd "$root" || exit 1
failed=()
deadline=${DEADLINE_S:-0}
prebuilt=${PSTRAIN_PREBUILT:-}
data_dir=$root/data/mnist

# step NAME COMMAND...: runs COMMAND with its output in $out/NAME.log (and on
# the terminal), and records NAME as failed when it exits non-zero.
step() {
  local name=$1
  shift
  if ((deadline > 0 && SECONDS > deadline)); then
    printf '\n== %s: skipped (past DEADLINE_S=%s)\n' "$name" "$deadline"
    failed+=("$name: not run (deadline)")
    return
  fi
  printf '\n== %s: %s\n' "$name" "$*"
  if ! "$@" 2>&1 | tee "$out/$name.log"; then failed+=("$name"); fi
}

# field FILE KEY: a top-level number or string of a summary.json.
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

step gpu nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
if [[ -n $prebuilt ]]; then
  prebuilt=$(cd "$prebuilt" && pwd)
  build=$prebuilt
  data_dir=$prebuilt/mnist
  # The GPU machine's CUDA libraries: wherever its toolkit or PyTorch keeps them.
  cuda_dirs=$(find /usr/local /opt /usr/lib -name 'libcudnn.so.9' -o -name 'libcublas.so.13' \
                -o -name 'libcudart.so.13' 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
  export LD_LIBRARY_PATH="$prebuilt/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  printf '\n== prebuilt: %s\nLD_LIBRARY_PATH=%s\n' "$prebuilt" "$LD_LIBRARY_PATH"
  for b in "$prebuilt"/bin/*; do
    ldd "$b" | grep 'not found' | sed "s|^|$(basename "$b"): |"
  done | tee "$out/ldd.log"
  [[ -s $out/ldd.log ]] && failed+=("prebuilt: libraries not found (ldd.log)")
else
  step configure cmake -S "$root" -B "$build" -DPSTRAIN_CUDA=ON
  grep -q "pstrain: CUDA backend ON" "$out/configure.log" || failed+=("configure: CUDA backend not found")
  step build cmake --build "$build" -j "$(nproc)"
  [[ -f data/mnist/train-images-idx3-ubyte || -f data/mnist/train-images-idx3-ubyte.gz ]] ||
    step fetch_mnist tools/fetch_mnist.sh
fi
bin=$build/bin
[[ -n $prebuilt ]] && bin=$prebuilt/bin

# The CUDA tests must run here: a "needs a GPU" skip means the GPU was not seen.
for t in cuda_status_test cuda_device_selection_test cuda_algorithm_search_test cuda_layers_test \
         cuda_model_test; do
  step "$t" "$bin/$t"
  if grep -q "needs a GPU" "$out/$t.log"; then failed+=("$t skipped on a GPU machine"); fi
done

# End to end: the same seed and flags on both devices.
for device in cuda cpu; do
  for mode in sync async; do
    step "e2e_${device}_${mode}" "$bin/pstrain" launch \
      --cluster_spec=cluster_specs/local_1ps_2w.json --mode="$mode" --epochs="$epochs" \
      --device="$device" --free_ports --echo=progress --data_dir="$data_dir" \
      --run_dir="$out/e2e_${device}_${mode}"
  done
done

step cuda_model_bench "$bin/cuda_model_bench" --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true
step model_bench "$bin/model_bench" --benchmark_filter='mnist_cnn/cpu/forward_backward'
step pytorch_bench env -u LD_LIBRARY_PATH python3 benchmarks/pytorch_mnist_cnn_bench.py --batches=128,1024,4096

printf '\n== relative errors against the CPU (worst 10 of %s)\n' \
  "$(cat "$out"/cuda_*_test.log | grep -c '^\[ relerr')"
cat "$out"/cuda_*_test.log | grep '^\[ relerr' |
  awk '{print $(NF-2)/$NF, $0}' | sort -gr | head -n 10 | cut -d' ' -f2-

printf '\n== end to end, 1 ps / 2 workers, %s epoch(s)\n' "$epochs"
printf '%-6s %-6s %-10s %-14s %s\n' device mode accuracy images/s reported_device
for device in cuda cpu; do
  for mode in sync async; do
    f="$out/e2e_${device}_${mode}/summary.json"
    if [[ -f $f ]]; then
      printf '%-6s %-6s %-10.4f %-14.0f %s\n' "$device" "$mode" "$(field "$f" final_test_accuracy)" \
        "$(field "$f" train_images_per_sec)" "$(field "$f" device)"
    else
      printf '%-6s %-6s (no summary)\n' "$device" "$mode"
    fi
  done
done
for mode in sync async; do
  a="$out/e2e_cuda_${mode}/summary.json" b="$out/e2e_cpu_${mode}/summary.json"
  [[ -f $a && -f $b ]] || continue
  if ! python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) > 0.01)' \
      "$(field "$a" final_test_accuracy)" "$(field "$b" final_test_accuracy)"; then
    failed+=("e2e $mode: cuda and cpu accuracies differ by more than 0.01")
  fi
done

printf '\n== throughput, images/s (mean over repetitions where there are several)\n'
printf '%-9s %-22s %6s %12s  %s\n' backend op batch images/s from
for bench in cuda_model_bench model_bench pytorch_bench; do
  grep -s '^RESULT' "$out/$bench.log" | grep -v 'stat=median\|stat=stddev' |
    sed -E 's/.*backend=([^ ]+) op=([^ ]+) batch=([^ ]+).* images_per_sec=([0-9]+).*/\1 \2 \3 \4/' |
    awk -v from="$bench" '{printf "%-9s %-22s %6s %12s  %s\n", $1, $2, $3, $4, from}'
done

printf '\nlogs and run directories: %s\n' "$out"
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "all GPU checks passed"
