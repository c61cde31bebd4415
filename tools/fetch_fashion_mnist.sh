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

PROG=fetch_fashion_mnist
# shellcheck source=tools/lib/idx_fetch.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/idx_fetch.sh"

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

  if [[ -z "$source" ]] && ! all_present "$dest"; then
    ensure_deb
    source="$(deb_dir)"
  fi
  install_into "$dest" copy_from "$source"
}

main "$@"
