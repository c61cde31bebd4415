#!/usr/bin/env bash
# Installs ONNX Runtime for Node.js (npm's onnxruntime-node, CPU only) into
# third_party/onnxruntime/, where tools/onnx/evaluate_onnx.js and the export
# tests find it. Only the tests need it: it is the independent runtime that
# runs the models `pstrain export` writes.
#
# Usage: tools/fetch_onnxruntime.sh [--dest DIR]
# The package's CPU binaries ship inside it; its install script only
# downloads GPU extras from the internet, so it is skipped
# (--ignore-scripts). Idempotent: nothing is done when DIR already holds
# this version.
set -euo pipefail

readonly PACKAGE=onnxruntime-node
readonly VERSION=1.30.0
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/third_party/onnxruntime
die() { echo "fetch_onnxruntime: error: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --dest) [[ $# -ge 2 ]] || die "--dest needs a directory"; dest=$2; shift 2 ;;
    *) die "unknown argument $1 (usage: tools/fetch_onnxruntime.sh [--dest DIR])" ;;
  esac
done

installed=$dest/node_modules/$PACKAGE/package.json
if [[ -f $installed ]] && grep -q "\"version\": \"$VERSION\"" "$installed"; then
  exit 0
fi
command -v npm >/dev/null 2>&1 || die "npm not found (Debian: apt-get install npm)"
echo "fetch_onnxruntime: installing $PACKAGE@$VERSION into $dest"
mkdir -p "$dest"
# A package.json of its own, so npm installs here and not in a parent.
[[ -f $dest/package.json ]] || echo '{"private": true}' >"$dest/package.json"
npm install --prefix "$dest" --ignore-scripts --no-audit --no-fund --loglevel=error \
    "$PACKAGE@$VERSION" >/dev/null
node -e "require('$dest/node_modules/$PACKAGE')" ||
  die "$PACKAGE@$VERSION installed but does not load on this machine"
echo "fetch_onnxruntime: ready: $dest/node_modules/$PACKAGE"
