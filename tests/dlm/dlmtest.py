"""tests/dlm/dlmtest.py — what the lock manager's Python test drivers (stress.py, fence.py)
share: the lock home computation of the topology, and relays (ports: tiercelab.procs.free_port)."""
import socket
import time
import subprocess
import os
import sys
# The one free_port (tools/tiercelab/procs.py): never the same port twice in a run.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from tiercelab.procs import free_port  # noqa: E402


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

