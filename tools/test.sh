#!/usr/bin/env bash
# The whole test suite: set up (packages, MNIST, build), then ctest.
# Extra arguments go to ctest, e.g. tools/test.sh -R ClusterSpec
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
# The runtime the export tests run exported models with.
"$root/tools/fetch_onnxruntime.sh"
build_dir=${BUILD_DIR:-$root/build}
exec ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
