#!/usr/bin/env bash
# Peak resident memory of every task of a real job: 1 ps + 2 workers
# (mnist_cnn on the CPU, sync, STEPS steps per worker), each task started by
# hand under GNU time with its own TF_CONFIG, so that each one's peak (not
# the launcher's) is what is measured. One RESULT line per task.
#
# Usage: benchmarks/worker_rss.sh [STEPS]       (default 235: one epoch)
# Environment: BUILD_DIR (default build), MODEL (default mnist_cnn)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD_DIR:-$root/build}/bin
steps=${1:-235}
model=${MODEL:-mnist_cnn}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
ports=$(python3 -c '
import socket
ss=[socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
read -r p0 p1 p2 <<<"$ports"
cluster="{\"worker\": [\"localhost:$p0\", \"localhost:$p1\"], \"ps\": [\"localhost:$p2\"]}"
config() { echo "{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }
flags=(--insecure --mode=sync --max_steps="$steps" --model="$model" --device=cpu
       --data_dir="$root/data/mnist" --log_every_steps=0)
TF_CONFIG=$(config ps 0) /usr/bin/time -f "%M" -o "$work/ps0" "$bin/ps_server" --insecure \
  >"$work/ps0.log" 2>&1 &
TF_CONFIG=$(config worker 1) /usr/bin/time -f "%M" -o "$work/worker1" "$bin/worker" "${flags[@]}" \
  >"$work/worker1.log" 2>&1 &
TF_CONFIG=$(config worker 0) /usr/bin/time -f "%M" -o "$work/worker0" "$bin/worker" "${flags[@]}" \
  --run_dir="$work/run" >"$work/worker0.log" 2>&1 || { cat "$work/worker0.log" >&2; exit 1; }
wait
for task in ps0 worker0 worker1; do
  kb=$(tail -n 1 "$work/$task")
  echo "RESULT bench=rss task=$task model=$model steps=$steps peak_rss_mb=$((kb / 1024))"
done
