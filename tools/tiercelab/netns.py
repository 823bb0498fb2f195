"""Hosts on one machine: each node in its own network namespace with a veth pair and a real
address on a private /24, all joined by a bridge that lives in a namespace of its own (the
"switch"), so nothing changes in the machine's own network namespace. Needs root and iproute2.

    net = netns.Net("dlmb", ["n1", "n2", "n3"])   # creates everything; raises NetError
    net.addr("n2")                                # "10.213.17.3"
    net.cmd("n2", ["tierce-lockd", ...])          # argv that runs there (ip netns exec ...)
    net.destroy()                                 # idempotent; also from an atexit hook

Traffic stays between the namespaces: the switch has no uplink and no address. Unix sockets and
files are shared with the host as usual (only the network is separated), so a process outside can
still reach a daemon's unix socket or read its ready file.

host_link=True adds the one exception: a veth pair from the host's namespace into the bridge, its
host end `<tag>-h` with address 10.213.S.1/24, so that the host (a checker, curl) reaches the
nodes at their addresses. keep=True makes a Net that outlives this process (no atexit cleanup, as
`tierce-cluster up` needs): record `net.names()` and call `netns.remove(...)` later, which also
kills whatever still runs inside. create=False only plans the names (record them first, then
`net.create()`: a crash in between leaves nothing unrecorded).
"""
import atexit
import os
import random
import re
import subprocess

IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip"
_live = []


class NetError(Exception):
    pass


def available():
    """(ok, why): whether namespaces can be made here (root, iproute2, a test namespace)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    if not os.path.exists(IP):
        return False, "iproute2 (ip) is missing"
    name = f"tprobe{os.getpid() % 100000}"
    r = subprocess.run([IP, "netns", "add", name], capture_output=True)
    if r.returncode != 0:
        return False, f"ip netns add failed: {r.stderr.decode().strip()}"
    subprocess.run([IP, "netns", "del", name], capture_output=True)
    return True, ""


def _run(argv, what):
    r = subprocess.run(argv, capture_output=True, timeout=30)
    if r.returncode != 0:
        raise NetError(f"{what}: {' '.join(argv)}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode()


def _used_subnets():
    """The 10.X.Y.0/24 prefixes already on an interface of the host (not to be shadowed)."""
    out = subprocess.run([IP, "-4", "-o", "addr"], capture_output=True).stdout.decode()
    return set(re.findall(r"inet (10\.\d+\.\d+)\.\d+/", out))


class Net:
    """Namespaces `<tag>-<node>` and `<tag>-sw` (names kept short: interface names are at most
    15 bytes). Node i (0-based, in the order given) gets address 10.213.S.(i+2)/24."""

    def __init__(self, tag, nodes, mtu=None, host_link=False, keep=False, create=True):
        if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", tag):
            raise NetError(f"namespace tag {tag!r}: 1-8 lower-case letters and digits")
        if len(nodes) > 250:
            raise NetError("at most 250 nodes on one /24")
        self.tag, self.nodes = f"{tag}{os.getpid() % 10000}", list(nodes)
        used = _used_subnets()
        for _ in range(200):
            prefix = f"10.213.{random.randrange(1, 255)}"
            if prefix not in used:
                break
        else:
            raise NetError("no free 10.213.X.0/24 subnet")
        self.prefix = prefix
        self.switch = f"{self.tag}-sw"
        self.host_if = f"{self.tag}-h" if host_link else None
        self.mtu, self.keep = mtu, keep
        self._made = []  # namespaces created, for destroy()
        if create:
            self.create()

    def create(self):
        if not self.keep:
            _live.append(self)
        try:
            self._create(self.mtu)
        except Exception:
            self.destroy()
            raise

    def names(self):
        """What exists (or will) of this Net, for a record: namespaces, the host interface."""
        return {"namespaces": [self.switch] + [self.ns(n) for n in self.nodes],
                "host_if": self.host_if, "prefix": self.prefix,
                "host_addr": self.host_addr() if self.host_if else None}

    def host_addr(self):
        """The host's address on the bridge (host_link=True)."""
        return f"{self.prefix}.1"

    def ns(self, node):
        return f"{self.tag}-{node}"

    def addr(self, node):
        return f"{self.prefix}.{self.nodes.index(node) + 2}"

    def cmd(self, node, argv):
        """argv run inside node's namespace."""
        return [IP, "netns", "exec", self.ns(node)] + list(argv)

    def _create(self, mtu):
        _run([IP, "netns", "add", self.switch], "switch namespace")
        self._made.append(self.switch)
        sw = [IP, "-n", self.switch]
        _run(sw + ["link", "add", "br0", "type", "bridge"], "bridge")
        _run(sw + ["link", "set", "br0", "up"], "bridge up")
        _run(sw + ["link", "set", "lo", "up"], "switch lo")
        for i, node in enumerate(self.nodes):
            ns = self.ns(node)
            _run([IP, "netns", "add", ns], f"namespace of {node}")
            self._made.append(ns)
            port = f"p{i}"
            # The veth pair is made in the switch, then one end moves into the node and becomes
            # its eth0: no interface ever appears in the host's namespace.
            _run(sw + ["link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns],
                 f"veth pair of {node}")
            _run(sw + ["link", "set", port, "master", "br0"], f"{port} into the bridge")
            _run(sw + ["link", "set", port, "up"], f"{port} up")
            n = [IP, "-n", ns]
            if mtu:
                _run(n + ["link", "set", "eth0", "mtu", str(mtu)], f"mtu of {node}")
                _run(sw + ["link", "set", port, "mtu", str(mtu)], f"mtu of {port}")
            _run(n + ["addr", "add", f"{self.addr(node)}/24", "dev", "eth0"], f"address of {node}")
            _run(n + ["link", "set", "eth0", "up"], f"eth0 of {node} up")
            _run(n + ["link", "set", "lo", "up"], f"lo of {node} up")
        if self.host_if:
            # The one interface in the host's namespace: its peer "host" joins the bridge.
            _run([IP, "link", "add", self.host_if, "type", "veth", "peer", "name", "host",
                  "netns", self.switch], "host veth pair")
            _run(sw + ["link", "set", "host", "master", "br0"], "host port into the bridge")
            _run(sw + ["link", "set", "host", "up"], "host port up")
            _run([IP, "addr", "add", f"{self.host_addr()}/24", "dev", self.host_if], "host address")
            _run([IP, "link", "set", self.host_if, "up"], "host interface up")

    def destroy(self):
        """Deletes the namespaces (their veth ends go with them) and the host interface.
        Processes still running inside keep a namespace alive until they exit: stop them first."""
        for ns in reversed(self._made):
            subprocess.run([IP, "netns", "del", ns], capture_output=True)
        self._made = []
        if self.host_if:
            subprocess.run([IP, "link", "del", self.host_if], capture_output=True)
        if self in _live:
            _live.remove(self)


def pids_in(ns):
    """pids of the processes in namespace ns (ip netns pids), [] when it does not exist."""
    r = subprocess.run([IP, "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split() if p.isdigit()] if r.returncode == 0 else []


def exists(ns):
    return os.path.exists(os.path.join("/run/netns", ns))


def remove(namespaces, host_if=None, kill=True):
    """Deletes recorded namespaces and the host interface; idempotent. kill: SIGKILLs every
    process still inside them first (only ours run there; a process left would keep a namespace
    alive). Returns the pids killed."""
    import signal
    import time
    killed = []
    if kill:
        for ns in namespaces:
            for pid in pids_in(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + 5
        while time.monotonic() < end and any(pids_in(ns) for ns in namespaces):
            time.sleep(0.05)
    for ns in reversed(list(namespaces)):
        if exists(ns):
            subprocess.run([IP, "netns", "del", ns], capture_output=True)
    if host_if:
        if os.path.exists(f"/sys/class/net/{host_if}"):
            subprocess.run([IP, "link", "del", host_if], capture_output=True)
    return killed


@atexit.register
def _cleanup():
    for net in list(_live):
        net.destroy()
