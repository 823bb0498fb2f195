#!/usr/bin/env bash
# check.sh -- verify the N-CoSED Promela model (ncosed.pml) with spin. See README.md.
#
#   check.sh [--suite default|restart] [--full] [--configs NAME,...] [--only safety|liveness]
#            [--opt N] [--assertions-only] [--expect-violation] [--workdir DIR] [--keep]
#            [-DNAME[=VALUE]...]
#
# For every configuration of the suite (below; --configs picks some by name), two verifications:
#   safety    spin -a; pan compiled -DSAFETY -DNOCLAIM -DCOLLAPSE; ./pan -q: assertion
#             violations and invalid end states (a request never granted or never released
#             leaves its node outside its end state; -q: every message must have been consumed)
#   liveness  the LTL formula `live` (<> all nodes done); pan compiled -DCOLLAPSE; ./pan -a:
#             acceptance cycles, i.e. a run (finite, stuttering at the end, or infinite) where
#             some request is never granted or released
# -D flags are passed to spin (protocol variant: -DEARLY_HANDOFF, -DTHESIS_RESET, -DK_AFTER_CAS,
# -DNO_TOKEN_CHECK, -DCAS_RETRY; failures: -DCLIENT_DEATH, and with the restart suite the
# engine's behaviours -DENGINE_AS_IS, -DENGINE_SKIP_IDLE, ... (ncosed.pml's header); configuration:
# -DN, -DR, -DMIX, -DSPURIOUS ... override the suite's). --opt sets gcc's -O level for pan.c
# (0 compiles in seconds: enough for a search that stops at the first violation).
# --assertions-only: the safety run alone, with pan -E: assertion violations only (mutual
# exclusion, tokens, invariants), stuck requests (invalid end states) are not reported.
#
# Environment: SPIN (default spin), PAN_CC (default gcc) to compile pan.c.
#
# Exit status: 0 if every verification passed; 1 if spin reported an error (the summary of the
# error trail is printed); 2 if a search was incomplete (depth or memory) or the tools failed.
# With --expect-violation the sense is inverted: 0 if at least one verification reports an error
# (the first one's trail summary is printed), 1 if all of them passed.
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
model="$here/ncosed.pml"
full=0
suite=default
pick=""
optover=""
noend=0
only=""
expect=0
keep=0
workdir=""
dflags=()

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --full) full=1 ;;
    --suite) suite="$2"; shift ;;
    --configs) pick="$2"; shift ;;
    --opt) optover="$2"; shift ;;
    --assertions-only) noend=1 ;;
    --only) only="$2"; shift ;;
    --expect-violation) expect=1 ;;
    --workdir) workdir="$2"; shift ;;
    --keep) keep=1 ;;
    -D*) dflags+=("$1") ;;
    -h|--help) usage; exit 0 ;;
    *) echo "check.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

SPIN=${SPIN:-spin}
PAN_CC=${PAN_CC:-gcc}
if ! command -v "$SPIN" >/dev/null 2>&1; then
  echo "check.sh: spin not found ($SPIN): install it (Debian: apt-get install -y spin)" >&2
  exit 2
fi
if ! command -v "$PAN_CC" >/dev/null 2>&1; then
  echo "check.sh: C compiler not found ($PAN_CC): spin's pan.c needs one (apt-get install -y gcc)" >&2
  exit 2
fi

if [ -z "$workdir" ]; then
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/ncosed-check.XXXXXX") || exit 2
  [ "$keep" = 1 ] || trap 'rm -rf "$workdir"' EXIT
else
  mkdir -p "$workdir" || exit 2
fi

# The suite:
#   n2r2      2 nodes x 2 requests, each request shared or exclusive (nondeterministic)
#   n3r2-mix  3 nodes x 2 requests, fixed mix: node n's request i is exclusive iff n+i is even
#             (X,S / S,X / X,S: exclusive after exclusive, shared after exclusive, exclusive
#             after a shared group, shared joining while the released bit is being set)
#   n4r1      4 nodes x 1 request, nondeterministic modes
#   n3r2      (--full) 3 nodes x 2 requests, nondeterministic modes
# The restart suite (-DLOCKD_RESTART: a member's lockd crashes and restarts, the home recovers):
#   rs-n2r2       2 nodes x 2 requests, any mode, one crash, one recovery
#   rs-n3r1       3 nodes x 1 request, any mode, one crash (of either member), one recovery
#   rs-n2r1-2rec  2 nodes x 1 request, one crash, and one more recovery at any time
#   rs-n2r2-death 2 nodes x 2 requests, one crash and one client death (-DCLIENT_DEATH)
#   rs-n2r2-2rec  (--full) 2 nodes x 2 requests, one crash, two recoveries (5 GB)
#   rs-n3r1-death (--full) 3 nodes x 1 request, one crash, one client death (1.5 GB)
# Fields: name | flags | pan -w | gcc -O level (-O1 compiles twice as fast, -O2 runs faster).
case "$suite" in
  default)
    configs=("n2r2|-DN=2 -DR=2|22|1" "n3r2-mix|-DN=3 -DR=2 -DMIX=1|23|1" "n4r1|-DN=4 -DR=1|24|1")
    if [ "$full" = 1 ]; then
      configs+=("n3r2|-DN=3 -DR=2|26|2")
    fi ;;
  restart)
    configs=("rs-n2r2|-DLOCKD_RESTART -DN=2 -DR=2|24|1" "rs-n3r1|-DLOCKD_RESTART -DN=3 -DR=1|24|1"
             "rs-n2r1-2rec|-DLOCKD_RESTART -DN=2 -DR=1 -DSPURIOUS=1|22|1"
             "rs-n2r2-death|-DLOCKD_RESTART -DCLIENT_DEATH -DN=2 -DR=2|24|1")
    if [ "$full" = 1 ]; then
      configs+=("rs-n2r2-2rec|-DLOCKD_RESTART -DN=2 -DR=2 -DSPURIOUS=1|26|2"
                "rs-n3r1-death|-DLOCKD_RESTART -DCLIENT_DEATH -DN=3 -DR=1|26|2")
    fi ;;
  *) echo "check.sh: --suite default|restart" >&2; exit 2 ;;
esac
if [ -n "$pick" ]; then
  picked=()
  for cfg in "${configs[@]}"; do
    case ",$pick," in *",${cfg%%|*},"*) picked+=("$cfg") ;; esac
  done
  [ "${#picked[@]}" -gt 0 ] || { echo "check.sh: --configs $pick: no such configuration in suite $suite" >&2; exit 2; }
  configs=("${picked[@]}")
fi
modes=(safety liveness)
[ "$noend" = 1 ] && modes=(safety)
if [ -n "$only" ]; then
  case "$only" in safety|liveness) modes=("$only") ;; *) echo "check.sh: --only safety|liveness" >&2; exit 2 ;; esac
fi

# A -DN/-DR/-DMIX given on the command line overrides the suite's value.
merge_flags() {
  local f kept=() name
  for f in $1; do
    name=${f%%=*}
    local overridden=0 d
    for d in "${dflags[@]+"${dflags[@]}"}"; do
      [ "${d%%=*}" = "$name" ] && overridden=1
    done
    [ "$overridden" = 1 ] || kept+=("$f")
  done
  echo "${kept[*]-} ${dflags[*]-}"
}

# Summary of the error trail: the protocol events (the model's printf), spin's error lines,
# where each process stopped, W and K, and the messages still in flight.
trail_summary() {
  local flags="$1"
  echo "---- error trail (spin -t $flags ncosed.pml) ----"
  # shellcheck disable=SC2086
  "$SPIN" -t -k ncosed.pml.trail $flags ncosed.pml 2>&1 | awk '
    /^ltl / { next }
    /^[ \t]*$/ { next }
    /^\t\t(Wrel|Wtail|Wcnt|K|nex|nsh|maxtok|maxX|ndone|hgen|lastR|rph|nrec|ncrash|ndeath) = / { sub(/^\t\t/, "  "); print; next }
    /^\t\tqueue [0-9]+ \(net\[[0-9]+\]\): *$/ { next }
    /^\t\tqueue / { sub(/^\t\t/, "  in flight: "); print; next }
    /^\t\t/ { next }
    /^#processes/ { print; next }
    { sub(/^[ \t]+/, ""); print }
  ' | head -n 400
  echo "---- (net[src*N+dst] is the channel from node src to node dst) ----"
}

# One verification in its own directory: spin -a, gcc, pan. Writes rc (0 = ran), pan.out, time.out.
verify() {
  local run="$1" flags="$2" mode="$3" hashw="$4" opt="$5" cc_flags run_flags start end
  rm -rf "$run"; mkdir -p "$run"
  cp "$model" "$run/ncosed.pml"
  cd "$run" || return 2
  # shellcheck disable=SC2086
  "$SPIN" -a $flags ncosed.pml >spin.out 2>&1 || { cat spin.out >&2; echo 2 >rc; return 2; }
  if [ "$mode" = safety ]; then
    cc_flags="-DSAFETY -DNOCLAIM -DCOLLAPSE"; run_flags="-q"
    [ "$noend" = 1 ] && run_flags="-E"
  else
    cc_flags="-DCOLLAPSE"; run_flags="-a"
  fi
  # shellcheck disable=SC2086
  "$PAN_CC" -O"$opt" -w $cc_flags -o pan pan.c >cc.out 2>&1 || { cat cc.out >&2; echo 2 >rc; return 2; }
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  ./pan $run_flags -m100000 -w"$hashw" >pan.out 2>&1
  end=$(date +%s.%N)
  echo "$start $end" >time.out
  echo 0 >rc
}

failed=0
incomplete=0
found=0
total_start=$(date +%s)

# Run the verifications, $jobs at a time (pan is single-threaded).
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 2 ] && jobs=2
runs=()
for cfg in "${configs[@]}"; do
  IFS='|' read -r cname cflags hashw opt <<<"$cfg"
  [ -n "$optover" ] && opt="$optover"
  flags=$(merge_flags "$cflags")
  for mode in "${modes[@]}"; do
    run="$workdir/$cname-$mode"
    runs+=("$cname|$mode|$flags|$run")
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    (verify "$run" "$flags" "$mode" "$hashw" "$opt") &
  done
done
wait

for r in "${runs[@]}"; do
  IFS='|' read -r cname mode flags run <<<"$r"
  if [ "$(cat "$run/rc" 2>/dev/null)" != 0 ]; then
    echo "[$cname/$mode] spin or gcc failed" >&2
    incomplete=1
    continue
  fi
  out="$run/pan.out"
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
  stored=$(awk '/states, stored/ {print $1}' "$out" | tail -1)
  trans=$(awk '/transitions \(= (stored\+matched|visited\+matched)\)/ {print $1}' "$out" | tail -1)
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | tail -1)
  mem=$(awk '/total actual memory usage/ {print $1}' "$out" | tail -1)
  read -r t0 t1 <"$run/time.out"
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  printf '[%-8s %-8s] %s: states stored %s, transitions %s, depth %s, memory %s MB, %s s, errors %s\n' \
    "$cname" "$mode" "$flags" "${stored:-?}" "${trans:-?}" "${depth:-?}" "${mem:-?}" "$secs" "${errors:-?}"
  if [ -z "$errors" ]; then
    echo "[$cname/$mode] pan produced no result:" >&2
    tail -20 "$out" >&2
    incomplete=1
    continue
  fi
  if grep -qE 'max search depth too small|out of memory|Search not completed' "$out" && [ "$errors" = 0 ]; then
    echo "[$cname/$mode] search incomplete:" >&2
    grep -E 'max search depth too small|out of memory|Search not completed' "$out" >&2
    incomplete=1
    continue
  fi
  if [ "$errors" != 0 ]; then
    grep -E '^pan:[0-9]+:' "$out" | head -5
    # A violation the expected-violation test already showed once is not replayed again.
    if [ "$expect" = 0 ] || [ "$found" = 0 ]; then
      (cd "$run" && trail_summary "$flags")
    fi
    found=1
    failed=1
  fi
done

total_end=$(date +%s)
echo "total: $((total_end - total_start)) s (work directory: $workdir$([ "$keep" = 1 ] || echo ', removed'))"

if [ "$expect" = 1 ]; then
  if [ "$found" = 1 ]; then
    echo "RESULT: violation found, as expected"
    exit 0
  fi
  [ "$incomplete" = 1 ] && { echo "RESULT: no violation found, and a search was incomplete"; exit 2; }
  echo "RESULT: FAIL: a violation was expected (${dflags[*]-}) and spin found none"
  exit 1
fi
if [ "$failed" = 1 ]; then
  echo "RESULT: FAIL: spin found a violation"
  exit 1
fi
if [ "$incomplete" = 1 ]; then
  echo "RESULT: FAIL: incomplete verification"
  exit 2
fi
echo "RESULT: all verifications passed"
exit 0
