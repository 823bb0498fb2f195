#!/usr/bin/env bash
# tests/faults/soak.sh — the long version of the fault tests (not in ctest): every variant of
# fault_check.py over tcp and shm until at least --checked reads were checked (rounds of --cycles
# faults on one cluster), then a mixed soak per transport — every variant in turn, one fault every
# 12 s — until at least --mixed-checked reads were checked; prints a table (variant, transport,
# checked reads, stale reads, update latency p50/p99 while the faults lasted, errors, verdict).
#
#   sudo tests/faults/soak.sh [--build DIR] [--checked 100000] [--mixed-checked 1000000]
#                             [--transports "tcp shm"] [--variants "app1_memd_kill ..."]
#                             [--no-mixed] [--extras] [--out DIR]
#
# --extras: also issue 29's variants (fault_check.py --list marks them "+"), each once per
# transport: closed loop at 2 % writes, one long round (a lost host is not healed, so it cannot be
# repeated on one cluster): host losses 175 s of fault (~100 000 checked reads here: the proxies
# keep trying the lost node), node_added 100 s, rolling_restart 45 + 50 s, the memd outages 30 +
# 60 s, partition_arbiter rounds until --checked. About 25 more minutes.
#
# About 40 minutes on a 2-core machine with the defaults (37 min measured). Results:
# OUT/<variant>-<transport>.json and .log (default OUT: /tmp/tierce-soak.<date>), the table also
# in OUT/table.txt. Exit 0 when every run passed, 1 otherwise, 77 when fault_check.py skipped.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build
checked=100000
mixed_checked=1000000
transports="tcp shm"
variants=$(python3 "$here/fault_check.py" --list | awk '$1 != "+" {print $2}')  # not the extra (long) ones
mixed=1
extras=0
out=/tmp/tierce-soak.$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --checked) checked=$2; shift 2 ;;
    --mixed-checked) mixed_checked=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --no-mixed) mixed=0; shift ;;
    --extras) extras=1; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "soak.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
checker=$build/tools/tierce-check/tierce-check
mkdir -p "$out"
echo "soak.sh: results in $out"
rc=0
run() {  # name transport fault_check-arguments...
  local name=$1 t=$2
  shift 2
  local started=$SECONDS
  echo "== $name over $t: $*"
  python3 "$here/fault_check.py" --checker "$checker" --build "$build" --transport "$t" \
    --json "$out/$name-$t.json" "$@" >"$out/$name-$t.log" 2>&1
  local r=$?
  sed -n '/^== fault_check/,$p' "$out/$name-$t.log"
  echo "   ($((SECONDS - started)) s, exit $r)"
  if [ $r -eq 77 ]; then
    grep SKIP "$out/$name-$t.log"
    exit 77
  fi
  [ $r -eq 0 ] || rc=1
}
for v in $variants; do
  for t in $transports; do
    # Rounds of 2 faults (at 4 s and 16 s, 4 s each, 8 s after the last): ~28 s, ~50 000 checked.
    run "$v" "$t" --variant "$v" --cycles 2 --period 12 --min-checked "$checked"
  done
done
if [ $extras -eq 1 ]; then
  for v in $(python3 "$here/fault_check.py" --list | awk '$1 == "+" {print $2}'); do
    case $v in
      # No arbiter, no operator: every home stays fenced, every read a slow miss (~350 checked
      # reads/s): 330 s of fault for >= 100 000 checked reads.
      app2_host_loss) long="--fault-for 330 --after 0" ;;
      app2_host_loss_*) long="--fault-for 175 --after 0" ;;
      node_added) long="--fault-for 100 --after 0" ;;
      rolling_restart) long="--fault-for 45 --after 50" ;;
      partition_arbiter) long="--fault-for 20 --after 10 --min-checked $checked" ;;
      *) long="--fault-for 30 --after 60" ;;
    esac
    for t in $transports; do
      # shellcheck disable=SC2086
      run "$v" "$t" --variant "$v" --closed-loop --write-ratio 0.02 $long
    done
  done
fi
if [ $mixed -eq 1 ]; then
  for t in $transports; do
    # One round = one fault of every variant, 12 s apart (~170 s), on a cluster with app-link relays.
    run mixed "$t" --variant mixed --cycles 13 --period 12 --min-checked "$mixed_checked"
  done
fi
python3 - "$out" <<'PY' | tee "$out/table.txt"
import glob, json, os, sys
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json")), key=os.path.getmtime):
    with open(f) as fh:
        s = json.load(fh)
    w = s["windows"].get("fault", {})
    lat = w.get("write_latency_ms", {})
    rows.append((s["variant"], ",".join(s["letters"]) if s["variant"] != "mixed" else "all", s["transport"],
                 s["rounds"], s["checked_reads"], s["stale_reads"], w.get("checked_reads", 0), w.get("stale_reads", 0),
                 lat.get("p50", 0), lat.get("p99", 0), lat.get("max", 0), s["errors"], s["error_ratio"] or 0,
                 "pass" if s["pass"] else "FAIL"))
hdr = ("variant", "", "transport", "rounds", "checked", "stale", "checked@fault", "stale@fault",
       "upd p50 ms", "upd p99 ms", "upd max ms", "errors", "err ratio", "")
fmt = "{:18} {:4} {:9} {:>6} {:>9} {:>6} {:>13} {:>11} {:>10} {:>10} {:>10} {:>7} {:>9} {}"
print(fmt.format(*hdr))
for r in rows:
    print(fmt.format(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], f"{r[8]:.1f}", f"{r[9]:.1f}",
                     f"{r[10]:.1f}", r[11], f"{r[12]:.4f}", r[13]))
print("(upd = update latency of the writes that started while a fault lasted; @fault = reads that started then)")
PY
exit $rc
