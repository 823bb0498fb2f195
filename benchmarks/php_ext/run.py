#!/usr/bin/python3
"""benchmarks/php_ext/run.py — automatic vs explicit cache dependencies on the sample app: the
same read-mostly mix through the whole cluster (tools/tierce-cluster, --cache tierce) with the app
sending its own Tierce-Depends / Tierce-Invalidate headers (explicit), with the tierce PHP
extension deriving them from the SQL (auto), and with the extension's pending marks around every
commit (linearizable). ONE run brings the cluster up three times, one configuration each.

A benchmark, not a test: it prints what it measured, ratios vs explicit and target lines with
PASS/MISS; exit 0 = every configuration measured, 1 = some could not be, 2 = bad command line.

  run.py [--out DIR] [--build DIR] [--dir STATE] [--configs explicit,auto,linearizable]
         [--duration S] [--write F] [--edit F] [--transport tcp|shm] [--cost] [--cost-rounds N]

See benchmarks/php_ext/README.md.
"""

import argparse
import datetime
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools"))
from tiercelab import cluster  # noqa: E402

# benchmarks/coherent_cache/run.py: CPU pinning, wrk driver, warm-up (its mix, with our mix.lua:
# the same script plus edit.php writes)
_spec = importlib.util.spec_from_file_location("coherent_cache_run",
                                               os.path.join(REPO, "benchmarks", "coherent_cache", "run.py"))
cc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cc)
cc.LUA = os.path.join(HERE, "mix.lua")

CONFIGS = ("explicit", "auto", "linearizable")
PROFILE = dict(db_items=5000, db_bids=50000, items=2000, cats=20, users=500, duration=20, settle=3,
               warm_max=60, threads=2, conns=32, write=0.05, edit=0.2, weights=(0.7, 0.1, 0.2))


def log(msg):
    print(f"[php_ext {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as f:
        return f.read().decode()


def rcache_status(st):
    """Sum over the proxies of /rcache-status?auto's counters; the version-check quantiles (since
    the cluster started) as a list, one per proxy."""
    tot = {"vc": []}
    for n in cc.proxies(st):
        q = {}
        for line in get(n["url"] + "rcache-status?auto").splitlines():
            k, _, v = line.partition(": ")
            if k.startswith("VersionCheckP"):
                try:
                    q[k] = float(v)
                except ValueError:
                    pass
                continue
            try:
                tot[k] = tot.get(k, 0) + int(v)
            except ValueError:
                pass
        tot["vc"].append(q)
    return tot


def appversion_status(st):
    """Sum over the app nodes of /appversion-status's counters (writer_issued: the numbered
    invalidation rounds issued on the node, whoever sent them: mod_appversion or the extension)."""
    tot = {}
    for n in st["nodes"]:
        if n["role"] != "app":
            continue
        for line in get(n["url"] + "appversion-status").splitlines():
            k, _, v = line.partition(" ")
            try:
                tot[k] = tot.get(k, 0) + int(v)
            except ValueError:
                pass
    return tot


PROBE_PHP = r"""<?php
// written by benchmarks/php_ext/run.py: runs a sample page, and at its end writes what the tierce
// extension derived for it (tierce_status()['request']) to the file named by probe_out (the page
// itself answers as usual: it sends its response with a Content-Length).
$__out = '/tmp/' . basename($_GET['probe_out'] ?? 'tierce-probe.json');
register_shutdown_function(function () use ($__out) {
    $s = function_exists('tierce_status') ? tierce_status() : ['request' => null];
    file_put_contents($__out, json_encode($s['request'] ?? null));
});
require __DIR__ . '/' . basename($_GET['probe_page'] ?? 'item.php');
"""


def probe_names(st):
    """What the extension derives for one page of each kind and one update (auto modes): GET/POST
    the probe page on app node 1 directly (not through a proxy)."""
    app = next(n for n in st["nodes"] if n["role"] == "app")
    path = os.path.join(st["docroot"], "tierce_probe.php")
    with open(path, "w") as f:
        f.write(PROBE_PHP)
    os.chmod(path, 0o644)
    outname = f"tierce-php-ext-probe-{os.getpid()}.json"
    outpath = os.path.join("/tmp", outname)
    out = {}
    try:
        for label, q, body in (("item.php?id=7", "probe_page=item.php&id=7", None),
                               ("category.php?id=3", "probe_page=category.php&id=3", None),
                               ("user.php?id=5", "probe_page=user.php&id=5", None),
                               ("POST bid.php item=7", "probe_page=bid.php", b"item=7&user=5&amount=99999.99"),
                               ("POST edit.php item=7", "probe_page=edit.php", b"item=7&name=probe&description=probe")):
            try:
                if os.path.exists(outpath):
                    os.unlink(outpath)
                req = urllib.request.Request(app["url"] + f"tierce_probe.php?{q}&probe_out={outname}", data=body)
                get_req(req)
                with open(outpath) as f:
                    out[label] = json.load(f)
            except Exception as e:  # noqa: BLE001 — a diagnostic, never fatal
                out[label] = f"probe failed: {e}"
    finally:
        os.unlink(path)
        if os.path.exists(outpath):
            os.unlink(outpath)
    return out


def get_req(req):
    with urllib.request.urlopen(req, timeout=5) as f:
        return f.read().decode()


def measure(st, prof):
    cc.run_wrk(st, prof, prof["settle"], "mix", write=prof["write"])  # settle, discarded
    r0, a0 = rcache_status(st), appversion_status(st)
    r = cc.run_wrk(st, prof, prof["duration"], "mix", write=prof["write"])
    r1, a1 = rcache_status(st), appversion_status(st)
    d = lambda s0, s1, k: s1.get(k, 0) - s0.get(k, 0)  # noqa: E731
    row = {"seconds": round(r["seconds"], 2), "reads_ok": r["r_ok"], "writes_ok": r["w_ok"],
           "writes_sent": r["writes"], "errors": r["errors"] + r["sock_errors"],
           "rps": (r["r_ok"] + r["w_ok"]) / r["seconds"], "read_rps": r["r_ok"] / r["seconds"],
           "write_rps": r["w_ok"] / r["seconds"], "p50_ms": r["p50_us"] / 1000, "p99_ms": r["p99_us"] / 1000}
    for k in ("Hits", "Misses", "VersionFailures", "Invalidations", "Expired", "Stores", "StoreRefused",
              "Uncacheable"):
        row["rc_" + k] = d(r0, r1, k)
    p50 = [q["VersionCheckP50us"] for q in r1["vc"] if "VersionCheckP50us" in q]
    p99 = [q["VersionCheckP99us"] for q in r1["vc"] if "VersionCheckP99us" in q]
    row["vc_p50_us"] = sum(p50) / len(p50) if p50 else None
    row["vc_p99_us"] = max(p99) if p99 else None
    lookups = row["rc_Hits"] + row["rc_Misses"] + row["rc_VersionFailures"] + row["rc_Invalidations"] + row["rc_Expired"]
    row["hit_ratio"] = row["rc_Hits"] / lookups if lookups else 0.0
    for k in ("writer_issued", "invalidations", "invalidations_fenced", "registrations", "refused_race",
              "refused_log", "refused_pending", "refused_other", "not_registered", "second_invalidations",
              "bad_dependency_lists"):
        row["av_" + k] = d(a0, a1, k)
    w = max(1, row["writes_sent"])
    row["rounds_per_update"] = row["av_writer_issued"] / w
    row["av_inval_per_update"] = row["av_invalidations"] / w
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output directory (default benchmarks/results/php_ext-<timestamp>/)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="build directory")
    ap.add_argument("--dir", default="/tmp/tierce-php-ext-bench", help="cluster state directory")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--duration", type=float, help=f"measured seconds per config (default {PROFILE['duration']})")
    ap.add_argument("--write", type=float, help=f"fraction of requests that are updates (default {PROFILE['write']})")
    ap.add_argument("--edit", type=float, help=f"fraction of the updates that are edit.php (default {PROFILE['edit']})")
    ap.add_argument("--weights", help="item,category,user shares of the GETs (default 0.7,0.1,0.2)")
    ap.add_argument("--transport", default="tcp", choices=("tcp", "shm"))
    ap.add_argument("--no-probe", action="store_true", help="skip the dependency-name probe of auto modes")
    a = ap.parse_args()
    prof = dict(PROFILE)
    for k in ("duration", "write", "edit"):
        if getattr(a, k) is not None:
            prof[k] = getattr(a, k)
    if a.weights:
        try:
            prof["weights"] = tuple(float(x) for x in a.weights.split(","))
            assert len(prof["weights"]) == 3 and min(prof["weights"]) >= 0 and sum(prof["weights"]) > 0
        except (ValueError, AssertionError):
            ap.error("--weights wants three non-negative numbers: item,category,user")
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown configuration {c}")
    if subprocess.run(["which", "wrk"], capture_output=True).returncode != 0:
        print("wrk is missing: apt-get install -y wrk", file=sys.stderr)
        return 2
    out = a.out or os.path.join(REPO, "benchmarks", "results",
                                "php_ext-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    build = os.path.abspath(a.build)
    os.environ["TIERCE_W_EDIT"] = str(prof["edit"])
    for k, v in zip(("TIERCE_W_ITEM", "TIERCE_W_CAT", "TIERCE_W_USER"), prof["weights"]):
        os.environ[k] = str(v)

    def term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, term)

    meta = {"build": build, "started": time.time(), "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
            "params": prof, "transport": a.transport}
    rows, skipped, probes = [], [], {}
    try:
        for cfg in configs:
            log(f"=== {cfg}: up")
            try:
                st = cluster.up(a.dir, app_nodes=2, proxy_nodes=2, items=prof["db_items"], bids=prof["db_bids"],
                                build=build, cache="tierce", transport=a.transport, php=cfg)
            except cluster.ClusterError as e:
                if str(e) == "interrupted":
                    raise KeyboardInterrupt from None
                skipped.append(f"{cfg}: up failed: {str(e).splitlines()[0]}")
                log(f"SKIP {cfg}: up failed:\n{e}")
                continue
            try:
                log(cc.pin(st))
                w = cc.warm_up(st, prof)
                log(cc.pin(st) + f"; warm-up {w}")
                row = {"config": cfg, **w, **measure(st, prof)}
                rows.append(row)
                log(f"{cfg}: {row['rps']:.0f} req/s, hit ratio {row['hit_ratio']:.3f}, "
                    f"{row['rounds_per_update']:.2f} rounds/update, errors {row['errors']}")
                if cfg != "explicit" and not a.no_probe:
                    probes[cfg] = probe_names(st)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 — report and go on with the next configuration
                skipped.append(f"{cfg}: {e}")
                log(f"FAILED {cfg}: {e}")
            finally:
                log(f"=== {cfg}: down")
                cluster.down(a.dir)
    except KeyboardInterrupt:
        log("interrupted: bringing the cluster down")
        try:
            cluster.down(a.dir)
        except Exception:  # noqa: BLE001
            pass
        return 1
    meta["loadavg_end"] = os.getloadavg()
    meta["elapsed_s"] = round(time.time() - meta["started"], 1)

    lines = []
    p = lines.append
    by = {r["config"]: r for r in rows}
    p(f"php_ext: automatic vs explicit dependencies — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
      f"{meta['cpus']} CPUs, load average {meta['loadavg_start'][0]:.2f} at start, {meta['loadavg_end'][0]:.2f} at end")
    p(f"Cluster: 2 proxies + 2 app nodes + MariaDB, --cache tierce --transport {a.transport}, "
      f"{prof['db_items']} items / {prof['db_bids']} bids; pinned as benchmarks/coherent_cache (app tier CPU 1, "
      f"proxies + wrk CPU 0)")
    mix_shares = "/".join(f"{w / sum(prof['weights']):.0%}" for w in prof["weights"])
    p(f"Mix (wrk -t{prof['threads']} -c{prof['conns']}, {prof['duration']:.0f} s after a {prof['settle']:.0f} s settle): "
      f"{1 - prof['write']:.0%} GETs ({mix_shares} item/category/user over items 1..{prof['items']}, categories "
      f"1..{prof['cats']}, users 1..{prof['users']}, uniform), {prof['write']:.0%} POSTs ({1 - prof['edit']:.0%} "
      f"bid.php, {prof['edit']:.0%} edit.php)")
    p("")
    hdr = (f"{'config':<13} {'req/s':>7} {'vs expl':>7} {'hit ratio':>9} {'vs expl':>7} {'updates':>7} "
           f"{'rounds/upd':>10} {'av inv/upd':>10} {'p50 ms':>7} {'p99 ms':>7} {'vc p50us':>8} {'vc p99us':>8} {'refused':>7} {'errors':>6}")
    p(hdr)
    p("-" * len(hdr))
    ex = by.get("explicit")
    for r in rows:
        r["rps_vs_explicit"] = cc.ratio(r["rps"], ex and ex["rps"])
        r["hit_vs_explicit"] = cc.ratio(r["hit_ratio"], ex and ex["hit_ratio"])
        refused = r["av_refused_race"] + r["av_refused_log"] + r["av_refused_pending"] + r["av_refused_other"]
        p(f"{r['config']:<13} {r['rps']:>7.0f} {cc.fmt(r['rps_vs_explicit'], '.2f'):>7} {r['hit_ratio']:>9.3f} "
          f"{cc.fmt(r['hit_vs_explicit'], '.2f'):>7} {r['writes_sent']:>7} {r['rounds_per_update']:>10.2f} "
          f"{r['av_inval_per_update']:>10.2f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} {cc.fmt(r['vc_p50_us'], '.1f'):>8} "
          f"{cc.fmt(r['vc_p99_us'], '.1f'):>8} "
          f"{refused:>7} {r['errors']:>6}")
    p("req/s: all successful responses (GETs + POSTs) per second over both proxies (wrk); hit ratio: Hits /")
    p("(Hits + Misses + VersionFailures + Invalidations + Expired) of the proxies' /rcache-status?auto over the")
    p("window; updates: POSTs wrk sent; rounds/upd: the app nodes' appversion-status writer_issued delta (every")
    p("numbered invalidation round, whoever sent it: mod_appversion or the extension's Pend/Release) / updates;")
    p("av inv/upd: mod_appversion's own 'invalidations' / updates; p50/p99: wrk latency of all requests;")
    p("vc p50/p99 us: mod_rcache's version check of a cached page (/rcache-status?auto, since the cluster started,")
    p("mean p50 / max p99 over the proxies); refused: registrations refused at the homes (race, log, pending, other):")
    p("pages rendered but not cached.")
    p("")
    p("Details (window deltas):")
    for r in rows:
        p(f"  {r['config']:<13} hits {r['rc_Hits']} misses {r['rc_Misses']} stale {r['rc_Invalidations']} "
          f"vfail {r['rc_VersionFailures']} stores {r['rc_Stores']} store_refused {r['rc_StoreRefused']} "
          f"uncacheable {r['rc_Uncacheable']} | "
          f"registrations {r['av_registrations']} refused race/log/pending/other {r['av_refused_race']}/"
          f"{r['av_refused_log']}/{r['av_refused_pending']}/{r['av_refused_other']} not_registered "
          f"{r['av_not_registered']} | reads/s {r['read_rps']:.0f} writes/s {r['write_rps']:.1f}")
    p("")
    p("Targets (from the numbers above):")
    au, li = by.get("auto"), by.get("linearizable")
    hv = cc.ratio(au and au["hit_ratio"], ex and ex["hit_ratio"])
    if hv is None:
        p(f"  {'auto hit ratio / explicit >= 0.9':<50} n/a (not measured)")
    else:
        p(f"  {'auto hit ratio / explicit >= 0.9':<50} {'PASS' if hv >= 0.9 else 'MISS'}  ({hv:.2f})")
    if au and li:
        p(f"  {'linearizable throughput vs auto (report)':<50} {li['rps'] / au['rps'] - 1:+.1%} req/s "
          f"({li['rps']:.0f} vs {au['rps']:.0f}; hit ratio {li['hit_ratio']:.3f} vs {au['hit_ratio']:.3f}; "
          f"p50 {li['p50_ms'] - au['p50_ms']:+.2f} ms, p99 {li['p99_ms'] - au['p99_ms']:+.2f} ms)")
    else:
        p(f"  {'linearizable throughput vs auto (report)':<50} n/a (not measured)")
    if probes:
        p("")
        p("What the extension derives (probe on app1, tierce_status()['request'] at the end of the page):")
        for cfg, pr in probes.items():
            p(f"  [{cfg}]")
            for label, req in pr.items():
                if isinstance(req, dict):
                    p(f"    {label:<22} depends {' '.join(req.get('depends') or []) or '-'}")
                    if req.get("invalidates") or req.get("invalidate_all"):
                        p(f"    {'':<22} invalidates {' '.join(req.get('invalidates') or [])}"
                          f"{' (ALL)' if req.get('invalidate_all') else ''}")
                    if req.get("uncacheable"):
                        p(f"    {'':<22} uncacheable: {req.get('uncacheable_reason')}")
                else:
                    p(f"    {label:<22} {req}")
            break  # the same names in both auto modes
    errs = sum(r["errors"] for r in rows)
    if errs:
        p(f"NOTE: {errs} failed requests (non-200, socket errors or timeouts): see the errors column.")
    if skipped:
        p("")
        p("Not measured:")
        for s in skipped:
            p(f"  - {s}")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "probes": probes, "skipped": skipped}, f, indent=2)
    print(f"\nresults: {out}")
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
