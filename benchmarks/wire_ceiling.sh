#!/usr/bin/env bash
# The wire's ceiling where a ps really is: PUSH_PULL between a ps_server
# process and 1-8 worker processes, against a two-process ZeroMQ echo of
# the same bytes (benchmarks/wire_bench.cc), plaintext and CURVE, alternated
# in one run, and the table of PUSH_PULL / echo.
#
# Usage: benchmarks/wire_ceiling.sh [OUT_FILE]     (default: wire_ceiling.txt in a temp dir)
#   SIZES     floats each way (default 21840,65536,669706,1048576,16777216:
#             mnist_cnn's 87 KB, 256 KiB, cnn_large's 2.68 MB, 4 MiB, 64 MiB)
#   WORKERS   concurrent worker processes (default 1,2,4,8)
#   SECURITY  plain,curve (default both)
#   ROUNDS    echo/PUSH_PULL alternations per cell (default 2)
#   SECONDS_PER_RUN  timed seconds per measurement (default 1.5)
#   MODE      the ps's update mode, async or sync (default async)
#   PS_FLAGS  ps_server flags, ';' between variants, each a PUSH_PULL of its
#             own in every round (e.g. '--update_threads=1;--update_threads=4')
#   ECHO_WORK echoes to measure beside the plain one (e.g. none,sgd: an echo
#             that makes one SGD pass before it answers)
#   PSTRAIN_PREBUILT=DIR  binaries from benchmarks/gpu_pack.sh (DIR/bin,
#             their libraries in DIR/lib); default build/bin
#   TIMEOUT_S the whole run's limit (default 1500 s; each measurement has
#             its own, 60 s)
# Every measurement takes SECONDS_PER_RUN plus about half a second of start and end
# (more for CURVE and 64 MiB): the default matrix, 160 measurements, takes
# 5-7 minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
if [[ -n ${PSTRAIN_PREBUILT:-} ]]; then
  prebuilt=$(cd "$PSTRAIN_PREBUILT" && pwd)
  bin=$prebuilt/bin
  export LD_LIBRARY_PATH=$prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
for b in wire_bench ps_server; do
  [[ -x $bin/$b ]] || { echo "wire_ceiling: no $bin/$b (build with -DPSTRAIN_BUILD_BENCHMARKS=ON)" >&2; exit 1; }
done
out=${1:-$(mktemp -d -t pstrain-wire-XXXXXX)/wire_ceiling.txt}
{
  echo "# $(date -u +%FT%TZ) $(uname -n): $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out"
set +e
timeout "${TIMEOUT_S:-1500}" "$bin/wire_bench" --ps_server="$bin/ps_server" \
  --sizes="${SIZES:-21840,65536,669706,1048576,16777216}" --workers="${WORKERS:-1,2,4,8}" \
  --security="${SECURITY:-plain,curve}" --rounds="${ROUNDS:-2}" --seconds="${SECONDS_PER_RUN:-1.5}" \
  --mode="${MODE:-async}" --ps_flags="${PS_FLAGS:-}" --echo_work="${ECHO_WORK:-none}" \
  --timeout_s=60 2>&1 | tee -a "$out"
status=${PIPESTATUS[0]}
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
echo "wire_ceiling: results in $out" >&2
exit "$status"
