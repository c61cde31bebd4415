#!/usr/bin/env bash
# Worker scaling where the cores exist: one bounded run, for a host with
# many cores (and, optionally, an NVIDIA GPU) that has none of our packages.
# It runs, each step skipped once DEADLINE_S has passed:
#   1. `pstrain scale` over 1, 2, 4, 8 and 12 CPU workers x 1, 2 and 4 ps,
#      for mnist_cnn and cnn_large, sync and async, a fixed number of steps
#      per worker (enough for steady images/s, not for accuracy);
#   2. with a GPU: 1, 2, 4 and 8 workers --device=cuda sharing it, x 1, 2
#      and 4 ps (mnist_cnn, sync and async);
#   3. benchmarks/wire_ceiling.sh, when it is there: PUSH_PULL between
#      processes against a raw two-process echo of the same bytes, 1-8
#      workers, plaintext and CURVE.
# Every run's directory (its summary.json, steps CSVs, report and plots)
# goes into OUT_DIR/scale_host.tar.gz, for `pstrain plan --calibrate` and
# the scaling report to be made from on any machine.
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
for model in mnist_cnn cnn_large; do
  steps=${STEPS_MNIST_CNN:-80}
  [[ $model == cnn_large ]] && steps=${STEPS_CNN_LARGE:-16}
  for mode in sync async; do
    step "cpu_${model}_${mode}" "$bin/pstrain" scale --workers="$cpu_workers" --ps="$cpu_ps" \
      --mode="$mode" --model="$model" --max_steps="$steps" --device=cpu \
      --out="$out/cpu_${model}_${mode}" "${common[@]}"
  done
done

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  for mode in sync async; do
    step "gpu_mnist_cnn_${mode}" "$bin/pstrain" scale --workers="$gpu_workers" --ps="$gpu_ps" \
      --mode="$mode" --model=mnist_cnn --max_steps="${STEPS_GPU:-80}" --device=cuda \
      --out="$out/gpu_mnist_cnn_${mode}" "${common[@]}"
  done
else
  echo "no GPU: the GPU matrix is not run"
fi

if [[ -x $root/benchmarks/wire_ceiling.sh ]]; then
  step wire_ceiling env WIRE_BIN="$bin" "$root/benchmarks/wire_ceiling.sh"
fi

# Images/s of every cell, one line each, for the note and the plan check.
printf '\n== images/s per cell\n'
for f in "$out"/*/ps*_w*/summary.json; do
  [[ -f $f ]] || continue
  python3 - "$f" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[1].split('/')[-3]:24s} ps={s['num_ps']:<2d} workers={s['num_workers']:<3d} "
      f"images_per_s={s['train_images_per_sec']:.0f} device={s.get('device', '?')}")
EOF
done | tee "$out/cells.txt"

# What comes back: everything but parameters, checkpoints and the data.
tar -C "$out" -czf "$out/scale_host.tar.gz" --exclude='*.f32' --exclude='checkpoints' \
  --exclude='data' --exclude='*.secret' --exclude='scale_host.tar.gz' . 2>/dev/null
ls -la "$out/scale_host.tar.gz"
printf '\ntook %d s; output in %s\n' "$SECONDS" "$out"
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "scale_host: every step ran"
