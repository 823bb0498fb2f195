#!/usr/bin/python3
"""Self-test of tierce-check without a cluster: a fake app (Python stdlib HTTP server) serves
item/category/user pages with the tierce-data marker and bid.php / edit.php updates, answering
with Content-Length, chunked or close-delimited bodies at random (and closing some keep-alive
connections), so the checker's HTTP client sees every framing.

  coherent mode: pages show the current versions            -> tierce-check must exit 0
  stale mode:    pages show the version first served (a cache that never invalidates)
                                                            -> tierce-check must exit 1, stale > 0
  errors mode:   1 request in 10 gets a 503                  -> tierce-check must exit 1 (error ratio)
  flap mode:     no writes, pages show version 1, 2 or 3 at random (copies of different ages)
                                                            -> read-read inversions > 0, no stale read:
                                                               exit 0, and exit 1 with --strict
  (the coherent mode is linearizable: it must report no read-read inversion)

  checker_selftest.py --checker PATH
Exit 0 passed, 1 failed.
"""
import argparse
import http.server
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import urllib.parse


class State:
    def __init__(self, mode):
        self.mode = mode
        self.lock = threading.Lock()
        self.versions = {}      # key -> committed version
        self.served = {}        # key -> version frozen at first read (stale mode)
        self.rng = random.Random(7)
        self.page_reads = 0     # for the fake /rcache-metrics

    def metrics(self):
        h = self.page_reads
        return ("# HELP tierce_rcache_hits_total fake\n# TYPE tierce_rcache_hits_total counter\n"
                f"tierce_rcache_hits_total {3 * h // 4}\ntierce_rcache_misses_total {h - 3 * h // 4}\n"
                "tierce_rcache_version_failures_total 0\ntierce_rcache_stale_rejects_total 5\n"
                f"tierce_rcache_stores_total {h // 4}\n"
                'tierce_rcache_version_check_seconds{quantile="0.5"} 0.000012000\n'
                'tierce_rcache_version_check_seconds{quantile="0.99"} 0.000040000\n'
                f"tierce_rcache_version_check_seconds_sum {h * 15e-6:.9f}\n"
                f"tierce_rcache_version_check_seconds_count {h}\n")

    def bump(self, key):
        self.versions[key] = self.versions.get(key, 1) + 1
        return self.versions[key]


def make_handler(st):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16              # one write per response (flushed by handle_one_request)
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def send(self, status, body, ctype="text/html"):
            with st.lock:
                framing = st.rng.choice(["length", "length", "chunked", "close"])
                close_after = st.rng.random() < 0.05
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("X-Cache", "MISS from fake")
            if framing == "length":
                self.send_header("Content-Length", str(len(data)))
                if close_after:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(data)
            elif framing == "chunked":
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(data), 37):
                    part = data[i:i + 37]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("Connection", "close")
                self.close_connection = True
                self.end_headers()
                self.wfile.write(data)

        def maybe_fail(self):
            if st.mode == "errors":
                with st.lock:
                    bad = st.rng.random() < 0.1
                if bad:
                    self.send(503, "busy\n", "text/plain")
                    return True
            return False

        def do_GET(self):
            u = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(u.query)
            kind = os.path.basename(u.path).removesuffix(".php")
            if u.path == "/rcache-metrics" and st.mode == "coherent":
                with st.lock:
                    text = st.metrics()
                return self.send(200, text, "text/plain; version=0.0.4")
            if kind not in ("item", "category", "user") or "id" not in q:
                return self.send(404, "no such page\n", "text/plain")
            if self.maybe_fail():
                return
            key = f"{kind}:{int(q['id'][0])}"
            with st.lock:
                st.page_reads += 1
                v = st.versions.get(key, 1)
                if st.mode == "stale":
                    v = st.served.setdefault(key, v)
                elif st.mode == "flap":
                    v = st.rng.choice((1, 2, 3))
            self.send(200, f'<!DOCTYPE html>\n<html><head><meta name="tierce-data" content="{key}={v}">\n'
                           f"<title>{key}</title></head><body>{'x' * (v % 300)}</body></html>\n")

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            form = urllib.parse.parse_qs(self.rfile.read(n).decode())
            page = os.path.basename(urllib.parse.urlsplit(self.path).path)
            if page not in ("bid.php", "edit.php") or "item" not in form:
                return self.send(400, "bad update\n", "text/plain")
            if self.maybe_fail():
                return
            item = int(form["item"][0])
            keys = [f"item:{item}", f"category:{item % 20 + 1}"]
            if page == "bid.php":
                keys.append(f"user:{int(form['user'][0])}")
            keys.append(f"user:{item % 2000 + 1}")
            with st.lock:
                lines = "".join(f"{k}={st.bump(k)}\n" for k in dict.fromkeys(keys))
            self.send(200, lines, "text/plain")

    return H


def run(checker, mode, extra):
    st = State(mode)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(st))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/"
    with tempfile.TemporaryDirectory() as d:
        res_path = os.path.join(d, "r.json")
        argv = [checker, "--proxy", url, "--app", url, "--readers", "4", "--writers", "2",
                "--hot", "20", "--timeout", "5", "--json", res_path, "--quiet"] + extra
        if "--duration" not in extra:
            argv += ["--ops", "4000"]
        print(f"== {mode}: {' '.join(argv)}", flush=True)
        rc = subprocess.run(argv, timeout=120).returncode
        try:
            with open(res_path) as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = {}
    srv.shutdown()
    return rc, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checker", required=True)
    a = ap.parse_args()
    failures = []
    rc, res = run(a.checker, "coherent", [])
    if rc != 0 or res["stale_reads"] != 0 or res["errors"] != 0 or res["checked_reads"] < 100:
        failures.append(f"coherent: exit {rc}, stale {res['stale_reads']}, errors {res['errors']}, "
                        f"checked {res['checked_reads']} (want exit 0, no stale, no error, >= 100 checked)")
    if res.get("read_inversions") != 0 or res.get("strict") is not False:
        failures.append(f"coherent: read_inversions {res.get('read_inversions')}, strict {res.get('strict')} "
                        "(want 0 and false)")
    if res.get("hit_ratio") is None or abs(res["hit_ratio"] - 0.75) > 0.01 or res.get("invalidations") != 0:
        failures.append(f"coherent: proxy metrics deltas hit_ratio {res.get('hit_ratio')}, invalidations "
                        f"{res.get('invalidations')} (want 0.75 and 0 from the fake /rcache-metrics)")
    rc, res = run(a.checker, "coherent", ["--duration", "2"])
    if rc != 0 or not 1.9 <= res.get("elapsed_s", 0) <= 4 or res.get("writes_ok", 0) == 0:
        failures.append(f"--duration 2: exit {rc}, elapsed {res.get('elapsed_s')} s, writes {res.get('writes_ok')}")
    rc, res = run(a.checker, "stale", [])
    if rc != 1 or res["stale_reads"] == 0 or res.get("hit_ratio") is not None:
        failures.append(f"stale: exit {rc}, stale {res['stale_reads']} (want exit 1 with stale reads)")
    rc, res = run(a.checker, "errors", [])
    if rc != 1 or res["stale_reads"] != 0 or res["errors"] == 0:
        failures.append(f"errors: exit {rc}, stale {res['stale_reads']}, errors {res['errors']} "
                        f"(want exit 1, no stale, errors > 0)")
    rc, res = run(a.checker, "errors", ["--max-error-ratio", "0.5"])
    if rc != 0:
        failures.append(f"errors with --max-error-ratio 0.5: exit {rc} (want 0)")
    rc, res = run(a.checker, "coherent", ["--strict"])
    if rc != 0 or res.get("read_inversions") != 0 or res.get("strict") is not True:
        failures.append(f"coherent --strict: exit {rc}, read_inversions {res.get('read_inversions')} (want 0, 0)")
    for extra, want_rc in (([], 0), (["--strict"], 1)):
        rc, res = run(a.checker, "flap", ["--write-ratio", "0"] + extra)
        inv = res.get("read_inversions", 0)
        ex = res.get("inversions", [])
        if (rc != want_rc or not inv or res.get("stale_reads") != 0 or not 1 <= len(ex) <= 5
                or any(e["seen"] >= e["earlier_seen"] or e["gap_us"] <= 0 for e in ex)):
            failures.append(f"flap {' '.join(extra)}: exit {rc}, read_inversions {inv}, stale "
                            f"{res.get('stale_reads')}, {len(ex)} examples (want exit {want_rc}, "
                            "inversions > 0 with 1-5 valid examples, no stale read)")
    for bad in (["--bogus"], ["--proxy", "http://127.0.0.1:1/", "--app", "http://127.0.0.1:1/", "--ops", "5",
                              "--duration", "1"], ["--ops", "10"], ["--proxy", "ftp://x/", "--app", "http://a/"]):
        r = subprocess.run([a.checker] + bad, capture_output=True)
        if r.returncode != 2:
            failures.append(f"bad usage {bad}: exit {r.returncode} (want 2)")
    for f in failures:
        print(f"FAIL: {f}")
    if not failures:
        print("PASS: tierce-check self-test")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
