"""Process helpers of tierce-cluster: start in a new session, identify, signal (the whole process
group: an httpd and its children), stop, wait, tail logs."""

import os
import signal
import socket
import subprocess
import time

# Popen objects of the processes this Python process started (so they can be reaped in-process).
_children = {}


def proc_starttime(pid):
    """Start time of pid (clock ticks since boot, /proc/PID/stat field 22), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    # rest[0] is field 3 (state); field 22 is rest[19].
    if rest and rest[0] == "Z":
        return None
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def state(pid):
    """The state letter of pid (/proc/PID/stat field 3: R, S, T stopped, Z, ...), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return rest[0] if rest else None


def reap(pid):
    p = _children.get(pid)
    if p is not None:
        if p.poll() is not None:
            _children.pop(pid, None)
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def alive(rec):
    """rec: a process record {pid, starttime, ...}. True if that very process still runs."""
    pid = rec.get("pid")
    if not pid:
        return False
    reap(pid)
    st = proc_starttime(pid)
    return st is not None and st == rec.get("starttime")


IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip"


def spawn(name, argv, log_path, cwd=None, env=None, user=None, group=None, netns=None):
    """Starts argv in a new session (own process group) with stdout+stderr to log_path; with
    netns, inside that network namespace (`ip netns exec` execs argv: same pid, and the record
    keeps argv itself, so that leftover_members recognises the program)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    log = open(log_path, "ab")
    run = [IP, "netns", "exec", netns] + list(argv) if netns else argv
    try:
        p = subprocess.Popen(run, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             cwd=cwd, env=env, start_new_session=True, user=user, group=group,
                             close_fds=True)
    finally:
        log.close()
    _children[p.pid] = p
    st = None
    for _ in range(100):
        st = proc_starttime(p.pid)
        if st is not None or p.poll() is not None:
            break
        time.sleep(0.001)
    rec = {"name": name, "pid": p.pid, "pgid": p.pid, "starttime": st, "argv": argv, "log": log_path}
    if netns:
        rec["netns"] = netns
    return rec


def _signal_group(rec, sig):
    if not alive(rec):
        return
    try:
        os.killpg(rec.get("pgid") or rec["pid"], sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        try:
            os.kill(rec["pid"], sig)
        except ProcessLookupError:
            pass


def group_members(pgid, with_state=False):
    """pids whose process group is pgid (children of a killed httpd parent, etc.); with_state:
    (pid, state letter) pairs ("T" = stopped)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                data = f.read().decode("ascii", "replace")
        except OSError:
            continue
        rest = data[data.rfind(")") + 2:].split()
        try:
            if int(rest[2]) == pgid and rest[0] != "Z":
                out.append((int(d), rest[0]) if with_state else int(d))
        except (IndexError, ValueError):
            pass
    return out


def _exe_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0", 1)[0].decode("utf-8", "replace")
    except OSError:
        return None


def leftover_members(rec):
    """Processes left in rec's process group after its leader is gone (an httpd parent killed
    alone leaves its children): only those running rec's program and started after it, so that a
    group id the kernel handed out again (pids wrap at pid_max) is never taken for ours."""
    if not rec or not rec.get("pid") or alive(rec):
        return []
    pgid = rec.get("pgid") or rec["pid"]
    t0 = rec.get("starttime") or 0
    out = []
    for pid in group_members(pgid):
        st = proc_starttime(pid)
        if st is not None and st >= t0 and _exe_of(pid) == rec["argv"][0]:
            out.append(pid)
    return out


def members(rec):
    """Every live process of rec's instance: its process group while the leader lives, else what
    leftover_members finds."""
    if not rec or not rec.get("pid"):
        return []
    if alive(rec):
        return group_members(rec.get("pgid") or rec["pid"])
    return leftover_members(rec)


def signal_instance(rec, sig):
    """Sends sig to every process of rec's instance (leader and children: a stopped httpd must not
    leave children serving, a killed one must not leave children holding its port). Returns the
    pids signalled."""
    pids = members(rec)
    if alive(rec):
        try:
            os.killpg(rec.get("pgid") or rec["pid"], sig)
        except ProcessLookupError:
            pass
    for pid in pids:  # the leftovers of a dead leader (killpg reaches them too while it lives)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return pids


def stop(recs, sig=signal.SIGTERM, deadline=10.0):
    """Signals every record's process group, waits up to deadline, then SIGKILLs what is left
    (leader and group members). Returns the names of the processes that had to be killed."""
    recs = [r for r in recs if r and r.get("pid")]
    started = {id(r): alive(r) for r in recs}
    for r in recs:
        _signal_group(r, sig)
        for pid in leftover_members(r):  # children of a leader killed alone
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig not in (signal.SIGKILL, signal.SIGCONT):
            # A stopped process (tierce-cluster signal ... STOP) acts on TERM only once continued.
            _signal_group(r, signal.SIGCONT)
    end = time.monotonic() + deadline

    def left(r):
        return alive(r) or (started[id(r)] and group_members(r.get("pgid") or r["pid"])) or leftover_members(r)
    while time.monotonic() < end:
        if not any(left(r) for r in recs):
            return []
        time.sleep(0.05)
    killed = []
    for r in recs:
        pgid = r.get("pgid") or r["pid"]
        if left(r):
            killed.append(r["name"])
            _signal_group(r, signal.SIGKILL)
            for pid in (group_members(pgid) if started[id(r)] else []) + leftover_members(r):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    end = time.monotonic() + 5
    while time.monotonic() < end and any(alive(r) for r in recs):
        time.sleep(0.05)
    return killed


def tail(path, lines=20):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(cannot read {path}: {e.strerror})"
    return "\n".join(data.splitlines()[-lines:])


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Listening ports are taken below the kernel's ephemeral range: a port a killed process freed must
# still be free when `restart-proc` binds it again, and the kernel hands ports of the ephemeral
# range to outgoing connections (PHP -> MariaDB, fabric clients, other tests) at any time.
LOW_PORT = 10000


_handed_out = set()


def free_port(host="127.0.0.1"):
    """A free TCP port on host for a server a test is about to start, never one this process
    handed out before (the port is only reserved once the server binds it: until then the kernel
    may offer it again). On 127.0.0.1 below the ephemeral range (free_ports); elsewhere (::1, a
    namespace's address) from the kernel. The one copy every test driver and benchmark uses."""
    for _ in range(1000):
        if host == "127.0.0.1":
            port = free_ports(1)[0]
        else:
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            try:
                s.bind((host, 0))
                port = s.getsockname()[1]
            finally:
                s.close()
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port on %s that was not handed out already" % host)


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1, below the ephemeral port range when it leaves room
    (random, each checked by binding it; all held together, then released), else from the kernel
    (bound to port 0)."""
    import random
    socks = []
    try:
        hi = _ephemeral_low() - 1
        if hi - LOW_PORT >= 1000:
            rng = random.SystemRandom()
            tried = set()
            while len(socks) < n and len(tried) < 4 * (hi - LOW_PORT):
                port = rng.randint(LOW_PORT, hi)
                if port in tried:
                    continue
                tried.add(port)
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    s.close()
                    continue
                socks.append(s)
        while len(socks) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# --- for test drivers that start their own servers (the FTP tests, benchmarks) -----------------


class TempDir:
    """mkdtemp on entry, rmtree on exit (the path is the context value)."""

    def __init__(self, prefix="tierce-"):
        import tempfile
        self.path = tempfile.mkdtemp(prefix=prefix)
        # Searchable by others (not listable): a server that drops to an account after opening
        # what it serves (tierce-ftpd opens a user's root as that account) must reach paths here.
        os.chmod(self.path, 0o711)

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        self.cleanup()

    def cleanup(self):
        if self.path:
            import shutil
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None


def _pdeathsig():
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def popen(argv, log_path=None, **kw):
    """Popen in a new session (own process group), stdout+stderr to log_path (or DEVNULL), killed
    with SIGKILL if this Python process dies (for servers a test owns; tierce-cluster's processes
    outlive the command that started them and use spawn() above)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_pdeathsig, **kw)
    finally:
        if log_path:
            out.close()


def kill_group(proc, grace=5.0):
    """SIGTERM to the process group, SIGKILL after `grace` seconds; returns the exit code."""
    if proc is None:
        return None
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        rc = proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        rc = None
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # leftovers in the group (forked session workers)
    except (ProcessLookupError, PermissionError):
        pass
    if rc is None:
        rc = proc.wait(timeout=10)
    return rc


def wait_for(pred, timeout=30.0, step=0.05):
    """Poll pred() until true (returns its value) or the timeout (returns the last value)."""
    deadline = time.monotonic() + timeout
    v = pred()
    while not v and time.monotonic() < deadline:
        time.sleep(step)
        v = pred()
    return v


def free_port_block(n, host="127.0.0.1", lo=20000, hi=60000):
    """A base port b such that b..b+n-1 were all free a moment ago (for pasv_ports + a relay)."""
    import random
    rnd = random.Random()
    for _ in range(200):
        base = rnd.randrange(lo, hi - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind((host, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no block of %d free ports" % n)
