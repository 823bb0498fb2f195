"""Process helpers of tierce-cluster: start in a new session, identify, stop, wait, tail logs."""

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


def spawn(name, argv, log_path, cwd=None, env=None, user=None, group=None):
    """Starts argv in a new session (own process group) with stdout+stderr to log_path."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    log = open(log_path, "ab")
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
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
    return {"name": name, "pid": p.pid, "pgid": p.pid, "starttime": st, "argv": argv, "log": log_path}


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


def group_members(pgid):
    """pids whose process group is pgid (children of a killed httpd parent, etc.)."""
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
                out.append(int(d))
        except (IndexError, ValueError):
            pass
    return out


def stop(recs, sig=signal.SIGTERM, deadline=10.0):
    """Signals every record's process group, waits up to deadline, then SIGKILLs what is left
    (leader and group members). Returns the names of the processes that had to be killed."""
    recs = [r for r in recs if r and r.get("pid")]
    started = {id(r): alive(r) for r in recs}
    for r in recs:
        _signal_group(r, sig)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if not any(alive(r) or (started[id(r)] and group_members(r.get("pgid") or r["pid"])) for r in recs):
            return []
        time.sleep(0.05)
    killed = []
    for r in recs:
        pgid = r.get("pgid") or r["pid"]
        if alive(r) or (started[id(r)] and group_members(pgid)):
            killed.append(r["name"])
            _signal_group(r, signal.SIGKILL)
            for pid in group_members(pgid):
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


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (bound to port 0 together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
