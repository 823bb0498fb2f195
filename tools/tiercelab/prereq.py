"""What a test needs before it runs, and what a lack of it means (the skip policy, docs/testing.md).

- A missing system package or privilege (not root, no apache2, no namespaces): the test is
  SKIPPED (exit 77, ctest's SKIP_RETURN_CODE) with the reason — except on the CI machine
  (CI=true) for the tests that must run there (the `cluster` and `faults` labels): CI installs
  every package and runs as root, so a skip there means the net went empty; they FAIL instead.
- A missing Tierce target (a module, a daemon, a tool this build should have made): the test
  FAILS (exit 1). A build regression must never turn a tier of tests into skips.

    why_skip = prereq.system(root="httpd runs as www-data", files=["/usr/sbin/apache2"])
    why_fail = prereq.targets(build, ["agents/memd/tierce-memd"], executables=["sample/tierce-datagen"])
    rc = prereq.verdict(why_skip, why_fail, must_run_in_ci=True)
    if rc is not None:
        return rc
"""
import os

SKIP = 77
FAIL = 1


def system(root=None, files=(), packages_hint="tools/deps.sh installs it"):
    """The reason to skip, or None: `root` (why root is needed) when not root; a system file missing."""
    if root and os.geteuid() != 0:
        return f"needs root ({root})"
    for f in files:
        if not os.path.exists(f):
            return f"{f} missing ({packages_hint})"
    return None


def targets(build, paths=(), executables=(), alternatives=()):
    """The reason to FAIL, or None: a Tierce target missing. `paths` (under `build`) must exist,
    `executables` (as given: absolute, or relative to the current directory) must be executable,
    and of each tuple in `alternatives` (under `build`) one must be executable."""
    for p in paths:
        full = os.path.join(build, p)
        if not os.path.exists(full):
            return f"{full} is not built (a Tierce target: build everything first, cmake --build)"
    for p in executables:
        if not os.access(p, os.X_OK):
            return f"{os.path.abspath(p)} is not built (a Tierce target: build everything first, cmake --build)"
    for group in alternatives:
        if not any(os.access(os.path.join(build, p), os.X_OK) for p in group):
            return (f"none of {', '.join(os.path.join(build, p) for p in group)} is built "
                    "(a Tierce target: build everything first, cmake --build)")
    return None


def in_ci():
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def verdict(why_skip=None, why_fail=None, must_run_in_ci=False):
    """Prints the verdict and returns the exit code, or None when the test may run."""
    if why_fail:
        print(f"FAIL: {why_fail}", flush=True)
        return FAIL
    if why_skip:
        if must_run_in_ci and in_ci():
            print(f"FAIL: this test must run on the CI machine (CI=true), and would be skipped: "
                  f"{why_skip}", flush=True)
            return FAIL
        print(f"SKIP: {why_skip}", flush=True)
        return SKIP
    return None


def programs(*names):
    """The reason to skip, or None: a program (a system package's) that is not on PATH (a name)
    or not executable (an absolute path). Never for our own targets: see find_target."""
    import shutil
    for n in names:
        if not (os.path.isabs(n) and os.access(n, os.X_OK)) and shutil.which(n) is None:
            return f"{n} is not installed (apt-get install {os.path.basename(n)})"
    return None


def skip_unless_programs(*names):
    """Exits with the verdict (77, or 1 on the CI machine for a test that must run there is the
    caller's business: see verdict) when a program is missing."""
    import sys
    rc = verdict(programs(*names))
    if rc is not None:
        sys.exit(rc)


def find_target(build, name):
    """The executable `name` (a Tierce target) under the build tree; raises FileNotFoundError (a
    test failure, not a skip) if it was not built: the tests run after a full build."""
    for d, subdirs, files in os.walk(build):
        subdirs[:] = [s for s in subdirs if not s.startswith(("CMakeFiles", "_deps", "Testing"))]
        if name in files:
            p = os.path.join(d, name)
            if os.access(p, os.X_OK) and os.path.isfile(p):
                return p
    raise FileNotFoundError(f"{name} not found under {build}: build it first "
                            f"(cmake --build {build} --target {name})")


CLUSTER_PACKAGES = ("/usr/sbin/apache2", "/usr/sbin/mariadbd", "/usr/lib/apache2/modules/libphp8.2.so")
CLUSTER_TARGETS = ("mod_rcache/mod_rcache.so", "mod_appversion/mod_appversion.so",
                   "agents/memd/tierce-memd", "agents/binlogd/tierce-binlogd")
DATAGEN = ("sample/tierce-datagen", "sample/datagen/tierce-datagen")


def cluster(build, checker, tierce=True, extra_targets=(), netns=False,
            root="private MariaDB and httpd as www-data"):
    """(why to skip, why to fail) of a driver that runs a tierce-cluster under a checker: the
    system packages and root (skip), Tierce's modules, memd, datagen and the checker (fail);
    tierce=False for a run without our cache (a baseline: only datagen and the checker)."""
    why_skip = system(root=root, files=CLUSTER_PACKAGES)
    if not why_skip and netns:
        from tiercelab import netns as tnetns
        ok, why = tnetns.available()
        if not ok:
            why_skip = f"--netns: {why}"
    paths = (CLUSTER_TARGETS + tuple(extra_targets)) if tierce else tuple(extra_targets)
    why_fail = targets(build, paths, executables=(checker,), alternatives=(DATAGEN,))
    return why_skip, why_fail


class Terminated(Exception):
    """SIGTERM arrived (ctest's timeout, a user): the driver's finally still takes the cluster down."""


def raise_on_sigterm():
    """From now on SIGTERM raises Terminated in the main thread."""
    import signal

    def _term(signum, frame):
        raise Terminated(f"signal {signum}")
    signal.signal(signal.SIGTERM, _term)
