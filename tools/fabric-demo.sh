#!/usr/bin/env bash
# The fabric demo (was the main job until issue 3). Installs what is needed, builds, then runs: a
# tierce-memd exporting a shared segment over tcp and shm, operator commands against it, and the
# fabric benchmark (table + PNG).
#   tools/fabric-demo.sh [--quick]     --quick: a short benchmark run
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -h|--help) sed -n 2,6p "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

bash tools/deps.sh
bash tools/build.sh build >/dev/null
BIN=$ROOT/build
MEMD=$BIN/agents/memd/tierce-memd
CLI=$BIN/tools/tierce-fabric/tierce-fabric

DEMO=$(mktemp -d /tmp/tierce-demo.XXXXXX)
SEG=/tierce.demo.$$
memd_pid=
cleanup() {
  [[ -n $memd_pid ]] && kill "$memd_pid" 2>/dev/null && wait "$memd_pid" 2>/dev/null || true
  "$CLI" segment rm "$SEG" 2>/dev/null || true
  rm -rf "$DEMO"
}
trap cleanup EXIT INT TERM

head -c 32 /dev/urandom | base64 > "$DEMO/secret"
chmod 600 "$DEMO/secret"
export TIERCE_SECRET_FILE=$DEMO/secret
cat > "$DEMO/memd.toml" <<CONF
[memd]
node = "demo"
listen = ["tcp://127.0.0.1:0", "shm://$DEMO/memd.sock"]
secret_file = "secret"
pid_file = "memd.pid"
ready_file = "memd.ready"
log = "stderr"

[[region]]
name = "counters"
segment = "$SEG"
follow_owner = false   # created by the CLI below, which exits at once
CONF

echo "== creating segment $SEG and starting tierce-memd ($DEMO/memd.toml)"
"$CLI" segment create "$SEG" 1048576
"$MEMD" --foreground -c "$DEMO/memd.toml" 2> "$DEMO/memd.log" &
memd_pid=$!
for _ in $(seq 100); do [[ -s $DEMO/memd.ready ]] && break; sleep 0.05; done
[[ -s $DEMO/memd.ready ]] || { echo "memd did not start:"; cat "$DEMO/memd.log"; exit 1; }
TCP=$(grep '^tcp://' "$DEMO/memd.ready")
SHM=$(grep '^shm://' "$DEMO/memd.ready")
echo "memd serving on $TCP and $SHM"

echo "== directory and one-sided operations"
"$CLI" lookup "$TCP" counters
"$CLI" lookup "$SHM" counters
echo -n "faa over tcp, old value: "; "$CLI" faa "$TCP" counters 0 5
echo -n "faa over shm, old value: "; "$CLI" faa "$SHM" counters 0 10
"$CLI" read "$TCP" counters 0 8
"$CLI" ping "$TCP" 1000
"$CLI" ping "$SHM" 1000
echo "== memd's own view"
"$CLI" call "$TCP" memd.list
"$CLI" segment info "$SEG"

echo "== fabric benchmark (target process loaded and unloaded)"
mkdir -p "$ROOT/benchmarks/results"
bench_args=(--csv "$ROOT/benchmarks/results/fabric.csv" --plot)
((quick)) && bench_args+=(--quick)
"$BIN/benchmarks/fabric/tierce-bench-fabric" "${bench_args[@]}"
echo
echo "Table above; CSV and plot in benchmarks/results/. memd log: stopping it now (TERM)."
kill -TERM "$memd_pid"; wait "$memd_pid"; echo "tierce-memd exited with status $?"; memd_pid=
