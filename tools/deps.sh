#!/usr/bin/env bash
# Installs every Debian 12 package Tierce builds, tests and benchmarks with. Idempotent; as root.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  libboost-test-dev libtomlplusplus-dev libssl-dev libxxhash-dev
  rdma-core libibverbs-dev librdmacm-dev
  apache2 apache2-dev libapr1-dev libaprutil1-dev
  libapache2-mod-php8.2 php8.2-mysql libphp8.2-embed php8.2-dev
  mariadb-server libmariadb-dev libmysqlcppconn-dev
  python3 python3-matplotlib curl procps iproute2 iptables wrk memcached nlohmann-json3-dev
  libhiredis-dev redis-server spin
  prometheus prometheus-node-exporter python3-prometheus-client
  vsftpd lftp libcrypt-dev libseccomp-dev openssl
  dpkg-dev lintian rsync systemd help2man  # tests/packages: cpack -G DEB (dpkg-shlibdeps), lintian, systemd-analyze verify, man pages
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "tools/deps.sh: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "Installing: ${missing[*]}"
  apt-get update -q
  # Services (apache2, mariadb, redis-server) must not start by themselves: Tierce runs private
  # instances.
  # CI (a throw-away machine): dpkg without fsync per file, and no man-db index rebuild after
  # each batch of man pages (both only cost time there; a user's machine keeps the defaults).
  ci_opts=()
  if [[ ${CI:-} == true ]]; then
    ci_opts=(-o Dpkg::Options::=--force-unsafe-io)
    echo "man-db man-db/auto-update boolean false" | debconf-set-selections 2>/dev/null || true
  fi
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends \
    "${ci_opts[@]}" "${missing[@]}"
fi
