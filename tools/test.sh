#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, runs every test with ctest.
# Extra arguments go to ctest (e.g. -R fabric, --output-on-failure is always on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
t=$SECONDS
bash tools/build.sh build
echo "== build: $((SECONDS - t)) s"
cd build
ctest --output-on-failure -j 2 "$@"
