#!/usr/bin/python3
"""benchmarks/dlm/run.py — the lock manager against its baselines and against a Redis lock, side by
side in ONE run (seed 000 ch. 4: Fig. 4.6 serial lock/unlock latency, Fig. 4.8 shared and exclusive
lock cascades).

Starts everything itself on 127.0.0.1 in a private temporary directory: for each transport (tcp,
shm) and each algorithm (ncosed, dqnl, srsl) a fresh set of 3 tierce-lockd processes, and one
private redis-server; drives tierce-dlm-bench against them; stops everything at the end, on
failure and on Ctrl-C / SIGTERM. Prints one table and the target lines (PASS/MISS); writes
results.json, summary.txt, serial.png and cascade.png to --out (default benchmarks/dlm/results/).

This is a benchmark, not a test: the exit status only says whether the run worked (0), something
failed to start or a lock operation failed (1), or the command line was wrong (2). Speed never
changes it.

  run.py [--quick] [--build DIR] [--out DIR] [--passes P] [--algorithms ncosed,dqnl,srsl]
         [--transports tcp,shm,netns] [--waiters 1,2,4,8,16] [--parts serial,cascade] [--no-redis]
         [--no-plots] [--nodes K] [--link-delay-us D] [--dilation F|auto] [--relays switch|per-node]
  --transports netns (root): K lockds in K network namespaces, every link delayed D us one way
  by a tierce-wanem relay — emulated hosts and links, labelled so in the output.

See benchmarks/dlm/README.md.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
# The one free_port (tools/tiercelab/procs.py): never the same port twice in a run.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from tiercelab.procs import free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools"))
ALGORITHMS = ["ncosed", "dqnl", "srsl"]
TRANSPORTS = ["tcp", "shm"]
# "netns": one lockd per network namespace, tcp between them over veth pairs, every link delayed
# in user space by tierce-wanem (no netem here): EMULATED hosts and links, labelled so in the
# output. Not in the default list (needs root; see README "Across namespaces").
ALL_TRANSPORTS = TRANSPORTS + ["netns"]
NAMES = {"ncosed": "N-CoSED", "dqnl": "DQNL", "srsl": "SRSL", "redis": "Redis",
         "redis-spin": "Redis+spin"}
MODES = {"x": "exclusive", "s": "shared"}

PROFILES = {
    # passes: every (transport, algorithm) configuration is started afresh and measured once per
    # pass, passes run one after the other, samples are pooled: slow drift of a noisy machine
    # spreads over all configurations instead of landing on one.
    "full": dict(passes=6, serial_iters=5000, serial_warmup=300, redis_iters=5000,
                 cascade_rounds=40, waiters=[1, 2, 4, 8, 16]),
    "quick": dict(passes=1, serial_iters=200, serial_warmup=20, redis_iters=200,
                  cascade_rounds=3, waiters=[1, 4, 16]),
}

# Lockd settings: a lease long enough that a busy 2-core machine never declares a member dead.
HEARTBEAT_MS, LEASE_MS, LOCK_SLOTS = 100, 5000, 1024
STOP_GRACE_S = 8.0


class Failed(Exception):
    pass


class Interrupted(Exception):
    pass


def log(msg):
    print(f"[dlm-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Child processes: every process we start is registered, and stop_all() ends them (TERM, then KILL
# after a grace period), by pid, never by name.

CHILDREN = []  # (name, Popen, log path)


def spawn(name, argv, logpath, cwd=None):
    lf = open(logpath, "wb")
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                             cwd=cwd)
    finally:
        lf.close()
    CHILDREN.append((name, p, logpath))
    return p


def tail(path, n=12):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
        return "\n".join("    " + l for l in lines[-n:])
    except OSError:
        return "    (no log)"


def stop(procs):
    """procs: list of (name, Popen, log). TERM all, wait, KILL the stubborn. Returns the list of
    (name, exit code) of those that had exited by themselves before we asked."""
    died = []
    for name, p, _ in procs:
        if p.poll() is not None:
            died.append((name, p.returncode))
    for _, p, _ in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except OSError:
                pass
    deadline = time.time() + STOP_GRACE_S
    for name, p, _ in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            log(f"{name} (pid {p.pid}) did not stop within {STOP_GRACE_S:.0f} s of SIGTERM: SIGKILL")
            p.kill()
            p.wait()
    for entry in procs:
        if entry in CHILDREN:
            CHILDREN.remove(entry)
    return died


def stop_all():
    if CHILDREN:
        stop(list(CHILDREN))


def on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


# ------------------------------------------------------------------------------------------------
# tierce-dlm-bench


class Bench:
    def __init__(self, path):
        self.path = path

    def run(self, args, timeout, env=None):
        """Runs one measurement; returns the JSON objects it printed. Raises Failed (with its
        stderr) when it exits non-zero or times out. `env`: variables added to ours."""
        argv = [self.path] + args
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=timeout, env=dict(os.environ, **(env or {})))
        except subprocess.TimeoutExpired as e:
            err = (e.stderr or b"").decode(errors="replace")
            raise Failed(f"{' '.join(args[:1])} did not finish within {timeout:.0f} s "
                         f"(a hang?): {' '.join(args)}\n{err}")
        out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        if p.returncode != 0:
            raise Failed(f"tierce-dlm-bench {' '.join(args)} exited {p.returncode}:\n{err.strip()}")
        res = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        return res


# ------------------------------------------------------------------------------------------------
# A set of 3 lockds


class LockdSet:
    def __init__(self, lockd, bench, tmp, transport, algorithm, tag):
        self.lockd, self.bench, self.transport, self.algorithm = lockd, bench, transport, algorithm
        self.dir = os.path.join(tmp, tag)
        os.makedirs(self.dir)
        self.nodes = ["n1", "n2", "n3"]
        self.client_env = None  # variables for tierce-dlm-bench (the lock clients)
        self.write_topology(tmp, tag)

    def topology_lines(self, tmp, tag):
        return ["[cluster]", f'name = "bench-{tag}"',
                f'secret_file = "{os.path.join(tmp, "secret")}"',
                f'transport = "{"tcp" if self.transport == "netns" else self.transport}"',
                "[dlm]", f'algorithm = "{self.algorithm}"', f"heartbeat_ms = {HEARTBEAT_MS}",
                f"lease_ms = {LEASE_MS}", f"lock_slots = {LOCK_SLOTS}"]

    def write_topology(self, tmp, tag):
        transport = self.transport
        self.sockets = [os.path.join(self.dir, f"{n}-ipc.sock") for n in self.nodes]
        self.topology = os.path.join(self.dir, "topology.toml")
        self.procs = []
        lines = self.topology_lines(tmp, tag)
        for n in self.nodes:
            uri = (f"tcp://127.0.0.1:{free_port()}" if transport == "tcp"
                   else f"shm://{os.path.join(self.dir, n + '-fabric.sock')}")
            lines += ["[[node]]", f'name = "{n}"', f'lockd = ["{uri}"]']
        with open(self.topology, "w") as f:
            f.write("\n".join(lines) + "\n")

    def lockd_argv(self, n, sock):
        return [self.lockd, "-t", self.topology, "-n", n, "-s", sock,
                "-d", os.path.join(self.dir, f"{n}-state"), "-f"]

    def start(self):
        for n, sock in zip(self.nodes, self.sockets):
            logpath = os.path.join(self.dir, f"{n}.log")
            p = spawn(f"tierce-lockd {n} ({self.transport}/{self.algorithm})",
                      self.lockd_argv(n, sock), logpath)
            self.procs.append((f"tierce-lockd {n}", p, logpath))
        deadline = time.time() + 10
        while not all(os.path.exists(s) for s in self.sockets):
            self.check_alive("starting")
            if time.time() > deadline:
                raise Failed(f"{self.transport}/{self.algorithm}: the lockds did not create their "
                             f"sockets within 10 s" + self.logs())
            time.sleep(0.02)
        try:
            self.bench.run(["ready", "--sockets", ",".join(self.sockets), "--timeout-ms", "10000"],
                           timeout=20, env=self.client_env)
        except Failed as e:
            raise Failed(f"{self.transport}/{self.algorithm}: {e}" + self.logs())

    def check_alive(self, when):
        for name, p, logpath in self.procs:
            if p.poll() is not None:
                raise Failed(f"{self.transport}/{self.algorithm}: {name} exited with status "
                             f"{p.returncode} while {when}:\n{tail(logpath)}")

    def logs(self):
        return "".join(f"\n  {name} log:\n{tail(lp)}" for name, _, lp in self.procs)

    def name_homed_at(self, node, prefix):
        argv = [self.bench.path, "lockname", "--topology", self.topology, "--node", node,
                "--prefix", prefix]
        p = subprocess.run(argv, capture_output=True, timeout=20)
        if p.returncode != 0:
            raise Failed(f"lockname: {p.stderr.decode(errors='replace').strip()}")
        return p.stdout.decode().strip()

    def stop(self):
        died = stop(self.procs)
        self.procs = []
        return died


class NetnsLockdSet(LockdSet):
    """K lockds, each in its own network namespace (tools/tiercelab/netns.py: a veth pair into a
    private bridge, address 10.213.S.i), talking tcp. Node X reaches node Y through a
    tierce-wanem relay listening on X's address in X's namespace (port 7500 + j), named in X's
    own topology file in place of Y's address, that holds every byte DELAY us one way in each
    direction — every lockd-to-lockd byte crosses a delayed link. Two layouts of the relays:
      switch   (default) ONE tierce-wanem process for all links, outside the namespaces: it
               listens in X's namespace and connects to Y's lockd in Y's namespace
               (NETNS/host:port), so the relay is the wire, as a switch would be: the links cost
               one process's wake-ups, not one per namespace.
      per-node one tierce-wanem per namespace, connecting to Y's address across the veth pairs
               and the bridge (K processes to wake, and the kernel's veth/bridge path per byte).
    The clients (tierce-dlm-bench) stay outside and reach each lockd through its unix socket, as
    a local client on that host would.
    Nobody spins (lockd --spin-us 0, TIERCE_LOCK_SPIN_US=0): a spin waits on a CPU of its own
    for a peer on another; here K hosts share this machine's CPUs and a spin takes the CPU the
    awaited peer needs. `delay_us` is what the relays hold: the link delay times the dilation."""

    def __init__(self, lockd, bench, tmp, algorithm, tag, nodes, delay_us, wanem,
                 relays="switch"):
        self.k, self.delay_us, self.wanem, self.relays = nodes, delay_us, wanem, relays
        super().__init__(lockd, bench, tmp, "netns", algorithm, tag)
        self.client_env = {"TIERCE_LOCK_SPIN_US": "0"}

    def write_topology(self, tmp, tag):
        from tiercelab import netns  # root-only machinery, imported when used
        self.nodes = [f"n{i + 1}" for i in range(self.k)]
        self.sockets = [os.path.join(self.dir, f"{n}-ipc.sock") for n in self.nodes]
        self.net = netns.Net("dlm", self.nodes)
        self.port = 7400  # every lockd on its own address: one port for all
        self.relay_port = {}  # (x, y) -> port of x's relay to y, on x's address
        for x in self.nodes:
            for j, y in enumerate(n for n in self.nodes if n != x):
                self.relay_port[(x, y)] = 7500 + j
        self.topologies = {}
        for x in self.nodes:
            lines = self.topology_lines(tmp, tag)
            for y in self.nodes:
                host, port = ((self.net.addr(y), self.port) if y == x
                              else (self.net.addr(x), self.relay_port[(x, y)]))
                lines += ["[[node]]", f'name = "{y}"', f'lockd = ["tcp://{host}:{port}"]']
            path = os.path.join(self.dir, f"topology-{x}.toml")
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            self.topologies[x] = path
        self.topology = self.topologies[self.nodes[0]]  # lock names hash the same in every file
        self.procs = []

    def lockd_argv(self, n, sock):
        return self.net.cmd(n, [self.lockd, "-t", self.topologies[n], "-n", n, "-s", sock,
                                "-d", os.path.join(self.dir, f"{n}-state"), "-f",
                                "--spin-us", "0"])

    def start(self):
        def relay(name, argv):
            ready = os.path.join(self.dir, f"relay-{name}.ready")
            logpath = os.path.join(self.dir, f"relay-{name}.log")
            p = spawn(f"tierce-wanem {name}", argv(["--delay-us", str(self.delay_us),
                                                    "--ready-file", ready]), logpath)
            self.procs.append((f"tierce-wanem {name}", p, logpath))
            deadline = time.time() + 10
            while not os.path.exists(ready):
                self.check_alive("starting the relays")
                if time.time() > deadline:
                    raise Failed(f"netns: relay {name} not ready within 10 s" + self.logs())
                time.sleep(0.01)

        if self.relays == "switch":
            fwd = []
            for (x, y), port in self.relay_port.items():
                fwd += ["--forward", f"{self.net.ns(x)}/{self.net.addr(x)}:{port}="
                                     f"{self.net.ns(y)}/{self.net.addr(y)}:{self.port}"]
            relay("switch", lambda extra: [self.wanem, *fwd, *extra])
        else:
            for x in self.nodes:
                fwd = []
                for y in self.nodes:
                    if y != x:
                        fwd += ["--forward", f"{self.net.addr(x)}:{self.relay_port[(x, y)]}="
                                             f"{self.net.addr(y)}:{self.port}"]
                relay(x, lambda extra, x=x, fwd=fwd: self.net.cmd(x, [self.wanem, *fwd, *extra]))
        super().start()

    def stop(self):
        died = super().stop()
        self.net.destroy()
        return died


# ------------------------------------------------------------------------------------------------
# Redis


class RedisServer:
    def __init__(self, tmp):
        self.port = free_port()
        self.dir = os.path.join(tmp, "redis")
        os.makedirs(self.dir)
        self.log = os.path.join(self.dir, "redis.log")
        self.proc = None

    def start(self):
        exe = shutil.which("redis-server")
        if not exe:
            raise Failed("redis-server not found (Debian: apt-get install redis-server; "
                         "tools/deps.sh installs it)")
        self.proc = spawn("redis-server",
                          [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no", "--daemonize", "no", "--dir", self.dir],
                          self.log, cwd=self.dir)
        self.entry = CHILDREN[-1]
        deadline = time.time() + 10
        while True:
            if self.proc.poll() is not None:
                raise Failed(f"redis-server exited with status {self.proc.returncode}:\n"
                             f"{tail(self.log)}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.time() > deadline:
                raise Failed(f"redis-server did not answer PING within 10 s:\n{tail(self.log)}")
            time.sleep(0.05)

    def stop(self):
        if self.proc is not None:
            stop([self.entry])
            self.proc = None


# ------------------------------------------------------------------------------------------------
# Statistics over pooled samples


def pct(v, p):
    if not v:
        return float("nan")
    s = sorted(v)
    i = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))  # nearest rank
    return s[i]


def summary(v):
    if not v:
        return None
    return {"n": len(v), "p50": pct(v, 50), "p90": pct(v, 90), "p99": pct(v, 99),
            "mean": statistics.fmean(v), "min": min(v), "max": max(v)}


def fmt(v, width=8):
    if v is None or v != v:
        return "-".rjust(width)
    return f"{v:{width}.1f}"


# ------------------------------------------------------------------------------------------------
# The measurements


def measure_config(bench, lset, prof, waiters, samples, pass_no, parts):
    t, a = lset.transport, lset.algorithm
    serial_lock = lset.name_homed_at("n2", "serial")       # client on n1, home n2 (remote)
    cascade_lock = lset.name_homed_at("n3", "cascade")     # holder on n1, home n3
    for mode in (("x", "s") if "serial" in parts else ()):
        r = bench.run(["serial", "--socket", lset.sockets[0], "--lock", serial_lock, "--mode", mode,
                       "--iterations", str(prof["serial_iters"]), "--warmup",
                       str(prof["serial_warmup"]), "--raw", "1"], timeout=300,
                      env=lset.client_env)[0]
        key = ("serial", t, a, mode)
        s = samples.setdefault(key, {"lock": [], "unlock": [], "pair": [], "floor_p50": []})
        for k in ("lock", "unlock", "pair"):
            s[k] += r["samples"][k]
        s["floor_p50"].append(r["floor"]["p50"])
        log(f"  pass {pass_no} {t}/{a} serial {mode}: lock p50 {r['lock']['p50']:.1f} us, "
            f"unlock p50 {r['unlock']['p50']:.1f} us, pair p50 {r['pair']['p50']:.1f} us")
        lset.check_alive(f"serial {mode}")
    for mode in (("s", "x") if "cascade" in parts else ()):
        for n in waiters:
            res = bench.run(["cascade", "--sockets", ",".join(lset.sockets), "--lock",
                             cascade_lock, "--mode", mode, "--waiters", str(n), "--rounds",
                             str(prof["cascade_rounds"]), "--raw", "1"], timeout=300,
                            env=lset.client_env)
            r = next(x for x in res if x["bench"] == "cascade")
            by = next((x for x in res if x["bench"] == "cascade-by-socket"), None)
            key = ("cascade", t, a, mode, n)
            s = samples.setdefault(key, {"cascade": [], "first_grant": [], "holder_unlock": [],
                                         "last_by_node": []})
            s["cascade"] += r["samples"]["cascade"]
            s["first_grant"] += r["samples"]["first_grant"]
            s["holder_unlock"].append(r["holder_unlock"]["p50"])
            if by:
                s["last_by_node"].append([None if x is None else x["p50"]
                                          for x in by["last_grant_by_socket"]])
            log(f"  pass {pass_no} {t}/{a} cascade {mode} x{n}: p50 {r['cascade']['p50']:.1f} us "
                f"(first grant {r['first_grant']['p50']:.1f}, holder unlock "
                f"{r['holder_unlock']['p50']:.1f})")
            lset.check_alive(f"cascade {mode} x{n}")


# "redis": hiredis as a user runs it (blocking read); "redis-spin": the client polls its socket for
# up to REDIS_SPIN_US before blocking, as LockClient does by default: on a VM an idle vCPU woken
# by the reply costs tens of microseconds, which the plain client pays on every round trip.
REDIS_SPIN_US = 50


def measure_redis(bench, redis, prof, samples, pass_no):
    for name, spin in (("redis", 0), ("redis-spin", REDIS_SPIN_US)):
        r = bench.run(["redis-serial", "--host", "127.0.0.1", "--port", str(redis.port),
                       "--iterations", str(prof["redis_iters"]), "--warmup",
                       str(prof["serial_warmup"]), "--spin-us", str(spin), "--raw", "1"],
                      timeout=300)[0]
        s = samples.setdefault(("serial", "-", name, "x"),
                               {"lock": [], "unlock": [], "pair": [], "floor_p50": []})
        for k in ("lock", "unlock", "pair"):
            s[k] += r["samples"][k]
        s["floor_p50"].append(r["floor"]["p50"])
        log(f"  pass {pass_no} {name} serial: lock p50 {r['lock']['p50']:.1f} us, unlock p50 "
            f"{r['unlock']['p50']:.1f} us, pair p50 {r['pair']['p50']:.1f} us")


# ------------------------------------------------------------------------------------------------
# Report


def build_results(samples, algorithms, transports, waiters):
    serial, cascade = {}, {}
    for key, s in samples.items():
        if key[0] == "serial":
            _, t, a, mode = key
            serial[f"{t}/{a}/{mode}"] = {
                "transport": t, "algorithm": a, "mode": mode,
                **{k: summary(s[k]) for k in ("lock", "unlock", "pair")},
                "floor_p50": statistics.median(s["floor_p50"]) if s["floor_p50"] else None,
                "floor_op": "PING" if a == "redis" else "STATUS"}
        else:
            _, t, a, mode, n = key
            cascade[f"{t}/{a}/{mode}/{n}"] = {
                "transport": t, "algorithm": a, "mode": mode, "waiters": n,
                "cascade": summary(s["cascade"]), "first_grant": summary(s["first_grant"]),
                "holder_unlock_p50_per_pass": s["holder_unlock"],
                "holder_unlock_p50": statistics.median(s["holder_unlock"]),
                # per pass, per node n1..n3: median over rounds of the last grant among the
                # waiters on that node (us after t0)
                "last_grant_by_node_p50_per_pass": s["last_by_node"]}
    return serial, cascade


def get(d, key, *path):
    v = d.get(key)
    for p in path:
        if v is None:
            return None
        v = v.get(p)
    return v


def ratio(a, b):
    if a is None or b is None or b == 0 or a != a or b != b:
        return None
    return a / b


def targets(serial, cascade, transports, netns_links=""):
    """Returns a list of (ok or None, line). `netns_links`: how the netns links were emulated."""
    out = []
    for t in transports:
        nc = get(cascade, f"{t}/ncosed/s/16", "cascade", "p50")
        dq = get(cascade, f"{t}/dqnl/s/16", "cascade", "p50")
        r = ratio(dq, nc)
        ok = None if r is None else r >= 3.0
        where = f"{t} ({netns_links})" if t == "netns" and netns_links else t
        out.append((ok, f"Shared cascade, 16 waiters, {where}: N-CoSED {fmt(nc, 0)} us vs DQNL "
                        f"{fmt(dq, 0)} us (median) = {fmt(r, 0) if r is None else f'{r:.2f}'}x "
                        f"faster (target >= 3x)"))
    for t in transports:
        for mode in ("x", "s"):
            nc = get(serial, f"{t}/ncosed/{mode}", "lock", "p50")
            sr = get(serial, f"{t}/srsl/{mode}", "lock", "p50")
            ok = None if nc is None or sr is None else nc <= sr
            r = ratio(sr, nc)
            out.append((ok, f"Serial lock ({MODES[mode]}), {t}: N-CoSED {fmt(nc, 0)} us vs SRSL "
                            f"{fmt(sr, 0)} us (median lock latency; SRSL/N-CoSED = "
                            f"{'-' if r is None else f'{r:.2f}'}; target: N-CoSED no slower)"))
    nc = get(serial, "shm/ncosed/x", "pair", "p50")
    rd = get(serial, "-/redis/x", "pair", "p50")
    r = ratio(rd, nc)
    ok = None if r is None else r >= 2.0
    out.append((ok, f"Uncontended lock+unlock: N-CoSED shm {fmt(nc, 0)} us vs Redis SET NX + EVAL "
                    f"{fmt(rd, 0)} us (median pair) = {'-' if r is None else f'{r:.2f}'}x faster "
                    f"(target >= 2x)"))
    rs = get(serial, "-/redis-spin/x", "pair", "p50")
    if rs is not None:
        r2 = ratio(rs, nc)
        out.append(("info", f"(info) vs Redis with a {REDIS_SPIN_US} us client spin {fmt(rs, 0)} us "
                          f"= {'-' if r2 is None else f'{r2:.2f}'}x (the plain client pays a "
                          f"vCPU wake-up per reply)"))
    return out


def table(serial, cascade, algorithms, transports, waiters, has_redis):
    L = []
    L.append("Serial lock/unlock (one client on n1, lock homed on n2; us; p50 / mean / p99;")
    L.append("floor = p50 round trip of the cheapest request: lockd STATUS, redis PING)")
    hdr = (f"  {'transport':<9} {'algorithm':<10} {'mode':<4} | {'lock p50':>8} {'mean':>8} "
           f"{'p99':>8} | {'unlock p50':>10} {'mean':>8} | {'pair p50':>8} {'mean':>8} {'p99':>8}"
           f" | {'floor':>6}")
    L.append(hdr)
    L.append("  " + "-" * (len(hdr) - 2))
    rows = [(t, a) for t in transports for a in algorithms]
    if has_redis:
        rows += [("-", "redis"), ("-", "redis-spin")]
    for t, a in rows:
        for mode in (("x", "s") if not a.startswith("redis") else ("x",)):
            d = serial.get(f"{t}/{a}/{mode}")
            if d is None:
                continue
            L.append(f"  {t:<9} {NAMES[a]:<10} {mode:<4} | {fmt(d['lock']['p50'])} "
                     f"{fmt(d['lock']['mean'])} {fmt(d['lock']['p99'])} | "
                     f"{fmt(d['unlock']['p50'], 10)} {fmt(d['unlock']['mean'])} | "
                     f"{fmt(d['pair']['p50'])} {fmt(d['pair']['mean'])} {fmt(d['pair']['p99'])}"
                     f" | {fmt(d.get('floor_p50'), 6)}")
    L.append("")
    L.append("Serial ratios (median lock latency; > 1 means N-CoSED is faster)")
    for t in transports:
        for mode in ("x", "s"):
            nc = get(serial, f"{t}/ncosed/{mode}", "lock", "p50")
            parts = []
            for a in ("dqnl", "srsl"):
                r = ratio(get(serial, f"{t}/{a}/{mode}", "lock", "p50"), nc)
                parts.append(f"{NAMES[a]}/N-CoSED {'-' if r is None else f'{r:5.2f}'}")
            L.append(f"  {t:<4} {mode}: " + "   ".join(parts))
    if has_redis:
        for t in transports:
            parts = []
            for rk in ("redis", "redis-spin"):
                r = ratio(get(serial, f"-/{rk}/x", "pair", "p50"),
                          get(serial, f"{t}/ncosed/x", "pair", "p50"))
                parts.append(f"{NAMES[rk]}/N-CoSED {'-' if r is None else f'{r:5.2f}'}")
            L.append(f"  {t:<4} x (lock+unlock pair): " + "   ".join(parts))
    L.append("")
    L.append("Lock cascade (holder on n1 releases at t0; waiters round-robin on n2,n3,n1,...; lock homed "
             "on n3): median us from t0 to the last waiter's grant")
    for mode in ("s", "x"):
        hdr = f"  {MODES[mode]:<9} {'transport':<9} {'algorithm':<8} |" + "".join(
            f" {'n=' + str(n):>8}" for n in waiters) + " | vs N-CoSED at n=" + str(max(waiters))
        L.append(hdr)
        L.append("  " + "-" * (len(hdr) - 2))
        for t in transports:
            nc_max = get(cascade, f"{t}/ncosed/{mode}/{max(waiters)}", "cascade", "p50")
            for a in algorithms:
                vals = [get(cascade, f"{t}/{a}/{mode}/{n}", "cascade", "p50") for n in waiters]
                r = ratio(vals[-1], nc_max)
                L.append(f"  {'':<9} {t:<9} {NAMES[a]:<8} |" + "".join(f" {fmt(v)}" for v in vals)
                         + f" | {'-' if r is None else f'{r:5.2f}x'}")
        L.append("")
    n = max(waiters)
    L.append(f"Cascade breakdown at n={n} (medians, us after t0): first grant, holder's unlock() "
             "return, last grant among the waiters on n1 / n2 / n3")
    for mode in ("s", "x"):
        for t in transports:
            for a in algorithms:
                d = cascade.get(f"{t}/{a}/{mode}/{n}")
                if d is None:
                    continue
                per = d["last_grant_by_node_p50_per_pass"]
                nodes = []
                for k in range(3):
                    vals = [p[k] for p in per if len(p) > k and p[k] is not None]
                    nodes.append(statistics.median(vals) if vals else None)
                L.append(f"  {MODES[mode]:<9} {t:<4} {NAMES[a]:<8} first {fmt(d['first_grant']['p50'])}"
                         f"  unlock {fmt(d['holder_unlock_p50'])}  last "
                         + " / ".join(fmt(v) for v in nodes)
                         + f"  (all {fmt(d['cascade']['p50'])})")
    L.append("")
    return "\n".join(L)


def plots(out, serial, cascade, algorithms, transports, waiters, has_redis):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        log(f"no plots: matplotlib is not importable by {sys.executable} ({e}); "
            "Debian: apt-get install python3-matplotlib")
        return []
    files = []
    colors = {"srsl": "tab:blue", "dqnl": "tab:orange", "ncosed": "tab:green", "redis": "tab:red",
              "redis-spin": "tab:purple"}
    # Fig 4.6-like: grouped bars per transport: Lock (x), Lock (s), Unlock (x), Unlock (s), Pair (x)
    fig, axes = plt.subplots(1, len(transports), figsize=(6.5 * len(transports), 4.5), squeeze=False)
    groups = [("lock", "x"), ("lock", "s"), ("unlock", "x"), ("unlock", "s"), ("pair", "x")]
    for ax, t in zip(axes[0], transports):
        series = [a for a in ["srsl", "dqnl", "ncosed"] if a in algorithms] + (
            ["redis", "redis-spin"] if has_redis else [])
        width = 0.8 / len(series)
        for i, a in enumerate(series):
            xs, ys = [], []
            for g, (what, mode) in enumerate(groups):
                key = f"-/{a}/{mode}" if a.startswith("redis") else f"{t}/{a}/{mode}"
                v = get(serial, key, what, "p50")
                if v is not None:
                    xs.append(g + (i - (len(series) - 1) / 2) * width)
                    ys.append(v)
            bars = ax.bar(xs, ys, width, label=NAMES[a], color=colors[a])
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{w.capitalize()} ({m})" for w, m in groups])
        ax.set_ylabel("median latency (us)")
        ax.set_title(f"Serial lock/unlock, {t} (Fig. 4.6-like)")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    p = os.path.join(out, "serial.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(p)
    # Fig 4.8-like: cascade latency vs waiters; (a) shared, (b) exclusive; one row per transport
    fig, axes = plt.subplots(len(transports), 2, figsize=(11, 4 * len(transports)), squeeze=False)
    for row, t in enumerate(transports):
        for col, mode in enumerate(("s", "x")):
            ax = axes[row][col]
            for a in [a for a in ["srsl", "dqnl", "ncosed"] if a in algorithms]:
                pts = [(n, get(cascade, f"{t}/{a}/{mode}/{n}", "cascade", "p50")) for n in waiters]
                pts = [(n, v) for n, v in pts if v is not None]
                if pts:
                    ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", label=NAMES[a],
                            color=colors[a])
            ax.set_xscale("log", base=2)
            ax.set_xticks(waiters)
            ax.set_xticklabels([str(n) for n in waiters])
            ax.set_xlabel("waiting processes (queue length)")
            ax.set_ylabel("cascade latency, median (us)")
            ax.set_title(f"{'(a) Shared' if mode == 's' else '(b) Exclusive'} lock cascade, {t}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    p = os.path.join(out, "cascade.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(p)
    return files


def fmt_load(l):
    return "?" if l is None else " ".join(f"{x:.2f}" for x in l)


def loadavg():
    try:
        return os.getloadavg()
    except OSError:
        return None


def _cpu_ticks():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                data = f.read()
        except OSError:
            continue
        comm = data[data.index("(") + 1:data.rindex(")")]
        fields = data[data.rindex(")") + 2:].split()
        out[int(pid)] = (comm, int(fields[11]) + int(fields[12]))  # utime + stime
    return out


def busy_processes(seconds=1.0, top=5):
    """What else uses the CPU right now: the processes with the most CPU time over `seconds`,
    as 'comm(pid) NN%' (100% = one core). For the report: the machine is shared and noisy."""
    hz = os.sysconf("SC_CLK_TCK")
    a = _cpu_ticks()
    time.sleep(seconds)
    b = _cpu_ticks()
    use = []
    for pid, (comm, t) in b.items():
        if pid in a and pid != os.getpid():
            d = (t - a[pid][1]) / hz / seconds * 100
            if d >= 5:
                use.append((d, f"{comm}({pid}) {d:.0f}%"))
    use.sort(reverse=True)
    return [u for _, u in use[:top]] or ["nothing above 5% of a core"]


def find_binary(build, rel, what):
    p = os.path.join(build, rel)
    if not os.access(p, os.X_OK):
        raise Failed(f"{what} not found at {p}: build it first "
                     f"(cmake --build {build} --target {os.path.basename(rel)})")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few iterations: a smoke run (~10 s)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="build directory with tierce-lockd and tierce-dlm-bench")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="output directory")
    ap.add_argument("--passes", type=int, help="passes over every configuration (full: 6)")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--transports", default=",".join(TRANSPORTS))
    ap.add_argument("--waiters", help="cascade queue lengths, e.g. 1,2,4,8,16")
    ap.add_argument("--parts", default="serial,cascade",
                    help="what to measure: serial, cascade or both (default)")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--nodes", type=int, default=8,
                    help="--transports netns: lockds, one per network namespace (default 8)")
    ap.add_argument("--link-delay-us", type=int, default=25,
                    help="--transports netns: one-way delay of every link (default 25 us)")
    ap.add_argument("--dilation", default="1",
                    help="--transports netns: time dilation F (a number >= 1, or auto = nodes / "
                         "CPUs): the relays hold link-delay-us x F, since each of the K emulated "
                         "hosts runs about K/CPUs times slower than a host of its own (README "
                         "'Time dilation'); default 1: the links as given")
    ap.add_argument("--relays", choices=["switch", "per-node"], default="switch",
                    help="--transports netns: one tierce-wanem for all links, joining the "
                         "namespaces (switch, default), or one per namespace across the veth "
                         "pairs (per-node)")
    ap.add_argument("--skip-if-no-netns", action="store_true",
                    help="exit 77 (ctest: skipped) instead of 2 when namespaces cannot be made")
    args = ap.parse_args()

    prof = dict(PROFILES["quick" if args.quick else "full"])
    if args.passes:
        prof["passes"] = args.passes
    algorithms = [a for a in args.algorithms.split(",") if a]
    transports = [t for t in args.transports.split(",") if t]
    for a in algorithms:
        if a not in ALGORITHMS:
            ap.error(f"--algorithms: unknown '{a}' (ncosed, dqnl, srsl)")
    for t in transports:
        if t not in ALL_TRANSPORTS:
            ap.error(f"--transports: unknown '{t}' (tcp, shm, netns)")
    if "netns" in transports:
        if args.nodes < 3:
            ap.error("--nodes: at least 3 (the cascade's lock is homed on n3)")
        if not 0 <= args.link_delay_us <= 1_000_000:
            ap.error("--link-delay-us: 0..1000000")
        if args.dilation == "auto":
            args.dilation = max(1.0, args.nodes / (os.cpu_count() or 1))
        else:
            try:
                args.dilation = float(args.dilation)
            except ValueError:
                ap.error("--dilation wants a number >= 1 or auto")
            if not 1 <= args.dilation <= 1000:
                ap.error("--dilation wants a number from 1 to 1000, or auto")
        args.relay_delay_us = round(args.link_delay_us * args.dilation)
        if args.relay_delay_us > 1_000_000:
            ap.error("--link-delay-us x --dilation: at most 1000000 us")
        from tiercelab import netns
        ok, why = netns.available()
        if not ok and args.skip_if_no_netns:
            print(f"SKIP: --transports netns: {why}")
            return 77
        if not ok:
            ap.error(f"--transports netns: {why}")
    parts = {p for p in args.parts.split(",") if p}
    if not parts or parts - {"serial", "cascade"}:
        ap.error("--parts wants serial, cascade or serial,cascade")
    waiters = prof["waiters"]
    if args.waiters:
        try:
            waiters = sorted({int(x) for x in args.waiters.split(",") if x})
        except ValueError:
            ap.error("--waiters wants numbers like 1,2,4,8,16")

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    tmp = tempfile.mkdtemp(prefix="tierce-dlm-bench-")
    failures = []
    samples = {}
    busy_start = busy_processes()
    started = time.time()
    load_start = loadavg()
    try:
        lockd = find_binary(args.build, "agents/lockd/tierce-lockd", "tierce-lockd")
        wanem = (find_binary(args.build, "tools/tierce-wanem/tierce-wanem", "tierce-wanem")
                 if "netns" in transports else None)
        bench = Bench(find_binary(args.build, "benchmarks/dlm/tierce-dlm-bench", "tierce-dlm-bench"))
        secret = os.path.join(tmp, "secret")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(24).hex().encode() + b"\n")
        os.close(fd)
        log(f"{'quick' if args.quick else 'full'} run: {prof['passes']} pass(es) over "
            f"{'/'.join(transports)} x {'/'.join(algorithms)}; waiters {waiters}; temp dir {tmp}; "
            f"load average {fmt_load(load_start)}; busy: {', '.join(busy_start)}")
        redis = None
        if not args.no_redis and "serial" in parts:
            redis = RedisServer(tmp)
            redis.start()
            log(f"redis-server on 127.0.0.1:{redis.port}")
        for pass_no in range(1, prof["passes"] + 1):
            if redis is not None:
                try:
                    measure_redis(bench, redis, prof, samples, pass_no)
                except Failed as e:
                    failures.append(f"pass {pass_no} redis: {e}")
                    log(f"FAILED: redis: {e}")
            for t in transports:
                for a in algorithms:
                    tag = f"p{pass_no}-{t}-{a}"
                    lset = None
                    try:
                        if t == "netns":
                            log(f"pass {pass_no}: {t}/{a}: {args.nodes} namespaces, relays "
                                f"({args.relay_delay_us} us), lockds")
                            lset = NetnsLockdSet(lockd, bench, tmp, a, tag, args.nodes,
                                                 args.relay_delay_us, wanem, args.relays)
                        else:
                            log(f"pass {pass_no}: {t}/{a}: starting 3 lockds")
                            lset = LockdSet(lockd, bench, tmp, t, a, tag)
                        lset.start()
                        measure_config(bench, lset, prof, waiters, samples, pass_no, parts)
                    except Failed as e:
                        failures.append(f"pass {pass_no} {t}/{a}: {e}")
                        log(f"FAILED: {t}/{a}: {e}{lset.logs() if lset else ''}")
                    except Exception as e:  # netns.NetError: namespaces could not be made
                        failures.append(f"pass {pass_no} {t}/{a}: {e}")
                        log(f"FAILED: {t}/{a}: {e}")
                    finally:
                        died = lset.stop() if lset else []
                        for name, code in died:
                            msg = f"pass {pass_no} {t}/{a}: {name} had exited by itself ({code})"
                            if not any(msg in f for f in failures):
                                failures.append(msg)
        if redis is not None:
            redis.stop()
    except Interrupted as e:
        log(f"interrupted ({e}): stopping everything")
        stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
        return 130
    except Failed as e:
        failures.append(str(e))
        log(f"FAILED: {e}")
    finally:
        stop_all()
    elapsed = time.time() - started
    load_end = loadavg()
    busy_end = busy_processes(0.5)

    serial, cascade = build_results(samples, algorithms, transports, waiters)
    has_redis = "-/redis/x" in serial
    text = table(serial, cascade, algorithms, transports, waiters, has_redis)
    tl = targets(serial, cascade, transports,
                 (f"links {args.link_delay_us} us" + (f", time dilation x{args.dilation:g}"
                                                      if args.dilation != 1 else ""))
                 if "netns" in transports else "")
    header = (f"tierce-dlm-bench {'quick' if args.quick else 'full'} run, "
              f"{datetime.datetime.now().isoformat(timespec='seconds')}, {os.cpu_count()} CPUs, "
              f"{prof['passes']} pass(es), {elapsed:.0f} s; load average at start "
              f"{fmt_load(load_start)}, at end {fmt_load(load_end)}\n"
              f"other CPU users before the run: {', '.join(busy_start)}; after: "
              f"{', '.join(busy_end)}\n"
              f"serial: {prof['serial_iters']} iterations (+{prof['serial_warmup']} warm-up) per "
              f"pass; cascade: {prof['cascade_rounds']} rounds (+1 warm-up) per pass and point; "
              f"lockd heartbeat {HEARTBEAT_MS} ms, lease {LEASE_MS} ms"
              + (f"\nnetns: {args.nodes} lockds, each in its own network namespace; EMULATED "
                 f"links: every lockd-to-lockd byte goes through a user-space tierce-wanem relay "
                 f"adding {args.relay_delay_us} us one way (no netem here; relays: "
                 + ("one process for all links, joining the namespaces" if args.relays == "switch"
                    else "one per namespace, over veth pairs and a bridge")
                 + f"; lockds and clients do not spin) - hosts and a network emulated on "
                 f"{os.cpu_count()} CPUs, not measured hardware"
                 + (f"\nTIME DILATION x{args.dilation:g}: links of {args.link_delay_us} us emulated "
                    f"as {args.relay_delay_us} us, because the {args.nodes} hosts share "
                    f"{os.cpu_count()} CPUs and each runs up to {args.nodes / (os.cpu_count() or 1):g}x "
                    f"slower than a host of its own: the whole cluster is a slowed-down model "
                    f"(ratios carry over; divide times by {args.dilation:g} for the modelled "
                    f"cluster's). Conservative for N-CoSED: DQNL's one-at-a-time hand-offs run on "
                    f"an otherwise idle machine, undilated"
                    if args.dilation != 1 else "")
                 if "netns" in transports else ""))
    tlines = ["Targets:"] + [
        f"  {'    ' if ok == 'info' else 'PASS' if ok else 'MISS' if ok is not None else 'N/A '}  {line}"
        for ok, line in tl]
    if args.quick:
        tlines.append("  (quick run: too few samples for the targets to mean anything)")
    report = header + "\n\n" + text + "\n" + "\n".join(tlines) + "\n"
    if failures:
        report += "\nFailures:\n" + "\n".join("  " + f.replace("\n", "\n  ") for f in failures) + "\n"
    print(report)

    os.makedirs(args.out, exist_ok=True)
    files = []
    if not args.no_plots and (serial or cascade):
        files = plots(args.out, serial, cascade, algorithms, transports, waiters, has_redis)
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"when": datetime.datetime.now().isoformat(timespec="seconds"),
                   "profile": "quick" if args.quick else "full", "params": prof,
                   "algorithms": algorithms, "transports": transports, "waiters": waiters,
                   "lockd": {"heartbeat_ms": HEARTBEAT_MS, "lease_ms": LEASE_MS},
                   "netns": ({"nodes": args.nodes, "link_delay_us": args.link_delay_us,
                              "dilation": args.dilation, "relay_delay_us": args.relay_delay_us,
                              "relays": args.relays, "emulated": True, "spin_us": 0}
                             if "netns" in transports else None),
                   "cpus": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": load_end,
                   "busy_start": busy_start, "busy_end": busy_end,
                   "elapsed_s": elapsed, "serial": serial, "cascade": cascade,
                   "targets": [{"ok": ok, "line": line} for ok, line in tl],
                   "failures": failures}, f, indent=1)
    log(f"wrote {os.path.join(args.out, 'summary.txt')}, results.json"
        + "".join(f", {os.path.basename(p)}" for p in files) + f" in {args.out}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
