#!/usr/bin/env python3
"""tests/dlm/nemesis.py — the lock manager under a random, seeded nemesis, checked like Jepsen
(issue 33, deliver 4).

Three real tierce-lockd processes (n1..n3; over tcp every directed link goes through its own
tierce-wanem relay, as in fence.py), one lock homed on each node, and on every node one client
per lock (fence_holder.cc) that loops: lock (exclusive, timeout --timeout-ms), write to the lock's
token-checking store, hold a moment, write again, unlock. Each lock has its own store (fence.py's
Store: a write is accepted when its token is >= the highest accepted so far).

The nemesis draws, from a random.Random(--seed), one fault at a time for --duration seconds:

  delay      one directed link gets 1/8..1/2 lease of one-way delay            (tcp)
  cut        one direction of one directed link is cut (a silent network)     (tcp)
  partition  one node cut off from the others, both directions                (tcp)
  partition-oneway  one node's links cut in one direction only: what it sends
             is held (or what is sent to it), on all its links                 (tcp)
  reset      every connection of one node's links reset (RST both ways)       (tcp; instant)
  kill-lockd a lockd SIGKILLed, restarted (same state directory) when healed
  stop-lockd a lockd SIGSTOPped, SIGCONTed when healed
  kill-client / stop-client: the same for one client process (a killed one is restarted)

Each fault lasts 0.3..2.5 leases, then 0.2..1 lease of calm. After the last fault everything is
healed and the clients go on for --settle seconds (at least 4 leases); then they stop.

The checker reads every client's history (request sent, grant with token and the client's
CLOCK_MONOTONIC time, writes and what the store answered, unlock sent, revocations the client
heard, failures with their status, the client's death) and every store's log, and reports:

  overlap    two exclusive holds of one lock valid at once. A hold is valid from its grant until
             its unlock is sent, its revocation is heard, or its client or its client's lockd
             dies. An overlap is EXPLAINED when the older holder's lockd was frozen or killed
             during it (it could not revoke): then only the fencing token protects the resource
             (docs/dlm.md "Faults, exactly"), and it must have (next). Any other overlap — a
             cut or partition included: a running lockd revokes before the home gives the hold
             away — is a violation.
  stale      a store accepted a write whose token is below one it accepted before: a violation.
  wedged     a request sent after the faults stopped (or pending then) with no answer within
             its timeout + --wedge-bound: a violation.
  recovery   per fault, from its heal to the first grant of every lock afterwards: p50/p99/max.
             A lock not granted again within 2 x lease is listed (the issue's target), not failed.
             Every --probe-every-th fault (5) is followed by 3 leases of calm instead: its
             recovery is not cut short by the next fault, and is reported by kind of fault.

Prints the faults, then a table; exit 0 when there is no violation, 1 otherwise; the directory is
kept on failure (histories in history.txt, the lockds' logs). Everything started is stopped.

  nemesis.py --lockd L --holder H --cli C --wanem W --algorithm ncosed --transport tcp \\
             --seed 1 --duration 60
"""
import argparse
import bisect
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dlmtest import home_of  # noqa: E402
import fence  # noqa: E402
from fence import Fail, Run, Store  # noqa: E402

KINDS_TCP = ["delay", "cut", "partition", "reset", "kill-lockd", "stop-lockd", "kill-client",
             "stop-client", "partition-oneway"]
KINDS_ANY = ["kill-lockd", "stop-lockd", "kill-client", "stop-client"]


def now():
    return time.monotonic()


def signal_proc(p, sig, group=False):
    """Sends `sig` to p (its process group with `group`); a process that is already gone (a
    client that ended on its own, a lockd being restarted) is not an error of the test."""
    try:
        if group:
            os.killpg(p.pid, sig)
        else:
            os.kill(p.pid, sig)
    except ProcessLookupError:
        pass


class Holder:
    """One fence_holder process for one lock on one node, restarted when killed."""

    def __init__(self, run, node, lock, store, who):
        self.run, self.node, self.lock, self.store, self.who = run, node, lock, store, who
        self.p = None
        self.answers = None
        self.events = []  # (seconds, why) revocations heard
        self.hold = None  # the hold being used (Nemesis.client_loop)
        self.start()

    def start(self):
        # Every descriptor of the previous process is closed: a restart used to leak its stdin
        # pipe, its stdout pipe and its .err file, and a long run (about 900 client kills, some
        # 5000 s) ran out of descriptors (EMFILE) and lost its clients.
        if self.p is not None and self.p.stdin is not None:
            try:
                self.p.stdin.close()
            except OSError:
                pass
        with open(os.path.join(self.run.dir, self.who + ".err"), "a") as err:
            self.p = subprocess.Popen([self.run.a.holder, self.run.sock(self.node), self.lock,
                                       str(self.store.port), self.who],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                      text=True, bufsize=1, start_new_session=True)
        self.run.procs.append(self.p)
        self.answers = queue.Queue()
        threading.Thread(target=self._read, args=(self.p, self.answers), daemon=True).start()

    def _read(self, p, answers):
        for line in p.stdout:
            line = line.rstrip("\n")
            if line.startswith("EVENT "):
                parts = line.split(" ", 4)  # EVENT REVOKED hold ms why
                self.events.append((int(parts[3]) / 1000.0, parts[4] if len(parts) > 4 else ""))
            else:
                answers.put(line)
        p.stdout.close()
        answers.put(None)

    def ask(self, cmd, timeout):
        """The answer line; None when the process died or did not answer within timeout."""
        try:
            self.p.stdin.write(cmd + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return None
        try:
            return self.answers.get(timeout=timeout)
        except queue.Empty:
            return "NOANSWER"


class Nemesis:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.lease = a.lease_ms / 1000.0
        self.stores = {}
        self.run = None
        self.faults = []     # dicts: kind, target, start, end (heal time)
        self.history = []    # (time, who, event, detail) — every client's, in order
        self.hmu = threading.Lock()
        self.holds = []      # dicts: lock, who, node, token, grant, end, end_why
        self.wedged = []
        self.stop_clients = threading.Event()
        self.faults_over = None  # time of the last heal
        self.client_down = {}  # who -> (since) while stopped or killed by the nemesis
        self.lockd_down = {}   # node -> since (killed or stopped)
        self.dead_lockd_times = {}  # node -> [kill times]
        self.client_kill_times = {}  # who -> [kill times] (a grant read after the kill is void)
        self._sorted_events = {}  # who -> (times, events): hold_end's index

    def log(self, *msg):
        self.run.log(*msg)

    def record(self, who, event, detail=""):
        with self.hmu:
            self.history.append((now(), who, event, detail))

    # ---- setup ----

    def start(self):
        a = self.a
        self.run = Run(a, None, "nemesis-%s-%s-s%d" % (a.algorithm, a.transport, a.seed))
        self.locks = {}
        for n in self.run.nodes:
            self.locks[n] = next("nem-%d" % i for i in range(10000)
                                 if home_of("nem-%d" % i, self.run.nodes) == n)
        for n, lock in self.locks.items():
            self.stores[lock] = Store(check=True)
            self.run.store = self.stores[lock]  # Run.topology does not use it
        self.run.start(relays=(a.transport == "tcp"))
        self.log("3 lockds up (%s over %s); locks %s" % (
            a.algorithm, a.transport, ", ".join("%s@%s" % (l, n) for n, l in self.locks.items())))
        self.holders = []
        for lock in self.locks.values():
            for n in self.run.nodes:
                self.holders.append(Holder(self.run, n, lock, self.stores[lock],
                                           "%s-%s" % (lock, n)))

    # ---- the clients' loop ----

    def client_loop(self, h):
        rnd = random.Random("%d-%s" % (self.a.seed, h.who))
        T = self.a.timeout_ms
        while not self.stop_clients.is_set():
            if h.p.poll() is not None:  # killed by the nemesis: restarted once its node's lockd is up
                self.record(h.who, "died", str(h.p.returncode))
                self.close_hold(h, now(), "client died")
                # Killed by the nemesis: back when healed; its lockd down: back when it is up
                # (a client cannot start without its lockd); else a short pause.
                time.sleep(0.05)
                while (h.who in self.client_down or h.node in self.lockd_down) and \
                        not self.stop_clients.is_set():
                    time.sleep(0.02)
                if self.stop_clients.is_set():
                    return
                h.start()
                continue
            sent = now()
            self.record(h.who, "request")
            line = self.wait_answer(h, "lock excl %d" % T, sent, T)
            if line is None:  # the process ended (killed): reaped before the loop restarts it
                try:
                    h.p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    signal_proc(h.p, signal.SIGKILL, group=True)
                    h.p.wait()
                continue
            if line.startswith("GRANTED"):
                _, token, _, at = fence.parse_lock(line)
                self.record(h.who, "grant", "%d" % token)
                hold = {"lock": h.lock, "who": h.who, "node": h.node, "token": token,
                        "grant": at, "end": None, "end_why": None}
                with self.hmu:
                    self.holds.append(hold)
                h.hold = hold
                for tag in ("a", "b"):
                    ans = h.ask("write %s" % tag, 60)
                    self.record(h.who, "write", "%s %s" % (tag, ans))
                    time.sleep(rnd.uniform(0, 0.03))
                self.close_hold(h, now(), "unlock sent")
                ans = h.ask("unlock", 60)
                self.record(h.who, "unlock", str(ans))
            elif line.startswith("FAILED"):
                st = line.split(" ", 3)
                self.record(h.who, "failed", " ".join(st[1:3]) + " " + (st[3] if len(st) > 3 else "")[:160])
                if "lockd closed the connection" in line:
                    # Its lockd was killed: this client's connection is gone for good (a client
                    # does not reconnect by itself). A new client once the lockd is back.
                    signal_proc(h.p, signal.SIGKILL, group=True)
                    h.p.wait()
                    continue
                time.sleep(rnd.uniform(0, 0.05))
            elif line.startswith("FATAL"):
                self.record(h.who, "fatal", line)
                h.p.wait()
            time.sleep(rnd.uniform(0, 0.02))

    def wait_answer(self, h, cmd, sent, T):
        """The lock answer; a request sent or pending after the faults stopped must be answered
        within T + wedge bound (else a wedge is recorded and the client restarted)."""
        try:
            h.p.stdin.write(cmd + "\n")
            h.p.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return None
        bound = T / 1000.0 + self.a.wedge_bound
        while True:
            try:
                line = h.answers.get(timeout=0.2)
            except queue.Empty:
                # The process died (its stdout's end, the queue's None, may have been taken by
                # the previous command's ask() while it was still exiting: poll() said alive,
                # and this loop used to wait for an answer that never comes — SRSL seed 53's
                # "wedge", a client killed between its unlock and its next request).
                if h.p.poll() is not None:
                    return None
                calm = self.faults_over
                if calm is not None and now() > max(sent, calm) + bound and h.who not in self.client_down:
                    self.wedged.append("%s: a lock request sent at +%.2f s (%s) had no answer %.1f s "
                                       "after the faults stopped (timeout %d ms)"
                                       % (h.who, sent - self.run.t0,
                                          "after the faults" if sent >= calm else "pending then",
                                          now() - max(sent, calm), T))
                    self.record(h.who, "wedged")
                    signal_proc(h.p, signal.SIGKILL, group=True)
                    h.p.wait()
                    return None
                if self.stop_clients.is_set() and calm is None:
                    return None
                continue
            if line is None:
                return None
            return line

    def close_hold(self, h, t, why):
        hold = getattr(h, "hold", None)
        if hold is not None and hold["end"] is None:
            hold["end"], hold["end_why"] = t, why
        h.hold = None

    # ---- the nemesis ----

    def links_of(self, node):
        return [(x, y) for (x, y) in self.run.relays if node in (x, y)]

    def inject(self, kind):
        run, rng = self.run, self.rng
        nodes = run.nodes
        if kind == "delay":
            x, y = rng.choice(list(run.relays))
            us = int(rng.uniform(self.lease / 8, self.lease / 2) * 1e6)
            run.relay_cmd(x, y, "delay %d" % us)
            return "%s->%s %d ms" % (x, y, us // 1000), lambda: run.relay_cmd(x, y, "delay 0"), [], [(x, y)]
        if kind == "cut":
            x, y = rng.choice(list(run.relays))
            d = rng.choice(["to-target", "to-client"])
            run.relay_cmd(x, y, "cut " + d)
            return "%s->%s %s" % (x, y, d), lambda: run.relay_cmd(x, y, "heal"), [], [(x, y)]
        if kind == "partition":
            n = rng.choice(nodes)
            links = self.links_of(n)
            for x, y in links:
                run.relay_cmd(x, y, "cut both")
            return n, lambda: [run.relay_cmd(x, y, "heal") for x, y in links], [], links
        if kind == "partition-oneway":
            # The node hears nothing, or nothing of it is heard: its outgoing links' requests and
            # the others' answers to it, or the others' requests to it and its answers.
            n = rng.choice(nodes)
            deaf = rng.random() < 0.5
            links = self.links_of(n)
            for x, y in links:
                # On x->y, "to-target" carries what x sends, "to-client" what y answers.
                d = ("to-client" if x == n else "to-target") if deaf else \
                    ("to-target" if x == n else "to-client")
                run.relay_cmd(x, y, "cut " + d)
            return "%s %s" % (n, "deaf" if deaf else "mute"), \
                lambda: [run.relay_cmd(x, y, "heal") for x, y in links], [], links
        if kind == "reset":
            n = rng.choice(nodes)
            for x, y in self.links_of(n):
                run.relay_cmd(x, y, "reset")
            return n, lambda: None, [], []
        if kind in ("kill-lockd", "stop-lockd"):
            n = rng.choice(nodes)
            p = run.lockd[n]
            self.lockd_down[n] = now()
            if kind == "kill-lockd":
                signal_proc(p, signal.SIGKILL)
                p.wait()
                self.dead_lockd_times.setdefault(n, []).append(now())

                def heal():
                    run.start_lockd(n)
                    self.lockd_down.pop(n, None)
            else:
                run.freeze([p], "lockd " + n)

                def heal():
                    run.thaw([p])
                    self.lockd_down.pop(n, None)
            return n, heal, [n], []
        h = rng.choice(self.holders)
        self.client_down[h.who] = now()
        if kind == "kill-client":
            # Taken before kill(): the process dies after this time (it may still stamp a grant
            # until the signal lands; see hold_end).
            self.client_kill_times.setdefault(h.who, []).append(now())
            self.close_hold(h, now(), "client killed")
            signal_proc(h.p, signal.SIGKILL, group=True)
            return h.who, lambda: self.client_down.pop(h.who, None), [], []
        p = h.p  # the process frozen now (a restart meanwhile makes another)
        signal_proc(p, signal.SIGSTOP)

        def heal_client():
            signal_proc(p, signal.SIGCONT)
            self.client_down.pop(h.who, None)
        return h.who, heal_client, [], []

    def nemesis_loop(self):
        kinds = KINDS_TCP if self.a.transport == "tcp" else KINDS_ANY
        end = now() + self.a.duration
        probe = False
        while now() < end:
            calm = self.rng.uniform(0.2, 1.0) * self.lease
            # After a probe, the calm the recovery needs (3 leases): its recovery time is not cut
            # short by the next fault (the target is for recovery after the last fault).
            time.sleep(max(calm, 3 * self.lease) if probe else calm)
            kind = self.rng.choice(kinds)
            start = now()
            target, heal, nodes_hit, links_hit = self.inject(kind)
            hold_for = 0 if kind == "reset" else self.rng.uniform(0.3, 2.5) * self.lease
            time.sleep(hold_for)
            heal()
            probe = self.a.probe_every > 0 and len(self.faults) % self.a.probe_every == \
                self.a.probe_every - 1
            f = {"kind": kind, "target": target, "start": start, "end": now(),
                 "nodes": nodes_hit, "links": links_hit, "probe": probe}
            self.faults.append(f)
            self.log("fault %-11s %-22s %5.2f s" % (kind, target, f["end"] - start))
        self.faults_over = now()

    # ---- the checker ----

    def hold_end(self, h):
        """The end of a hold's validity: unlock sent, revocation heard, client or lockd death."""
        end, why = h["end"] if h["end"] is not None else float("inf"), h["end_why"]
        holder = next(x for x in self.holders if x.who == h["who"])
        # The first revocation heard at or after the grant (events sorted once per holder: a
        # scan of all of them per hold took the checker ~20 min on a 2 h run).
        ev = self._sorted_events.get(holder.who)
        if ev is None or len(ev[0]) != len(holder.events):
            srt = sorted(holder.events)
            ev = self._sorted_events[holder.who] = ([t for t, _ in srt], srt)
        i = bisect.bisect_left(ev[0], h["grant"])
        if i < len(ev[0]) and ev[0][i] < end:
            end, why = ev[0][i], "revoked (%s)" % ev[1][i][1]
        for t in self.dead_lockd_times.get(h["node"], []):
            if h["grant"] <= t < end:
                end, why = t, "its lockd killed"
        # The client killed right after its grant: the driver may read the grant after the kill
        # (and record the hold then); the hold ended with the process all the same.
        # The kill time is taken just before kill() (inject): the client may stamp a grant a few
        # ms after it, until the signal lands, and dies at once then — its lockd releases the
        # hold only when its connection closes, after the death. So a hold granted up to 50 ms
        # after a kill (a restarted process takes longer: the heal comes 0.3 lease later at
        # least) ends at its grant (found: N-CoSED shm seed 44, a grant stamped 1 ms after).
        for t in self.client_kill_times.get(h["who"], []):
            if h["grant"] - 0.05 <= t < end:
                end, why = max(t, h["grant"]), "its client killed"
        return end, why

    def explained(self, older, newer_grant, older_why=""):
        """A fault that left the older holder's lockd unable to revoke in time: frozen or killed
        during the overlap. A cut or partition does not explain one: a running lockd cut off from
        the home revokes after lease - guard, before the home gives the hold away after a lease
        (docs/dlm.md "Faults, exactly"). Nor does a frozen client alone (a hold has no client
        lease) — unless its hold was revoked while it was frozen: lockd keeps such a hold at the
        home until the client acknowledges, a lease at most, and then only the token protects."""
        for f in self.faults:
            if f["end"] < older["grant"] or f["start"] > newer_grant:
                continue
            if older["node"] in f["nodes"]:
                return f
            if f["kind"] == "stop-client" and f["target"] == older["who"] and \
                    older_why.startswith("revoked"):
                return f
        return None

    def check(self):
        violations, explained = [], []
        for lock in self.locks.values():
            holds = sorted((h for h in self.holds if h["lock"] == lock), key=lambda h: h["grant"])
            for i, a in enumerate(holds):
                a_end, a_why = self.hold_end(a)
                for b in holds[i + 1:]:
                    # Grant times are whole milliseconds of the client's clock, floored. Sorted
                    # by grant: once one starts after a's end, every later one does.
                    if b["grant"] + 0.001 >= a_end:
                        break
                    f = self.explained(a, b["grant"], a_why)
                    text = ("%s: %s's hold (token %d, granted +%.3f s, valid until +%.3f s: %s) and "
                            "%s's (token %d, granted +%.3f s) overlap"
                            % (lock, a["who"], a["token"], a["grant"] - self.run.t0,
                               a_end - self.run.t0, a_why, b["who"], b["token"],
                               b["grant"] - self.run.t0))
                    if f:
                        explained.append(text + " — explained by %s %s" % (f["kind"], f["target"]))
                    else:
                        violations.append("OVERLAP " + text)
                    if b["token"] <= a["token"]:
                        violations.append("TOKEN %s: %s's token %d after %s's %d"
                                          % (lock, b["who"], b["token"], a["who"], a["token"]))
        for lock, store in self.stores.items():
            for s in store.stale_accepted():
                violations.append("STALE %s: %s" % (lock, s))
        violations += ["WEDGED " + w for w in self.wedged]
        return violations, explained

    def recovery(self):
        """Per fault: from its heal to the first grant of every lock after it."""
        by_lock = {lock: sorted(h["grant"] for h in self.holds if h["lock"] == lock)
                   for lock in self.locks.values()}
        out = []
        for f in self.faults:
            worst = 0.0
            for g in by_lock.values():
                i = bisect.bisect_left(g, f["end"])
                worst = max(worst, (g[i] - f["end"]) if i < len(g) else float("inf"))
            out.append((f, worst))
        return out

    def stalls(self):
        """Gaps between two grants of a lock longer than 2 leases + 0.5 s that no fault (nor the
        2 leases after its heal) explains: the clients ask all the time, so such a gap is a lock
        that nobody could get while nothing was wrong (informational: a liveness lead)."""
        out = []
        margin = 2 * self.lease
        windows = [(f["start"], f["end"] + margin) for f in self.faults]
        for lock in self.locks.values():
            g = sorted(h["grant"] for h in self.holds if h["lock"] == lock)
            for a, b in zip(g, g[1:]):
                if b - a <= margin + 0.5:
                    continue
                if any(s0 < b and a < e0 for s0, e0 in windows):
                    continue
                out.append((b - a, lock, a - self.run.t0))
        return sorted(out, reverse=True)

    def write_history(self):
        with open(os.path.join(self.run.dir, "history.txt"), "w") as out:
            for t, who, ev, detail in sorted(self.history):
                out.write("%9.3f %-16s %-8s %s\n" % (t - self.run.t0, who, ev, detail))
            for f in self.faults:
                out.write("fault %s %s +%.3f..+%.3f%s\n" % (f["kind"], f["target"],
                                                            f["start"] - self.run.t0,
                                                            f["end"] - self.run.t0,
                                                            " probe" if f.get("probe") else ""))


def selftest():
    """The checker on made-up histories: it must flag an unexplained overlap, a token going back,
    a stale write accepted and a wedge, and excuse an overlap under a fault on the older holder's
    lockd. Exit 0 when it does (proves the run's checks can fail)."""
    class A:
        seed, lease_ms, transport = 1, 800, "tcp"

    class R:
        t0 = 0.0
        nodes = ["n1", "n2", "n3"]
    nem = Nemesis(A())
    nem.run = R()
    nem.locks = {"n1": "L1", "n2": "L2", "n3": "L3", "n4": "L4"}

    class H:
        def __init__(self, who):
            self.who, self.events = who, []
    nem.holders = [H("L1-n2"), H("L1-n3"), H("L2-n1"), H("L2-n3"), H("L3-n1"), H("L3-n2"),
                   H("L4-n1"), H("L4-n2")]
    nem.stores = {"L1": Store(check=False), "L2": Store(check=True)}
    mk = lambda lock, who, node, token, grant, end: {  # noqa: E731
        "lock": lock, "who": who, "node": node, "token": token, "grant": grant, "end": end,
        "end_why": "unlock sent"}
    # L1: n2 holds 10..12, n3 granted at 11 with a LOWER token: overlap + token; no fault.
    nem.holds = [mk("L1", "L1-n2", "n2", 100, 10.0, 12.0), mk("L1", "L1-n3", "n3", 90, 11.0, 13.0)]
    # L2: n1 holds 20..25 while its lockd is frozen 20.5..24; n3 granted at 22: explained.
    nem.holds += [mk("L2", "L2-n1", "n1", 200, 20.0, 25.0), mk("L2", "L2-n3", "n3", 300, 22.0, 23.0)]
    nem.faults = [{"kind": "stop-lockd", "target": "n1", "start": 20.5, "end": 24.0,
                   "nodes": ["n1"], "links": []}]
    # L3: L3-n1 killed at 30.000 (just before kill()), its grant stamped 30.001 (it ran until
    # the signal landed), the driver closing it at 30.070; L3-n2 granted at 30.005: no overlap.
    # L3-n1 again granted at 40.0 (a kill 10 s before does not end it) while L3-n2 holds from
    # 40.5: one overlap.
    nem.client_kill_times = {"L3-n1": [30.0]}
    nem.holds += [mk("L3", "L3-n1", "n1", 400, 30.001, 30.070), mk("L3", "L3-n2", "n2", 401, 30.005, 30.1),
                  mk("L3", "L3-n1", "n1", 402, 40.0, 41.0), mk("L3", "L3-n2", "n2", 403, 40.5, 42.0)]
    # L4: L4-n1's hold revoked while its client was frozen (50.5..52; the revocation read at
    # 51.0), L4-n2 granted at 50.8: explained (lockd waits a lease for the acknowledgement,
    # then only the token protects). L4-n1 frozen 60.2..60.9 again, holding (no revocation),
    # L4-n2 granted at 60.5: a violation (a frozen client keeps its hold).
    nem.holders[6].events = [(51.0, "the home of lock L4 is gone")]
    nem.holds += [mk("L4", "L4-n1", "n1", 500, 50.0, 53.0), mk("L4", "L4-n2", "n2", 600, 50.8, 54.0),
                  mk("L4", "L4-n1", "n1", 700, 60.0, 61.0), mk("L4", "L4-n2", "n2", 800, 60.5, 62.0)]
    nem.faults += [{"kind": "stop-client", "target": "L4-n1", "start": 50.5, "end": 52.0,
                    "nodes": [], "links": []},
                   {"kind": "stop-client", "target": "L4-n1", "start": 60.2, "end": 60.9,
                    "nodes": [], "links": []}]
    nem.stores["L1"].write("x", 100, "a")
    nem.stores["L1"].write("y", 90, "b")  # accepted (no check): stale
    nem.wedged = ["L2-n3: made up"]
    v, e = nem.check()
    for s in nem.stores.values():
        s.close()
    want = {"OVERLAP": 3, "TOKEN": 1, "STALE": 1, "WEDGED": 1}
    got = {k: sum(1 for x in v if x.startswith(k + " ")) for k in want}
    ok = got == want and len(e) == 2 and "stop-lockd n1" in e[0] and "stop-client L4-n1" in e[1]
    print("%s: checker selftest: violations %s (want %s), explained %d (want 2)"
          % ("PASS" if ok else "FAIL", got, want, len(e)))
    for x in v + e:
        print("  " + x)
    return 0 if ok else 1


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selftest", action="store_true",
                    help="only the checker, on made-up histories (no process started)")
    ap.add_argument("--lockd")
    ap.add_argument("--holder", help="fence_holder")
    ap.add_argument("--cli", help="tierce-lock (for --status)")
    ap.add_argument("--wanem", help="tierce-wanem (tcp links)")
    ap.add_argument("--transport", default="tcp", choices=["tcp", "shm"])
    ap.add_argument("--algorithm", default="ncosed", choices=["ncosed", "dqnl", "srsl"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=60, help="seconds of faults")
    ap.add_argument("--settle", type=float, default=0, help="seconds of calm after (>= 4 leases)")
    ap.add_argument("--lease-ms", type=int, default=800)
    ap.add_argument("--timeout-ms", type=int, default=3000, help="each lock request's timeout")
    ap.add_argument("--wedge-bound", type=float, default=0,
                    help="seconds past a request's timeout before it counts as wedged "
                         "(default 2 leases + 2 s)")
    ap.add_argument("--probe-every", type=int, default=5,
                    help="every Nth fault is followed by 3 leases of calm, and its recovery "
                         "time reported by kind (0: none)")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    for need in ("lockd", "holder", "cli", "wanem"):
        if not getattr(a, need):
            ap.error("--%s is required" % need)
    a.settle = max(a.settle, 4 * a.lease_ms / 1000.0)
    if not a.wedge_bound:
        a.wedge_bound = 2 * a.lease_ms / 1000.0 + 2
    # fence.Run reads these
    a.break_store = False
    nem = Nemesis(a)
    problems = []
    violations, explained = [], []
    try:
        nem.start()
        threads = [threading.Thread(target=nem.client_loop, args=(h,), daemon=True)
                   for h in nem.holders]
        for t in threads:
            t.start()
        nem.nemesis_loop()
        nem.log("faults over (%d injected); %.1f s of calm" % (len(nem.faults), a.settle))
        time.sleep(a.settle)
        nem.stop_clients.set()
        deadline = now() + a.timeout_ms / 1000.0 + a.wedge_bound + 5
        for t in threads:
            t.join(timeout=max(0.1, deadline - now()))
        if any(t.is_alive() for t in threads):
            problems.append("a client loop did not end")
        violations, explained = nem.check()
    except Fail as e:
        problems.append(str(e))
    except Exception as e:  # noqa: BLE001 — anything is a failure; still clean up
        problems.append("unexpected %s: %s" % (type(e).__name__, e))
    finally:
        if nem.run:
            try:
                for n, p in nem.run.lockd.items():
                    if p.poll() is None:
                        signal_proc(p, signal.SIGCONT)
                nem.run.stop_lockds(problems)
            except Exception as e:  # noqa: BLE001
                problems.append("stopping the lockds: %s" % e)
            nem.run.cleanup()
        for s in nem.stores.values():
            s.close()
    if nem.run is None:
        print("FAIL: " + "; ".join(problems))
        return 1
    nem.write_history()
    rec = nem.recovery()
    finite = [w for _, w in rec if w != float("inf")]
    slow = [(f, w) for f, w in rec if w > 2 * a.lease_ms / 1000.0]
    grants = len(nem.holds)
    fails = sum(1 for _, _, ev, _ in nem.history if ev == "failed")
    writes = sum(len(s.log) for s in nem.stores.values())
    refused = sum(1 for s in nem.stores.values() for e in s.log if e[4] != "ACCEPTED")
    print()
    print("nemesis %s over %s, seed %d: %d faults in %.0f s" % (a.algorithm, a.transport, a.seed,
                                                                 len(nem.faults), a.duration))
    kinds = {}
    for f in nem.faults:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    print("  faults: " + ", ".join("%s x%d" % kv for kv in sorted(kinds.items())))
    print("  grants %d, failed requests %d, store writes %d (refused %d)" % (grants, fails, writes,
                                                                            refused))
    why = {}
    for _, _, ev, detail in nem.history:
        if ev == "failed":
            st = detail.split()[0] if detail else "?"
            why[st] = why.get(st, 0) + 1
    if why:
        print("  failures: " + ", ".join("%s x%d" % kv for kv in sorted(why.items())))
    print("  overlaps explained by a fault on the older holder's lockd or link: %d" % len(explained))
    for e in explained[:10]:
        print("    " + e)
    if finite:
        print("  recovery after a fault (every lock granted again): p50 %.3f s, p99 %.3f s, "
              "max %.3f s; over 2 x lease: %d" % (pct(finite, 50), pct(finite, 99), max(finite),
                                                  len(slow)))
    for f, w in slow[:10]:
        print("    %s %s: %s" % (f["kind"], f["target"],
                                 "never" if w == float("inf") else "%.3f s" % w))
    # Per kind of fault, probes only: faults followed by 3 leases of calm, so that the next
    # fault does not cut the recovery short (docs/dlm.md "Faults, exactly" quotes these).
    per_kind = {}
    for f, w in rec:
        if f.get("probe"):
            per_kind.setdefault(f["kind"], []).append(w)
    probes = [w for ws in per_kind.values() for w in ws]
    if probes:
        fin = [w for w in probes if w != float("inf")]
        print("  recovery after an isolated fault (every %dth fault, 3 leases of calm after it): "
              "%d probes, p50 %.3f s, p99 %.3f s, max %.3f s; over 2 x lease: %d"
              % (a.probe_every, len(probes), pct(fin, 50), pct(fin, 99), max(fin) if fin else 0,
                 sum(1 for w in probes if w > 2 * a.lease_ms / 1000.0)))
        print("  recovery by fault (s): %-16s %5s %7s %7s %7s" % ("kind", "n", "p50", "p99", "max"))
        for kind, ws in sorted(per_kind.items()):
            fin = [w for w in ws if w != float("inf")]
            never = len(ws) - len(fin)
            print("                         %-16s %5d %7s %7s %7s%s" % (
                kind, len(ws), "%.3f" % pct(fin, 50) if fin else "-",
                "%.3f" % pct(fin, 99) if fin else "-", "%.3f" % max(fin) if fin else "-",
                " (never: %d)" % never if never else ""))
    st = nem.stalls()
    print("  stalls (a lock granted to nobody for > 2 leases + 0.5 s, no fault near): %d" % len(st))
    for gap, lock, at in st[:10]:
        print("    %s: %.2f s from +%.2f s" % (lock, gap, at))
    all_problems = problems + violations
    for p in all_problems:
        print("FAIL: " + p)
    if all_problems or a.keep:
        print("logs and history.txt in " + nem.run.dir)
    else:
        shutil.rmtree(nem.run.dir, ignore_errors=True)
    print("%s: %d violation(s), %d wedged" % ("FAIL" if all_problems else "PASS", len(violations),
                                             len(nem.wedged)))
    return 1 if all_problems else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
