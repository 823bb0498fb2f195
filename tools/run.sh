#!/usr/bin/env bash
# The README's main command. Installs the Debian packages, builds, then brings up a local Tierce
# cluster on 127.0.0.1 (MariaDB + 2 app nodes: httpd prefork + PHP + mod_appversion + memd;
# 2 proxy nodes: httpd event + mod_proxy + mod_rcache + memd) with the sample RUBiS-like app,
# runs a short mixed workload through the proxies and straight to the app tier, prints hit ratio,
# invalidations, stale reads and throughput against no caching, the URLs, and serves until Ctrl-C.
#   tools/run.sh [--exit-after-summary] [--duration S] [--transport tcp|shm] [other `tierce-cluster run` options]
# The fabric demo and benchmark of issue 2: tools/fabric-demo.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n 2,8p "$0"; exit 0 ;; esac
bash tools/deps.sh
bash tools/build.sh build >/dev/null
exec /usr/bin/python3 tools/tierce-cluster run --dir /tmp/tierce-cluster "$@"
