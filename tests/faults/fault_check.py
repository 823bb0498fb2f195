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
                 [--rate OPS_PER_S | --closed-loop] [--write-ratio R] [--min-healthy-ratio R]
  fault_check.py --list

Every run prints a per-second timeline: both proxies' per-home counters (/rcache-metrics,
tierce_rcache_home_*_total) scraped every second, the hit ratio of the pages homed at the healthy
app nodes (those the fault does not hit: FAULTED) and of all, with tierce-check --timeline's reads,
stale reads and writes; per window the same and the update latency p50/p99. --min-healthy-ratio R
fails the run when, from 2 x lease after a fault began until it ended, the healthy homes' hit
ratio is below R x its value before the fault. The extra variants (EXTRA, issue 29) run open loop
(tierce-check --rate) with the fault at 10 s; see tests/faults/README.md.

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
Exit 0 passed, 1 failed (a Tierce target not built fails too), 77 skipped (not root or a system
package missing; on the CI machine, CI=true, that fails too: tools/tiercelab/prereq.py).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(REPO, "tools", "tierce-cluster")
sys.path.insert(0, os.path.join(REPO, "tools"))
from tiercelab import cluster as tcluster, procs as tprocs, prereq as tprereq  # noqa: E402

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
    "app1_writer_kill": ("w", ["signal app1 writer KILL"], ["restart-proc app1 writer"], False, False,
                         "the writing node's writer agent dies: app1's httpd children send their "
                         "invalidations through its socket (they hold no secret), so each update "
                         "returns after the fence bound (a lost request), every home stops "
                         "vouching for app1's counter, and the restarted agent numbers once bare "
                         "so they catch up; nothing should fail"),
    "app1_writer_stop": ("w'", ["signal app1 writer STOP"], ["signal app1 writer CONT"], False, False,
                         "the writing node's writer agent frozen: updates wait in its socket (they "
                         "are numbered when it thaws, 4 s later, below the request timeout); the "
                         "homes cannot read app1's counter meanwhile; nothing should fail"),
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
    "redirect": ("r", ["link app1 app2 redirect --to proxy1"], ["link app1 app2 redirect --to off"], True, False,
                 "an on-path redirect: every connection app1 opens to app2 (its memd, its writer "
                 "agent) lands at proxy1's memd, another member holding the cluster secret; the "
                 "node keys refuse it at the handshake (\"dialled node app2 but node proxy1 "
                 "answered\"), so app1 sees app2 unreachable, as in a partition: nothing read "
                 "from proxy1 as app2's, nothing should fail"),
}
ORDER = list(VARIANTS)  # "mixed" goes through these, one per cycle

# The graceful-degradation variants (issue 29): longer outages, a whole node lost, every process
# restarted in turn, a node added. Not in "mixed" (a host loss is not healed, the others take tens
# of seconds). Same tuple as VARIANTS; a command may be (seconds after the fault began, command)
# and a command may chain tierce-cluster calls with " && ". Their timing and load defaults are in
# EXTRA_DEFAULTS (open loop: --rate; see the README for the choice).
EXTRA = {
    "app1_memd_down30": ("i", ["signal app1 memd KILL"], ["restart-proc app1 memd"], False, False,
                         "the writing node's memd dead for 30 s, then restarted: the pages homed at "
                         "app1 fail closed; app2's should stay cached once a memd crash is not a "
                         "writer loss (issue 29 Part 1)"),
    "app2_memd_down30": ("j", ["signal app2 memd KILL"], ["restart-proc app2 memd"], False, False,
                         "a remote home's memd dead for 30 s, then restarted: app1's pages should "
                         "stay cached (issue 29 Part 1)"),
    "app2_host_loss": ("k", ["signal app2 all KILL"], [], False, True,
                       "every process of app2 (httpd, memd, and its tierce-writerd when the cluster "
                       "runs one) killed and not restarted: a read the proxies balance to app2 fails "
                       "until they mark it out (retry=1 s), and again at each retry; app1's pages stay "
                       "cached only once a lost node can be dropped (issue 29 Part 2)"),
    "app2_host_loss_node_out": ("k'", ["signal app2 all KILL", (1, "node-out app2")], [], False, True,
                                "app2 lost as above, then taken out of app1's fence by the operator's "
                                "command 1 s later (tierce-cluster node-out): app1's pages must stay "
                                "cached from then on (docs/coherence.md \"Taking a lost node out\")"),
    "rolling_restart": ("l", [(0, "signal app1 memd TERM && restart-proc app1 memd"),
                              (10, "signal app1 httpd TERM && restart-proc app1 httpd"),
                              (20, "signal app2 memd TERM && restart-proc app2 memd"),
                              (30, "signal app2 httpd TERM && restart-proc app2 httpd")], [], False, True,
                        "every memd and httpd of the app nodes restarted in turn, one step every 10 s: "
                        "while app1's httpd restarts every write is refused"),
    "node_added": ("m", ["add-node app3"], [], False, True,
                   "app3 added to the topology (tierce-cluster add-node: new topology, app3 started, "
                   "then every other memd, httpd and proxy restarted with it, one at a time): requests "
                   "to a process being restarted may fail"),
    "app2_host_loss_arbiter": ("k\"", ["signal app2 all KILL"], [], False, True,
                               "app2 lost as above, in a cluster whose database is the fence's arbiter "
                               "(tierce-cluster up --arbiter): app1 drops app2 there after 3 leases "
                               "without its writer counter, catches up, and keeps its pages cached "
                               "from then on without anyone's command (issue 29 Part 2)"),
    "partition_arbiter": ("g\"", ["link app1 app2 cut"], ["link app1 app2 heal"], True, True,
                          "app1 and app2 cut from each other (both reach the database and the "
                          "proxies) with the arbiter: one of them drops the other (only a node that "
                          "is in drops, so not both); the dropped node's writes are refused (503) "
                          "until the heal, when the homes re-admit it; after that nothing fails"),
}
VARIANTS.update(EXTRA)

# The change-log agent's faults (issue 31): tierce-binlogd runs beside app1 and invalidates what
# the SQL writers (tierce-check --sql-writers, straight to MariaDB) change. While it is down or
# frozen those writes stay stale (bounded staleness: the checker's --sql-stale-bound-ms covers the
# fault and the recovery); after it, every row change must have been invalidated: a read that
# starts more than the bound after an SQL commit and shows older data fails the run. The PHP
# writers keep the strict rule throughout. Closed set (they group), not in "mixed".
BINLOG = {
    "binlogd_kill": ("n", ["signal app1 binlogd KILL"], ["restart-proc app1 binlogd"], False, False,
                     "the agent killed and restarted: it resumes after its saved position (no event "
                     "lost); SQL writes stay stale while it is down; nothing should fail"),
    "binlogd_stop": ("n'", ["signal app1 binlogd STOP"], ["signal app1 binlogd CONT"], False, False,
                     "the agent frozen: the server's stream waits, it catches up after CONT"),
    "binlog_purged": ("o", ["signal app1 binlogd KILL", (1, "purge-binlogs")],
                      ["restart-proc app1 binlogd"], False, False,
                      "the agent down while the binlogs past its position are purged: at its restart "
                      "the server no longer has its position, it invalidates everything once and "
                      "reads on from the current position"),
    "mariadb_restart": ("p", ["restart-db --signal KILL"], [], False, True,
                        "MariaDB killed and started again (crash recovery): every request that needs "
                        "the database fails until it is back, the agent reconnects with backoff and "
                        "resumes after its position"),
}
VARIANTS.update(BINLOG)
# Variants that need the arbiter (tierce-cluster up --arbiter; --arbiter runs any variant with it).
ARBITER_VARIANTS = {"app2_host_loss_arbiter", "partition_arbiter"}
# Where the healthy homes' window begins, in seconds after the fault (default 2 x lease): with the
# arbiter, a lost node costs every home until it is dropped (drop_after_ms), then one lease.
HEALTHY_FROM = {"app2_host_loss_arbiter": lambda lease, drop: drop + lease}
# Per variant: the homes a fault hits, as (from, to, homes) in seconds after it began ("end": until
# the fault's end). The other app nodes are the HEALTHY homes of the timeline. Default: none.
FAULTED = {
    "app1_memd_kill": [(0, "end", {"app1"})], "app1_memd_stop": [(0, "end", {"app1"})],
    "app2_memd_kill": [(0, "end", {"app2"})], "app2_memd_stop": [(0, "end", {"app2"})],
    "slow_home": [(0, "end", {"app2"})], "partition": [(0, "end", {"app2"})],
    "partition_one_way": [(0, "end", {"app2"})], "redirect": [(0, "end", {"app2"})],
    "app1_memd_down30": [(0, "end", {"app1"})], "app2_memd_down30": [(0, "end", {"app2"})],
    "app2_host_loss": [(0, "end", {"app2"})], "app2_host_loss_node_out": [(0, "end", {"app2"})],
    "app2_host_loss_arbiter": [(0, "end", {"app2"})], "partition_arbiter": [(0, "end", {"app1", "app2"})],
    "rolling_restart": [(0, 10, {"app1"}), (20, 30, {"app2"})],
}
# Defaults of the extra variants (an option given on the command line wins).
# The fault at 10 s: the cache needs ~8 s to warm up at this rate (the baseline of
# --min-healthy-ratio is the second half of the before window).
_OPEN_LOOP = {"rate": 150.0, "write_ratio": 0.02, "readers": 16, "writers": 8, "fault_at": 10.0}
EXTRA_DEFAULTS = {
    "app1_memd_down30": dict(_OPEN_LOOP, fault_for=30.0, after=8.0),
    "app2_memd_down30": dict(_OPEN_LOOP, fault_for=30.0, after=8.0),
    "app2_host_loss": dict(_OPEN_LOOP, fault_for=20.0, after=0.0),
    "app2_host_loss_node_out": dict(_OPEN_LOOP, fault_for=20.0, after=0.0),
    "app2_host_loss_arbiter": dict(_OPEN_LOOP, fault_for=20.0, after=0.0),
    "partition_arbiter": dict(_OPEN_LOOP, fault_for=20.0, after=10.0),
    "rolling_restart": dict(_OPEN_LOOP, fault_for=40.0, after=8.0),
    "node_added": dict(_OPEN_LOOP, fault_for=30.0, after=8.0),
}
CLOSED_LOOP = {"rate": None, "write_ratio": 0.1, "readers": 8, "writers": 2, "fault_at": 4.0,
               "fault_for": 4.0, "after": 8.0}


def commands_at(cmds, t0):
    """[(time, command)] of a VARIANTS command list whose offsets count from t0."""
    return [(t0 + c[0], c[1]) if isinstance(c, tuple) else (t0, c) for c in cmds]


def shell_of(cmd, d):
    """The --during shell command of a tierce-cluster command (chained with ' && ')."""
    return " && ".join(f"{CLUSTER} {c.strip()} --dir {d}" for c in cmd.split("&&"))

# With --php linearizable, a write whose Pend does not reach every home within
# tierce.pend_timeout_ms is refused before its COMMIT (docs/php_extension.md, "Linearizable mode"):
# while a home cannot be reached from app1 (the writer), or answers slower than that, writes fail
# by design. Their failures while the fault lasts and 3 s after the heal are expected (not
# counted); reads are held to BASE as everywhere, and writes before and after the fault too.
LINEARIZABLE_REFUSES = {
    "app1_memd_kill", "app1_memd_stop", "app2_memd_kill", "app2_memd_stop", "slow_home",
    "partition", "partition_one_way", "redirect",
}


def writes_may_fail(a, name):
    return a.php == "linearizable" and name in LINEARIZABLE_REFUSES


def say(msg):
    print(f"fault_check: {msg}", flush=True)


def prerequisites(a):
    """(why to skip, why to fail): tools/tiercelab/prereq.py's policy."""
    return tprereq.cluster(a.build, a.checker, extra_targets=("tools/tierce-wanem/tierce-wanem",),
                           root="private MariaDB and httpd as www-data, signals to them")


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
        self.faulted = []  # (from, to, homes hit) in seconds of the run
        self.faults = []   # (from, to) of each fault
        self.timeline = None  # the proxies' scrapes (Scraper) and the checker's seconds, once run
        f, length, period = a.fault_at, a.fault_for, a.period
        t = 0.0
        for k in range(a.cycles):
            name = a.names[(cycle0 + k) % len(a.names)]
            self.variants.append(name)
            _, fault, heal, _, _, _ = VARIANTS[name]
            start = f + k * period
            self.events += commands_at(fault, start) + commands_at(heal, start + length)
            for lo, hi, homes in FAULTED.get(name, []):
                self.faulted.append((start + lo, start + length if hi == "end" else start + hi, homes))
            self.faults.append((start, start + length))
            self.ranges["before" if k == 0 else "after"].append((t, start))
            self.ranges["fault"].append((start, start + length))
            self.ranges["recovery"].append((start + length, start + length + 3))
            # The same per variant: the error allowance is per variant (see VARIANTS).
            self.ranges.setdefault(f"fault-{name}", []).append((start, start + length))
            self.ranges.setdefault(f"recovery-{name}", []).append((start + length, start + length + 3))
            t = start + length + 3
        self.duration = f + (a.cycles - 1) * period + length + a.after
        # The second half of "before": the cache warm, the cold start's slow first updates
        # (PHP, MariaDB) out: the baseline of the hit ratio and of the update latency.
        self.ranges["warm"] = [(f / 2, f)]
        self.ranges["after"].append((t, self.duration))
        self.d = d

    def argv(self, a, result):
        app1 = next(n["url"] for n in tcluster.load_state(self.d)["nodes"] if n["name"] == "app1")
        argv = [a.checker, "--cluster", os.path.join(self.d, "cluster.json"), "--app", app1,
                "--duration", f"{self.duration:g}", "--no-pace", "--readers", str(a.readers),
                "--writers", str(a.writers), "--hot", str(a.hot), "--seed", str(a.seed),
                "--timeout", str(a.request_timeout), "--max-error-ratio", "1",  # counted per window here
                "--write-ratio", f"{a.write_ratio:g}", "--timeline", "--json", result]
        if a.rate:
            argv += ["--rate", f"{a.rate:g}"]  # open loop
        if a.sql_writers:
            argv += ["--sql-writers", str(a.sql_writers), "--sql-stale-bound-ms",
                     f"{a.sql_stale_bound_ms:g}"]
        if a.coop != "off":
            argv += ["--site", SITE]  # both proxies then share cache keys (and copies)
        for name, rs in self.ranges.items():
            for lo, hi in rs:
                if hi > lo:
                    argv += ["--window", f"{name}={lo:g}-{hi:g}"]
        for at, cmd in self.events:
            argv += ["--during", f"{shell_of(cmd, self.d)}@{at:g}"]
        return argv


HOME_RE = re.compile(r'^tierce_rcache_home_(lookups|hits|unverifiable)_total\{home="([^"]*)"\} (\S+)$')


def scrape(url, timeout=0.8):
    """{(kind, home): value} of a proxy's per-home counters (/rcache-metrics), None when it does
    not answer (down, restarting)."""
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    try:
        c.request("GET", "/rcache-metrics")
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        if r.status != 200:
            return None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        c.close()
    out = {}
    for line in text.splitlines():
        m = HOME_RE.match(line)
        if m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


class Scraper(threading.Thread):
    """Scrapes every proxy's per-home counters once a second from t0 (the checker's start) until
    stopped: samples[k] = (seconds since t0, [counters or None per proxy])."""

    def __init__(self, urls, t0):
        super().__init__(daemon=True)
        self.urls, self.t0, self.samples = urls, t0, []
        self.done = threading.Event()

    def run(self):
        k = 0
        while True:
            wait = self.t0 + k - time.monotonic()
            if wait > 0 and self.done.wait(wait):
                break
            if self.done.is_set():
                break
            at = time.monotonic() - self.t0
            self.samples.append((at, [scrape(u) for u in self.urls]))
            k += 1


def proxy_urls(d):
    return [n["url"] for n in tcluster.load_state(d)["nodes"] if n["role"] == "proxy"]


def run_checker(a, argv, budget, scraper_urls=None):
    """tierce-check in its own session (a timeout kills its --during children too); returns
    (exit code or None when it was killed, result dict or None, the proxies' scrapes)."""
    result = argv[argv.index("--json") + 1]
    say("running: " + " ".join(f"'{x}'" if " " in x else x for x in argv))
    p = subprocess.Popen(argv, start_new_session=True)
    scr = Scraper(scraper_urls or [], time.monotonic())
    scr.start()
    try:
        rc = p.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        say(f"tierce-check did not finish within its budget of {budget:.0f} s: killed")
        return None, None, scr.samples
    except BaseException:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        raise
    finally:
        scr.done.set()
        scr.join()
    try:
        with open(result) as f:
            return rc, json.load(f), scr.samples
    except (OSError, ValueError) as e:
        say(f"no checker result in {result}: {e}")
        return rc, None, scr.samples


def lease_s(d):
    """[coherence] lease_ms of the cluster's topology, in seconds (1 s when it says nothing)."""
    try:
        with open(os.path.join(d, "cluster.toml")) as f:
            m = re.search(r"^lease_ms\s*=\s*(\d+)", f.read(), re.M)
    except OSError:
        m = None
    return int(m.group(1)) / 1000 if m else 1.0


def drop_after_s(d):
    """[arbiter] drop_after_ms of the cluster's topology in seconds (3 leases when it says nothing)."""
    try:
        with open(os.path.join(d, "cluster.toml")) as f:
            m = re.search(r"^drop_after_ms\s*=\s*(\d+)", f.read(), re.M)
    except OSError:
        m = None
    return int(m.group(1)) / 1000 if m else 3 * lease_s(d)


# Per variant: (node, text) that must be in that node's logs (nodes/NODE/logs/*) after the run —
# proof that the fault went the way its description says (not merely that nothing went wrong).
EXPECT_LOGGED = {"redirect": [("app1", "dialled node app2 but node proxy1 answered")]}


def logged(d, node, text):
    """True when `text` is in one of node's log files."""
    logs = os.path.join(d, "nodes", node, "logs")
    for f in (os.listdir(logs) if os.path.isdir(logs) else []):
        try:
            with open(os.path.join(logs, f), errors="replace") as fh:
                if text in fh.read():
                    return True
        except OSError:
            pass
    return False


LOG_TIME_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}) ")


def drop_times(d, home="app1"):
    """From `home`'s memd log: [(seconds from its first failed renewal to its drop, the drop line)]
    for each drop (COH0226) — how long a lost node cost every page of that home."""
    path = os.path.join(d, "nodes", home, "logs", "memd.log")
    out, first_fail = [], None
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = LOG_TIME_RE.match(line)
                if not m:
                    continue
                t = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%dT%H:%M:%S")) + float(m.group(1)[19:])
                if (" COH0210 " in line or " COH0211 " in line) and first_fail is None:
                    first_fail = t
                elif " COH0226 " in line:
                    out.append((t - first_fail if first_fail is not None else None, line.strip()))
                    first_fail = None
                elif " COH0212 " in line:
                    first_fail = None
    except OSError:
        pass
    return out


def ratio(hits, lookups):
    return hits / lookups if lookups else None


def build_timeline(r, samples, res):
    """Per second k (from the proxies' scrape at ~k s to the one at ~k+1 s; a proxy that did not
    answer either time is left out of that second and counted in proxies_missing, a restarted one
    reads as a counter reset): lookups and hits of the pages homed at the HEALTHY app nodes (those
    no fault hits during that second), of those at the SPARED ones (no fault of the round hits
    them at all: what the windows compare), and of all, with the checker's reads, stale reads and
    writes of that second (tierce-check --timeline)."""
    secs = {x["t"]: x for x in (res or {}).get("timeline", [])}
    hit_homes = set().union(*[h for _, _, h in r.faulted]) if r.faulted else set()
    rows = []
    for k in range(len(samples) - 1):
        prev, cur = samples[k][1], samples[k + 1][1]
        per_home, missing = {}, 0
        for p, c in zip(prev, cur):
            if p is None or c is None:
                missing += 1
                continue
            for (kind, home), v in c.items():
                b = p.get((kind, home), 0.0)
                per_home.setdefault(home, {"lookups": 0.0, "hits": 0.0, "unverifiable": 0.0})[kind] += \
                    v - b if v >= b else v
        faulted = set().union(*[h for lo, hi, h in r.faulted if lo < k + 1 and hi > k]) if r.faulted else set()

        def total(homes, kind):
            return int(sum(per_home[h][kind] for h in homes))
        healthy = sorted(h for h in per_home if h not in faulted)
        spared = sorted(h for h in per_home if h not in hit_homes)
        x = secs.get(k, {})
        row = {"t": k, "scraped_at_s": round(samples[k + 1][0], 2), "faulted": sorted(faulted), "healthy": healthy,
               "healthy_lookups": total(healthy, "lookups"), "healthy_hits": total(healthy, "hits"),
               "spared_lookups": total(spared, "lookups"), "spared_hits": total(spared, "hits"),
               "lookups": total(per_home, "lookups"), "hits": total(per_home, "hits"),
               "unverifiable": total(per_home, "unverifiable"), "proxies_missing": missing,
               "reads": x.get("reads", 0), "stale_reads": x.get("stale_reads", 0),
               "writes": x.get("writes", 0), "writes_ok": x.get("writes_ok", 0), "errors": x.get("errors", 0),
               "write_p50_ms": x.get("write_latency_ms", {}).get("p50"),
               "write_p99_ms": x.get("write_latency_ms", {}).get("p99")}
        row["healthy_ratio"] = ratio(row["healthy_hits"], row["healthy_lookups"])
        row["ratio"] = ratio(row["hits"], row["lookups"])
        rows.append(row)
    return rows


def in_ranges(t, ranges):
    """Second [t, t+1) lies in one of the ranges."""
    return any(lo <= t and t + 1 <= hi + 1e-9 for lo, hi in ranges)


def window_summary(r, rows, res):
    """Per window (before / fault / recovery / after): the hit ratio of the spared homes (those no
    fault of the round hits) and of all, the stale reads, the update latency p50/p99."""
    wins = {w["name"]: w for w in (res or {}).get("windows", [])}
    out = {}
    for name in ("before", "warm", "fault", "recovery", "after"):
        sel = [x for x in rows if in_ranges(x["t"], r.ranges.get(name, []))]
        w = wins.get(name)
        if not sel and not w:
            continue
        sh, sl = sum(x["spared_hits"] for x in sel), sum(x["spared_lookups"] for x in sel)
        hh, hl = sum(x["healthy_hits"] for x in sel), sum(x["healthy_lookups"] for x in sel)
        ah, al = sum(x["hits"] for x in sel), sum(x["lookups"] for x in sel)
        lat = (w or {}).get("write_latency_ms", {})
        out[name] = {"seconds": len(sel), "spared_hits": sh, "spared_lookups": sl, "spared_ratio": ratio(sh, sl),
                     "healthy_hits": hh, "healthy_lookups": hl, "healthy_ratio": ratio(hh, hl),
                     "hits": ah, "lookups": al, "ratio": ratio(ah, al),
                     "stale_reads": (w or {}).get("stale_reads", 0), "checked_reads": (w or {}).get("checked_reads", 0),
                     "update_p50_ms": lat.get("p50"), "update_p99_ms": lat.get("p99")}
    return out


def healthy_checks(a, r, rows, lease, drop=None):
    """Per fault of the round: the healthy homes' hit ratio from 2 x lease after it began until it
    ended, against the spared homes' ratio before the first fault (the second half of the before
    window: the first seconds warm the cache up); and the longest run of seconds in which no
    lookup at all was a hit (from the fault's start to 3 s after its end)."""
    out = []
    before = [x for x in rows if a.fault_at / 2 <= x["t"] and x["t"] + 1 <= a.fault_at + 1e-9]
    spared_any = any(x["spared_lookups"] for x in rows)
    if spared_any:
        base = ratio(sum(x["spared_hits"] for x in before), sum(x["spared_lookups"] for x in before))
    else:  # every home is hit at some point (rolling restart): all homes before the fault
        base = ratio(sum(x["hits"] for x in before), sum(x["lookups"] for x in before))
    for (start, end), name in zip(r.faults, r.variants):
        frm = start + (HEALTHY_FROM[name](lease, drop if drop else 3 * lease) if name in HEALTHY_FROM
                       else 2 * lease)
        sel = [x for x in rows if in_ranges(x["t"], [(frm, end)])]
        hh, hl = sum(x["healthy_hits"] for x in sel), sum(x["healthy_lookups"] for x in sel)
        run = longest = 0
        for x in rows:
            if start <= x["t"] < end + 3:
                run = run + 1 if x["lookups"] and not x["hits"] else 0
                longest = max(longest, run)
        c = {"from_s": frm, "to_s": end, "baseline_ratio": base, "healthy_hits": hh,
             "healthy_lookups": hl, "healthy_ratio": ratio(hh, hl), "longest_zero_hit_run_s": longest}
        c["relative"] = (c["healthy_ratio"] / base) if base and c["healthy_ratio"] is not None else None
        out.append(c)
    return out


def fmt_ratio(x):
    return "   -  " if x is None else f"{x:6.3f}"


def print_timeline(rows, wsum, checks):
    print("  per second (hit ratio of the pages homed at the healthy nodes / of all; stale reads by "
          "the second the read started):")
    print(f"  {'t':>3} {'faulted':9} {'healthy hits/lookups':>21} {'ratio':>6} {'all hits/lookups':>17} "
          f"{'ratio':>6} {'unverif':>7} {'reads':>5} {'stale':>5} {'writes':>6} {'upd p99 ms':>10}")
    for x in rows:
        p99 = "-" if not x["writes_ok"] else f"{x['write_p99_ms']:.0f}"
        miss = f"  ({x['proxies_missing']} proxy not scraped)" if x["proxies_missing"] else ""
        if x["scraped_at_s"] > x["t"] + 1.5:
            miss += f"  (scraped late, at {x['scraped_at_s']:.1f} s)"
        print(f"  {x['t']:>3} {','.join(x['faulted']) or '-':9} {x['healthy_hits']:>10}/{x['healthy_lookups']:<10} "
              f"{fmt_ratio(x['healthy_ratio'])} {x['hits']:>8}/{x['lookups']:<8} {fmt_ratio(x['ratio'])} "
              f"{x['unverifiable']:>7} {x['reads']:>5} {x['stale_reads']:>5} {x['writes']:>6} {p99:>10}{miss}")
    for name, w in wsum.items():
        p50 = "-" if w["update_p50_ms"] is None else f"{w['update_p50_ms']:.1f}"
        p99 = "-" if w["update_p99_ms"] is None else f"{w['update_p99_ms']:.1f}"
        print(f"  window {name:9} {w['seconds']:>3} s: spared homes hit ratio {fmt_ratio(w['spared_ratio'])}, "
              f"all {fmt_ratio(w['ratio'])}, stale {w['stale_reads']} of {w['checked_reads']} checked, "
              f"update p50 {p50} ms p99 {p99} ms")
    for c in checks:
        print(f"  healthy homes {c['from_s']:g}-{c['to_s']:g} s: hit ratio {fmt_ratio(c['healthy_ratio'])} "
              f"({c['healthy_hits']}/{c['healthy_lookups']}), before {fmt_ratio(c['baseline_ratio'])}, "
              f"relative {fmt_ratio(c['relative'])}; longest run with no hit at all "
              f"{c['longest_zero_hit_run_s']} s")


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
    if a.arbiter:
        argv.append("--arbiter")
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
    ap.add_argument("--variant", help="a variant (--list), \"mixed\" (every one of the closed set, one "
                    "per cycle) or a comma-separated list of closed-set variants (one per cycle, in "
                    "that order, one cluster for all: CI's grouped fault tests)")
    ap.add_argument("--transport", choices=["tcp", "shm"], default="shm")
    ap.add_argument("--fault-at", type=float, help="seconds into the run (default 4; the extra variants 10)")
    ap.add_argument("--fault-for", type=float, help="seconds until the heal (default 4; the extra "
                                                    "variants: EXTRA_DEFAULTS)")
    ap.add_argument("--after", type=float, help="seconds the run goes on after the heal (default 8)")
    ap.add_argument("--cycles", type=int, default=1, help="faults per round")
    ap.add_argument("--period", type=float, help="seconds from one fault to the next (default "
                                                 "fault-for + after)")
    ap.add_argument("--min-checked", type=int, default=0, help="rounds until this many reads were checked")
    ap.add_argument("--max-rounds", type=int, default=100)
    ap.add_argument("--readers", type=int, help="reader threads (default 8; open loop 16)")
    ap.add_argument("--writers", type=int, help="writer threads (default 2; open loop 8)")
    ap.add_argument("--rate", type=float, help="open loop: tierce-check --rate, operations per second "
                                               "(default: closed loop --no-pace; the extra variants 150)")
    ap.add_argument("--closed-loop", action="store_true", help="no --rate even for the extra variants")
    ap.add_argument("--write-ratio", type=float, help="tierce-check --write-ratio (default 0.1; open "
                                                      "loop 0.02)")
    ap.add_argument("--min-healthy-ratio", type=float,
                    help="fail when, from 2 x lease after a fault began until it ended, the hit ratio "
                         "of the pages homed at the healthy nodes is below this times its value "
                         "before the fault (issue 29: 0.9); default off")
    ap.add_argument("--sql-writers", type=int,
                    help="tierce-check --sql-writers: writers straight to MariaDB, whose pages "
                         "tierce-binlogd invalidates (default 0; 1 with the binlog variants)")
    ap.add_argument("--sql-stale-bound-ms", type=float,
                    help="tierce-check --sql-stale-bound-ms (default: 1 000, 1 500 with app-link relays "
                         "(a round may wait out the fence bound), fault + recovery + 1 s with the "
                         "binlog variants)")
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
    ap.add_argument("--arbiter", action="store_true",
                    help="tierce-cluster up --arbiter: the database drops lost app nodes (the "
                         "*_arbiter variants always run with it)")
    ap.add_argument("--list", action="store_true", help="list the variants and exit")
    a = ap.parse_args()
    if a.list:
        # The extra variants are marked "+" (soak.sh and "mixed" leave them out).
        for name, (letter, fault, heal, relay, may_fail, why) in VARIANTS.items():
            cmds = lambda cs: "; ".join(c if isinstance(c, str) else f"@+{c[0]}s {c[1]}" for c in cs)  # noqa: E731
            print(f"{'+' if name in EXTRA else letter:3} {name:18} {cmds(fault)} -> {cmds(heal) or '(not healed)'}  "
                  f"({'errors expected while down' if may_fail else 'no errors expected'}"
                  f"{', relays' if relay else ''}): {why}")
        return 0
    if not a.checker or not a.variant:
        ap.error("--checker and --variant are required")
    a.build = os.path.abspath(a.build)
    if a.variant == "mixed":
        a.names = list(ORDER)
    else:
        a.names = [n for n in a.variant.split(",") if n]
        unknown = [n for n in a.names if n not in VARIANTS]
        if unknown or not a.names:
            ap.error(f"--variant: unknown {', '.join(unknown) or '(none)'} (see --list)")
        if len(a.names) > 1:
            if any(n in EXTRA for n in a.names):
                ap.error("--variant: a list takes variants of the closed set only (no + variants of --list)")
            if a.cycles == 1:
                a.cycles = len(a.names)  # each once
    defaults = dict(EXTRA_DEFAULTS.get(a.names[0], CLOSED_LOOP) if len(a.names) == 1 else CLOSED_LOOP)
    if a.closed_loop:
        defaults["rate"] = None
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    for k in ("readers", "writers", "write_ratio"):  # closed loop unless given
        if getattr(a, k) is None:
            setattr(a, k, CLOSED_LOOP[k])
    if a.period is None:
        a.period = a.fault_for + a.after
    if a.cycles > 1 and a.period < a.fault_for + 3:
        ap.error("--period must leave 3 s of recovery after each heal")
    names = a.names
    if any(n in ARBITER_VARIANTS for n in names):
        a.arbiter = True
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

    binlog_faults = any(n in BINLOG for n in names)
    if a.sql_writers is None:
        a.sql_writers = 1 if binlog_faults else 0
    if a.sql_stale_bound_ms is None:
        a.sql_stale_bound_ms = ((a.fault_for + 4) * 1000 if binlog_faults
                                else 1500 if a.app_links == "relay" else 1000)

    why_skip, why_fail = prerequisites(a)
    if not why_skip and a.netns:
        from tiercelab import netns
        ok, why_not = netns.available()
        why_skip = None if ok else f"--netns: {why_not}"
    rc = tprereq.verdict(why_skip, why_fail, must_run_in_ci=True)
    if rc is not None:
        return rc

    tprereq.raise_on_sigterm()
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
            crc, res, samples = run_checker(a, r.argv(a, result), budget, proxy_urls(d))
            rows = build_timeline(r, samples, res)
            r.timeline = {"seconds": rows, "windows": window_summary(r, rows, res),
                          "healthy": healthy_checks(a, r, rows, lease_s(d), drop_after_s(d))}
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
        if a.sql_writers and rounds and not problems:
            # Every row change in the binlogs was invalidated (binlog_audit.py: MariaDB's own
            # decoder against the agent's audit file).
            import binlog_audit
            au = binlog_audit.audit(d)
            a.audit = {k: (len(v) if k == "missing" else v) for k, v in au.items()}
            say(f"binlog audit: {au['transactions']} transactions ({au['rows']} rows) in the binlogs: "
                f"{au['by_names']} invalidated by name, {au['by_invalidate_all']} by an invalidate-all, "
                f"{len(au['missing'])} missing")
            for g, names in au["missing"][:10]:
                say(f"  MISSING {g}: {' '.join(names) or '(no audit line)'}")
            if au["missing"]:
                problems.append(f"binlog audit: {len(au['missing'])} transaction(s) not invalidated")
    except (tprereq.Terminated, KeyboardInterrupt) as e:
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

    drops = drop_times(d) if a.arbiter else []
    for n in sorted({v for r, _, _ in rounds for v in r.variants}):
        for node, text in EXPECT_LOGGED.get(n, []):
            if not logged(d, node, text):
                problems.append(f"{n}: \"{text}\" is not in {node}'s logs: the fault did not go "
                                "the way it should")
    a.audit = getattr(a, "audit", None)
    summary = summarize(a, rounds, problems, time.monotonic() - t_start, drops)
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


def summarize(a, rounds, problems, elapsed, drops=()):
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
    names = sorted({v for r, _, _ in rounds for v in r.variants}, key=list(VARIANTS).index) or \
        a.names
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
    if a.arbiter and any(n in HEALTHY_FROM for n in names) and not drops:
        problems.append("the arbiter dropped no node (no COH0226 in app1's memd log)")
    timelines = [r.timeline for r, _, _ in rounds if r.timeline]
    if a.min_healthy_ratio is not None:
        for i, t in enumerate(timelines):
            for c in t["healthy"]:
                what = f"round {i + 1}: healthy homes {c['from_s']:g}-{c['to_s']:g} s"
                if c["relative"] is None:
                    problems.append(f"{what}: no ratio to compare (hits/lookups {c['healthy_hits']}/"
                                    f"{c['healthy_lookups']}, before {c['baseline_ratio']})")
                elif c["relative"] < a.min_healthy_ratio:
                    problems.append(f"{what}: hit ratio {c['healthy_ratio']:.3f} is {c['relative']:.2f} x "
                                    f"its {c['baseline_ratio']:.3f} before the fault "
                                    f"(< --min-healthy-ratio {a.min_healthy_ratio:g})")
    s = {"variant": a.variant, "letters": [VARIANTS[n][0] for n in names], "transport": a.transport,
         "app_links": a.app_links, "rounds": len(rounds), "cycles_per_round": a.cycles,
         "max_error_ratio": a.max_error_ratio, "elapsed_s": round(elapsed, 1), **tot,
         "error_ratio": (tot["errors"] / tot["ops"]) if tot["ops"] else None,
         "counted_errors": c_errors, "counted_ops": c_ops, "counted_error_ratio": c_ratio,
         "expected_write_refusals": refused, "windows": win,
         "load": {"rate": a.rate, "write_ratio": a.write_ratio, "readers": a.readers, "writers": a.writers,
                  "late": sum((res or {}).get("rate", {}).get("late", 0) for _, _, res in rounds),
                  "max_lag_ms": max([(res or {}).get("rate", {}).get("max_lag_ms", 0) for _, _, res in rounds]
                                    or [0])},
         "fault_at": a.fault_at, "fault_for": a.fault_for, "after": a.after,
         "min_healthy_ratio": a.min_healthy_ratio, "timeline": timelines, "problems": problems,
         "binlog_audit": a.audit,
         "arbiter": a.arbiter, "drops": [{"after_first_failed_renewal_s": t, "log": line} for t, line in drops]}
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
    sqls = [res["sql"] for _, _, res in rounds if res and res.get("sql") and res["sql"].get("writers")]
    if sqls:
        sw = [x["stale_window_ms"] for x in sqls]
        s["sql"] = {"writes_ok": sum(x["writes_ok"] for x in sqls),
                    "checked_reads": sum(x["checked_reads"] for x in sqls),
                    "stale_reads": sum(x["stale_reads"] for x in sqls),
                    "stale_bound_ms": a.sql_stale_bound_ms,
                    "stale_window_ms": {"max": max(w["max"] for w in sw),
                                        "p99": max(w["p99"] for w in sw),
                                        "nonzero": sum(w["nonzero"] for w in sw)}}
        q = s["sql"]
        print(f"  SQL writes (straight to MariaDB, invalidated by tierce-binlogd): {q['writes_ok']} ok, "
              f"{q['checked_reads']} reads checked against the {a.sql_stale_bound_ms:g} ms bound, "
              f"SQL STALE {q['stale_reads']}; stale window p99 {q['stale_window_ms']['p99']:.0f} ms, max "
              f"{q['stale_window_ms']['max']:.0f} ms ({q['stale_window_ms']['nonzero']} non-zero)")
        if q["stale_reads"] and not any("SQL" in p for p in problems):
            problems.append(f"{q['stale_reads']} SQL stale read(s) (older than an SQL write committed "
                            f"more than {a.sql_stale_bound_ms:g} ms before)")
            s["pass"] = False
    for t, line in drops:
        print(f"  arbiter: app1 dropped a node {'?' if t is None else f'{t:.2f}'} s after its first failed "
              f"renewal: {line[:160]}")

    for name in ("before", "warm", "fault", "recovery", "after"):
        x = win.get(name)
        if x:
            lat = x["write_latency_ms"]
            print(f"  {name:9} checked reads {x['checked_reads']:>7}  stale {x['stale_reads']:>4}  writes ok "
                  f"{x['writes_ok']:>5} of {x['writes']:>5}  update latency p50 {lat['p50']:8.1f} ms  "
                  f"p99 {lat['p99']:8.1f} ms  max {lat['max']:8.1f} ms  errors {x['errors']}")
    ld = s["load"]
    print(f"  load: {'open loop ' + format(ld['rate'], 'g') + ' ops/s' if ld['rate'] else 'closed loop (--no-pace)'}, "
          f"write ratio {ld['write_ratio']:g}, {ld['readers']} readers, {ld['writers']} writers"
          + (f"; {ld['late']} operations started > 50 ms late (max lag {ld['max_lag_ms']:.0f} ms)" if ld["rate"] else ""))
    for i, t in enumerate(timelines[:3]):
        if len(timelines) > 1:
            print(f"  round {i + 1}:")
        print_timeline(t["seconds"], t["windows"], t["healthy"])
    for p in problems:
        print(f"  FAILED: {p}")
    return s


if __name__ == "__main__":
    sys.exit(main())
