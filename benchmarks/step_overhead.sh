#!/usr/bin/env bash
# The fixed cost of a pstrain.torch step: a small model (an MLP of 59,635
# parameters, 238 KB, batch 64, SGD; benchmarks/step_overhead_train.py)
# trained in one process and through pstrain.torch with 1 ps + 1 worker,
# sync, with CURVE and with --insecure, alternately for ROUNDS rounds, and
# what the difference is made of (MODEL=wide: one tensor of 11.2M
# parameters, 44.8 MB, whose step is the push, the update and the pull;
# MODEL=resnet18: the CIFAR ResNet-18 at batch 128, a GPU user's model;
# DEVICE=cuda: the model on the GPU in both systems; NUM_PS=4: the worker's
# shards on 4 ps):
#   compute:  the step log's compute_ms (steps_worker0.csv: from the step's
#             start in the first forward to the gradient handed to the
#             library: forward, backward, the hooks, the sync average of
#             .grad) less one process's whole step;
#   comm:     the step log's comm_ms: the push until the last reply (the
#             wire both ways and the ps's update);
#   rest:     the step the script timed less compute and comm: step()'s
#             Python around the library call (the gather into the flat
#             buffer, the step's settings, the parameters' write-back) and
#             zero_grad.
# Beside it, what the bytes cost between two processes on these cores:
# wire_bench's echo of the same payload each way, bare and with a ps's SGD
# update before the answer (echo[sgd]; their difference is the update),
# on the wire each security takes (curve and insecure, the ps on the
# worker's host: a raw Unix socket, plaintext, as the ps's link is;
# curve-tcp: CURVE over TCP; insecure-tcp: ZeroMQ over loopback TCP). The
# target is a difference of
# at most 1.5x the echo[sgd] round trip.
#
# Prints one RESULT line per run, then per security a SUMMARY:
#   SUMMARY security=curve single_ms=M pstrain_ms=M overhead_ms=D
#     compute_ms=C comm_ms=W rest_ms=R echo_us=E echo_sgd_us=F
#     overhead_vs_echo_sgd=X step_gb_per_s=G comm_gb_per_s=H rounds=K
# and per system the script's own phases (single_idle: one process that
# sleeps after each step as long as the round's first pstrain.torch run
# waited for its ps, comm_ms: what the wait alone costs the phases after
# it, on machines whose idle cores wake slowly):
#   PHASES system=pstrain security=curve median_ms=M zero_grad_ms=Z
#     forward_ms=F backward_ms=B step_ms=S
# (GB/s: both ways' bytes, 2 x 4 x parameters, over the step and over
# comm_ms).
# (medians over rounds of each run's median step).
#
# Usage: benchmarks/step_overhead.sh [ROUNDS]      (default 3)
# Environment: BUILD_DIR (default build), PYTHON (default /usr/bin/python3,
# Debian's python3-torch; on a GPU host its own), MODEL (mlp, wide or
# resnet18), DEVICE (cpu or cuda), NUM_PS (1), STEPS (mlp 600, else 40 a
# run), SECURITY ("curve insecure"; curve-tcp and insecure-tcp: with
# --colocated_ipc=false, every ps reached over TCP as from another host),
# LAUNCH_FLAGS (more `pstrain launch` flags for every pstrain.torch run,
# e.g. --busy_poll_us=5000), IDLE (1: the single_idle run each round;
# default 1 for the MLP, whose steps are short enough for the waits to
# matter, else 0).
# Needs a build with libpstrain.so and wire_bench (tools/setup.sh). On a
# GPU host, with a build packed here by benchmarks/gpu_pack.sh (.gpu/) and
# the host's own PyTorch:
#   BUILD_DIR=.gpu PSTRAIN_LIBRARY=.gpu/lib/libpstrain.so LD_LIBRARY_PATH=.gpu/lib \
#     PYTHON=python3 DEVICE=cuda MODEL=resnet18 benchmarks/step_overhead.sh 2
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD_DIR:-$root/build}/bin
python=${PYTHON:-/usr/bin/python3}
rounds=${1:-3}
model=${MODEL:-mlp}
num_ps=${NUM_PS:-1}
read -r -a securities <<< "${SECURITY:-curve insecure}"
read -r -a launch_flags <<< "${LAUNCH_FLAGS:-}"
case $model in
  mlp) default_steps=600 warmup=50 default_idle=1 ;;
  wide | resnet18) default_steps=40 warmup=5 default_idle=0 ;;
  *) echo "step_overhead: error: MODEL=$model (mlp, wide or resnet18)" >&2; exit 2 ;;
esac
steps=${STEPS:-$default_steps}
idle_run=${IDLE:-$default_idle}
# One thread a process on both sides (step_overhead_train.py sets torch's):
# OpenBLAS, the BLAS under Debian's PyTorch, starts threads of its own.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bench=step_overhead
# shellcheck source=benchmarks/lib.sh
source "$root/benchmarks/lib.sh"
need_torch "$python"
need_build wire_bench
train="$root/benchmarks/step_overhead_train.py"
train_args=(--model="$model" --warmup="$warmup" --device="${DEVICE:-cpu}")
floats=$("$python" "$train" --model="$model" --count) || die "cannot make the model"
spec="$root/cluster_specs/local_1ps_1w.json"
if ((num_ps != 1)); then  # ports are placeholders: --free_ports picks them
  spec="$out/spec.json"
  "$python" -c 'import json, sys; n = int(sys.argv[1]); print(json.dumps({"cluster": {
      "ps": ["localhost:%d" % (2300 + k) for k in range(n)], "worker": ["localhost:2299"]}}))' \
    "$num_ps" > "$spec"
fi

# One process; with IDLE (ms), sleeping that long after each step, as a
# worker waits for its ps (system=single_idle). Its malloc keeps freed
# blocks as a pstrain.torch worker's does (kHeapBlockBytes and
# kKeptFreeBytes in common/malloc_policy.h: change them together), unless
# GLIBC_TUNABLES sets malloc's tunables (then both have those).
single_tunables=${GLIBC_TUNABLES:-}
if [[ $single_tunables != *glibc.malloc.* ]]; then
  single_tunables+="${single_tunables:+:}glibc.malloc.mmap_threshold=$((96 << 20))"
  single_tunables+=":glibc.malloc.trim_threshold=$((256 << 20))"
fi
run_single() {
  local round=$1 idle=${2:-0} line system=single
  [[ $idle == 0 ]] || system=single_idle  # the caller passes 0 or comm_ms
  line=$(GLIBC_TUNABLES=$single_tunables \
    "$python" "$train" "${train_args[@]}" --single --steps="$steps" --idle_ms="$idle" |
    grep '^STEP_MS') || die "one process failed"
  echo "RESULT bench=step_overhead round=$round model=$model ps=$num_ps system=$system" \
    "security=none idle_ms=$idle ${line#STEP_MS } load1=$(load1)"
}

# The medians of the step log's compute_ms and comm_ms (ms), the steps
# after the warm-up.
step_log_medians() {
  "$python" - "$1" "$warmup" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))[int(sys.argv[2]):]
print(" ".join("%s=%.4f" % (k, statistics.median(float(r[k]) for r in rows))
               for k in ("compute_ms", "comm_ms")))
PY
}

run_pstrain() {
  local round=$1 security=$2 dir="$out/pstrain-$2-$1" flags=() line medians
  case $security in
    insecure) flags=(--insecure) ;;
    curve-tcp) flags=(--colocated_ipc=false) ;;
    insecure-tcp) flags=(--insecure --colocated_ipc=false) ;;
  esac
  "$bin/pstrain" launch --cluster_spec="$spec" --free_ports \
    --mode=sync --max_steps="$steps" --run_dir="$dir" "${flags[@]}" "${launch_flags[@]}" \
    -- "$python" "$train" "${train_args[@]}" >"$dir.log" 2>&1 ||
    { tail -n 20 "$dir.log" >&2; die "pstrain failed"; }
  line=$(grep -o 'STEP_MS.*' "$dir.log" | head -n 1) || die "no STEP_MS line in $dir.log"
  medians=$(step_log_medians "$dir/steps_worker0.csv") ||
    die "cannot read $dir/steps_worker0.csv"
  echo "RESULT bench=step_overhead round=$round model=$model ps=$num_ps system=pstrain" \
    "security=$security ${line#STEP_MS } $medians load1=$(load1)"
  [[ -s $out/idle-$round ]] || echo "${medians##*comm_ms=}" > "$out/idle-$round"
}

# Each round: one process, pstrain.torch per security, and one process
# idling each step as long as the round's first pstrain.torch run waited
# for its ps (comm_ms): what the wait alone costs the script's own phases.
for ((r = 1; r <= rounds; ++r)); do
  run_single "$r"
  for s in "${securities[@]}"; do run_pstrain "$r" "$s"; done
  [[ $idle_run == 0 || ! -s $out/idle-$r ]] || run_single "$r" "$(<"$out/idle-$r")"
done | tee "$out/results"

# The echo each pstrain.torch run is held to, on the wire it takes: with
# the ps on the worker's host, the ps's Unix socket link, plaintext on a
# Unix stream (wire_bench's raw echo, --echo_transport=unix); curve-tcp is
# CURVE over TCP; insecure-tcp is ZeroMQ over loopback TCP.
echo_kind() { case $1 in curve | insecure) echo unix ;; curve-tcp) echo curve ;; *) echo plain ;; esac; }
for kind in $(for s in "${securities[@]}"; do echo_kind "$s"; done | sort -u); do
  case $kind in
    unix) echo_args=(--security=plain --echo_transport=unix) ;;
    curve) echo_args=(--security=curve) ;;
    *) echo_args=(--security=plain) ;;
  esac
  "$bin/wire_bench" --sizes="$floats" --workers=1 "${echo_args[@]}" \
    --echo_work=none,sgd --rounds="$rounds" --seconds=2 2>/dev/null | grep '^RESULT' |
    grep 'system=echo' | sed "s/\$/ echo_kind=$kind/" | tee -a "$out/results"
done

"$python" - "$out/results" "$floats" "${securities[@]}" <<'PY'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in open(sys.argv[1])
        if line.startswith("RESULT")]
med = lambda xs: statistics.median(xs) if xs else float("nan")
single = med([float(r["median"]) for r in rows if r.get("system") == "single"])
both_ways = 2 * 4 * int(sys.argv[2])
for security in sys.argv[3:]:
    runs = [r for r in rows if r.get("system") == "pstrain" and r["security"] == security]
    kind = {"curve": "unix", "insecure": "unix", "curve-tcp": "curve"}.get(security, "plain")
    echo = med([float(r["p50_round_trip_us"]) for r in rows
                if r.get("system") == "echo" and r.get("echo_kind") == kind])
    echo_sgd = med([float(r["p50_round_trip_us"]) for r in rows
                    if r.get("system") == "echo[sgd]" and r.get("echo_kind") == kind])
    step = med([float(r["median"]) for r in runs])
    compute = med([float(r["compute_ms"]) for r in runs])
    comm = med([float(r["comm_ms"]) for r in runs])
    overhead = step - single
    print("SUMMARY security=%s single_ms=%.3f pstrain_ms=%.3f overhead_ms=%.3f compute_ms=%.3f "
          "comm_ms=%.3f rest_ms=%.3f echo_us=%.0f echo_sgd_us=%.0f overhead_vs_echo_sgd=%.2f "
          "step_gb_per_s=%.3f comm_gb_per_s=%.3f rounds=%d" % (
              security, single, step, overhead, compute - single, comm, step - compute - comm,
              echo, echo_sgd, overhead * 1e3 / echo_sgd, both_ways / step / 1e6,
              both_ways / comm / 1e6, len(runs)))
# The script's phases, each system's medians over rounds (ms).
for system, security in ([("single", "none"), ("single_idle", "none")] +
                         [("pstrain", s) for s in sys.argv[3:]]):
    runs = [r for r in rows if r.get("system") == system and r["security"] == security]
    if not runs:
        continue
    print("PHASES system=%s security=%s %s" % (system, security, " ".join(
        "%s_ms=%.3f" % (k, med([float(r[k]) for r in runs]))
        for k in ("median", "zero_grad", "forward", "backward", "step"))))
PY
