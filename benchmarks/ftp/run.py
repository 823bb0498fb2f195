#!/usr/bin/python3
"""benchmarks/ftp/run.py — tierce-ftpd / tierce-ftp / ADTS against vsftpd, lftp and curl, side by
side in ONE run (seed 000 ch. 9: Fig. 9.3 get/put in a LAN, Fig. 9.4 the WAN delay sweep, Fig. 9.7
server and client CPU, Fig. 9.8 site replication).

Everything runs on this machine, on RAM-backed files (a private directory under /dev/shm), with
private server instances on ephemeral ports (tools/tiercelab/ftplab.py starts them):

  large   get and put of 1 MiB .. 1 GiB: vsftpd (sendfile) with lftp and curl, tierce-ftpd with
          lftp and curl (plain FTP), tierce-ftp against tierce-ftpd with ADTS (tcp, ptcp:4) and
          without; throughput, server CPU s/GiB (each server in its own cgroup), client CPU s/GiB
  mirror  a Zipf-sized site tree and a tree of many small files: lftp mirror (serial and
          --parallel=N) from vsftpd (and, for reference, from tierce-ftpd), tierce-ftp mirror from
          tierce-ftpd (serial and -P N, ADTS on and off)
  wan     get of one file through tierce-wanem (control port and passive range relayed from
          127.0.0.2 to 127.0.0.1) for one-way delays 0 .. 10000 us: one default TCP stream
          (tierce-ftp --adts off, curl) against ADTS tcp and ptcp with 2..16 streams

Prints one table per part and the target lines (PASS/MISS); writes CSV files, summary.txt and PNG
plots to --out (default benchmarks/ftp/results/).

This is a benchmark, not a test: the exit status says whether the run worked (0), something
failed (1: a server did not start, a transfer failed or came out with the wrong size; listed under
"Failures"), or the command line was wrong (2). Speed never changes it.

  run.py [--quick] [--build DIR] [--out DIR] [--parts large,mirror,wan] [--reps N]
         [--sizes 16M,1G] [--tmp DIR] [--no-plots] [--pin]

See benchmarks/ftp/README.md.
"""

import argparse
import contextlib
import csv
import datetime
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools"))
from tiercelab import ftplab  # noqa: E402  (launchers shared with the FTP tests)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
USER, PASSWORD = "alice", "bench-secret"

PROFILES = {
    "full": dict(
        sizes=[1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB],
        # This VM has slow periods (page-cache copies 1.5-3x slower for seconds, on any server,
        # pinned or not) that can cover 2-3 reps in a row of one configuration: a median of 3
        # broke on them; 11 for the sizes that last long enough to be caught by one.
        reps={1 * MiB: 7, 16 * MiB: 7, 256 * MiB: 11, 1 * GiB: 11},
        site_files=2400, site_dirs=(6, 5), small_files=2000, small_size=4096, mirror_reps=2,
        parallel=[2, 4, 8],
        wan_delays=[0, 10, 100, 1000, 10000], wan_size=256 * MiB, wan_streams=[2, 4, 8, 16],
        wan_reps=3),
    # --quick: every kind of measurement once, small: a smoke run of the harness (~1-2 min).
    "quick": dict(
        sizes=[1 * MiB, 16 * MiB],
        reps={1 * MiB: 1, 16 * MiB: 1},
        site_files=200, site_dirs=(3, 2), small_files=200, small_size=4096, mirror_reps=1,
        parallel=[4],
        wan_delays=[0, 10000], wan_size=16 * MiB, wan_streams=[4], wan_reps=1),
}

# Large-file configurations: (server, client label). The client label's suffix after "/" is the
# ADTS mode of tierce-ftp.
LARGE_CONFIGS = [
    ("vsftpd", "lftp"), ("vsftpd", "curl"),
    ("tierce-ftpd", "lftp"), ("tierce-ftpd", "curl"),
    ("tierce-ftpd", "tierce-ftp/off"), ("tierce-ftpd", "tierce-ftp/tcp"),
    ("tierce-ftpd", "tierce-ftp/ptcp:4"),
]

# Every ADTS label any part uses (the preflight disables them when ADTS does not work).
ADTS_LABELS = ["tierce-ftp/tcp", "tierce-ftp/ptcp:4"] + \
    [f"tierce-ftp/ptcp:{n}" for n in (2, 4, 8, 16)]

WAN_PASV_PORTS = 64  # size of the passive range relayed in the WAN sweep
RELAY_ADDR = "127.0.0.2"  # the relay's side: every 127/8 address is on lo


class Failed(Exception):
    pass


# A configuration that failed this many times is not run again in this part: a broken client or
# server mode then costs a few timeouts, not one per size and repetition.
MAX_FAILURES = 2


def skip_broken(env, key):
    n = env["broken"].get(key, 0)
    if n == MAX_FAILURES:
        env["missing"].append(f"{' '.join(map(str, key))}: skipped after {n} failures")
        env["broken"][key] = n + 1
    return n >= MAX_FAILURES


def note_failure(env, key):
    env["broken"][key] = env["broken"].get(key, 0) + 1


class Interrupted(Exception):
    pass


def log(msg):
    print(f"[ftp-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def human(n):
    for unit, div in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------------------------------------
# CPU accounting of a server and everything it forks.
#
# Preferred: a cgroup of its own (v1 cpuacct, else the v2 unified hierarchy): run.py moves itself
# into the cgroup while it starts the server (children are born in their parent's cgroup), then
# moves back; the cgroup's usage counter then covers the server's pre-forked workers and session
# processes, alive or gone. Fallback: the sum over the server's session (ftplab starts each server
# with setsid) of utime+stime+cutime+cstime from /proc/<pid>/stat, which counts reaped children
# through their parents.


class CgroupMeter:
    def __init__(self, kind, root, name):
        self.kind, self.root = kind, root
        self.path = os.path.join(root, name)
        os.mkdir(self.path)
        self.home = self._own_cgroup()

    def _own_cgroup(self):
        want = "cpuacct" if self.kind == "cgroup-v1" else ""
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if (want and want in ctrls.split(",")) or (not want and ctrls == ""):
                    return os.path.join(self.root, path.lstrip("/"))
        return self.root

    def usage(self):
        if self.kind == "cgroup-v1":
            with open(os.path.join(self.path, "cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        with open(os.path.join(self.path, "cpu.stat")) as f:
            for line in f:
                k, v = line.split()
                if k == "usage_usec":
                    return int(v) / 1e6
        raise Failed("cpu.stat has no usage_usec")

    @contextlib.contextmanager
    def hosting(self):
        """Everything forked inside this block starts in the cgroup."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        try:
            yield
        finally:
            with open(os.path.join(self.home, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def attach(self, server):
        pass

    def close(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)  # the last server processes are still exiting
        log(f"could not remove cgroup {self.path}")


class ProcMeter:
    kind = "proc"

    def __init__(self):
        self.sid = None
        self.tick = os.sysconf("SC_CLK_TCK")

    @contextlib.contextmanager
    def hosting(self):
        yield

    def attach(self, server):
        self.sid = server.proc.pid

    def usage(self):
        total = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == self.sid:  # field 6 (session) counted after the ")"
                total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        return total / self.tick

    def close(self):
        pass


def make_meter(name):
    tag = f"tierce-ftp-bench-{os.getpid()}-{name}"
    for kind, root in (("cgroup-v1", "/sys/fs/cgroup/cpuacct"), ("cgroup-v2", "/sys/fs/cgroup/unified"),
                       ("cgroup-v2", "/sys/fs/cgroup")):
        probe = os.path.join(root, "cpuacct.usage" if kind == "cgroup-v1" else "cgroup.procs")
        if not os.path.exists(probe):
            continue
        try:
            m = CgroupMeter(kind, root, tag)
            with m.hosting():
                pass
            m.usage()
            return m
        except (OSError, Failed) as e:
            log(f"cgroup {root} not usable ({e}); trying the next way")
            with contextlib.suppress(Exception):
                os.rmdir(os.path.join(root, tag))
    return ProcMeter()


# ------------------------------------------------------------------------------------------------
# Servers


class Server:
    """A running server with its CPU meter and how clients reach it."""

    def __init__(self, name, launcher, meter, host, user, password, upload_dir):
        self.name, self.launcher, self.meter = name, launcher, meter
        self.host, self.user, self.password = host, user, password
        self.upload_dir = upload_dir
        self.port = None

    def start(self):
        with self.meter.hosting():
            self.launcher.start()
        self.meter.attach(self.launcher)
        self.port = self.launcher.port
        return self

    def stop(self):
        with contextlib.suppress(Exception):
            self.launcher.stop()
        self.meter.close()

    def check_alive(self):
        if not self.launcher.alive():
            raise Failed(f"{self.name} exited:\n{self.launcher.log_text()[-3000:]}")

    def url(self, path, host=None, port=None, with_user=True):
        host, port = host or self.host, port or self.port
        auth = f"{self.user}:{self.password}@" if with_user and self.user != "anonymous" else ""
        return f"ftp://{auth}{host}:{port}{path}"


def start_vsftpd(root):
    # The same logging as tierce-ftpd below (an xferlog line per file), no command log.
    v = ftplab.Vsftpd(root, anonymous=True, write=True,
                      extra="log_ftp_protocol=NO\ndual_log_enable=NO")
    s = Server("vsftpd", v, make_meter("vsftpd"), "127.0.0.1", "anonymous", "bench@", "/upload")
    return s.start()


def start_tierce(binary, root, name="tierce-ftpd", pasv_ports="0", pasv_address=None):
    t = ftplab.TierceFtpd(binary, root, users=((USER, PASSWORD, None, True),), workers=4,
                          max_sessions=128, pasv_ports=pasv_ports, pasv_address=pasv_address,
                          log_level="warn", max_streams=16,
                          # the tree is shared with vsftpd: only tierce's upload dir is the
                          # sessions' (as root, they run as nobody: privilege separation)
                          session_owned=[os.path.join(root, "tupload")])
    s = Server(name, t, make_meter(name), "127.0.0.1", USER, PASSWORD, "/tupload")
    return s.start()


# ------------------------------------------------------------------------------------------------
# Clients


class Clients:
    def __init__(self, tierce_ftp, timeout):
        self.tierce_ftp = tierce_ftp
        self.timeout = timeout  # tierce-ftp --timeout: connect/data timeout, seconds
        self.have = {"lftp": shutil.which("lftp"), "curl": shutil.which("curl"),
                     "tierce-ftp": tierce_ftp}
        self.disabled = set()  # labels whose ADTS mode failed the preflight

    def available(self, label):
        return bool(self.have[label.split("/")[0]]) and label not in self.disabled

    def preflight(self, server, root, work):
        """One small ADTS get per mode before the real runs: a mode that does not work at all is
        reported once and left out, instead of costing a timeout per size and repetition."""
        src = os.path.join(root, "large", "preflight.bin")
        write_file(src, 64 << 10, 5)
        problems = []
        for mode in ("tcp", "ptcp:4"):
            if f"tierce-ftp/{mode}" in self.disabled:
                continue
            dst = os.path.join(work, "preflight.bin")
            argv = [self.tierce_ftp, "--quiet", "--timeout", "10", "--adts", mode, "get",
                    server.url("/large/preflight.bin"), dst]
            try:
                run_client(argv, 60)
                if os.path.getsize(dst) != 64 << 10:
                    raise Failed(f"{dst}: wrong size")
            except (Failed, OSError) as e:
                problems.append(f"tierce-ftp --adts {mode} does not work: {e}")
                # TCP failing means the session itself does not work: every ADTS mode (and auto,
                # which picks TCP) goes; PTCP failing takes only the parallel modes.
                self.disabled.update(l for l in ADTS_LABELS + ["tierce-ftp/auto"]
                                     if mode == "tcp" or ":" in l)
            with contextlib.suppress(FileNotFoundError):
                os.remove(dst)
        os.remove(src)
        return problems

    @staticmethod
    def _lftp(server, host, port, commands):
        script = ("set cmd:fail-exit yes; set net:max-retries 1; set net:timeout 30; "
                  "set net:reconnect-interval-base 1; set xfer:clobber on; set ftp:ssl-allow no; "
                  f"open -u {server.user},{server.password} ftp://{host}:{port}; " + commands)
        return ["lftp", "-c", script]

    def argv(self, label, server, op, remote, local, host=None, port=None):
        """One get or put. remote: server path; local: local file."""
        host, port = host or server.host, port or server.port
        kind, _, mode = label.partition("/")
        if kind == "lftp":
            cmd = f"get {remote} -o {local}" if op == "get" else f"put {local} -o {remote}"
            return self._lftp(server, host, port, cmd)
        if kind == "curl":
            base = ["curl", "-sS", "--connect-timeout", "30", "--max-time", "900"]
            url = server.url(remote, host, port)
            return base + (["-o", local, url] if op == "get" else ["-T", local, url])
        if kind == "tierce-ftp":
            base = [self.tierce_ftp, "--quiet", "--timeout", str(self.timeout), "--adts",
                    mode or "auto"]
            url = server.url(remote, host, port)
            return base + (["get", url, local] if op == "get" else ["put", local, url])
        raise ValueError(label)

    def mirror_argv(self, label, server, remote_dir, local_dir, parallel):
        kind, _, mode = label.partition("/")
        if kind == "lftp":
            par = f"--parallel={parallel} " if parallel > 1 else ""
            return self._lftp(server, server.host, server.port,
                              f"mirror {par}{remote_dir} {local_dir}")
        if kind == "tierce-ftp":
            return [self.tierce_ftp, "--quiet", "--timeout", str(self.timeout), "--adts",
                    mode or "auto",
                    "-P", str(parallel), "mirror", server.url(remote_dir), local_dir]
        raise ValueError(label)


# --pin: servers (started from this process) run on CPU 0, clients on CPU 1 (taskset), so the
# VM's scheduler cannot pack a client and a server onto one vCPU for a whole transfer.
CLIENT_CPU_PREFIX = []


def run_client(argv, timeout):
    """Runs a client to completion; returns (wall seconds, client CPU seconds). Raises Failed."""
    argv = CLIENT_CPU_PREFIX + list(argv)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise Failed(f"did not finish within {timeout:.0f} s (a hang?): {' '.join(argv)}\n"
                     f"{(e.stderr or b'').decode(errors='replace')[-2000:]}")
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        out = (p.stdout + p.stderr).decode(errors="replace").strip()[-2000:]
        raise Failed(f"exited {p.returncode}: {' '.join(argv)}\n{out}")
    return wall, cpu


def server_cpu_during(server, fn):
    """Runs fn(); returns (fn's result, the server's CPU seconds meanwhile). The server finishes
    its side of a session (logging, exiting a session process) a moment after the client is
    done: wait until its counter stops moving, at most 1 s."""
    c0 = server.meter.usage()
    res = fn()
    last, deadline = server.meter.usage(), time.monotonic() + 1.0
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = server.meter.usage()
        if now - last < 0.0005:
            break
        last = now
    return res, server.meter.usage() - c0


# ------------------------------------------------------------------------------------------------
# Data


def write_file(path, size, seed):
    """`size` bytes of incompressible data (a 16 MiB random block repeated; FTP does not care)."""
    block = random.Random(seed).randbytes(min(size, 16 * MiB))
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n


def zipf_tree(n_files, dirs, seed):
    """{relative path: size}: sizes Zipf-like by rank, ~6 MiB for rank 1 down to a few hundred
    bytes, with +-20 % jitter; files spread over dirs[0] top-level dirs with dirs[1] subdirs each
    (and the top levels themselves)."""
    rng = random.Random(seed)
    top, sub = dirs
    folders = []
    for i in range(top):
        folders.append(f"d{i:02d}")
        folders += [f"d{i:02d}/s{j:02d}" for j in range(sub)]
    files = {}
    for rank in range(1, n_files + 1):
        size = max(200, int(6 * MiB / rank ** 1.2 * rng.uniform(0.8, 1.2)))
        files[f"{rng.choice(folders)}/f{rank:05d}.dat"] = size
    return files


def small_tree(n_files, size):
    return {f"b{i % 10:02d}/s{i:05d}.dat": size for i in range(n_files)}


def tree_stats(root):
    n = total = 0
    for d, _, fs in os.walk(root):
        for f in fs:
            n += 1
            total += os.path.getsize(os.path.join(d, f))
    return n, total


def make_tree(root, files, seed):
    """Like ftplab.make_tree, but quicker for thousands of files (one random pool sliced)."""
    pool = random.Random(seed).randbytes(8 * MiB)
    rng = random.Random(seed + 1)
    for rel, size in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            left = size
            while left:
                off = rng.randrange(0, len(pool) - min(left, len(pool)) + 1)
                n = min(left, len(pool) - off)
                f.write(pool[off:off + n])
                left -= n


# ------------------------------------------------------------------------------------------------
# Statistics


def best_median(xs):
    if not xs:
        return None, None
    return max(xs), statistics.median(xs)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def parse_size(text):
    """'16M' / '1G' / '4096' -> bytes."""
    units = {"K": KiB, "M": MiB, "G": GiB}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = units.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in units else t
    if not digits.isdigit() or int(digits) == 0:
        raise ValueError(f"not a size: {text!r} (e.g. 16M, 1G)")
    return int(digits) * mult


def fmt(v, nd=1, width=7):
    if v is None:
        return "n/a".rjust(width)
    return f"{v:.{nd}f}".rjust(width)


def verdict(ok):
    return "N/A " if ok is None else ("PASS" if ok else "MISS")


# ------------------------------------------------------------------------------------------------
# Part a: large files


def part_large(prof, args, env, failures, rows):
    root, clients = env["root"], env["clients"]
    sizes = prof["sizes"]
    for size in sizes:
        write_file(os.path.join(root, "large", f"f{human(size).replace(' ', '')}.bin"), size, size)
    configs = [(s, c) for s, c in LARGE_CONFIGS if s in env["servers"] and clients.available(c)]
    for s, c in LARGE_CONFIGS:
        if (s, c) not in configs:
            env["missing"].append(f"large: {s} + {c} (not available)")
    local = os.path.join(env["work"], "client")
    os.makedirs(local, exist_ok=True)
    for size in sizes:
        name = f"f{human(size).replace(' ', '')}.bin"
        src = os.path.join(root, "large", name)
        reps = args.reps or prof["reps"].get(size, 7)
        timeout = 120 + size / (20 * MiB)
        log(f"large: {human(size)} x {reps} reps, {len(configs)} configurations, get and put")
        for rep in range(reps):
            # Configurations interleaved within each repetition: slow drift of a busy machine
            # spreads over all of them instead of landing on one.
            for server_name, label in configs:
                server = env["servers"][server_name]
                for op in ("get", "put"):
                    if skip_broken(env, ("large", server_name, label, op)):
                        continue
                    dst = os.path.join(local, name)
                    remote_up = f"{server.upload_dir}/{name}"
                    up_path = os.path.join(root, server.upload_dir.lstrip("/"), name)
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(dst)
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(up_path)
                    if op == "get":
                        argv = clients.argv(label, server, "get", f"/large/{name}", dst)
                        out = dst
                    else:
                        argv = clients.argv(label, server, "put", remote_up, src)
                        out = up_path
                    row = dict(part="large", server=server_name, client=label, op=op, size=size,
                               rep=rep, seconds=None, mb_s=None, server_cpu=None,
                               client_cpu=None, error="")
                    try:
                        server.check_alive()
                        (wall, ccpu), scpu = server_cpu_during(
                            server, lambda: run_client(argv, timeout))
                        got = os.path.getsize(out) if os.path.exists(out) else -1
                        if got != size:
                            raise Failed(f"{out} has {got} bytes, expected {size}")
                        row.update(seconds=wall, mb_s=size / wall / 1e6, server_cpu=scpu,
                                   client_cpu=ccpu)
                    except Failed as e:
                        row["error"] = str(e).splitlines()[0][:200]
                        failures.append(f"large {server_name}+{label} {op} {human(size)}: {e}")
                        note_failure(env, ("large", server_name, label, op))
                        log(f"FAILED large {server_name}+{label} {op} {human(size)}: {e}")
                    rows.append(row)
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(dst)
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(up_path)


def summarize_large(rows):
    """{(server, client, op, size): dict(best, median, server_cpu_gib, client_cpu_gib, n)}."""
    groups = {}
    for r in rows:
        if r["part"] != "large" or r["mb_s"] is None:
            continue
        groups.setdefault((r["server"], r["client"], r["op"], r["size"]), []).append(r)
    out = {}
    for k, rs in groups.items():
        size = k[3]
        best, med = best_median([r["mb_s"] for r in rs])
        out[k] = dict(best=best, median=med, n=len(rs),
                      server_cpu_gib=statistics.median(r["server_cpu"] for r in rs) * GiB / size,
                      client_cpu_gib=statistics.median(r["client_cpu"] for r in rs) * GiB / size)
    return out


def table_large(summary, sizes, lines, targets):
    lines.append("Part a — large files (RAM-backed). MB/s = best / median of the reps (10^6 B/s, "
                 "client wall time incl. login);")
    lines.append("CPU = median CPU seconds per GiB moved (server: its cgroup; client: its rusage).")
    for op in ("get", "put"):
        lines.append("")
        lines.append(f"  {op.upper():4} {'server':<12} {'client':<18}" +
                     "".join(f"{human(s):>28}" for s in sizes))
        lines.append(f"  {'':4} {'':<12} {'':<18}" +
                     "".join(f"{'MB/s best/med  CPU srv/cli':>28}" for s in sizes))
        for server, client in LARGE_CONFIGS:
            cells = []
            any_ = False
            for s in sizes:
                v = summary.get((server, client, op, s))
                if v:
                    any_ = True
                    cells.append(f"{v['best']:6.0f}/{v['median']:<6.0f} {v['server_cpu_gib']:5.2f}/"
                                 f"{v['client_cpu_gib']:<5.2f}".rjust(28))
                else:
                    cells.append("n/a".rjust(28))
            if any_:
                lines.append(f"  {'':4} {server:<12} {client:<18}" + "".join(cells))
    lines.append("")
    lines.append("  tierce-ftpd / vsftpd, same client (targets: throughput >= 1, server CPU/GiB <= 1):")
    lines.append(f"  {'op':4} {'client':<6} {'size':>8} {'MB/s ratio':>11} {'srv CPU ratio':>14}")
    for op in ("get", "put"):
        for client in ("lftp", "curl"):
            for s in sizes:
                t = summary.get(("tierce-ftpd", client, op, s))
                v = summary.get(("vsftpd", client, op, s))
                if not t or not v:
                    continue
                rt = ratio(t["median"], v["median"])
                rc = ratio(t["server_cpu_gib"], v["server_cpu_gib"])
                lines.append(f"  {op:4} {client:<6} {human(s):>8} {fmt(rt, 2, 11)} {fmt(rc, 2, 14)}")
                if s >= 16 * MiB:  # 1 MiB is all login and process start: no target there
                    targets.append((rt is not None and rt >= 0.95,
                                    f"large {op} {human(s)} via {client}: tierce-ftpd/vsftpd "
                                    f"throughput {fmt(rt, 2, 0)} (>= 1, 5 % noise allowed)"))
                    targets.append((rc is not None and rc <= 1.05,
                                    f"large {op} {human(s)} via {client}: tierce-ftpd/vsftpd "
                                    f"server CPU/GiB {fmt(rc, 2, 0)} (<= 1, 5 % noise allowed)"))


# ------------------------------------------------------------------------------------------------
# Part b: mirror


def part_mirror(prof, args, env, failures, rows):
    root, clients = env["root"], env["clients"]
    trees = {
        "site": zipf_tree(prof["site_files"], prof["site_dirs"], 2024),
        "small": small_tree(prof["small_files"], prof["small_size"]),
    }
    for name, files in trees.items():
        make_tree(os.path.join(root, name), files, 77)
        n, total = tree_stats(os.path.join(root, name))
        env["trees"][name] = (n, total)
        log(f"mirror: tree {name}: {n} files, {total / MiB:.1f} MiB, "
            f"{len({os.path.dirname(p) for p in files})} dirs")
    pars = [1] + prof["parallel"]
    configs = []
    for p in pars:
        configs.append(("vsftpd", "lftp", p))
    for p in pars:
        configs.append(("tierce-ftpd", "lftp", p))
    for mode in ("auto", "off"):
        for p in pars:
            configs.append(("tierce-ftpd", f"tierce-ftp/{mode}", p))
    configs = [c for c in configs if c[0] in env["servers"] and clients.available(c[1])]
    local = os.path.join(env["work"], "mirror")
    reps = args.reps or prof["mirror_reps"]
    for tree in trees:
        want = env["trees"][tree]
        log(f"mirror: {tree} x {reps} reps, {len(configs)} configurations")
        for rep in range(reps):
            for server_name, label, par in configs:
                if skip_broken(env, ("mirror", server_name, label)):
                    continue
                server = env["servers"][server_name]
                shutil.rmtree(local, ignore_errors=True)
                argv = clients.mirror_argv(label, server, f"/{tree}", local, par)
                row = dict(part="mirror", tree=tree, server=server_name, client=label,
                           parallel=par, rep=rep, files=want[0], bytes=want[1], seconds=None,
                           files_s=None, server_cpu=None, client_cpu=None, error="")
                try:
                    server.check_alive()
                    (wall, ccpu), scpu = server_cpu_during(server, lambda: run_client(argv, 900))
                    got = tree_stats(local)
                    if got != want:
                        raise Failed(f"mirror has {got[0]} files / {got[1]} bytes, expected "
                                     f"{want[0]} / {want[1]}")
                    row.update(seconds=wall, files_s=want[0] / wall, server_cpu=scpu,
                               client_cpu=ccpu)
                except Failed as e:
                    row["error"] = str(e).splitlines()[0][:200]
                    failures.append(f"mirror {tree} {server_name}+{label} P={par}: {e}")
                    note_failure(env, ("mirror", server_name, label))
                    log(f"FAILED mirror {tree} {server_name}+{label} P={par}: {e}")
                rows.append(row)
    shutil.rmtree(local, ignore_errors=True)


def summarize_mirror(rows):
    groups = {}
    for r in rows:
        if r["part"] == "mirror" and r["seconds"] is not None:
            groups.setdefault((r["tree"], r["server"], r["client"], r["parallel"]), []).append(r)
    return {k: dict(best=min(r["seconds"] for r in rs),
                    median=statistics.median(r["seconds"] for r in rs),
                    server_cpu=statistics.median(r["server_cpu"] for r in rs),
                    client_cpu=statistics.median(r["client_cpu"] for r in rs), n=len(rs))
            for k, rs in groups.items()}


def table_mirror(summary, trees, lines, targets):
    lines.append("Part b — mirror (remote -> local, RAM-backed). Seconds = best / median; "
                 "CPU = median seconds per run.")
    for tree, (n, total) in trees.items():
        lines.append("")
        lines.append(f"  tree {tree}: {n} files, {total / MiB:.1f} MiB")
        lines.append(f"  {'server':<12} {'client':<16} {'P':>2} {'best s':>8} {'median s':>9} "
                     f"{'files/s':>8} {'srv CPU':>8} {'cli CPU':>8}")
        keys = sorted((k for k in summary if k[0] == tree),
                      key=lambda k: (k[1] != "vsftpd", k[2], k[3]))
        for k in keys:
            v = summary[k]
            lines.append(f"  {k[1]:<12} {k[2]:<16} {k[3]:>2} {v['best']:8.2f} {v['median']:9.2f} "
                         f"{n / v['median']:8.0f} {v['server_cpu']:8.2f} {v['client_cpu']:8.2f}")
        lftp = [(v["median"], k) for k, v in summary.items()
                if k[0] == tree and k[1] == "vsftpd" and k[2] == "lftp"]
        tier = [(v["median"], k) for k, v in summary.items()
                if k[0] == tree and k[1] == "tierce-ftpd" and k[2].startswith("tierce-ftp")]
        if lftp and tier:
            bl, bt = min(lftp), min(tier)
            r = ratio(bl[0], bt[0])
            lines.append(f"  best lftp (vsftpd, P={bl[1][3]}) {bl[0]:.2f} s vs best tierce-ftp "
                         f"({bt[1][2]}, P={bt[1][3]}) {bt[0]:.2f} s: speedup {fmt(r, 2, 0)}")
            targets.append((r is not None and r >= 2.0,
                            f"mirror {tree}: best tierce-ftp vs best lftp mirror speedup "
                            f"{fmt(r, 2, 0)} (>= 2)"))


# ------------------------------------------------------------------------------------------------
# Part c: WAN sweep


def find_port_range(count):
    """A run of `count` ports free on both 127.0.0.1 (server) and 127.0.0.2 (relay), below the
    ephemeral range. After the mirror part tens of thousands of TIME_WAIT connections sit on
    ports all over 1024-65535 (vsftpd picks passive ports at random there): the probe binds with
    SO_REUSEADDR, as tierce-ftpd's passive listeners and tierce-wanem do, so a port whose only
    user is a TIME_WAIT socket counts as free."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    lo_bound = 10000 if low > 10000 + 4 * count else 1024
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(lo_bound, max(lo_bound + 1, low - count))
        held = []
        ok = True
        try:
            for p in range(base, base + count):
                for host in ("127.0.0.1", RELAY_ADDR):
                    s = socket.socket()
                    held.append(s)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind((host, p))
                    except OSError:
                        ok = False
                        break
                if not ok:
                    break
        finally:
            for s in held:
                s.close()
        if ok:
            return base, base + count - 1
    raise Failed(f"no run of {count} free ports found")


def part_wan(prof, args, env, failures, rows):
    clients, root = env["clients"], env["root"]
    if not env["wanem"] or not env["tierce_ftpd"]:
        env["missing"].append("wan: needs tierce-wanem and tierce-ftpd")
        return
    size = prof["wan_size"]
    name = f"w{human(size).replace(' ', '')}.bin"
    write_file(os.path.join(root, "large", name), size, size + 1)
    lo, hi = find_port_range(WAN_PASV_PORTS)
    server = start_tierce(env["tierce_ftpd"], root, "tierce-ftpd-wan", f"{lo}-{hi}", RELAY_ADDR)
    env["cleanup"].append(server.stop)
    labels = ["tierce-ftp/off", "curl", "tierce-ftp/tcp"] + \
        [f"tierce-ftp/ptcp:{n}" for n in prof["wan_streams"]]
    labels = [l for l in labels if clients.available(l)]
    local = os.path.join(env["work"], "wan")
    os.makedirs(local, exist_ok=True)
    dst = os.path.join(local, name)
    reps = args.reps or prof["wan_reps"]
    try:
        for delay in prof["wan_delays"]:
            fwd = [f"{RELAY_ADDR}:{server.port}=127.0.0.1:{server.port}",
                   f"{RELAY_ADDR}:{lo}-{hi}=127.0.0.1:{lo}-{hi}"]
            relay = ftplab.Relay(env["wanem"], fwd, delay_us=delay)
            try:
                relay.start()
            except Exception as e:
                failures.append(f"wan: tierce-wanem did not start at delay {delay} us: {e}")
                log(f"FAILED wan: relay at {delay} us: {e}")
                continue
            log(f"wan: one-way delay {delay} us, {human(size)} x {reps}, {len(labels)} clients")
            try:
                for rep in range(reps):
                    for label in labels:
                        if skip_broken(env, ("wan", label)):
                            continue
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(dst)
                        argv = clients.argv(label, server, "get", f"/large/{name}", dst,
                                            host=RELAY_ADDR, port=server.port)
                        row = dict(part="wan", delay_us=delay, client=label, size=size, rep=rep,
                                   seconds=None, mb_s=None, error="")
                        try:
                            server.check_alive()
                            if not relay.alive():
                                raise Failed(f"tierce-wanem exited:\n{relay.log_text()[-2000:]}")
                            wall, _ = run_client(argv, 120 + size / (5 * MiB))
                            got = os.path.getsize(dst) if os.path.exists(dst) else -1
                            if got != size:
                                raise Failed(f"{dst} has {got} bytes, expected {size}")
                            row.update(seconds=wall, mb_s=size / wall / 1e6)
                        except Failed as e:
                            row["error"] = str(e).splitlines()[0][:200]
                            failures.append(f"wan {delay} us {label}: {e}")
                            note_failure(env, ("wan", label))
                            log(f"FAILED wan {delay} us {label}: {e}")
                        rows.append(row)
            finally:
                relay.stop()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(dst)


def summarize_wan(rows):
    groups = {}
    for r in rows:
        if r["part"] == "wan" and r["mb_s"] is not None:
            groups.setdefault((r["delay_us"], r["client"]), []).append(r)
    return {k: dict(best=max(r["mb_s"] for r in rs),
                    median=statistics.median(r["mb_s"] for r in rs),
                    seconds=statistics.median(r["seconds"] for r in rs), n=len(rs))
            for k, rs in groups.items()}


def table_wan(summary, delays, size, lines, targets):
    labels = []
    for (_, l) in summary:
        if l not in labels:
            labels.append(l)
    order = ["tierce-ftp/off", "curl", "tierce-ftp/tcp"]
    labels.sort(key=lambda l: (order.index(l) if l in order else 3,
                               int(l.split(":")[1]) if ":" in l else 0))
    lines.append(f"Part c — WAN sweep: get of {human(size)} through tierce-wanem (one-way delay D, "
                 "default 3 MiB window per direction);")
    lines.append("  median MB/s (median seconds). 'tierce-ftp/off' and 'curl' = one default TCP "
                 "stream; tcp/ptcp:N = ADTS.")
    lines.append("")
    lines.append(f"  {'client':<20}" + "".join(f"{str(d) + ' us':>18}" for d in delays))
    for l in labels:
        cells = []
        for d in delays:
            v = summary.get((d, l))
            cells.append((f"{v['median']:7.0f} ({v['seconds']:6.2f}s)" if v else "n/a").rjust(18))
        lines.append(f"  {l:<20}" + "".join(cells))
    for d in delays:
        base = summary.get((d, "tierce-ftp/off"))
        adts = [(v["median"], l) for (dd, l), v in summary.items()
                if dd == d and l.startswith("tierce-ftp/") and l != "tierce-ftp/off"]
        if base and adts:
            b = max(adts)
            r = ratio(b[0], base["median"])
            lines.append(f"  {d:>6} us: best ADTS ({b[1].split('/')[1]}) {b[0]:.0f} MB/s vs one TCP "
                         f"stream {base['median']:.0f} MB/s: {fmt(r, 2, 0)}x")
            if d == 10000:
                targets.append((r is not None and r >= 2.0,
                                f"WAN at 10 ms one-way: best ADTS vs one default TCP stream "
                                f"{fmt(r, 2, 0)}x (>= 2)"))


# ------------------------------------------------------------------------------------------------
# Output


def write_csv(path, rows, fields):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def plots(out, large, mirror, wan, sizes, trees, delays):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        log(f"no plots: matplotlib is not importable by {sys.executable} ({e}); "
            "Debian: apt-get install python3-matplotlib")
        return []
    made = []
    if large:
        fig, axes = plt.subplots(2, 2, figsize=(13, 9))
        for col, op in enumerate(("get", "put")):
            for server, client in LARGE_CONFIGS:
                xs = [s for s in sizes if (server, client, op, s) in large]
                if not xs:
                    continue
                lab = f"{server} + {client}"
                style = "-" if server == "tierce-ftpd" else "--"
                axes[0][col].plot([x / MiB for x in xs],
                                  [large[(server, client, op, x)]["median"] for x in xs],
                                  style, marker="o", label=lab)
                axes[1][col].plot([x / MiB for x in xs],
                                  [large[(server, client, op, x)]["server_cpu_gib"] for x in xs],
                                  style, marker="o", label=lab)
            axes[0][col].set_title(f"{op}: throughput (median)")
            axes[0][col].set_ylabel("MB/s")
            axes[1][col].set_title(f"{op}: server CPU seconds per GiB (median)")
            axes[1][col].set_ylabel("CPU s / GiB")
            for r in (0, 1):
                axes[r][col].set_xscale("log", base=2)
                axes[r][col].set_xlabel("file size (MiB)")
                axes[r][col].grid(True, alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle("Large files on RAM-backed storage (seed 000 Fig. 9.3 / 9.7)")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "large.png"), dpi=110)
        plt.close(fig)
        made.append("large.png")
    if mirror:
        fig, axes = plt.subplots(1, len(trees), figsize=(7 * len(trees), 5), squeeze=False)
        for i, tree in enumerate(trees):
            keys = sorted((k for k in mirror if k[0] == tree),
                          key=lambda k: (k[1] != "vsftpd", k[2], k[3]))
            ax = axes[0][i]
            ax.barh([f"{k[1]} + {k[2]} P={k[3]}" for k in keys],
                    [mirror[k]["median"] for k in keys],
                    color=["tab:gray" if k[2] == "lftp" else "tab:blue" for k in keys])
            ax.invert_yaxis()
            ax.set_xlabel("seconds (median)")
            n, total = trees[tree]
            ax.set_title(f"mirror of '{tree}': {n} files, {total / MiB:.0f} MiB")
            ax.grid(True, axis="x", alpha=0.3)
            ax.tick_params(axis="y", labelsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "mirror.png"), dpi=110)
        plt.close(fig)
        made.append("mirror.png")
    if wan:
        fig, ax = plt.subplots(figsize=(9, 6))
        labels = sorted({l for (_, l) in wan})
        for l in labels:
            ds = [d for d in delays if (d, l) in wan]
            ax.plot([max(d, 1) for d in ds], [wan[(d, l)]["median"] for d in ds],
                    "--" if l in ("tierce-ftp/off", "curl") else "-", marker="o", label=l)
        ax.set_xscale("log")
        ax.set_xticks([max(d, 1) for d in delays])
        ax.set_xticklabels([str(d) for d in delays])
        ax.set_xlabel("one-way delay (us; 0 plotted at 1)")
        ax.set_ylabel("MB/s (median)")
        ax.set_title("WAN sweep through tierce-wanem (seed 000 Fig. 9.4)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "wan.png"), dpi=110)
        plt.close(fig)
        made.append("wan.png")
    return made


def find_binary(build, name):
    try:
        return ftplab.find_binary(build, name)
    except FileNotFoundError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: small sizes, 1 rep")
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="build directory with tierce-ftpd, tierce-ftp, tierce-wanem")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--parts", default="large,mirror,wan")
    ap.add_argument("--reps", type=int, default=0, help="override every repetition count")
    ap.add_argument("--sizes", default="",
                    help="large part: only these sizes, e.g. 256M,1G (default: the profile's)")
    ap.add_argument("--tmp", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the RAM-backed files go (default /dev/shm)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--pin", action="store_true",
                    help="servers on CPU 0, clients on CPU 1 (same for every server and client)")
    args = ap.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in ("large", "mirror", "wan")]
    if bad or args.reps < 0:
        ap.error(f"unknown part(s) {bad}: use large, mirror, wan" if bad else "--reps must be >= 0")
    if os.geteuid() != 0:
        ap.error("needs root: vsftpd's private instance (chroot, ftp user) and the cgroups")
    prof = dict(PROFILES["quick" if args.quick else "full"])
    if args.sizes:
        try:
            prof["sizes"] = [parse_size(x) for x in args.sizes.split(",")]
        except ValueError as e:
            ap.error(f"--sizes: {e}")
    if args.pin:
        if (os.cpu_count() or 1) < 2 or not shutil.which("taskset"):
            ap.error("--pin needs 2 CPUs and taskset (util-linux)")
        os.sched_setaffinity(0, {0})  # the servers are started from here and inherit it
        CLIENT_CPU_PREFIX[:] = ["taskset", "-c", "1"]
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    env = dict(servers={}, missing=[], trees={}, cleanup=[], broken={})
    env["tierce_ftpd"] = find_binary(args.build, "tierce-ftpd")
    env["tierce_ftp"] = find_binary(args.build, "tierce-ftp")
    env["wanem"] = find_binary(args.build, "tierce-wanem")
    for b in ("tierce_ftpd", "tierce_ftp", "wanem"):
        if not env[b]:
            env["missing"].append(f"{b.replace('_', '-')} is not built under {args.build}")
    env["clients"] = Clients(env["tierce_ftp"], 20 if args.quick else 60)
    for c in ("lftp", "curl"):
        if not env["clients"].have[c]:
            env["missing"].append(f"{c} is not installed (apt-get install {c})")
    if not os.path.exists(ftplab.Vsftpd.BINARY):
        env["missing"].append("vsftpd is not installed (apt-get install vsftpd)")

    work = tempfile.mkdtemp(prefix="tierce-ftp-bench-", dir=args.tmp)
    os.chmod(work, 0o755)
    env["work"] = work
    env["root"] = root = os.path.join(work, "root")
    for d in ("large", "tupload"):
        os.makedirs(os.path.join(root, d))
    os.chmod(os.path.join(root, "tupload"), 0o777)
    failures, rows = [], []
    started = datetime.datetime.now()
    log(f"work dir {work} ({'quick' if args.quick else 'full'} profile; parts {', '.join(parts)})")
    interrupted = False
    try:
        if "large" in parts or "mirror" in parts:
            if os.path.exists(ftplab.Vsftpd.BINARY):
                try:
                    env["servers"]["vsftpd"] = start_vsftpd(root)
                    env["cleanup"].append(env["servers"]["vsftpd"].stop)
                except Exception as e:
                    failures.append(f"vsftpd did not start: {e}")
            if env["tierce_ftpd"]:
                try:
                    env["servers"]["tierce-ftpd"] = start_tierce(env["tierce_ftpd"], root)
                    env["cleanup"].append(env["servers"]["tierce-ftpd"].stop)
                except Exception as e:
                    failures.append(f"tierce-ftpd did not start: {e}")
            for s in env["servers"].values():
                log(f"{s.name} on {s.host}:{s.port}, CPU measured by {s.meter.kind}")
        if env["tierce_ftp"] and env["tierce_ftpd"]:
            pre = env["servers"].get("tierce-ftpd")
            if pre is None and "wan" in parts:
                pre = start_tierce(env["tierce_ftpd"], root, "tierce-ftpd-preflight")
                env["cleanup"].append(pre.stop)
            if pre is not None:
                for problem in env["clients"].preflight(pre, root, work):
                    failures.append(problem)
                    env["missing"].append(problem.split(" does not work")[0] +
                                          ": does not work, its rows are left out")
                    log(f"FAILED preflight: {problem}")
        if "large" in parts:
            part_large(prof, args, env, failures, rows)
        if "mirror" in parts:
            part_mirror(prof, args, env, failures, rows)
        if "wan" in parts:
            part_wan(prof, args, env, failures, rows)
    except Interrupted as e:
        interrupted = True
        log(f"interrupted ({e}): stopping everything")
    except Failed as e:
        failures.append(str(e))
    finally:
        for stop in reversed(env["cleanup"]):
            with contextlib.suppress(Exception):
                stop()
        shutil.rmtree(work, ignore_errors=True)

    large = summarize_large(rows)
    mirror = summarize_mirror(rows)
    wan = summarize_wan(rows)
    lines, targets = [], []
    lines.append(f"benchmarks/ftp — {started:%Y-%m-%d %H:%M} — {'quick' if args.quick else 'full'} "
                 f"profile, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
                 + (" — pinned: servers on CPU 0, clients on CPU 1" if args.pin else ""))
    meters = sorted({s.meter.kind for s in env["servers"].values()})
    if meters:
        lines.append(f"server CPU measured by: {', '.join(meters)}")
    if "large" in parts:
        lines.append("")
        table_large(large, prof["sizes"], lines, targets)
    if "mirror" in parts:
        lines.append("")
        table_mirror(mirror, env["trees"], lines, targets)
    if "wan" in parts:
        lines.append("")
        table_wan(wan, prof["wan_delays"], prof["wan_size"], lines, targets)
    lines.append("")
    lines.append("Targets:")
    for ok, line in targets:
        lines.append(f"  {verdict(ok)}  {line}")
    if not targets:
        lines.append("  (none measured)")
    if env["missing"]:
        lines.append("")
        lines.append("Not measured:")
        lines += [f"  {m}" for m in env["missing"]]
    if failures:
        lines.append("")
        lines.append("Failures:")
        for f in failures:
            lines.append("  " + f.replace("\n", "\n    "))
    text = "\n".join(lines) + "\n"
    print(text)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write(text)
    write_csv(os.path.join(args.out, "large.csv"), [r for r in rows if r["part"] == "large"],
              ["server", "client", "op", "size", "rep", "seconds", "mb_s", "server_cpu",
               "client_cpu", "error"])
    write_csv(os.path.join(args.out, "mirror.csv"), [r for r in rows if r["part"] == "mirror"],
              ["tree", "server", "client", "parallel", "rep", "files", "bytes", "seconds",
               "files_s", "server_cpu", "client_cpu", "error"])
    write_csv(os.path.join(args.out, "wan.csv"), [r for r in rows if r["part"] == "wan"],
              ["delay_us", "client", "size", "rep", "seconds", "mb_s", "error"])
    made = [] if args.no_plots else plots(args.out, large, mirror, wan, prof["sizes"],
                                          env["trees"], prof["wan_delays"])
    log(f"wrote {args.out}: summary.txt, large.csv, mirror.csv, wan.csv"
        + (", " + ", ".join(made) if made else ""))
    if interrupted:
        return 130
    hard_missing = [m for m in env["missing"] if "is not built" in m]
    return 1 if failures or hard_missing else 0


if __name__ == "__main__":
    sys.exit(main())
