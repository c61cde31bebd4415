#!/usr/bin/env bash
# What a lent host (16 cores and one NVIDIA GPU, none of our packages) has
# to measure, in one bounded run for a session's short device budget, in
# this order, each part bounded and skipped once the run's end is near:
#   step_tables  gpu_step_tables.sh: a GPU user's step through
#                pstrain.torch against one process on the same GPU
#                (ResNet-18 with 1 and 4 ps, a small MLP, and the MLP
#                with --busy_poll_us);
#   lr_by_mode   lr_by_mode.sh: mnist_cnn's accuracy after one epoch with
#                each mode's defaults, 1-32 CPU workers (TRAIN_DEVICE=cuda:
#                workers sharing the GPU); beside it
#   idioms       gpu_torch_checks.sh's idiom tests on CUDA tensors
#                (clipping, bf16 and fp16 with GradScaler; one worker
#                against one process, two against DDP);
#   time_to_acc  time_to_accuracy.sh: training seconds to 97% for 1-12
#                CPU workers in each mode, with the defaults.
# Every part's logs and run directories are packed into
# OUT/lent_host.tar.gz after each part (a run cut short keeps what it did;
# a lent host gives back a few files only), and this script's own output
# goes to OUT/lent_host.log.
#
# Here:       tools/setup.sh && benchmarks/gpu_pack.sh     (writes .gpu/)
# There:      benchmarks/lent_host.sh OUT                  (with .gpu/ carried)
# On an H200 host the parts took: step_tables 232 s, lr_by_mode 97 s with
# idioms beside it (119 s for one worker's tests, 82 s for DDP's: about
# 200 s), time_to_acc 89 s (workers on the GPU); about 9.5 minutes in all,
# which a session's 15 minutes of device time hold with the machine's
# start.
# Environment: PSTRAIN_PREBUILT (default .gpu), END_S (default 560: the
# run's seconds by which every part has ended), LENT_PARTS (default all,
# space-separated), STEP_PARTS (gpu_step_tables.sh's PARTS; default
# "resnet18_ps1 resnet18_ps4 mlp mlp_busy"), LR_WORKERS and LR_SEEDS (default
# 1,2,4,8,12,16,32 and 1), TTA_WORKERS and TTA_EPOCHS (default 1,2,4,8,12
# and 8), TRAIN_DEVICE (cpu); DEVICE=cpu PSTRAIN_TEST_DEVICE=cpu try it
# on a machine without a GPU.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
bench=lent_host
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
pre=${PSTRAIN_PREBUILT:-$root/.gpu}
pre=$(cd "$pre" && pwd) || die "no $pre (benchmarks/gpu_pack.sh)"
results=${1:-${OUT:-/tmp/lent_host_results}}
out=$(mktemp -d -t lent-host-XXXXXX)
parts=${LENT_PARTS:-}
part_end=${END_S:-560}
part_lines='^(RESULT|SUMMARY|== |\| |OK|FAILED|Ran )'
part_status=0
# The C++ workers of lr_by_mode and time_to_acc: CPU workers, one core
# each, unless TRAIN_DEVICE says otherwise (pstrain's default where a GPU
# is present is cuda: every worker on the one GPU).
train_device=${TRAIN_DEVICE:-cpu}
mkdir -p "$results"
exec > >(tee "$results/lent_host.log") 2>&1

# The scripts below that train C++ workers look for build/bin and
# data/mnist: give them the packed build where there is no build here.
[[ -x build/bin/pstrain ]] || ln -sfn "$pre" build
[[ -d data/mnist ]] || { mkdir -p data && cp -r "$pre/mnist" data/mnist; }
export LD_LIBRARY_PATH=$pre/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

pack() {  # everything so far into RESULTS/lent_host.tar.gz, whole or not at all
  tar czf "$results/lent_host.tar.gz.part" -C "$out" --exclude='checkpoint*' . &&
    mv "$results/lent_host.tar.gz.part" "$results/lent_host.tar.gz"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cores $(nproc), $(free -g | awk '/^Mem:/ {print $2}') GiB"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
} 2>&1 | tee "$out/env.log"

part step_tables 320 env PARTS="${STEP_PARTS:-resnet18_ps1 resnet18_ps4 mlp mlp_busy}" \
  benchmarks/gpu_step_tables.sh "$out/step_tables"
pack
# Neither measures time: the idioms' tests (the GPU and a few cores) run
# beside lr_by_mode's jobs.
part idioms 260 env PARTS="idioms_one idioms_ddp" benchmarks/gpu_torch_checks.sh "$out/idioms" &
idioms=$!
part lr_by_mode 200 env OUT="$out/lr_by_mode" \
  benchmarks/lr_by_mode.sh "${LR_WORKERS:-1,2,4,8,12,16,32}" "${LR_SEEDS:-1}" sync,async,ssp:2 \
  -- --device="$train_device"
wait "$idioms" || part_status=1
pack
part time_to_acc 300 env OUT="$out/time_to_acc" \
  benchmarks/time_to_accuracy.sh "${TTA_WORKERS:-1,2,4,8,12}" 2 "${TTA_EPOCHS:-8}" \
  -- --device="$train_device"
pack
echo "lent_host: done in $SECONDS s, status $part_status"
exit $part_status
