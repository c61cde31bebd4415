#!/usr/bin/env bash
# What each --wire encoding costs and saves: 2 ps + 2 workers, every model x
# link x mode x encoding, each a separate `pstrain launch` (CURVE on, batch
# 128, seed 1), the encodings alternating innermost so that the machine's
# drift spreads over all of them. One RESULT line per run:
#   RESULT bench=wire model=... rate=... mode=... wire=... round=... steps=...
#     images_per_sec=... test_accuracy=... push_bytes=... sent_bytes=... received_bytes=...
# push_bytes: the chief's gradient payloads of one step, all shards
# (summary.json's push_bytes_per_step); sent_bytes / received_bytes: what
# the ps tasks received / sent, all messages, per worker step (their
# counters in summary.json: headers, payloads, pulls, heartbeats).
#
# Usage: benchmarks/wire_encodings.sh [ROUNDS]
# Environment:
#   MODELS="mnist_cnn cnn_large"  RATES="loopback 1gbit"  MODES="sync async"
#   WIRES="f32 bf16 fp16 topk:0.01"
#   OVERLAPS="true"   --overlap values, alternating innermost ("false true"
#                     measures what overlap buys)
#   EXTRA_FLAGS=""    more `pstrain launch` flags for every run
#                     (e.g. --shard_strategy=tensor_aligned)
#   STEPS_mnist_cnn=300 STEPS_cnn_large=100   steps per worker
# A rate other than loopback runs every task in a network namespace of its
# own with that tc rate on its egress (pstrain launch --isolate=netns
# --link_rate): root only. docs/reports/wire_encodings_<date>.md holds a run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD_DIR:-$root/build}/bin
rounds=${1:-1}
spec=$root/cluster_specs/local_2ps_2w.json
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

summary_fields() {  # summary.json -> "ips acc push sent received"
  python3 - "$1" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
worker_steps = max(1, s["steps_per_worker"] * s["num_workers"])
sent = sum(x["bytes_received"] for x in s["shards"]) / worker_steps
received = sum(x["bytes_sent"] for x in s["shards"]) / worker_steps
print("%.0f %.4f %.0f %.0f %.0f" % (s["train_images_per_sec"], s["final_test_accuracy"],
                                    s["push_bytes_per_step"], sent, received))
EOF
}

for round in $(seq "$rounds"); do
  for model in ${MODELS:-mnist_cnn cnn_large}; do
    steps_var=STEPS_$model
    steps=${!steps_var:-$([[ $model == cnn_large ]] && echo 100 || echo 300)}
    for rate in ${RATES:-loopback 1gbit}; do
      link=()
      [[ $rate != loopback ]] && link=(--isolate=netns "--link_rate=$rate")
      for mode in ${MODES:-sync async}; do
        for wire in ${WIRES:-f32 bf16 fp16 topk:0.01}; do
        for overlap in ${OVERLAPS:-true}; do
          dir="$out/$round-$model-$rate-$mode-${wire/:/_}-$overlap"
          echo "wire_encodings: round $round, $model, $rate, $mode, $wire, overlap $overlap" >&2
          "$bin/pstrain" launch --cluster_spec="$spec" --mode="$mode" --max_steps="$steps" \
            --epochs=100 --model="$model" --wire="$wire" --overlap="$overlap" --free_ports \
            --device=cpu --echo=none --run_dir="$dir" --data_dir="$root/data/mnist" \
            "${link[@]}" ${EXTRA_FLAGS:-} >/dev/null 2>&1
          read -r ips acc push sent received <<< "$(summary_fields "$dir/summary.json")"
          echo "RESULT bench=wire model=$model rate=$rate mode=$mode wire=$wire overlap=$overlap" \
               "round=$round steps=$steps images_per_sec=$ips test_accuracy=$acc" \
               "push_bytes=$push sent_bytes=$sent received_bytes=$received"
        done
        done
      done
    done
  done
done
