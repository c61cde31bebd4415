#!/usr/bin/env bash
# Builds pstrain's container image (deploy/Dockerfile) with podman, and
# prints its size and the build time.
#
# Usage: tools/build_image.sh [TAG]        (default localhost/pstrain:dev)
# Environment:
#   PSTRAIN_IMAGE_CACHE=DIR  where the base image's root and podman's config live
#                            (default /var/cache/pstrain)
#
# The base is debian:bookworm. When podman does not have it (pull it first
# where a registry can be reached: podman pull docker.io/library/debian:bookworm),
# it is made here with `debootstrap --variant=minbase bookworm` from the
# Debian mirror apt uses, imported and tagged debian:bookworm (cached).
# podman runs with runc and cgroupfs and without default ulimits (a
# containers.conf of its own, via CONTAINERS_CONF), which is what works in
# containers-in-containers such as this project's CI machines.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-localhost/pstrain:dev}
cache=${PSTRAIN_IMAGE_CACHE:-/var/cache/pstrain}

PROG=build_image
say() { echo "build_image: $*"; }
die() { echo "build_image: error: $*" >&2; exit 1; }
# shellcheck source=tools/lib/apt.sh
source "$root/tools/lib/apt.sh"

install_packages podman runc debootstrap
mkdir -p "$cache"
cat > "$cache/containers.conf" <<'CONF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
CONF
export CONTAINERS_CONF="$cache/containers.conf"

if ! podman image exists debian:bookworm; then
  [[ $(id -u) -eq 0 ]] || die "making debian:bookworm with debootstrap needs root"
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [[ -n "$mirror" ]] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  if [[ ! -f "$cache/bookworm-root/.complete" ]]; then
    say "making debian:bookworm: debootstrap --variant=minbase bookworm from $mirror"
    rm -rf "$cache/bookworm-root"
    debootstrap --variant=minbase bookworm "$cache/bookworm-root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
        die "debootstrap failed; see $cache/debootstrap.log"
    touch "$cache/bookworm-root/.complete"
  fi
  tar --exclude=./.complete -C "$cache/bookworm-root" -c . | podman import - debian:bookworm >/dev/null
fi

say "building $tag from deploy/Dockerfile"
start=$(date +%s)
podman build --network=host --pull=never -f "$root/deploy/Dockerfile" -t "$tag" "$root"
took=$(( $(date +%s) - start ))
size=$(podman image inspect --format '{{.Size}}' "$tag")
say "built $tag in ${took} s; size $(( size / 1000000 )) MB ($size bytes)"
