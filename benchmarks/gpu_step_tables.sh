#!/usr/bin/env bash
# A GPU user's step through pstrain.torch against one process on the same
# GPU, in one bounded run for a lent GPU host (a short device budget):
# step_overhead.sh's tables with the host's own PyTorch and a CPU build of
# pstrain packed by benchmarks/gpu_pack.sh (a CUDA build is not needed:
# the workers' tensors are PyTorch's):
#   resnet18_ps1, resnet18_ps4  the CIFAR ResNet-18 (11.2M parameters),
#                               batch 128, 1 worker, sync, 1 and 4 ps, with
#                               CURVE (the ps tasks' Unix sockets, as on
#                               one host) and --insecure; 1 ps also with
#                               CURVE over TCP (curve-tcp: as from another
#                               host);
#   mlp                         the MLP of 59,635 parameters, batch 64: the
#                               step's fixed cost on a GPU;
#   mlp_busy                    the same with --busy_poll_us=5000 (waits
#                               that look before they sleep);
#   wide_ps4                    one tensor of 11.2M parameters on the CPU,
#                               4 ps: the wire on many cores.
# Each part's SUMMARY lines (step_overhead.sh's header says what they
# hold) print as it ends; every part is bounded by its own timeout.
#
# Here:              benchmarks/gpu_pack.sh          (writes .gpu/)
# On the GPU host:   PSTRAIN_PREBUILT=.gpu benchmarks/gpu_step_tables.sh OUT
# Environment: PARTS (default "resnet18_ps1 resnet18_ps4 mlp mlp_busy
# wide_ps4"),
# PYTHON (default python3: the host's, with torch), DEVICE (default cuda).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
bench=gpu_step_tables
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
pre=${PSTRAIN_PREBUILT:-$root/.gpu}
pre=$(cd "$pre" && pwd) || die "no $pre (benchmarks/gpu_pack.sh)"
out=${1:-${OUT:-/tmp/gpu_step_tables}}
device=${DEVICE:-cuda}
parts=${PARTS:-resnet18_ps1 resnet18_ps4 mlp mlp_busy wide_ps4}
part_lines='^(RESULT bench=step_overhead|SUMMARY|PHASES)'
part_status=0
mkdir -p "$out"
export LD_LIBRARY_PATH=$pre/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PSTRAIN_LIBRARY=$pre/lib/libpstrain.so BUILD_DIR=$pre PYTHON=${PYTHON:-python3}

so=benchmarks/step_overhead.sh
part resnet18_ps1 240 env MODEL=resnet18 DEVICE="$device" NUM_PS=1 STEPS=40 \
  SECURITY="curve curve-tcp insecure" $so 1
part resnet18_ps4 200 env MODEL=resnet18 DEVICE="$device" NUM_PS=4 STEPS=40 $so 1
part mlp 120 env MODEL=mlp DEVICE="$device" STEPS=400 $so 1
part mlp_busy 120 env MODEL=mlp DEVICE="$device" STEPS=400 LAUNCH_FLAGS=--busy_poll_us=5000 $so 1
part wide_ps4 150 env MODEL=wide NUM_PS=4 STEPS=40 $so 1
exit $part_status
