#!/usr/bin/env python3
"""tests/appversion/test_appversion_stack.py — mod_appversion in a real prefork httpd with mod_php,
as app node app1 of a two-app-node cluster whose homes are two real tierce-memd.

Checks (each prints "ok - ..." or fails with the reason):
  * a GET with Tierce-Key is tagged "HOME SLOT VERSION" with the key's home and slot, and the
    version is the one the home holds; Tierce-Depends / Surrogate-Key never reach the client;
  * after an update (Tierce-Invalidate header, or apache_note('tierce-invalidate', ...)) returns,
    the home holds a higher version than the tag for dependent keys, and the same for keys that
    do not depend on it (dependency lists are precise); an error status invalidates too;
  * a render that overlaps an invalidation of its dependencies is not tagged (the race);
  * a malformed invalidation list invalidates everything at both homes;
  * no Tierce-Key: no Tierce-Tag (even one the app forged), no protocol headers; an empty
    dependency header is no dependency (not tagged);
  * an update that flushes output before it commits is invalidated again at its end: a page
    rendered in between is not left valid (issue 13, path 7);
  * a PHP script that aborts after its headers left: its tag is withdrawn and the response is
    cut short (no terminating chunk), so no cache stores the truncated page (path 8);
  * one home stopped (SIGSTOP): the update waits the fence bound ([coherence] lease_ms +
    clock_skew_ms), returns, and the error log names the home it relied on as fenced; the home
    killed: the update returns after the bound and logs it; the surviving home stops vouching
    (it cannot read the dead node's writer counter) and vouches again once that memd is back;
  * bad directives make `apache2ctl -f CONF -t` fail naming the directive; a readable secret,
    an AppVersionScheme other than the topology's, an AppVersionAckTimeout below the fence
    bound make startup fail (APPVER0003, APPVER0023, APPVER0024).
Everything started here is stopped at the end, also on failure. Exit 77 = skipped.
"""
import argparse
import base64
import glob
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
# The one free_port (tools/tiercelab/procs.py): never the same port twice in a run.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from tiercelab.procs import free_port  # noqa: E402

SKIP = 77
APACHE = "/usr/sbin/apache2"
APACHECTL = "/usr/sbin/apache2ctl"
MODULES = "/usr/lib/apache2/modules"
ACK_TIMEOUT_MS = 1000
LEASE_MS, SKEW_MS = 500, 20  # [coherence] of the test topology
BOUND_MS = LEASE_MS + SKEW_MS


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)
    print("ok - " + what, flush=True)


def wait_port(port, proc, what, timeout=15.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise Failure(f"{what} exited at start (status {proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise Failure(f"{what} not listening on {port} after {timeout}s")


class Stack:
    def __init__(self, args):
        self.args = args
        self.procs = {}  # name -> Popen (each its own session: stopped by process group)
        self.dir = tempfile.mkdtemp(prefix="tierce-appversion-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.name = f"avtest{os.getpid()}"
        self.ports = {n: free_port() for n in ("app1", "app2", "proxy1", "http")}

    # ---- files ----------------------------------------------------------------------------
    def write(self, rel, text, mode=0o644):
        path = os.path.join(self.dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def topology(self, rel, secret):
        nodes = ""
        for n, role in (("app1", "app"), ("app2", "app"), ("proxy1", "proxy")):
            nodes += (f'\n[[node]]\nname = "{n}"\nrole = "{role}"\n'
                      f'memd = ["tcp://127.0.0.1:{self.ports[n]}"]\n'
                      f'segment_prefix = "/tierce.{self.name}.{n}"\n')
        return self.write(rel, f'[cluster]\nname = "{self.name}"\nsecret_file = "{secret}"\n'
                               f'transport = "tcp"\nversion_slots = 262144\nop_timeout_ms = 200\n'
                               f'[coherence]\nlease_ms = {LEASE_MS}\nclock_skew_ms = {SKEW_MS}\n'
                          + nodes)

    def setup(self):
        secret = base64.b64encode(os.urandom(32)).decode() + "\n"
        self.secret = self.write("secret", secret, 0o600)  # root only: children keep it in memory
        self.bad_secret = self.write("secret-readable", secret, 0o644)
        self.cluster = self.topology("cluster.toml", self.secret)
        self.bad_cluster = self.topology("cluster-bad-secret.toml", self.bad_secret)
        for n in ("app1", "app2"):
            self.write(f"{n}-memd.toml",
                       f'[memd]\nnode = "{n}"\nlisten = ["tcp://127.0.0.1:{self.ports[n]}"]\n'
                       f'secret_file = "{self.secret}"\nlog_level = "info"\n'
                       f'[coherence]\ntopology = "{self.cluster}"\n')
        php = {
            "page.php": "<?php header('Tierce-Depends: item:1'); echo \"page item:1\\n\";",
            "page2.php": "<?php header('Tierce-Depends: item:2, user:3'); echo \"page item:2\\n\";",
            "surrogate.php": "<?php header('Surrogate-Key: item:5 cat:2'); echo \"surrogate\\n\";",
            "note.php": "<?php apache_note('tierce-depends', 'item:7'); echo \"note\\n\";",
            "nodeps.php": "<?php echo \"no dependencies\\n\";",
            "emptydeps.php": "<?php header('Tierce-Depends: '); echo \"empty dependency list\\n\";",
            "page13.php": "<?php header('Tierce-Depends: item:13'); echo \"page item:13\\n\";",
            # An update that flushes before it commits (the commit is the 0.5 s after the flush).
            "flush_update.php": "<?php header('Tierce-Invalidate: item:13'); echo str_repeat('u', 20000);"
                                " flush(); usleep(500000); echo \"committed\\n\";",
            # A page whose script dies after its headers and some body left.
            "abort.php": "<?php header('Tierce-Depends: item:14'); echo str_repeat('y', 20000);"
                         " flush(); tierce_no_such_function();",
            "forged.php": "<?php header('Tierce-Tag: app1 1 1'); header('Tierce-Depends: item:1');"
                          " echo \"forged\\n\";",
            "slow.php": "<?php header('Tierce-Depends: item:9'); usleep(1500000); echo \"slow\\n\";",
            "update.php": "<?php header('Tierce-Invalidate: item:1'); echo \"updated item:1\\n\";",
            "update9.php": "<?php header('Tierce-Invalidate: item:9'); echo \"updated item:9\\n\";",
            "update_note.php": "<?php apache_note('tierce-invalidate', 'item:7');"
                               " echo \"updated item:7\\n\";",
            "update_err.php": "<?php http_response_code(500); header('Tierce-Invalidate: item:5');"
                              " echo \"failed but committed\\n\";",
            "late_update.php": "<?php echo str_repeat('x', 20000); flush();"
                               " apache_note('tierce-invalidate', 'item:1'); echo \"late\\n\";",
            "late_depends.php": "<?php header('Tierce-Depends: item:11'); echo str_repeat('x', 20000);"
                                " flush(); apache_note('tierce-depends', 'item:12');",
            "all/update.php": "<?php header('Tierce-Invalidate: ' . str_repeat('z', 300));"
                              " echo \"all\\n\";",
        }
        for rel, text in php.items():
            self.write("www/" + rel, text + "\n")
        for d in ("run", "logs"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        os.chown(os.path.join(self.dir, "run"), 33, 33)  # www-data: its mutex/scoreboard files
        self.conf = self.httpd_conf("httpd.conf", "")

    def httpd_conf(self, rel, extra, topology=None, node="app1"):
        d = self.dir
        return self.write(rel, f"""ServerRoot "{d}"
ServerName 127.0.0.1:{self.ports['http']}
Listen 127.0.0.1:{self.ports['http']}
PidFile "{d}/run/httpd.pid"
ErrorLog "{d}/logs/error.log"
LogLevel warn appversion:debug
DefaultRuntimeDir "{d}/run"
Mutex file:{d}/run default
User www-data
Group www-data
LoadModule mpm_prefork_module {MODULES}/mod_mpm_prefork.so
LoadModule authz_core_module {MODULES}/mod_authz_core.so
LoadModule mime_module {MODULES}/mod_mime.so
LoadModule dir_module {MODULES}/mod_dir.so
LoadModule php_module {MODULES}/libphp8.2.so
LoadModule appversion_module {self.args.module}
StartServers 3
MinSpareServers 2
MaxSpareServers 4
MaxRequestWorkers 8
TypesConfig /etc/mime.types
DocumentRoot "{d}/www"
<Directory />
    Require all denied
</Directory>
<Directory "{d}/www">
    Require all granted
</Directory>
<FilesMatch "\\.php$">
    SetHandler application/x-httpd-php
</FilesMatch>
AppVersionTopology {topology or self.cluster}
AppVersionNode {node}
AppVersionDependencyHeaders Tierce-Depends Surrogate-Key
AppVersionAckTimeout {ACK_TIMEOUT_MS}
AppVersionOpTimeout 200
<Location />
    AppVersion On
</Location>
<Location /appversion-status>
    SetHandler appversion-status
    Require all granted
</Location>
{extra}
""")

    # ---- processes ------------------------------------------------------------------------
    def start(self, name, argv, log):
        out = open(os.path.join(self.dir, "logs", log), "ab")
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        return self.procs[name]

    def stop(self, name, sig=signal.SIGTERM):
        p = self.procs.pop(name, None)
        if not p:
            return
        try:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGCONT)
                os.killpg(p.pid, sig)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=10)
            # prefork children left behind by a killed parent share its process group
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        except ProcessLookupError:
            pass

    def start_memd(self, n):
        p = self.start(n, [self.args.memd, "--foreground", "-c",
                           os.path.join(self.dir, f"{n}-memd.toml")], f"{n}-memd.log")
        wait_port(self.ports[n], p, f"tierce-memd {n}")

    def wait_vouching(self, nodes, timeout=15.0):
        """Wait until each node's memd, in its latest incarnation, logs that it vouches (COH0212):
        before that its pages are rightly not tagged (it has not yet read every writer counter)."""
        deadline = time.time() + timeout
        pending = list(nodes)
        while pending and time.time() < deadline:
            for n in list(pending):
                with open(os.path.join(self.dir, "logs", f"{n}-memd.log"), errors="replace") as f:
                    text = f.read()
                if "COH0212" in text[text.rfind("COH0201"):]:
                    pending.remove(n)
            time.sleep(0.02)
        if pending:
            raise Failure(f"tierce-memd of {', '.join(pending)} did not vouch (COH0212) "
                               f"within {timeout:.0f} s")

    def start_httpd(self):
        p = self.start("httpd", [APACHE, "-f", self.conf, "-DFOREGROUND"], "httpd.out")
        wait_port(self.ports["http"], p, "httpd")

    def teardown(self, failed):
        for name in list(self.procs):
            self.stop(name)
        for f in glob.glob(f"/dev/shm/tierce.{self.name}.*"):
            try:
                os.unlink(f)
            except OSError:
                pass
        if failed or os.environ.get("TIERCE_KEEP_TEST_DIR"):
            for log in sorted(glob.glob(os.path.join(self.dir, "logs", "*"))):
                print(f"----- {log} (last 60 lines)")
                with open(log, errors="replace") as f:
                    print("".join(f.readlines()[-60:]))
        if os.environ.get("TIERCE_KEEP_TEST_DIR"):
            print("kept " + self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- helpers --------------------------------------------------------------------------
    def get(self, path, key=None, method="GET"):
        c = http.client.HTTPConnection("127.0.0.1", self.ports["http"], timeout=30)
        headers = {"Tierce-Key": key} if key else {}
        t0 = time.time()
        c.request(method, path, headers=headers)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body, time.time() - t0

    def probe(self, *args):
        out = subprocess.run([self.args.probe, self.cluster, *args], capture_output=True,
                             text=True, timeout=20)
        if out.returncode != 0:
            raise Failure(f"appversion_probe {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout.split()

    def home_slot(self, key):
        h, s = self.probe("home", key)
        return h, int(s)

    def version(self, home, slot):
        return int(self.probe("version", home, str(slot))[0])

    def error_log(self):
        with open(os.path.join(self.dir, "logs", "error.log"), errors="replace") as f:
            return f.read()

    def keys_by_home(self, per_home=4):
        got = {"app1": [], "app2": []}
        while min(len(v) for v in got.values()) < per_home:
            k = os.urandom(8).hex()
            h, _ = self.home_slot(k)
            if len(got[h]) < per_home:
                got[h].append(k)
        return got

    def tagged(self, path, key, what):
        st, h, _, _ = self.get(path, key)
        check(st == 200, f"{what}: status 200")
        tag = h.get("tierce-tag")
        check(tag is not None, f"{what}: response carries Tierce-Tag ({tag})")
        home, slot = self.home_slot(key)
        t_home, t_slot, t_ver = tag.split()
        check(t_home == home and int(t_slot) == slot,
              f"{what}: tag names the key's home {home} and slot {slot}")
        check(self.version(home, slot) == int(t_ver),
              f"{what}: tag version {t_ver} is the version the home holds")
        for p in ("tierce-depends", "tierce-invalidate", "surrogate-key"):
            check(p not in h, f"{what}: {p} does not reach the client")
        return home, slot, int(t_ver)


def run(s):
    s.setup()
    # -- bad configurations: apache2ctl -t fails naming the directive ----------------------
    bad = {
        "AppVersionAckTimeout": "AppVersionAckTimeout 0",
        "AppVersionScheme": "AppVersionScheme sometimes",
        "AppVersionDependencyHeaders": "AppVersionDependencyHeaders Tierce-Invalidate",
        "AppVersionOpTimeout": "AppVersionOpTimeout 2s",
    }
    for directive, line in bad.items():
        conf = s.httpd_conf(f"bad-{directive}.conf", line)
        out = subprocess.run([APACHECTL, "-f", conf, "-t"], capture_output=True, text=True)
        check(out.returncode != 0 and directive in out.stdout + out.stderr,
              f"apache2ctl -t rejects '{line}' naming {directive}")
    conf = s.httpd_conf("bad-node.conf", "", node="proxy1")
    out = subprocess.run([APACHECTL, "-f", conf, "-t"], capture_output=True, text=True)
    check(out.returncode != 0 and "AppVersionNode" in out.stdout + out.stderr,
          "apache2ctl -t rejects AppVersionNode naming a proxy node")
    conf = s.httpd_conf("bad-topology.conf", "", topology=os.path.join(s.dir, "nonexistent.toml"))
    out = subprocess.run([APACHECTL, "-f", conf, "-t"], capture_output=True, text=True)
    check(out.returncode != 0 and "AppVersionTopology" in out.stdout + out.stderr,
          "apache2ctl -t rejects a missing topology file")
    out = subprocess.run([APACHECTL, "-f", s.conf, "-t"], capture_output=True, text=True)
    check(out.returncode == 0, f"apache2ctl -t accepts the good configuration ({out.stderr.strip()})")

    # -- values that contradict the topology: httpd refuses to start, saying why -------------
    for rel, extra, code in (
            ("bad-scheme.conf", "<Location /x/>\n    AppVersionScheme invalidate-all\n</Location>",
             "APPVER0023"),
            ("bad-ack.conf", "<Location /y/>\n    AppVersionAckTimeout 300\n</Location>", "APPVER0024")):
        conf = s.httpd_conf(rel, extra)
        p = s.start(rel, [APACHE, "-f", conf, "-DFOREGROUND"], rel + ".out")
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = 0
        s.stop(rel)
        check(rc != 0 and code in s.error_log(), f"httpd refuses to start with {extra.split()[2]} "
                                                 f"{extra.split()[3]} ({code})")

    # -- a secret readable by others: httpd refuses to start --------------------------------
    conf = s.httpd_conf("bad-secret.conf", "", topology=s.bad_cluster)
    p = s.start("bad-secret-httpd", [APACHE, "-f", conf, "-DFOREGROUND"], "bad-secret-httpd.out")
    try:
        rc = p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = 0  # it started: that is the failure
    s.stop("bad-secret-httpd")
    check(rc != 0 and "APPVER0003" in s.error_log(),
          "httpd refuses to start with a world-readable secret (APPVER0003)")

    # -- the cluster ----------------------------------------------------------------------
    s.start_memd("app1")
    s.start_memd("app2")
    s.wait_vouching(["app1", "app2"])
    s.start_httpd()
    keys = s.keys_by_home(4)
    k1a, k1b = keys["app1"][0], keys["app2"][0]   # page.php (item:1), one per home
    k2 = keys["app1"][1]                          # page2.php (item:2, user:3)
    ksur = keys["app2"][1]                        # surrogate.php (item:5 cat:2)
    knote = keys["app1"][2]                       # note.php (note item:7)
    kslow = keys["app2"][2]                       # slow.php (item:9)
    knodeps = keys["app1"][3]

    tags = {}
    tags[k1a] = s.tagged("/page.php", k1a, "page item:1 (home app1)")
    tags[k1b] = s.tagged("/page.php?b", k1b, "page item:1 (home app2)")
    tags[k2] = s.tagged("/page2.php", k2, "page item:2 user:3")
    tags[ksur] = s.tagged("/surrogate.php", ksur, "Surrogate-Key page")
    tags[knote] = s.tagged("/note.php", knote, "apache_note('tierce-depends') page")

    st, h, _, _ = s.get("/nodeps.php", knodeps)
    check(st == 200 and "tierce-tag" not in h, "a page without dependencies is not tagged")
    st, h, _, _ = s.get("/emptydeps.php", knodeps)
    check(st == 200 and "tierce-tag" not in h and "tierce-depends" not in h,
          "an empty Tierce-Depends header is no dependency: not tagged")

    # -- no key: no tag (not even a forged one), no protocol headers --------------------------
    for path in ("/page.php", "/forged.php", "/surrogate.php", "/update_note.php?dry"):
        st, h, _, _ = s.get(path)
        check(st == 200 and not any(x in h for x in ("tierce-tag", "tierce-depends",
                                                     "tierce-invalidate", "surrogate-key")),
              f"{path} without Tierce-Key: no Tierce-Tag and no protocol header")
    # (update_note.php?dry invalidated item:7: take the note page's tag again)
    tags[knote] = s.tagged("/note.php", knote, "apache_note page again")
    # forged.php sets "Tierce-Tag: app1 1 1": the tag must be the real one (home, slot, version)
    tags[k1a] = s.tagged("/forged.php", k1a, "forged Tierce-Tag replaced by the real one")
    st, h, _, _ = s.get("/page.php", k1a, method="HEAD")
    check("tierce-tag" not in h, "HEAD is not registered")
    st, h, _, _ = s.get("/page.php", "not-hex-at-all!!")
    check(st == 200 and "tierce-tag" not in h, "a malformed Tierce-Key: served, not tagged")

    # -- update: returns after the homes bumped the dependent keys ----------------------------
    st, h, _, dt = s.get("/update.php", method="POST")
    check(st == 200 and "tierce-invalidate" not in h,
          f"update item:1 returns ({dt * 1000:.1f} ms) without Tierce-Invalidate")
    for k in (k1a, k1b):
        home, slot, ver = tags[k]
        now = s.version(home, slot)
        check(now > ver, f"after the update, {home} slot {slot} holds {now} > tag {ver}")
    for k in (k2, ksur, knote):
        home, slot, ver = tags[k]
        check(s.version(home, slot) == ver,
              f"a key not depending on item:1 keeps its version ({home} slot {slot})")

    st, h, _, _ = s.get("/update_note.php")
    home, slot, ver = tags[knote]
    check(st == 200 and s.version(home, slot) > ver,
          "apache_note('tierce-invalidate', 'item:7') invalidates the note page")

    st, h, _, _ = s.get("/update_err.php")
    home, slot, ver = tags[ksur]
    check(st == 500 and s.version(home, slot) > ver and "tierce-invalidate" not in h,
          "an update answering 500 still invalidates (and strips the header)")

    # -- apache_note() after the first output was flushed ---------------------------------
    home, slot, ver = s.tagged("/page.php", k1a, "page item:1 before a late note")
    st, h, body, _ = s.get("/late_update.php")
    check(st == 200 and len(body) > 20000 and s.version(home, slot) > ver,
          "tierce-invalidate noted after output was flushed still invalidates before the end")
    klate = keys["app1"][3]
    st, h, body, _ = s.get("/late_depends.php", klate)
    tag = h.get("tierce-tag")
    check(st == 200 and tag is not None, f"late_depends.php was tagged before its late note ({tag})")
    home, slot, ver = tag.split()
    check(s.version(home, int(slot)) > int(ver),
          "a tierce-depends note set after the headers left withdraws the tag (slot bumped)")

    # -- an update that flushes before it commits: invalidated again at its end --------------
    k13 = keys["app2"][3]
    sock = socket.create_connection(("127.0.0.1", s.ports["http"]), timeout=30)
    sock.sendall(b"POST /flush_update.php HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                 b"Connection: close\r\n\r\n")
    first = sock.recv(4096)  # its first output: the script is now "committing"
    check(first.startswith(b"HTTP/1.1 200"), "flush_update.php sent its first output")
    home, slot, ver = s.tagged("/page13.php", k13, "page item:13 rendered while the update commits")
    rest = b""
    while True:
        b = sock.recv(65536)
        if not b:
            break
        rest += b
    sock.close()
    check(b"committed" in rest, "flush_update.php returned")
    check(s.version(home, slot) > ver,
          "after the update returned, the page rendered between its flush and its end is "
          "invalid (second invalidation at the end of the response)")

    # -- a PHP script that aborts after its headers left ---------------------------------------
    kab = keys["app1"][3]
    c = http.client.HTTPConnection("127.0.0.1", s.ports["http"], timeout=30)
    c.request("GET", "/abort.php", headers={"Tierce-Key": kab})
    r = c.getresponse()
    tag = r.getheader("tierce-tag")
    truncated = False
    try:
        r.read()
    except http.client.IncompleteRead:
        truncated = True
    c.close()
    check(r.status == 200 and tag is not None, f"abort.php was tagged before it died ({tag})")
    check(truncated, "the aborted page's response is cut short (no terminating chunk)")
    home, slot, ver = tag.split()
    check(s.version(home, int(slot)) > int(ver), "the aborted page's tag is withdrawn (slot bumped)")

    # -- the race: a render overlapping an invalidation of its dependencies is not tagged ------
    st, h, _, _ = s.get("/slow.php", kslow)
    check(st == 200 and "tierce-tag" in h, "slow page alone is tagged (the race test is not vacuous)")
    box = {}
    t = threading.Thread(target=lambda: box.update(r=s.get("/slow.php", kslow)))
    t.start()
    time.sleep(0.4)
    st, _, _, _ = s.get("/update9.php")
    t.join()
    st2, h2, _, _ = box["r"]
    check(st == 200 and st2 == 200 and "tierce-tag" not in h2,
          "a render that began before an invalidation of item:9 returned is not tagged")

    # -- invalidate-all bumps every registered key ---------------------------------------------
    regs = {k: s.tagged(p, k, f"register {p}") for k, p in
            ((k1a, "/page.php"), (k1b, "/page.php?b"), (k2, "/page2.php"),
             (ksur, "/surrogate.php"), (knote, "/note.php"))}
    st, h, _, _ = s.get("/all/update.php")
    check(st == 200 and "tierce-invalidate" not in h and "APPVER0012" in s.error_log(),
          "a malformed invalidation list returns, invalidating everything (APPVER0012)")
    for k, (home, slot, ver) in regs.items():
        now = s.version(home, slot)
        check(now > ver, f"invalidate-all bumped {home} slot {slot} ({ver} -> {now})")

    # -- status ---------------------------------------------------------------------------
    st, _, body, _ = s.get("/appversion-status")
    text = body.decode()
    counters = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    check(st == 200 and int(counters.get("registrations", 0)) >= 10 and
          int(counters.get("invalidations", 0)) >= 5 and
          int(counters.get("refused_race", 0)) >= 1 and counters.get("shared_counters") == "1" and
          int(counters.get("second_invalidations", 0)) >= 1 and
          int(counters.get("aborted_responses", 0)) == 1 and
          counters.get("fence_bound_ms") == str(BOUND_MS),
          "status page counts registrations, invalidations, the refused race, the second "
          "invalidation and the aborted page (shared)")
    print(text, flush=True)

    # -- a home stopped: the update waits the fence bound, returns, names the home fenced -----
    os.killpg(s.procs["app2"].pid, signal.SIGSTOP)
    try:
        st, h, _, dt = s.get("/update.php")
        check(st == 200 and BOUND_MS * 0.9 / 1000 <= dt <= BOUND_MS / 1000 + 2,
              f"home app2 stopped: the update waited {dt * 1000:.0f} ms (fence bound "
              f"{BOUND_MS} ms) and returned")
        named = False
        for _ in range(30):
            log = s.error_log()
            named = "APPVER0007" in log and "app2" in log.split("APPVER0007")[-1].splitlines()[0]
            if named:
                break
            time.sleep(0.1)
        check(named, "the error log names the home the update relied on as fenced (APPVER0007)")
        st, h, _, _ = s.get("/page.php?b", k1b)
        check(st == 200 and "tierce-tag" not in h,
              "a page whose home is stopped is served but not tagged")
    finally:
        os.killpg(s.procs["app2"].pid, signal.SIGCONT)
    s.stop("app2", signal.SIGKILL)
    before = s.error_log().count("APPVER0007")
    st, h, _, dt = s.get("/update.php")
    time.sleep(0.2)
    check(st == 200 and dt <= BOUND_MS / 1000 + 2 and s.error_log().count("APPVER0007") > before,
          f"home app2 killed: the update returns ({dt * 1000:.0f} ms) and logs the fenced home")
    # app1 cannot read app2's writer counter now: it stops vouching within its lease.
    time.sleep(LEASE_MS / 1000 + 0.2)
    st, h, _, _ = s.get("/page.php", k1a)
    check(st == 200 and "tierce-tag" not in h,
          "with app2's memd down, app1 cannot prove it holds app2's invalidations: not tagged")
    s.start_memd("app2")
    ok = False
    for _ in range(50):
        st, h, _, _ = s.get("/page.php", k1a)
        if "tierce-tag" in h:
            ok = True
            break
        time.sleep(0.1)
    check(ok, "app2's memd back: pages homed at app1 are tagged again")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--memd", required=True)
    ap.add_argument("--probe", required=True)
    ap.add_argument("--sanitized", default="0")
    args = ap.parse_args()
    if args.sanitized not in ("0", "", "OFF", "FALSE"):
        print("SKIP: sanitizer build — an ASan-instrumented module cannot be loaded into the "
              "system httpd (run this test from the regular build)")
        return SKIP
    if os.geteuid() != 0:
        print("SKIP: needs root (httpd switches to www-data; the secret is root-only)")
        return SKIP
    for f in (APACHE, APACHECTL, f"{MODULES}/libphp8.2.so", f"{MODULES}/mod_mpm_prefork.so"):
        if not os.path.exists(f):
            print(f"SKIP: {f} is missing (apt-get install apache2 libapache2-mod-php8.2)")
            return SKIP
    s = Stack(args)
    failed = True
    try:
        run(s)
        failed = False
        print("all checks passed")
        return 0
    except Failure as e:
        print("FAIL: " + str(e), flush=True)
        return 1
    finally:
        s.teardown(failed)


if __name__ == "__main__":
    sys.exit(main())
