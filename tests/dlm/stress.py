#!/usr/bin/env python3
"""tests/dlm/stress.py — the lock manager's multi-process stress test.

Starts NODES real tierce-lockd processes on 127.0.0.1 (a private directory, free ports), and
stress_worker client processes on every node, in two groups: group A on a lock homed at node 1,
group B on a lock homed at the last node. Each group checks mutual exclusion and fencing tokens on
its own shared state file (see stress_worker.cc). During the run:

  1. a holder process is SIGKILLed while it holds group A's lock exclusively and others queue
     behind it: its lockd must release the lock (the connection closed) and the queue go on;
  2. (--kill-node) the last node dies — its lockd and its workers SIGKILLed together, like a
     crashed machine: it is the home of group B's lock and a member of group A's queue. Group A
     must go on after the lease; group B gets HomeDown until the node is back; then the node is
     restarted (same state directory: a higher epoch) with fresh workers.

With --netns (root, tcp) every node is a network namespace of its own (tools/tiercelab/netns.py:
a veth pair into a private bridge, its own address): its lockd listens on that address and its
workers run inside it too (they reach their lockd through its unix socket, as on that host); the
partition step then drops the packets between n1's and n2's addresses with iptables inside their
namespaces (a real cut) instead of tierce-wanem relays.

Passes when every surviving worker finished its iterations, no worker saw a violation, and each
group's counter equals its completed exclusive sections (up to one per worker killed inside one).
Everything started is stopped, also on failure.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from dlmtest import free_port, home_of

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dlmtest import start_relay as dlm_start_relay

SLOTS = 64
STATE_BYTES = 40 + 32 * SLOTS  # stress_worker.cc: State


class Run:
    def __init__(self, a):
        self.a = a
        self.dir = tempfile.mkdtemp(prefix="tierce-dlm-stress-")
        self.procs = []  # every process started, for the final cleanup
        self.lockd = {}
        self.relays = {}  # (from, to) -> control socket of the relay of that link (--partition)
        self.nodes = ["n%d" % i for i in range(1, a.nodes + 1)]
        self.net = None
        if a.netns:
            sys.path.insert(0, os.path.join(REPO, "tools"))
            from tiercelab import netns
            self.net = netns.Net("dlms", self.nodes)

    def cmd(self, node, argv):
        """argv, run inside node's namespace with --netns."""
        return self.net.cmd(node, argv) if self.net else argv

    def log(self, *msg):
        print("[%7.2f]" % (time.monotonic() - self.t0), *msg, flush=True)

    def write_topology(self):
        secret = os.path.join(self.dir, "secret")
        with open(secret, "w") as f:
            f.write("stress-secret-0123456789abcdef\n")
        os.chmod(secret, 0o600)
        lines = ['[cluster]', 'name = "stress"', 'secret_file = "%s"' % secret,
                 'transport = "%s"' % self.a.transport, '[dlm]',
                 'algorithm = "%s"' % self.a.algorithm, 'heartbeat_ms = 50',
                 'lease_ms = %d' % self.a.lease_ms]
        self.uris = {}
        for n in self.nodes:
            if self.a.transport == "shm":
                self.uris[n] = "shm://" + os.path.join(self.dir, n + "-lockd.sock")
            elif self.net:
                self.uris[n] = "tcp://%s:7400" % self.net.addr(n)
            else:
                self.uris[n] = "tcp://127.0.0.1:%d" % free_port()
        self.head = lines
        self.topology = os.path.join(self.dir, "cluster.toml")
        self.write_nodes(self.topology, self.uris)
        self.topologies = {}
        if self.partitioned():
            # One relay per directed link: node X's file names the relays X -> Y as the other
            # nodes' lockds (the lockd digest has no URIs), its own entry its real address.
            for x in self.nodes:
                uris = dict(self.uris)
                for y in self.nodes:
                    if y != x:
                        uris[y] = "tcp://127.0.0.1:%d" % self.start_relay(x, y)
                self.topologies[x] = os.path.join(self.dir, "cluster-%s.toml" % x)
                self.write_nodes(self.topologies[x], uris)

    def write_nodes(self, path, uris):
        lines = list(self.head)
        for n in self.nodes:
            lines += ["[[node]]", 'name = "%s"' % n, 'lockd = ["%s"]' % uris[n]]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")

    def partitioned(self):
        """Relays carry the links (tcp on 127.0.0.1 with --partition); with --netns the partition
        is an iptables cut instead."""
        return self.a.partition and self.a.transport == "tcp" and not self.net

    def iptables_cut(self, x, y, cut):
        """Drops (cut) or stops dropping every packet between x's and y's addresses, both ways,
        with rules inside both namespaces."""
        for a, b in ((x, y), (y, x)):
            for chain, match in (("OUTPUT", ["-d", self.net.addr(b)]), ("INPUT", ["-s", self.net.addr(b)])):
                argv = self.net.cmd(a, ["iptables", "-w", "-I" if cut else "-D", chain] + match
                                    + ["-j", "DROP"])
                r = subprocess.run(argv, capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit("FAIL: %s: %s" % (" ".join(argv), r.stderr.strip()))

    def start_relay(self, x, y):
        ctl = os.path.join(self.dir, "relay-%s-%s.ctl" % (x, y))
        try:
            port, _ = dlm_start_relay(self.a.wanem, self.uris[y][len("tcp://"):], ctl,
                                      ctl + ".ready",
                                      os.path.join(self.dir, "relay-%s-%s.log" % (x, y)),
                                      self.procs)
        except RuntimeError as e:
            raise SystemExit("FAIL: the relay %s -> %s did not start: %s" % (x, y, e))
        self.relays[(x, y)] = ctl
        return port

    def relay(self, x, y, command):
        r = subprocess.run([self.a.wanem, "--control", self.relays[(x, y)], "--send", command],
                           capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            raise SystemExit("FAIL: relay %s -> %s refused %r: %s" % (x, y, command,
                                                                     r.stdout + r.stderr))

    def sock(self, node):
        return os.path.join(self.dir, node + "-ipc.sock")

    def start_lockd(self, node):
        logf = open(os.path.join(self.dir, node + ".log"), "a")
        p = subprocess.Popen(self.cmd(node, [self.a.lockd, "-t", self.topologies.get(node, self.topology), "-n", node,
                                             "-s", self.sock(node), "-d", os.path.join(self.dir, node + "-state"), "-f"]),
                             stdout=logf, stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.lockd[node] = p
        return p

    def wait_members_up(self, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = True
            for n in self.nodes:
                r = subprocess.run([self.a.cli, "--status", "--socket", self.sock(n)],
                                   capture_output=True, text=True)
                if r.returncode != 0 or "DOWN" in r.stdout:
                    ok = False
                    break
            if ok:
                return
            time.sleep(0.05)
        raise SystemExit("FAIL: the lockds did not all see each other within %d s (logs in %s)"
                         % (timeout, self.dir))

    def new_state(self, name):
        path = os.path.join(self.dir, name + ".state")
        with open(path, "wb") as f:
            f.write(b"\0" * STATE_BYTES)
        return path

    def read_state(self, path):
        with open(path, "rb") as f:
            b = f.read(40)
        vals = [int.from_bytes(b[i:i + 8], "little") for i in range(0, 40, 8)]
        return {"counter": vals[0], "max_token": vals[1], "violations": vals[2],
                "sections": vals[3]}

    def worker(self, node, state, slot, lock, iterations, mode=None):
        """A stress_worker; mode: None (ITERATIONS lock/unlock), "--hold-forever",
        "--hold-ms=N" or "--wait" (then its stdout is a pipe: HOLDING / WAITING)."""
        args = [self.a.worker, self.sock(node), state, str(slot), lock, str(iterations),
                str(1000 + slot)]
        if mode:
            args.append(mode)
        p = subprocess.Popen(self.cmd(node, args), stdout=subprocess.PIPE if mode else subprocess.DEVNULL,
                             stderr=open(os.path.join(self.dir, "worker%d.err" % slot), "a"),
                             text=True)
        p.node, p.slot, p.state = node, slot, state
        self.procs.append(p)
        return p

    def progress(self, state, since, timeout, what):
        """Waits until the group's exclusive sections pass `since`; returns the wait in ms."""
        t = time.monotonic()
        while self.read_state(state)["sections"] <= since:
            if time.monotonic() - t > timeout:
                raise SystemExit("FAIL: group A made no progress within %d s %s" % (timeout, what))
            time.sleep(0.005)
        return (time.monotonic() - t) * 1000

    def revoked_by_lapse(self, w):
        """Whether worker w's unlock failed because its lockd revoked the hold for a lease lapse
        on the lock's home (LOCKD0209 naming that hold): what a safe lock manager must do when
        its lockd went unanswered for lease - guard — on an overloaded machine (a loop with two
        CPU hogs and two ASan runs on 2 cores) the holder's lockd lapsed while only the holder
        was frozen. Not a failure of the step (nobody else entered, checked before); anything
        else (a crash, an unlock refused without such a revocation) is."""
        with open(os.path.join(self.dir, "worker%d.err" % w.slot)) as f:
            m = re.search(r"unlock of hold (\d+): .*revoked", f.read())
        if not m:
            return False
        with open(os.path.join(self.dir, w.node + ".log")) as f:
            line = next((l for l in f if "LOCKD0209 hold %s " % m.group(1) in l), None)
        if line and ("LOCKD0035" in line or "lapsed" in line or "no answer from it" in line
                     or "is gone" in line):
            self.log("the frozen holder's hold was revoked by its lockd (lease lapse under load), "
                     "allowed: %s" % line.strip())
            return True
        return False

    def freeze_holder(self, state, lock, slot):
        lease = self.a.lease_ms / 1000
        holder = self.worker(self.nodes[1], state, slot, lock, 1,
                             mode="--hold-ms=%d" % int(lease * 1000 + 1500))
        line = holder.stdout.readline().strip()
        if not line.startswith("HOLDING"):
            raise SystemExit("FAIL: the holder to freeze did not get the lock: %r" % line)
        waiter = self.worker(self.nodes[0], state, slot + 1, lock, 1, mode="--wait")
        if waiter.stdout.readline().strip() != "WAITING":
            raise SystemExit("FAIL: the waiter did not start")
        time.sleep(0.2)  # it has asked, and waits behind the holder
        waiter.kill()
        waiter.wait()
        os.kill(holder.pid, signal.SIGSTOP)
        before = self.read_state(state)["sections"]
        time.sleep(lease * 1.5)
        during = self.read_state(state)["sections"] - before
        os.kill(holder.pid, signal.SIGCONT)
        if during:
            raise SystemExit("FAIL: %d exclusive sections ran while the holder (%s) was frozen "
                             "inside its own" % (during, line))
        rc = holder.wait(timeout=30)
        if rc != 0 and not self.revoked_by_lapse(holder):
            raise SystemExit("FAIL: the frozen holder exited %d after SIGCONT (see worker%d.err)"
                             % (rc, holder.slot))
        waited = self.progress(state, self.read_state(state)["sections"] - 1, 10,
                               "after the frozen holder resumed and unlocked")
        self.log("holder %s frozen %.0f ms (> lease): nobody entered; a waiter was killed in the "
                 "queue; group A went on after the holder resumed and unlocked"
                 % (line, lease * 1500))
        del waited
        return slot + 2

    def freeze_lockd(self, node, state):
        lease = self.a.lease_ms / 1000
        p = self.lockd[node]
        os.kill(p.pid, signal.SIGSTOP)
        t = time.monotonic()
        try:
            # Past the lease the home has declared it dead and rebuilt the queue without its
            # entries: the group goes on while it is still frozen.
            time.sleep(lease + 0.3)
            since = self.read_state(state)["sections"]
            waited = self.progress(state, since, 15, "more than a lease after %s's lockd froze"
                                   % node)
            time.sleep(max(0, 2 * lease - (time.monotonic() - t)))
        finally:
            os.kill(p.pid, signal.SIGCONT)
        self.log("lockd %s frozen %.0f ms: group A ran exclusive sections %.0f ms after it froze"
                 % (node, (time.monotonic() - t) * 1000, (lease + 0.3) * 1000 + waited))
        self.wait_members_up()
        self.log("lockd %s resumed; members all up again" % node)

    def partition(self, x, y, state):
        """Cuts both links between x and y (every byte held, as a silent network) for twice
        the lease, then heals them (the held bytes arrive late)."""
        lease = self.a.lease_ms / 1000
        t = time.monotonic()
        if self.net:
            self.iptables_cut(x, y, True)
        else:
            for link in ((x, y), (y, x)):
                self.relay(*link, "cut both")
        try:
            time.sleep(lease + 0.3)
            since = self.read_state(state)["sections"]
            waited = self.progress(state, since, 15, "more than a lease into the partition "
                                   "%s | %s" % (x, y))
            time.sleep(max(0, 2 * lease - (time.monotonic() - t)))
        finally:
            if self.net:
                self.iptables_cut(x, y, False)
            else:
                for link in ((x, y), (y, x)):
                    self.relay(*link, "heal")
        self.log("%s cut off from %s for %.0f ms: group A ran exclusive sections %.0f ms into it"
                 % (x, y, (time.monotonic() - t) * 1000, (lease + 0.3) * 1000 + waited))
        self.wait_members_up()
        self.log("partition healed; members all up again")

    def impersonate(self, pid, state):
        """Starts a process under a dead worker's pid (root: /proc/sys/kernel/ns_last_pid) and
        lets the group run 50 exclusive sections while it lives."""
        last_pid = "/proc/sys/kernel/ns_last_pid"
        if not os.access(last_pid, os.W_OK):
            self.log("pid reuse step skipped: %s is not writable (not root?)" % last_pid)
            return
        for _ in range(20):
            with open(last_pid, "w") as f:
                f.write(str(pid - 1))
            p = subprocess.Popen(["sleep", "30"])
            self.procs.append(p)
            if p.pid == pid:
                break
            p.kill()
            p.wait()
        else:
            self.log("pid reuse step skipped: another process kept taking pid %d" % pid)
            return
        before = self.read_state(state)["sections"]
        t = time.monotonic()
        while self.read_state(state)["sections"] < before + 50 and time.monotonic() - t < 10:
            time.sleep(0.005)
        self.impostor_sections = self.read_state(state)["sections"] - before
        p.kill()
        p.wait()
        self.log("pid %d (the killed holder's) was another process while group A ran %d exclusive "
                 "sections" % (pid, self.impostor_sections))

    def notes(self):
        """The workers' "note:" lines (a slot whose pid now names another process)."""
        out = []
        for f in sorted(os.listdir(self.dir)):
            if f.startswith("worker") and f.endswith(".err"):
                with open(os.path.join(self.dir, f), errors="replace") as fh:
                    out += [l.rstrip() for l in fh if l.startswith("note:")]
        return out

    def dump_status(self):
        for n in self.nodes:
            p = self.lockd.get(n)
            if p is None or p.poll() is not None:
                continue
            r = subprocess.run([self.a.cli, "--status", "--socket", self.sock(n)],
                               capture_output=True, text=True)
            print("--- status of %s:\n%s%s" % (n, r.stdout, r.stderr))

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except Exception:
                pass
        if self.net:
            self.net.destroy()

    def run(self):
        a = self.a
        self.t0 = time.monotonic()
        self.write_topology()
        for n in self.nodes:
            self.start_lockd(n)
        self.wait_members_up()
        self.log("%d lockds up (%s over %s)" % (len(self.nodes), a.algorithm, a.transport))
        first, last = self.nodes[0], self.nodes[-1]
        lock_a = next("stress-a-%d" % i for i in range(1000) if home_of("stress-a-%d" % i, self.nodes) == first)
        lock_b = next("stress-b-%d" % i for i in range(1000) if home_of("stress-b-%d" % i, self.nodes) == last)
        state_a, state_b = self.new_state("a"), self.new_state("b")
        workers = []
        slot = 0
        for g, (lock, state) in enumerate([(lock_a, state_a), (lock_b, state_b)]):
            for i in range(a.workers):
                workers.append(self.worker(self.nodes[i % len(self.nodes)], state, slot, lock,
                                           a.iterations))
                slot += 1
        # 1. A holder killed while it holds group A's lock and others queue behind it.
        holder = self.worker(self.nodes[1 % len(self.nodes)], state_a, slot, lock_a, 1, mode="--hold-forever")
        slot += 1
        line = holder.stdout.readline().strip()
        if not line.startswith("HOLDING"):
            raise SystemExit("FAIL: the holder did not get the lock: %r" % line)
        self.log("holder pid %d %s; killing it in 0.5 s" % (holder.pid, line))
        time.sleep(0.5)
        before = self.read_state(state_a)["sections"]
        holder.kill()
        holder.wait()
        t_kill = time.monotonic()
        while self.read_state(state_a)["sections"] == before:
            if time.monotonic() - t_kill > 10:
                raise SystemExit("FAIL: group A made no progress within 10 s of the holder's death")
            time.sleep(0.005)
        self.log("group A went on %.0f ms after the holder was killed"
                 % ((time.monotonic() - t_kill) * 1000))
        killed_inside = {state_a: 1, state_b: 0}  # the holder was inside
        # 1b. Its pid given to another process while group A goes on (what the busy CI machine
        # did by chance, pid_max being 32768): the holder's slot still says "inside
        # exclusively"; a checker that trusts the pid sees a violation that never happened.
        self.impersonate(holder.pid, state_a)
        # 2. A holder frozen (SIGSTOP) inside its section for longer than the lease, while a
        # client killed as it waits sits in the queue: holds have no client lease, so nobody
        # enters until the holder, resumed, unlocks; the dead waiter's entry does not block.
        slot = self.freeze_holder(state_a, lock_a, slot)
        # 3. (--freeze-lockd) A lockd frozen for twice the lease (n2: a member of group A's
        # queue, not a home). A grant it computed before the freeze and writes on SIGCONT
        # carries its lease's end: the client reads it too late and releases it (LeaseLost),
        # the gap that made this step opt-in before the grant carried its deadline.
        if a.freeze_lockd:
            self.freeze_lockd(self.nodes[1], state_a)
        # 4. (--partition, tcp) n2 cut off from n1, group A's home, for twice the lease.
        if self.partitioned() or (a.partition and self.net):
            self.partition(self.nodes[1], self.nodes[0], state_a)
        elif a.partition:
            self.log("partition step skipped: shm links cannot be cut in user space (tcp only)")
        # 5. The last node dies: lockd + its workers.
        if a.kill_node:
            time.sleep(0.5)
            victims = [w for w in workers if w.node == last]
            self.lockd[last].kill()
            for w in victims:
                w.kill()
            for w in victims + [self.lockd[last]]:
                w.wait()
            for w in victims:
                killed_inside[w.state] += 1  # at most one section each was cut short
            self.log("killed node %s (lockd + %d workers)" % (last, len(victims)))
            sa = self.read_state(state_a)["sections"]
            t_kill = time.monotonic()
            while self.read_state(state_a)["sections"] == sa:
                if time.monotonic() - t_kill > 15:
                    raise SystemExit("FAIL: group A made no progress within 15 s of node %s's death"
                                     % last)
                time.sleep(0.005)
            self.log("group A went on %.0f ms after node %s died"
                     % ((time.monotonic() - t_kill) * 1000, last))
            time.sleep(1.0)
            self.start_lockd(last)
            self.wait_members_up()
            self.log("node %s restarted" % last)
            for w in victims:
                workers.append(self.worker(last, w.state, slot, lock_a if w.state == state_a else lock_b,
                                           a.iterations // 2))
                slot += 1
            workers = [w for w in workers if w not in victims]
        # The fault steps are over: the workers stop once they have done their iterations.
        time.sleep(1.0)
        for st in (state_a, state_b):
            with open(st, "r+b") as f:
                f.seek(32)
                f.write((1).to_bytes(8, "little"))
        deadline = time.monotonic() + a.deadline
        failed = []
        for w in workers:
            try:
                rc = w.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                failed.append("worker slot %d on %s did not finish within %d s (hang?)"
                              % (w.slot, w.node, a.deadline))
                continue
            if rc != 0:
                with open(os.path.join(self.dir, "worker%d.err" % w.slot)) as f:
                    err = f.read().strip()
                failed.append("worker slot %d on %s exited %d: %s" % (w.slot, w.node, rc, err[-500:]))
        if failed:  # a hang: what each lockd holds, while they still run
            self.dump_status()
        # A clean stop of every lockd (SIGTERM): exit code 0, or it crashed / a sanitizer fired.
        for n, p in self.lockd.items():
            if p.poll() is None:
                p.terminate()
                try:
                    rc = p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    failed.append("lockd %s did not stop within 10 s of SIGTERM" % n)
                    continue
                if rc != 0:
                    failed.append("lockd %s exited %d on SIGTERM (see %s.log)" % (n, rc, n))
        for name, st in (("A", state_a), ("B", state_b)):
            s = self.read_state(st)
            self.log("group %s: %d exclusive sections, counter %d, violations %d, highest token %d"
                     % (name, s["sections"], s["counter"], s["violations"], s["max_token"]))
            if s["violations"]:
                failed.append("group %s: %d mutual exclusion / fencing violations" % (name, s["violations"]))
            if not (s["sections"] <= s["counter"] <= s["sections"] + killed_inside[st]):
                failed.append("group %s: counter %d vs %d completed exclusive sections: lost updates"
                              % (name, s["counter"], s["sections"]))
            if s["sections"] == 0:
                failed.append("group %s: no exclusive section ran" % name)
        notes = self.notes()
        if notes:
            self.log("%d worker(s) saw a slot's pid reused by another process (not a violation); "
                     "first: %s" % (len(notes), notes[0]))
        if failed:
            print("FAIL:\n  " + "\n  ".join(failed))
            print("logs in", self.dir)
            return 1
        print("PASS: %s over %s%s, %d nodes, %d workers per group x %d iterations, holder killed%s"
              % (a.algorithm, a.transport, " (one network namespace per node)" if self.net else "",
                 len(self.nodes), a.workers, a.iterations,
                 ", node killed and restarted" if a.kill_node else ""))
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lockd", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--cli", required=True, help="tierce-lock (for --status)")
    ap.add_argument("--transport", default="tcp", choices=["tcp", "shm"])
    ap.add_argument("--algorithm", default="ncosed", choices=["ncosed", "dqnl", "srsl"])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--workers", type=int, default=6, help="per group")
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--lease-ms", type=int, default=800)
    ap.add_argument("--kill-node", action="store_true")
    ap.add_argument("--freeze-lockd", action="store_true",
                    help="SIGSTOP n2's lockd for twice the lease")
    ap.add_argument("--partition", action="store_true",
                    help="cut n2 off from n1 for twice the lease (tcp: needs --wanem)")
    ap.add_argument("--wanem", help="tierce-wanem (the relays of --partition)")
    ap.add_argument("--deadline", type=int, default=120)
    ap.add_argument("--netns", action="store_true",
                    help="one network namespace per node (root, tcp): lockds on real addresses, "
                         "the partition an iptables cut")
    ap.add_argument("--keep", action="store_true", help="keep the directory")
    a = ap.parse_args()
    if a.nodes < 3:
        ap.error("--nodes must be at least 3")
    if a.netns:
        if a.transport != "tcp":
            ap.error("--netns: lockds reach each other over tcp (--transport tcp)")
        sys.path.insert(0, os.path.join(REPO, "tools"))
        from tiercelab import netns
        ok, why = netns.available()
        if not ok:
            print("SKIP: --netns: %s" % why)
            return 77
    elif a.partition and a.transport == "tcp" and not a.wanem:
        ap.error("--partition over tcp needs --wanem")
    r = Run(a)
    rc = 1
    try:
        rc = r.run()
    except SystemExit as e:
        print(e)
        r.dump_status()
        print("logs in", r.dir)
        rc = 1
    finally:
        r.cleanup()
        if rc == 0 and not a.keep:
            shutil.rmtree(r.dir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
