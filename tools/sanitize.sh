#!/usr/bin/env bash
# The sanitizer configuration: clang, AddressSanitizer + UndefinedBehaviorSanitizer, libFuzzer
# targets; builds into build-asan/ and runs the whole test suite there (fuzz run included),
# except the spin model checks (dlm_model_*, coherence_model_*): they check dlm/model/*.pml and
# coherence/model/fence.pml with spin's own
# verifier, no Tierce code, so a sanitizer adds nothing; the release build runs them (~3 min; the
# long ones are recorded by hand, tools/model_proofs/model_proofs.py).
# The names of the tests that ran here and passed go to build-asan/sanitizer-passed.txt: CI's
# release phase (tools/test.sh with TIERCE_TESTS_PASSED set) does not run them again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
t=$SECONDS
CC=clang CXX=clang++ bash tools/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug \
  -DTIERCE_SANITIZE=ON -DTIERCE_FUZZ=ON "$@"
echo "== sanitizer build: $((SECONDS - t)) s"
cd build-asan
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
rm -f sanitizer-passed.txt sanitizer-tests.xml
rc=0
ctest --output-on-failure -j 2 -E '^(dlm|coherence)_model_' --output-junit sanitizer-tests.xml || rc=$?
# status="run" without a <failure>: passed (skips are "notrun", failures carry <failure>).
if [[ -s sanitizer-tests.xml ]]; then
  python3 ../tools/junit_passed.py sanitizer-tests.xml > sanitizer-passed.txt
else
  : > sanitizer-passed.txt  # no report: nothing counts as run here
fi
echo "== $(wc -l < sanitizer-passed.txt) tests passed under the sanitizers (build-asan/sanitizer-passed.txt)"
exit $rc
