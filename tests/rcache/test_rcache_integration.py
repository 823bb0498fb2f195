#!/usr/bin/env python3
"""tests/rcache/test_rcache_integration.py — mod_rcache in a real httpd (event MPM, mod_proxy,
mod_proxy_http) in front of a real backend httpd (static pages tagged with mod_headers) and a real
tierce-memd hosting the app node's version table.

Checks: miss then hit (the backend sees one request), a version bump makes the next GET miss,
protocol headers never reach the client nor come from it, Set-Cookie / no-store / private /
Authorization / untagged / RCache Off / over-size are not cached, Vary variants, status and
metrics pages, configuration errors fail `apache2ctl -t`, and a dead memd makes GETs forward
(fail closed). Issue 13: a response to a request with Cookie is not stored (unless `public`),
http and https do not share a key, a RESOURCE filter (mod_substitute) is not applied twice on a
hit, a chunked body cut off by the backend is never stored, and RCacheMaxAge expires entries.
Issue 29: a Tierce-Tag that is not the key's (home, slot) is never stored (every page here is
tagged with the slot its key has: the test computes hash64 and slot_of as coherence/key.h does).
The issue-13 sections run independently (each one's failure is reported, then the test fails).
Everything it starts is stopped in `finally`. Exit 0 pass, 1 fail, 77 skipped.
"""
import argparse
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
# The one free_port (tools/tiercelab/procs.py): never the same port twice in a run.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from tiercelab.procs import free_port  # noqa: E402

HTTPD = "/usr/sbin/apache2"
MODDIR = "/usr/lib/apache2/modules"


def wait_for(pred, timeout=10.0, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class Failure(Exception):
    pass


M64 = (1 << 64) - 1


def hash64(data):
    """cluster/hash.cc: FNV-1a 64, then the splitmix64 finaliser."""
    h = 0xcbf29ce484222325
    for c in data.encode():
        h = ((h ^ c) * 0x100000001b3) & M64
    h ^= h >> 30
    h = (h * 0xbf58476d1ce4e5b9) & M64
    h ^= h >> 27
    h = (h * 0x94d049bb133111eb) & M64
    return h ^ (h >> 31)


def slot_of(key_hash, slots):
    """coherence/key.h slot_of: the slot the home derives for a key."""
    x = key_hash ^ 0x9e3779b97f4a7c15
    x = ((x ^ (x >> 31)) * 0xbf58476d1ce4e5b9) & M64
    return (x ^ (x >> 29)) % slots


def check(cond, msg):
    if not cond:
        raise Failure(msg)
    print("  ok:", msg)


class TruncatingBackend:
    """A tiny HTTP/1.1 backend that answers chunked 200s, tagged, and for some paths closes the
    socket before the terminating 0-chunk (what a crashed or killed app server does):
      /trunc/ok.html        a complete chunked body (the control: stored, then a hit)
      /trunc/boundary.html  one whole chunk, then close (no 0-chunk)
      /trunc/mid.html       a chunk announced longer than what is sent, then close
      /trunc/sizeline.html  half a chunk-size line, then close
      /trunc/nocrlf.html    a whole chunk without its CRLF, then close
      /trunc/length.html    Content-Length 100, 30 bytes sent, then close
    """

    def __init__(self, port, tag):
        self.port = port
        self.tag = tag  # callable(path): the Tierce-Tag value to send
        self.counts = {}
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.stopped = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def count(self, path):
        with self.lock:
            return self.counts.get(path, 0)

    def serve(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(c,), daemon=True).start()

    def answer(self, c):
        try:
            c.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = c.recv(4096)
                if not chunk:
                    return
                data += chunk
            path = data.split(b" ")[1].decode()
            with self.lock:
                self.counts[path] = self.counts.get(path, 0) + 1
            part = b"<p>first part of the page</p>\n"
            if path.endswith("/length.html"):
                c.sendall(("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100\r\n"
                           "Tierce-Tag: %s\r\nConnection: close\r\n\r\n" % self.tag(path)).encode()
                          + part)
                time.sleep(0.05)
                return
            head = ("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n"
                    "Tierce-Tag: %s\r\nConnection: close\r\n\r\n" % self.tag(path)).encode()
            c.sendall(head + b"%x\r\n" % len(part) + part + b"\r\n")
            time.sleep(0.05)  # the proxy has passed the first part on before the end comes
            if path.endswith("/ok.html"):
                c.sendall(b"4\r\nend\n\r\n0\r\n\r\n")
            elif path.endswith("/mid.html"):
                c.sendall(b"40\r\nonly a few bytes of sixty-four")
            elif path.endswith("/sizeline.html"):
                c.sendall(b"4")
            elif path.endswith("/nocrlf.html"):
                c.sendall(b"4\r\nend\n")
            # boundary.html: nothing more
            time.sleep(0.05)
        except OSError:
            pass
        finally:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def stop(self):
        self.stopped = True
        try:
            self.sock.close()
        except OSError:
            pass


class Env:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build_dir)
        self.module = os.path.abspath(args.module)
        self.memd_bin = os.path.join(self.build, "agents/memd/tierce-memd")
        self.fabric_bin = os.path.join(self.build, "tools/tierce-fabric/tierce-fabric")
        self.dir = tempfile.mkdtemp(prefix="rcache-it-")
        os.chmod(self.dir, 0o755)
        self.procs = {}
        self.prefix = "/tierce.rcit%d" % os.getpid()
        self.memd_port = free_port()
        self.backend_port = free_port()
        self.proxy_port = free_port()
        self.http_vhost_port = free_port()   # a vhost that calls itself http://127.0.0.1:80
        self.https_vhost_port = free_port()  # a vhost that calls itself https://127.0.0.1:443
        self.maxage_port = free_port()       # a vhost with RCacheMaxAge 1
        self.strip_port = free_port()        # a vhost with RCacheStripProtocolHeaders On
        self.trunc_port = free_port()        # TruncatingBackend
        self.trunc = None

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def write(self, rel, text, mode=None):
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w" if isinstance(text, str) else "wb") as f:
            f.write(text)
        if mode is not None:
            os.chmod(p, mode)
        return p

    # --- cluster ---------------------------------------------------------------------------
    def setup_cluster(self):
        self.secret = self.write("secret", "rcache-integration-secret-0123456789\n", 0o600)
        self.topology = self.write("cluster.toml", f"""[cluster]
name = "rcit"
secret_file = "{self.secret}"
transport = "tcp"
version_slots = 4096
op_timeout_ms = 200

[[node]]
name = "proxy1"
role = "proxy"
memd = ["tcp://127.0.0.1:{free_port()}"]
segment_prefix = "{self.prefix}.proxy1"

[[node]]
name = "app1"
role = "app"
memd = ["tcp://127.0.0.1:{self.memd_port}"]
segment_prefix = "{self.prefix}.app1"
""")
        self.memd_uri = f"tcp://127.0.0.1:{self.memd_port}"
        self.write("memd.toml", f"""[memd]
node = "app1"
listen = ["{self.memd_uri}"]
secret_file = "{self.secret}"
ready_file = "{self.path('memd.ready')}"
log_level = "info"

[coherence]
topology = "{self.topology}"
""")

    def start_memd(self):
        log = open(self.path("memd.log"), "ab")
        self.procs["memd"] = subprocess.Popen(
            [self.memd_bin, "--foreground", "-c", self.path("memd.toml")],
            stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: os.path.exists(self.path("memd.ready")), 10, "memd ready file")

    def fabric(self, *args):
        out = subprocess.run([self.fabric_bin, "--secret-file", self.secret, *args],
                             capture_output=True, text=True, timeout=20)
        if out.returncode != 0:
            raise Failure("tierce-fabric %s failed: %s" % (" ".join(args), out.stderr))
        return out.stdout

    def read_slot(self, slot):
        out = self.fabric("read", self.memd_uri, "versions", str(64 + 8 * slot))
        return int(re.search(r"u64 (\d+)", out).group(1))

    def bump_slot(self, slot):
        self.fabric("faa", self.memd_uri, "versions", str(64 + 8 * slot), "1")

    # --- httpd ------------------------------------------------------------------------------
    def common_conf(self, name, port):
        run = self.path(name, "run")
        os.makedirs(run, exist_ok=True)
        os.makedirs(self.path(name, "logs"), exist_ok=True)
        shutil.chown(run, "www-data", "www-data")
        return f"""ServerRoot "{self.path(name)}"
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
PidFile {run}/httpd.pid
DefaultRuntimeDir {run}
Mutex file:{run} default
ScoreBoardFile {run}/scoreboard
ErrorLog {self.path(name, 'logs', 'error.log')}
User www-data
Group www-data
LoadModule mpm_event_module {MODDIR}/mod_mpm_event.so
LoadModule authz_core_module {MODDIR}/mod_authz_core.so
LoadModule mime_module {MODDIR}/mod_mime.so
LoadModule headers_module {MODDIR}/mod_headers.so
TypesConfig /etc/mime.types
StartServers 2
ServerLimit 2
ThreadsPerChild 4
MaxRequestWorkers 8
MinSpareThreads 1
MaxSpareThreads 8
KeepAlive On
"""

    def tag_file(self, slot):
        return self.path("tags", "slot%d" % slot)

    VERSION_SLOTS = 4096  # as in cluster.toml

    def key_of(self, uri, port=None, scheme="http"):
        """The base key mod_rcache computes (coherence/key.h) for a GET of `uri` on one of the
        proxy's ports (http.client sends Host: 127.0.0.1:port; the scheme vhosts are canonical on
        the scheme's default port, which the key drops)."""
        if port is None:
            port = self.proxy_port
        default = {"http": 80, "https": 443}[scheme]
        host = "127.0.0.1" if port == default else "127.0.0.1:%d" % port
        return "%s://%s\n%s" % (scheme, host, uri)

    def slot_for(self, uri, **kw):
        """The slot of the page's key at its home (the only app node, app1)."""
        return slot_of(hash64(self.key_of(uri, **kw)), self.VERSION_SLOTS)

    def set_tag(self, slot, version):
        self.write("tags/slot%d" % slot, "app1 %d %d" % (slot, version))

    def setup_backend(self):
        docs = self.path("backend", "docs")
        os.makedirs(docs + "/off", exist_ok=True)
        for name in ["page", "page2", "cookie", "nostore", "private", "nocache", "untagged",
                     "badtag", "vary", "auth", "fail", "head", "cookiereq", "public", "scheme",
                     "aged", "aged2", "forged"]:
            self.write("backend/docs/%s.html" % name, "<p>%s body</p>\n" % name)
        self.write("backend/docs/off/page.html", "<p>off body</p>\n")
        self.write("backend/docs/subst/page.html", "<p>foo and bar</p>\n")
        self.big = bytes((i * 31 + 7) & 0xff for i in range(200 * 1024))
        self.write("backend/docs/big.bin", self.big)
        self.binary = bytes(range(256)) * 40
        self.write("backend/docs/binary.bin", self.binary)
        # Every page is tagged with its own key's slot, as its home would (a tag of another slot is
        # never stored: section_forged_tag). Pages of one slot share its tag file.
        tagged = {"/%s.html" % n: self.slot_for("/%s.html" % n) for n in [
            "page", "cookie", "nostore", "private", "nocache", "vary", "auth", "fail", "head",
            "cookiereq", "public", "aged2"]}
        for uri in ("/binary.bin", "/big.bin", "/subst/page.html"):
            tagged[uri] = self.slot_for(uri)
        self.page_slot = tagged["/page.html"]
        aged_slot = self.slot_for("/aged.html", port=self.maxage_port)
        scheme_http = self.slot_for("/scheme.html", port=80)
        scheme_https = self.slot_for("/scheme.html", port=443, scheme="https")
        forged_slot = (self.slot_for("/forged.html") + 1) % self.VERSION_SLOTS
        for slot in set(tagged.values()) | {aged_slot, scheme_http, scheme_https, forged_slot}:
            self.set_tag(slot, self.read_slot(slot))
        tag = lambda slot: 'Header set Tierce-Tag "expr=%%{file:%s}"' % self.tag_file(slot)
        locations = "".join('<Location "%s">\n  %s\n</Location>\n' % (uri, tag(slot))
                            for uri, slot in sorted(tagged.items()))
        conf = self.common_conf("backend", self.backend_port) + f"""
DocumentRoot "{docs}"
LogFormat "%r|%{{Tierce-Key}}i|%{{Tierce-Foo}}i|%{{Authorization}}i" plain
CustomLog {self.path('backend', 'logs', 'access.log')} plain
<Directory "{docs}">
  Require all granted
  Header set Tierce-Depends "item:1 item:2"
</Directory>
{locations}<Location /aged.html>
  {tag(aged_slot)}
</Location>
<Location /scheme.html>
  {tag(scheme_http)}
  <If "%{{HTTP:X-Scheme}} == 'https'">
    {tag(scheme_https)}
  </If>
</Location>
<Location /forged.html>
  # The slot next to the key's, at its current version: a tag that reads "current" but that no
  # update of this page would bump (an app tier with AppVersion Off, or a page setting its own).
  {tag(forged_slot)}
</Location>
<Location /cookie.html>
  Header set Set-Cookie "sid=secret"
</Location>
<Location /nostore.html>
  Header set Cache-Control "no-store"
</Location>
<Location /private.html>
  Header set Cache-Control "private, max-age=60"
</Location>
<Location /nocache.html>
  Header set Cache-Control "no-cache"
</Location>
<Location /untagged.html>
  Header unset Tierce-Tag
</Location>
<Location /badtag.html>
  Header set Tierce-Tag "app1 notanumber 7"
</Location>
<Location /vary.html>
  Header set Vary "Accept-Language"
</Location>
<Location /public.html>
  Header set Cache-Control "public, max-age=60"
</Location>
<Location /scheme.html>
  Header set X-Seen-Scheme "expr=%{{req:X-Scheme}}"
</Location>
"""
        self.backend_conf = self.write("backend/httpd.conf", conf)

    def proxy_conf_text(self, extra_global="", module_directives=None):
        if module_directives is None:
            module_directives = f"""RCacheTopology {self.topology}
RCacheNode proxy1
RCacheSize 8M
RCacheMaxEntrySize 64K
RCacheVersionTimeout 200
RCacheRetryAfter 100
"""
        b = f"http://127.0.0.1:{self.backend_port}"
        return self.common_conf("proxy", self.proxy_port) + f"""
LoadModule proxy_module {MODDIR}/mod_proxy.so
LoadModule proxy_http_module {MODDIR}/mod_proxy_http.so
LoadModule rcache_module {self.module}
LoadModule filter_module {MODDIR}/mod_filter.so
LoadModule substitute_module {MODDIR}/mod_substitute.so
LogLevel warn rcache:trace1 proxy_http:debug
{module_directives}{extra_global}
ProxyPass /rcache-status !
ProxyPass /rcache-metrics !
ProxyPass /trunc/ http://127.0.0.1:{self.trunc_port}/trunc/
ProxyPass / {b}/
<Location />
  Require all granted
  RCache On
</Location>
<Location /subst/>
  AddOutputFilterByType SUBSTITUTE text/html
  Substitute "s/foo/foofoo/"
</Location>
<Location /scheme.html>
  RequestHeader set X-Scheme "expr=%{{REQUEST_SCHEME}}"
</Location>
# Two vhosts on their own ports, one for each scheme, with the scheme's default port as their
# canonical port: without the scheme in the key, both would key a page as 127.0.0.1/uri.
Listen 127.0.0.1:{self.http_vhost_port}
Listen 127.0.0.1:{self.https_vhost_port}
<VirtualHost 127.0.0.1:{self.http_vhost_port}>
  ServerName http://127.0.0.1:80
  UseCanonicalName On
</VirtualHost>
<VirtualHost 127.0.0.1:{self.https_vhost_port}>
  ServerName https://127.0.0.1:443
  UseCanonicalName On
</VirtualHost>
<Location /off/>
  RCache Off
</Location>
<Location /rcache-status>
  SetHandler rcache-status
</Location>
<Location /rcache-metrics>
  SetHandler rcache-metrics
</Location>
"""

    def start_httpd(self, name, conf):
        log = open(self.path(name, "logs", "stdout.log"), "ab")
        p = subprocess.Popen([HTTPD, "-f", conf, "-DFOREGROUND"], stdout=log,
                             stderr=subprocess.STDOUT)
        self.procs[name] = p
        port = self.backend_port if name == "backend" else self.proxy_port

        def up():
            if p.poll() is not None:
                raise Failure("%s httpd exited with %s; see %s" % (name, p.returncode,
                                                                    self.path(name, "logs")))
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        end = time.time() + 15
        while True:
            try:
                if up():
                    return
            except Failure:
                raise
            except Exception:
                if time.time() > end:
                    raise Failure("%s httpd did not listen" % name)
                time.sleep(0.05)

    def stop_all(self):
        if self.trunc:
            self.trunc.stop()
        for name in ("proxy", "backend", "memd"):
            p = self.procs.get(name)
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        # Children of httpd may linger briefly; the pid files tell.
        for shm in os.listdir("/dev/shm"):
            if shm.startswith(self.prefix[1:]):
                try:
                    os.unlink("/dev/shm/" + shm)
                except OSError:
                    pass

    # --- HTTP ---------------------------------------------------------------------------------
    def get(self, path, method="GET", headers=None, port=None, partial_ok=False):
        c = http.client.HTTPConnection("127.0.0.1", port or self.proxy_port, timeout=10)
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        try:
            body = r.read()
        except http.client.IncompleteRead as e:
            if not partial_ok:
                raise
            body = e.partial
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        all_names = [k for k, _ in r.getheaders()]
        c.close()
        return r.status, hdrs, body, all_names

    def backend_lines(self, path):
        p = self.path("backend", "logs", "access.log")
        if not os.path.exists(p):
            return []
        with open(p) as f:
            return [l.rstrip("\n") for l in f if (" " + path + " ") in l]

    def backend_count(self, path):
        # The access log is written at the end of each request; give it a moment.
        time.sleep(0.05)
        return len(self.backend_lines(path))

    def status(self):
        s, _, body, _ = self.get("/rcache-status?auto")
        assert s == 200, s
        out = {}
        for line in body.decode().splitlines():
            k, _, v = line.partition(": ")
            out[k] = v
        return out



# ---- issue 13 sections: each runs on its own; run() collects their failures -----------------------

def section_cookie_requests(env):
    print("a response to a request with Cookie is not stored (unless public):")
    s, _, b, _ = env.get("/cookiereq.html", headers={"Cookie": "session=alice"})
    check(s == 200 and env.backend_count("/cookiereq.html") == 1, "GET with Cookie forwarded")
    s, _, b, _ = env.get("/cookiereq.html")
    check(s == 200 and env.backend_count("/cookiereq.html") == 2,
          "the page fetched with Cookie: session=alice is not served to a request without cookies")
    env.get("/cookiereq.html")
    check(env.backend_count("/cookiereq.html") == 2,
          "the cookieless response was stored: the next cookieless GET is a hit")
    s, h, b, _ = env.get("/public.html", headers={"Cookie": "session=alice"})
    check(s == 200 and env.backend_count("/public.html") == 1, "GET with Cookie of a public page")
    s, h, b, _ = env.get("/public.html")
    check(s == 200 and env.backend_count("/public.html") == 1 and b == b"<p>public body</p>\n",
          "Cache-Control: public: stored from the Cookie request, served without cookies")


def section_scheme(env):
    print("http and https do not share a cache key:")
    s, h, b, _ = env.get("/scheme.html", port=env.http_vhost_port)
    check(s == 200 and h.get("x-seen-scheme") == "http" and env.backend_count("/scheme.html") == 1,
          "http vhost: miss (X-Seen-Scheme %s)" % h.get("x-seen-scheme"))
    s, h, b, _ = env.get("/scheme.html", port=env.http_vhost_port)
    check(env.backend_count("/scheme.html") == 1, "http vhost: hit")
    s, h, b, _ = env.get("/scheme.html", port=env.https_vhost_port)
    check(s == 200 and h.get("x-seen-scheme") == "https" and env.backend_count("/scheme.html") == 2,
          "https vhost, same host, default port and URI: not the http entry (X-Seen-Scheme %s)"
          % h.get("x-seen-scheme"))
    s, h, b, _ = env.get("/scheme.html", port=env.https_vhost_port)
    check(h.get("x-seen-scheme") == "https" and env.backend_count("/scheme.html") == 2,
          "https vhost: hit of its own entry")
    s, h, b, _ = env.get("/scheme.html", port=env.http_vhost_port)
    check(h.get("x-seen-scheme") == "http" and env.backend_count("/scheme.html") == 2,
          "http vhost: still its own entry")


def section_substitute(env):
    print("RESOURCE filters (mod_substitute) run once, on a miss and on a hit alike:")
    s1, _, b1, _ = env.get("/subst/page.html")
    check(s1 == 200 and b1 == b"<p>foofoo and bar</p>\n", "miss: substituted once (%r)" % b1)
    s2, _, b2, _ = env.get("/subst/page.html")
    check(env.backend_count("/subst/page.html") == 1, "second GET is a hit")
    check(b2 == b1, "hit body identical to the miss body (%r)" % b2)


def section_truncated_chunked(env):
    # httpd 2.4 (mod_proxy_http) ends such a body with a 502 error bucket and EOS (AH01110
    # "error reading response") and sets r->no_cache: either one refuses the store.
    print("a body the backend cut off (chunked or with Content-Length) is never stored:")
    paths = ["/trunc/%s.html" % n for n in ("ok", "boundary", "mid", "sizeline", "nocrlf", "length")]
    tags = {}
    for p in paths:
        slot = env.slot_for(p)
        tags[p] = "app1 %d %d" % (slot, env.read_slot(slot))
    env.trunc = TruncatingBackend(env.trunc_port, lambda path: tags[path])
    s, _, b, _ = env.get("/trunc/ok.html")
    check(s == 200 and b == b"<p>first part of the page</p>\nend\n",
          "control: a complete chunked body passes")
    env.get("/trunc/ok.html")
    check(env.trunc.count("/trunc/ok.html") == 1, "control: a complete chunked body is stored")
    for path in ("/trunc/boundary.html", "/trunc/mid.html", "/trunc/sizeline.html",
                 "/trunc/nocrlf.html", "/trunc/length.html"):
        before = env.status()
        for i in range(2):
            s, _, b, _ = env.get(path, partial_ok=True)
            check(s == 200 and b.startswith(b"<p>first part"),
                  "%s: GET %d gets the status and the part sent (%d bytes)" % (path, i + 1, len(b)))
        check(env.trunc.count(path) == 2, "%s: cut off before its end: not stored" % path)
        after = env.status()
        check(int(after["Stores"]) == int(before["Stores"]),
              "%s: Stores unchanged (%s -> %s)" % (path, before["Stores"], after["Stores"]))


def section_strip_protocol_headers(env):
    print("RCacheStripProtocolHeaders: Off in the main server (an app tier in the same httpd, as "
          "packaging/apache2/rcache.conf does), On in the cache's vhost:")
    env.procs["proxy"].send_signal(signal.SIGTERM)
    env.procs["proxy"].wait(15)
    conf = env.write("proxy/strip.conf", env.proxy_conf_text(extra_global=f"""
RCacheStripProtocolHeaders Off
Listen 127.0.0.1:{env.strip_port}
<VirtualHost 127.0.0.1:{env.strip_port}>
  RCacheStripProtocolHeaders On
</VirtualHost>
"""))
    env.start_httpd("proxy", conf)
    inject = {"Tierce-Foo": "injected", "Tierce-Key": "0123456789abcdef"}

    def seen(path):
        lines = env.backend_lines(path)
        return lines[-1].split("|") if lines else None
    env.get("/off/page.html?strip=1", headers=inject)
    line = seen("/off/page.html?strip=1")
    check(line is not None and line[2] == "injected" and line[1] == "0123456789abcdef",
          "main server, RCache Off location: protocol headers pass (the app tier gets them): %s" % line)
    env.get("/page2.html?strip=2", headers=inject)
    line = seen("/page2.html?strip=2")
    check(line is not None and line[2] == "-" and line[1] != "0123456789abcdef",
          "main server, RCache On location: the client's Tierce-* headers are stripped anyway: %s" % line)
    env.get("/off/page.html?strip=3", headers=inject, port=env.strip_port)
    line = seen("/off/page.html?strip=3")
    check(line is not None and line[2] == "-" and line[1] == "-",
          "vhost with On, RCache Off location: stripped before anything sees them: %s" % line)
    bad = env.write("proxy/strip-bad.conf", env.proxy_conf_text(extra_global="RCacheStripProtocolHeaders maybe\n"))
    out = subprocess.run(["apache2ctl", "-f", bad, "-t"], capture_output=True, text=True)
    check(out.returncode != 0 and "RCacheStripProtocolHeaders" in out.stdout + out.stderr,
          "RCacheStripProtocolHeaders maybe is refused by apache2ctl -t")


def section_max_age(env):
    print("RCacheMaxAge: entries older than that are expired (restart with a vhost at 1 s):")
    env.procs["proxy"].send_signal(signal.SIGTERM)
    env.procs["proxy"].wait(15)
    conf = env.write("proxy/maxage.conf", env.proxy_conf_text(extra_global=f"""
Listen 127.0.0.1:{env.maxage_port}
<VirtualHost 127.0.0.1:{env.maxage_port}>
  RCacheMaxAge 1
</VirtualHost>
"""))
    env.start_httpd("proxy", conf)
    env.get("/aged.html", port=env.maxage_port)
    env.get("/aged.html", port=env.maxage_port)
    check(env.backend_count("/aged.html") == 1, "RCacheMaxAge 1 vhost: stored, then a hit")
    env.get("/aged2.html")
    env.get("/aged2.html")
    check(env.backend_count("/aged2.html") == 1, "main server (default 600 s): stored, then a hit")
    before = env.status()
    time.sleep(2.2)
    env.get("/aged.html", port=env.maxage_port)
    check(env.backend_count("/aged.html") == 2, "after 2.2 s the entry is expired: forwarded")
    env.get("/aged.html", port=env.maxage_port)
    check(env.backend_count("/aged.html") == 2, "the fresh render is stored and hit again")
    env.get("/aged2.html")
    check(env.backend_count("/aged2.html") == 1, "main server: still a hit after 2.2 s")
    after = env.status()
    check(int(after.get("Expired", "0")) == int(before.get("Expired", "-1")) + 1,
          "status Expired %s -> %s" % (before.get("Expired"), after.get("Expired")))
    check("LockTimeouts" in after, "status shows LockTimeouts = %s" % after.get("LockTimeouts"))
    _, _, m, _ = env.get("/rcache-metrics")
    m = m.decode()
    check(re.search(r"^tierce_rcache_expired_total 1$", m, re.M) is not None and
          re.search(r"^tierce_rcache_lock_timeouts_total 0$", m, re.M) is not None,
          "metrics carry expired_total and lock_timeouts_total")


def section_forged_tag(env):
    # Issue 29, path 7: before, any well-formed tag of an app node was stored, and served while
    # ITS slot did not move; an update of the page's own dependencies bumps another slot.
    print("a Tierce-Tag that is not the key's (home, slot) is never stored:")
    before = env.status()
    for i in range(2):
        s, _, b, names = env.get("/forged.html")
        check(s == 200 and b == b"<p>forged body</p>\n" and
              not any(n.lower().startswith("tierce-") for n in names),
              "GET %d: 200 with the page, no Tierce-* header" % (i + 1))
    check(env.backend_count("/forged.html") == 2, "both GETs forwarded: the response was not stored")
    after = env.status()
    check(int(after["TagMismatches"]) == int(before["TagMismatches"]) + 2,
          "status TagMismatches %s -> %s" % (before["TagMismatches"], after["TagMismatches"]))
    check(int(after["Stores"]) == int(before["Stores"]),
          "Stores unchanged (%s -> %s)" % (before["Stores"], after["Stores"]))
    _, _, m, _ = env.get("/rcache-metrics")
    check(re.search(r"^tierce_rcache_tag_mismatches_total %s$" % after["TagMismatches"],
                    m.decode(), re.M) is not None, "metrics carry tag_mismatches_total")
    with open(env.path("proxy", "logs", "error.log"), errors="replace") as f:
        key = "%016x" % hash64(env.key_of("/forged.html"))
        lines = [l for l in f if "RCACHE0035" in l and key in l]
    check(len(lines) >= 2 and "not this key's" in lines[-1],
          "RCACHE0035 logged: %s" % (lines[-1].strip()[-160:] if lines else "nothing"))


def run(env):
    env.setup_cluster()
    env.start_memd()
    env.setup_backend()
    env.start_httpd("backend", env.backend_conf)

    print("configuration errors fail `apache2ctl -t`:")
    bad_cases = [
        ("RCacheSize lots", "RCacheSize"),
        ("RCacheSize 512K", "RCacheSize"),
        ("RCacheMaxEntrySize 4M", "RCacheMaxEntrySize"),  # > RCacheSize/4 (8M/4)
        ("RCacheVersionTimeout 0", "RCacheVersionTimeout"),
        ("RCacheRetryAfter soon", "RCacheRetryAfter"),
        ("RCacheStoreSetCookie maybe", "RCacheStoreSetCookie"),
        ("RCacheStoreCookieRequests maybe", "RCacheStoreCookieRequests"),
        ("RCacheMaxAge 31536001", "RCacheMaxAge"),
        ("RCacheMaxAge -1", "RCacheMaxAge"),
        ("RCacheMaxAge 10m", "RCacheMaxAge"),
    ]
    for extra, word in bad_cases:
        conf = env.write("proxy/bad.conf", env.proxy_conf_text(extra_global=extra + "\n"))
        out = subprocess.run(["apache2ctl", "-f", conf, "-t"], capture_output=True, text=True)
        msg = out.stdout + out.stderr
        check(out.returncode != 0 and word in msg, "'%s' is refused (%s)" % (
            extra, msg.strip().splitlines()[-1] if msg.strip() else "no output"))
    for directives, word in [
        (f"RCacheTopology {env.path('nope.toml')}\nRCacheNode proxy1\n", "RCACHE0003"),
        (f"RCacheTopology {env.topology}\nRCacheNode ghost\n", "RCACHE0004"),
        ("RCacheNode proxy1\n", "RCACHE0001"),
    ]:
        conf = env.write("proxy/bad.conf", env.proxy_conf_text(module_directives=directives))
        out = subprocess.run(["apache2ctl", "-f", conf, "-t"], capture_output=True, text=True)
        msg = out.stdout + out.stderr
        check(out.returncode != 0 and word in msg, "startup check %s: %s" % (
            word, [l for l in msg.splitlines() if word in l][:1]))
    good = env.write("proxy/httpd.conf", env.proxy_conf_text())
    out = subprocess.run(["apache2ctl", "-f", good, "-t"], capture_output=True, text=True)
    check(out.returncode == 0, "the good configuration passes -t (%s)" % (out.stdout + out.stderr).strip())

    env.start_httpd("proxy", good)
    wait_for(lambda: os.path.exists("/dev/shm/" + env.prefix[1:] + ".proxy1.arena"), 10,
             "the arena segment")
    check(True, "proxy started, arena %s.proxy1.arena exists" % env.prefix)

    print("miss then hit:")
    s1, h1, b1, names1 = env.get("/page.html", headers={"Tierce-Foo": "injected",
                                                         "Tierce-Tag": "app1 5 1"})
    check(s1 == 200 and b1 == b"<p>page body</p>\n", "first GET 200 with the page")
    check(env.backend_count("/page.html") == 1, "backend saw the first GET")
    line = env.backend_lines("/page.html")[0].split("|")
    check(line[1] == "%016x" % hash64(env.key_of("/page.html")),
          "backend got Tierce-Key %s, the hash64 of the key this test computes" % line[1])
    check(line[2] == "-", "a client's Tierce-Foo header did not reach the backend")
    check(not any(n.lower().startswith("tierce-") for n in names1),
          "no Tierce-* header reached the client on a miss (%s)" % names1)
    s2, h2, b2, names2 = env.get("/page.html")
    check(s2 == 200 and b2 == b1, "second GET 200 with the same body")
    check(env.backend_count("/page.html") == 1, "second GET was a hit (backend saw one request)")
    check("age" in h2, "a hit carries Age (%s)" % h2.get("age"))
    check(not any(n.lower().startswith("tierce-") for n in names2), "no Tierce-* header on a hit")
    check(h2.get("content-type", "").startswith("text/html"), "content type kept")
    s3, h3, b3, _ = env.get("/page.html", method="HEAD")
    check(s3 == 200 and b3 == b"" and env.backend_count("/page.html") == 1,
          "HEAD is served from the cache without a body")
    st = env.status()
    check(int(st["Hits"]) >= 2 and int(st["Stores"]) >= 1, "status counts hits %s stores %s" % (
        st["Hits"], st["Stores"]))

    print("binary body:")
    env.get("/binary.bin")
    s, h, b, _ = env.get("/binary.bin")
    check(b == env.binary and env.backend_count("/binary.bin") == 1, "binary body hit, byte-exact")

    print("request no-cache forwards:")
    env.get("/page.html", headers={"Cache-Control": "no-cache"})
    check(env.backend_count("/page.html") == 2, "Cache-Control: no-cache from the client forwards")

    print("version bump invalidates:")
    before = env.status()
    env.bump_slot(env.page_slot)
    s, _, b, _ = env.get("/page.html")
    check(s == 200 and env.backend_count("/page.html") == 3, "GET after the bump is forwarded")
    after = env.status()
    check(int(after["Invalidations"]) > int(before["Invalidations"]),
          "Invalidations %s -> %s" % (before["Invalidations"], after["Invalidations"]))
    # The backend still tags old renders with the old version: those never become hits.
    env.get("/page.html")
    check(env.backend_count("/page.html") == 4, "a page tagged with the old version is never a hit")
    env.set_tag(env.page_slot, env.read_slot(env.page_slot))
    env.get("/page.html")  # stale entry rejected, fresh render stored
    n = env.backend_count("/page.html")
    env.get("/page.html")
    check(env.backend_count("/page.html") == n, "the fresh render (new version) is a hit again")

    print("not cached:")
    for path, what, hdrs in [
        ("/cookie.html", "Set-Cookie", None),
        ("/nostore.html", "Cache-Control: no-store", None),
        ("/private.html", "Cache-Control: private", None),
        ("/nocache.html", "Cache-Control: no-cache", None),
        ("/untagged.html", "no Tierce-Tag", None),
        ("/badtag.html", "malformed Tierce-Tag", None),
        ("/off/page.html", "RCache Off location", None),
        ("/auth.html", "request with Authorization", {"Authorization": "Basic dTpw"}),
        ("/big.bin", "larger than RCacheMaxEntrySize", None),
    ]:
        for _ in range(2):
            s, h, b, names = env.get(path, headers=hdrs)
            check(not any(x.lower().startswith("tierce-") for x in names),
                  "%s: no Tierce-* header to the client" % path) if _ == 0 else None
        check(env.backend_count(path) == 2, "%s (%s) is not cached" % (path, what))
        if path == "/big.bin":
            check(b == env.big, "the big body passed through intact")
        if path == "/cookie.html":
            check("sid=secret" in h.get("set-cookie", ""), "Set-Cookie reaches the client")
    n = env.backend_count("/page.html")
    env.get("/page.html", headers={"Authorization": "Basic dTpw"})
    check(env.backend_count("/page.html") == n + 1, "a cached page is not served to an Authorization request")

    print("Vary:")
    for lang, expect in [("fr", 1), ("fr", 1), ("en", 2), ("en", 2), ("fr", 2)]:
        s, h, b, _ = env.get("/vary.html", headers={"Accept-Language": lang})
        check(s == 200 and env.backend_count("/vary.html") == expect,
              "Accept-Language %s: backend requests %d" % (lang, expect))

    print("status and metrics pages:")
    s, h, body, _ = env.get("/rcache-status")
    check(s == 200 and b"Hits" in body and b"<table" in body, "HTML status page")
    st = env.status()
    for k in ("Hits", "Misses", "HitRatio", "VersionFailures", "Invalidations", "Stores",
              "StoreRefused", "Uncacheable", "Evictions", "Entries", "BytesUsed",
              "BytesCapacity", "VersionCheckP50us", "VersionCheckP99us", "Node", "Topology"):
        check(k in st, "status ?auto has %s = %s" % (k, st.get(k)))
    check(int(st["Uncacheable"]) >= 8 and int(st["StoreRefused"]) >= 1,
          "uncacheable %s, store refused %s" % (st["Uncacheable"], st["StoreRefused"]))
    s, h, m, _ = env.get("/rcache-metrics")
    m = m.decode()
    check(s == 200 and "# TYPE tierce_rcache_hits_total counter" in m, "metrics exposition")
    check(re.search(r'^tierce_rcache_version_check_seconds\{quantile="0.99"\} ', m, re.M) is not None,
          "metrics carry the latency summary")

    failed = []
    for section in (section_cookie_requests, section_scheme, section_substitute,
                    section_truncated_chunked, section_forged_tag, section_strip_protocol_headers,
                    section_max_age):
        try:
            section(env)
        except Exception as e:
            traceback.print_exc()
            print("SECTION FAILED: %s: %s" % (section.__name__, e))
            failed.append(section.__name__)
        if env.procs["proxy"].poll() is not None:  # a failed restart: carry on with the old conf
            env.start_httpd("proxy", good)

    print("memd dies: fail closed:")
    env.get("/fail.html")
    env.get("/fail.html")
    check(env.backend_count("/fail.html") == 1, "/fail.html cached while memd lives")
    before = env.status()
    env.procs["memd"].kill()
    env.procs["memd"].wait()
    for i in range(3):
        s, _, b, _ = env.get("/fail.html")
        check(s == 200 and env.backend_count("/fail.html") == 2 + i,
              "GET %d with memd dead is forwarded" % (i + 1))
    after = env.status()
    check(int(after["VersionFailures"]) > int(before["VersionFailures"]),
          "VersionFailures %s -> %s" % (before["VersionFailures"], after["VersionFailures"]))
    check(int(after["Hits"]) == int(before["Hits"]), "no hit while the home is unreachable")

    print("shutdown:")
    arena = "/dev/shm/" + env.prefix[1:] + ".proxy1.arena"
    env.procs["proxy"].send_signal(signal.SIGTERM)
    env.procs["proxy"].wait(15)
    check(not os.path.exists(arena), "the parent removed the arena segment on shutdown")
    if failed:
        raise Failure("issue-13 sections failed: " + ", ".join(failed))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--sanitized", default="0")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args()
    if args.sanitized == "1":
        print("SKIP: sanitizer build: its mod_rcache.so cannot be loaded into the system httpd "
              "(the logic test covers the helpers under ASan)")
        return 77
    for need in (HTTPD, MODDIR + "/mod_proxy_http.so", MODDIR + "/mod_headers.so"):
        if not os.path.exists(need):
            print("SKIP: %s is missing (apt-get install apache2)" % need)
            return 77
    if os.geteuid() != 0:
        print("SKIP: needs root (httpd switches to www-data)")
        return 77
    env = Env(args)
    print("work dir:", env.dir)
    rc = 0
    try:
        run(env)
        print("PASS")
    except Exception as e:
        rc = 1
        traceback.print_exc()
        print("FAIL:", e)
        for log in ("proxy/logs/error.log", "backend/logs/error.log", "memd.log"):
            p = env.path(log)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    tail = f.read().splitlines()[-30:]
                print("---- %s (last lines)" % log)
                print("\n".join(tail))
    finally:
        env.stop_all()
        if not args.keep and rc == 0:
            shutil.rmtree(env.dir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
