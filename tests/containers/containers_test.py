#!/usr/bin/python3
"""The compose stack (docker/compose.yaml) built from the Debian packages and run with podman:
images built by tools/tierce-containers from THIS build tree, the stack brought up on free host
ports with a private secret, the coherence checker run through both proxies (>= 100 000 checked
reads, 0 stale), then a fault: app2's tierce-memd killed inside its container while the checker
runs (the entrypoint stops the container, the restart policy brings it back with a new memd
incarnation; 0 stale reads, app2 serving again), and the stack brought down — also when a step
fails. Label `containers` (CMake option TIERCE_CONTAINER_TESTS): ~6 min here, not in CI's run.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
# The one free_port (tools/tiercelab/procs.py): never the same port twice in a run.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from tiercelab.procs import free_port  # noqa: E402

HERE = os.path.dirname(os.path.realpath(__file__))


class Failure(Exception):
    pass


def check(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what, flush=True)
    if not cond:
        raise Failure(what)


class Stack:
    def __init__(self, src, build, ops):
        self.tool = os.path.join(src, "tools", "tierce-containers")
        self.build = build
        self.ops = ops
        self.project = f"tiercetest{os.getpid()}"
        self.state = tempfile.mkdtemp(prefix="tierce-containers-")
        self.ports = (free_port(), free_port())
        self.up_done = False

    def tool_run(self, *args, timeout=1800, check_rc=True):
        argv = ["/usr/bin/python3", self.tool, *args]
        print("  $ " + " ".join(argv[1:]), flush=True)
        r = subprocess.run(argv, timeout=timeout, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        print("    " + "\n    ".join(r.stdout.splitlines()[-25:]), flush=True)
        if check_rc and r.returncode != 0:
            raise Failure(f"tierce-containers {args[0]} exited {r.returncode}")
        return r

    def common(self):
        return ["--project", self.project, "--state", self.state]

    def container(self, service):
        return f"{self.project}_{service}_1"

    def checker(self, name, extra):
        """tierce-check in proxy1's container; its --json summary."""
        out = f"/tmp/{name}.json"
        r = self.tool_run("check", *self.common(), "--json", out, "--quiet", *extra, timeout=900, check_rc=False)
        got = subprocess.run(["podman", "exec", self.container("proxy1"), "cat", out],
                             capture_output=True, text=True)
        if got.returncode != 0:
            raise Failure(f"{name}: no --json summary from tierce-check (exit {r.returncode})")
        s = json.loads(got.stdout)
        s["exit"] = r.returncode
        print(f"    {name}: exit {r.returncode}, reads {s['reads']} ({s['reads_ok']} ok), writes {s['writes']}, "
              f"checked {s['checked_reads']}, STALE {s['stale_reads']}, inversions {s['read_inversions']}, "
              f"errors {s['errors']} (ratio {s['error_ratio']:.4f})", flush=True)
        return s

    def children_died(self, service):
        """httpd's own record of children killed by a signal (AH00052 ... exit signal ...)."""
        r = subprocess.run(["podman", "exec", self.container(service), "sh", "-c",
                            "grep -h 'exit signal' /var/log/apache2/error.log || true"],
                           capture_output=True, text=True)
        return [l for l in r.stdout.splitlines() if l.strip()]

    def restarts(self, service):
        r = subprocess.run(["podman", "inspect", "--format", "{{.RestartCount}}", self.container(service)],
                           capture_output=True, text=True)
        return int(r.stdout.strip() or "-1") if r.returncode == 0 else -1

    def run(self):
        t0 = time.time()
        print("== images from the packages of this build tree", flush=True)
        self.tool_run("build", "--build-dir", self.build)
        for image in ("db", "app", "proxy"):
            r = subprocess.run(["podman", "image", "exists", f"localhost/tierce-{image}:latest"])
            check(r.returncode == 0, f"image localhost/tierce-{image} built ({time.time() - t0:.0f} s so far)")
            r = subprocess.run(["podman", "run", "--rm", "--entrypoint", "sh", f"localhost/tierce-{image}:latest",
                                "-c", "test ! -e /etc/tierce/secret"])
            check(r.returncode == 0, f"image localhost/tierce-{image} carries no cluster secret")

        print(f"== up: project {self.project}, proxies on 127.0.0.1:{self.ports[0]} and :{self.ports[1]}", flush=True)
        self.up_done = True
        self.tool_run("up", *self.common(), "--proxy-ports", f"{self.ports[0]},{self.ports[1]}", "--timeout", "300")
        check(True, "both proxies serve the sample site from the database")

        print(f"== the coherence checker through the stack ({self.ops} operations)", flush=True)
        s = self.checker("steady", ["--ops", str(self.ops)])
        check(s["exit"] == 0, "tierce-check passed (exit 0)")
        check(s["stale_reads"] == 0, f"0 stale reads ({s['stale_reads']})")
        check(s["checked_reads"] >= 100000, f">= 100 000 checked reads ({s['checked_reads']})")
        check(s["errors"] == 0, f"no errors ({s['errors']})")
        for node in ("proxy1", "proxy2", "app1", "app2"):
            died = self.children_died(node)
            check(not died, f"no httpd child of {node} died" + (f": {died[:3]}" if died else ""))
        hits = [p.get("hits", 0) for p in s.get("proxies", [])]
        check(len(hits) == 2 and all(h > 0 for h in hits),
              f"both proxies served pages from their caches (rcache-metrics hits {hits})")

        print("== fault: app2's tierce-memd killed inside its container during the checker", flush=True)
        before = self.restarts("app2")

        def kill_memd():
            time.sleep(10)
            r = subprocess.run(["podman", "exec", self.container("app2"), "pkill", "-KILL", "-x", "tierce-memd"],
                               capture_output=True, text=True)
            print(f"    [t+10 s] pkill -KILL tierce-memd in app2: exit {r.returncode}", flush=True)
        k = threading.Thread(target=kill_memd)
        k.start()
        s = self.checker("memd_killed", ["--duration", "45", "--max-error-ratio", "0.2", "--no-pace",
                                         "--window", "fault=10-40"])
        k.join()
        check(s["stale_reads"] == 0, f"0 stale reads while app2's memd died and came back ({s['stale_reads']})")
        check(s["checked_reads"] > 1000, f"reads were checked ({s['checked_reads']})")
        after = self.restarts("app2")
        check(after > before, f"app2's container was restarted by its restart policy (restarts {before} -> {after})")
        deadline = time.time() + 60
        while time.time() < deadline:
            r = subprocess.run(["podman", "exec", self.container("app2"), "test", "-e", "/run/tierce/memd.ready"])
            if r.returncode == 0:
                break
            time.sleep(1)
        s = self.checker("after", ["--ops", "10000"])
        check(s["exit"] == 0 and s["stale_reads"] == 0 and s["errors"] == 0,
              "after the restart: checker passes with no errors and 0 stale reads")

    def down(self):
        if not self.up_done:
            return
        print("== down", flush=True)
        r = self.tool_run("down", *self.common(), check_rc=False, timeout=300)
        left = subprocess.run(["podman", "ps", "-a", "--filter", f"label=io.podman.compose.project={self.project}",
                               "-q"], capture_output=True, text=True).stdout.split()
        nets = subprocess.run(["podman", "network", "exists", f"{self.project}_default"]).returncode == 0
        vols = subprocess.run(["podman", "volume", "ls", "-q", "--filter",
                               f"label=io.podman.compose.project={self.project}"],
                              capture_output=True, text=True).stdout.split()
        check(r.returncode == 0 and not left and not nets and not vols,
              f"down removed the containers ({len(left)} left), network ({'left' if nets else 'gone'}) "
              f"and volumes ({len(vols)} left)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source-dir", required=True)
    p.add_argument("--build-dir", required=True)
    p.add_argument("--ops", type=int, default=120000)
    a = p.parse_args()
    if os.geteuid() != 0:
        print("FAIL: needs root (rootful podman)")
        return 1
    missing = [t for t in ("podman", "podman-compose", "debootstrap", "runc", "cpack") if not shutil.which(t)]
    if missing:
        print(f"FAIL: missing {', '.join(missing)}: apt-get install podman runc podman-compose debootstrap "
              "golang-github-containernetworking-plugin-dnsname (docker/README.md)")
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # ctest's timeout: still bring it down
    st = Stack(a.source_dir, a.build_dir, a.ops)
    rc = 0
    try:
        st.run()
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}", flush=True)
        subprocess.run(["/usr/bin/python3", st.tool, "logs", *st.common()])
        rc = 1
    finally:
        try:
            st.down()
        except Failure as e:
            print(f"FAIL: {e}", flush=True)
            rc = 1
        shutil.rmtree(st.state, ignore_errors=True)
    print("PASS" if rc == 0 else "FAILED", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
