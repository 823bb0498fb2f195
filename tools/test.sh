#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, runs every test with ctest.
# Extra arguments go to ctest (e.g. -R fabric, --output-on-failure is always on).
# TIERCE_TESTS_PASSED=FILE (CI's release phase): the tests named in FILE, one per line (those
# that passed in the sanitizer phase of the same run, tools/sanitize.sh), are not run again:
# every test runs once per CI run, in one phase or the other (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
t=$SECONDS
exclude=()
ondemand=OFF  # said every time: a build dir CI left ON builds every test again
if [[ -n "${TIERCE_TESTS_PASSED:-}" ]]; then
  passed=$(realpath "$TIERCE_TESTS_PASSED")
  if [[ ! -s "$passed" ]]; then
    echo "tools/test.sh: TIERCE_TESTS_PASSED=$TIERCE_TESTS_PASSED is missing or empty" >&2
    exit 2
  fi
  # Each name matched literally (regex metacharacters escaped), whole.
  exclude=(-E "^($(sed 's/[][\.*^$+?(){}|]/\\&/g' "$passed" | paste -sd'|'))\$")
  # Only the tests that run here are built: tests/ is left out of `all`, and what the remaining
  # tests' commands name is built after it (about half the compile time is the tests').
  ondemand=ON
fi
# TIERCE_CMAKE_ARGS: extra configure options (CI: -DTIERCE_DEBUG_LINES_ONLY=ON), space-separated.
# shellcheck disable=SC2086
bash tools/build.sh build ${TIERCE_CMAKE_ARGS:-} -DTIERCE_TESTS_ON_DEMAND=$ondemand
if [[ $ondemand == ON ]]; then
  mapfile -t targets < <(python3 tools/tests_to_build.py build "${exclude[@]}")
  echo "== building the ${#targets[@]} test targets the remaining tests name (tools/tests_to_build.py)"
  [[ ${#targets[@]} -eq 0 ]] || cmake --build build -j "$(nproc)" --target "${targets[@]}"
  echo "== not run again here: the $(wc -l < "$passed") tests that passed in the sanitizer phase ($passed)"
fi
echo "== build: $((SECONDS - t)) s"
cd build
ctest --output-on-failure -j 2 "${exclude[@]}" "$@"
