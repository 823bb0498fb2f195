"""tierce-cluster run — the README's main job: bring a Tierce cluster up, run a short mixed
workload through the proxies and the same workload straight to the app tier (no cache), print
what happened (hit ratio, invalidations, stale reads, throughput against no caching) and the
URLs, then keep serving until Ctrl-C (or exit at once with --exit-after-summary)."""
import json
import os
import signal
import subprocess
import sys
import time

from . import cluster


def _check(build, state_dir, name, extra, duration):
    exe = os.path.join(build, "tools", "tierce-check", "tierce-check")
    if not os.access(exe, os.X_OK):
        raise cluster.ClusterError(f"{exe} is missing: build the tree first (tools/build.sh)")
    out = os.path.join(state_dir, f"run-{name}.json")
    argv = [exe, "--cluster", os.path.join(state_dir, "cluster.json"), "--duration", str(duration),
            "--readers", "8", "--writers", "2", "--write-ratio", "0.02", "--hot", "300",
            "--max-error-ratio", "0.01", "--json", out] + extra
    cluster.log("$ " + " ".join(argv))
    rc = subprocess.call(argv)
    try:
        with open(out) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        raise cluster.ClusterError(f"tierce-check ({name}) wrote no results ({e}); exit {rc}")
    return rc, res


def run(d, duration=15.0, exit_after_summary=False, **up_kw):
    up_kw.setdefault("cache", "tierce")
    st = cluster.up(d, **up_kw)
    build = st["options"].get("build") or os.path.join(cluster.REPO, "build")
    stop = {"now": False}
    try:
        print("\n== workload through the proxies (Tierce cache), %g s" % duration, flush=True)
        rc_c, cached = _check(build, st["dir"], "cached", [], duration)
        print("\n== the same workload straight to the app tier (no cache), %g s" % duration, flush=True)
        rc_d, direct = _check(build, st["dir"], "direct", ["--direct"], duration)

        def g(r, k, default=0):
            v = r.get(k)
            return default if v is None else v

        c_rps, d_rps = g(cached, "reads_per_s"), g(direct, "reads_per_s")
        ratio = c_rps / d_rps if d_rps else float("inf")
        stale = g(cached, "stale_reads") + g(direct, "stale_reads")
        print("\n== summary (%s transport, %s)" % (st["options"]["transport"], st["options"]["scheme"]))
        print(f"  reads checked          {g(cached, 'checked_reads')} through the proxies, "
              f"{g(direct, 'checked_reads')} direct")
        print(f"  writes                 {g(cached, 'writes')} + {g(direct, 'writes')}")
        print(f"  stale reads found      {stale}")
        hr = cached.get("hit_ratio")
        print("  hit ratio              " + ("n/a" if hr is None else f"{hr:.3f}"))
        print(f"  invalidations seen     {g(cached, 'invalidations')}  (cached pages found out of date)")
        print(f"  version-check failures {g(cached, 'version_check_failures')}")
        print(f"  read throughput        {c_rps:.0f}/s with Tierce vs {d_rps:.0f}/s without cache "
              f"= {ratio:.1f}x")
        print("\n== URLs")
        for n in st["nodes"]:
            if n["role"] == "proxy":
                print(f"  proxy {n['name']:6} {n['url']}   status {n['url']}rcache-status   "
                      f"metrics {n['url']}rcache-metrics")
        for n in st["nodes"]:
            if n["role"] == "app":
                print(f"  app   {n['name']:6} {n['url']}   status {n['url']}appversion-status")
        m = st["mariadb"]
        print(f"  MariaDB      {m.get('host', '127.0.0.1')}:{m['port']} database {m.get('database', 'rubis')} "
              f"user {m.get('user', 'tierce')}")
        if st["options"].get("arbiter"):
            rows = cluster.arbiter_rows(st)
            print(f"  arbiter      {cluster.ARBITER_TABLE}: " + (", ".join(
                f"{n} {r[0]} (epoch {r[1]})" for n, r in sorted(rows.items())) or "unreadable")
                  + "  (a lost app node is dropped there after 3 s: docs/coherence.md)")
        print(f"  try: curl -s {st['nodes'][-1]['url']}item.php?id=42 | grep tierce-data")
        ok = stale == 0 and rc_c == 0 and rc_d == 0
        if not ok:
            print("\nrun: FAILED: the checker reported problems (see above)", file=sys.stderr)
        if exit_after_summary:
            return 0 if ok else 1

        def on_signal(signum, frame):
            stop["now"] = True
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        print(f"\nServing until Ctrl-C (state in {st['dir']}; "
              f"`tools/tierce-cluster status --dir {st['dir']}`).", flush=True)
        while not stop["now"]:
            time.sleep(0.2)
        return 0 if ok else 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cluster.down(st["dir"])
