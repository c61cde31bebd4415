#!/usr/bin/env bash
# A table larger than any one process holds: 4 ps + 2 workers (pstrain
# launch, CURVE) fill one embedding table of DIM floats a row with fresh
# rows (benchmarks/embedding_scale_train.py) until it holds ROWS_TOTAL rows,
# and the peak resident memory of every task is taken from /proc while it
# runs. Then what the ps tasks say they hold (summary.json's
# embedding_tables): rows, their bytes, the memory they take.
#
# With KILL_AT=K the job has a hot standby (--ps_replicas=1) and ps:0 is
# killed (SIGKILL) once worker:0 logs step K: it is restarted at once and
# the chief relays its tables from its standby, in parts of at most
# --max_message_mb (MAX_MESSAGE_MB) each; the recovery's time is added.
#
# Prints RESULT lines (each worker's, each task's peak RSS) and a SUMMARY:
#   SUMMARY rows=R row_gb=G ps_memory_gb=M memory_per_row_bytes=B
#     max_ps_rss_mb=P max_worker_rss_mb=W rows_per_s=S [recovery_s=T updates_lost=L]
#
# Usage: benchmarks/embedding_scale.sh
# Environment: BUILD_DIR (build), PYTHON (/usr/bin/python3), DIM (64),
# ROWS (32768 new rows a step per worker), ROWS_TOTAL (10,485,760: 2.5 GiB
# of rows at DIM 64), NUM_PS (4), KILL_AT (none), MAX_MESSAGE_MB (1024).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
python=${PYTHON:-/usr/bin/python3}
dim=${DIM:-64}
rows=${ROWS:-32768}
total=${ROWS_TOTAL:-10485760}
num_ps=${NUM_PS:-4}
kill_at=${KILL_AT:-}
flags=(--max_message_mb="${MAX_MESSAGE_MB:-1024}")
[[ -n $kill_at ]] && flags+=(--ps_replicas=1 --restart_backoff_s=0 --log_every_steps=1)
steps=$(( (total + 2 * rows - 1) / (2 * rows) ))
work=$(mktemp -d -t pstrain-embscale-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
"$python" - "$work/spec.json" "$num_ps" <<'PY'
import json, sys
json.dump({"cluster": {"worker": ["localhost:%d" % (2300 + i) for i in range(2)],
                       "ps": ["localhost:%d" % (2400 + i) for i in range(int(sys.argv[2]))]}},
          open(sys.argv[1], "w"))
PY
"$build/bin/pstrain" launch --cluster_spec="$work/spec.json" --free_ports --run_dir="$work/run" \
  --mode=sync "${flags[@]}" -- "$python" "$root/benchmarks/embedding_scale_train.py" --dim="$dim" \
  --rows="$rows" --steps="$steps" > "$work/launch.log" 2>&1 &
launcher=$!
declare -A peak
killed=
while kill -0 "$launcher" 2>/dev/null; do
  if [[ -n $kill_at && -z $killed ]] && grep -q "^\[worker:0\] .* step $kill_at/" "$work/launch.log"; then
    killed=$(sed -n 's/^pstrain: started ps:0 (pid \([0-9]*\)).*/\1/p' "$work/launch.log")
    kill -KILL "$killed"
  fi
  while read -r task pid; do
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    [[ -n $rss ]] && (( rss > ${peak[$task]:-0} )) && peak[$task]=$rss
  done < <(sed -n 's/^pstrain: \(re\)\{0,1\}started \([^ ]*\) (pid \([0-9]*\)).*/\2 \3/p' "$work/launch.log")
  sleep 0.5
done
wait "$launcher" || { cat "$work/launch.log"; echo "the job failed"; exit 1; }
grep -E "RESULT|check:" "$work/launch.log" | sed 's/^\[[^]]*\] //'
# The relay of a killed ps's state (KILL_AT): its start, end and time.
grep -E "relaying the replica|relayed the replica|restored by the chief from its standby" \
  "$work/launch.log" || true
for task in "${!peak[@]}"; do
  echo "RESULT task=$task peak_rss_mb=$(( ${peak[$task]} / 1024 ))"
done | sort
"$python" - "$work/run/summary.json" "$work/launch.log" <<PY
import json, re, sys
s = json.load(open(sys.argv[1]))
t = s["embedding_tables"][0]
peaks = {k: int(v) // 1024 for k, v in zip("${!peak[*]}".split(), "${peak[*]}".split())}
ps = max(v for k, v in peaks.items() if k.startswith("ps"))
workers = max(v for k, v in peaks.items() if not k.startswith("ps"))
speeds = [float(x) for x in re.findall(r"rows_per_s=([0-9.]+)", open(sys.argv[2]).read())]
recovery = ""
if s.get("recoveries"):
    r = s["recoveries"][-1]
    recovery = " recovery_s=%.2f updates_lost=%d source=%s" % (
        r.get("seconds", 0), s.get("updates_lost", 0), r["source"])
print("SUMMARY rows=%d row_gb=%.2f ps_memory_gb=%.2f memory_per_row_bytes=%.0f "
      "max_ps_rss_mb=%d max_worker_rss_mb=%d rows_per_s=%.0f%s"
      % (t["rows"], t["row_bytes"] / 2**30, t["memory_bytes"] / 2**30,
         t["memory_bytes"] / t["rows"], ps, workers, sum(speeds), recovery))
PY
