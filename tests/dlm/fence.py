#!/usr/bin/env python3
"""tests/dlm/fence.py — fencing tokens proven end to end (issue 14, item 2).

The resource: a token-checking store, a small TCP server of this driver on 127.0.0.1 (ephemeral
port). A write `WRITE <lock> <token> <who> <tag>` is accepted when its token is at least the
highest token the store has accepted (a holder may write several times under one grant), refused
otherwise ("REFUSED <highest>"), as in Kleppmann's critique of Redlock. Every write is recorded.
--break-store turns the check off (every write accepted): the selftest proves the test can fail.

Three real tierce-lockd processes (n1, n2, n3; a private directory, free ports) and two lock
clients (fence_holder.cc): the old holder H on n1 and the other client O on n2. The lock's name
is chosen so that its home is n3 (rendezvous hashing, cluster/hash.h; checked with n3's status).
Every scenario starts its own cluster; H takes the lock exclusively (token t1) and writes once
(must be accepted), then H is made unable to hold the lock:

  lockd_frozen   (1a) n1's lockd SIGSTOPped for 2 x lease while O asks for the lock. Expected:
                 n3 declares n1 dead after the lease, recovers the lock and grants it to O with
                 a higher token t2; O writes (accepted) and unlocks; n1's lockd is continued and
                 H writes again with t1: the store must REFUSE it.
  node_frozen    (1b) the same, H and n1's lockd frozen together (a paused VM): H's late write and
                 then its unlock are queued while it is frozen and run the moment it is continued
                 (the unlock reaches n1's lockd as it wakes up, before it may have noticed that its
                 lease lapsed: the release of a hold the home gave away must change nothing).
  unlock_frozen  (1c) as 1a, but H (running) writes and then unlocks while n1's lockd is still
                 frozen: the unlock waits in n1's socket and is the first thing n1's lockd
                 handles when continued, before its heartbeat can tell it that its lease lapsed.
                 The release of a hold the home has given away must change nothing: O's next
                 token (t3) must still be above t2.
  partition      (2, tcp only) every lockd reaches the others through its own tierce-wanem relay
                 per directed link (each lockd has its own topology file whose other nodes' URIs
                 are its relays: the lockd digest has no URIs). The four relays to and from n1 are
                 cut (both directions: a silent network) while O asks. Expected: n1 revokes H's
                 hold after lease - lease/4 (H sees a LeaseLost revocation), n3 gives the lock to O
                 after the lease (t2 > t1, accepted); H, still cut off from the lockds but not from
                 the store, writes with t1: REFUSED. Then the relays are healed. A link over shm
                 cannot be cut in user space (one-sided operations go straight to the peer's
                 mapped segment; the control channel is a unix socket, and tierce-wanem relays
                 TCP only): skipped there, with that reason.
  partition_unlock (2b, tcp only) as 2, but H unlocks a fifth of a lease after the cut, before
                 n1 can notice it: n1's release (WRITE K; CAS W at the home) goes into the cut link
                 and is held there until the heal, after O has had the lock. That late release
                 must change nothing: O's next token (t3) must still be above t2.
  holder_frozen  (3) H alone SIGSTOPped, its lockd healthy. Holds have no client lease
                 (docs/dlm.md: a hold lasts until it is unlocked or its connection closes), so O
                 must NOT get the lock while H is frozen: O's first request (timeout 2 x lease)
                 times out, a second one waits. After SIGCONT, H's write with t1 is ACCEPTED, H
                 unlocks, and O gets the lock with t2 > t1 (accepted).

After each of 1a, 1b, 1c, 2 and 2b: H unlocks (what it hears is reported), the members must all
be up again, and O locks once more: its token t3 must be above every earlier one and its write
accepted (a lockd that releases a hold its home has given away — resumed, or through a link that
held the release — must not push the lock's tokens back). What H's client saw (revocations
through event_fd/revoked(), with the time since the fault) is reported for every scenario; in
the partition scenario (the documented case) it is required, and before O's grant (docs/dlm.md:
the cut-off node revokes after lease - lease/4, the home gives the hold away after the lease: no
moment with two holders). For a frozen lockd it is reported, not required (it cannot revoke
while frozen: that is what the fencing token is for). A grant to O sooner than the lease after
the fault is reported as a NOTE (the run's directory is kept).

The run fails when a stale write is accepted, O does not get the lock in time (or gets it while
H's hold must last), a token does not increase, a lockd does not stop cleanly on SIGTERM, or any
step does not answer. Everything started (lockds, clients, relays; frozen ones too) is stopped in
every case. A table at the end: scenario, algorithm, transport, tokens, what the store did with
the old holder's late write, how long O waited, what H saw. Exit 0 when every scenario passed
(or was skipped), 1 otherwise; a failed scenario's directory is kept (problems.txt, logs).

  fence.py --lockd L --holder H --cli C --wanem W --algorithm ncosed --transport tcp
  fence.py ... --break-store --expect-stale-accepted   # selftest: must see a stale write accepted
"""
import argparse
import os
import queue
import re
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

from dlmtest import free_port, home_of
from dlmtest import start_relay as dlm_start_relay

SCENARIOS = ["lockd_frozen", "node_frozen", "unlock_frozen", "partition", "partition_unlock",
             "holder_frozen"]


class Fail(Exception):
    pass


def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


# ------------------------------------------------------------------------------------------------
# The resource: a store that checks fencing tokens.

class Store:
    def __init__(self, check=True):
        self.check = check
        self.mu = threading.Lock()
        self.highest = None
        self.log = []  # (monotonic, who, token, tag, verdict, highest before)
        store = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                line = self.rfile.readline().decode(errors="replace").strip()
                parts = line.split()
                if len(parts) != 5 or parts[0] != "WRITE" or not parts[2].isdigit():
                    self.wfile.write(b"ERROR malformed\n")
                    return
                self.wfile.write((store.write(parts[3], int(parts[2]), parts[4]) + "\n").encode())

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def write(self, who, token, tag):
        with self.mu:
            before = self.highest
            ok = before is None or token >= before or not self.check
            verdict = "ACCEPTED" if ok else "REFUSED %d" % before
            if ok:
                self.highest = token if before is None else max(before, token)
            self.log.append((time.monotonic(), who, token, tag, verdict.split()[0], before))
            return verdict

    def stale_accepted(self):
        """Accepted writes whose token is below one accepted before them."""
        out, top = [], None
        with self.mu:
            for t, who, token, tag, verdict, before in self.log:
                if verdict == "ACCEPTED":
                    if top is not None and token < top:
                        out.append("%s's write %s with token %d accepted after token %d"
                                   % (who, tag, token, top))
                    top = token if top is None else max(top, token)
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------------------------------------------
# Processes

class Client:
    """A fence_holder process: commands on stdin, one answer line each; EVENT lines aside."""

    def __init__(self, run, node, who):
        self.run, self.node, self.who = run, node, who
        self.err = open(os.path.join(run.dir, who + ".err"), "a")
        self.p = subprocess.Popen([run.a.holder, run.sock(node), run.lock, str(run.store.port), who],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                  text=True, bufsize=1, start_new_session=True)
        run.procs.append(self.p)
        self.answers = queue.Queue()
        self.events = []  # (monotonic seconds, text)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            line = line.rstrip("\n")
            if line.startswith("EVENT "):
                parts = line.split(" ", 4)  # EVENT REVOKED hold ms why
                self.events.append((int(parts[3]) / 1000.0, parts[4] if len(parts) > 4 else ""))
                self.run.log("%s: %s" % (self.who, line))
            else:
                self.answers.put(line)
        self.answers.put(None)

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def answer(self, timeout, what):
        try:
            line = self.answers.get(timeout=timeout)
        except queue.Empty:
            raise Fail("%s (%s on %s) did not answer '%s' within %.0f s"
                       % (self.who, "pid %d" % self.p.pid, self.node, what, timeout))
        if line is None:
            raise Fail("%s exited (%s) while doing '%s' (see %s.err)"
                       % (self.who, self.p.poll(), what, self.who))
        return line

    def pending(self):
        return not self.answers.empty()

    def cmd(self, cmd, timeout=30):
        self.send(cmd)
        return self.answer(timeout, cmd)

    def lock(self, timeout_ms, answer_timeout=None):
        line = self.cmd("lock excl %d" % timeout_ms,
                        answer_timeout or timeout_ms / 1000 + 15)
        return parse_lock(line)

    def write(self, tag):
        line = self.cmd("write " + tag)
        if not line.startswith("STORE "):
            raise Fail("%s write %s: unexpected answer %r" % (self.who, tag, line))
        return line[6:]


def parse_lock(line):
    """'GRANTED token ms at' -> ('GRANTED', token, ms, at: monotonic seconds);
    'FAILED Status ms msg' -> (Status, None, ms, msg)."""
    p = line.split(" ", 3)
    if p[0] == "GRANTED":
        return ("GRANTED", int(p[1]), int(p[2]), int(p[3]) / 1000.0)
    if p[0] == "FAILED":
        return (p[1], None, int(p[2]), p[3] if len(p) > 3 else "")
    raise Fail("unexpected answer to lock: %r" % line)


class Run:
    """One scenario: a fresh directory, three lockds (+ relays), two clients."""

    def __init__(self, a, store, scenario):
        self.a, self.store, self.scenario = a, store, scenario
        self.dir = tempfile.mkdtemp(prefix="tierce-dlm-fence-")
        self.procs = []
        self.lockd = {}
        self.relays = {}  # (from, to) -> (control socket, ready file, process)
        self.nodes = ["n1", "n2", "n3"]
        self.t0 = time.monotonic()
        self.lock = next("fence-%d" % i for i in range(1000)
                         if home_of("fence-%d" % i, self.nodes) == "n3")

    def log(self, *msg):
        print("[%s %7.2f]" % (self.scenario, time.monotonic() - self.t0), *msg, flush=True)

    def sock(self, node):
        return os.path.join(self.dir, node + "-ipc.sock")

    def topology(self, uris, path):
        secret = os.path.join(self.dir, "secret")
        if not os.path.exists(secret):
            with open(secret, "w") as f:
                f.write("fence-secret-0123456789abcdef\n")
            os.chmod(secret, 0o600)
        lines = ['[cluster]', 'name = "fence"', 'secret_file = "%s"' % secret,
                 'transport = "%s"' % self.a.transport, '[dlm]',
                 'algorithm = "%s"' % self.a.algorithm, 'heartbeat_ms = 50',
                 'lease_ms = %d' % self.a.lease_ms]
        for n in self.nodes:
            lines += ["[[node]]", 'name = "%s"' % n, 'lockd = ["%s"]' % uris[n]]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def start(self, relays):
        """Topology files, relays (tcp, one per directed link), lockds; waits until all are up."""
        self.topo = {}
        if self.a.transport == "shm":
            uris = {n: "shm://" + os.path.join(self.dir, n + "-lockd.sock") for n in self.nodes}
            shared = self.topology(uris, os.path.join(self.dir, "cluster.toml"))
            self.topo = {n: shared for n in self.nodes}
        else:
            real = {n: free_port() for n in self.nodes}
            if not relays:
                shared = self.topology({n: "tcp://127.0.0.1:%d" % real[n] for n in self.nodes},
                                       os.path.join(self.dir, "cluster.toml"))
                self.topo = {n: shared for n in self.nodes}
            else:
                for x in self.nodes:
                    uris = {x: "tcp://127.0.0.1:%d" % real[x]}
                    for y in self.nodes:
                        if y != x:
                            uris[y] = "tcp://127.0.0.1:%d" % self.start_relay(x, y, real[y])
                    self.topo[x] = self.topology(uris, os.path.join(self.dir, x + ".toml"))
                self.wait_relays()
        for n in self.nodes:
            self.start_lockd(n)
        self.wait_members_up(15)

    def start_relay(self, x, y, target):
        """Starts the relay x->y and waits until it is ready (the topology files are written
        after this returns)."""
        ctl = os.path.join(self.dir, "wanem-%s-%s.sock" % (x, y))
        ready = os.path.join(self.dir, "wanem-%s-%s.ready" % (x, y))
        try:
            port, p = dlm_start_relay(self.a.wanem, "127.0.0.1:%d" % target, ctl, ready,
                                      os.path.join(self.dir, "wanem-%s-%s.log" % (x, y)),
                                      self.procs)
        except RuntimeError as e:
            raise Fail("relay %s->%s: %s" % (x, y, e))
        self.relays[(x, y)] = (ctl, ready, p)
        return port

    def wait_relays(self):
        for (x, y), (ctl, ready, p) in self.relays.items():
            if p.poll() is not None:
                raise Fail("relay %s->%s exited %d (see wanem-%s-%s.log)" % (x, y, p.returncode, x, y))

    def relay_cmd(self, x, y, command):
        ctl = self.relays[(x, y)][0]
        r = subprocess.run([self.a.wanem, "--control", ctl, "--send", command],
                           capture_output=True, text=True, timeout=10)
        if r.returncode != 0 or not r.stdout.startswith("ok"):
            raise Fail("relay %s->%s: '%s' answered %r %r" % (x, y, command, r.stdout, r.stderr))
        return r.stdout.strip()

    def start_lockd(self, node):
        with open(os.path.join(self.dir, node + ".log"), "a") as logf:  # the child keeps its copy
            p = subprocess.Popen([self.a.lockd, "-t", self.topo[node], "-n", node, "-s",
                                  self.sock(node), "-d", os.path.join(self.dir, node + "-state"),
                                  "-f"],
                                 stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        self.lockd[node] = p

    def status(self, node):
        r = subprocess.run([self.a.cli, "--status", "--socket", self.sock(node)],
                           capture_output=True, text=True, timeout=20)
        return r.returncode, r.stdout + r.stderr

    def wait_members_up(self, timeout):
        deadline = time.monotonic() + timeout
        t = time.monotonic()
        while time.monotonic() < deadline:
            if all(rc == 0 and "DOWN" not in out
                   for rc, out in (self.status(n) for n in self.nodes)):
                return time.monotonic() - t
            time.sleep(0.05)
        raise Fail("the lockds did not all see each other within %d s" % timeout)

    def lockd_log(self, node):
        try:
            with open(os.path.join(self.dir, node + ".log"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return "(no log: %s was not started)" % node

    def freeze(self, procs, what):
        for p in procs:
            os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        for p in procs:
            while proc_state(p.pid) not in ("T", "t"):
                if time.monotonic() > deadline:
                    raise Fail("%s (pid %d) did not stop on SIGSTOP" % (what, p.pid))
                time.sleep(0.005)

    def thaw(self, procs):
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)

    def stop_lockds(self, problems):
        """SIGCONT + SIGTERM every lockd: each must exit 0 (a crash or sanitizer report fails)."""
        for n, p in self.lockd.items():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
        for n, p in self.lockd.items():
            try:
                rc = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                problems.append("lockd %s did not stop within 10 s of SIGTERM" % n)
                continue
            if rc != 0:
                problems.append("lockd %s exited %d on SIGTERM (see %s.log)" % (n, rc, n))

    def cleanup(self):
        """Stops whatever is left, frozen or not: its whole process group, SIGCONT then SIGKILL."""
        for p in self.procs:
            if p.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except Exception:
                pass
            for f in (p.stdin, p.stdout):
                try:
                    if f:
                        f.close()
                except Exception:
                    pass


# ------------------------------------------------------------------------------------------------
# Scenarios

def liveness_codes(text):
    """The lockd's liveness warnings (LOCKD0031 down, LOCKD0033 restarted, LOCKD0034 dead,
    LOCKD0035 lease lapsed, DLM0304 recovered...) as 'CODE xN' in order of first appearance."""
    counts = {}
    for l in text.splitlines():
        m = re.search(r"\b(LOCKD003[1-9]|DLM030[0-9])\b", l)
        if m and m.group(1) != "LOCKD0032":  # "member is up" is not news
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return ", ".join("%s x%d" % kv for kv in counts.items())


def expect_accepted(res, who, tag, answer):
    if not answer.startswith("ACCEPTED"):
        raise Fail("%s's write %s was not accepted: %s" % (who, tag, answer))


def start_holder(run, res, relays):
    """Every scenario's start: 3 lockds (links through relays when `relays`), H on n1 and O on
    n2 connected, H holding the lock (home n3, checked) and its first write accepted."""
    a = run.a
    run.start(relays=relays)
    run.log("3 lockds up (%s over %s%s); lock %s, home n3" % (
        a.algorithm, a.transport, ", links through relays" if relays else "", run.lock))
    H = Client(run, "n1", "H")
    O = Client(run, "n2", "O")
    st, t1, ms, msg = H.lock(10000)
    if st != "GRANTED":
        raise Fail("H did not get the lock: %s %s" % (st, msg))
    res["t1"] = t1
    rc, out = run.status("n3")
    if "home locks: 1 " not in out:
        raise Fail("n3 is not the home of %s (home_of out of date?): %s" % (run.lock, out))
    expect_accepted(res, "H", "first", H.write("first"))
    run.log("H holds %s with token %d and wrote once (accepted)" % (run.lock, t1))
    return H, O, t1


def scenario_lost(run, res, how):
    """1a lockd_frozen, 1b node_frozen, 1c unlock_frozen, 2 partition: H loses the lock, O gets
    it, H's late write must be refused, and the tokens go on increasing."""
    a = run.a
    lease = a.lease_ms / 1000
    cut = how.startswith("partition")
    H, O, t1 = start_holder(run, res, relays=cut)

    lockd1 = run.lockd["n1"]
    frozen = [lockd1] + ([H.p] if how == "node_frozen" else [])
    if cut:
        for x, y in (("n1", "n2"), ("n2", "n1"), ("n1", "n3"), ("n3", "n1")):
            run.relay_cmd(x, y, "cut both")
        what = "n1 cut off (relays n1<->n2, n1<->n3 cut both ways)"
    else:
        run.freeze(frozen, "n1's lockd" + (" and H" if how == "node_frozen" else ""))
        what = "SIGSTOP " + ("n1's lockd and H" if how == "node_frozen" else "n1's lockd")
    t_fault = time.monotonic()
    run.log(what)
    O.send("lock excl 30000")
    h_unlock = None
    if how == "partition_unlock":
        # H unlocks before its lockd can notice the cut: n1 sends the release (WRITE K; CAS W)
        # into the cut link, where the relay holds it until the heal.
        time.sleep(lease / 5)
        h_unlock = H.cmd("unlock")
        run.log("H unlocked %.0f ms after the cut: %s" % ((time.monotonic() - t_fault) * 1000, h_unlock))
    st, t2, ms, granted_at = parse_lock(O.answer(45, "lock excl 30000"))
    res["waited_ms"] = ms
    if st != "GRANTED":
        raise Fail("O did not get the lock after %d ms while H was cut off: %s %s"
                   % (ms, st, granted_at))
    res["t2"] = t2
    res["granted_after_ms"] = (granted_at - t_fault) * 1000
    run.log("O granted token %d after %d ms (%.0f ms after the fault)"
            % (t2, ms, res["granted_after_ms"]))
    if res["granted_after_ms"] < a.lease_ms - 100:
        # docs/dlm.md: the home gives a silent member's holds away after lease_ms (the last
        # heartbeat before the fault is at most one heartbeat period older than the fault).
        res["notes"].append("O was granted the lock %.0f ms after the fault, before the lease "
                            "(%d ms) could have run out at the home" % (res["granted_after_ms"], a.lease_ms))
        run.log("NOTE: " + res["notes"][-1])
    if t2 <= t1:
        raise Fail("O's token %d is not above H's %d" % (t2, t1))
    expect_accepted(res, "O", "second", O.write("second"))
    u = O.cmd("unlock")
    if u != "UNLOCKED":
        raise Fail("O's unlock: %s" % u)
    run.log("O wrote with token %d (accepted) and unlocked" % t2)

    # H's late write: H never unlocked; it writes with t1 as soon as it runs again.
    time.sleep(max(0.0, t_fault + 2 * lease - time.monotonic()))
    if how == "node_frozen":
        # Queued in H's stdin: what H does the moment it is continued, as a paused VM's process
        # would: its write, then its unlock — which reaches n1's lockd as it wakes up, racing
        # the heartbeat that tells it its lease lapsed.
        H.send("write late")
        H.send("unlock")
        run.thaw(frozen)
        t_resume = time.monotonic()
        late = H.answer(20, "write late")
        late = late[6:] if late.startswith("STORE ") else late
        h_unlock = H.answer(20, "unlock")
    elif how == "unlock_frozen":
        late = H.write("late")  # n1's lockd still frozen; H itself runs
        h_unlock = H.cmd("unlock")  # one-way: returns at once, the frame waits in n1's socket
        run.thaw(frozen)
        t_resume = time.monotonic()
    elif how == "lockd_frozen":
        run.thaw(frozen)
        t_resume = time.monotonic()
        late = H.write("late")
    else:
        t_resume = time.monotonic()
        late = H.write("late")  # still cut off from the lockds, not from the store
    res["late"] = late.split()[0]
    res["fault_s"] = t_resume - t_fault
    run.log("%s after %.0f ms; H's late write with token %d: %s"
            % ("still cut" if cut else "thawed", (t_resume - t_fault) * 1000, t1, late))

    # What H's client hears (LeaseLost revocation through event_fd/revoked()).
    deadline = time.monotonic() + 3 * lease
    while not H.events and time.monotonic() < deadline:
        time.sleep(0.02)
    H.cmd("ping")  # the event loop has run since (any revocation it read is out)
    if H.events:
        t_ev, why = H.events[0]
        res["revocation"] = "LeaseLost %+.0f ms" % ((t_ev - t_fault) * 1000)
        res["revocation_why"] = why
        run.log("H heard a revocation %.0f ms after the fault: %s" % ((t_ev - t_fault) * 1000, why))
    else:
        res["revocation"] = "none"
        run.log("H heard no revocation within %.1f s of the resume" % (3 * lease))
    if cut:
        for x, y in (("n1", "n2"), ("n2", "n1"), ("n1", "n3"), ("n3", "n1")):
            run.relay_cmd(x, y, "heal both")
        run.log("relays healed")
    res["n1_log"] = liveness_codes(run.lockd_log("n1"))
    res["n3_log"] = liveness_codes(run.lockd_log("n3"))
    up_s = run.wait_members_up(20)
    run.log("members all up again %.0f ms later; liveness lines logged by n1: %s; by n3 (home): %s"
            % (up_s * 1000, res["n1_log"] or "none", res["n3_log"] or "none"))
    u = h_unlock or H.cmd("unlock")
    res["h_unlock"] = "UNLOCKED" if u == "UNLOCKED" else u.split()[1]
    when = {"node_frozen": " (queued before the freeze ended: run as H was continued)",
            "unlock_frozen": " (sent while n1's lockd was frozen)",
            "partition_unlock": " (sent %.0f ms after the cut)" % (lease / 5 * 1000)}
    run.log("H's unlock of its old hold%s: %s" % (when.get(how, "") if h_unlock else "", u))
    # The lock goes on, with tokens above every earlier one.
    st, t3, ms3, msg = O.lock(10000)
    if st != "GRANTED":
        raise Fail("O's lock after the recovery: %s after %d ms: %s" % (st, ms3, msg))
    res["t3"] = t3
    w3 = O.write("after")
    run.log("O locked again: token %d, write %s" % (t3, w3))
    if t3 <= max(t1, t2):
        raise Fail("token regression: O's token %d after the fault is not above %d (H's t1 %d, O's "
                   "t2 %d); its write: %s" % (t3, max(t1, t2), t1, t2, w3))
    expect_accepted(res, "O", "after", w3)
    O.cmd("unlock")
    if how == "partition" and res["revocation"] == "none":
        raise Fail("H was not told its hold was revoked (LeaseLost) while n1 was cut off "
                   "(docs/dlm.md: clients get LeaseLost after lease - lease/4)")
    if how == "partition" and H.events[0][0] > granted_at:
        # docs/dlm.md: the partitioned node revokes after lease - lease/4, the home gives the
        # holds away after the lease: no moment with two holders.
        raise Fail("two holders: O was granted the lock %.0f ms after the cut, %.0f ms BEFORE H's "
                   "client was told its hold was revoked (%.0f ms after the cut)"
                   % ((granted_at - t_fault) * 1000, (H.events[0][0] - granted_at) * 1000,
                      (H.events[0][0] - t_fault) * 1000))
    if not res["late"].startswith("REFUSED"):
        raise Fail("STALE WRITE ACCEPTED: H's late write with token %d after O's %d: %s"
                   % (t1, t2, late))


def scenario_holder_frozen(run, res):
    """3: H alone frozen; its hold stays; O waits; after SIGCONT H's write is accepted."""
    a = run.a
    lease = a.lease_ms / 1000
    H, O, t1 = start_holder(run, res, relays=False)
    run.freeze([H.p], "H")
    t_fault = time.monotonic()
    run.log("SIGSTOP H (its lockd runs)")
    st, t, ms, msg = O.lock(int(2 * a.lease_ms))
    if st == "GRANTED":
        raise Fail("O got the lock (token %d) after %d ms while H, frozen, still held it" % (t, ms))
    if st != "Timeout":
        raise Fail("O's first request: %s after %d ms (expected Timeout): %s" % (st, ms, msg))
    res["first_wait"] = "Timeout %d ms" % ms
    run.log("O's request with timeout %d ms: Timeout after %d ms" % (2 * a.lease_ms, ms))
    O.send("lock excl 30000")
    time.sleep(lease)
    if O.pending():
        raise Fail("O's second request was answered while H was frozen: %s" % O.answer(1, "lock"))
    run.thaw([H.p])
    t_resume = time.monotonic()
    res["fault_s"] = t_resume - t_fault
    late = H.write("late")
    res["late"] = late.split()[0]
    run.log("SIGCONT H after %.0f ms; its write with token %d: %s"
            % ((t_resume - t_fault) * 1000, t1, late))
    u = H.cmd("unlock")
    res["h_unlock"] = "UNLOCKED" if u == "UNLOCKED" else u.split()[1]
    st, t2, ms, msg = parse_lock(O.answer(40, "lock excl 30000"))
    res["waited_ms"] = ms
    if st != "GRANTED":
        raise Fail("O's second request: %s after %d ms: %s" % (st, ms, msg))
    res["t2"] = t2
    run.log("H unlocked (%s); O granted token %d after %d ms (%.0f ms after H's resume)"
            % (u, t2, ms, (time.monotonic() - t_resume) * 1000))
    w = O.write("second")
    H.cmd("ping")
    res["n1_log"] = liveness_codes(run.lockd_log("n1"))
    res["n3_log"] = liveness_codes(run.lockd_log("n3"))
    res["revocation"] = "none" if not H.events else "LeaseLost %+.0f ms" % (
        (H.events[0][0] - t_fault) * 1000)
    if H.events:
        res["revocation_why"] = H.events[0][1]
    if not late.startswith("ACCEPTED"):
        raise Fail("H's write after SIGCONT (it still held the lock) was not accepted: %s" % late)
    if u != "UNLOCKED":
        raise Fail("H's unlock after SIGCONT: %s" % u)
    if t2 <= t1:
        raise Fail("O's token %d is not above H's %d" % (t2, t1))
    expect_accepted(res, "O", "second", w)
    O.cmd("unlock")
    if H.events:
        raise Fail("H's hold was revoked though its lockd was healthy: %s" % H.events[0][1])


def run_scenario(a, scenario):
    res = {"scenario": scenario, "algorithm": a.algorithm, "transport": a.transport, "t1": None,
           "t2": None, "t3": None, "late": "-", "waited_ms": None, "revocation": "-", "result": "?",
           "notes": []}
    if scenario.startswith("partition") and a.transport == "shm":
        res["result"] = "SKIP"
        res["why"] = ("no way to cut a link over shm in user space: a lockd's one-sided operations "
                      "go straight to the peer's mapped dlm.table segment (no process in between), "
                      "and its control channel is a unix socket, which tierce-wanem (TCP only) "
                      "cannot relay")
        print("[%s] SKIP: %s" % (scenario, res["why"]), flush=True)
        return res
    store = Store(check=not a.break_store)
    run = Run(a, store, scenario)
    problems = []
    try:
        if scenario == "holder_frozen":
            scenario_holder_frozen(run, res)
        else:
            scenario_lost(run, res, scenario)
    except Fail as e:
        problems.append(str(e))
    except Exception as e:  # noqa: BLE001 — anything is a failure; still clean up
        problems.append("unexpected %s: %s" % (type(e).__name__, e))
    finally:
        try:
            run.stop_lockds(problems)
        except Exception as e:  # noqa: BLE001
            problems.append("stopping the lockds: %s" % e)
        run.cleanup()
        store.close()
    stale = store.stale_accepted()
    if stale and not any("STALE WRITE ACCEPTED" in p for p in problems):
        problems.append("STALE WRITE ACCEPTED by the store: " + "; ".join(stale))
    res["stale_accepted"] = bool(stale) or any("STALE WRITE ACCEPTED" in p for p in problems)
    res["problems"] = problems
    res["result"] = "FAIL" if problems else "PASS"
    res["store_log"] = [(who, token, tag, verdict) for _, who, token, tag, verdict, _ in store.log]
    for p in problems:
        run.log("FAIL: " + p)
    if problems or res["notes"] or a.keep:
        with open(os.path.join(run.dir, "problems.txt"), "w") as f:
            f.write("".join(p + "\n" for p in problems + ["NOTE: " + n for n in res["notes"]]))
        run.log("logs in " + run.dir)
        if problems:
            for n in run.nodes:
                tail = run.lockd_log(n).splitlines()[-15:]
                print("--- %s.log (last lines):\n  %s" % (n, "\n  ".join(tail)))
    else:
        shutil.rmtree(run.dir, ignore_errors=True)
    return res


def fmt_token(t):
    if t is None:
        return "-"
    return "%d (e%d+%d)" % (t, t >> 48, t & ((1 << 48) - 1)) if t >= 1 << 48 else str(t)


def print_table(results):
    head = ["scenario", "alg", "transport", "H token (old)", "O token (new)", "O token after",
            "store: H's late write", "O waited ms", "H heard", "H unlock", "result"]
    rows = []
    for r in results:
        late = r.get("late", "-")
        if r["scenario"] == "holder_frozen" and late != "-":
            late += " (H still held it: expected)"
        elif late != "-":
            late += " (stale: must be REFUSED)"
        waited = "-" if r.get("waited_ms") is None else str(r["waited_ms"])
        if r.get("first_wait"):
            waited = "%s (first: %s)" % (waited, r["first_wait"])
        rows.append([r["scenario"], r["algorithm"], r["transport"], fmt_token(r.get("t1")),
                     fmt_token(r.get("t2")), fmt_token(r.get("t3")), late, waited,
                     r.get("revocation", "-"), r.get("h_unlock", "-"), r["result"]])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    for r in results:
        if r.get("why"):
            print("%s: skipped: %s" % (r["scenario"], r["why"]))
        if r.get("revocation_why"):
            print("%s: H's revocation: %s" % (r["scenario"], r["revocation_why"]))
        if "n1_log" in r:
            print("%s: liveness/recovery lines in the logs: n1 (H's node): %s; n3 (home): %s"
                  % (r["scenario"], r["n1_log"] or "none", r["n3_log"] or "none"))
        for p in r.get("problems", []):
            print("%s: FAIL: %s" % (r["scenario"], p))
        for n in r.get("notes", []):
            print("%s: NOTE: %s" % (r["scenario"], n))
    print("(tokens: eE+N = epoch E << 48 plus N; O waited: from its request to its grant; H heard: "
          "the first revocation H's client read, relative to the fault)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lockd", required=True)
    ap.add_argument("--holder", required=True, help="fence_holder")
    ap.add_argument("--cli", required=True, help="tierce-lock (for --status)")
    ap.add_argument("--wanem", required=True, help="tierce-wanem (tcp partition)")
    ap.add_argument("--transport", default="tcp", choices=["tcp", "shm"])
    ap.add_argument("--algorithm", default="ncosed", choices=["ncosed", "dqnl", "srsl"])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="comma-separated, of: " + ", ".join(SCENARIOS))
    ap.add_argument("--lease-ms", type=int, default=1000)
    ap.add_argument("--break-store", action="store_true",
                    help="the store accepts every write (no token check): for the selftest")
    ap.add_argument("--expect-stale-accepted", action="store_true",
                    help="pass only if every scenario run (but holder_frozen) saw a stale write "
                         "accepted (with --break-store: proves the test can fail)")
    ap.add_argument("--keep", action="store_true", help="keep the directories")
    a = ap.parse_args()
    names = [s for s in a.scenarios.split(",") if s]
    for s in names:
        if s not in SCENARIOS:
            ap.error("unknown scenario %s" % s)
    results = []
    for s in names:
        results.append(run_scenario(a, s))
    print()
    print_table(results)
    ran = [r for r in results if r["result"] != "SKIP"]
    if a.expect_stale_accepted:
        lost = [r for r in ran if r["scenario"] != "holder_frozen"]
        caught = [r for r in lost if r.get("stale_accepted")]
        ok = lost and len(caught) == len(lost)
        print("%s: selftest: %d of %d scenarios saw the store accept a stale write%s"
              % ("PASS" if ok else "FAIL", len(caught), len(lost),
                 " (the test fails when the store's check is off)" if ok else ""))
        return 0 if ok else 1
    failed = [r for r in ran if r["result"] != "PASS"]
    print("%s: %s over %s: %d scenario(s) passed, %d failed, %d skipped"
          % ("FAIL" if failed else "PASS", a.algorithm, a.transport, len(ran) - len(failed),
             len(failed), len(results) - len(ran)))
    return 1 if failed else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
