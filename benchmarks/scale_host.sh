#!/usr/bin/env bash
# Worker scaling where the cores exist: one bounded run, for a host with
# many cores (and, optionally, an NVIDIA GPU) that has none of our packages.
# It runs, each step skipped once DEADLINE_S has passed:
#   1. `pstrain scale` over 1, 2, 4, 8 and 12 CPU workers x 1, 2 and 4 ps,
#      for mnist_cnn and cnn_large, sync and async, a fixed number of steps
#      per worker (enough for steady images/s, not for accuracy);
#   2. with a GPU: 1, 2, 4 and 8 workers --device=cuda sharing it, x 1, 2
#      and 4 ps (mnist_cnn, sync and async);
#   3. with wire_bench beside the binaries: PUSH_PULL between a ps process
#      and 1-8 worker processes against a two-process echo of the same
#      bytes (256 KiB and cnn_large's 2.68 MB), plaintext and CURVE; and
#      CURVE's aggregate with the ps's --io_threads=1 and 8.
# Every run's directory (its summary.json, steps CSVs, report and plots)
# goes into OUT_DIR/scale_host.tar.gz after each step (so that a run cut
# short still leaves what it did), for `pstrain plan --calibrate` and the
# scaling report to be made from on any machine. RESULTS_DIR, when set,
# gets a copy of the archive and of the text summaries after each step.
#
# The chief's evaluations use the first 1,000 test images (a copy of the
# test set cut short, in OUT_DIR/data), so that cnn_large's final
# evaluation does not cost more than its training steps: the accuracies in
# these reports are on those 1,000 images, and are not the point.
#
# Usage: benchmarks/scale_host.sh
#   PSTRAIN_PREBUILT=DIR  what benchmarks/gpu_pack.sh packed (binaries, their
#                         libraries, MNIST); default: build/bin and data/mnist
#   OUT_DIR               default: a new temporary directory
#   DEADLINE_S            steps not started within this many seconds are
#                         skipped and reported (default 480)
#   RESULTS_DIR           where copies of the results go after each step
#   CPU_WORKERS, CPU_PS, GPU_WORKERS, GPU_PS   the matrices (defaults above)
#   STEPS_MNIST_CNN, STEPS_CNN_LARGE, STEPS_GPU  steps per worker (defaults 80, 16, 80)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT_DIR:-$(mktemp -d -t pstrain-scale-XXXXXX)}
deadline=${DEADLINE_S:-480}
cpu_workers=${CPU_WORKERS:-1,2,4,8,12}
cpu_ps=${CPU_PS:-1,2,4}
gpu_workers=${GPU_WORKERS:-1,2,4,8}
gpu_ps=${GPU_PS:-1,2,4}
mkdir -p "$out"
cd "$root" || exit 1
failed=()

bin=$root/build/bin
mnist=$root/data/mnist
if [[ -n ${PSTRAIN_PREBUILT:-} ]]; then
  prebuilt=$(cd "$PSTRAIN_PREBUILT" && pwd)
  bin=$prebuilt/bin
  mnist=$prebuilt/mnist
  cuda_dirs=$(find /usr/local /opt /usr/lib -name 'libcudnn.so.9' -o -name 'libcublas.so.13' \
                -o -name 'libcudart.so.13' 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
  export LD_LIBRARY_PATH="$prebuilt/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# step NAME COMMAND...: COMMAND's output into $out/NAME.log (and here);
# NAME is recorded as failed when it exits non-zero, or skipped past the
# deadline.
step() {
  local name=$1
  shift
  if ((SECONDS > deadline)); then
    printf '\n== %s: skipped (past DEADLINE_S=%s)\n' "$name" "$deadline"
    failed+=("$name: not run (deadline)")
    return
  fi
  printf '\n== %s (%d s): %s\n' "$name" "$SECONDS" "$*"
  if ! "$@" >"$out/$name.log" 2>&1; then failed+=("$name"); fi
  tail -n 4 "$out/$name.log"
  save
}

# Images/s of every cell, one line each, then the archive of everything
# but parameters, checkpoints and the data; copies into RESULTS_DIR.
save() {
  python3 - "$out"/*/ps*_w*/summary.json >"$out/cells.txt" 2>/dev/null <<'EOF2'
import json, os, sys
for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    s = json.load(open(path))
    print(f"{path.split('/')[-3]:24s} ps={s['num_ps']:<2d} workers={s['num_workers']:<3d} "
          f"images_per_s={s['train_images_per_sec']:.0f} device={s.get('device', '?')}")
EOF2
  grep -h '^RESULT bench=wire\|^|' "$out"/wire_*.log >"$out/wire.txt" 2>/dev/null
  tar -C "$out" -czf "$out/scale_host.tar.gz.tmp" --exclude='*.f32' --exclude='checkpoints' \
    --exclude='data' --exclude='*.secret' --exclude='scale_host.tar.gz*' . 2>/dev/null &&
    mv "$out/scale_host.tar.gz.tmp" "$out/scale_host.tar.gz"
  if [[ -n ${RESULTS_DIR:-} ]]; then
    cp "$out/scale_host.tar.gz" "$out/cells.txt" "$out/wire.txt" "$out/host.txt" "$RESULTS_DIR/" 2>/dev/null
  fi
  return 0
}

# The training set as it is; the test set cut to its first 1,000 images.
data=$out/data
mkdir -p "$data"
python3 - "$mnist" "$data" <<'EOF' || failed+=("data")
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
def read(name):
    for path, opener in ((os.path.join(src, name), open), (os.path.join(src, name + ".gz"), gzip.open)):
        if os.path.exists(path):
            with opener(path, "rb") as f:
                return f.read()
    raise SystemExit(f"scale_host: {name} not found in {src}")
for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
    with open(os.path.join(dst, name), "wb") as f:
        f.write(read(name))
keep = 1000
images, labels = read("t10k-images-idx3-ubyte"), read("t10k-labels-idx1-ubyte")
_, _, rows, cols = struct.unpack(">IIII", images[:16])
with open(os.path.join(dst, "t10k-images-idx3-ubyte"), "wb") as f:
    f.write(images[:4] + struct.pack(">I", keep) + images[8:16] + images[16:16 + keep * rows * cols])
with open(os.path.join(dst, "t10k-labels-idx1-ubyte"), "wb") as f:
    f.write(labels[:4] + struct.pack(">I", keep) + labels[8:8 + keep])
EOF

{
  echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
} | tee "$out/host.txt"

common=(--eval_points=1 --echo=none --data_dir="$data" --gnuplot=none)
have_gpu=0
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && have_gpu=1
gpu_scale() {
  step "gpu_mnist_cnn_$1" "$bin/pstrain" scale --workers="$gpu_workers" --ps="$gpu_ps" \
    --mode="$1" --model=mnist_cnn --max_steps="${STEPS_GPU:-80}" --device=cuda \
    --out="$out/gpu_mnist_cnn_$1" "${common[@]}"
}
((have_gpu)) && gpu_scale sync
((have_gpu)) || echo "no GPU: the GPU matrix is not run"

if [[ -x $bin/wire_bench ]]; then
  step wire_ceiling "$bin/wire_bench" --ps_server="$bin/ps_server" --sizes=65536,669706 \
    --workers=1,2,4,8 --security=plain,curve --rounds=1 --seconds=1 --mode=async --timeout_s=60
  step wire_curve_io8 "$bin/wire_bench" --ps_server="$bin/ps_server" --sizes=669706 \
    --workers=1,2,4,8 --security=curve --rounds=1 --seconds=1 --mode=async --timeout_s=60 \
    --ps_flags=--io_threads=8
fi

for model in mnist_cnn cnn_large; do
  steps=${STEPS_MNIST_CNN:-80}
  [[ $model == cnn_large ]] && steps=${STEPS_CNN_LARGE:-16}
  for mode in sync async; do
    step "cpu_${model}_${mode}" "$bin/pstrain" scale --workers="$cpu_workers" --ps="$cpu_ps" \
      --mode="$mode" --model="$model" --max_steps="$steps" --device=cpu \
      --out="$out/cpu_${model}_${mode}" "${common[@]}"
  done
done
((have_gpu)) && gpu_scale async

save
printf '\n== images/s per cell\n'
cat "$out/cells.txt"
ls -la "$out/scale_host.tar.gz"
printf '\ntook %d s; output in %s\n' "$SECONDS" "$out"
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "scale_host: every step ran"
