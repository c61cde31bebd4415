# shellcheck shell=bash
# Shared by tools/fetch_mnist.sh and tools/fetch_fashion_mnist.sh: checking,
# staging and installing four IDX files whose SHA-256 digests are known.
#
# Before sourcing, a script defines:
#   PROG     its name, for messages
#   FILES    the four file names
#   DIGESTS  their SHA-256 digests, in the same order

die() { echo "$PROG: error: $*" >&2; exit 1; }
note() { echo "$PROG: $*"; }

# usage: the script's header comment (lines 2..17 without "# ").
usage() { sed -n '2,17s/^# \{0,1\}//p' "$0"; }

require_sha256() {
  command -v sha256sum >/dev/null 2>&1 || command -v shasum >/dev/null 2>&1 ||
    die "neither sha256sum nor shasum found; cannot verify the data"
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

# install_into DEST FETCH...: unless DEST already holds the verified files,
# stages them with the command FETCH... STAGE (inside DEST, so the final
# moves are renames on one file system), verifies all four, then moves them
# into place. An interrupted or failed run leaves no bad file behind.
install_into() {
  local dest="$1"
  shift
  require_sha256
  if all_present "$dest"; then
    note "already present in $dest (4 files, SHA-256 verified); nothing to do"
    return 0
  fi
  mkdir -p "$dest" || die "cannot create $dest"
  dest="$(cd "$dest" && pwd)"
  remove_bad "$dest"
  STAGE="$(mktemp -d "$dest/.$PROG.XXXXXX")" || die "cannot create a directory in $dest"
  trap 'rm -rf "$STAGE"' EXIT
  trap 'exit 130' INT TERM
  "$@" "$STAGE"
  verify "$STAGE"
  local f
  for f in "${FILES[@]}"; do
    mv -f "$STAGE/$f" "$dest/$f"
  done
  note "installed into $dest (4 files, SHA-256 verified)"
}
