#!/usr/bin/env python3
"""tests/packages/packages_test.py — the Debian packages, built, checked, installed and used on
this machine, then purged (docs/packaging.md).

1. `cpack -G DEB` from the build tree into a temporary directory: the four packages, their control
   fields (version, amd64, Depends from dpkg-shlibdeps plus apache2-api-20120211 ...), contents
   and conffiles; lintian on each (any tag not in packaging/lintian-accepted.txt fails).
2. `dpkg -i` of all four; then the single-host flow of README "Install from the packages", counted
   from "packages installed": `a2enmod rcache appversion`, start tierce-memd as its unit does,
   (re)start Apache — here a private httpd on 127.0.0.1 with ephemeral ports that Includes
   /etc/apache2/mods-enabled, never the system instance. tierce-lockd and tierce-ftpd are started
   from their units too; tierce-binlogd is not (it needs MariaDB with a binlog): its unit's
   ExecStartPre --check runs on the shipped binlogd.toml. With systemd as PID 1 `systemctl
   start`; otherwise the units' RuntimeDirectory/StateDirectory, ExecStartPre and ExecStart lines
   are run as the unit's user and group with a NOTIFY_SOCKET of our own, so Type=notify is checked
   (READY=1) either way.
3. A tiny PHP app (Tierce-Depends / Tierce-Invalidate headers) behind the packaged confs: first
   GET a miss, second a hit (Age header, mod_rcache's Hits counter, PHP not run again); an update
   POSTed through the cache; the next GET shows the new content.
4. Always (finally, also on SIGTERM from ctest): stop everything, `dpkg --purge`, restore
   /etc/apache2 and /var/lib/apache2, remove the cluster's /dev/shm segments; then check that the
   machine is as before (the trees that packages and a2enmod touch, the tierce account).

Refuses (exit 77, skipped) to run as non-root, in a sanitizer build (its modules cannot load into
the system httpd) and where Tierce is already installed or configured (it would purge it).
Exit 0 pass, 1 fail, 77 skipped.
"""
import argparse
import glob
import grp
import hashlib
import http.client
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
# The one free_port (tools/tiercelab/procs.py): never the same port twice in a run.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from tiercelab.procs import free_port  # noqa: E402

PACKAGES = ["tierce-agents", "libapache2-mod-tierce", "tierce-ftp", "php8.2-tierce", "libtierce-lock0",
            "libtierce-lock-dev", "tierce-sample"]
HTTPD = "/usr/sbin/apache2"
# What the packages, their maintainer scripts, a2enmod and phpenmod may change: compared before/after.
WATCHED = ["/etc/apache2", "/var/lib/apache2", "/etc/php", "/var/lib/php/modules", "/etc/tierce",
           "/var/lib/tierce", "/run/tierce", "/lib/systemd/system", "/etc/systemd/system",
           "/var/lib/systemd/deb-systemd-helper-enabled", "/var/lib/systemd/deb-systemd-helper-masked",
           "/usr/lib/apache2/modules", "/usr/share/doc/tierce-agents", "/usr/include/tierce_lock.h",
           "/usr/lib/libtierce_lock.so.0", "/var/log/tierce-ftpd",
           "/srv/tierce-ftp", "/usr/share/tierce"]


class Failure(Exception):
    pass


class Terminated(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)
    print("  ok:", msg, flush=True)


def run(argv, check_rc=True, quiet=False, **kw):
    if not quiet:
        print("  $", " ".join(argv), flush=True)
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check_rc and r.returncode != 0:
        raise Failure(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


def manifest(paths):
    """path -> (type, mode, uid, gid, content hash or link target) for every file under paths."""
    out = {}
    for top in paths:
        if not os.path.lexists(top):
            continue
        walk = os.walk(top) if os.path.isdir(top) and not os.path.islink(top) else \
            [(os.path.dirname(top), [], [os.path.basename(top)])]
        for root, dirs, files in walk:
            for name in [""] + dirs + files:
                p = os.path.join(root, name) if name else root
                if p in out:
                    continue
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    v = "-> " + os.readlink(p)
                elif stat.S_ISREG(st.st_mode):
                    with open(p, "rb") as f:
                        v = hashlib.sha256(f.read()).hexdigest()
                else:
                    v = ""
                out[p] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, v)
    return out


def account_lines():
    lines = []
    for f in ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"):
        try:
            with open(f) as fh:
                lines += [f + ":" + l for l in fh if re.match(r"^tierce:", l)]
        except FileNotFoundError:
            pass
    return lines


def installed(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return r.returncode == 0 and "not-installed" not in r.stdout and r.stdout.strip() != ""


class Unit:
    """The parts of a systemd unit the emulation needs."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        self.values = {}
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#") or line.startswith("["):
                    continue
                k, _, v = line.partition("=")
                self.values.setdefault(k.strip(), []).append(v.strip())

    def get(self, key, default=None):
        v = self.values.get(key)
        return v[-1] if v else default

    def all(self, key):
        return self.values.get(key, [])


class Test:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build_dir)
        self.src = os.path.abspath(args.source_dir)
        self.tmp = tempfile.mkdtemp(prefix="tierce-packages-")
        os.chmod(self.tmp, 0o755)  # daemons that dropped to tierce send READY=1 to our socket here
        self.debs = {}
        self.daemons = []  # (name, Popen) started by the emulation
        self.systemd_units = []  # started with systemctl
        self.httpd_conf = None
        self.installed = False
        self.before = None
        self.accounts_before = None
        self.systemd = os.path.isdir("/run/systemd/system") and self.pid1_is_systemd()

    @staticmethod
    def pid1_is_systemd():
        try:
            return os.path.basename(os.readlink("/proc/1/exe")) == "systemd"
        except OSError:
            return False

    # --- 1. build and inspect ----------------------------------------------------------------
    def build_packages(self):
        print("== building the packages: cpack -G DEB", flush=True)
        out = os.path.join(self.tmp, "debs")
        t = time.time()
        run([self.args.cpack, "-G", "DEB", "--config", os.path.join(self.build, "CPackConfig.cmake"),
             "-B", out])
        print(f"  cpack took {time.time() - t:.1f} s", flush=True)
        for pkg in PACKAGES:
            found = glob.glob(os.path.join(out, f"{pkg}_*_amd64.deb"))
            check(len(found) == 1, f"{pkg}: one .deb built ({', '.join(os.path.basename(f) for f in found)})")
            self.debs[pkg] = found[0]

    def field(self, pkg, name):
        return run(["dpkg-deb", "-f", self.debs[pkg], name], quiet=True).stdout.strip()

    def contents(self, pkg):
        r = run(["dpkg-deb", "-c", self.debs[pkg]], quiet=True).stdout
        return {l.split()[5].lstrip(".") for l in r.splitlines() if len(l.split()) >= 6}

    def conffiles(self, pkg):
        d = os.path.join(self.tmp, "ctrl-" + pkg)
        run(["dpkg-deb", "-e", self.debs[pkg], d], quiet=True)
        p = os.path.join(d, "conffiles")
        return set(open(p).read().split()) if os.path.exists(p) else set()

    def inspect(self):
        print("== control fields, contents, conffiles", flush=True)
        version = open(os.path.join(self.build, "CMakeCache.txt")).read()
        m = re.search(r"^CMAKE_PROJECT_VERSION:STATIC=(\S+)", version, re.M)
        want_version = (m.group(1) if m else "") + "-1"
        for pkg in PACKAGES:
            check(self.field(pkg, "Version") == want_version, f"{pkg}: Version {want_version}")
            check(self.field(pkg, "Architecture") == "amd64", f"{pkg}: Architecture amd64")
            for f in ("Maintainer", "Description", "Section", "Homepage", "Priority"):
                check(self.field(pkg, f) != "", f"{pkg}: {f}: {self.field(pkg, f).splitlines()[0]}")
            print(f"    Depends: {self.field(pkg, 'Depends')}")
        dep = self.field("libapache2-mod-tierce", "Depends")
        check("apache2-api-20120211" in dep, "libapache2-mod-tierce depends on apache2-api-20120211")
        check("libc6" in dep and "libssl3" in dep, "libapache2-mod-tierce: dpkg-shlibdeps ran (libc6, libssl3)")
        check("libc6" in self.field("tierce-agents", "Depends"), "tierce-agents: dpkg-shlibdeps ran")
        check("phpapi-" in self.field("php8.2-tierce", "Depends"), "php8.2-tierce depends on phpapi-*")
        shl = os.path.join(self.tmp, "ctrl-shlibs")
        run(["dpkg-deb", "-e", self.debs["libtierce-lock0"], shl], quiet=True)
        check(open(os.path.join(shl, "shlibs")).read().startswith("libtierce_lock 0 libtierce-lock0"),
              "libtierce-lock0 has a shlibs file")
        want = {
            "libapache2-mod-tierce": ["/usr/lib/apache2/modules/mod_rcache.so",
                                      "/usr/lib/apache2/modules/mod_appversion.so",
                                      "/etc/apache2/mods-available/rcache.load",
                                      "/etc/apache2/mods-available/rcache.conf",
                                      "/etc/apache2/mods-available/appversion.load",
                                      "/etc/apache2/mods-available/appversion.conf",
                                      "/usr/share/tierce/apache2/proxy.conf.in",
                                      "/usr/share/doc/libapache2-mod-tierce/copyright"],
            "tierce-agents": ["/usr/sbin/tierce-memd", "/usr/sbin/tierce-lockd", "/usr/sbin/tierce-binlogd",
                              "/usr/bin/tierce-lock",
                              "/usr/bin/tierce-check", "/usr/bin/tierce-fabric", "/usr/bin/tierce-wanem",
                              "/etc/tierce/memd.toml", "/etc/tierce/lockd.toml", "/etc/tierce/cluster.toml",
                              "/etc/tierce/writer.toml", "/etc/tierce/binlogd.toml",
                              "/lib/systemd/system/tierce-memd.service",
                              "/lib/systemd/system/tierce-writer.service",
                              "/lib/systemd/system/tierce-lockd.service",
                              "/lib/systemd/system/tierce-binlogd.service",
                              "/usr/share/tierce/conf/binlogd.toml",
                              "/usr/share/man/man8/tierce-memd.8.gz", "/usr/share/man/man8/tierce-lockd.8.gz",
                              "/usr/share/man/man8/tierce-binlogd.8.gz",
                              "/usr/share/man/man1/tierce-lock.1.gz", "/usr/share/man/man1/tierce-check.1.gz"],
            "tierce-ftp": ["/usr/sbin/tierce-ftpd", "/usr/bin/tierce-ftp", "/etc/tierce/ftpd.toml",
                           "/lib/systemd/system/tierce-ftpd.service",
                           "/usr/share/man/man8/tierce-ftpd.8.gz", "/usr/share/man/man1/tierce-ftp.1.gz"],
            "php8.2-tierce": ["/usr/lib/php/20220829/tierce.so", "/etc/php/8.2/mods-available/tierce.ini"],
            "libtierce-lock0": ["/usr/lib/libtierce_lock.so.0"],
            "libtierce-lock-dev": ["/usr/lib/libtierce_lock.so", "/usr/include/tierce_lock.h"],
            "tierce-sample": ["/usr/bin/tierce-datagen", "/usr/share/man/man1/tierce-datagen.1.gz",
                              "/usr/share/tierce/sample/schema.sql",
                              "/usr/share/tierce/sample/php/item.php", "/usr/share/tierce/sample/php/lib.php"],
        }
        for pkg, files in want.items():
            have = self.contents(pkg)
            missing = [f for f in files if f not in have]
            check(not missing, f"{pkg} contains {len(files)} expected files" +
                  (f" (missing: {missing})" if missing else ""))
        etc = {
            "libapache2-mod-tierce": {f for f in want["libapache2-mod-tierce"] if f.startswith("/etc/")},
            "tierce-agents": {"/etc/tierce/memd.toml", "/etc/tierce/lockd.toml", "/etc/tierce/cluster.toml",
                              "/etc/tierce/writer.toml", "/etc/tierce/binlogd.toml"},
            "tierce-ftp": {"/etc/tierce/ftpd.toml"},
            "php8.2-tierce": {"/etc/php/8.2/mods-available/tierce.ini"},
            "libtierce-lock0": set(),
            "libtierce-lock-dev": set(),
            "tierce-sample": set(),
        }
        for pkg, files in etc.items():
            have_etc = {f for f in self.contents(pkg) if f.startswith("/etc/") and not f.endswith("/")}
            check(self.conffiles(pkg) == files == have_etc,
                  f"{pkg}: every file under /etc is a conffile ({len(files)})")

    def lintian(self):
        print("== lintian", flush=True)
        if not shutil.which("lintian"):
            raise Failure("lintian is not installed: apt-get install lintian (tools/deps.sh installs it)")
        accepted = set()
        with open(os.path.join(self.src, "packaging", "lintian-accepted.txt")) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    pkg, tag = line.split()[:2]
                    accepted.add((pkg, tag))
        unexplained = []
        # One lintian for every package (its start-up is most of its time: 7 runs took 30 s
        # here, one 12 s); each line names its package.
        r = run(["lintian", "--tag-display-limit", "0"] + [self.debs[p] for p in PACKAGES],
                check_rc=False, quiet=True)
        tags = {pkg: [] for pkg in PACKAGES}
        for line in (r.stdout + r.stderr).splitlines():
            m = re.match(r"^([EWIPXN]): (\S+)(?: \w+)?: (\S+)", line)
            if m and m.group(1) in "EW":
                if m.group(2) not in tags:
                    unexplained.append(f"{line} (a package this test did not build?)")
                    continue
                tags[m.group(2)].append((m.group(1), m.group(3), line))
        if r.returncode not in (0, 1) or "Traceback" in r.stderr:
            raise Failure(f"lintian failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
        for pkg in PACKAGES:
            names = sorted({t[1] for t in tags[pkg]})
            print(f"  lintian {os.path.basename(self.debs[pkg])}: "
                  f"{len([t for t in tags[pkg] if t[0] == 'E'])} errors, "
                  f"{len([t for t in tags[pkg] if t[0] == 'W'])} warnings" +
                  (f" ({', '.join(names)})" if names else ""), flush=True)
            for kind, tag, line in tags[pkg]:
                if (pkg, tag) not in accepted and ("*", tag) not in accepted:
                    unexplained.append(line)
        check(not unexplained, "lintian: every error and warning is explained in "
              "packaging/lintian-accepted.txt" + ("" if not unexplained else
                                                  ":\n    " + "\n    ".join(unexplained)))

    # --- 2. install and start -----------------------------------------------------------------
    def refuse_if_present(self):
        present = [p for p in PACKAGES if installed(p)]
        if present or os.path.exists("/etc/tierce") or account_lines():
            print(f"SKIP: Tierce is installed or configured on this machine ({present or '/etc/tierce or the tierce account exists'}): "
                  "this test would purge it")
            return True
        for m in ("rcache", "appversion"):
            if os.path.lexists(f"/etc/apache2/mods-available/{m}.load"):
                print(f"SKIP: /etc/apache2/mods-available/{m}.load exists (not ours): not touching it")
                return True
        return False

    def snapshot(self):
        self.before = manifest(WATCHED)
        self.accounts_before = account_lines()
        for d in ("/etc/apache2", "/var/lib/apache2"):
            if os.path.isdir(d):
                run(["cp", "-a", d, os.path.join(self.tmp, "backup" + d.replace("/", "_"))], quiet=True)

    def install(self):
        print("== dpkg -i", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        self.installed = True  # from here on, the cleanup purges
        r = run(["dpkg", "-i"] + [self.debs[p] for p in PACKAGES], env=env)
        print("    " + "\n    ".join(l for l in (r.stdout + r.stderr).splitlines() if l.strip())[:3000])
        for p in PACKAGES:
            check(installed(p), f"{p} is installed")
        check(pwd.getpwnam("tierce").pw_uid > 0, "postinst created the system account tierce")
        st = os.stat("/etc/tierce/secret")
        check(stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0 and st.st_size >= 16,
              "postinst created /etc/tierce/secret (mode 600, root, >= 16 bytes)")
        ini = "/etc/php/8.2/apache2/conf.d/20-tierce.ini"
        check(os.path.islink(ini), f"postinst ran phpenmod: {ini}")
        check(not os.path.exists("/etc/apache2/mods-enabled/rcache.load"),
              "the modules are not enabled by the package itself")
        if not shutil.which("systemd-analyze"):
            raise Failure("systemd-analyze is missing: apt-get install systemd (tools/deps.sh installs it); "
                          "the units must be verified")
        units = [f"/lib/systemd/system/{u}.service"
                 for u in ("tierce-memd", "tierce-writer", "tierce-lockd", "tierce-binlogd", "tierce-ftpd")]
        r = run(["systemd-analyze", "verify"] + units, check_rc=False)
        check(r.returncode == 0 and not (r.stdout + r.stderr).strip(),
              "systemd-analyze verify: the five units are clean" +
              ("" if r.returncode == 0 else ": " + r.stdout + r.stderr))
        self.check_binlogd_conf()

    def check_binlogd_conf(self):
        """tierce-binlogd needs MariaDB with a binlog, so it is not started here; its unit's
        ExecStartPre --check runs on the shipped binlogd.toml, with the password file the admin
        writes (removed again: the purge keeps files it does not know)."""
        u = Unit("/lib/systemd/system/tierce-binlogd.service")
        check(u.get("Type") == "notify" and u.get("Group") == "tierce",
              "tierce-binlogd.service: Type=notify, Group=tierce")
        check(not os.path.lexists("/etc/systemd/system/multi-user.target.wants/tierce-binlogd.service"),
              "tierce-binlogd.service is not enabled by the package")
        pw = "/etc/tierce/binlogd.password"
        check(not os.path.exists(pw), f"the package ships no {pw} (the admin's)")
        try:
            fd = os.open(pw, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, b"packages-test\n")
            os.close(fd)
            argv = u.all("ExecStartPre")[0].lstrip("-+@!:").split()
            r = run(argv, check_rc=False)
            check(r.returncode == 0, "the shipped /etc/tierce/binlogd.toml passes the unit's --check" +
                  ("" if r.returncode == 0 else ": " + r.stdout + r.stderr))
        finally:
            if os.path.exists(pw):
                os.unlink(pw)

    def start_unit(self, name):
        """Starts a unit: systemctl with systemd as PID 1, else the unit's own lines."""
        if self.systemd:
            run(["systemctl", "start", name])
            self.systemd_units.append(name)
            check(run(["systemctl", "is-active", name], check_rc=False).stdout.strip() == "active",
                  f"{name} is active (systemctl)")
            pid = run(["systemctl", "show", "-p", "MainPID", "--value", name], quiet=True).stdout.strip()

            class Main:  # what the callers read of a Popen
                pass
            m = Main()
            m.pid = int(pid or 0)
            return m
        u = Unit(os.path.join("/lib/systemd/system", name))
        user = u.get("User", "root")
        group = u.get("Group", grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name)
        uid, gid = pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid
        print(f"  systemd is not PID 1: running {name} as its unit says: user {user}, group {group}"
              f"{' (User= unset: started as root, as systemd would)' if user == 'root' else ''}", flush=True)
        check(u.get("Type") == "notify", f"{name}: Type=notify")
        for key, base in (("RuntimeDirectory", "/run"), ("StateDirectory", "/var/lib"), ("LogsDirectory", "/var/log")):
            for d in u.all(key):
                p = os.path.join(base, d)
                os.makedirs(p, exist_ok=True)
                os.chmod(p, int(u.get(key + "Mode", "0755"), 8))
                os.chown(p, uid, gid)

        def as_unit():
            os.setgid(gid)
            os.setgroups([gid])
            os.setuid(uid)

        for line in u.all("ExecStartPre"):
            ignore = line.startswith("-")
            argv = line.lstrip("-+@!:").split()
            r = run(argv, check_rc=False, preexec_fn=as_unit)
            if r.returncode != 0 and not ignore:
                raise Failure(f"{name}: ExecStartPre {line} exited {r.returncode}: {r.stdout}{r.stderr}")
        sock_path = os.path.join(self.tmp, "notify-" + name)
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(sock_path)
        os.chmod(sock_path, 0o666)
        argv = u.get("ExecStart").lstrip("-+@!:").split()
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        print("  $", " ".join(argv), f"(NOTIFY_SOCKET={sock_path})", flush=True)
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=as_unit,
                             env=dict(os.environ, NOTIFY_SOCKET=sock_path))
        self.daemons.append((name, p))
        ns.settimeout(0.2)
        end = time.time() + 30
        got = ""
        while time.time() < end and "READY=1" not in got:
            try:
                got += ns.recv(4096).decode(errors="replace") + "\n"
            except socket.timeout:
                if p.poll() is not None:
                    break
        ns.close()
        if "READY=1" not in got:
            raise Failure(f"{name}: no READY=1 on NOTIFY_SOCKET (exit {p.poll()}); log:\n" +
                          open(os.path.join(self.tmp, name + ".log")).read())
        check(True, f"{name}: READY=1 received (pid {p.pid})")
        return p

    def uid_of(self, pid):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
        return -1

    # --- 3. the single-host flow --------------------------------------------------------------
    def write_app(self):
        www = os.path.join(self.tmp, "www")
        data = os.path.join(self.tmp, "data")
        os.makedirs(www)
        os.makedirs(data)
        www_data = pwd.getpwnam("www-data")
        os.chown(data, www_data.pw_uid, www_data.pw_gid)
        with open(os.path.join(data, "item1"), "w") as f:
            f.write("first version")
        with open(os.path.join(data, "runs"), "w") as f:
            f.write("")
        os.chown(os.path.join(data, "item1"), www_data.pw_uid, www_data.pw_gid)
        os.chown(os.path.join(data, "runs"), www_data.pw_uid, www_data.pw_gid)
        with open(os.path.join(www, "item.php"), "w") as f:
            f.write(f"""<?php
// A page that shows item 1: it names its dependency, so the cache may keep it.
file_put_contents('{data}/runs', "x", FILE_APPEND | LOCK_EX);
header('Tierce-Depends: item:1');
header('Content-Type: text/plain');
echo "item1: " . file_get_contents('{data}/item1') . "\\n";
echo "tierce extension loaded: " . (extension_loaded('tierce') ? "yes" : "no") . "\\n";
""")
        with open(os.path.join(www, "update.php"), "w") as f:
            f.write(f"""<?php
// An update of item 1: after the write, it says what it changed.
file_put_contents('{data}/item1', $_POST['value'] ?? 'no value', LOCK_EX);
header('Tierce-Invalidate: item:1');
header('Content-Type: text/plain');
echo "updated\\n";
""")
        self.www, self.data = www, data

    def php_runs(self):
        with open(os.path.join(self.data, "runs")) as f:
            return len(f.read())

    def start_httpd(self):
        d = self.tmp
        for sub in ("run", "logs", "lock"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        os.chown(os.path.join(d, "lock"), pwd.getpwnam("www-data").pw_uid, 0)
        self.cache_port, self.app_port = free_port(), free_port()
        conf = os.path.join(d, "httpd.conf")
        with open(conf, "w") as f:
            f.write(f"""# Private httpd of tests/packages: the system's enabled modules (with their .conf files, as
# /etc/apache2/apache2.conf includes them), private ports, pid file, logs and runtime directory.
Define TIERCE_CACHE_PORT {self.cache_port}
Define TIERCE_CACHE_LISTEN 127.0.0.1:{self.cache_port}
Define TIERCE_APP_URL http://127.0.0.1:{self.app_port}/
Define APACHE_RUN_DIR {d}/run
Define APACHE_LOCK_DIR {d}/lock
Define APACHE_LOG_DIR {d}/logs
Define APACHE_RUN_USER www-data
Define APACHE_RUN_GROUP www-data
ServerRoot "{d}"
ServerName 127.0.0.1
PidFile "{d}/run/httpd.pid"
ErrorLog "{d}/logs/error.log"
LogLevel warn
DefaultRuntimeDir "{d}/run"
Mutex file:{d}/lock default
User www-data
Group www-data
Listen 127.0.0.1:{self.app_port}
IncludeOptional /etc/apache2/mods-enabled/*.load
IncludeOptional /etc/apache2/mods-enabled/*.conf
TypesConfig /etc/mime.types
DocumentRoot "{self.www}"
<Directory />
    AllowOverride None
    Require all denied
</Directory>
<Directory "{self.www}">
    AllowOverride None
    Require all granted
</Directory>
""")
        self.httpd_conf = conf
        r = run(["apache2ctl", "-f", conf, "-t"], check_rc=False)
        check(r.returncode == 0, "apache2ctl -t accepts the private config with the enabled mods"
              + ("" if r.returncode == 0 else ": " + r.stdout + r.stderr))
        run([HTTPD, "-f", conf, "-k", "start"])
        end = time.time() + 20
        while time.time() < end:
            try:
                self.get(self.app_port, "/nonexistent")
                break
            except OSError:
                time.sleep(0.1)
        check(os.path.exists(os.path.join(d, "run", "httpd.pid")), "the private httpd runs")

    def request(self, port, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Host": f"127.0.0.1:{port}"}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode(errors="replace"))
        c.close()
        return out

    def get(self, port, path):
        return self.request(port, "GET", path)

    def counters(self):
        st, _, body = self.get(self.cache_port, "/rcache-status?auto")
        if st != 200:
            raise Failure(f"/rcache-status?auto answered {st}")
        out = {}
        for line in body.splitlines():
            k, _, v = line.partition(":")
            out[k.strip()] = v.strip()
        return out

    def use_the_cache(self):
        print("== a page through the cache (port %d) in front of the app (port %d)" %
              (self.cache_port, self.app_port), flush=True)
        c0 = self.counters()
        runs0 = self.php_runs()
        st, h, body = self.get(self.cache_port, "/item.php")
        check(st == 200 and "item1: first version" in body, "first GET through the cache: 200, the page")
        check("tierce extension loaded: yes" in body, "the PHP extension (php8.2-tierce) is loaded by mod_php")
        check(not any(k.startswith("tierce-") for k in h), "no Tierce-* header reaches the client")
        check(self.php_runs() == runs0 + 1, "the first GET ran PHP (a miss)")
        t0 = time.time()
        st, h, body2 = self.get(self.cache_port, "/item.php")
        c1 = self.counters()
        check(st == 200 and body2 == body, "second GET: the same page")
        check(self.php_runs() == runs0 + 1, "the second GET did not run PHP: served from the cache")
        check("age" in h, f"the hit carries Age ({h.get('age')})")
        check(int(c1.get("Hits", 0)) == int(c0.get("Hits", 0)) + 1,
              f"mod_rcache counted one hit (Hits {c0.get('Hits')} -> {c1.get('Hits')}, "
              f"Misses {c0.get('Misses')} -> {c1.get('Misses')})")
        self.cached_after = time.time() - self.t_installed
        st, _, b = self.request(self.cache_port, "POST", "/update.php", body="value=second+version")
        check(st == 200 and "updated" in b, "an update POSTed through the cache")
        st, h, body3 = self.get(self.cache_port, "/item.php")
        check(st == 200 and "item1: second version" in body3,
              "the next GET shows the new content (the update invalidated the cached page)")
        st, h, body4 = self.get(self.cache_port, "/item.php")
        c2 = self.counters()
        check(body4 == body3 and "age" in h, "and the new page is cached in turn (a hit)")
        print(f"  counters: Hits {c2.get('Hits')}, Misses {c2.get('Misses')}, "
              f"Invalidations/stale rejects {c2.get('Invalidations', c2.get('StaleRejects'))}")
        st, _, av = self.get(self.app_port, "/appversion-status")
        check(st == 200 and re.search(r"^invalidations [1-9]", av, re.M) is not None,
              "mod_appversion counted the invalidation (/appversion-status)")

    def run_flow(self):
        if not os.path.exists("/etc/apache2/mods-enabled/php8.2.load"):
            raise Failure("mod_php is not enabled in /etc/apache2/mods-enabled: the test's app is PHP "
                          "(tools/deps.sh installs libapache2-mod-php8.2, which enables it with prefork)")
        self.write_app()
        self.t_installed = time.time()
        commands = []
        print("== from 'packages installed' to 'a cached page is served'", flush=True)
        commands.append("a2enmod rcache appversion")
        r = run(["a2enmod", "rcache", "appversion"])
        check(os.path.islink("/etc/apache2/mods-enabled/rcache.load") and
              os.path.islink("/etc/apache2/mods-enabled/proxy_http.load"),
              "a2enmod rcache enabled it and its dependencies proxy, proxy_http (# Depends:)")
        r = run(["apache2ctl", "configtest"], check_rc=False)
        check(r.returncode == 0, "the system's own apache2 configuration (apache2.conf, sites, ports) "
              "accepts the enabled modules: apache2ctl configtest" +
              ("" if r.returncode == 0 else ": " + r.stdout + r.stderr))
        commands.append("systemctl start tierce-memd")
        p = self.start_unit("tierce-memd.service")
        if p is not None:
            time.sleep(0.2)
            check(self.uid_of(p.pid) == pwd.getpwnam("tierce").pw_uid,
                  "tierce-memd runs as user tierce ([memd] user)")
        commands.append("systemctl restart apache2")
        print("  (the test starts a private httpd instead of the system's apache2: "
              "same /etc/apache2/mods-enabled, private ports/pid/logs)", flush=True)
        self.start_httpd()
        self.use_the_cache()
        print(f"== commands from 'packages installed' to 'a cached page is served': {len(commands)}")
        for c in commands:
            print("     " + c)
        check(len(commands) <= 3, f"{len(commands)} commands (target <= 3)")

    def other_units(self):
        print("== tierce-lockd and tierce-ftpd from their units", flush=True)
        p = self.start_unit("tierce-lockd.service")
        if p is not None:
            time.sleep(0.2)
            check(self.uid_of(p.pid) == pwd.getpwnam("tierce").pw_uid, "tierce-lockd runs as user tierce (--user)")
        r = run(["tierce-lock", "packages-test", "true"], check_rc=False)
        check(r.returncode == 0, "tierce-lock took and released a lock through the packaged lockd"
              + ("" if r.returncode == 0 else ": " + r.stderr))
        self.start_unit("tierce-ftpd.service")
        s = socket.create_connection(("127.0.0.1", 2121), timeout=5)
        banner = s.recv(200).decode(errors="replace")
        s.close()
        check(banner.startswith("220"), f"tierce-ftpd answers on 127.0.0.1:2121 ({banner.strip()})")

    # --- 4. always: clean up and prove it -----------------------------------------------------
    def cleanup(self):
        print("== cleanup: stop, purge, restore", flush=True)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ctest's timeout must not cut the cleanup short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        problems = []
        if self.httpd_conf:
            pidf = os.path.join(self.tmp, "run", "httpd.pid")
            try:
                pid = int(open(pidf).read())
                os.kill(pid, signal.SIGTERM)
                end = time.time() + 15
                while time.time() < end and os.path.exists(f"/proc/{pid}"):
                    time.sleep(0.1)
            except (OSError, ValueError):
                pass
        for name in self.systemd_units:
            subprocess.run(["systemctl", "stop", name])
        for name, p in reversed(self.daemons):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            if name != "tierce-ftpd.service" and p.returncode not in (0, -signal.SIGTERM):
                problems.append(f"{name} exited {p.returncode} on SIGTERM")
        if self.installed:
            r = subprocess.run(["dpkg", "--purge"] + PACKAGES, capture_output=True, text=True,
                               env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
            print("  $ dpkg --purge " + " ".join(PACKAGES) + f" -> {r.returncode}")
            if r.returncode != 0:
                problems.append("dpkg --purge failed: " + r.stdout + r.stderr)
            still = [p for p in PACKAGES if installed(p)]
            if still:
                problems.append(f"still installed after purge: {still}")
            left = [m for m in ("rcache", "appversion")
                    if os.path.lexists(f"/etc/apache2/mods-enabled/{m}.load")]
            if left:
                problems.append(f"prerm did not disable {left} (a2dismod)")
            else:
                print("  ok: the purge disabled rcache and appversion (prerm: apache2_invoke dismod)")
        if self.before is not None:
            # a2enmod is the test's own change: /etc/apache2 and /var/lib/apache2 come back from the
            # copies whatever happened (the purge already disabled our modules).
            for d in ("/etc/apache2", "/var/lib/apache2"):
                b = os.path.join(self.tmp, "backup" + d.replace("/", "_"))
                if os.path.isdir(b):
                    r = subprocess.run(["rsync", "-a", "--delete", b + "/", d + "/"]
                                       if shutil.which("rsync") else
                                       ["sh", "-c", f'rm -rf "{d}" && cp -a "{b}" "{d}"'])
                    if r.returncode != 0:
                        problems.append(f"restoring {d} failed")
        for f in glob.glob("/dev/shm/tierce.local.*"):
            try:
                os.unlink(f)
            except OSError:
                pass
        if self.before is not None:
            after = manifest(WATCHED)
            changed = sorted(p for p in set(self.before) | set(after) if self.before.get(p) != after.get(p))
            if changed:
                problems.append("the machine changed: " + ", ".join(changed[:20]))
            if account_lines() != self.accounts_before:
                problems.append("the tierce account is still there: " + " ".join(account_lines()))
        if problems:
            print("  CLEANUP PROBLEMS:\n    " + "\n    ".join(problems), flush=True)
        else:
            print("  ok: purged; /etc/apache2, /var/lib/apache2, /etc/php, /etc/tierce, units, "
                  "systemd state and the tierce account are as before", flush=True)
        if self.args.keep:
            print("  kept", self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return problems

    def main(self):
        ok = False
        try:
            self.build_packages()
            self.inspect()
            self.lintian()
            self.snapshot()
            self.install()
            self.run_flow()
            self.other_units()
            ok = True
        except (Failure, Terminated) as e:
            print("FAIL:", e, flush=True)
            for log in glob.glob(os.path.join(self.tmp, "*.log")) + [os.path.join(self.tmp, "logs", "error.log")]:
                if os.path.exists(log):
                    print(f"--- {log}\n" + open(log).read()[-4000:])
        finally:
            problems = self.cleanup()
        return 0 if ok and not problems else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--cpack", default="cpack")
    ap.add_argument("--sanitized", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (dpkg -i, a2enmod, daemons as their units run them)")
        return 77
    if args.sanitized:
        print("SKIP: sanitizer build: its Apache modules cannot be loaded into the system httpd")
        return 77
    t = Test(args)
    if t.refuse_if_present():
        return 77

    def on_term(signum, frame):
        raise Terminated(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print("systemd is PID 1: units started with systemctl" if t.systemd else
          "systemd is not PID 1: units emulated (their ExecStartPre/ExecStart lines, as their user)")
    rc = t.main()
    print("PASS" if rc == 0 else "FAIL")
    return rc


if __name__ == "__main__":
    sys.exit(main())
