#!/usr/bin/env bash
# tests/dlm/stress_loop.sh — runs the lock manager's stress tests (the ctest entries
# dlm_stress_*: --kill-node --freeze-lockd --partition) again and again, outside CI, and
# counts: runs, passes, failures, and the violations the workers reported (overlaps, token
# regressions). A failing run's directory is
# kept and named in the summary; the summary is also written to OUT/summary.txt.
#
#   tests/dlm/stress_loop.sh [-n RUNS] [-j JOBS] [-b BUILD] [-o OUT] [CONFIG...]
#
# CONFIG is ALGORITHM:TRANSPORT (default: the four of CI: ncosed:tcp ncosed:shm dqnl:tcp
# srsl:tcp). RUNS per config (default 200), JOBS configs at a time (default 1; 2 on a 2-core
# machine doubles the load the lockds see, which is the point of a soak).
set -u
runs=200 jobs=1 build="" out=""
while getopts "n:j:b:o:h" o; do
  case $o in
    n) runs=$OPTARG ;;
    j) jobs=$OPTARG ;;
    b) build=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${build:-$root/build}
out=${out:-/tmp/tierce-dlm-stress-loop-$(date +%Y%m%d-%H%M%S)}
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(ncosed:tcp ncosed:shm dqnl:tcp srsl:tcp)
for bin in agents/lockd/tierce-lockd tests/dlm/stress_worker tools/tierce-lock/tierce-lock \
           tools/tierce-wanem/tierce-wanem; do
  [ -x "$build/$bin" ] || { echo "missing $build/$bin: build first (cmake --build $build)"; exit 2; }
done
mkdir -p "$out"

one_config() {  # ALG TRANSPORT: RUNS runs, one line per run in OUT/ALG-TRANSPORT.runs
  local alg=$1 tr=$2 i rc log viol
  local runs_file="$out/$alg-$tr.runs"
  : > "$runs_file"
  for ((i = 1; i <= runs; i++)); do
    log="$out/$alg-$tr-$i.log"
    python3 "$here/stress.py" --lockd "$build/agents/lockd/tierce-lockd" \
      --worker "$build/tests/dlm/stress_worker" --cli "$build/tools/tierce-lock/tierce-lock" \
      --algorithm "$alg" --transport "$tr" --kill-node --freeze-lockd \
      --partition --wanem "$build/tools/tierce-wanem/tierce-wanem" > "$log" 2>&1
    rc=$?
    viol=$(grep -o 'violations [0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
    if [ $rc -eq 0 ]; then
      # (stress.py removes a passing run's directory and keeps a failing one's: "logs in")
      echo "$i pass $viol" >> "$runs_file"
      rm -f "$log"
    else
      echo "$i FAIL $viol $log" >> "$runs_file"
    fi
  done
}

start=$(date +%s)
active=0
for c in "${configs[@]}"; do
  one_config "${c%%:*}" "${c##*:}" &
  active=$((active + 1))
  if [ $active -ge "$jobs" ]; then wait -n; active=$((active - 1)); fi
done
wait

{
  printf "%-14s %6s %6s %6s %11s\n" config runs pass fail violations
  for c in "${configs[@]}"; do
    f="$out/${c%%:*}-${c##*:}.runs"
    awk -v c="$c" '{n++; if ($2 == "pass") p++; else f++; v += $3}
      END {printf "%-14s %6d %6d %6d %11d\n", c, n, p, f, v}' "$f"
  done
  echo "wall time $(( $(date +%s) - start )) s, $runs runs per config, $jobs at a time, $(nproc) cores"
  grep -h FAIL "$out"/*.runs | awk '{print "failed: run " $1 " (" $4 ")"}'
} | tee "$out/summary.txt"
! grep -qh FAIL "$out"/*.runs
