#!/usr/bin/env bash
# Puts Fashion-MNIST (Zalando's MNIST-format clothing images) into
# data/fashion_mnist/ as four raw IDX files with MNIST's names, so that
# LoadMnist() reads it like MNIST.
#
# Usage: tools/fetch_fashion_mnist.sh [--dest DIR] [--source DIR]
#   --dest DIR    where to put the files (default: data/fashion_mnist/ in the repo)
#   --source DIR  take the files from DIR (raw or .gz) instead of Debian's package
#
# By default the files come from Debian's package dataset-fashion-mnist,
# which installs them gzipped under /usr/share/datasets/fashion-mnist/; when
# it is missing the script installs it with apt-get if run as root, and
# otherwise says how to. Each file is gunzipped, its SHA-256 checked, and it
# is moved into place only after all four have been verified. Idempotent:
# when DIR already holds the four files with the right digests, nothing is
# done; files in DIR with a wrong digest are removed.
set -euo pipefail

readonly DEB_PACKAGE="dataset-fashion-mnist"
readonly DEB_DIR="/usr/share/datasets/fashion-mnist"
readonly FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte
                t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
# Of the raw (gunzipped) files of Debian's dataset-fashion-mnist
# 0.0~git20200523.55506a9-1 (upstream commit 55506a9).
readonly DIGESTS=(c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888
                  bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9
                  5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b
                  0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34)

die() { echo "fetch_fashion_mnist: error: $*" >&2; exit 1; }
note() { echo "fetch_fashion_mnist: $*"; }

usage() { sed -n '2,17s/^# \{0,1\}//p' "$0"; }

require_sha256() {
  command -v sha256sum >/dev/null 2>&1 || command -v shasum >/dev/null 2>&1 ||
    die "neither sha256sum nor shasum found; cannot verify Fashion-MNIST"
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

# remove_bad DIR: deletes those of the four files in DIR whose digest is wrong.
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
    actual="$(sha256 "$1/${FILES[$i]}")"
    if [[ "$actual" != "${DIGESTS[$i]}" ]]; then
      die "${FILES[$i]}: SHA-256 mismatch (expected ${DIGESTS[$i]}, got $actual); nothing installed"
    fi
  done
}

# deb_dir: where the installed package keeps the files (from dpkg -L), else
# the path it has always used.
deb_dir() {
  local listed
  listed="$(dpkg -L "$DEB_PACKAGE" 2>/dev/null | grep '/train-images-idx3-ubyte\.gz$' || true)"
  if [[ -n "$listed" ]]; then dirname "$listed"; else echo "$DEB_DIR"; fi
}

deb_installed() {
  command -v dpkg-query >/dev/null 2>&1 &&
    [[ "$(dpkg-query -W -f='${Status}' "$DEB_PACKAGE" 2>/dev/null)" == "install ok installed" ]]
}

# ensure_deb: installs the Debian package when it is missing, as root.
ensure_deb() {
  deb_installed && return 0
  command -v apt-get >/dev/null 2>&1 ||
    die "no apt-get here: get the four Fashion-MNIST IDX files and pass --source DIR"
  [[ "$(id -u)" == 0 ]] ||
    die "$DEB_PACKAGE is not installed: run 'sudo apt-get install $DEB_PACKAGE'" \
        "(or pass --source DIR)"
  note "installing Debian package $DEB_PACKAGE"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q "$DEB_PACKAGE" >/dev/null; then
    note "apt-get install failed; updating the package lists and retrying"
    apt-get update -q >/dev/null || die "apt-get update failed"
    apt-get install -y -q "$DEB_PACKAGE" >/dev/null || die "apt-get install $DEB_PACKAGE failed"
  fi
}

# copy_from SOURCE STAGE: each file raw, else gunzipped from FILE.gz.
copy_from() {
  [[ -d "$1" ]] || die "$1 is not a directory"
  note "copying from $1"
  local f
  for f in "${FILES[@]}"; do
    if [[ -f "$1/$f" ]]; then
      cp "$1/$f" "$2/$f" || die "cannot copy $1/$f"
    elif [[ -f "$1/$f.gz" ]]; then
      gzip -dc "$1/$f.gz" >"$2/$f" || die "$1/$f.gz: cannot gunzip (corrupt?)"
    else
      die "$1 has neither $f nor $f.gz"
    fi
  done
}

main() {
  local script_dir dest source=""
  script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  dest="$(dirname "$script_dir")/data/fashion_mnist"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --dest) [[ $# -ge 2 ]] || die "--dest needs a directory"; dest="$2"; shift 2 ;;
      --dest=*) dest="${1#--dest=}"; shift ;;
      --source) [[ $# -ge 2 ]] || die "--source needs a directory"; source="$2"; shift 2 ;;
      --source=*) source="${1#--source=}"; shift ;;
      -h|--help) usage; exit 0 ;;
      *) usage >&2; die "unknown argument: $1" ;;
    esac
  done

  require_sha256
  if all_present "$dest"; then
    note "Fashion-MNIST already present in $dest (4 files, SHA-256 verified); nothing to do"
    exit 0
  fi
  if [[ -z "$source" ]]; then
    ensure_deb
    source="$(deb_dir)"
  fi
  mkdir -p "$dest" || die "cannot create $dest"
  dest="$(cd "$dest" && pwd)"
  remove_bad "$dest"
  # Staged inside dest so the final moves are renames on one file system.
  STAGE="$(mktemp -d "$dest/.fetch_fashion_mnist.XXXXXX")" ||
    die "cannot create a directory in $dest"
  trap 'rm -rf "$STAGE"' EXIT
  trap 'exit 130' INT TERM

  copy_from "$source" "$STAGE"
  verify "$STAGE"
  local f
  for f in "${FILES[@]}"; do
    mv -f "$STAGE/$f" "$dest/$f"
  done
  note "installed Fashion-MNIST into $dest (4 files, SHA-256 verified)"
}

main "$@"
