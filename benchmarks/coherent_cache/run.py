#!/usr/bin/python3
"""benchmarks/coherent_cache/run.py — Tierce coherent dynamic-page cache vs no cache vs Apache
mod_cache, measured side by side in ONE run (thesis ch. 6: Fig. 6.6 update rate, Fig. 6.9
dependencies per page, Fig. 6.10 load; paper 003: 8.8x unloaded, 21.9x loaded).

This is a benchmark, not a test: it prints tables and ratios of what it measured and the target
lines with PASS/MISS; its exit status only says whether the run itself worked (0), some rows could
not be measured (1), or the command line was wrong (2).

  run.py [--quick] [--out DIR] [--build DIR] [--dir STATE_DIR] [--configs none,mod_cache,...]
         [--no-sweeps] [--duration S]

See benchmarks/coherent_cache/README.md.
"""

import argparse
import csv
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools"))
from tiercelab import cluster  # noqa: E402

LUA = os.path.join(HERE, "mix.lua")
APP_CPU, PROXY_CPU = 1, 0

CONFIGS = {  # name -> tierce-cluster up options
    "none": {"cache": "none"},
    "mod_cache": {"cache": "mod_cache"},
    # mod_cache at its best: a TTL longer than the run, so nothing expires while it is measured
    # (pure hit-serving speed; as stale as it gets: writes never reach it)
    "mod_cache-1h": {"cache": "mod_cache", "ttl": 3600},
    "tierce-tcp": {"cache": "tierce", "transport": "tcp"},
    "tierce-shm": {"cache": "tierce", "transport": "shm"},
    # The same without tierce-binlogd (issue 31: the agent must not cost the hit path anything;
    # it only adds invalidation rounds for writes): not in the default list, ask for it.
    "tierce-shm-nobinlogd": {"cache": "tierce", "transport": "shm", "binlogd": False},
}
DEFAULT_CONFIGS = [c for c in CONFIGS if c != "tierce-shm-nobinlogd"]

PROFILES = {
    # hot set: items 1..items, categories 1..cats, users 1..users (each proxy caches all of them)
    "full": dict(db_items=10000, db_bids=100000, items=2000, cats=20, users=1000, duration=12,
                 settle=4, warm_max=90, app_load=2, threads=2, conns=32,
                 rates=[0.0, 0.01, 0.05, 0.10, 0.20], ks=[1, 2, 4, 8, 16, 32], deps_rate=0.02,
                 sweep_duration=10, probe=3),
    "quick": dict(db_items=2000, db_bids=20000, items=300, cats=20, users=100, duration=4,
                  settle=1.5, warm_max=30, app_load=2, threads=2, conns=32,
                  rates=[0.0, 0.05, 0.20], ks=[1, 4, 32], deps_rate=0.02, sweep_duration=3,
                  probe=2),
}


class Stop(Exception):
    pass


def log(msg):
    print(f"[coherent_cache {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# CPU pinning: app tier (MariaDB, app httpd + children, app memd, burners) on APP_CPU, proxies (httpd
# + children, memd) and wrk on PROXY_CPU. Same for every configuration.


def _session_members(sid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(")") + 2:].split()
        try:
            if int(rest[3]) == sid:  # field 6: session id
                out.append(int(p))
        except (IndexError, ValueError):
            pass
    return out


def _pin_pid_tree(pid, cpu):
    """Every thread of every process in pid's session (the launcher starts each in its own)."""
    n = 0
    for p in set([pid] + _session_members(pid)):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                os.sched_setaffinity(int(t), {cpu})
                n += 1
            except OSError:
                pass
    return n


def pin(st):
    if os.cpu_count() < 2:
        return "not pinned (1 CPU)"
    counts = {APP_CPU: 0, PROXY_CPU: 0}
    recs = [(st["mariadb"].get("process"), APP_CPU)]
    for n in st["nodes"]:
        cpu = APP_CPU if n["role"] == "app" else PROXY_CPU
        recs += [(n.get("httpd"), cpu), (n.get("memd"), cpu)] + [(r, cpu) for r in n.get("load", [])]
    for rec, cpu in recs:
        if rec and rec.get("pid"):
            counts[cpu] += _pin_pid_tree(rec["pid"], cpu)
    return f"pinned {counts[APP_CPU]} app-tier threads to CPU {APP_CPU}, {counts[PROXY_CPU]} proxy-tier to CPU {PROXY_CPU}"


# ------------------------------------------------------------------------------------------------
# load generation


def proxies(st):
    return [n for n in st["nodes"] if n["role"] == "proxy"]


def run_wrk(st, prof, seconds, mode, write=0.0, k=0, conns=None, threads=None):
    threads = threads or prof["threads"]
    conns = conns or prof["conns"]
    px = proxies(st)
    env = dict(os.environ)
    env.update({"TIERCE_ADDRS": ",".join(f"127.0.0.1:{n['port']}" for n in px), "TIERCE_MODE": mode,
                "TIERCE_ITEMS": str(prof["items"]), "TIERCE_CATS": str(prof["cats"]),
                "TIERCE_USERS": str(prof["users"]), "TIERCE_WRITE": str(write), "TIERCE_K": str(k)})
    argv = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{max(1, int(round(seconds)))}s", "--timeout", "10s",
            "-s", LUA, px[0]["url"]]
    if os.cpu_count() >= 2:
        argv = ["taskset", "-c", str(PROXY_CPU)] + argv
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 60)
    m = re.search(r"^TIERCE_RESULT (\{.*\})$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"wrk failed (exit {r.returncode}): {r.stderr.strip()[-400:]} {r.stdout[-400:]}")
    res = json.loads(m.group(1))
    res["seconds"] = res["duration_us"] / 1e6
    return res


def metrics(st):
    """Sum of counters and per-proxy quantiles of /rcache-metrics (tierce only)."""
    tot = {}
    quants = []
    for n in proxies(st):
        with urllib.request.urlopen(n["url"] + "rcache-metrics", timeout=5) as f:
            text = f.read().decode()
        q = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, val = line.rpartition(" ")
            mq = re.match(r'tierce_rcache_version_check_seconds\{quantile="([0-9.]+)"\}', name)
            if mq:
                q[mq.group(1)] = float(val)
            else:
                tot[name] = tot.get(name, 0.0) + float(val)
        quants.append(q)
    tot["quantiles"] = quants
    return tot


def mdelta(a, b, key):
    return int(b.get(key, 0) - a.get(key, 0))


def quantiles_us(m):
    """(mean of the proxies' p50, max of their p99) in microseconds from a metrics() result."""
    qs = m["quantiles"]
    p50 = [q["0.5"] for q in qs if q.get("0.5") is not None]
    p99 = [q["0.99"] for q in qs if q.get("0.99") is not None]
    return (sum(p50) / len(p50) * 1e6 if p50 else None, max(p99) * 1e6 if p99 else None)


def probe(st, prof, seconds):
    """Version-check latency without saturation: on a fresh cluster, before the warm-up, one
    connection per proxy cycles over 20 item pages (20 misses, then hits) for `seconds`; returns the
    quantiles /rcache-metrics shows right after (nearly all of its samples are these hits)."""
    small = dict(prof, items=20, cats=0, users=0)
    npx = len(proxies(st))
    r = run_wrk(st, small, seconds, "seq", threads=npx, conns=npx)
    p50, p99 = quantiles_us(metrics(st))
    return {"probe_p50_us": p50, "probe_p99_us": p99, "probe_rps": r["r_ok"] / r["seconds"]}


def burners(st, sig):
    """SIGSTOP / SIGCONT the launcher's busy loops (this run started them via --app-load)."""
    for n in st["nodes"]:
        for rec in n.get("load", []):
            try:
                os.kill(rec["pid"], sig)
            except ProcessLookupError:
                pass


def warm_up(st, prof, k=0):
    """Walks the whole hot set through every proxy (wrk seq mode, one thread per proxy) until each
    proxy saw every URL at least once, then a short random-mix settle period."""
    npx = len(proxies(st))
    nurls = prof["items"] if k else prof["items"] + prof["cats"] + prof["users"]
    t0 = time.monotonic()
    seen = 0
    step = 3
    while True:
        r = run_wrk(st, prof, step, "seq", k=k, threads=npx, conns=8 * npx)
        seen += r["reads"] / npx
        if seen >= nurls or time.monotonic() - t0 > prof["warm_max"]:
            break
        step = min(10, max(2, (nurls - seen) / max(1.0, r["reads"] / npx / r["seconds"]) + 1))
    return {"warm_s": round(time.monotonic() - t0, 1), "warm_coverage": round(min(1.0, seen / nurls), 3)}


def measure(st, prof, tierce, seconds, mode="mix", write=0.0, k=0):
    """settle (same mix, discarded), then the measured window; counters from wrk and /rcache-metrics."""
    if prof["settle"] > 0:
        run_wrk(st, prof, prof["settle"], mode, write=write, k=k)
    m0 = metrics(st) if tierce else None
    r = run_wrk(st, prof, seconds, mode, write=write, k=k)
    m1 = metrics(st) if tierce else None
    row = {"read_rps": r["r_ok"] / r["seconds"], "write_rps": r["w_ok"] / r["seconds"],
           "reads_ok": r["r_ok"], "writes_ok": r["w_ok"], "errors": r["errors"] + r["sock_errors"],
           "wrk_p50_ms": r["p50_us"] / 1000, "wrk_p99_ms": r["p99_us"] / 1000, "seconds": round(r["seconds"], 2)}
    if tierce:
        hits = mdelta(m0, m1, "tierce_rcache_hits_total")
        row.update({"hits": hits, "misses": mdelta(m0, m1, "tierce_rcache_misses_total"),
                    "stale": mdelta(m0, m1, "tierce_rcache_stale_rejects_total"),
                    "vfail": mdelta(m0, m1, "tierce_rcache_version_failures_total"),
                    })
        # a lookup is a hit, a miss, an entry found stale (invalidated) or a failed version read
        lookups = hits + row["misses"] + row["stale"] + row["vfail"]
        row["hit_ratio"] = hits / lookups if lookups else 0.0
        row["vc_p50_us"], row["vc_p99_us"] = quantiles_us(m1)
    else:
        row["hits"] = r["hits"]
        row["hit_ratio"] = r["hits"] / r["r_ok"] if r["r_ok"] else 0.0
    return row


# ------------------------------------------------------------------------------------------------
# the run


def fmt(v, spec=".0f", none="-"):
    return none if v is None else format(v, spec)


def ratio(a, b):
    return a / b if (a is not None and b) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (~3 min)")
    ap.add_argument("--out", help="output directory (default benchmarks/results/coherent_cache-<timestamp>/)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="build directory")
    ap.add_argument("--dir", default="/tmp/tierce-coherent-cache", help="cluster state directory")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help="comma list among " + ",".join(CONFIGS))
    ap.add_argument("--sweep-config", default="tierce-shm", help="configuration of the two sweeps")
    ap.add_argument("--no-sweeps", action="store_true", help="only the throughput table")
    ap.add_argument("--duration", type=float, help="seconds per measured row (overrides the profile)")
    ap.add_argument("--app-load", type=int, help="busy threads per app node in the loaded rows")
    ap.add_argument("--ttl", type=int, default=10, help="mod_cache TTL, seconds (default 10)")
    a = ap.parse_args()
    prof = dict(PROFILES["quick" if a.quick else "full"])
    if a.duration:
        prof["duration"] = prof["sweep_duration"] = a.duration
    if a.app_load is not None:
        prof["app_load"] = a.app_load
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    for c in configs + [a.sweep_config]:
        if c not in CONFIGS:
            ap.error(f"unknown configuration {c}")
    if subprocess.run(["which", "wrk"], capture_output=True).returncode != 0:
        print("wrk is missing: apt-get install -y wrk", file=sys.stderr)
        return 2
    out = a.out or os.path.join(REPO, "benchmarks", "results",
                                "coherent_cache-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    build = os.path.abspath(a.build)

    def term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, term)

    tierce_missing = [p for p in ("mod_rcache/mod_rcache.so", "mod_appversion/mod_appversion.so",
                                  "agents/memd/tierce-memd") if not os.path.exists(os.path.join(build, p))]
    meta = {"profile": "quick" if a.quick else "full", "build": build, "started": time.time(),
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "pinning":
            f"app tier (MariaDB, app httpd, app memd, burners) on CPU {APP_CPU}; proxies, proxy memd, wrk on CPU {PROXY_CPU}",
            "params": prof, "mod_cache_ttl": a.ttl}
    rows, upd, deps, skipped = [], [], [], []
    t_start = time.monotonic()

    # cluster plan: (config, load); sweeps ride on the unloaded cluster of their config
    plan = [(c, 0) for c in configs] + [(c, prof["app_load"]) for c in configs]
    if not a.no_sweeps:
        for c in (a.sweep_config, "none"):
            if c not in configs:
                plan.insert(0, (c, 0))
    seen_plan = set()
    plan = [p for p in plan if not (p in seen_plan or seen_plan.add(p))]

    try:
        for cfg, load in plan:
            opts = CONFIGS[cfg]
            tierce = opts["cache"] == "tierce"
            if tierce and tierce_missing:
                skipped.append(f"{cfg} load={load}: missing {', '.join(tierce_missing)} under {build}")
                log(f"SKIP {cfg}: missing {tierce_missing}")
                continue
            log(f"=== {cfg}, app load {load}: up")
            try:
                up_opts = dict(opts)
                ttl = up_opts.pop("ttl", a.ttl)
                st = cluster.up(a.dir, app_nodes=2, proxy_nodes=2, items=prof["db_items"], bids=prof["db_bids"],
                                build=build, app_load=load, ttl=ttl, **up_opts)
            except cluster.ClusterError as e:
                if str(e) == "interrupted":
                    raise KeyboardInterrupt from None
                skipped.append(f"{cfg} load={load}: up failed: {str(e).splitlines()[0]}")
                log(f"SKIP {cfg} load={load}: up failed:\n{e}")
                continue
            try:
                log(pin(st))
                pr = probe(st, prof, prof["probe"]) if tierce and cfg in configs else {}
                if pr:
                    log(f"{cfg} load={load}: version-check probe {pr}")
                if opts["cache"] == "none":
                    w = {"warm_s": 0, "warm_coverage": None}  # nothing to fill; settle only
                else:
                    # fill the caches with the burners paused (warm-up is not measured)
                    burners(st, signal.SIGSTOP)
                    try:
                        w = warm_up(st, prof)
                    finally:
                        burners(st, signal.SIGCONT)
                log(pin(st) + f"; warm-up {w}")
                in_table = cfg in configs
                if in_table:
                    row = measure(st, prof, tierce, prof["duration"])
                    row.update({"config": cfg, "app_load": load, "loadavg": round(os.getloadavg()[0], 2), **w, **pr})
                    rows.append(row)
                    log(f"{cfg} load={load}: {row['read_rps']:.0f} req/s, hit ratio {row['hit_ratio']:.3f}, "
                        f"errors {row['errors']}")
                if load == 0 and not a.no_sweeps and cfg in (a.sweep_config, "none"):
                    for rate in prof["rates"]:
                        r = measure(st, prof, tierce, prof["sweep_duration"], write=rate)
                        r.update({"config": cfg, "write_frac": rate})
                        upd.append(r)
                        log(f"update sweep {cfg} {rate:.0%}: {r['read_rps']:.0f} reads/s, "
                            f"{r['write_rps']:.0f} writes/s, hit ratio {r['hit_ratio']:.3f}")
                    if cfg == a.sweep_config:
                        for k in prof["ks"]:
                            wk = warm_up(st, prof, k=k)
                            r = measure(st, prof, tierce, prof["sweep_duration"], mode="deps",
                                        write=prof["deps_rate"], k=k)
                            r.update({"config": cfg, "k": k, "write_frac": prof["deps_rate"], **wk})
                            deps.append(r)
                            log(f"deps sweep K={k}: {r['read_rps']:.0f} reads/s, hit ratio {r['hit_ratio']:.3f}")
            except RuntimeError as e:
                skipped.append(f"{cfg} load={load}: {e}")
                log(f"FAILED {cfg} load={load}: {e}")
            finally:
                cluster.down(a.dir)
    except KeyboardInterrupt:
        log("interrupted: stopping the cluster")
        try:
            cluster.down(a.dir)
        except Exception as e:  # noqa: BLE001
            log(f"down: {e}")
        skipped.append("interrupted")
    meta["elapsed_s"] = round(time.monotonic() - t_start, 1)
    meta["loadavg_end"] = os.getloadavg()
    report(out, meta, rows, upd, deps, skipped, prof)
    return 1 if skipped else 0


def report(out, meta, rows, upd, deps, skipped, prof):
    by = {(r["config"], r["app_load"]): r for r in rows}
    lines = []
    p = lines.append
    p(f"Tierce coherent cache benchmark ({meta['profile']}), {meta['elapsed_s']} s; "
      f"2 app + 2 proxy nodes, wrk -t{prof['threads']} -c{prof['conns']}, {prof['duration']} s per row")
    p(f"Pinning: {meta['pinning']} (all configurations alike). Load average at start "
      f"{meta['loadavg_start'][0]:.2f}, at end {meta['loadavg_end'][0]:.2f} (other users of the CPUs show here).")
    p(f"Hot set: items 1..{prof['items']}, categories 1..{prof['cats']}, users 1..{prof['users']} "
      f"(70/10/20% item/category/user GETs); mod_cache TTL {meta['mod_cache_ttl']} s; loaded = "
      f"--app-load {prof['app_load']} busy threads per app node.")
    p("")
    hdr = f"{'config':<12} {'load':>4} {'req/s':>8} {'vs none':>8} {'vs mod_cache':>12} {'hit ratio':>9} " \
          f"{'vc p50 us':>9} {'vc p99 us':>9} {'idle p50':>8} {'idle p99':>8} {'errors':>6}"
    p(hdr)
    p("-" * len(hdr))
    for r in rows:
        base = by.get(("none", r["app_load"]))
        mc = by.get(("mod_cache", r["app_load"]))
        r["vs_none"] = ratio(r["read_rps"], base and base["read_rps"])
        r["vs_mod_cache"] = ratio(r["read_rps"], mc and mc["read_rps"])
        p(f"{r['config']:<12} {r['app_load']:>4} {r['read_rps']:>8.0f} {fmt(r['vs_none'], '.2f', '-') + ('x' if r['vs_none'] else ''):>8} "
          f"{fmt(r['vs_mod_cache'], '.2f', '-') + ('x' if r['vs_mod_cache'] else ''):>12} {r['hit_ratio']:>9.3f} {fmt(r.get('vc_p50_us'), '.2f'):>9} "
          f"{fmt(r.get('vc_p99_us'), '.2f'):>9} {fmt(r.get('probe_p50_us'), '.2f'):>8} "
          f"{fmt(r.get('probe_p99_us'), '.2f'):>8} {r['errors']:>6}")
    p("req/s: successful page GETs per second over both proxies (wrk). hit ratio: tierce = hits / (hits + misses"
      " + stale + failed checks) from /rcache-metrics; mod_cache = 'X-Cache: HIT' responses / 200 pages.")
    p("vc p50/p99: version check inside mod_rcache, /rcache-metrics quantiles (power-of-two buckets) since the"
      " cluster started, i.e. mostly under the saturating wrk run; idle p50/p99: the same right after a")
    p("1-connection-per-proxy probe on the fresh cluster (before the warm-up). p50 = mean over the proxies,"
      " p99 = max.")
    if upd:
        p("")
        p("Update-rate sweep (Fig. 6.6): POST bid.php through the proxies as a fraction of requests")
        h2 = f"{'config':<12} {'writes':>6} {'reads/s':>8} {'writes/s':>8} {'hit ratio':>9} {'stale':>7} {'errors':>6}"
        p(h2)
        p("-" * len(h2))
        for r in upd:
            p(f"{r['config']:<12} {r['write_frac']:>6.0%} {r['read_rps']:>8.0f} {r['write_rps']:>8.1f} "
              f"{r['hit_ratio']:>9.3f} {fmt(r.get('stale'), 'd'):>7} {r['errors']:>6}")
        p("(stale: cached entries found invalidated by their version check during the window)")
    if deps:
        p("")
        p(f"Dependencies-per-page sweep (Fig. 6.9): deps.php?id=N&k=K over items 1..{prof['items']}, "
          f"{prof['deps_rate']:.0%} writes (POST bid.php)")
        h3 = f"{'config':<12} {'K':>3} {'reads/s':>8} {'writes/s':>8} {'hit ratio':>9} {'stale':>7} {'errors':>6}"
        p(h3)
        p("-" * len(h3))
        for r in deps:
            p(f"{r['config']:<12} {r['k']:>3} {r['read_rps']:>8.0f} {r['write_rps']:>8.1f} {r['hit_ratio']:>9.3f} "
              f"{fmt(r.get('stale'), 'd'):>7} {r['errors']:>6}")
    p("")
    p("Targets (from the numbers above):")
    L = prof["app_load"]

    def target(text, values, ok):
        if any(v is None for v in values):
            p(f"  {text:<62} n/a (not measured)")
        else:
            p(f"  {text:<62} {'PASS' if ok(values) else 'MISS'}  ({', '.join(fmt(v, '.2f') for v in values)})")
    g = lambda c, l, k="read_rps": (by.get((c, l)) or {}).get(k)  # noqa: E731
    target("Tierce shm / mod_cache >= 0.9 (unloaded, loaded)",
           [ratio(g("tierce-shm", 0), g("mod_cache", 0)), ratio(g("tierce-shm", L), g("mod_cache", L))],
           lambda v: min(v) >= 0.9)
    target("Tierce shm / mod_cache-1h (all hits) >= 0.9 (unloaded, loaded)",
           [ratio(g("tierce-shm", 0), g("mod_cache-1h", 0)), ratio(g("tierce-shm", L), g("mod_cache-1h", L))],
           lambda v: min(v) >= 0.9)
    target("Tierce shm / no cache >= 5x unloaded", [ratio(g("tierce-shm", 0), g("none", 0))], lambda v: v[0] >= 5)
    target("Tierce shm / no cache >= 10x loaded", [ratio(g("tierce-shm", L), g("none", L))], lambda v: v[0] >= 10)
    target("Tierce tcp / no cache >= 5x unloaded", [ratio(g("tierce-tcp", 0), g("none", 0))], lambda v: v[0] >= 5)
    target("Tierce tcp / no cache >= 10x loaded", [ratio(g("tierce-tcp", L), g("none", L))], lambda v: v[0] >= 10)
    target("version check p50 <= 2 us shm (saturated: unloaded, loaded)",
           [g("tierce-shm", 0, "vc_p50_us"), g("tierce-shm", L, "vc_p50_us")], lambda v: max(v) <= 2)
    target("version check p50 <= 50 us tcp (saturated: unloaded, loaded)",
           [g("tierce-tcp", 0, "vc_p50_us"), g("tierce-tcp", L, "vc_p50_us")], lambda v: max(v) <= 50)
    target("version check p50 <= 2 us shm (idle probe: unloaded, loaded)",
           [g("tierce-shm", 0, "probe_p50_us"), g("tierce-shm", L, "probe_p50_us")], lambda v: max(v) <= 2)
    target("version check p50 <= 50 us tcp (idle probe: unloaded, loaded)",
           [g("tierce-tcp", 0, "probe_p50_us"), g("tierce-tcp", L, "probe_p50_us")], lambda v: max(v) <= 50)
    for r in rows:
        if r["config"].startswith("mod_cache") and r["hit_ratio"] < 0.9:
            n = 2 * (prof["items"] + prof["cats"] + prof["users"])
            p(f"NOTE: mod_cache load={r['app_load']} hit ratio {r['hit_ratio']:.2f}: its entries expire every "
              f"{meta['mod_cache_ttl']} s and the {n} hot URLs (both proxies) are then fetched again from the app tier.")
    errs = sum(r["errors"] for r in rows + upd + deps)
    if errs:
        p(f"NOTE: {errs} failed requests (non-200, socket errors or timeouts) in total: see the errors columns.")
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
        json.dump({"meta": meta, "throughput": rows, "update_sweep": upd, "deps_sweep": deps,
                   "skipped": skipped}, f, indent=2)
    for name, data in (("throughput", rows), ("update_sweep", upd), ("deps_sweep", deps)):
        if not data:
            continue
        keys = []
        for r in data:
            keys += [k for k in r if k not in keys]
        with open(os.path.join(out, name + ".csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(data)
    plots(out, rows, upd, deps, prof)
    print(f"\nresults: {out}")


def plots(out, rows, upd, deps, prof):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing (run with /usr/bin/python3): no plots")
        return
    if rows:
        cfgs = [c for c in CONFIGS if any(r["config"] == c for r in rows)]
        loads = sorted({r["app_load"] for r in rows})
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / max(1, len(loads))
        for j, l in enumerate(loads):
            vals = [next((r["read_rps"] for r in rows if r["config"] == c and r["app_load"] == l), 0) for c in cfgs]
            xs = [i + (j - (len(loads) - 1) / 2) * width for i in range(len(cfgs))]
            bars = ax.bar(xs, vals, width, label="unloaded" if l == 0 else f"app load {l}/node")
            for b, v in zip(bars, vals):
                ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(cfgs)))
        ax.set_xticklabels(cfgs)
        ax.set_ylabel("page GETs per second")
        ax.set_title("Read-mostly throughput through 2 proxies")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "throughput.png"), dpi=120)
        plt.close(fig)
    if upd:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        for c in sorted({r["config"] for r in upd}):
            rr = [r for r in upd if r["config"] == c]
            xs = [r["write_frac"] * 100 for r in rr]
            ax1.plot(xs, [r["read_rps"] for r in rr], marker="o", label=c)
            ax2.plot(xs, [r["hit_ratio"] for r in rr], marker="o", label=c)
        ax1.set_xlabel("writes, % of requests")
        ax1.set_ylabel("page GETs per second")
        ax1.set_title("Throughput vs update rate (Fig. 6.6)")
        ax2.set_xlabel("writes, % of requests")
        ax2.set_ylabel("hit ratio")
        ax2.set_ylim(0, 1.05)
        ax1.legend()
        ax2.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "update_sweep.png"), dpi=120)
        plt.close(fig)
    if deps:
        fig, ax1 = plt.subplots(figsize=(7, 4))
        ks = [r["k"] for r in deps]
        ax1.plot(ks, [r["read_rps"] for r in deps], marker="o", color="C0", label="page GETs/s")
        ax1.set_xscale("log", base=2)
        ax1.set_xlabel("dependencies per page (K)")
        ax1.set_ylabel("page GETs per second", color="C0")
        ax2 = ax1.twinx()
        ax2.plot(ks, [r["hit_ratio"] for r in deps], marker="s", color="C1", label="hit ratio")
        ax2.set_ylabel("hit ratio", color="C1")
        ax2.set_ylim(0, 1.05)
        ax1.set_title(f"{deps[0]['config']}: dependencies per page, {prof['deps_rate']:.0%} writes (Fig. 6.9)")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "deps_sweep.png"), dpi=120)
        plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
