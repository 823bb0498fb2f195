#!/usr/bin/python3
"""Self-test of tierce-check --window and --no-pace without a cluster (no root, ~15 s): a fake app
(Python stdlib HTTP server) serves pages with the tierce-data marker and bid.php / edit.php
updates, and misbehaves during stretches of the run, timed from its first request:

  [2, 4) s  updates take 300 ms                  -> window slow=2.2-3.8: write p50 >= 300 ms
  [5, 6) s  every page read gets a 503           -> window err=4.8-6.2: read errors, none elsewhere
  [7, 8) s  item pages show the previous version -> window stale=6.8-8.2: stale reads, none elsewhere

and the checker runs 10 s with --no-pace and those windows, before=0-1.8, late=8.2-10 and
both=2.2-3.8 + both=6.8-8.2 (a name given twice: the union). A window inside a misbehaving
stretch or around it, by 0.2 s: the fake app's clock starts at the checker's first request. The checker must exit 1 (stale
reads, errors), the total stale reads must all fall in window stale, the "both" window must be
the sum of slow and stale, every window's checked reads <= its reads, and the per-window write
latencies must be listed in the JSON. Bad --window arguments exit 2.

Then --rate (open loop) and --timeline against a fresh fake app, 5 s at 100 ops/s (write ratio
0.1) with ONE writer: while updates take 300 ms ([2, 4) s) that writer falls behind its schedule
(10 writes/s due, ~3/s possible), so the writes due then must show latencies well above 300 ms
(measured from the scheduled time, not from when the writer got to them) and be counted late,
while the reads keep their 90 per second in every second of the timeline (their schedule does not
wait for the writes).

  window_selftest.py --checker PATH
Exit 0 passed, 1 failed.
"""
import argparse
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

SLOW, ERR, STALE = (2.0, 4.0), (5.0, 6.0), (7.0, 8.0)


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.versions = {}
        self.t0 = None

    def now(self):
        with self.lock:
            if self.t0 is None:
                self.t0 = time.monotonic()
            return time.monotonic() - self.t0


def within(t, r):
    return r[0] <= t < r[1]


def make_handler(st):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def send(self, status, body, ctype="text/html"):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            t = st.now()
            u = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(u.query)
            kind = os.path.basename(u.path).removesuffix(".php")
            if kind not in ("item", "category", "user") or "id" not in q:
                return self.send(404, "no such page\n", "text/plain")
            if within(t, ERR):
                return self.send(503, "busy\n", "text/plain")
            key = f"{kind}:{int(q['id'][0])}"
            with st.lock:
                v = st.versions.get(key, 1)
            if kind == "item" and within(t, STALE) and v > 1:
                v -= 1
            self.send(200, f'<html><head><meta name="tierce-data" content="{key}={v}"></head></html>\n')

        def do_POST(self):
            t = st.now()
            n = int(self.headers.get("Content-Length", "0"))
            form = urllib.parse.parse_qs(self.rfile.read(n).decode())
            if "item" not in form:
                return self.send(400, "bad update\n", "text/plain")
            if within(t, SLOW):
                time.sleep(0.3)
            item = int(form["item"][0])
            with st.lock:
                key = f"item:{item}"
                st.versions[key] = st.versions.get(key, 1) + 1
                body = f"{key}={st.versions[key]}\n"
            self.send(200, body, "text/plain")

    return H


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checker", required=True)
    a = ap.parse_args()
    failures = []

    for bad in (["--window", "x"], ["--window", "x=3"], ["--window", "x=3-2"], ["--window", "=1-2"],
                ["--window", "a b=1-2"], ["--window", "x=a-2"]):
        r = subprocess.run([a.checker, "--proxy", "http://127.0.0.1:1/", "--app", "http://127.0.0.1:1/"] + bad,
                           capture_output=True)
        if r.returncode != 2:
            failures.append(f"bad usage {bad}: exit {r.returncode} (want 2)")

    st = State()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(st))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        argv = [a.checker, "--proxy", url, "--app", url, "--readers", "4", "--writers", "2", "--hot", "10",
                "--timeout", "5", "--duration", "10", "--no-pace", "--json", out, "--quiet",
                "--window", "before=0-1.8", "--window", "slow=2.2-3.8", "--window", "err=4.8-6.2",
                "--window", "stale=6.8-8.2", "--window", "late=8.2-10", "--window", "both=2.2-3.8",
                "--window", "both=6.8-8.2"]
        print("== " + " ".join(argv), flush=True)
        rc = subprocess.run(argv, timeout=120).returncode
        with open(out) as f:
            res = json.load(f)
    srv.shutdown()
    w = {x["name"]: x for x in res.get("windows", [])}
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "write_latencies_ms"} for k, v in w.items()},
                     indent=1))

    def need(cond, what):
        if not cond:
            failures.append(what)
    need(rc == 1, f"exit {rc} (want 1: stale reads and errors)")
    need(set(w) == {"before", "slow", "err", "stale", "late", "both"}, f"windows {sorted(w)}")
    if not failures:
        need(w["slow"]["write_latency_ms"]["p50"] >= 300, f"slow: write p50 {w['slow']['write_latency_ms']} < 300 ms")
        need(w["before"]["writes_ok"] > 20 and w["before"]["write_latency_ms"]["p50"] < 300,
             f"before: writes {w['before']['writes_ok']}, p50 {w['before']['write_latency_ms']['p50']} ms")
        need(w["err"]["read_errors"] > 0, "err: no read errors")
        for name in ("before", "slow", "stale", "late"):
            need(w[name]["errors"] == 0, f"{name}: {w[name]['errors']} errors (want 0)")
        need(w["stale"]["stale_reads"] > 0, "stale: no stale reads")
        need(w["stale"]["stale_reads"] == res["stale_reads"],
             f"stale reads {res['stale_reads']} in all, {w['stale']['stale_reads']} in window stale")
        for k in ("reads", "reads_ok", "checked_reads", "stale_reads", "writes", "writes_ok", "errors"):
            need(w["both"][k] == w["slow"][k] + w["stale"][k],
                 f"both.{k} {w['both'][k]} != slow {w['slow'][k]} + stale {w['stale'][k]}")
        need(w["both"]["ranges"] == [[2.2, 3.8], [6.8, 8.2]], f"both ranges {w['both']['ranges']}")
        for name, x in w.items():
            need(x["checked_reads"] <= x["reads_ok"] <= x["reads"], f"{name}: checked/ok/reads {x}")
            need(len(x["write_latencies_ms"]) == x["writes_ok"], f"{name}: latency list length")
            if x["write_latencies_ms"]:
                need(abs(max(x["write_latencies_ms"]) - x["write_latency_ms"]["max"]) < 1e-6, f"{name}: max")
        need(sum(w[n]["reads"] for n in ("before", "slow", "err", "stale", "late")) <= res["reads"], "reads sum")
        # --no-pace: the 300 ms writes did not hold the readers back.
        need(w["slow"]["reads"] > 20 * w["slow"]["writes"],
             f"slow: {w['slow']['reads']} reads for {w['slow']['writes']} writes (readers were paced?)")
    # --rate + --timeline: open loop.
    st2 = State()
    srv2 = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(st2))
    srv2.daemon_threads = True
    threading.Thread(target=srv2.serve_forever, daemon=True).start()
    url2 = f"http://127.0.0.1:{srv2.server_address[1]}/"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        argv = [a.checker, "--proxy", url2, "--app", url2, "--readers", "4", "--writers", "1", "--hot", "10",
                "--timeout", "5", "--duration", "5", "--rate", "100", "--write-ratio", "0.1", "--timeline",
                "--json", out, "--quiet"]
        print("== " + " ".join(argv), flush=True)
        rc2 = subprocess.run(argv, timeout=120).returncode
        try:
            with open(out) as f:
                res2 = json.load(f)
        except (OSError, ValueError):
            res2 = {}
            failures.append(f"--rate run: exit {rc2}, no result")
    srv2.shutdown()
    tl = res2.get("timeline", [])
    print(json.dumps({"rate": res2.get("rate"), "timeline": tl}, indent=1))
    need(len(tl) >= 5, f"--timeline: {len(tl)} seconds (want 5)")
    if len(tl) >= 5:
        for x in tl[:5]:
            need(85 <= x["reads"] <= 95, f"--rate: second {x['t']}: {x['reads']} reads (want ~90: open loop)")
        need(tl[0]["writes"] >= 8 and tl[0]["write_latency_ms"]["p99"] < 200,
             f"--rate: second 0: {tl[0]['writes']} writes, p99 {tl[0]['write_latency_ms']['p99']} ms")
        worst = max(tl[2]["write_latency_ms"]["p50"], tl[3]["write_latency_ms"]["p50"])
        need(worst > 600, f"--rate: seconds 2-3: write p50 at most {worst} ms (want > 600: the backlog "
                          "behind the one writer, measured from the scheduled times)")
    need((res2.get("rate") or {}).get("late", 0) > 5, f"--rate: late operations {res2.get('rate')}")
    need(res2.get("reads", 0) + res2.get("writes", 0) <= 505, f"--rate: {res2.get('reads')} reads + "
         f"{res2.get('writes')} writes in 5 s at 100/s")
    for f in failures:
        print(f"FAIL: {f}")
    if not failures:
        print("PASS: tierce-check --window, --rate and --timeline self-test")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
