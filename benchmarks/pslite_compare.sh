#!/usr/bin/env bash
# pstrain's PUSH_PULL against ps-lite's (dmlc/ps-lite, the library BytePS
# and MXNet's kvstore grew from), process against process on this machine:
# one server and 1-N worker processes on loopback TCP, n floats pushed and
# n floats back per round trip, every worker timing the same seconds;
# beside a two-process ZeroMQ echo of the same bytes (no parameter server
# at all: the ceiling either system can reach here).
#   pstrain: benchmarks/wire_bench.cc: a ps_server process (async, an SGD
#            update, plaintext) and W worker processes, each a PsClient;
#            the echo in the same run, alternated with it;
#   ps-lite: benchmarks/pslite/pslite_pushpull.cc: a scheduler, one server
#            (summing: ps-lite's own default handler's work) and W workers,
#            each ZPushPull-ing (its zero-copy call); built here against
#            ps-lite's sources.
# ps-lite and pstrain run alternately, ROUNDS times each. Prints a table per
# (size, workers): aggregate MB/s (both ways, every worker) of each system
# and the echo, pstrain / ps-lite and each system's share of the echo.
#
# With EMBEDDING_DIM=D, rows instead of dense tensors: each round trip pulls
# n / D rows of D floats by id and pushes a gradient row for each, in
# pstrain as EMBEDDING_PULL + EMBEDDING_PUSH to a table and the step's
# dense PUSH_PULL of one float, which the ps applies the rows with
# (wire_bench's rows client), and in ps-lite as keyed ZPull + ZPush
# (pslite/pslite_rows.cc: a row per key on the server, SGD applied as it
# comes), each worker walking the same ROWS_PER_WORKER ids (default
# 262144) of a table made before timing. PSLITE_OVERLAP=1: ps-lite pushes
# a block and pulls the next one in flight together (one round trip a
# step, its best idiom for a loop that knows its next keys).
# PSTRAIN_PREFETCH=1: pstrain does the same (each push asks for the next
# block's rows, as pst.Embedding.prefetch does: wire_bench
# --rows_prefetch); set both to compare the two systems' one-round-trip
# idioms, either alone to compare one with the other's two round trips.
#
# LOCAL=1: each system's own transport for processes of one host instead
# of loopback TCP: ps-lite's DMLC_LOCAL=1 (ZeroMQ's ipc://), pstrain's
# Unix socket link (wire_bench --security=plain-local, what an --insecure
# job's co-located workers use), and the echo over a raw Unix socket
# (--echo_transport=unix).
#
# Usage: benchmarks/pslite_compare.sh [ROUNDS]       (default 2: p, s, p, s)
#   WORKERS     worker counts (default 1; e.g. 1,2,4,8)
#   SIZES       float counts (default 21840,65536,669706,1048576,16777216:
#               mnist_cnn, 256 KiB, cnn_large's 2.68 MB, 4 MiB, 64 MiB)
#   SECONDS_PER_SIZE  ps-lite: per timed run (3 runs, median); pstrain and
#               the echo: per measurement, after wire_bench's untimed
#               warm-up (default 1)
#   PSLITE_SRC  a ps-lite checkout, or a bare git directory of one; default:
#               cloned from https://github.com/dmlc/ps-lite at PSLITE_COMMIT
#   PSTRAIN_PREBUILT=DIR  binaries from benchmarks/gpu_pack.sh (DIR/bin:
#               wire_bench, ps_server and, where it was built before
#               packing, pslite_pushpull; their libraries in DIR/lib)
#   OUT         where the results go (default BUILD_DIR/pslite/results.txt)
#   BUILD_DIR   the build (default build/): its bin/, and pslite/ for ps-lite's
#   PROCESS_TIMEOUT_S  the bound of each ps-lite process (default 600); a
#               pstrain measurement has its own, 60 s
# The processes stay in the script's process group (timeout --foreground),
# so a `timeout` around the script ends them with it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-2}
sizes=${SIZES:-21840,65536,669706,1048576,16777216}
workers_list=${WORKERS:-1}
seconds=${SECONDS_PER_SIZE:-1}
commit=${PSLITE_COMMIT:-15b8adf}
build=${BUILD_DIR:-$root/build}
work=$build/pslite
bin=$build/bin
limit=${PROCESS_TIMEOUT_S:-600}
dim=${EMBEDDING_DIM:-0}
same_host=${LOCAL:-0}
per_worker=${ROWS_PER_WORKER:-262144}
if [[ ${PSTRAIN_PREFETCH:-0} == 1 ]]; then prefetch=true; else prefetch=false; fi
if ((dim > 0)); then program=pslite_rows; else program=pslite_pushpull; fi
say() { echo "pslite_compare: $*" >&2; }
if [[ -n ${PSTRAIN_PREBUILT:-} ]]; then
  prebuilt=$(cd "$PSTRAIN_PREBUILT" && pwd)
  bin=$prebuilt/bin
  export LD_LIBRARY_PATH=$prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
for b in wire_bench ps_server; do
  [[ -x $bin/$b ]] || { say "no $bin/$b (build with -DPSTRAIN_BUILD_BENCHMARKS=ON)"; exit 1; }
done
mkdir -p "$work"
pslite=$bin/$program
if [[ ! -x $pslite ]]; then
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
  #    our round-trip program against it (benchmarks/gpu_pack.sh packs it).
  if [[ ! -f $work/lib/libpslite.a ]]; then
    say "building ps-lite (log: $work/build.log)"
    cmake -S "$src" -B "$work/lib" -DCMAKE_BUILD_TYPE=Release >"$work/build.log" 2>&1
    cmake --build "$work/lib" -j "$(nproc)" --target pslite >>"$work/build.log" 2>&1 ||
      { tail -30 "$work/build.log" >&2; exit 1; }
  fi
  pslite=$work/$program
  g++ -O2 -std=c++17 "$root/benchmarks/pslite/$program.cc" -I"$root" -I"$src/include" -I"$work/lib" \
    "$work/lib/libpslite.a" -lzmq -lprotobuf -lpthread -o "$pslite"
fi

# 3. One ps-lite job: scheduler, server and W workers on a free port.
run_pslite() {  # run_pslite WORKERS ROUND: its workers' RESULT lines, tagged with the round
  local port pids=() status=0 i
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=$1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port
  ((same_host == 0)) || export DMLC_LOCAL=1
  local args=("$sizes" "$seconds")
  ((dim == 0)) || args=("$sizes" "$dim" "$per_worker" "$seconds")
  for role in scheduler server; do
    DMLC_ROLE=$role timeout --foreground "$limit" "$pslite" "${args[@]}" >/dev/null 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < $1; ++i)); do
    DMLC_ROLE=worker timeout --foreground "$limit" "$pslite" "${args[@]}" |
      sed -u "s/^RESULT /RESULT round=$2 /" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  unset DMLC_NUM_SERVER DMLC_NUM_WORKER DMLC_PS_ROOT_URI DMLC_PS_ROOT_PORT DMLC_LOCAL
  ((status == 0)) || say "a ps-lite process failed"
}
# 4. pstrain and the echo (wire_bench's RESULT lines, as they are).
run_pstrain() {  # run_pstrain WORKERS
  local transport=(--security=plain)
  ((same_host == 0)) || transport=(--security=plain-local --echo_transport=unix)
  "$bin/wire_bench" --ps_server="$bin/ps_server" --sizes="$sizes" --workers="$1" \
    "${transport[@]}" --rounds=1 --seconds="$seconds" --timeout_s=60 --embedding_dim="$dim" \
    --rows_per_worker="$per_worker" --rows_prefetch="${prefetch}" 2>/dev/null | grep '^RESULT' ||
    say "a pstrain measurement failed"
}
results=${OUT:-$work/results.txt}
: >"$results"
echo "# $(date -u +%FT%TZ): $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$results"
for ((r = 1; r <= rounds; ++r)); do
  for w in ${workers_list//,/ }; do
    say "round $r of $rounds, $w worker(s): ps-lite"
    run_pslite "$w" "$r" | tee -a "$results"
    say "round $r of $rounds, $w worker(s): pstrain and the echo"
    run_pstrain "$w" | tee -a "$results"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$results"
python3 - "$results" <<'PY'
import collections, re, statistics, sys
# (system, floats, workers) -> [aggregate bytes/s of each round]
rates = collections.defaultdict(list)
pslite = collections.defaultdict(float)  # (floats, workers, round) -> sum over its workers
for line in open(sys.argv[1]):
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    if not line.startswith("RESULT"):
        continue
    if m.get("system") == "pslite":
        pslite[(int(m["floats"]), int(m["workers"]), m["round"])] += float(m["bytes_per_s"])
    elif m.get("system") in ("push_pull", "rows", "rows_prefetch", "echo"):
        m["system"] = "echo" if m["system"] == "echo" else "push_pull"
        rates[(m["system"], int(m["floats"]), int(m["workers"]))].append(
            float(m["aggregate_bytes_per_s"]))
for (n, w, _), b in pslite.items():
    rates[("pslite", n, w)].append(b)
print("\n| floats (bytes each way) | workers | ps-lite MB/s | pstrain MB/s | echo MB/s "
      "| pstrain / ps-lite | ps-lite / echo | pstrain / echo |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
fmt = lambda xs: " / ".join(f"{x / 1e6:,.0f}" for x in xs) or "-"
med = lambda xs: statistics.median(xs) if xs else float("nan")
for n, w in sorted({(n, w) for _, n, w in rates}):
    p, s, e = (rates.get((name, n, w), []) for name in ("pslite", "push_pull", "echo"))
    print(f"| {n} ({n * 4:,}) | {w} | {fmt(p)} | {fmt(s)} | {fmt(e)} | {med(s) / med(p):.2f} | "
          f"{med(p) / med(e):.2f} | {med(s) / med(e):.2f} |")
print("\n(MB/s: bytes out and back summed over the workers, 1e6 bytes, each round's figure; "
      "the ratios of the medians)")
PY
