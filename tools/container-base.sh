#!/usr/bin/env bash
# Makes the base image every Tierce Containerfile starts from, without a registry:
#   tools/container-base.sh [IMAGE]        (default localhost/debian:bookworm)
# debootstrap --variant=minbase bookworm from Debian's archive (~1 min), imported into podman.
# Does nothing when the image exists. Also writes /etc/containers/containers.conf if missing:
# runc (crun fails here: "cgroups in hybrid mode") and no default ulimits (refused here).
# Needs root, podman, runc, debootstrap (tools/deps.sh does not install them: containers are
# built outside CI, see docker/README.md).
set -euo pipefail
image=${1:-localhost/debian:bookworm}
if [[ $(id -u) -ne 0 ]]; then echo "$0: needs root" >&2; exit 1; fi
for t in podman debootstrap; do
  command -v $t >/dev/null || { echo "$0: $t is missing: apt-get install podman runc debootstrap podman-compose" >&2; exit 1; }
done
if [[ ! -f /etc/containers/containers.conf ]]; then
  mkdir -p /etc/containers
  printf '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\n' > /etc/containers/containers.conf
fi
if podman image exists "$image"; then
  echo "$image exists"
  exit 0
fi
root=$(mktemp -d /tmp/tierce-rootfs-XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
tar -C "$root" -c . | podman import - "$image" >/dev/null
echo "$image created (debootstrap bookworm minbase)"
