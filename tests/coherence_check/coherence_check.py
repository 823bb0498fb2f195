#!/usr/bin/python3
"""Coherence check of a whole local cluster: tools/tierce-cluster up (fresh temporary directory),
tierce-check against it (readers through the proxies, writers on the app nodes), tierce-cluster
down (always). Prints the checker's summary.

  coherence_check.py --checker PATH [--build DIR] --cache tierce|none|mod_cache
                     [--transport tcp|shm] [--scheme dependency-lists|invalidate-all] [--ttl S]
                     [--ops 100000] [--readers 8] [--writers 2] [--hot 100]
                     [--restart app1@5] ... [--max-error-ratio 0.01] [--expect-stale]
                     [--strict] [--expect-inversions] [--checker-timeout 780] [--netns] [--keep]

--restart NODE@SECONDS runs `tierce-cluster restart-node NODE --dir D` that many seconds into the
run (repeatable). --expect-stale is the negative control: the test passes only when the checker
FAILS with stale reads (exit 1, stale_reads > 0), e.g. against mod_cache with a long TTL.
--strict runs the checker with --strict (read-read inversions fail the run). --expect-inversions
(negative control) also requires the checker to report read-read inversions (read_inversions > 0),
and with --strict to list them among its failures.
--netns brings the cluster up with `tierce-cluster up --netns`: every node and MariaDB in its own
network namespace (separate hosts as far as the network goes, memd between nodes over tcp); the
checker runs on the host and reaches the nodes at their addresses through the host veth pair.
Exit 0 passed, 1 failed (a Tierce target not built fails too), 77 skipped (not root or a system
package missing; on the CI machine, CI=true, that fails too: tools/tiercelab/prereq.py).
"""
import argparse
import json
import urllib.request
import os
import shutil
import signal
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))
from tiercelab import prereq as tprereq  # noqa: E402
CLUSTER = os.path.join(REPO, "tools", "tierce-cluster")


def say(msg):
    print(f"coherence_check: {msg}", flush=True)


def prerequisites(a):
    """(why to skip, why to fail): tools/tiercelab/prereq.py's policy."""
    return tprereq.cluster(a.build, a.checker, tierce=a.cache == "tierce", netns=a.netns)


def run_checker(a, d):
    """Runs tierce-check in its own session (so a timeout kills its --during children too);
    returns (exit code, result dict or None)."""
    result = os.path.join(d, "tierce-check.json")
    argv = [a.checker, "--cluster", os.path.join(d, "cluster.json"), "--ops", str(a.ops),
            "--readers", str(a.readers), "--writers", str(a.writers), "--hot", str(a.hot),
            "--seed", str(a.seed), "--max-error-ratio", str(a.max_error_ratio), "--json", result]
    if a.coop != "off":
        argv += ["--site", SITE]
    if a.strict:
        argv.append("--strict")
    if a.sql_writers:
        argv += ["--sql-writers", str(a.sql_writers), "--sql-stale-bound-ms", f"{a.sql_stale_bound_ms:g}"]
    for spec in a.restart:
        node, _, at = spec.partition("@")
        argv += ["--during", f"{CLUSTER} restart-node {node} --dir {d}@{at or '5'}"]
    say("running: " + " ".join(f"'{x}'" if " " in x else x for x in argv))
    p = subprocess.Popen(argv, start_new_session=True)
    try:
        rc = p.wait(timeout=a.checker_timeout)
    except BaseException:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        raise
    res = None
    try:
        with open(result) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        say(f"no checker result in {result}: {e}")
    return rc, res


# With --coop, readers send this Host header to both proxies (as a load balancer in front would):
# the proxies then compute the same cache keys and share copies.
SITE = "shop.test:80"


def coop_counters(d):
    """coop_* lines of each proxy's /rcache-status?auto: {proxy: {name: int}}."""
    with open(os.path.join(d, "cluster.json")) as f:
        st = json.load(f)
    out = {}
    for n in st["nodes"]:
        if n["role"] != "proxy":
            continue
        with urllib.request.urlopen(f"{n['url']}rcache-status?auto", timeout=5) as r:
            lines = r.read().decode().splitlines()
        c = {}
        for line in lines:
            k, _, v = line.partition(": ")
            if k.startswith("coop_") and v.isdigit():
                c[k[5:]] = int(v)
        out[n["name"]] = c
    return out


def appversion_counters(d):
    """Each app node's /appversion-status (key value lines): {node: {name: int}}."""
    with open(os.path.join(d, "cluster.json")) as f:
        st = json.load(f)
    out = {}
    for n in st["nodes"]:
        if n["role"] != "app":
            continue
        with urllib.request.urlopen(f"{n['url']}appversion-status", timeout=5) as r:
            lines = r.read().decode().splitlines()
        c = {}
        for line in lines:
            parts = line.replace("=", " ").replace(":", " ").split()
            if len(parts) == 2 and parts[1].isdigit():
                c[parts[0]] = int(parts[1])
        out[n["name"]] = c
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checker", required=True, help="the tierce-check executable")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--cache", required=True, choices=["tierce", "none", "mod_cache"])
    ap.add_argument("--transport", choices=["tcp", "shm"])
    ap.add_argument("--scheme", choices=["dependency-lists", "invalidate-all"])
    ap.add_argument("--ttl", type=int)
    ap.add_argument("--coop", choices=["off", "bcc", "ccwr", "mtacc", "hybcc"], default="off",
                    help="RCacheCoop of the proxies; readers then use one site name (Host) for both")
    ap.add_argument("--arena-size", help="RCacheSize of the proxies (small: the pool is used)")
    ap.add_argument("--coop-threshold", help="hybcc: RCacheCoopThreshold")
    ap.add_argument("--ops", type=int, default=100000)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--hot", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--restart", action="append", default=[], metavar="NODE@SECONDS")
    ap.add_argument("--sql-writers", type=int, default=0,
                    help="tierce-check --sql-writers: writers straight to MariaDB (tierce-binlogd "
                         "invalidates their pages)")
    ap.add_argument("--sql-stale-bound-ms", type=float, default=1000.0)
    ap.add_argument("--max-error-ratio", type=float, default=0.01)
    ap.add_argument("--php", choices=["explicit", "auto", "linearizable"],
                    help="tierce-cluster up --php: dependencies from the app's headers (explicit) or "
                         "derived by the tierce PHP extension")
    ap.add_argument("--expect-stale", action="store_true")
    ap.add_argument("--strict", action="store_true", help="tierce-check --strict")
    ap.add_argument("--expect-inversions", action="store_true")
    ap.add_argument("--checker-timeout", type=float, default=780.0)
    ap.add_argument("--netns", action="store_true",
                    help="tierce-cluster up --netns: one network namespace per node and MariaDB")
    ap.add_argument("--keep", action="store_true", help="keep the state directory")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)

    rc = tprereq.verdict(*prerequisites(a), must_run_in_ci=True)
    if rc is not None:
        return rc

    tprereq.raise_on_sigterm()
    d = tempfile.mkdtemp(prefix="tierce-cc.", dir="/tmp")
    rc = 0
    try:
        up = [CLUSTER, "up", "--dir", d, "--build", a.build, "--cache", a.cache]
        for opt in ("transport", "scheme", "ttl", "coop", "arena_size", "coop_threshold", "php"):
            if getattr(a, opt) is not None:
                up += [f"--{opt.replace('_', '-')}", str(getattr(a, opt))]
        if a.netns:
            up.append("--netns")
        say("running: " + " ".join(up))
        r = subprocess.run(up, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            print(f"FAIL: tierce-cluster up exited {r.returncode}")
            rc = 1
        else:
            crc, res = run_checker(a, d)
            stale = res.get("stale_reads") if res else None
            if a.expect_stale:
                if crc == 1 and stale:
                    say(f"negative control: the checker failed as expected with {stale} stale read(s)")
                else:
                    print(f"FAIL: negative control: expected the checker to exit 1 with stale reads, "
                          f"got exit {crc}, stale_reads {stale}")
                    rc = 1
            elif crc != 0:
                print(f"FAIL: tierce-check exited {crc}"
                      + (f" ({'; '.join(res.get('failures', []))})" if res else ""))
                rc = 1
            if a.expect_inversions:
                inv = res.get("read_inversions") if res else None
                listed = any("read-read inversion" in f for f in (res or {}).get("failures", []))
                if inv and (listed or not a.strict):
                    say(f"negative control: the checker reported {inv} read-read inversion(s)"
                        + (" and failed on them (--strict)" if a.strict else ""))
                else:
                    print(f"FAIL: negative control: expected read-read inversions"
                          + (" among the failures (--strict)" if a.strict else "")
                          + f", got read_inversions {inv}, failures {(res or {}).get('failures')}")
                    rc = 1
            if a.php in ("auto", "linearizable") and rc == 0:
                # The extension must have made pages cacheable, or passing proves nothing.
                counters = appversion_counters(d)
                for name, c in counters.items():
                    say(f"{name} appversion: " + " ".join(f"{k}={v}" for k, v in sorted(c.items())
                                                          if v and not k.startswith("wait_")))
                regs = sum(c.get("registrations", 0) for c in counters.values())
                invs = sum(c.get("invalidations", 0) for c in counters.values())
                if regs == 0 or (invs == 0 and a.php == "auto"):
                    print(f"FAIL: --php {a.php}, but the app nodes registered {regs} page(s) and sent "
                          f"{invs} invalidation(s): the extension's dependencies were not used")
                    rc = 1
            if a.coop != "off" and rc == 0:
                # The run must have exercised the cooperative path, or passing proves nothing.
                counters = coop_counters(d)
                for name, c in counters.items():
                    say(f"{name} coop: " + " ".join(f"{k}={v}" for k, v in sorted(c.items()) if v))
                remote = sum(c.get("remote_hits", 0) for c in counters.values())
                if a.coop in ("mtacc", "hybcc") and not any(
                        c.get("stored_pool", 0) + c.get("demoted", 0) for c in counters.values()):
                    print(f"FAIL: RCacheCoop {a.coop}, but no page went to pool memory "
                          "(coop_stored_pool and coop_demoted 0 on every proxy)")
                    rc = 1
                stale = sum(c.get("remote_stale", 0) for c in counters.values())
                if remote == 0:
                    print("FAIL: RCacheCoop on, but no page was served from a peer's copy "
                          "(coop_remote_hits 0 on every proxy): the cooperative path was not tested")
                    rc = 1
                else:
                    say(f"cooperative cache: {remote} page(s) served from a peer's copy, "
                        f"{stale} peer copy(ies) found stale by the version check")
    except subprocess.TimeoutExpired:
        print(f"FAIL: tierce-check did not finish within {a.checker_timeout:.0f} s (killed)")
        rc = 1
    except (tprereq.Terminated, KeyboardInterrupt) as e:
        print(f"FAIL: interrupted ({e})")
        rc = 1
    except Exception as e:  # noqa: BLE001 — report anything as a failure, still clean up
        print(f"FAIL: unexpected {type(e).__name__}: {e}")
        rc = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let down finish
        r = subprocess.run([CLUSTER, "down", "--dir", d], stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            print(f"FAIL: tierce-cluster down exited {r.returncode}")
            rc = 1
        if rc != 0 or a.keep:
            print(f"state directory kept (logs under nodes/*/logs): {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    if rc == 0:
        print("PASS")
    return rc


if __name__ == "__main__":
    sys.exit(main())
