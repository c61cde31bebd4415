#!/usr/bin/env bash
# The DLRM example (examples/pytorch/dlrm.py) on synthetic Criteo data
# (tools/criteo_synth.py at SCALE): samples/s and test AUC of
#   single      one process, the tables as nn.EmbeddingBag(sparse=True), the
#               global batch (2 x 256);
#   pstrain     2 ps + 2 workers through pstrain.torch, the tables on the ps
#               (pst.Embedding), sync and async, CURVE; pstrain_sync_standby
#               is sync with a hot standby (--ps_replicas=1), and also says
#               the MB a ps sent its standby per state (tables as deltas);
#               pstrain_async_prefetch is async with each step asking for
#               the next step's rows (dlrm.py --prefetch: one round trip a
#               step for the rows in and the gradients out, not two);
#   ddp_sparse  PyTorch DDP (gloo), 2 ranks, every table on every rank,
#               sparse gradients (benchmarks/dlrm_ddp.py);
#   ddp_dense   the same with dense table gradients (nn.EmbeddingBag's
#               default: whole tables allreduced every step);
# ROUNDS rounds, alternated, each run one epoch of the data (MAX_STEPS
# caps it). For pstrain also the ps's row updates per second (summary.json:
# embedding_tables' row_updates over train_seconds).
#
# Prints a RESULT line per run and a SUMMARY per job (medians):
#   SUMMARY job=pstrain_sync samples_per_s=S auc=A row_updates_per_s=R
#
# Usage: benchmarks/dlrm_speed.sh [ROUNDS]     (default 2)
# Environment: BUILD_DIR (build), PYTHON (/usr/bin/python3), SCALE (0.01),
# TRAIN (400000), TEST (50000), MAX_STEPS (0: the epoch), JOBS (all five),
# DATA_DIR (a temporary directory; made when it holds no data).
# OpenBLAS (under Debian's PyTorch) gets the host's cores over the job's
# training processes: all of them for one process, half for each of two
# workers or ranks (OPENBLAS_NUM_THREADS, unless set); it would otherwise
# start a thread per core in every process.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
python=${PYTHON:-/usr/bin/python3}
rounds=${1:-2}
scale=${SCALE:-0.01}
jobs=${JOBS:-"single pstrain_sync pstrain_async ddp_sparse ddp_dense"}
work=$(mktemp -d -t pstrain-dlrm-XXXXXX)
trap 'rm -rf "$work"' EXIT
data=${DATA_DIR:-$work/data}
steps_flag=()
[[ ${MAX_STEPS:-0} -gt 0 ]] && steps_flag=(--max_steps="$MAX_STEPS")
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
OPENBLAS_THREADS_SET=${OPENBLAS_NUM_THREADS:-}

if [[ ! -f $data/meta.json ]]; then
  "$python" "$root/tools/criteo_synth.py" --out "$data" --scale="$scale" \
    --train="${TRAIN:-400000}" --test="${TEST:-50000}" || exit 1
fi
cat > "$work/spec.json" <<'JSON'
{"cluster": {"worker": ["localhost:2300", "localhost:2301"], "ps": ["localhost:2400", "localhost:2401"]}}
JSON

cores=$(nproc)
run() {  # run JOB ROUND: one RESULT line
  local job=$1 round=$2 out
  local per_process=$((cores / 2 > 0 ? cores / 2 : 1))
  [[ $job == single ]] && per_process=$cores
  export OPENBLAS_NUM_THREADS=${OPENBLAS_THREADS_SET:-$per_process}
  case $job in
    single)
      out=$("$python" "$root/examples/pytorch/dlrm.py" --data_dir="$data" --single --world=2 \
              "${steps_flag[@]}" 2>&1)
      echo "$out" | sed -n 's/.*(\([0-9]*\) samples\/s), test AUC \([0-9.]*\).*/RESULT job=single samples_per_s=\1 auc=\2/p'
      ;;
    pstrain_sync | pstrain_async | pstrain_sync_standby | pstrain_async_prefetch)
      local mode=${job#pstrain_} dir=$work/run_${job}_$round replicas=() script=()
      [[ $job == *_standby ]] && { mode=sync; replicas=(--ps_replicas=1); }
      [[ $job == *_prefetch ]] && { mode=async; script=(--prefetch); }
      "$build/bin/pstrain" launch --cluster_spec="$work/spec.json" --free_ports --run_dir="$dir" \
        --mode="$mode" "${replicas[@]}" -- "$python" "$root/examples/pytorch/dlrm.py" \
        --data_dir="$data" "${steps_flag[@]}" "${script[@]}" > "$dir.log" 2>&1 ||
        { echo "RESULT job=$job failed: $dir.log"; return; }
      "$python" - "$dir/summary.json" "$job" "$dir.log" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1]))
rows = sum(t["row_updates"] for t in s["embedding_tables"])
# With a standby: what the ps tasks sent it ("N states to its standby (M MB)").
sent = [(int(n), float(mb)) for n, mb in
        re.findall(r"(\d+) states to its standby \(([\d.]+) MB\)", open(sys.argv[3]).read())]
extra = ""
if sent:
    extra = " standby_mb_per_state=%.3f" % (sum(mb for _, mb in sent) / sum(n for n, _ in sent))
print("RESULT job=%s samples_per_s=%.0f auc=%.4f row_updates_per_s=%.0f%s"
      % (sys.argv[2], s["train_images_per_sec"], s["final_test_accuracy"],
         rows / s["train_seconds"], extra))
PY
      ;;
    ddp_sparse | ddp_dense)
      local dense=()
      [[ $job == ddp_dense ]] && dense=(--dense)
      out=$("$python" "$root/benchmarks/dlrm_ddp.py" --data_dir="$data" --world=2 "${dense[@]}" \
              "${steps_flag[@]}" 2>&1)
      echo "$out" | sed -n "s/.*samples_per_s=\([0-9]*\) test_auc=\([0-9.]*\).*/RESULT job=$job samples_per_s=\1 auc=\2/p"
      ;;
  esac
}

for ((r = 1; r <= rounds; ++r)); do
  for job in $jobs; do run "$job" "$r"; done
done | tee "$work/results"
"$python" - "$work/results" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    if "samples_per_s" in f:
        runs[f["job"]].append(f)
for job, rs in runs.items():
    med = lambda k: statistics.median(float(r[k]) for r in rs) if k in rs[0] else None
    extra = " row_updates_per_s=%.0f" % med("row_updates_per_s") if med("row_updates_per_s") else ""
    if med("standby_mb_per_state"):
        extra += " standby_mb_per_state=%.3f" % med("standby_mb_per_state")
    print("SUMMARY job=%s samples_per_s=%.0f auc=%.4f%s runs=%d"
          % (job, med("samples_per_s"), med("auc"), extra, len(rs)))
PY
