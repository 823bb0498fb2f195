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
            types[fam.name] = fam.type
            for s in fam.samples:
                samples[(s.name, frozenset(s.labels.items()))] = s.value
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


COMPONENTS = {"memd": test_memd}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--only", help="comma-separated components (default: all)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
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
    try:
        exporter = NodeExporter(d, textdir)
        for n in names:
            try:
                COMPONENTS[n](a.build, d, exporter, textdir)
            except TestFailure as e:
                failed.append(n)
                print(f"FAIL {n}: {e}")
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
    print(f"PASS: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
