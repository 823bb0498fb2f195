#!/usr/bin/python3
"""benchmarks/coop_cache/run.py — cooperative caching across proxies (issue 15; seed 000 ch. 7,
Table 7.1, Figs. 7.4-7.5): AC (each proxy alone), BCC and CCWR (mod_rcache's RCacheCoop) and the
shared-memcached baseline (mod_cache + mod_cache_socache + mod_socache_memcache, one memcached for
both proxies), on working sets smaller than, equal to and larger than one proxy's arena, measured
side by side in ONE run.

This is a benchmark, not a test: it prints tables and ratios of what it measured and the target
lines with PASS/MISS; its exit status only says whether every row was measured (0), some rows
could not be (1: listed under "Not measured"), or the command line was wrong (2).

  run.py [--quick] [--out DIR] [--build DIR] [--dir STATE_DIR] [--configs AC,BCC,CCWR,memcached,none,...]
         [--arena-size 64M] [--fractions 0.5,1,1.8] [--zipf 0.9] [--seed 1] [--duration S] [--ttl S]

See benchmarks/coop_cache/README.md.
"""

import argparse
import csv
import datetime
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools"))
from tiercelab import cluster, procs  # noqa: E402


def _load_coherent_cache():
    """benchmarks/coherent_cache/run.py as a module: its CPU pinning is reused as is."""
    spec = importlib.util.spec_from_file_location("coherent_cache_run",
                                                  os.path.join(REPO, "benchmarks", "coherent_cache", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_cc = _load_coherent_cache()
APP_CPU, PROXY_CPU = _cc.APP_CPU, _cc.PROXY_CPU
LUA = os.path.join(HERE, "zipf.lua")

# blob.php?id=K renders exactly blob_size(K) bytes (sample/php/blob.php: the same formula)
BLOB_MIN, BLOB_MAX = 8192, 65536
# blob.php?id=K&size=small: 2-8 KiB (the HYBCC small-page experiment; --pages small)
BLOB_SMALL_MIN, BLOB_SMALL_MAX = 2048, 8191
PAGES = "large"  # set by main() from --pages


def blob_size(k):
    if PAGES == "small":
        return BLOB_SMALL_MIN + zlib.crc32(b"blob:%d" % k) % (BLOB_SMALL_MAX - BLOB_SMALL_MIN + 1)
    return BLOB_MIN + zlib.crc32(b"blob:%d" % k) % (BLOB_MAX - BLOB_MIN + 1)


# name -> tierce-cluster up options. "coop" is passed only where the launcher knows it (AC: coop
# off is today's behaviour, so AC runs on a launcher without --coop too; BCC/CCWR are refused there
# and listed under "Not measured").
CONFIGS = {
    "none": {"cache": "none"},
    "AC": {"cache": "tierce", "coop": "off"},
    "BCC": {"cache": "tierce", "coop": "bcc"},
    "CCWR": {"cache": "tierce", "coop": "ccwr"},
    # optional (not in a profile's default list): the schemes that also cache in memory the app
    # nodes donate (memd [pool], pool_bytes = one arena per app node, as seed 000 gives every
    # node the same cache size): more memory than the memcached row, so not in the targets
    "MTACC": {"cache": "tierce", "coop": "mtacc"},
    "HYBCC": {"cache": "tierce", "coop": "hybcc"},
    "memcached": {"cache": "mod_cache_memcached"},
    # optional (not in a profile's default list): the same at its best, nothing expires while it
    # is measured (pure hit-serving speed; as stale as it gets)
    "memcached-1h": {"cache": "mod_cache_memcached", "ttl": 3600},
}
COOP_CONFIGS = ("BCC", "CCWR")  # the targets' "best coop": the proxies' arenas only (= memcached's memory)
POOL_CONFIGS = ("MTACC", "HYBCC")
COLORS = {"none": "C7", "AC": "C0", "BCC": "C1", "CCWR": "C2", "MTACC": "C5", "HYBCC": "C6",
          "memcached": "C3", "memcached-1h": "C4"}  # the same in both plots

PROFILES = {
    "full": dict(arena="64M", fractions=[0.5, 1.0, 1.8], duration=20, settle=8, warm_max=150, threads=2,
                 conns=32, configs=["AC", "BCC", "CCWR", "memcached", "none"]),
    "quick": dict(arena="32M", fractions=[0.5, 1.0, 1.8], duration=6, settle=3, warm_max=60, threads=2,
                  conns=32, configs=["AC", "BCC", "CCWR", "memcached", "none"]),
}


class RowFailed(Exception):
    pass


def log(msg):
    print(f"[coop_cache {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# sizes and working sets


def parse_size(text):
    m = re.fullmatch(r"\s*([0-9]+)\s*([KMG]?)\s*", str(text), re.I)
    if not m:
        raise ValueError(f"size {text!r}: want N, NK, NM or NG")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def launcher_arena():
    """(bytes, text, how): the arena every proxy gets. With a launcher that has arena_size the
    benchmark chooses it; without, it is the RCacheSize written in conf/proxy.conf.in."""
    with open(os.path.join(REPO, "conf", "proxy.conf.in")) as f:
        m = re.search(r"^\s*RCacheSize\s+(\S+)", f.read(), re.M)
    text = m.group(1) if m else "256M"  # mod_rcache's default
    try:
        return parse_size(text), text
    except ValueError:  # a template variable: the launcher fills it (mod_rcache's default then)
        return 256 << 20, "256M"


def working_sets(arena_bytes, fractions):
    """For each fraction f: the smallest N such that pages 1..N total >= f x arena."""
    out = []
    total, k = 0, 0
    for f in sorted(fractions):
        target = f * arena_bytes
        while total < target:
            k += 1
            total += blob_size(k)
        out.append({"fraction": f, "pages": k, "bytes": total})
    return out


# ------------------------------------------------------------------------------------------------
# memcached (the baseline's shared cache): started and stopped here


def memcached_record_path(d):
    return os.path.join(d, "memcached.json")


def stop_memcached(d):
    """Stops the memcached recorded in d (this run's, or one a killed run left); idempotent."""
    path = memcached_record_path(d)
    try:
        with open(path) as f:
            rec = json.load(f)
    except (FileNotFoundError, ValueError):
        return
    if procs.alive(rec):
        killed = procs.stop([rec], deadline=5)
        log(f"memcached (pid {rec['pid']}) stopped" + (" with SIGKILL" if killed else ""))
    os.unlink(path)


def memcached_stats(port):
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    out = {}
    for line in data.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT":
            try:
                out[parts[1]] = float(parts[2])
            except ValueError:
                pass
    return out


def start_memcached(d, mem_mb):
    """memcached on 127.0.0.1 (free port, no UDP), -m mem_mb, items up to 1 MiB (-I 1m: pages are
    at most 64 KiB + headers), as user memcache (or nobody). Returns its port."""
    stop_memcached(d)
    user = "memcache"
    try:
        import pwd
        pwd.getpwnam(user)
    except KeyError:
        user = "nobody"
    port = procs.free_ports(1)[0]
    argv = ["memcached", "-u", user, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", str(mem_mb),
            "-I", "1m", "-t", "2", "-c", "4096"]
    os.makedirs(d, exist_ok=True)
    rec = procs.spawn("memcached", argv, os.path.join(d, "memcached.log"))
    with open(memcached_record_path(d), "w") as f:
        json.dump(rec, f)
    end = time.monotonic() + 10
    while True:
        try:
            memcached_stats(port)
            break
        except OSError:
            if not procs.alive(rec) or time.monotonic() > end:
                stop_memcached(d)
                raise RowFailed(f"memcached did not start: {procs.tail(rec['log'], 5)}")
            time.sleep(0.05)
    if os.cpu_count() >= 2:
        _cc._pin_pid_tree(rec["pid"], PROXY_CPU)
    return port


# ------------------------------------------------------------------------------------------------
# load generation and counters


def proxies(st):
    return [n for n in st["nodes"] if n["role"] == "proxy"]


def run_wrk(st, prof, seconds, mode, n, seed, zipf_s, threads=None, conns=None, seq_start=0):
    threads = threads or prof["threads"]
    conns = conns or prof["conns"]
    px = proxies(st)
    env = dict(os.environ)
    env.update({"TIERCE_ADDRS": ",".join(f"127.0.0.1:{p['port']}" for p in px), "TIERCE_MODE": mode,
                "TIERCE_N": str(n), "TIERCE_SEED": str(seed), "TIERCE_ZIPF_S": str(zipf_s),
                "TIERCE_SEQ_START": str(seq_start),
                "TIERCE_QUERY": "&size=small" if PAGES == "small" else ""})
    argv = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{max(1, int(round(seconds)))}s", "--timeout", "10s",
            "-s", LUA, px[0]["url"]]
    if os.cpu_count() >= 2:
        argv = ["taskset", "-c", str(PROXY_CPU)] + argv
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 60)
    m = re.search(r"^TIERCE_RESULT (\{.*\})$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise RowFailed(f"wrk failed (exit {r.returncode}): {r.stderr.strip()[-400:]} {r.stdout[-400:]}")
    res = json.loads(m.group(1))
    res["seconds"] = res["duration_us"] / 1e6
    return res


def rcache_status(st):
    """/rcache-status?auto of every proxy: list of {key: float or str}."""
    out = []
    for p in proxies(st):
        with urllib.request.urlopen(p["url"] + "rcache-status?auto", timeout=5) as f:
            text = f.read().decode()
        d = {}
        for line in text.splitlines():
            k, sep, v = line.partition(":")
            if not sep:
                continue
            v = v.strip()
            try:
                d[k.strip()] = float(v)
            except ValueError:
                d[k.strip()] = v
        out.append(d)
    return out


def status_delta(s0, s1):
    """Sum over proxies of (after - before) for every numeric key."""
    tot = {}
    for a, b in zip(s0, s1):
        for k, v in b.items():
            if isinstance(v, float) and isinstance(a.get(k), float):
                tot[k] = tot.get(k, 0.0) + v - a[k]
    return tot


def warm_up(st, prof, n, seed, zipf_s):
    """Every proxy GETs every page once (seq mode: one wrk thread per proxy, each in its own random
    order, runs of 3 s that go on where the last stopped), then a Zipf settle period with another
    seed than the measured window. Nothing here is measured."""
    npx = len(proxies(st))
    t0 = time.monotonic()
    seen = 0
    while seen < n and time.monotonic() - t0 < prof["warm_max"]:
        r = run_wrk(st, prof, 3, "seq", n, seed + 1000, zipf_s, threads=npx, conns=8 * npx, seq_start=int(seen))
        seen += r["reads"] / npx
    t1 = time.monotonic()
    if prof["settle"] > 0:
        run_wrk(st, prof, prof["settle"], "zipf", n, seed + 2000, zipf_s)
    return {"warm_s": round(t1 - t0, 1), "warm_coverage": round(min(1.0, seen / n), 3),
            "settle_s": prof["settle"]}


def measure(st, prof, cfg, n, seed, zipf_s, memcached_port=None):
    tierce = CONFIGS[cfg]["cache"] == "tierce"
    s0 = rcache_status(st) if tierce else None
    m0 = memcached_stats(memcached_port) if memcached_port else None
    r = run_wrk(st, prof, prof["duration"], "zipf", n, seed, zipf_s)
    s1 = rcache_status(st) if tierce else None
    m1 = memcached_stats(memcached_port) if memcached_port else None
    secs = r["seconds"]
    row = {"req_s": r["r_ok"] / secs, "mib_s": r["bytes"] / secs / (1 << 20), "pages_ok": r["r_ok"],
           "errors": r["errors"] + r["sock_errors"], "p50_ms": r["p50_us"] / 1000, "p99_ms": r["p99_us"] / 1000,
           "seconds": round(secs, 2),
           # served from a cache (Age header) / 200 pages: the same client-side measure for every row
           "cached_ratio": r["hits_age"] / r["r_ok"] if r["r_ok"] else 0.0,
           "app_tier_pages_s": (r["r_ok"] - r["hits_age"]) / secs}
    if tierce:
        d = status_delta(s0, s1)
        lookups = sum(d.get(k, 0) for k in ("Hits", "Misses", "VersionFailures", "Invalidations", "Expired"))
        row["hit_ratio"] = d.get("Hits", 0) / lookups if lookups else 0.0
        row["status_delta"] = {k: int(v) for k, v in d.items() if not k.startswith("VersionCheckP")}
        row["arena_bytes"] = [int(s.get("BytesCapacity", 0)) for s in s1]
        row["arena_used_bytes"] = [int(s.get("BytesUsed", 0)) for s in s1]
        row["arena_entries"] = [int(s.get("Entries", 0)) for s in s1]
        row["vc_p50_us"] = max(s.get("VersionCheckP50us", 0) or 0 for s in s1)
        row["vc_p99_us"] = max(s.get("VersionCheckP99us", 0) or 0 for s in s1)
        # every coop_* line of the status page: before, after (per proxy), and the delta per request
        coop_keys = sorted({k for s in s1 for k in s if k.lower().startswith("coop_")})
        if coop_keys:
            row["coop_before"] = [{k: s.get(k) for k in coop_keys} for s in s0]
            row["coop_after"] = [{k: s.get(k) for k in coop_keys} for s in s1]
            cd = {k: d[k] for k in coop_keys if k in d}
            row["coop_delta"] = {k: int(v) for k, v in cd.items()}
            row["coop_per_request"] = {k: (v / r["r_ok"] if r["r_ok"] else None) for k, v in cd.items()}
            # a time counter (NAME_ns) per operation of its count (NAMEs, NAMEes or NAME), e.g.
            # coop_lookup_ns / coop_lookups
            per_op = {}
            for k, v in cd.items():
                if k.endswith("_ns"):
                    for ck in (k[:-3] + "s", k[:-3] + "es", k[:-3]):
                        if cd.get(ck):
                            per_op[f"{k}/{ck}"] = v / cd[ck]
                            break
            row["coop_ns_per_op"] = per_op
    elif memcached_port:
        row["hit_ratio"] = r["hits_xcache"] / r["r_ok"] if r["r_ok"] else 0.0
        md = {k: m1[k] - m0.get(k, 0) for k in ("get_hits", "get_misses", "get_expired", "evictions",
                                                 "cmd_set", "bytes_read", "bytes_written") if k in m1}
        row["memcached_delta"] = {k: int(v) for k, v in md.items()}
        row["memcached_items"] = int(m1.get("curr_items", 0))
        row["memcached_bytes"] = int(m1.get("bytes", 0))
        row["memcached_limit_bytes"] = int(m1.get("limit_maxbytes", 0))
    else:
        row["hit_ratio"] = 0.0
    return row


# ------------------------------------------------------------------------------------------------
# the run


def fmt(v, spec=".0f", none="-"):
    return none if v is None else format(v, spec)


def ratio(a, b):
    return a / b if (a is not None and b) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (a few minutes)")
    ap.add_argument("--out", help="output directory (default benchmarks/results/coop_cache-<timestamp>/)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="build directory (read only)")
    ap.add_argument("--dir", default="/tmp/tierce-coopbench", help="cluster state directory")
    ap.add_argument("--configs", help="comma list among " + ",".join(CONFIGS) + " (default: the profile's)")
    ap.add_argument("--arena-size", help="RCacheSize of each proxy (default 64M; quick 32M)")
    ap.add_argument("--fractions", help="working sets as multiples of one arena (default 0.5,1,1.8)")
    ap.add_argument("--zipf", type=float, default=0.9, help="Zipf exponent of the trace (default 0.9)")
    ap.add_argument("--seed", type=int, default=1, help="trace seed (default 1)")
    ap.add_argument("--duration", type=float, help="seconds per measured window (overrides the profile)")
    ap.add_argument("--ttl", type=int, default=10, help="memcached baseline entry lifetime, seconds (default 10)")
    ap.add_argument("--coop-buckets", type=int, help="directory buckets per proxy (tierce-cluster --coop-buckets)")
    ap.add_argument("--pages", choices=["large", "small"], default="large",
                    help="page sizes: large 8-64 KiB (default), small 2-8 KiB (blob.php&size=small); "
                         "HYBCC pools pages from 16 KiB (RCacheCoopThreshold)")
    a = ap.parse_args()
    global PAGES
    PAGES = a.pages
    prof = dict(PROFILES["quick" if a.quick else "full"])
    if a.duration:
        prof["duration"] = a.duration
    by_lower = {c.lower(): c for c in CONFIGS}
    configs = []
    for c in (a.configs.split(",") if a.configs else prof["configs"]):
        c = c.strip()
        if not c:
            continue
        if c.lower() not in by_lower:
            ap.error(f"unknown configuration {c} (known: {', '.join(CONFIGS)})")
        configs.append(by_lower[c.lower()])
    try:
        fractions = [float(x) for x in a.fractions.split(",")] if a.fractions else prof["fractions"]
        requested_arena = parse_size(a.arena_size or prof["arena"])
    except ValueError as e:
        ap.error(str(e))
    if not 0.5 <= a.zipf <= 2.0:
        ap.error("--zipf wants 0.5..2.0")
    if subprocess.run(["which", "wrk"], capture_output=True).returncode != 0:
        print("wrk is missing: apt-get install -y wrk", file=sys.stderr)
        return 2
    if any(CONFIGS[c]["cache"] == "mod_cache_memcached" for c in configs) and subprocess.run(["which", "memcached"], capture_output=True).returncode != 0:
        print("memcached is missing: apt-get install -y memcached", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("run as root (tools/tierce-cluster starts MariaDB as mysql and httpd children as www-data)",
              file=sys.stderr)
        return 2
    d = os.path.abspath(a.dir)
    old = cluster.load_state(d) if os.path.isdir(d) else None
    if old and any(procs.alive(r) for r in cluster.all_processes(old)):
        print(f"a cluster is already running in {d}: tools/tierce-cluster down --dir {d}", file=sys.stderr)
        return 2
    out = a.out or os.path.join(REPO, "benchmarks", "results",
                                "coop_cache-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    build = os.path.abspath(a.build)

    # What this launcher can do: arena size and coop are being added to tools/tierce-cluster.
    has_arena = "arena_size" in cluster.DEFAULTS
    has_coop = "coop" in cluster.DEFAULTS
    if has_arena:
        arena_bytes, arena_text = requested_arena, a.arena_size or prof["arena"]
        arena_how = "chosen by this run (tierce-cluster --arena-size)"
    else:
        arena_bytes, arena_text = launcher_arena()
        arena_how = (f"this tierce-cluster has no --arena-size: every proxy keeps RCacheSize {arena_text} of "
                     f"conf/proxy.conf.in, and the working sets are sized against it "
                     f"(asked for {a.arena_size or prof['arena']})")
    wsets = working_sets(arena_bytes, fractions)
    db_items = max(100, wsets[-1]["pages"])
    memcached_mb = 2 * arena_bytes >> 20

    def term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, term)

    tierce_missing = [p for p in ("mod_rcache/mod_rcache.so", "mod_appversion/mod_appversion.so",
                                  "agents/memd/tierce-memd") if not os.path.exists(os.path.join(build, p))]
    meta = {"profile": "quick" if a.quick else "full", "build": build, "started": time.time(),
            "pages": PAGES, "pages_text": "2-8 KiB (&size=small)" if PAGES == "small" else "8-64 KiB",
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
            "pinning": f"app tier (MariaDB, app httpd, app memd) on CPU {APP_CPU}; proxies, proxy memd, "
                       f"memcached and wrk on CPU {PROXY_CPU}",
            "params": prof, "configs": configs, "arena_bytes": arena_bytes, "arena": arena_text,
            "arena_how": arena_how, "launcher_has_arena_size": has_arena, "launcher_has_coop": has_coop,
            "working_sets": wsets, "zipf_s": a.zipf, "seed": a.seed, "db_items": db_items,
            "memcached_mb": memcached_mb, "ttl": a.ttl, "transport": "shm"}
    log(f"arena {arena_text} per proxy ({arena_how}); working sets: "
        + ", ".join(f"{w['fraction']}x = {w['pages']} pages / {w['bytes'] / 2**20:.1f} MiB" for w in wsets))
    rows, skipped = [], []
    t_start = time.monotonic()
    try:
        for ws in wsets:
            for cfg in configs:
                one_row(a, prof, cfg, ws, d, build, db_items, arena_text, has_arena, has_coop, memcached_mb,
                        tierce_missing, rows, skipped)
    except KeyboardInterrupt:
        log("interrupted: stopping the cluster and memcached")
        skipped.append("interrupted")
    finally:
        try:
            cluster.down(d)
        except Exception as e:  # noqa: BLE001
            log(f"down: {e}")
        stop_memcached(d)
    meta["elapsed_s"] = round(time.monotonic() - t_start, 1)
    meta["loadavg_end"] = os.getloadavg()
    report(out, meta, rows, skipped, prof)
    return 1 if skipped else 0


def one_row(a, prof, cfg, ws, d, build, db_items, arena_text, has_arena, has_coop, memcached_mb,
            tierce_missing, rows, skipped):
    """Brings up a fresh cluster for (cfg, working set), warms it, measures one window, brings it
    down (and memcached). Appends to rows, or to skipped with the reason."""
    label = f"{cfg} at {ws['fraction']}x ({ws['pages']} pages)"
    opts = dict(CONFIGS[cfg])
    tierce = opts["cache"] == "tierce"
    if tierce and tierce_missing:
        skipped.append(f"{label}: missing {', '.join(tierce_missing)} under {build}")
        return
    coop = opts.pop("coop", None)
    if tierce:
        if coop != "off" or has_coop:
            opts["coop"] = coop
        if has_arena:
            opts["arena_size"] = arena_text
        if coop not in (None, "off") and a.coop_buckets:
            opts["coop_buckets"] = a.coop_buckets
        if cfg in POOL_CONFIGS and "pool_bytes" in cluster.DEFAULTS:
            opts["pool_bytes"] = arena_text
    mport = None
    try:
        if opts["cache"] == "mod_cache_memcached":
            mport = start_memcached(d, memcached_mb)
            opts["memcached"] = f"127.0.0.1:{mport}"
            opts.setdefault("ttl", a.ttl)
        log(f"=== {label}: up {opts}")
        try:
            st = cluster.up(d, app_nodes=2, proxy_nodes=2, items=db_items, bids=10 * db_items, build=build, **opts)
        except cluster.ClusterError as e:
            if str(e) == "interrupted":
                raise KeyboardInterrupt from None
            why = str(e).splitlines()[0]
            if coop not in (None, "off") and ("coop" in why.lower() or "RCacheCoop" in str(e)):
                why = f"the launcher or mod_rcache refused coop={coop}: {why}"
            skipped.append(f"{label}: up failed: {why}")
            log(f"SKIP {label}: up failed:\n{e}")
            return
        try:
            log(_cc.pin(st))
            if CONFIGS[cfg]["cache"] == "none":
                w = {"warm_s": 0, "warm_coverage": None, "settle_s": prof["settle"]}
                run_wrk(st, prof, prof["settle"], "zipf", ws["pages"], a.seed + 2000, a.zipf)
            else:
                w = warm_up(st, prof, ws["pages"], a.seed, a.zipf)
            log(_cc.pin(st) + f"; warm-up {w}")
            row = measure(st, prof, cfg, ws["pages"], a.seed, a.zipf, mport)
            row.update({"config": cfg, "ws_fraction": ws["fraction"], "ws_pages": ws["pages"],
                        "ws_mib": round(ws["bytes"] / 2**20, 1), "loadavg": round(os.getloadavg()[0], 2), **w})
            rows.append(row)
            log(f"{label}: {row['req_s']:.0f} req/s, hit ratio {row['hit_ratio']:.3f}, cached "
                f"{row['cached_ratio']:.3f}, p50 {row['p50_ms']:.2f} ms, errors {row['errors']}"
                + (f", coop {({k: v for k, v in row['coop_delta'].items() if v})}" if row.get("coop_delta") else ""))
        except (RowFailed, OSError, subprocess.TimeoutExpired) as e:
            skipped.append(f"{label}: {e}")
            log(f"FAILED {label}: {e}")
        finally:
            cluster.down(d)
    except RowFailed as e:
        skipped.append(f"{label}: {e}")
        log(f"FAILED {label}: {e}")
    finally:
        if mport is not None:
            stop_memcached(d)


def report(out, meta, rows, skipped, prof):
    by = {(r["config"], r["ws_fraction"]): r for r in rows}
    for r in rows:
        r["vs_ac"] = ratio(r["req_s"], (by.get(("AC", r["ws_fraction"])) or {}).get("req_s"))
        r["vs_memcached"] = ratio(r["req_s"], (by.get(("memcached", r["ws_fraction"])) or {}).get("req_s"))
    lines = []
    p = lines.append
    p(f"Cooperative caching benchmark ({meta['profile']}), {meta['elapsed_s']} s; 2 app + 2 proxy nodes, "
      f"wrk -t{prof['threads']} -c{prof['conns']} (thread 1 -> proxy 1, thread 2 -> proxy 2), "
      f"{prof['duration']} s per row after a warm-up")
    p(f"Arena per proxy: {meta['arena']} ({meta['arena_how']}). memcached: one for both proxies, "
      f"-m {meta['memcached_mb']} (= the 2 arenas), TTL {meta['ttl']} s.")
    p(f"Trace: GET blob.php?id=R, R ~ Zipf(s = {meta['zipf_s']}) over the working set's pages, seed {meta['seed']} "
      f"(per wrk thread: seed*64 + thread); page sizes {meta.get('pages_text', '8-64 KiB')} (blob_size(K)); transport shm.")
    p(f"Pinning: {meta['pinning']}. Load average at start {meta['loadavg_start'][0]:.2f}, at end "
      f"{meta['loadavg_end'][0]:.2f}.")
    p("")
    hdr = (f"{'working set':<22} {'config':<10} {'req/s':>7} {'MiB/s':>6} {'vs AC':>6} {'vs memc':>7} "
           f"{'hit ratio':>9} {'cached':>6} {'app pg/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}")
    p(hdr)
    p("-" * len(hdr))
    last = None
    for r in sorted(rows, key=lambda r: (r["ws_fraction"], list(CONFIGS).index(r["config"]))):
        ws = f"{r['ws_fraction']:g}x {r['ws_pages']}p {r['ws_mib']:.0f}MiB"
        if ws == last:
            ws = ""
        else:
            last = ws
        p(f"{ws:<22} {r['config']:<10} {r['req_s']:>7.0f} {r['mib_s']:>6.0f} "
          f"{fmt(r['vs_ac'], '.2f') + ('x' if r['vs_ac'] else ''):>6} "
          f"{fmt(r['vs_memcached'], '.2f') + ('x' if r['vs_memcached'] else ''):>7} {r['hit_ratio']:>9.3f} "
          f"{r['cached_ratio']:>6.3f} {r['app_tier_pages_s']:>8.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} "
          f"{r['errors']:>6}")
    p("working set: multiple of ONE proxy's arena, pages, MiB of page bodies. req/s: 200 pages per second over"
      " both proxies. hit ratio: tierce rows = Hits / (Hits + Misses + VersionFailures + Invalidations +")
    p("Expired) summed over the proxies' /rcache-status?auto deltas; memcached = 'X-Cache: HIT' / 200 pages."
      " cached: responses with an Age header (served by a cache) / 200 pages, the same measure for every row;")
    p("app pg/s: pages per second the app tier rendered for the clients (200 pages without Age). p50/p99: wrk"
      " latency of every request.")
    coop_rows = [r for r in rows if r.get("coop_delta")]
    if coop_rows:
        p("")
        p("coop_* counters of /rcache-status?auto over the measured window, per 200 page (both proxies):")
        for r in coop_rows:
            per = ", ".join(f"{k} {v:.3f}" for k, v in sorted(r["coop_per_request"].items())
                            if v and not k.endswith("_ns"))
            per += "".join(f"; {k} = {v:.0f} ns" for k, v in sorted(r.get("coop_ns_per_op", {}).items()))
            p(f"  {format(r['ws_fraction'], 'g') + 'x':<5} {r['config']:<5} {per or '(all zero)'}")
    for r in rows:
        md = r.get("memcached_delta")
        if md:
            p(f"{r['config']} at {r['ws_fraction']:g}x: get_hits {md.get('get_hits')}, get_misses {md.get('get_misses')}, "
              f"evictions {md.get('evictions')}, sets {md.get('cmd_set')} in the window; {r['memcached_items']} items, "
              f"{r['memcached_bytes'] / 2**20:.0f} of {r['memcached_limit_bytes'] / 2**20:.0f} MiB at its end "
              f"(an X-Cache miss with a get hit = an entry past its TTL, fetched again)")
    for r in rows:
        if r["config"] in COOP_CONFIGS + POOL_CONFIGS and not r.get("coop_delta"):
            p(f"NOTE: {r['config']} at {r['ws_fraction']:g}x: the status page printed no coop_* counter.")
    if any(r["config"] in POOL_CONFIGS for r in rows):
        p(f"MTACC/HYBCC also cache in the app nodes' donated memory ({meta['arena']} per app node, memd [pool]):"
          " more memory in all than AC, BCC, CCWR and memcached; they are not in the targets.")
    p("")
    p("Targets (from the numbers above; issue 15, working sets larger than one arena, best of BCC/CCWR):")

    def target(text, values, ok):
        if any(v is None for v in values) or not values:
            p(f"  {text:<66} n/a (not measured)")
        else:
            p(f"  {text:<66} {'PASS' if ok(values) else 'MISS'}  ({', '.join(fmt(v, '.2f') for v in values)})")
    larger = sorted(f for f in {w["fraction"] for w in meta["working_sets"]} if f > 1.0)
    if not larger:
        p("  n/a: no working set larger than one arena in this run (--fractions)")
    for f in larger:
        coop = [(by[(c, f)]["req_s"], c) for c in COOP_CONFIGS if (c, f) in by]
        best, name = max(coop) if coop else (None, "best coop")
        ac = (by.get(("AC", f)) or {}).get("req_s")
        mc = (by.get(("memcached", f)) or {}).get("req_s")
        target(f"{f:g}x arena: {name} / AC >= 1.8", [ratio(best, ac)], lambda v: v[0] >= 1.8)
        target(f"{f:g}x arena: {name} / memcached >= 1.0", [ratio(best, mc)], lambda v: v[0] >= 1.0)
    # HYBCC against BCC (seed 000 §7.2: up to +35 % with large pages, no loss with small ones),
    # for every working set where both were measured. HYBCC uses the app nodes' pools on top.
    for f in sorted({w["fraction"] for w in meta["working_sets"]}):
        h = (by.get(("HYBCC", f)) or {}).get("req_s")
        b = (by.get(("BCC", f)) or {}).get("req_s")
        if h is None or b is None:
            continue
        if meta.get("pages") == "small":
            target(f"{f:g}x arena, small pages: HYBCC / BCC >= 1.0", [ratio(h, b)], lambda v: v[0] >= 1.0)
        else:
            target(f"{f:g}x arena, large pages: HYBCC / BCC >= 1.2", [ratio(h, b)], lambda v: v[0] >= 1.2)
    errs = sum(r["errors"] for r in rows)
    if errs:
        p(f"NOTE: {errs} failed requests (non-200, socket errors or timeouts) in total: see the errors column.")
    for r in rows:
        if r["config"] in CONFIGS and CONFIGS[r["config"]]["cache"] == "tierce" and r.get("arena_bytes"):
            if any(b and abs(b - meta["arena_bytes"]) > meta["arena_bytes"] // 8 for b in r["arena_bytes"]):
                p(f"NOTE: {r['config']} at {r['ws_fraction']:g}x: the proxies report BytesCapacity "
                  f"{r['arena_bytes']}, not {meta['arena_bytes']}.")
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
        json.dump({"meta": meta, "rows": rows, "skipped": skipped}, f, indent=2)
    if rows:
        flat_keys = []
        for r in rows:
            flat_keys += [k for k, v in r.items() if k not in flat_keys and not isinstance(v, (dict, list))]
        with open(os.path.join(out, "throughput.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=flat_keys, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    plots(out, rows, meta)
    print(f"\nresults: {out}")


def plots(out, rows, meta):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing (run with /usr/bin/python3): no plots")
        return
    if not rows:
        return
    fracs = sorted({r["ws_fraction"] for r in rows})
    cfgs = [c for c in CONFIGS if any(r["config"] == c for r in rows)]
    by = {(r["config"], r["ws_fraction"]): r for r in rows}
    width = 0.8 / max(1, len(cfgs))
    xl = [f"{f:g}x arena\n({(by.get(next(((c, f) for c in cfgs if (c, f) in by), None)) or {}).get('ws_mib', 0):.0f} MiB)"
          for f in fracs]
    # Fig. 7.4: throughput per working set
    fig, ax = plt.subplots(figsize=(8, 4))
    for j, c in enumerate(cfgs):
        vals = [(by.get((c, f)) or {}).get("req_s", 0) for f in fracs]
        xs = [i + (j - (len(cfgs) - 1) / 2) * width for i in range(len(fracs))]
        bars = ax.bar(xs, vals, width, label=c, color=COLORS[c])
        for b, v in zip(bars, vals):
            if v:
                ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.0f}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(fracs)))
    ax.set_xticklabels(xl)
    ax.set_ylabel("page GETs per second (2 proxies)")
    ax.set_title(f"Throughput vs working set, arena {meta['arena']} per proxy (cf. Fig. 7.4a)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=120)
    plt.close(fig)
    # Fig. 7.5: improvement over AC
    if any(r.get("vs_ac") for r in rows):
        fig, ax = plt.subplots(figsize=(8, 4))
        others = [c for c in cfgs if c != "AC"]
        width2 = 0.8 / max(1, len(others))
        for j, c in enumerate(others):
            vals = [(by.get((c, f)) or {}).get("vs_ac") or 0 for f in fracs]
            xs = [i + (j - (len(others) - 1) / 2) * width2 for i in range(len(fracs))]
            bars = ax.bar(xs, vals, width2, label=c, color=COLORS[c])
            for b, v in zip(bars, vals):
                if v:
                    ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.2f}", ha="center", va="bottom", fontsize=6)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.axhline(1.8, color="red", linewidth=0.8, linestyle="--", label="target 1.8x (ws > arena)")
        ax.set_xticks(range(len(fracs)))
        ax.set_xticklabels(xl)
        ax.set_ylabel("throughput / AC")
        ax.set_title("Improvement over AC (each proxy alone) (cf. Fig. 7.5a)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "improvement.png"), dpi=120)
        plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
