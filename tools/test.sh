#!/usr/bin/env bash
# The whole test suite: set up (packages, MNIST, build), then ctest.
# Extra arguments go to ctest, e.g. tools/test.sh -R ClusterSpec
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
# The runtime the export tests run exported models with.
"$root/tools/fetch_onnxruntime.sh"
build_dir=${BUILD_DIR:-$root/build}
# One test more than there are cores: the suite's tests wait a third of
# their time (process start-up, peers, deadlines): 65% of two cores busy at
# -j2, 320 s, against 261 s at -j3 (2026-11-26, 2 vCPUs).
exec ctest --test-dir "$build_dir" --output-on-failure -j "$(( $(nproc) + 1 ))" "$@"
