#!/usr/bin/env bash
# What overlap buys, in its two halves: each run a separate `pstrain launch`
# of cnn_large in sync (CURVE on, batch 128, seed 1), three variants
# alternating innermost so that the machine's drift spreads over them:
#   none     --overlap=false                       push all, then wait for all
#   push     --overlap=true --forward_ahead=false  each shard's push leaves
#                                                  as soon as backward made it
#   ahead    --overlap=true --forward_ahead=true   and the next forward runs
#                                                  while the replies come in,
#                                                  each layer once its own are in
# One RESULT line per run: images/s (summary.json) and, per worker step, the
# means over both workers of steps_worker*.csv after the first 10 steps:
# compute_ms (the step's computing, a forward ahead counted in the step
# that ran it), comm_ms (what the step waited for the ps) and wait_ms (of
# that, parked at a ps for the other worker); compute_ms + comm_ms is the
# step's wall time.
#
# Usage: benchmarks/overlap.sh [ROUNDS]
# Environment:
#   SPECS="local_1ps_2w local_2ps_2w"   cluster_specs/<name>.json
#   RATES="1gbit 100mbit"               tc rate of each task's link (root:
#                                       --isolate=netns), or loopback
#   VARIANTS="none push ahead"
#   STEPS=100                           steps per worker (100mbit: STEPS_100mbit=40)
#   EXTRA_FLAGS="--shard_strategy=tensor_aligned"   more launch flags
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD_DIR:-$root/build}/bin
rounds=${1:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

step_means() {  # run dir -> "compute comm wait" (ms, both workers, after step 10)
  python3 - "$1" <<'EOF'
import csv, glob, sys
rows = []
for path in sorted(glob.glob(sys.argv[1] + "/steps_worker*.csv")):
    rows += [r for r in csv.DictReader(open(path)) if int(r["step"]) >= 10]
mean = lambda k: sum(float(r[k]) for r in rows) / max(1, len(rows))
print("%.1f %.1f %.1f" % (mean("compute_ms"), mean("comm_ms"), mean("wait_ms")))
EOF
}

for round in $(seq "$rounds"); do
  for spec in ${SPECS:-local_1ps_2w local_2ps_2w}; do
    for rate in ${RATES:-1gbit 100mbit}; do
      link=()
      [[ $rate != loopback ]] && link=(--isolate=netns "--link_rate=$rate")
      steps_var=STEPS_$rate
      steps=${!steps_var:-${STEPS:-$([[ $rate == 100mbit ]] && echo 40 || echo 100)}}
      for variant in ${VARIANTS:-none push ahead}; do
        case $variant in
          none) flags=(--overlap=false) ;;
          push) flags=(--overlap=true --forward_ahead=false) ;;
          ahead) flags=(--overlap=true --forward_ahead=true) ;;
          *) echo "overlap.sh: unknown variant $variant" >&2; exit 2 ;;
        esac
        dir="$out/$round-$spec-$rate-$variant"
        echo "overlap: round $round, $spec, $rate, $variant" >&2
        "$bin/pstrain" launch --cluster_spec="$root/cluster_specs/$spec.json" --mode=sync \
          --max_steps="$steps" --epochs=100 --model=cnn_large "${flags[@]}" --free_ports \
          --device=cpu --echo=none --run_dir="$dir" --data_dir="$root/data/mnist" \
          "${link[@]}" ${EXTRA_FLAGS:-} >"$dir.log" 2>&1 ||
          { echo "overlap.sh: the run failed; its log:" >&2; tail -20 "$dir.log" >&2; exit 1; }
        ips=$(python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["train_images_per_sec"])' "$dir/summary.json")
        read -r compute comm wait <<< "$(step_means "$dir")"
        echo "RESULT bench=overlap spec=$spec rate=$rate variant=$variant round=$round" \
             "steps=$steps images_per_sec=$ips compute_ms=$compute comm_ms=$comm wait_ms=$wait"
      done
    done
  done
done
