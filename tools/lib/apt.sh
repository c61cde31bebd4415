# shellcheck shell=bash
# Shared by tools/setup.sh and tools/ci_stages.sh: installs the Debian
# packages that are missing, as root or through sudo.
#
# Before sourcing, a script defines die() (prints its message and exits).

missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# usage: install_packages PKG... (only the missing ones are installed)
install_packages() {
  local missing
  mapfile -t missing < <(missing_packages "$@")
  [[ ${#missing[@]} -eq 0 ]] && return 0
  echo "${PROG:-setup}: installing ${missing[*]}"
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "missing packages ${missing[*]}; run as root or install them"
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get install -y -q "${missing[@]}" >/dev/null; then
    "${sudo[@]}" apt-get update -q >/dev/null
    "${sudo[@]}" apt-get install -y -q "${missing[@]}" >/dev/null ||
      die "apt-get install ${missing[*]} failed"
  fi
}
