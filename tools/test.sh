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
# TIERCE_CMAKE_ARGS: extra configure options (CI: -DTIERCE_DEBUG_LINES_ONLY=ON), space-separated.
# shellcheck disable=SC2086
bash tools/build.sh build ${TIERCE_CMAKE_ARGS:-}
echo "== build: $((SECONDS - t)) s"
exclude=()
if [[ -n "${TIERCE_TESTS_PASSED:-}" ]]; then
  passed=$(realpath "$TIERCE_TESTS_PASSED")
  if [[ ! -s "$passed" ]]; then
    echo "tools/test.sh: TIERCE_TESTS_PASSED=$TIERCE_TESTS_PASSED is missing or empty" >&2
    exit 2
  fi
  # Each name matched literally (regex metacharacters escaped), whole.
  exclude=(-E "^($(sed 's/[][\.*^$+?(){}|]/\\&/g' "$passed" | paste -sd'|'))\$")
  echo "== not run again here: the $(wc -l < "$passed") tests that passed in the sanitizer phase ($passed)"
fi
cd build
ctest --output-on-failure -j 2 "${exclude[@]}" "$@"
