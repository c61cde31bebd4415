#!/usr/bin/env bash
# The wire where the cores exist: one bounded run for a many-core host that
# has none of our packages (what benchmarks/gpu_pack.sh packed). Three
# steps, each bounded by what is left of TOTAL_S (one not started with less
# than 30 s left is skipped, and said):
#   1. plaintext PUSH_PULL between a ps process and 1-8 worker processes
#      against a two-process echo of the same bytes and an echo that makes
#      one SGD pass (the least a ps does), with the ps's update on 1 and on
#      UPDATE_THREADS threads (256 KiB, cnn_large's 2.68 MB, 4 MiB);
#   2. the same PUSH_PULL against ps-lite's ZPushPull, 1-8 workers
#      (benchmarks/pslite_compare.sh; needs pslite_pushpull packed);
#   3. CURVE: PUSH_PULL with the ps's default I/O threads, 1-8 workers.
# The logs and a summary (the tables) go to OUT_DIR, and to RESULTS_DIR after
# each step when it is set.
#
# Usage: PSTRAIN_PREBUILT=DIR benchmarks/wire_host.sh
#   OUT_DIR         default: a new temporary directory
#   TOTAL_S         the whole run's bound (default 540)
#   RESULTS_DIR     where copies of the results go after each step
#   WORKERS         default 1,2,4,8
#   SIZES           default 65536,669706,1048576
#   UPDATE_THREADS  the ps's --update_threads beside 1 (default 4)
#   SECONDS_PER_RUN default 1
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT_DIR:-$(mktemp -d -t pstrain-wire-host-XXXXXX)}
total=${TOTAL_S:-540}
workers=${WORKERS:-1,2,4,8}
sizes=${SIZES:-65536,669706,1048576}
threads=${UPDATE_THREADS:-4}
seconds=${SECONDS_PER_RUN:-1}
mkdir -p "$out"
start=$SECONDS
skipped=() failed=()
say() { echo "wire_host: $*" >&2; }
save() {
  grep -h '^|\|^#\|^(' "$out"/*.log >"$out/summary.txt" 2>/dev/null
  [[ -n ${RESULTS_DIR:-} ]] && mkdir -p "$RESULTS_DIR" && cp "$out"/*.log "$out/summary.txt" "$RESULTS_DIR/" 2>/dev/null
  return 0
}
# Each step's command, given the seconds it may take ($1); the scripts'
# own bounds keep every process inside them (wire_ceiling.sh's TIMEOUT_S,
# pslite_compare.sh's PROCESS_TIMEOUT_S and its processes in its group).
plain() {
  SIZES="$sizes" WORKERS="$workers" SECURITY=plain ROUNDS=2 SECONDS_PER_RUN="$seconds" \
    ECHO_WORK=none,sgd PS_FLAGS="--update_threads=1;--update_threads=$threads" TIMEOUT_S="$1" \
    "$root/benchmarks/wire_ceiling.sh" "$out/plain_update_threads.txt"
}
pslite() {
  SIZES="$sizes" WORKERS="$workers" SECONDS_PER_SIZE="$seconds" OUT="$out/pslite_results.txt" \
    PROCESS_TIMEOUT_S="$(($1 < 120 ? $1 : 120))" timeout "$1" "$root/benchmarks/pslite_compare.sh" 1
}
curve() {
  SIZES=669706 WORKERS="$workers" SECURITY=curve ROUNDS=1 SECONDS_PER_RUN=2 TIMEOUT_S="$1" \
    "$root/benchmarks/wire_ceiling.sh" "$out/curve.txt"
}
step() {  # step NAME SHARE: runs NAME with SHARE% of TOTAL_S, at most what is left
  local name=$1 left=$((total - (SECONDS - start))) budget=$((total * $2 / 100))
  ((budget > left)) && budget=$left
  if ((budget < 30)); then
    skipped+=("$name")
    say "$name skipped: ${left} s left of ${total}"
    return
  fi
  say "$name ($((SECONDS - start)) s in, up to ${budget} s)"
  "$name" "$budget" >"$out/$name.log" 2>&1 || failed+=("$name")
  save
}
echo "# $(date -u +%FT%TZ): $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  >"$out/host.log"
step plain 45
step pslite 35
step curve 100
save
say "done in $((SECONDS - start)) s; results in $out${RESULTS_DIR:+ and $RESULTS_DIR}"
((${#skipped[@]} == 0)) || say "skipped: ${skipped[*]}"
((${#failed[@]} == 0)) || { say "failed: ${failed[*]} (see their logs)"; exit 1; }
