#!/usr/bin/python3
"""Metrics of every Tierce component, read the way an operator's Prometheus reads them.

Each component's Prometheus text goes through three real parsers: Prometheus's own linter
(`promtool check metrics`, Debian package prometheus), the Python client's parser
(python3-prometheus-client), and — for the daemons' textfiles — node-exporter's textfile collector
(prometheus-node-exporter, started here on 127.0.0.1 with an ephemeral port), whose
node_textfile_scrape_error must stay 0. Then the numbers are checked against what the test did.

  metrics_test.py --build DIR [--only memd,...] [--keep]
Exit 0 passed, 1 failed (with the reason), 77 skipped (a prerequisite is missing).
"""
import argparse
import http.client
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))
from tiercelab import procs  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # pragma: no cover
    text_string_to_metric_families = None

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
PROMTOOL = "/usr/bin/promtool"


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def wait_for(pred, what, timeout=20.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise TestFailure(f"timed out after {timeout:.0f} s waiting for {what}")


def promtool(text, what):
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True)
    check(r.returncode == 0,
          f"{what}: promtool check metrics refused it:\n{(r.stdout + r.stderr).decode()}")


def parse(text, what):
    """{(name, frozenset(labels.items())): value} over every sample, and the family types."""
    samples, types = {}, {}
    try:
        for fam in text_string_to_metric_families(text):
            # The client drops a counter's _total: a gauge X beside a counter X_total would be
            # one family to it (and to OpenMetrics).
            # (Ours only: Go's client in node-exporter has go_memstats_alloc_bytes and _total.)
            check(fam.name not in types or not fam.name.startswith("tierce_"),
                  f"{what}: two families are both named {fam.name} to "
                                         f"the client parser (a gauge beside a counter of the "
                                         f"same name + _total?)")
            types[fam.name] = fam.type
            for s in fam.samples:
                samples[(s.name, frozenset(s.labels.items()))] = s.value
    except TestFailure:
        raise
    except Exception as e:  # the parser's own exception types vary by version
        raise TestFailure(f"{what}: the Prometheus client parser refused it: {e}")
    return samples, types


def value(samples, name, **labels):
    """The value of the one sample of `name` whose labels include `labels` (None if none)."""
    hits = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls)]
    check(len(hits) <= 1, f"{name}{labels}: {len(hits)} samples match")
    return hits[0] if hits else None


def lint_and_parse(text, what):
    check(text.strip(), f"{what}: empty")
    promtool(text, what)
    return parse(text, what)


class NodeExporter:
    """node-exporter with only the textfile collector, on 127.0.0.1:PORT, reading DIR."""

    def __init__(self, d, textdir):
        self.port = procs.free_ports(1)[0]
        self.rec = procs.spawn("node-exporter", [
            NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{self.port}",
            "--collector.disable-defaults", "--collector.textfile",
            f"--collector.textfile.directory={textdir}"], os.path.join(d, "node-exporter.log"))
        self.log = os.path.join(d, "node-exporter.log")
        wait_for(lambda: self._try(), "node-exporter to answer")

    def _try(self):
        try:
            return self.scrape_raw()
        except OSError:
            return None

    def scrape_raw(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("GET", "/metrics")
            r = c.getresponse()
            body = r.read().decode()
            check(r.status == 200, f"node-exporter /metrics: status {r.status}")
            return body
        finally:
            c.close()

    def scrape(self):
        """The samples node-exporter serves; fails if it could not parse a textfile."""
        text = self.scrape_raw()
        samples, _ = parse(text, "node-exporter's /metrics")
        err = value(samples, "node_textfile_scrape_error")
        check(err == 0, f"node-exporter could not read a textfile (node_textfile_scrape_error "
                        f"{err}); its log:\n{procs.tail(self.log)}")
        return samples

    def stop(self):
        procs.stop([self.rec])


# ---- tierce-memd -------------------------------------------------------------------------------

def test_memd(build, d, exporter, textdir):
    binary = os.path.join(build, "agents", "memd", "tierce-memd")
    check(os.access(binary, os.X_OK), f"{binary} is missing: build first")
    secret = os.path.join(d, "memd.secret")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(os.urandom(24).hex())
    node = f"mt{os.getpid()}"
    ready = os.path.join(d, "memd.ready")
    prom = os.path.join(textdir, "tierce-memd.prom")
    conf = os.path.join(d, "memd.toml")

    def write_conf(metrics_file):
        with open(conf, "w") as f:
            f.write(f'[memd]\nnode = "{node}"\nlisten = ["tcp://127.0.0.1:0"]\n'
                    f'secret_file = "{secret}"\nready_file = "{ready}"\nlog = "stderr"\n'
                    f'metrics_file = "{metrics_file}"\nmetrics_interval_ms = 1000\n'
                    f'[pool]\nbytes = 1048576\nslab_bytes = 65536\n')

    write_conf(prom)
    log = os.path.join(d, "memd.log")
    rec = procs.spawn("memd", [binary, "--foreground", "-c", conf], log)
    try:
        wait_for(lambda: os.path.exists(ready) and os.path.getsize(ready) > 0, "memd's ready file")
        # 1. --metrics: what memd.metrics returns.
        r = subprocess.run([binary, "--metrics", "-c", conf], capture_output=True, timeout=30)
        check(r.returncode == 0, f"tierce-memd --metrics: exit {r.returncode}: {r.stderr.decode()}")
        samples, types = lint_and_parse(r.stdout.decode(), "tierce-memd --metrics")
        check(value(samples, "tierce_memd_info", node=node) == 1, "tierce_memd_info is not 1")
        check(types.get("tierce_memd_connections_accepted") == "counter",
              f"tierce_memd_connections_accepted_total is not a counter: {types}")
        # --metrics itself connected: at least one connection was accepted.
        check((value(samples, "tierce_memd_connections_accepted_total", node=node) or 0) >= 1,
              "tierce_memd_connections_accepted_total is 0 after a connection")
        check(value(samples, "tierce_pool_slabs", node=node) == 16,
              "tierce_pool_slabs is not 16 (1 MiB of 64 KiB slabs)")
        check(value(samples, "tierce_memd_regions", node=node, state="exported") is None,
              "a region is exported though none is configured")
        # 2. The textfile, through node-exporter.
        wait_for(lambda: os.path.exists(prom), f"{prom} to be written")
        with open(prom) as f:
            lint_and_parse(f.read(), prom)
        scraped = exporter.scrape()
        check(value(scraped, "tierce_memd_info", node=node) == 1,
              "node-exporter does not serve tierce_memd_info from memd's textfile")
        before = value(scraped, "tierce_memd_connections_accepted_total", node=node)
        subprocess.run([binary, "--metrics", "-c", conf], capture_output=True, timeout=30)
        wait_for(lambda: (value(exporter.scrape(), "tierce_memd_connections_accepted_total",
                                node=node) or 0) > before,
                 "the textfile to be rewritten with the new connection counted", timeout=10)
        # 3. SIGHUP with another metrics_file: the old file goes, the new one comes.
        prom2 = os.path.join(textdir, "tierce-memd-renamed.prom")
        write_conf(prom2)
        os.kill(rec["pid"], signal.SIGHUP)
        wait_for(lambda: os.path.exists(prom2) and not os.path.exists(prom),
                 "the reload to move the textfile")
        s = lint_and_parse(open(prom2).read(), prom2)[0]
        check(value(s, "tierce_memd_reloads_total", node=node) == 1,
              "tierce_memd_reloads_total is not 1 after one SIGHUP")
        # 4. A directory memd cannot write: one warning (MEMD0050), memd goes on serving.
        write_conf(os.path.join(d, "no-such-dir", "x.prom"))
        os.kill(rec["pid"], signal.SIGHUP)
        wait_for(lambda: "MEMD0050" in open(log).read(), "MEMD0050 in memd's log")
        time.sleep(2.5)  # two more intervals fail
        check(open(log).read().count("MEMD0050") == 1,
              "MEMD0050 logged more than once for one failing directory")
        check(not os.path.exists(prom2), f"{prom2} left behind after the reload moved it")
        r = subprocess.run([binary, "--metrics", "-c", conf], capture_output=True, timeout=30)
        check(r.returncode == 0, "memd stopped answering after the textfile failed")
        # 5. A clean stop removes the textfile.
        write_conf(prom)
        os.kill(rec["pid"], signal.SIGHUP)
        wait_for(lambda: os.path.exists(prom), f"{prom} after the last reload")
        procs.stop([rec])
        check(not os.path.exists(prom), f"{prom} left behind by a clean stop")
        print(f"memd: --metrics and {os.path.basename(prom)} pass promtool, the client parser "
              f"and node-exporter; reload moves the file; MEMD0050 once; removed at stop")
    except TestFailure as e:
        raise TestFailure(f"{e}\nmemd's log:\n{procs.tail(log, 30)}")
    finally:
        procs.stop([rec])


# ---- shared: a daemon's textfile, reload and failure handling -----------------------------------

def check_textfile_lifecycle(what, rec, log, textdir, d, write_conf, prom, reload_metric, node,
                             log_id, node_label="node"):
    labels = {node_label: node} if node_label else {}
    """After the daemon wrote `prom`: a SIGHUP with another metrics_file moves the file (and
    `reload_metric` is 1), a directory it cannot write is reported once (`log_id`), a clean stop
    removes the file. `write_conf(path)` rewrites the daemon's configuration."""
    prom2 = os.path.join(textdir, os.path.basename(prom).replace(".prom", "-renamed.prom"))
    write_conf(prom2)
    os.kill(rec["pid"], signal.SIGHUP)
    wait_for(lambda: os.path.exists(prom2) and not os.path.exists(prom),
             f"{what}: the reload to move the textfile")
    s = lint_and_parse(open(prom2).read(), prom2)[0]
    check(value(s, reload_metric, **labels) == 1,
          f"{what}: {reload_metric} is not 1 after one SIGHUP")
    write_conf(os.path.join(d, "no-such-dir", "x.prom"))
    os.kill(rec["pid"], signal.SIGHUP)
    wait_for(lambda: log_id in open(log).read(), f"{log_id} in {what}'s log")
    time.sleep(2.5)  # two more intervals fail
    check(open(log).read().count(log_id) == 1,
          f"{what}: {log_id} logged more than once for one failing directory")
    check(not os.path.exists(prom2), f"{what}: {prom2} left behind after the reload moved it")
    write_conf(prom)
    os.kill(rec["pid"], signal.SIGHUP)
    wait_for(lambda: os.path.exists(prom), f"{what}: {prom} after the last reload")
    procs.stop([rec])
    check(not os.path.exists(prom), f"{what}: {prom} left behind by a clean stop")


# ---- tierce-lockd ------------------------------------------------------------------------------

def test_lockd(build, d, exporter, textdir):
    lockd = os.path.join(build, "agents", "lockd", "tierce-lockd")
    cli = os.path.join(build, "tools", "tierce-lock", "tierce-lock")
    for b in (lockd, cli):
        check(os.access(b, os.X_OK), f"{b} is missing: build first")
    secret = os.path.join(d, "lockd.secret")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(os.urandom(24).hex())
    tag = f"mt{os.getpid()}"
    nodes = [f"{tag}a", f"{tag}b"]
    ports = procs.free_ports(2)
    topo = os.path.join(d, "lockd-cluster.toml")
    with open(topo, "w") as f:
        f.write(f'[cluster]\nname = "metrics"\nsecret_file = "{secret}"\ntransport = "tcp"\n'
                f'[dlm]\nalgorithm = "ncosed"\nheartbeat_ms = 50\nlease_ms = 2000\n')
        for n, p in zip(nodes, ports):
            f.write(f'[[node]]\nname = "{n}"\nlockd = ["tcp://127.0.0.1:{p}"]\n')
    node = nodes[0]
    sock = os.path.join(d, f"{node}.sock")
    prom = os.path.join(textdir, "tierce-lockd.prom")
    conf = os.path.join(d, "lockd.toml")

    def write_conf(metrics_file):
        with open(conf, "w") as f:
            f.write(f'[lockd]\ntopology = "{topo}"\nnode = "{node}"\nsocket = "{sock}"\n'
                    f'state_dir = "{os.path.join(d, node + "-state")}"\n'
                    f'metrics_file = "{metrics_file}"\nmetrics_interval_ms = 1000\n')

    write_conf(prom)
    log = os.path.join(d, "lockd.log")
    other_log = os.path.join(d, "lockd-other.log")
    rec = procs.spawn("lockd", [lockd, "--foreground", "-c", conf], log)
    # The other member: flags only, its textfile through --metrics-file.
    other_prom = os.path.join(textdir, "tierce-lockd-other.prom")
    other = procs.spawn("lockd-other", [
        lockd, "--foreground", "-t", topo, "-n", nodes[1], "-s", os.path.join(d, "other.sock"),
        "-d", os.path.join(d, nodes[1] + "-state"), "--metrics-file", other_prom,
        "--metrics-interval-ms", "1000"], other_log)

    def metrics():
        r = subprocess.run([cli, "--metrics", "--socket", sock], capture_output=True, timeout=30)
        if r.returncode != 0:
            return None
        return r.stdout.decode()

    try:
        wait_for(lambda: (t := metrics()) and value(parse(t, "lockd")[0], "tierce_lockd_peer_up",
                                                    node=node, peer=nodes[1]) == 1,
                 "both lockds up (tierce_lockd_peer_up 1)")
        # 1. tierce-lock --metrics before any lock.
        samples, types = lint_and_parse(metrics(), "tierce-lock --metrics")
        check(value(samples, "tierce_lockd_info", node=node, algorithm="ncosed") == 1,
              "tierce_lockd_info{algorithm=ncosed} is not 1")
        check(types.get("tierce_lockd_grants") == "counter",
              f"tierce_lockd_grants_total is not a counter: {types.get('tierce_lockd_grants')}")
        check(value(samples, "tierce_lockd_members", node=node, state="up") == 2,
              "tierce_lockd_members{state=up} is not 2")
        check(value(samples, "tierce_lockd_grants_total", node=node) == 0,
              "tierce_lockd_grants_total is not 0 before any lock")
        # 2. One lock acquired and released by tierce-lock; a try-lock that finds it taken.
        names = [f"metrics-lock-{i}" for i in range(4)]
        for n in names:
            r = subprocess.run([cli, "--socket", sock, n, "true"], capture_output=True,
                               timeout=30)
            check(r.returncode == 0, f"tierce-lock {n} true: exit {r.returncode}: "
                                     f"{r.stderr.decode()}")
        holder = subprocess.Popen([cli, "--socket", sock, names[0], "sleep", "30"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: value(parse(metrics(), "lockd")[0], "tierce_lockd_locks_held",
                                   node=node) == 1, "the holder's lock to be held")
            r = subprocess.run([cli, "--socket", sock, "-n", names[0], "true"],
                               capture_output=True, timeout=30)
            check(r.returncode == 1, f"tierce-lock -n on a held lock: exit {r.returncode}")
        finally:
            holder.terminate()  # tierce-lock forwards it to sleep, then releases its lock
            holder.wait()
        wait_for(lambda: value(parse(metrics(), "lockd")[0], "tierce_lockd_locks_held",
                               node=node) == 0, "the holder's lock to be released")
        samples, _ = lint_and_parse(metrics(), "tierce-lock --metrics after the locks")
        for name, want in (("tierce_lockd_acquires_total", 6),
                           ("tierce_lockd_releases_total", 5)):
            got = value(samples, name, node=node)
            check(got == want, f"{name} is {got}, expected {want} after 5 locks and 1 try-lock "
                               f"that found its lock taken")
        # The exclusive try-lock queues behind the holder and the client library gives up on it
        # (its own deadline): the request is withdrawn, and granted then let go at once when the
        # holder releases, which counts as a grant (not as would_block: lockd did not answer
        # WouldBlock itself).
        grants = value(samples, "tierce_lockd_grants_total", node=node)
        check(grants in (5, 6), f"tierce_lockd_grants_total is {grants}, expected 5 (or 6 with "
                                f"the try-lock's withdrawn request) after 5 locks")
        check((value(samples, "tierce_lockd_client_connections_total", node=node) or 0) >= 7,
              "tierce_lockd_client_connections_total counts fewer than the 7 tierce-lock runs")
        # 3. The textfiles of both lockds, through node-exporter.
        wait_for(lambda: os.path.exists(prom) and os.path.exists(other_prom), "both textfiles")
        for p in (prom, other_prom):
            lint_and_parse(open(p).read(), p)
        wait_for(lambda: value(exporter.scrape(), "tierce_lockd_grants_total", node=node) == grants,
                 f"node-exporter to serve tierce_lockd_grants_total {grants}", timeout=10)
        scraped = exporter.scrape()
        check(value(scraped, "tierce_lockd_peer_up", node=nodes[1], peer=node) == 1,
              "the other lockd's textfile (--metrics-file) does not say this one is up")
        # 4. Reload, an unwritable directory, a clean stop.
        check_textfile_lifecycle("lockd", rec, log, textdir, d, write_conf, prom,
                                 "tierce_lockd_reloads_total", node, "LOCKD0050")
        procs.stop([other])
        check(not os.path.exists(other_prom), f"{other_prom} left behind by a clean stop")
        print("lockd: tierce-lock --metrics and both textfiles pass promtool, the client parser "
              "and node-exporter; acquires/grants/releases follow tierce-lock; reload moves "
              "the file; LOCKD0050 once; removed at stop")
    except TestFailure as e:
        raise TestFailure(f"{e}\nlockd's log:\n{procs.tail(log, 30)}\nthe other lockd's log:\n"
                          f"{procs.tail(other_log, 15)}")
    finally:
        procs.stop([rec, other])


# ---- tierce-ftpd -------------------------------------------------------------------------------

def test_ftpd(build, d, exporter, textdir):
    import ftplib
    import io
    binary = os.path.join(build, "ftp_adts", "server", "tierce-ftpd")
    check(os.access(binary, os.X_OK), f"{binary} is missing: build first")
    root = os.path.join(d, "ftp-root")
    os.makedirs(root)
    os.chmod(d, 0o755)  # started as root the sessions run as nobody (privilege separation)
    os.chmod(root, 0o755)
    payload = os.urandom(123457)
    with open(os.path.join(root, "file.bin"), "wb") as f:
        f.write(payload)
    os.chmod(os.path.join(root, "file.bin"), 0o644)
    r = subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=b"secret-pass",
                       capture_output=True, timeout=30)
    check(r.returncode == 0, f"openssl passwd: {r.stderr.decode()}")
    pw_hash = r.stdout.decode().strip()
    ready = os.path.join(d, "ftpd.ready")
    prom = os.path.join(textdir, "tierce-ftpd.prom")
    conf = os.path.join(d, "ftpd.toml")

    def write_conf(metrics_file):
        with open(conf, "w") as f:
            f.write(f'listen = "127.0.0.1:0"\nworkers = 2\nmax_sessions = 4\n'
                    f'max_sessions_per_ip = 1\nlogin_fail_delay_ms = 0\nready_file = "{ready}"\n'
                    f'pasv_ports = "0"\nmetrics_file = "{metrics_file}"\n'
                    f'metrics_interval_ms = 1000\n'
                    f'[[user]]\nname = "alice"\npassword = "{pw_hash}"\nroot = "{root}"\n')

    write_conf(prom)
    log = os.path.join(d, "ftpd.log")
    rec = procs.spawn("ftpd", [binary, "-c", conf, "--foreground"], log)

    def textfile():
        if not os.path.exists(prom):
            return None
        return parse(open(prom).read(), prom)[0]

    try:
        wait_for(lambda: os.path.exists(ready) and os.path.getsize(ready) > 0, "ftpd's ready file")
        port = int(open(ready).read().strip())
        wait_for(lambda: os.path.exists(prom), f"{prom} to be written")
        s0, types = lint_and_parse(open(prom).read(), prom)
        check(value(s0, "tierce_ftpd_info") == 1, "tierce_ftpd_info is not 1")
        check(types.get("tierce_ftpd_sessions") == "counter",
              f"tierce_ftpd_sessions_total is not a counter: {types.get('tierce_ftpd_sessions')}")
        check(value(s0, "tierce_ftpd_sessions_total") == 0, "sessions counted before any client")
        # 1. A session with a failed and a good login and one RETR.
        ftp = ftplib.FTP()
        ftp.connect("127.0.0.1", port, timeout=30)
        try:
            ftp.login("alice", "wrong")
            raise TestFailure("a wrong password was accepted")
        except ftplib.error_perm:
            pass
        ftp.login("alice", "secret-pass")
        buf = io.BytesIO()
        ftp.retrbinary("RETR file.bin", buf.write)
        check(buf.getvalue() == payload, "RETR returned other bytes")
        # 2. While it is open, a second connection from the same address: 421 (per-IP limit).
        wait_for(lambda: (t := textfile()) and value(t, "tierce_ftpd_sessions_active") == 1,
                 "tierce_ftpd_sessions_active 1 while a session is open", timeout=10)
        second = ftplib.FTP()
        try:
            second.connect("127.0.0.1", port, timeout=30)
            raise TestFailure("a second session from 127.0.0.1 was served (max_sessions_per_ip 1)")
        except ftplib.error_temp as e:
            check(str(e).startswith("421"), f"the second connection got {e}, not 421")
        finally:
            second.close()
        ftp.quit()
        # 3. The master's totals after the session ended (its worker reported it).
        want = {("tierce_ftpd_sessions_total", ()): 1,
                ("tierce_ftpd_sessions_refused_total", (("limit", "max_sessions_per_ip"),)): 1,
                ("tierce_ftpd_sessions_refused_total", (("limit", "max_sessions"),)): 0,
                ("tierce_ftpd_logins_total", (("result", "ok"),)): 1,
                ("tierce_ftpd_logins_total", (("result", "failed"),)): 1,
                ("tierce_ftpd_transfers_total", (("direction", "out"), ("result", "ok"))): 1,
                ("tierce_ftpd_transfers_total", (("direction", "in"), ("result", "ok"))): 0,
                ("tierce_ftpd_transfers_failed_total", ()): 0,
                ("tierce_ftpd_bytes_total", (("direction", "out"),)): len(payload),
                ("tierce_ftpd_sessions_active", ()): 0}

        def matches():
            t = textfile()
            if not t:
                return None
            got = {k: value(t, k[0], **dict(k[1])) for k in want}
            return got if got == want else None

        try:
            wait_for(matches, "the textfile to count the session", timeout=10)
        except TestFailure:
            t = textfile() or {}
            got = {k: value(t, k[0], **dict(k[1])) for k in want}
            raise TestFailure(f"ftpd's counters after one session: got {got}, expected {want}")
        lint_and_parse(open(prom).read(), prom)
        scraped = exporter.scrape()
        check(value(scraped, "tierce_ftpd_bytes_total", direction="out") == len(payload),
              "node-exporter does not serve ftpd's tierce_ftpd_bytes_total")
        # 4. Reload, an unwritable directory, a clean stop.
        check_textfile_lifecycle("ftpd", rec, log, textdir, d, write_conf, prom,
                                 "tierce_ftpd_reloads_total", None, "FTPD0050", node_label=None)
        print("ftpd: the master's textfile passes promtool, the client parser and node-exporter; "
              "sessions, the per-IP refusal, logins, the RETR and its bytes are counted; reload "
              "moves the file; FTPD0050 once; removed at stop")
    except TestFailure as e:
        raise TestFailure(f"{e}\nftpd's log:\n{procs.tail(log, 30)}")
    finally:
        procs.stop([rec])


# ---- mod_appversion and mod_rcache (a private cluster: tools/tierce-cluster) ----------------------

CLUSTER = os.path.join(REPO, "tools", "tierce-cluster")


class Skip(Exception):
    pass


def http_get(port, path, method="GET", form=None):
    import urllib.parse
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        body = urllib.parse.urlencode(form) if form is not None else None
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def scrape_handler(port, path, what):
    status, headers, body = http_get(port, path)
    check(status == 200, f"GET {path}: status {status}: {body[:300]!r}")
    ctype = headers.get("content-type", "")
    check(ctype == "text/plain; version=0.0.4; charset=utf-8",
          f"GET {path}: Content-Type {ctype!r}, not Prometheus text 0.0.4")
    return lint_and_parse(body, what)


def test_modules(build, d, exporter, textdir):
    """mod_appversion's /appversion-metrics on the app node and mod_rcache's /rcache-metrics on
    the proxy of `tierce-cluster up --cache tierce` (1 app + 1 proxy, small dataset)."""
    if SANITIZED:
        raise Skip("sanitizer build: the system httpd cannot load its ASan/UBSan modules")
    if os.geteuid() != 0:
        raise Skip("needs root (tierce-cluster runs a private MariaDB and httpd as www-data)")
    for exe in ("/usr/sbin/apache2", "/usr/sbin/mariadbd", "/usr/lib/apache2/modules/libphp8.2.so"):
        if not os.path.exists(exe):
            raise Skip(f"{exe} missing (tools/deps.sh installs it)")
    for p in ("mod_rcache/mod_rcache.so", "mod_appversion/mod_appversion.so",
              "agents/memd/tierce-memd", "sample/tierce-datagen"):
        if not os.path.exists(os.path.join(build, p)):
            # A Tierce target: a build regression fails, never skips (tools/tiercelab/prereq.py).
            raise TestFailure(f"{os.path.join(build, p)} is not built (build everything first)")
    cd = tempfile.mkdtemp(prefix="tierce-metrics-cluster.", dir="/tmp")
    os.chmod(cd, 0o755)
    up = False
    try:
        r = subprocess.run([CLUSTER, "up", "--dir", cd, "--cache", "tierce", "--app-nodes", "1",
                            "--proxy-nodes", "1", "--items", "300", "--bids", "1000",
                            "--arena-size", "16M", "--build", build],
                           capture_output=True, text=True, timeout=600)
        up = True
        check(r.returncode == 0, f"tierce-cluster up failed (exit {r.returncode}):\n"
                                 f"{r.stderr[-3000:]}")
        import json
        with open(os.path.join(cd, "cluster.json")) as f:
            st = json.load(f)
        proxy = next(n for n in st["nodes"] if n["role"] == "proxy")["port"]
        app = next(n for n in st["nodes"] if n["role"] == "app")
        app_port, app_node = app["port"], app["name"]

        av0, types = scrape_handler(app_port, "/appversion-metrics", "/appversion-metrics")
        check(value(av0, "tierce_appversion_info", node=app_node) == 1,
              f"tierce_appversion_info{{node={app_node}}} is not 1")
        check(types.get("tierce_appversion_registrations") == "counter",
              "tierce_appversion_registrations_total is not a counter")
        check(value(av0, "tierce_appversion_shared_counters", node=app_node) == 1,
              "the appversion counters are not shared by the children")
        rc0, types = scrape_handler(proxy, "/rcache-metrics", "/rcache-metrics")
        check(types.get("tierce_rcache_version_check_seconds") == "summary",
              "tierce_rcache_version_check_seconds is not a summary")

        def av(name, **labels):
            return value(scrape_handler(app_port, "/appversion-metrics", "/appversion-metrics")[0],
                         name, node=app_node, **labels) or 0

        def rc(name, **labels):
            return value(scrape_handler(proxy, "/rcache-metrics", "/rcache-metrics")[0], name,
                         **labels) or 0

        # 1. rcache: a miss (stored), then a hit of the same page through the proxy.
        page = "/item.php?id=17"
        h0, m0, s0 = (value(rc0, n) or 0 for n in ("tierce_rcache_hits_total",
                                                    "tierce_rcache_misses_total",
                                                    "tierce_rcache_stores_total"))
        reg0 = value(av0, "tierce_appversion_registrations_total", node=app_node) or 0
        # Per home (one app node: every page is homed at it): lookups and hits of its pages.
        hl0, hh0 = (value(rc0, n, home=app_node) or 0 for n in ("tierce_rcache_home_lookups_total",
                                                                 "tierce_rcache_home_hits_total"))
        status, _, _ = http_get(proxy, page)
        check(status == 200, f"GET {page} through the proxy: {status}")
        check(rc("tierce_rcache_misses_total") == m0 + 1, "the first GET is not one miss")
        check(rc("tierce_rcache_stores_total") >= s0 + 1, "the first GET was not stored")
        check(av("tierce_appversion_registrations_total") >= reg0 + 1,
              "the app node did not count the page's registration")
        status, _, _ = http_get(proxy, page)
        check(status == 200, f"GET {page} again: {status}")
        check(rc("tierce_rcache_hits_total") == h0 + 1, "the second GET is not one hit")
        check(rc("tierce_rcache_home_lookups_total", home=app_node) == hl0 + 2,
              f"the two GETs are not two lookups of pages homed at {app_node}")
        check(rc("tierce_rcache_home_hits_total", home=app_node) == hh0 + 1,
              f"the second GET is not one hit of a page homed at {app_node}")
        check(rc("tierce_rcache_version_check_seconds_count") >= 1,
              "the hit's version check is not counted in the summary")
        # 2. appversion: an update invalidates (acknowledged by the home), the next GET is stale.
        inv0, ack0 = av("tierce_appversion_invalidations_total"), av(
            "tierce_appversion_acks_received_total")
        status, _, text = http_get(app_port, "/bid.php", "POST",
                                   {"item": "17", "user": "3", "amount": "777.00"})
        check(status == 200, f"POST bid.php: {status} {text[:200]!r}")
        check(av("tierce_appversion_invalidations_total") >= inv0 + 1,
              "POST bid.php did not count an invalidation")
        check(av("tierce_appversion_acks_received_total") >= ack0 + 1,
              "the invalidation's acknowledgement is not counted")
        check(av("tierce_appversion_invalidation_waits_total") >= 1,
              "the invalidation wait is not counted")
        stale0 = rc("tierce_rcache_stale_rejects_total")
        status, _, body = http_get(proxy, page)
        check(status == 200 and "777.00" in body, "the page after the bid is not the new one")
        check(rc("tierce_rcache_stale_rejects_total") == stale0 + 1,
              "the GET after the bid is not one stale reject")
        print("modules: /appversion-metrics and /rcache-metrics pass promtool and the client "
              "parser (Content-Type 0.0.4); a miss, a store, a hit, a registration, an "
              "acknowledged invalidation and the stale reject after it are counted (also per home)")
    finally:
        if up:
            r = subprocess.run([CLUSTER, "down", "--dir", cd], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"tierce-cluster down exited {r.returncode}: {r.stderr[-2000:]}")
        shutil.rmtree(cd, ignore_errors=True)


SANITIZED = False
COMPONENTS = {"memd": test_memd, "lockd": test_lockd, "ftpd": test_ftpd, "modules": test_modules}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--only", help="comma-separated components (default: all)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--sanitized", type=int, default=0,
                    help="1: a sanitizer build, whose Apache modules the system httpd cannot load "
                         "(the modules case is skipped; the daemons run under the sanitizers)")
    a = ap.parse_args()
    global SANITIZED
    SANITIZED = bool(a.sanitized)
    missing = [p for p in (NODE_EXPORTER, PROMTOOL) if not os.access(p, os.X_OK)]
    if missing or text_string_to_metric_families is None:
        print(f"SKIP: missing {missing or 'python3-prometheus-client'} (run tools/deps.sh)")
        return 77
    names = a.only.split(",") if a.only else list(COMPONENTS)
    d = tempfile.mkdtemp(prefix="tierce-metrics-")
    textdir = os.path.join(d, "textfiles")
    os.mkdir(textdir)
    exporter = None
    failed = []
    skipped = []
    try:
        exporter = NodeExporter(d, textdir)
        for n in names:
            try:
                COMPONENTS[n](a.build, d, exporter, textdir)
            except TestFailure as e:
                failed.append(n)
                print(f"FAIL {n}: {e}")
            except Skip as e:
                skipped.append(n)
                print(f"SKIP {n}: {e}")
    except TestFailure as e:
        failed.append("setup")
        print(f"FAIL: {e}")
    finally:
        if exporter:
            exporter.stop()
        if a.keep:
            print(f"kept {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    passed = [n for n in names if n not in skipped]
    if not passed:
        print(f"SKIP: {', '.join(skipped)}")
        return 77
    print(f"PASS: {', '.join(passed)}" + (f" (skipped: {', '.join(skipped)})" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
