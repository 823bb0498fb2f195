#!/usr/bin/env bash
# Configures and builds. Usage: tools/build.sh [BUILD_DIR] [extra cmake args...]
#   tools/build.sh                                   # build/ (RelWithDebInfo, g++)
#   CC=clang CXX=clang++ tools/build.sh build-asan -DTIERCE_SANITIZE=ON -DTIERCE_FUZZ=ON
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja "$@"
cmake --build "$dir" -j "$(nproc)"
