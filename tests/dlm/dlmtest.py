"""tests/dlm/dlmtest.py — what the lock manager's Python test drivers (stress.py, fence.py)
share: the lock home computation of the topology, and ports that are free and never repeat."""
import socket
import time
import subprocess
import os


def hash64(data: bytes) -> int:
    """cluster/hash.h: FNV-1a 64, then the splitmix64 finaliser."""
    m = (1 << 64) - 1
    h = 0xCBF29CE484222325
    for c in data:
        h ^= c
        h = (h * 0x100000001B3) & m
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & m
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & m
    h ^= h >> 31
    return h


def home_of(name: str, nodes):
    """cluster::Topology::lock_home_of: rendezvous over the lockd members."""
    key = "%016x" % hash64(name.encode())
    return max(nodes, key=lambda n: hash64((key + "@" + n).encode()))


_taken = set()


def free_port():
    """A free port on 127.0.0.1, never one this process already handed out: ports are chosen
    before the lockds and relays given them bind them, and the kernel may offer a port again
    until then (a repeat made a lockd fail to bind)."""
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port not in _taken:
            _taken.add(port)
            return port


def start_relay(wanem, target, ctl, ready, log_path, procs, timeout=10):
    """Starts a tierce-wanem relay 127.0.0.1:<free port> -> target ("127.0.0.1:P"), waits for its
    ready file and returns (port, process). The port is picked before the relay binds it, so
    another test may take it meanwhile ("Address already in use"): then another port is tried.
    Raises RuntimeError naming the log when the relay cannot start."""
    for _ in range(5):
        port = free_port()
        p = subprocess.Popen([wanem, "--forward", "127.0.0.1:%d=%s" % (port, target),
                              "--delay-us", "0", "--control", ctl, "--ready-file", ready],
                             stdout=open(log_path, "a"), stderr=subprocess.STDOUT,
                             start_new_session=True)
        procs.append(p)
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready) and p.poll() is None:
            if time.monotonic() > deadline:
                raise RuntimeError("relay to %s not ready within %d s (see %s)"
                                   % (target, timeout, log_path))
            time.sleep(0.01)
        if os.path.exists(ready):
            return port, p
        with open(log_path, errors="replace") as f:
            if "Address already in use" not in f.read():
                break
    raise RuntimeError("relay to %s exited %d (see %s)" % (target, p.returncode, log_path))

