#!/usr/bin/python3
"""No writing credential in the processes that run app code (issue 32 point 3, docs/SECURITY.md).

A whole local cluster (tools/tierce-cluster up, the PHP extension on: --php auto), traffic through
it (tierce-check: reads through the proxies, writes on the app nodes, 0 stale reads), then:

1. a memory scan of every httpd process of the app nodes running as www-data (where PHP runs):
   none holds the cluster secret's bytes or a node key file's bytes, none maps or holds a
   descriptor of a Tierce /dev/shm segment (the writer counter); the scan finds the secret in the
   app node's writer agent (the scan works);
2. a PHP script served by an app node tries, as a script would: read the secret file and the node
   keys, open the writer counter and the version table in /dev/shm for writing, find them in its
   own /proc/self/maps: every attempt fails;
3. the proxies' httpd children (www-data) hold no node key, only the secret, and the secret alone
   is a READER's credential (issue 32 point 2, docs/SECURITY.md "Roles"): with it, tierce-fabric
   cannot write a home's version table, CAS or FAA there, send coherence.invalidate or
   coherence.membership — over tcp and over shm (a read-only mapping) — while it still reads;
4. the negative control: the same cluster with --app-secret (the layout before issue 32): the scan
   finds the secret in the app children, so the check above can fail.

  app_credentials_check.py --checker PATH --build DIR [--transport tcp|shm] [--no-control] [--keep]
Exit 0 passed, 1 failed, 77 skipped (not root or a system package missing; on the CI machine,
CI=true, that fails too: tools/tiercelab/prereq.py).
"""
import argparse
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))
from tiercelab import prereq as tprereq  # noqa: E402
CLUSTER = os.path.join(REPO, "tools", "tierce-cluster")

PROBE = r"""<?php
// Written by tests/security/app_credentials_check.py: what a hostile script on an app node tries.
header('Content-Type: application/json');
$out = ['uid' => posix_getuid()];
foreach (json_decode(base64_decode($_GET['files']), true) as $f) {
    $out['read:' . $f] = @file_get_contents($f) !== false;
}
foreach (glob('/dev/shm/tierce.' . $_GET['cluster'] . '.*') as $seg) {
    $h = @fopen($seg, 'r+');
    $out['write:' . $seg] = $h !== false;
    if ($h) fclose($h);
}
$maps = @file_get_contents('/proc/self/maps');
$out['maps_tierce'] = $maps === false ? -1 : preg_match_all('/\/dev\/shm\/tierce\./', $maps);
echo json_encode($out);
"""


def say(msg):
    print(f"app_credentials_check: {msg}", flush=True)


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def needles(d):
    """{what: bytes} a process must not hold: the cluster secret as a process holds it (the key
    scrypt makes of the file's bytes: fabric/auth.h; the file's own bytes are wiped once it is
    made), the file's bytes themselves, and each node key file's base64 body."""
    import hashlib
    out = {}
    with open(os.path.join(d, "secret"), "rb") as f:
        raw = f.read()
    out["the cluster secret"] = hashlib.scrypt(raw.strip(), salt=b"tierce cluster secret v4",
                                               n=1 << 14, r=8, p=1, dklen=32, maxmem=64 << 20)
    out["the secret file's bytes"] = raw.strip()
    for node in sorted(os.listdir(os.path.join(d, "nodes"))):
        key = os.path.join(d, "nodes", node, "node.key")
        if os.path.exists(key):
            with open(key, "rb") as f:
                body = b"".join(l for l in f.read().splitlines() if l and not l.startswith(b"-----"))
            out[f"{node}'s node key"] = body
    for what, n in out.items():
        check(len(n) >= 16, f"{what} is too short to scan for ({len(n)} bytes)")
    return out


def processes(d, pattern):
    """(pid, uid) of every process whose command line contains `pattern`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if pattern in cmd:
            out.append((int(pid), uid))
    return out


def scan(pid, wanted, seen_shared=None):
    """{what: True} for each needle found in a readable mapping of pid; and the Tierce /dev/shm
    mappings and descriptors it holds. A shared mapping (the httpd's scoreboard, PHP's opcache)
    is read once for all the processes that map it (`seen_shared`: its device, inode, offset)."""
    found, shm = {}, []
    seen_shared = set() if seen_shared is None else seen_shared
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read().splitlines()
    with open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*(.*)", line)
            if not m:
                continue
            start, end, perms, offset, dev, inode, name = m.groups()
            if "/dev/shm/tierce." in name:
                shm.append(name)
            if perms[0] != "r":
                continue
            if perms.endswith("s"):
                key = (dev, inode, offset, name, int(end, 16) - int(start, 16))
                if key in seen_shared:
                    continue
                seen_shared.add(key)
            # A read-only mapping of a file (a library, a locale) is the file's bytes, not a copy
            # the process made: a credential read at run time lands in writable memory.
            if "w" not in perms and name.startswith("/") and "(deleted)" not in name:
                continue
            a, b = int(start, 16), int(end, 16)
            if b - a > (1 << 30) or name in ("[vvar]", "[vsyscall]"):
                continue
            try:
                mem.seek(a)
                data = mem.read(b - a)
            except OSError:
                continue
            for what, n in wanted.items():
                if n in data:
                    found[what] = True
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/shm/tierce."):
            shm.append(f"fd {fd} -> {target}")
    return found, shm


def cluster_up(d, a, extra):
    up = [CLUSTER, "up", "--dir", d, "--build", a.build, "--transport", a.transport,
          "--php", "auto", "--bids", "5000"] + extra
    say("running: " + " ".join(up))
    r = subprocess.run(up, stdin=subprocess.DEVNULL)
    check(r.returncode == 0, f"tierce-cluster up exited {r.returncode}")


def traffic(d, a):
    argv = [a.checker, "--cluster", os.path.join(d, "cluster.json"), "--ops", "1500",
            "--json", os.path.join(d, "check.json")]
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, timeout=300)
    with open(os.path.join(d, "check.json")) as f:
        res = json.load(f)
    check(r.returncode == 0, f"tierce-check exited {r.returncode}: {res.get('failures')}")
    check(res.get("writes_ok", 0) > 0, "no write went through: the invalidation path was not exercised")
    say(f"traffic: tierce-check passed: {res.get('writes_ok')} writes, stale reads "
        f"{res.get('stale_reads')}")


def app_children(d):
    www = pwd.getpwnam("www-data").pw_uid
    procs = []
    for node in sorted(os.listdir(os.path.join(d, "nodes"))):
        if node.startswith("app"):
            conf = os.path.join(d, "nodes", node, "conf", "httpd.conf")
            procs += [(node, pid) for pid, uid in processes(d, conf) if uid == www]
    return procs


def scan_app_children(d, wanted):
    """{pid: (node, found, shm)} for every app-node httpd child."""
    out, seen_shared = {}, set()
    for node, pid in app_children(d):
        try:
            found, shm = scan(pid, wanted, seen_shared)
        except OSError:  # exited meanwhile (MaxRequestsPerChild, idle reaping)
            continue
        out[pid] = (node, found, shm)
    return out


def agent_holds_secret(d, wanted):
    conf = os.path.join(d, "nodes", "app1", "writer.toml")
    pids = [pid for pid, _ in processes(d, conf)]
    check(pids, "app1's writer agent is not running")
    found, _ = scan(pids[0], {"the cluster secret": wanted["the cluster secret"]})
    return bool(found)


def proxy_children_hold_no_node_key(d, wanted):
    www = pwd.getpwnam("www-data").pw_uid
    keys = {k: v for k, v in wanted.items() if k != "the cluster secret"}
    n = 0
    seen = set()
    for node in sorted(os.listdir(os.path.join(d, "nodes"))):
        if not node.startswith("proxy"):
            continue
        conf = os.path.join(d, "nodes", node, "conf", "httpd.conf")
        for pid, uid in processes(d, conf):
            if uid != www:
                continue
            try:
                found, _ = scan(pid, keys, seen)
            except OSError:
                continue
            n += 1
            check(not found, f"{node}'s httpd child {pid} holds {', '.join(found)}")
    check(n >= 2, f"only {n} proxy httpd children to scan")
    say(f"memory scan: none of {n} proxy httpd children holds a node key (they hold the secret: "
        "a reader's credential)")


def reader_cannot_write(d, a):
    """What the secret alone (a proxy child's credential) may do at app2's home."""
    tool = os.path.join(a.build, "tools", "tierce-fabric", "tierce-fabric")
    with open(os.path.join(d, "nodes", "app2", "memd.toml")) as f:
        text = f.read()
    uris = re.findall(r'"((?:tcp|shm)://[^"]+)"', text.split("listen", 1)[1].split("\n", 1)[0])
    check(uris, "no listen URIs in app2's memd.toml")
    base = [tool, "--secret-file", os.path.join(d, "secret"), "--timeout", "3000"]
    for uri in uris:
        def run(*args):
            r = subprocess.run(base + list(args), capture_output=True, text=True, timeout=30)
            return r.returncode, (r.stdout + r.stderr).strip()
        rc, out = run("read", uri, "versions", "64")
        check(rc == 0, f"{uri}: a reader cannot read the version table: {out}")
        for args in (("write-u64", uri, "versions", "64", "1"), ("cas", uri, "versions", "64", "0", "1"),
                     ("faa", uri, "versions", "64", "1"), ("write-u64", uri, "acks", "64", "1"),
                     ("call", uri, "coherence.invalidate", "x"),
                     ("call", uri, "coherence.membership", "out app1")):
            rc, out = run(*args)
            check(rc != 0 and "not permitted" in out,
                  f"{uri}: with the secret alone `{' '.join(args[:1] + args[2:])}` was not refused "
                  f"as a reader's: exit {rc}: {out}")
        say(f"reader at {uri}: reads; its writes, CAS, FAA, invalidate and membership calls refused")


def php_probe(d):
    with open(os.path.join(d, "cluster.json")) as f:
        st = json.load(f)
    app = next(n for n in st["nodes"] if n["role"] == "app")
    docroot = app.get("docroot", st["docroot"])
    check(os.path.realpath(docroot).startswith(os.path.realpath(d)),
          f"the app docroot {docroot} is not the cluster's own copy: refusing to write a probe there")
    with open(os.path.join(docroot, "tierce-probe.php"), "w") as f:
        f.write(PROBE)
    files = [os.path.join(d, "secret")] + [
        os.path.join(d, "nodes", n, "node.key") for n in os.listdir(os.path.join(d, "nodes"))
        if os.path.exists(os.path.join(d, "nodes", n, "node.key"))]
    import base64
    q = "files=" + base64.b64encode(json.dumps(files).encode()).decode().replace("+", "%2B").replace(
        "/", "%2F").replace("=", "%3D")
    cluster_tag = os.path.basename(app["segment_prefix"]).split(".")[1]
    url = app["url"] + f"tierce-probe.php?{q}&cluster={cluster_tag}"
    with urllib.request.urlopen(url, timeout=20) as r:
        res = json.loads(r.read().decode())
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checker", required=True)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--transport", choices=["tcp", "shm"], default="tcp")
    ap.add_argument("--no-control", action="store_true", help="skip the --app-secret negative control")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    rc = tprereq.verdict(*tprereq.cluster(a.build, a.checker, extra_targets=("php_ext/tierce.so",)),
                         must_run_in_ci=True)
    if rc is not None:
        return rc
    tprereq.raise_on_sigterm()
    failures = []
    for control in ([False] if a.no_control else [False, True]):
        d = tempfile.mkdtemp(prefix="tierce-cred.", dir="/tmp")
        try:
            cluster_up(d, a, ["--app-secret"] if control else [])
            wanted = needles(d)
            traffic(d, a)
            check(agent_holds_secret(d, wanted),
                  "the scan does not find the secret in app1's writer agent, which holds it: the "
                  "scan itself is broken")
            scanned = scan_app_children(d, wanted)
            check(len(scanned) >= 4, f"only {len(scanned)} app httpd children to scan")
            holders = {pid: v for pid, v in scanned.items() if v[1] or v[2]}
            if control:
                with_secret = [pid for pid, v in scanned.items() if "the cluster secret" in v[1]]
                check(with_secret, "negative control (--app-secret): the scan found the secret in no "
                                   "app httpd child, though each holds it: this check cannot fail")
                say(f"negative control: the secret found in {len(with_secret)} of {len(scanned)} app "
                    "httpd children with --app-secret, as expected")
                continue
            for pid, (node, found, shm) in sorted(holders.items()):
                say(f"FOUND in {node}'s httpd child {pid}: {', '.join(sorted(found))} {shm}")
            check(not holders, f"{len(holders)} of {len(scanned)} app httpd children hold a "
                               "credential or a Tierce shared segment (above)")
            say(f"memory scan: none of {len(scanned)} app httpd children (www-data) holds the "
                f"secret, a node key, or a Tierce segment ({', '.join(wanted)})")
            proxy_children_hold_no_node_key(d, wanted)
            reader_cannot_write(d, a)
            res = php_probe(d)
            say(f"PHP probe: {res}")
            check(res.get("uid") == pwd.getpwnam("www-data").pw_uid, f"the probe ran as uid {res.get('uid')}")
            got = [k for k, v in res.items() if k.startswith(("read:", "write:")) and v]
            check(not got, f"the PHP script could: {got}")
            check(any(k.startswith("write:") for k in res), "the probe found no Tierce segment to try")
            check(res.get("maps_tierce") == 0, f"the PHP process maps {res.get('maps_tierce')} "
                                               "Tierce segment(s)")
        except Failure as e:
            failures.append(("--app-secret: " if control else "") + str(e))
            print(f"FAIL: {failures[-1]}", flush=True)
        except (tprereq.Terminated, KeyboardInterrupt) as e:
            failures.append(f"interrupted ({e})")
            break
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            subprocess.run([CLUSTER, "down", "--dir", d], stdin=subprocess.DEVNULL)
            tprereq.raise_on_sigterm()
            if not a.keep:
                shutil.rmtree(d, ignore_errors=True)
    if failures:
        return 1
    print("PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
