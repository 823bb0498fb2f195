#!/usr/bin/env bash
# check.sh -- verify the Promela model of the coherence fence (fence.pml) with spin. See README.md.
#
#   check.sh --prop p1|p2 [--full] [--configs NAME,...] [--expect-violation] [--opt N]
#            [--workdir DIR] [--keep] [-DNAME[=VALUE]...]
#
# --prop picks the property whose assertion is compiled in (fence.pml: CHECK_P1, CHECK_P2):
#   p1  no read that begins after an update's response returned is served an older version
#   p2  no catch-up without a lost or late number (or a first reading)
# and the suite of configurations (below; --full adds the large one, faults); --configs picks
# some of them by name. For each, spin
# -a, gcc, and pan -E (assertion violations; the runs are bounded by time, so a process left
# waiting at the end is not an error). -D flags are passed to spin: the variant (-DTODAY,
# -DOLD_TOPOLOGY_DROP, -DOLD_LEDGER_UNKNOWN, -DPAUSE_UNCHECKED, ...; fence.pml's header), or a
# bound overriding the configuration's (-DTMAX=7, -DNR=2, ...).
#
# Environment: SPIN (default spin), PAN_CC (default gcc) to compile pan.c.
#
# Exit status: 0 if every verification passed; 1 if spin found a violation (the error trail's
# events are printed); 2 if a search was incomplete or the tools failed. With --expect-violation
# the sense is inverted: 0 if a verification found a violation of --prop's assertion (its trail is
# printed), 1 if none did (or only of another assertion).
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
model="$here/fence.pml"
prop=""
pick=""
opt=2
expect=0
keep=0
full=0
memlim=4096
workdir=""
dflags=()

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --prop) prop="$2"; shift ;;
    --configs) pick="$2"; shift ;;
    --opt) opt="$2"; shift ;;
    --expect-violation) expect=1 ;;
    --workdir) workdir="$2"; shift ;;
    --keep) keep=1 ;;
    --full) full=1 ;;
    -D*) dflags+=("$1") ;;
    -h|--help) usage; exit 0 ;;
    *) echo "check.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

SPIN=${SPIN:-spin}
PAN_CC=${PAN_CC:-gcc}
command -v "$SPIN" >/dev/null 2>&1 ||
  { echo "check.sh: spin not found ($SPIN): install it (Debian: apt-get install -y spin)" >&2; exit 2; }
command -v "$PAN_CC" >/dev/null 2>&1 ||
  { echo "check.sh: C compiler not found ($PAN_CC): pan.c needs one (apt-get install -y gcc)" >&2; exit 2; }

# The configurations. Common to all: LEASE=2, SKEW=1 (BOUND=3 ticks, grace 1), two writer nodes
# W0 and W1 (H knows both unless topo), one proxy with one cache entry; the run starts in a
# steady state (STEADY=1: H vouches until t=2, page v0 registered and cached) unless fresh.
# Fields: name | flags | pan -w.
#   marks  W0 updates twice (unacked updates mark H; a marked H is excluded, the mark cleared and
#          H re-admitted), two reads (registration races), up to t=6
#   two    W0 and W1 update once each (W0 may mark H), one read, up to t=5
#   crash  H crashes and restarts (a new incarnation waits out the predecessor's lease), W0
#          updates twice, two reads (a page registered with the new incarnation), up to t=6
#   pause  H's host paused once (its clock stands still), W0 updates twice, one read, up to t=6
#   topo   W1 is a node H's topology does not list (its digest differs); W0 runs H's topology or
#          the new one; one update each, one read, up to t=5
#   drift  H's clock may lag real time by one tick (SKEW), W0 updates twice, one read, up to t=6
#   fresh  H starts as a new incarnation (fenced, first reading), invalidations may be delivered
#          twice, W0 updates twice, two reads, up to t=6
#   faults (--full) crash, pause and loss together: W0 updates twice, one read, up to t=6
#          (p1: 45 M states, 2.9 GB, ~150 s; p2 with W1 updating once too: 56 M, 3.4 GB, ~170 s)
# The p2 suite runs the same configurations without the reader (catch-ups do not depend on it),
# and so can afford more updates.
common="-DLEASE=2 -DSKEW=1"
case "$prop" in
  p1)
    flagdef="-DCHECK_P1"
    configs=(
      "marks|-DW0N=2 -DW1N=0 -DNR=2 -DTMAX=6 -DCRASH=0 -DPAUSE=0 -DDRIFT=0|24"
      "two|-DW0N=1 -DW1N=1 -DNR=1 -DTMAX=5 -DMARKERS=1 -DCRASH=0 -DPAUSE=0 -DDRIFT=0|24"
      "crash|-DW0N=2 -DW1N=0 -DNR=2 -DTMAX=6 -DCRASH=1 -DPAUSE=0 -DDRIFT=0|24"
      "pause|-DW0N=2 -DW1N=0 -DNR=1 -DTMAX=6 -DCRASH=0 -DPAUSE=1 -DDRIFT=0|25"
      "topo|-DTOPO=1 -DW0N=1 -DW1N=1 -DNR=1 -DTMAX=5 -DCRASH=0 -DPAUSE=0 -DDRIFT=0|24"
      "drift|-DW0N=2 -DW1N=0 -DNR=1 -DTMAX=6 -DCRASH=0 -DPAUSE=0 -DDRIFT=1|24"
      "fresh|-DSTEADY=0 -DDUP=1 -DW0N=2 -DW1N=0 -DNR=2 -DTMAX=6 -DCRASH=0 -DPAUSE=0 -DDRIFT=0|24"
    )
    [ "$full" = 1 ] && configs+=("faults|-DW0N=2 -DW1N=0 -DNR=1 -DTMAX=6 -DCRASH=1 -DPAUSE=1 -DDRIFT=0|26") ;;
  p2)
    flagdef="-DCHECK_P2"
    configs=(
      "marks|-DW0N=3 -DW1N=0 -DNR=0 -DTMAX=7 -DCRASH=0 -DPAUSE=0 -DDRIFT=0|24"
      "two|-DW0N=2 -DW1N=1 -DNR=0 -DTMAX=5 -DMARKERS=1 -DCRASH=0 -DPAUSE=0 -DDRIFT=0|24"
      "crash|-DW0N=2 -DW1N=1 -DNR=0 -DTMAX=5 -DMARKERS=1 -DCRASH=1 -DPAUSE=0 -DDRIFT=0|24"
      "pause|-DW0N=2 -DW1N=1 -DNR=0 -DTMAX=5 -DMARKERS=1 -DCRASH=0 -DPAUSE=1 -DDRIFT=0|24"
      "topo|-DTOPO=1 -DW0N=2 -DW1N=1 -DNR=0 -DTMAX=5 -DCRASH=0 -DPAUSE=0 -DDRIFT=0|24"
      "drift|-DW0N=2 -DW1N=1 -DNR=0 -DTMAX=5 -DMARKERS=1 -DCRASH=0 -DPAUSE=0 -DDRIFT=1|24"
      "fresh|-DSTEADY=0 -DDUP=1 -DW0N=2 -DW1N=1 -DNR=0 -DTMAX=5 -DMARKERS=1 -DCRASH=0 -DPAUSE=0 -DDRIFT=0|24"
    )
    [ "$full" = 1 ] && configs+=("faults|-DW0N=2 -DW1N=1 -DNR=0 -DTMAX=5 -DMARKERS=1 -DCRASH=1 -DPAUSE=1 -DDRIFT=0|26") ;;
  *) echo "check.sh: --prop p1|p2 is required" >&2; usage >&2; exit 2 ;;
esac
[ "$full" = 1 ] && memlim=8192
if [ -n "$pick" ]; then
  picked=()
  for cfg in "${configs[@]}"; do
    case ",$pick," in *",${cfg%%|*},"*) picked+=("$cfg") ;; esac
  done
  [ "${#picked[@]}" -gt 0 ] || { echo "check.sh: --configs $pick: no such configuration" >&2; exit 2; }
  configs=("${picked[@]}")
fi

if [ -z "$workdir" ]; then
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/fence-check.XXXXXX") || exit 2
  [ "$keep" = 1 ] || trap 'rm -rf "$workdir"' EXIT
else
  mkdir -p "$workdir" || exit 2
fi

# A -DNAME given on the command line overrides the configuration's.
merge_flags() {
  local f kept=() d overridden
  for f in $1; do
    overridden=0
    for d in "${dflags[@]+"${dflags[@]}"}"; do
      [ "${d%%=*}" = "${f%%=*}" ] && overridden=1
    done
    [ "$overridden" = 1 ] || kept+=("$f")
  done
  echo "$common $flagdef ${kept[*]-} ${dflags[*]-}"
}

# The error trail: the model's events (its printf lines) and spin's verdict.
trail_summary() {
  echo "---- error trail (spin -t $1 fence.pml): events ----"
  # shellcheck disable=SC2086
  "$SPIN" -t -k fence.pml.trail $1 fence.pml 2>&1 |
    awk '/MSC: / { sub(/^.*MSC: /, "  "); print; next }
         /assertion violated|^spin: / { sub(/^[ \t]+/, ""); print }' | head -n 200
  echo "---- (t = real time; H's own clock is given where it matters) ----"
}

total_start=$(date +%s)
found=0
failed=0
incomplete=0
for cfg in "${configs[@]}"; do
  IFS='|' read -r cname cflags hashw <<<"$cfg"
  flags=$(merge_flags "$cflags")
  run="$workdir/$prop-$cname"
  rm -rf "$run"; mkdir -p "$run"; cp "$model" "$run/fence.pml"
  (
    cd "$run" || exit 2
    # shellcheck disable=SC2086
    "$SPIN" -a $flags fence.pml >spin.out 2>&1 || { cat spin.out >&2; exit 2; }
    # A negative control searches breadth-first: its trail is a shortest one.
    bfs=""
    [ "$expect" = 1 ] && bfs="-DBFS"
    # shellcheck disable=SC2086
    "$PAN_CC" -O"$opt" -w -DSAFETY -DCOLLAPSE $bfs -DMEMLIM=$memlim -o pan pan.c >cc.out 2>&1 ||
      { cat cc.out >&2; exit 2; }
    start=$(date +%s.%N)
    ./pan -E -m100000 -w"$hashw" >pan.out 2>&1
    end=$(date +%s.%N)
    echo "$start $end" >time.out
  ) || { echo "[$prop/$cname] spin or gcc failed" >&2; incomplete=1; continue; }
  out="$run/pan.out"
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
  stored=$(awk '/states, stored/ {print $1}' "$out" | tail -1)
  trans=$(awk '/transitions \(= stored\+matched\)/ {print $1}' "$out" | tail -1)
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | tail -1)
  mem=$(awk '/total actual memory usage/ {print $1}' "$out" | tail -1)
  read -r t0 t1 <"$run/time.out"
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  printf '[%s %-5s] %s: states %s, transitions %s, depth %s, memory %s MB, %s s, errors %s\n' \
    "$prop" "$cname" "$flags" "${stored:-?}" "${trans:-?}" "${depth:-?}" "${mem:-?}" "$secs" \
    "${errors:-?}"
  if [ -z "$errors" ]; then
    echo "[$prop/$cname] pan produced no result:" >&2
    tail -20 "$out" >&2
    incomplete=1
    continue
  fi
  if [ "$errors" = 0 ]; then
    if grep -qE 'max search depth too small|out of memory|Search not completed' "$out"; then
      echo "[$prop/$cname] search incomplete:" >&2
      grep -E 'max search depth too small|out of memory|Search not completed' "$out" >&2
      incomplete=1
    fi
    continue
  fi
  grep -E '^pan:[0-9]+:' "$out" | head -3
  failed=1
  # Which assertion: P1's is assert(cpv >= need), P2's assert(just).
  case "$prop" in
    p1) grep -qE 'assertion violated \(cpv>=need\)' "$out" && this=1 || this=0 ;;
    p2) grep -qE 'assertion violated just' "$out" && this=1 || this=0 ;;
  esac
  if [ "$expect" = 0 ] || [ "$found" = 0 ]; then
    (cd "$run" && trail_summary "$flags")
  fi
  [ "$this" = 1 ] && found=1
  # A negative control stops at its first violation.
  [ "$expect" = 1 ] && [ "$found" = 1 ] && break
done
echo "total: $(($(date +%s) - total_start)) s (work directory: $workdir$([ "$keep" = 1 ] || echo ', removed'))"

if [ "$expect" = 1 ]; then
  if [ "$found" = 1 ]; then
    echo "RESULT: violation of $prop found, as expected"
    exit 0
  fi
  [ "$incomplete" = 1 ] && { echo "RESULT: no violation of $prop found, and a search was incomplete"; exit 2; }
  echo "RESULT: FAIL: a violation of $prop was expected (${dflags[*]-}) and spin found none"
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
