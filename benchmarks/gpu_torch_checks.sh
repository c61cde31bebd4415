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
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pre=${PSTRAIN_PREBUILT:-$root/.gpu}
out=${1:-${OUT:-/tmp/gpu_torch}}
steps=${LM_STEPS:-300}
py=${PYTHON:-python3}  # a Python with torch (the GPU host's own)
mkdir -p "$out"
export LD_LIBRARY_PATH=$pre/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PSTRAIN_BIN_DIR=$pre/bin PSTRAIN_LIBRARY=$pre/lib/libpstrain.so
export PSTRAIN_TEST_DEVICE=${PSTRAIN_TEST_DEVICE:-cuda}
[[ -d data/mnist ]] || { mkdir -p data && cp -r "$pre/mnist" data/mnist; }
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())" |
  tee "$out/env.log"

status=0
part() {  # NAME TIMEOUT COMMAND...: runs it into OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  grep -hE "^RESULT|^(OK|FAILED)|tokens/s|^step [0-9]+:" "$out/$name.log" | tail -n 40
  echo "== $name: exit $rc in $((SECONDS - t0)) s"
  [[ $rc -eq 0 ]] || status=1
}

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
exit $status
