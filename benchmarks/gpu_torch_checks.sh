#!/usr/bin/env bash
# pstrain.torch on a GPU: the idioms that touch CUDA tensors (clipping,
# bf16 autocast, fp16 with torch's GradScaler) against one process and DDP,
# and the transformer example as one process, 1 ps + 2 sync workers and 2
# async workers on the GPU, with the host's own PyTorch and a CPU build of
# pstrain packed by benchmarks/gpu_pack.sh (a CUDA build is not needed:
# the workers' tensors are PyTorch's).
#
# Here:              benchmarks/gpu_pack.sh          (writes .gpu/, with python/)
# On the GPU host:   PSTRAIN_PREBUILT=.gpu benchmarks/gpu_torch_checks.sh OUT
# OUT gets each part's log, the example's curves (CSV) and RESULT lines.
# Environment: PARTS (default: every part: idioms_one idioms_ddp lm_single
# lm_sync lm_async), LM_STEPS (300), PYTHON (python3: the host's, with torch).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
bench=gpu_torch_checks
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
pre=${PSTRAIN_PREBUILT:-$root/.gpu}
pre=$(cd "$pre" && pwd) || die "no $pre (benchmarks/gpu_pack.sh)"
out=${1:-${OUT:-/tmp/gpu_torch}}
steps=${LM_STEPS:-300}
py=${PYTHON:-python3}  # a Python with torch (the GPU host's own)
parts=${PARTS:-}
part_lines='^RESULT|^(OK|FAILED)|tokens/s|^step [0-9]+:'
part_status=0
mkdir -p "$out"
export LD_LIBRARY_PATH=$pre/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PSTRAIN_BIN_DIR=$pre/bin PSTRAIN_LIBRARY=$pre/lib/libpstrain.so
export PSTRAIN_TEST_DEVICE=${PSTRAIN_TEST_DEVICE:-cuda}
[[ -d data/mnist ]] || { mkdir -p data && cp -r "$pre/mnist" data/mnist; }
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())" |
  tee "$out/env.log"

part idioms_one 200 "$py" -u tests/python/test_torch_idioms.py \
  OneWorkerIsOneProcess.test_clipping_between_backward_and_step \
  OneWorkerIsOneProcess.test_mixed_precision
part idioms_ddp 200 "$py" -u tests/python/test_torch_idioms_ddp.py \
  TwoWorkersAreDdp.test_clipping_sees_the_averaged_gradient \
  TwoWorkersAreDdp.test_an_overflow_on_one_worker_skips_the_step_on_every_worker
lm=examples/pytorch/transformer_lm.py
part lm_single 120 "$py" -u $lm --single --batch_size=32 --steps="$steps" --curve="$out/lm_single.csv"
part lm_sync 150 "$pre/bin/pstrain" launch --cluster_spec=cluster_specs/local_1ps_2w.json \
  --free_ports --mode=sync --echo=progress --run_dir="$out/lm_sync_run" \
  -- "$py" -u $lm --batch_size=16 --steps="$steps" --curve="$out/lm_sync.csv"
part lm_async 150 "$pre/bin/pstrain" launch --cluster_spec=cluster_specs/local_1ps_2w.json \
  --free_ports --mode=async --echo=progress --run_dir="$out/lm_async_run" \
  -- "$py" -u $lm --batch_size=16 --steps="$steps" --curve="$out/lm_async.csv"
exit $part_status
