#!/usr/bin/env bash
# The main job: set up (packages, MNIST, build), then train the seed CNN
# with 2 ps and 2 workers in sync mode on this machine. Extra flags go to
# `pstrain launch` and override these defaults, e.g.
#   tools/train.sh --mode=async --epochs=1
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
cd "$root"
exec "${BUILD_DIR:-$root/build}/bin/pstrain" launch \
  --cluster_spec=cluster_specs/local_2ps_2w.json --mode=sync --epochs=3 --echo=progress "$@"
