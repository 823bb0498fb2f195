#!/usr/bin/python3
"""Strong coherence under faults (issue 13): tools/tierce-cluster up --cache tierce in a fresh
temporary directory, tierce-check against it (readers through both proxies, writers POSTing to
app1 only) while one process is killed, frozen, slowed or cut off and then healed, then
tierce-cluster down (always) and a check that nothing of the cluster is left (processes, relays,
/dev/shm). Prints the update latency while the fault lasts and the reads checked then.

  fault_check.py --checker PATH [--build DIR] --variant NAME --transport tcp|shm
                 [--fault-at 4] [--fault-for 4] [--after 8] [--cycles 1] [--period S]
                 [--min-checked N] [--readers 8] [--writers 2] [--hot 100] [--seed 1]
                 [--app-links direct|relay] [--max-error-ratio R] [--budget S] [--json FILE] [--keep]
  fault_check.py --list

--netns: the cluster across network namespaces (tierce-cluster up --netns: every node and MariaDB
with its own address, memd between nodes over tcp, --transport tcp only). The fault commands are
the same; the partitions cut the real link (iptables DROP inside app1's and app2's namespaces, no
relays); slow_home delays the app-to-app links with tierce-wanem relays in the namespaces.

One round: the fault starts --fault-at seconds into the checker's run and is healed --fault-for
seconds later (CONT, restart-proc, link heal / delay 0); the run goes on --after seconds more, so
that the node's rejoin is checked too. --cycles K repeats fault and heal every --period seconds
within the round. --min-checked N runs rounds on the same cluster until N reads were checked (the
soak). Variant "mixed" goes through every variant, one per cycle. Windows reported by the checker:
before, fault (while it lasts), recovery (3 s after the heal), after.

Pass: no stale read; the checker finished in its budget (a hang is killed and fails); every fault
command worked; at most --max-error-ratio (1 %) of the operations failed, not counting, for the
variants that take down what serves them (app1's or proxy1's httpd killed: VARIANTS says why),
those that started while the process was down or within 3 s of its restart. With --php
linearizable, the writes of the fault and recovery windows of the variants that leave a home
unreachable from app1 (LINEARIZABLE_REFUSES) are not counted either: that mode refuses a write
whose Pend does not reach every home in time (docs/php_extension.md). Counted per window,
so the allowance does not depend on how many operations this machine manages in a run.
Exit 0 passed, 1 failed, 77 skipped (not root or a prerequisite missing).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(REPO, "tools", "tierce-cluster")
sys.path.insert(0, os.path.join(REPO, "tools"))
from tiercelab import cluster as tcluster, procs as tprocs  # noqa: E402

# The error allowance: operations that failed although the fault does not explain it (none is
# expected; a stray 5xx of a loaded 2-core machine should not fail the run).
BASE = 0.01

# name -> (letter, fault commands, heal commands, needs app-link relays, operations may fail while
# the fault lasts and 3 s after the heal, why). Commands are tierce-cluster arguments ("--dir D" is
# added). Where failures are expected they are not counted then, however many: their number
# depends on how fast the machine retries, not on the system under test; before and after they
# are held to BASE like everywhere else.
VARIANTS = {
    "app1_memd_kill": ("a", ["signal app1 memd KILL"], ["restart-proc app1 memd"], False, False,
                       "the home of half the pages dies: its pages forward, updates wait for its ack "
                       "or fence it; nothing should fail"),
    "app1_memd_stop": ("a'", ["signal app1 memd STOP"], ["signal app1 memd CONT"], False, False,
                       "a frozen home looks dead to its peers (timeouts, not refusals); nothing should fail"),
    "app2_memd_kill": ("b", ["signal app2 memd KILL"], ["restart-proc app2 memd"], False, False,
                       "a remote home dies: app1's updates cannot collect its ack; nothing should fail"),
    "app2_memd_stop": ("b'", ["signal app2 memd STOP"], ["signal app2 memd CONT"], False, False,
                       "a remote home frozen; nothing should fail"),
    "app1_httpd_kill": ("c", ["signal app1 httpd KILL"], ["restart-proc app1 httpd"], False, True,
                        "app1's httpd takes every write: while it is down each write is refused (the "
                        "2 writers retry every 20 ms: ~400 errors in 4 s), and a read the proxies "
                        "balance to it fails until they mark it out (retry=1 s), also after the restart"),
    "app1_httpd_stop": ("c'", ["signal app1 httpd STOP"], ["signal app1 httpd CONT"], False, False,
                        "writes and the reads balanced to app1 wait out the freeze: 4 s, below the "
                        "checker's 30 s request timeout and the proxies' ProxyTimeout 30"),
    "proxy1_httpd_kill": ("d", ["signal proxy1 httpd KILL"], ["restart-proc proxy1 httpd"], False, True,
                          "half the readers' requests go to proxy1: each is refused while it is down "
                          "and the reader retries after 20 ms, so the 8 readers pile up ~1 600 errors "
                          "in 4 s (~4 % of a run here, more on a slower machine)"),
    "proxy1_httpd_stop": ("d'", ["signal proxy1 httpd STOP"], ["signal proxy1 httpd CONT"], False, False,
                          "reads sent to proxy1 wait out the freeze (below the request timeout)"),
    "proxy1_memd_kill": ("e", ["signal proxy1 memd KILL"], ["restart-proc proxy1 memd"], False, False,
                         "a proxy's memd only exports its arena; nothing should fail"),
    "proxy1_memd_stop": ("e'", ["signal proxy1 memd STOP"], ["signal proxy1 memd CONT"], False, False,
                         "as above, frozen"),
    "slow_home": ("f", ["link app1 app2 delay 1500"], ["link app1 app2 delay 0"], True, False,
                  "every byte between app1 and app2 takes 1.5 s each way: updates are slow, not failed"),
    "partition": ("g", ["link app1 app2 cut"], ["link app1 app2 heal"], True, False,
                  "app1 and app2 cannot reach each other (proxies reach both): updates wait or fence "
                  "app2; nothing should fail"),
    "partition_one_way": ("h", ["link app1 app2 cut --one-way"], ["link app1 app2 heal --one-way"], True, False,
                          "what app1 sends to app2 is lost, the other way works; nothing should fail"),
}
ORDER = list(VARIANTS)

# With --php linearizable, a write whose Pend does not reach every home within
# tierce.pend_timeout_ms is refused before its COMMIT (docs/php_extension.md, "Linearizable mode"):
# while a home cannot be reached from app1 (the writer), or answers slower than that, writes fail
# by design. Their failures while the fault lasts and 3 s after the heal are expected (not
# counted); reads are held to BASE as everywhere, and writes before and after the fault too.
LINEARIZABLE_REFUSES = {
    "app1_memd_kill", "app1_memd_stop", "app2_memd_kill", "app2_memd_stop", "slow_home",
    "partition", "partition_one_way",
}


def writes_may_fail(a, name):
    return a.php == "linearizable" and name in LINEARIZABLE_REFUSES


class Terminated(Exception):
    pass


def _term(signum, frame):
    raise Terminated(f"signal {signum}")


def say(msg):
    print(f"fault_check: {msg}", flush=True)


def skip_reason(a):
    if os.geteuid() != 0:
        return "needs root (private MariaDB and httpd as www-data, signals to them)"
    for exe in ("/usr/sbin/apache2", "/usr/sbin/mariadbd", "/usr/lib/apache2/modules/libphp8.2.so"):
        if not os.path.exists(exe):
            return f"{exe} missing (tools/deps.sh installs it)"
    if not any(os.access(os.path.join(a.build, p), os.X_OK)
               for p in ("sample/tierce-datagen", "sample/datagen/tierce-datagen")):
        return f"tierce-datagen not built under {a.build}/sample"
    if not os.access(a.checker, os.X_OK):
        return f"checker {a.checker} not built"
    for p in ("mod_rcache/mod_rcache.so", "mod_appversion/mod_appversion.so", "agents/memd/tierce-memd",
              "tools/tierce-wanem/tierce-wanem"):
        if not os.path.exists(os.path.join(a.build, p)):
            return f"needs {os.path.join(a.build, p)} (not built yet)"
    return None


def pct(values, p):
    """The same nearest-rank percentile as tierce-check."""
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


class Round:
    """One tierce-check run: its schedule of fault and heal commands and its windows."""

    def __init__(self, a, d, cycle0):
        self.events, self.ranges = [], {"before": [], "fault": [], "recovery": [], "after": []}
        self.variants = []
        f, length, period = a.fault_at, a.fault_for, a.period
        t = 0.0
        for k in range(a.cycles):
            name = ORDER[(cycle0 + k) % len(ORDER)] if a.variant == "mixed" else a.variant
            self.variants.append(name)
            _, fault, heal, _, _, _ = VARIANTS[name]
            start = f + k * period
            for c in fault:
                self.events.append((start, c))
            for c in heal:
                self.events.append((start + length, c))
            self.ranges["before" if k == 0 else "after"].append((t, start))
            self.ranges["fault"].append((start, start + length))
            self.ranges["recovery"].append((start + length, start + length + 3))
            # The same per variant: the error allowance is per variant (see VARIANTS).
            self.ranges.setdefault(f"fault-{name}", []).append((start, start + length))
            self.ranges.setdefault(f"recovery-{name}", []).append((start + length, start + length + 3))
            t = start + length + 3
        self.duration = f + (a.cycles - 1) * period + length + a.after
        self.ranges["after"].append((t, self.duration))
        self.d = d

    def argv(self, a, result):
        app1 = next(n["url"] for n in tcluster.load_state(self.d)["nodes"] if n["name"] == "app1")
        argv = [a.checker, "--cluster", os.path.join(self.d, "cluster.json"), "--app", app1,
                "--duration", f"{self.duration:g}", "--no-pace", "--readers", str(a.readers),
                "--writers", str(a.writers), "--hot", str(a.hot), "--seed", str(a.seed),
                "--timeout", str(a.request_timeout), "--max-error-ratio", "1",  # counted per window here
                "--json", result]
        if a.coop != "off":
            argv += ["--site", SITE]  # both proxies then share cache keys (and copies)
        for name, rs in self.ranges.items():
            for lo, hi in rs:
                if hi > lo:
                    argv += ["--window", f"{name}={lo:g}-{hi:g}"]
        for at, cmd in self.events:
            argv += ["--during", f"{CLUSTER} {cmd} --dir {self.d}@{at:g}"]
        return argv


def run_checker(a, argv, budget):
    """tierce-check in its own session (a timeout kills its --during children too); returns
    (exit code or None when it was killed, result dict or None)."""
    result = argv[argv.index("--json") + 1]
    say("running: " + " ".join(f"'{x}'" if " " in x else x for x in argv))
    p = subprocess.Popen(argv, start_new_session=True)
    try:
        rc = p.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        say(f"tierce-check did not finish within its budget of {budget:.0f} s: killed")
        return None, None
    except BaseException:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        raise
    try:
        with open(result) as f:
            return rc, json.load(f)
    except (OSError, ValueError) as e:
        say(f"no checker result in {result}: {e}")
        return rc, None


def leftovers(d, st):
    """What of the cluster outlived `down`: processes (leaders, children, relays), /dev/shm,
    network namespaces and the host interface (--netns)."""
    left = []
    if st is None:
        return left
    ns = st.get("netns") or {}
    for name in ns.get("namespaces", []):
        if os.path.exists(os.path.join("/run/netns", name)):
            left.append(f"network namespace {name}")
    if ns.get("host_if") and os.path.exists(f"/sys/class/net/{ns['host_if']}"):
        left.append(f"host interface {ns['host_if']}")
    for rec in tcluster.all_processes(st):
        if tprocs.alive(rec):
            left.append(f"{rec['name']} pid {rec['pid']}")
        left += [f"{rec['name']} child pid {p}" for p in tprocs.leftover_members(rec)]
    prefix = "tierce." + st["name"] + "."
    left += [f"/dev/shm/{f}" for f in os.listdir("/dev/shm") if f.startswith(prefix)]
    return left


# With --coop, the Host header readers send to both proxies (as a load balancer would).
SITE = "shop.test:80"


def up(a, d):
    argv = [CLUSTER, "up", "--dir", d, "--build", a.build, "--cache", "tierce", "--transport", a.transport,
            "--app-links", a.app_links, "--coop", a.coop]
    if a.netns:
        argv.append("--netns")
    if a.php != "explicit":
        argv += ["--php", a.php]
    if a.coop in ("mtacc", "hybcc"):
        # Small arenas (and a low threshold) so that pages really go to the app nodes' pools.
        argv += ["--arena-size", "4M", "--coop-threshold", "2K"]
    say("running: " + " ".join(argv))
    return subprocess.run(argv, stdin=subprocess.DEVNULL).returncode


def down(d):
    return subprocess.run([CLUSTER, "down", "--dir", d], stdin=subprocess.DEVNULL).returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checker", help="the tierce-check executable")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--variant", choices=ORDER + ["mixed"])
    ap.add_argument("--transport", choices=["tcp", "shm"], default="shm")
    ap.add_argument("--fault-at", type=float, default=4.0, help="seconds into the run (default 4)")
    ap.add_argument("--fault-for", type=float, default=4.0, help="seconds until the heal (default 4)")
    ap.add_argument("--after", type=float, default=8.0, help="seconds the run goes on after the heal")
    ap.add_argument("--cycles", type=int, default=1, help="faults per round")
    ap.add_argument("--period", type=float, help="seconds from one fault to the next (default "
                                                 "fault-for + after)")
    ap.add_argument("--min-checked", type=int, default=0, help="rounds until this many reads were checked")
    ap.add_argument("--max-rounds", type=int, default=100)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--hot", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--request-timeout", type=float, default=30.0,
                    help="tierce-check --timeout: one HTTP request's deadline (a hang beyond it is an error)")
    ap.add_argument("--app-links", choices=["direct", "relay"])
    ap.add_argument("--coop", choices=["off", "bcc", "ccwr", "mtacc", "hybcc"], default="off",
                    help="RCacheCoop of the proxies (readers then send one site name to both)")
    ap.add_argument("--php", choices=["explicit", "auto", "linearizable"], default="explicit",
                    help="dependencies from the sample app's headers, or from its SQL by the tierce "
                         "PHP extension (tierce-cluster up --php)")
    ap.add_argument("--max-error-ratio", type=float, default=BASE,
                    help="of the operations whose failure the fault does not explain (default %(default)s)")
    ap.add_argument("--budget", type=float, help="seconds a round's checker may take before it is killed as "
                                                 "hung (default: its duration + 3 request timeouts + 30)")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--netns", action="store_true",
                    help="tierce-cluster up --netns: one network namespace per node; links cut by iptables")
    ap.add_argument("--keep", action="store_true", help="keep the state directory")
    ap.add_argument("--list", action="store_true", help="list the variants and exit")
    a = ap.parse_args()
    if a.list:
        for name, (letter, fault, heal, relay, may_fail, why) in VARIANTS.items():
            print(f"{letter:3} {name:18} {'; '.join(fault)} -> {'; '.join(heal)}  "
                  f"({'errors expected while down' if may_fail else 'no errors expected'}"
                  f"{', relays' if relay else ''}): {why}")
        return 0
    if not a.checker or not a.variant:
        ap.error("--checker and --variant are required")
    a.build = os.path.abspath(a.build)
    if a.period is None:
        a.period = a.fault_for + a.after
    if a.period < a.fault_for + 3:
        ap.error("--period must leave 3 s of recovery after each heal")
    names = ORDER if a.variant == "mixed" else [a.variant]
    if a.netns:
        if a.transport != "tcp":
            ap.error("--netns: nodes reach each other over tcp only (--transport tcp)")
        # Cuts are iptables rules inside the namespaces (relays or not); a delay (slow_home) is the
        # tierce-wanem relays', one per ordered pair of app nodes on the sender's host.
        if a.app_links is None:
            a.app_links = "relay" if "slow_home" in names else "direct"
        if "slow_home" in names and a.app_links != "relay":
            ap.error("--netns: slow_home needs --app-links relay (the delay is the relays')")
    if a.app_links is None:
        a.app_links = "relay" if any(VARIANTS[n][3] for n in names) else "direct"
    if a.app_links == "direct" and any(VARIANTS[n][3] for n in names) and not a.netns:
        ap.error(f"{a.variant} needs --app-links relay")

    why = skip_reason(a)
    if not why and a.netns:
        from tiercelab import netns
        ok, why_not = netns.available()
        why = None if ok else f"--netns: {why_not}"
    if why:
        print(f"SKIP: {why}")
        return 77

    signal.signal(signal.SIGTERM, _term)
    d = tempfile.mkdtemp(prefix="tierce-fc.", dir="/tmp")
    rc, rounds, problems = 0, [], []
    st = None
    t_start = time.monotonic()
    try:
        urc = up(a, d)
        if urc != 0:
            # A start-up that failed is retried once on fresh ports (another test may have taken
            # one between the pick and the bind); a second failure is reported.
            say(f"tierce-cluster up exited {urc}: down and one more try")
            down(d)
            urc = up(a, d)
        if urc != 0:
            problems.append(f"tierce-cluster up exited {urc}")
        checked = 0
        cycle0 = 0
        while not problems and len(rounds) < a.max_rounds:
            r = Round(a, d, cycle0)
            cycle0 += a.cycles
            result = os.path.join(d, f"tierce-check-{len(rounds) + 1}.json")
            budget = a.budget or r.duration + 3 * a.request_timeout + 30
            crc, res = run_checker(a, r.argv(a, result), budget)
            rounds.append((r, crc, res))
            if crc is None:
                problems.append(f"round {len(rounds)}: tierce-check hung (killed after {budget:.0f} s)")
                break
            if res is None:
                problems.append(f"round {len(rounds)}: tierce-check exited {crc} without a result")
                break
            if crc != 0:
                problems.append(f"round {len(rounds)}: tierce-check exited {crc}: "
                                + "; ".join(res.get("failures", [])))
            checked += res.get("checked_reads", 0)
            if checked >= a.min_checked:
                break
            say(f"{checked} reads checked so far (want {a.min_checked}): another round")
    except (Terminated, KeyboardInterrupt) as e:
        problems.append(f"interrupted ({e})")
    except Exception as e:  # noqa: BLE001 — report anything as a failure, still clean up
        problems.append(f"unexpected {type(e).__name__}: {e}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let down finish
        try:
            st = tcluster.load_state(d)
        except tcluster.ClusterError:
            st = None
        drc = down(d)
        if drc != 0:
            problems.append(f"tierce-cluster down exited {drc}")
        left = leftovers(d, st)
        if left:
            problems.append("left after down: " + ", ".join(left))

    summary = summarize(a, rounds, problems, time.monotonic() - t_start)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=2)
    rc = 0 if summary["pass"] else 1
    if a.keep:
        print(f"state directory kept (logs under nodes/*/logs, run/): {d}")
    elif rc != 0:
        # The logs and the checker's results stay for a look; the database (200 MB) goes.
        shutil.rmtree(os.path.join(d, "mariadb", "db"), ignore_errors=True)
        print(f"state directory kept without its database (logs under nodes/*/logs, run/; "
              f"tierce-check-*.json): {d}")
    else:
        shutil.rmtree(d, ignore_errors=True)
    print("PASS" if rc == 0 else "FAIL")
    return rc


def summarize(a, rounds, problems, elapsed):
    """Sums the rounds; the fault window's write latency over all of them (raw values merged)."""
    tot = {k: 0 for k in ("reads", "checked_reads", "stale_reads", "writes_ok", "errors", "ops")}
    win = {}
    for r, crc, res in rounds:
        if not res:
            continue
        for k in tot:
            tot[k] += res.get(k, 0)
        for w in res.get("windows", []):
            x = win.setdefault(w["name"], {"reads": 0, "checked_reads": 0, "stale_reads": 0, "writes": 0,
                                           "writes_ok": 0, "errors": 0, "read_errors": 0,
                                           "write_errors": 0, "lat": []})
            for k in ("reads", "checked_reads", "stale_reads", "writes", "writes_ok", "errors",
                      "read_errors", "write_errors"):
                x[k] += w.get(k, 0)
            x["lat"] += w.get("write_latencies_ms", [])
    for x in win.values():
        lat = x.pop("lat")
        x["write_latency_ms"] = {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "max": max(lat) if lat else 0.0}
    names = sorted({v for r, _, _ in rounds for v in r.variants}, key=ORDER.index) or \
        (ORDER if a.variant == "mixed" else [a.variant])
    # Errors the fault does not explain: every window but the fault and recovery windows of the
    # variants that take down what serves the requests.
    counted = ["before", "after"] + [f"{w}-{n}" for n in names if not VARIANTS[n][4] for w in ("fault", "recovery")]
    # Linearizable mode refusing writes while a home is unreachable: only the reads of those windows.
    reads_only = {f"{w}-{n}" for n in names if not VARIANTS[n][4] and writes_may_fail(a, n)
                  for w in ("fault", "recovery")}
    c_errors = sum(win[w]["read_errors"] if w in reads_only else win[w]["errors"] for w in counted if w in win)
    c_ops = sum(win[w]["reads"] + (0 if w in reads_only else win[w]["writes"]) for w in counted if w in win)
    refused = sum(win[w]["write_errors"] for w in reads_only if w in win)
    c_ratio = c_errors / c_ops if c_ops else 0.0
    if c_ratio > a.max_error_ratio:
        problems.append(f"{c_errors} errors of {c_ops} operations the fault does not explain "
                        f"(ratio {c_ratio:.4f} > {a.max_error_ratio:g})")
    s = {"variant": a.variant, "letters": [VARIANTS[n][0] for n in names], "transport": a.transport,
         "app_links": a.app_links, "rounds": len(rounds), "cycles_per_round": a.cycles,
         "max_error_ratio": a.max_error_ratio, "elapsed_s": round(elapsed, 1), **tot,
         "error_ratio": (tot["errors"] / tot["ops"]) if tot["ops"] else None,
         "counted_errors": c_errors, "counted_ops": c_ops, "counted_error_ratio": c_ratio,
         "expected_write_refusals": refused, "windows": win,
         "problems": problems}
    if tot["stale_reads"] and not any("stale" in p for p in problems):
        problems.append(f"{tot['stale_reads']} stale read(s)")
    s["pass"] = not problems and bool(rounds) and tot["stale_reads"] == 0
    print(f"\n== fault_check {a.variant} ({', '.join(s['letters'])}) over {a.transport}, app links "
          f"{a.app_links}: {len(rounds)} round(s) x {a.cycles} fault(s), {elapsed:.0f} s")
    print(f"  checked reads {tot['checked_reads']} of {tot['reads']}, STALE {tot['stale_reads']}, "
          f"writes ok {tot['writes_ok']}, errors {tot['errors']} (ratio "
          f"{0 if not tot['ops'] else tot['errors'] / tot['ops']:.4f}; not explained by the fault "
          f"{c_errors} of {c_ops}, ratio {c_ratio:.4f}, allowed {a.max_error_ratio:g})")
    if reads_only:
        print(f"  writes refused while a home was unreachable (linearizable mode, expected): {refused}")
    for name in ("before", "fault", "recovery", "after"):
        x = win.get(name)
        if x:
            lat = x["write_latency_ms"]
            print(f"  {name:9} checked reads {x['checked_reads']:>7}  stale {x['stale_reads']:>4}  writes ok "
                  f"{x['writes_ok']:>5} of {x['writes']:>5}  update latency p50 {lat['p50']:8.1f} ms  "
                  f"p99 {lat['p99']:8.1f} ms  max {lat['max']:8.1f} ms  errors {x['errors']}")
    for p in problems:
        print(f"  FAILED: {p}")
    return s


if __name__ == "__main__":
    sys.exit(main())
