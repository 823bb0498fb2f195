"""tests/dlm/dlmtest.py — what the lock manager's Python test drivers (stress.py, fence.py)
share: the lock home computation of the topology, and ports that are free and never repeat."""
import socket


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
