#!/usr/bin/env bash
# pstrain's PUSH_PULL against ps-lite's (dmlc/ps-lite, the library BytePS
# and MXNet's kvstore grew from) on this machine, run alternately: one
# worker, one server, loopback TCP, n floats pushed and n floats back per
# round trip, for the same sizes as ps_bench's BM_PushPullRoundTrip.
#   pstrain: build/bin/ps_bench (SGD update on the ps, no encryption);
#   ps-lite: benchmarks/pslite/pslite_pushpull.cc, a summing server (what
#            ps-lite's default handler does) with ZPushPull (its zero-copy
#            call), built here against ps-lite's sources.
# Alongside pstrain, the same ps_bench run measures BM_RawZmqEchoTwoContexts:
# ZeroMQ echoing the same bytes between two contexts (no parameter server
# at all), the ceiling either system can reach on this loopback. Prints the
# three figures per size, pstrain / ps-lite, and each system's share of the
# echo.
#
# Usage: benchmarks/pslite_compare.sh [ROUNDS]       (default 2: p, s, p, s)
#   PSLITE_SRC  a ps-lite checkout, or a bare git directory of one; default:
#               cloned from https://github.com/dmlc/ps-lite at PSLITE_COMMIT
#   SIZES       float counts (default 21840,65536,669706,1048576,16777216:
#               mnist_cnn, 256 KiB, cnn_large's 2.68 MB, 4 MiB, 64 MiB)
#   SECONDS_PER_SIZE  per timed run of ps-lite (default 2; 3 runs, median)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-2}
sizes=${SIZES:-21840,65536,669706,1048576,16777216}
seconds=${SECONDS_PER_SIZE:-2}
commit=${PSLITE_COMMIT:-15b8adf}
work=$root/build/pslite
mkdir -p "$work"
say() { echo "pslite_compare: $*" >&2; }

# 1. ps-lite's sources.
src=$work/src
if [[ ! -f $src/CMakeLists.txt ]]; then
  rm -rf "$src"
  if [[ -n ${PSLITE_SRC:-} && -f $PSLITE_SRC/CMakeLists.txt ]]; then
    cp -r "$PSLITE_SRC" "$src"
  elif [[ -n ${PSLITE_SRC:-} ]]; then
    mkdir -p "$src" && git --git-dir="$PSLITE_SRC" archive "$commit" | tar -x -C "$src"
  else
    git clone -q https://github.com/dmlc/ps-lite "$src" && git -C "$src" checkout -q "$commit"
  fi
fi

# 2. ps-lite (its CMake build, against Debian's ZeroMQ and protobuf), then
#    our round-trip program against it.
if [[ ! -f $work/lib/libpslite.a ]]; then
  say "building ps-lite (log: $work/build.log)"
  cmake -S "$src" -B "$work/lib" -DCMAKE_BUILD_TYPE=Release >"$work/build.log" 2>&1
  cmake --build "$work/lib" -j "$(nproc)" --target pslite >>"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log" >&2; exit 1; }
fi
g++ -O2 -std=c++17 "$root/benchmarks/pslite/pslite_pushpull.cc" -I"$src/include" -I"$work/lib" \
  "$work/lib/libpslite.a" -lzmq -lprotobuf -lpthread -o "$work/pslite_pushpull"
[[ -x $root/build/bin/ps_bench ]] || { say "build/bin/ps_bench missing: run tools/setup.sh"; exit 1; }

# 3. One ps-lite job: scheduler, server and worker on a free port.
run_pslite() {
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  local pids=()
  for role in scheduler server; do
    DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port \
      DMLC_ROLE=$role timeout 600 "$work/pslite_pushpull" "$sizes" "$seconds" >/dev/null 2>&1 &
    pids+=($!)
  done
  DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port \
    DMLC_ROLE=worker timeout 600 "$work/pslite_pushpull" "$sizes" "$seconds"
  wait "${pids[@]}"
}
run_pstrain() {
  local filter
  filter="BM_(PushPullRoundTrip|RawZmqEchoTwoContexts)/($(tr ',' '|' <<<"$sizes"))/real_time"
  "$root/build/bin/ps_bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true 2>/dev/null | python3 -c '
import re, sys
scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}
names = {"PushPullRoundTrip": "pstrain", "RawZmqEchoTwoContexts": "zmq_echo"}
for line in sys.stdin:
    m = re.match(r"BM_(\w+)/(\d+)/real_time_median .*bytes_per_second=([\d.]+)([kMG]?)/s", line)
    if m and m[1] in names:
        print(f"RESULT system={names[m[1]]} floats={m[2]} bytes_per_s={float(m[3]) * scale[m[4]]:.0f}")'
}
results=$work/results.txt
: >"$results"
for ((r = 1; r <= rounds; ++r)); do
  say "round $r of $rounds: ps-lite"
  run_pslite | tee -a "$results"
  say "round $r of $rounds: pstrain"
  run_pstrain | tee -a "$results"
done
python3 - "$results" <<'PY'
import collections, re, statistics, sys
rates = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    if "bytes_per_s" in m:
        rates[(m["system"], int(m["floats"]))].append(float(m["bytes_per_s"]))
print("\n| floats | bytes each way | ps-lite MB/s | pstrain MB/s | ZeroMQ echo MB/s | pstrain / ps-lite | ps-lite / echo | pstrain / echo |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for n in sorted({n for _, n in rates}):
    p, s, e = (rates.get((name, n), []) for name in ("pslite", "pstrain", "zmq_echo"))
    if not p or not s:
        continue
    pm, sm = statistics.median(p), statistics.median(s)
    em = statistics.median(e) if e else float("nan")
    fmt = lambda xs: " / ".join(f"{x / 1e6:,.0f}" for x in xs) or "-"
    print(f"| {n} | {n * 4:,} | {fmt(p)} | {fmt(s)} | {fmt(e)} | {sm / pm:.2f} | "
          f"{pm / em:.2f} | {sm / em:.2f} |")
PY
