#!/usr/bin/env bash
# check.sh -- verify the Promela models of the coherence fence (fence.pml, and arbiter.pml: the
# database as the arbiter of a lost node) with spin. See README.md.
#
#   check.sh [--model fence|arbiter] --prop PROP [--full] [--configs NAME,...] [--expect-violation]
#            [--dfs] [--opt N] [--workdir DIR] [--keep] [-DNAME[=VALUE]...]
#
# --model picks the model (default fence). For arbiter.pml, --prop is one of
#   p1       as below (the same property, asserted as an invariant of every state)
#   out      a node that is out never commits a write
#   drop     a home vouches without reading N only after a drop whose bump committed after every
#            write of N that committed before it, followed by its own catch-up
#   outdrop  out and drop together (the suite runs without renders)
# and its suite of configurations is listed below (arbiter_configs).
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
mname=fence
prop=""
pick=""
opt=2
expect=0
dfs=0
keep=0
full=0
memlim=4096
workdir=""
dflags=()

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --model) mname="$2"; shift ;;
    --prop) prop="$2"; shift ;;
    --configs) pick="$2"; shift ;;
    --opt) opt="$2"; shift ;;
    --expect-violation) expect=1 ;;
    --dfs) dfs=1 ;;
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
case "$mname" in
  fence|arbiter) ;;
  *) echo "check.sh: --model fence|arbiter" >&2; exit 2 ;;
esac
model="$here/$mname.pml"
pml="$mname.pml"

# The arbiter's configurations (arbiter.pml): N writes, homes H0 and H1 (both acknowledge and
# register; PAGES: whose page, renewals and hits are modelled), LEASE=2, SKEW=1, the run starts
# steady (row (0, in), both homes vouch until t=2, both pages v0 cached). The p1 suite renders
# once (NR=1); the out/drop suites run the same configurations without the render.
#   cut       N cut off from H0 (may heal: re-admission), 2 updates, H0's page, up to t=6
#   crash     N cut off from H0, and N may crash (its open transaction aborted), 2 updates, t<=5
#   two       N cut off from H0 and from H1 (no heal): H1 sees N out, both pages, 1 update, t<=4
#   rereg     cut off from both, H0 may heal: H1 registers then loses N (must bump again), H1's
#             page, 1 update, t<=4
#   homecrash H0 may crash and restart (its registration stays in the track table), cut off from
#             both, H1 may heal, H0's page, 1 update, t<=5
#   marks     skip marks for H0 (a marked home re-tracking N), N cut off from H0, 2
#             updates, H0's page, t<=4
#   operator  no arbiter: an operator takes N out of each home once N crashed (with a catch-up),
#             2 updates, H0's page, t<=5 (p1 only)
arbiter_configs() {
  local nr="$1"
  configs=(
    "cut|-DCUTS=1 -DPAGES=1 -DNWR=2 -DTMAX=6 $nr|24"
    "crash|-DNCRASH=1 -DCUTS=1 -DPAGES=1 -DNWR=2 -DTMAX=5 $nr|24"
    "two|-DCUTS=3 -DHEALS=0 -DPAGES=3 -DNWR=1 -DTMAX=4 $nr|24"
    "rereg|-DCUTS=3 -DHEALS=1 -DPAGES=2 -DNWR=1 -DTMAX=4 $nr|24"
    "homecrash|-DCRASH=1 -DCUTS=3 -DHEALS=2 -DPAGES=1 -DNWR=1 -DTMAX=5 $nr|24"
    "marks|-DMARKS=1 -DCUTS=1 -DPAGES=1 -DNWR=2 -DTMAX=4 $nr|24"
  )
}

if [ "$mname" = arbiter ]; then
  case "$prop" in
    p1) flagdef="-DCHECK_P1"; arbiter_configs "-DNR=1"
        configs+=("operator|-DOPERATOR=2 -DNCRASH=1 -DCUTS=1 -DPAGES=1 -DNWR=2 -DTMAX=5 -DNR=1|24") ;;
    out) flagdef="-DCHECK_OUT"; arbiter_configs "-DNR=0" ;;
    drop) flagdef="-DCHECK_DROP"; arbiter_configs "-DNR=0" ;;
    outdrop) flagdef="-DCHECK_OUT -DCHECK_DROP"; arbiter_configs "-DNR=0" ;;
    *) echo "check.sh: --model arbiter --prop p1|out|drop|outdrop is required" >&2; exit 2 ;;
  esac
else
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
fi
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
  echo "---- error trail (spin -t $1 $pml): events ----"
  # shellcheck disable=SC2086
  "$SPIN" -t -k "$pml.trail" $1 "$pml" 2>&1 |
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
  [ "$mname" = fence ] || run="$workdir/$mname-$prop-$cname"
  rm -rf "$run"; mkdir -p "$run"; cp "$model" "$run/$pml"
  (
    cd "$run" || exit 2
    # shellcheck disable=SC2086
    "$SPIN" -a $flags "$pml" >spin.out 2>&1 || { cat spin.out >&2; exit 2; }
    # A negative control searches breadth-first (its trail is a shortest one) unless --dfs (a
    # state space too large for the breadth-first search: the first trail found, not the shortest).
    bfs=""
    [ "$expect" = 1 ] && [ "$dfs" = 0 ] && bfs="-DBFS"
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
  # Which assertion: P1's is assert(cpv >= need), P2's assert(just); arbiter.pml's P1 is
  # assert(cpv[h] >= retv), OUT's assert(rin), DROP's assert(hcaught[h]).
  case "$mname/$prop" in
    fence/p1) grep -qE 'assertion violated \(cpv>=need\)' "$out" && this=1 || this=0 ;;
    fence/p2) grep -qE 'assertion violated just' "$out" && this=1 || this=0 ;;
    arbiter/p1) grep -qE 'assertion violated \(cpv\[[01]\]>=retv\)' "$out" && this=1 || this=0 ;;
    arbiter/out) grep -qE 'assertion violated rin' "$out" && this=1 || this=0 ;;
    arbiter/drop) grep -qE 'assertion violated hcaught\[h\]' "$out" && this=1 || this=0 ;;
    arbiter/outdrop) grep -qE 'assertion violated (rin|hcaught\[h\])' "$out" && this=1 || this=0 ;;
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
