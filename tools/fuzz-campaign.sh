#!/usr/bin/env bash
# Long libFuzzer campaigns, outside CI (CI runs each target for TIERCE_FUZZ_SECONDS only).
#   tools/fuzz-campaign.sh [-n RUNS] [-d BUILD_DIR] [-o OUT_DIR] [-k] [TARGET...]
# Builds the libFuzzer targets with clang, AddressSanitizer + UndefinedBehaviorSanitizer at -O2
# (BUILD_DIR, default build-fuzz/), then runs each TARGET (default: all) for RUNS executions
# (default 10^7), one after the other at nice 19, starting from the replay driver's seeds plus
# the corpus a previous campaign left in OUT_DIR/<target>/corpus (default fuzz-out/) and the one
# kept in the repository (tests/fuzz/corpus/<target>/). -k: after each run, minimize the corpus
# (libFuzzer -merge=1) into tests/fuzz/corpus/<target>/ (commit it: ctest replays it, and the next
# campaign, on any machine, starts from the coverage this one reached). Logs go to
# OUT_DIR/<target>/log; a crash, leak, timeout or out-of-memory input is written to
# OUT_DIR/<target>/ and the script goes on with the next target. Copy such an input into
# tests/fuzz/regressions/<target>/ once fixed: ctest's <target>_replay runs every file there.
# Prints one line per target: executions, exec/s, coverage, corpus size, result.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
runs=10000000 build=build-fuzz out=fuzz-out keep=0
while getopts "n:d:o:k" o; do
  case $o in
    n) runs=$OPTARG ;;
    d) build=$OPTARG ;;
    o) out=$OPTARG ;;
    k) keep=1 ;;
    *) echo "usage: $0 [-n RUNS] [-d BUILD_DIR] [-o OUT_DIR] [-k] [TARGET...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
all=(fuzz_wire fuzz_fabric_handshake fuzz_ftp_command fuzz_adts_wire fuzz_headers
     fuzz_coherence_messages fuzz_sql_deps fuzz_config fuzz_coop_slot fuzz_coop_directory
     fuzz_coop_copy fuzz_binlog_rows)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
declare -A max_len=([fuzz_ftp_command]=8192 [fuzz_coop_slot]=1024 [fuzz_coop_directory]=1024
  [fuzz_coop_copy]=1024 [fuzz_coherence_messages]=512 [fuzz_sql_deps]=4096
  [fuzz_fabric_handshake]=8192 [fuzz_adts_wire]=8192 [fuzz_config]=4096 [fuzz_headers]=4096
  [fuzz_binlog_rows]=4096)

if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTIERCE_SANITIZE=ON -DTIERCE_FUZZ=ON >/dev/null || exit 1
fi
nice ninja -C "$build" "${targets[@]}" "${targets[@]/%/_replay}" >/dev/null || exit 1

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# As root, each fuzzer runs in a network namespace of its own (only its loopback): the targets that
# open loopback TCP connections (fuzz_adts_wire, fuzz_fabric_handshake) make ~2 000 a second, and
# where the host tracks connections (nf_conntrack, loaded by podman's or anyone's NAT rules) they
# filled its 262 144-entry table in ~100 s: "nf_conntrack: table full, dropping packet", the
# harness's connects then hang. A fresh namespace has no conntrack and its own TIME_WAIT table.
own_net=()
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null; then
  own_net=(unshare -n sh -c 'ip link set lo up && exec "$0" "$@"')
fi
status=0
for t in "${targets[@]}"; do
  dir=$out/$t
  mkdir -p "$dir/corpus"
  bin=$(find "$build" -name "$t" -type f -perm -u+x | head -1)
  "${bin}_replay" --write-seeds "$dir/corpus" >/dev/null
  len=()
  [ -n "${max_len[$t]:-}" ] && len=(-max_len="${max_len[$t]}")
  kept=tests/fuzz/corpus/$t
  extra=()
  [ -d "$kept" ] && extra=("$kept")
  start=$(date +%s)
  # The RSS limit is high because the process's size, not an input's, grows under ASan over
  # millions of executions of the targets that start threads (fuzz_fabric_handshake: 1.3 GB after
  # 2*10^6; its plain replay build stays at 24 MB over 40 000): per-thread allocator caches and
  # the quarantine. One input's allocations are still capped by malloc_limit_mb.
  nice -n 19 "${own_net[@]}" "$bin" -runs="$runs" -seed=1 -rss_limit_mb=6144 -malloc_limit_mb=2048 -timeout=30 \
    -print_final_stats=1 \
    -artifact_prefix="$dir/" "${len[@]}" "$dir/corpus" "${extra[@]}" >"$dir/log" 2>&1
  rc=$?
  if [ $keep -eq 1 ] && [ $rc -eq 0 ]; then
    merged=$(mktemp -d)
    if nice -n 19 "$bin" -merge=1 "${len[@]}" "$merged" "$dir/corpus" "${extra[@]}" \
        >"$dir/merge.log" 2>&1; then
      rm -rf "$kept" && mkdir -p "$kept" && cp "$merged"/* "$kept"/
    else
      echo "$t: corpus merge failed (see $dir/merge.log); $kept unchanged" >&2
    fi
    rm -rf "$merged"
  fi
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | grep -o '[0-9]*')
  files=$(ls "$dir/corpus" | wc -l)
  if [ $rc -eq 0 ]; then result=ok; else result="FAILED rc=$rc (see $dir/log)"; status=1; fi
  printf '%-26s %10s execs %6s s %8s exec/s  cov %6s  corpus %6s  %s\n' "$t" "${execs:-?}" \
    "$secs" "$(( ${execs:-0} / (secs > 0 ? secs : 1) ))" "${cov:-?}" "$files" "$result"
done
exit $status
