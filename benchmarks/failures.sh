#!/usr/bin/env bash
# What a failure costs: one task of a 2 ps + 2 worker job SIGKILLed
# from outside, in the middle of its run under `pstrain launch` (which
# restarts it, as a TFJob's restart policy would), against the same job
# undisturbed. Prints one RESULT line per run: how the launch ended, the
# test accuracy, and what summary.json says was restarted, recovered and
# lost.
#
# Usage: benchmarks/failures.sh [MODES] [CASES] [EPOCHS]
#   MODES   "sync async" (default)
#   CASES   any of: none ps0 worker1 chief ps0_standby ps0_lost launcher
#           (default: all). ps0_standby: --ps_replicas=1; ps0_lost: the
#           same, and the killed ps comes back only 10 s later
#           (--restart_backoff_s=10), so its standby serves its shard
#           meanwhile; launcher: the whole launcher SIGKILLed, then
#           `pstrain launch --resume=RUN_DIR` (sync: compares
#           final_params.f32 with the undisturbed run's, byte for byte).
#   EPOCHS  2 (default)
# Environment: OUT=DIR (default /tmp/pstrain_failures), KILL_AT_S (default 5).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
modes=${1:-"sync async"}
cases=${2:-"none ps0 worker1 chief ps0_standby ps0_lost launcher"}
epochs=${3:-2}
out=${OUT:-/tmp/pstrain_failures}
kill_at=${KILL_AT_S:-5}
bin=$root/build/bin
mkdir -p "$out"

# summary.json's fields for the RESULT line (python3 reads the JSON).
summarize() {
  python3 - "$1" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
rec = s.get("recoveries", [])
print("accuracy=%.4f restarts=%d updates_lost=%d recoveries=%d sources=%s what=%s" % (
    s.get("final_test_accuracy", 0), s.get("restarts", 0), s.get("updates_lost", 0), len(rec),
    ",".join(r.get("source", "?") for r in rec) or "-",
    json.dumps("; ".join(r.get("what", "") for r in rec))))
EOF
}

# The pid `pstrain launch` reported for a task ("pstrain: started ps:0 (pid N)";
# printed unless --echo=none).
task_pid() {
  grep -o "started $2 (pid [0-9]*)" "$1" | tail -1 | grep -o '[0-9]*)' | tr -d ')'
}

run() {
  local mode=$1 case=$2 dir=$out/$1-$2
  local flags=(--cluster_spec="$root/cluster_specs/local_2ps_2w.json" --free_ports --epochs="$epochs"
               --mode="$mode" --seed=1 --checkpoint_every_steps=50 --echo=progress
               --data_dir="$root/data/mnist" --run_dir="$dir")
  case $case in
    ps0_standby) flags+=(--ps_replicas=1) ;;
    ps0_lost) flags+=(--ps_replicas=1 --restart_backoff_s=10) ;;
  esac
  rm -rf "$dir"
  local log=$dir.log
  local start=$SECONDS
  "$bin/pstrain" launch "${flags[@]}" >"$log" 2>&1 &
  local launcher=$!
  local victim=""
  case $case in
    ps0|ps0_standby|ps0_lost) victim=ps:0 ;;
    worker1) victim=worker:1 ;;
    chief) victim=worker:0 ;;
  esac
  if [[ $case != none ]]; then
    sleep "$kill_at"
    if [[ $case == launcher ]]; then
      kill -9 "$launcher"
    else
      kill -9 "$(task_pid "$log" "$victim")"
    fi
  fi
  local code=0
  wait "$launcher" || code=$?
  if [[ $case == launcher ]]; then
    sleep 1  # the tasks die with their launcher (PR_SET_PDEATHSIG)
    code=0
    "$bin/pstrain" launch --resume="$dir" --echo=none >>"$log" 2>&1 || code=$?
  fi
  local wall=$((SECONDS - start))
  local what="no summary"
  [[ -f $dir/summary.json ]] && what=$(summarize "$dir")
  local same=""
  if [[ $mode == sync && $case != none && -f $dir/final_params.f32 ]]; then
    cmp -s "$dir/final_params.f32" "$out/sync-none/final_params.f32" && same=" bitwise_equal_to_undisturbed=1" \
      || same=" bitwise_equal_to_undisturbed=0"
  fi
  echo "RESULT failures mode=$mode killed=$case exit=$code wall_s=$wall $what$same"
}

for mode in $modes; do
  for case in $cases; do run "$mode" "$case"; done
done
