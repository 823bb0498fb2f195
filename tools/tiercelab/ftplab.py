#!/usr/bin/env python3
"""tools/tiercelab/ftplab.py — launchers for the FTP tests and benchmarks (Python 3 stdlib only),
on tiercelab's process, port and skip-policy helpers.

Every launcher is a context manager that leaves nothing behind, also when the body raises:
processes run in their own process group (the whole group is killed on stop, and the leader gets
SIGKILL if the test process itself dies: PR_SET_PDEATHSIG), private files live in a temp dir that
is removed on stop.

    free_port(host)                     a port that was free a moment ago
    sha256(path)                        hex digest of a file
    make_tree(root, {"a/b.bin": 1000, "c.txt": b"hi"})   int = that many seeded random bytes
    make_cert(dir) -> (cert, key)       self-signed for CN/SAN 127.0.0.1 via the openssl CLI
    Vsftpd(root, ...)                   Debian's /usr/sbin/vsftpd, private config, ephemeral port
    TierceFtpd(binary, root, ...)       the project's tierce-ftpd, TOML config per docs/ftp.md
    Relay(binary, forwards, ...)        tierce-wanem (docs/ftp.md)
    find_binary(build, name)            a built executable under the build directory
    which_or_skip(*programs)            exit 77 (ctest: skipped) if a package is missing
    TempDir(prefix)                     mkdtemp + rmtree on exit
    spawn(argv, log) / kill_group(p)    a process in its own group / SIGTERM, then SIGKILL
    run(argv, timeout)                  subprocess.run, output captured, timeout -> rc -9
    Checks                              collects failed checks, prints them, exit code for main()
    run_body(ck, srv, fn, *args)        fn's exceptions count as failures; then the server must
                                        be alive with no crash report; log tail on failure
    FtpControl(host, port)              a raw control connection (cmd, login, pasv, epsv, ...)
    recv_all(sock, limit)               read a data socket to EOF
    parse_xferlog(path)                 wu-ftpd xferlog lines as dicts
    free_port_block(n)                  n consecutive free ports (pasv_ports + relays)
    wait_for(pred, timeout)             poll a condition with a deadline

Vsftpd users: anonymous logs in as "anonymous" and sees `root` (read-only, owned by root); with
write=True its writable place is root/"upload" (owned by `ftp`: vsftpd refuses a writable anonymous
root). local_user="tierceftp" (TEST_USER) creates that account once (useradd -M, chpasswd) and
chroots it to `root`; the tree is chown'ed to it when write=True so its uploads land there.
"""
import contextlib
import hashlib
import os
import random
import re
import socket
import subprocess
import time
# The generic parts are tiercelab's (procs: processes, ports, waiting; prereq: the skip policy),
# re-exported here so a driver needs one import.
from tiercelab.prereq import SKIP, find_target as find_binary, skip_unless_programs as which_or_skip  # noqa: F401,E501
from tiercelab.procs import (TempDir, free_port, free_port_block, kill_group,  # noqa: F401
                             popen as spawn, wait_for)

TEST_USER = "tierceftp"
TEST_PASSWORD = "tierce-pass-42"


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def random_bytes(n: int, seed) -> bytes:
    return random.Random(seed).randbytes(n)


def make_tree(root, files, seed=1):
    """files: relative path -> bytes (written as is) or int (that many random bytes, seeded by
    `seed` and the path, so the same call makes the same tree). A path ending in "/" is a dir."""
    os.makedirs(root, exist_ok=True)
    for rel, content in files.items():
        path = os.path.join(root, rel)
        if rel.endswith("/"):
            os.makedirs(path, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(path) or root, exist_ok=True)
        data = content if isinstance(content, (bytes, bytearray)) else random_bytes(
            int(content), "%s:%s" % (seed, rel))
        with open(path, "wb") as f:
            f.write(data)
    return root


def chown_tree(top, uid, gid):
    """chown -R without following symlinks."""
    os.lchown(top, uid, gid)
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            os.lchown(os.path.join(d, n), uid, gid)


def give_to_sessions(srv, *paths):
    """Files a test adds to a TierceFtpd's tree after it started, that its sessions must write
    (APPE, resume, delete): theirs, like the tree (TierceFtpd.start). Nothing unless root."""
    if isinstance(srv, TierceFtpd) and os.geteuid() == 0:
        import pwd
        nobody = pwd.getpwnam("nobody")
        for p in paths:
            chown_tree(p, nobody.pw_uid, nobody.pw_gid)


def wait_banner(host, port, timeout=15.0, proc=None):
    """Until a TCP connect to host:port gets a 220 greeting."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("server exited with %s before accepting" % proc.returncode)
        try:
            with socket.create_connection((host, port), timeout=2) as s:
                s.settimeout(5)
                greet = s.recv(4096)
                if greet.startswith(b"220"):
                    with contextlib.suppress(OSError):
                        s.sendall(b"QUIT\r\n")
                    return
                last = greet
        except OSError as e:
            last = e
        time.sleep(0.1)
    raise TimeoutError("no 220 greeting from %s:%d within %.0fs (%r)" % (host, port, timeout, last))


def make_cert(dir):
    """Self-signed RSA certificate for CN=127.0.0.1 (SAN IP 127.0.0.1, DNS localhost)."""
    os.makedirs(dir, exist_ok=True)
    cert, key = os.path.join(dir, "cert.pem"), os.path.join(dir, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
    os.chmod(key, 0o600)
    return cert, key


def hash_password(password):
    """A crypt(3) SHA-512 hash ($6$), which glibc/libxcrypt crypt(3) verifies."""
    r = subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=password.encode(),
                       check=True, capture_output=True, timeout=30)
    return r.stdout.decode().strip()


def ensure_local_user(name=TEST_USER, password=TEST_PASSWORD):
    """A real account for vsftpd local logins (PAM): created once, password (re)set each time.
    Tests run in parallel (ctest -j): a lock file keeps two of them from racing on useradd and
    /etc/shadow."""
    import fcntl
    with open("/tmp/tierce-ftpenv-useradd.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if subprocess.run(["id", "-u", name], capture_output=True).returncode != 0:
            # home "/": vsftpd chdirs to the home before local_root, and "/" always exists
            subprocess.run(["useradd", "-M", "-d", "/", "-s", "/bin/bash", name],
                           check=True, capture_output=True, timeout=30)
        subprocess.run(["chpasswd"], input=("%s:%s\n" % (name, password)).encode(),
                       check=True, capture_output=True, timeout=30)
    import pwd
    pw = pwd.getpwnam(name)
    return pw.pw_uid, pw.pw_gid


class _Server:
    """Common start/stop/context-manager behaviour; subclasses set self.proc and self.dir."""
    proc = None
    tmp = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        rc = None
        if self.proc is not None:
            rc = kill_group(self.proc)
            self.returncode = rc
            self.proc = None
        if self.tmp is not None:
            self.tmp.cleanup()
        return rc

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except (OSError, AttributeError):
            return ""


class Vsftpd(_Server):
    BINARY = "/usr/sbin/vsftpd"

    def __init__(self, root, *, local_user=None, password=None, anonymous=True, write=True,
                 pasv_min=0, pasv_max=0, pasv_address=None, host="127.0.0.1", tls=None,
                 extra=""):
        self.root = os.path.abspath(root)
        self.local_user = local_user
        self.anonymous = anonymous
        self.write = write
        self.pasv_min, self.pasv_max, self.pasv_address = pasv_min, pasv_max, pasv_address
        self.host = host
        self.port = None
        self.tls = tls
        self.extra = extra
        if local_user:
            self.user, self.password = local_user, password or TEST_PASSWORD
        else:
            self.user, self.password = "anonymous", password or "tierce@example.org"

    def start(self):
        which_or_skip(self.BINARY)
        self.tmp = TempDir("tierce-vsftpd-")
        d = self.tmp.path
        os.chmod(d, 0o755)
        empty = os.path.join(d, "empty")
        os.mkdir(empty, 0o755)
        self.log_path = os.path.join(d, "vsftpd.log")
        self.xferlog_path = os.path.join(d, "xferlog")
        self.port = free_port(self.host)
        os.makedirs(self.root, exist_ok=True)
        os.chmod(self.root, 0o755)
        w = "YES" if self.write else "NO"
        conf = [
            "listen=YES", "listen_ipv6=NO", "background=NO",
            "listen_address=%s" % self.host, "listen_port=%d" % self.port,
            "seccomp_sandbox=NO", "isolate=NO", "isolate_network=NO",
            "secure_chroot_dir=%s" % empty, "pam_service_name=vsftpd",
            "run_as_launching_user=NO", "nopriv_user=ftp", "ftp_username=ftp",
            "write_enable=%s" % w, "dirmessage_enable=NO", "use_localtime=NO",
            "connect_from_port_20=NO", "port_enable=YES", "pasv_enable=YES",
            "xferlog_enable=YES", "xferlog_std_format=YES", "xferlog_file=%s" % self.xferlog_path,
            "dual_log_enable=YES", "vsftpd_log_file=%s" % self.log_path, "log_ftp_protocol=YES",
            "max_clients=200", "max_per_ip=200", "idle_session_timeout=300",
            "data_connection_timeout=120", "async_abor_enable=YES", "ls_recurse_enable=YES",
        ]
        if self.pasv_min:
            conf += ["pasv_min_port=%d" % self.pasv_min, "pasv_max_port=%d" % self.pasv_max]
        if self.pasv_address:
            conf += ["pasv_address=%s" % self.pasv_address, "pasv_addr_resolve=NO"]
        if self.anonymous:
            conf += ["anonymous_enable=YES", "anon_root=%s" % self.root, "no_anon_password=YES",
                     "anon_world_readable_only=NO", "anon_umask=022",
                     "anon_upload_enable=%s" % w, "anon_mkdir_write_enable=%s" % w,
                     "anon_other_write_enable=%s" % w]
            os.chown(self.root, 0, 0)
            if self.write:
                up = os.path.join(self.root, "upload")
                os.makedirs(up, exist_ok=True)
                ftp = __import__("pwd").getpwnam("ftp")
                os.chown(up, ftp.pw_uid, ftp.pw_gid)
                os.chmod(up, 0o755)
        else:
            conf += ["anonymous_enable=NO"]
        if self.local_user:
            uid, gid = ensure_local_user(self.local_user, self.password)
            # vsftpd chdirs to local_root as the user: the ancestors (mkdtemp makes them 0700)
            # must be searchable by it.
            a = os.path.dirname(self.root)
            while a not in ("/", ""):
                st = os.stat(a)
                if not st.st_mode & 0o001:
                    os.chmod(a, (st.st_mode & 0o7777) | 0o001)
                a = os.path.dirname(a)
            conf += ["local_enable=YES", "local_root=%s" % self.root, "chroot_local_user=YES",
                     "allow_writeable_chroot=YES", "local_umask=022", "userlist_enable=NO"]
            if self.write and not self.anonymous:
                for dp, dns, fns in os.walk(self.root):
                    for n in [dp] + [os.path.join(dp, x) for x in dns + fns]:
                        os.lchown(n, uid, gid)
        else:
            conf += ["local_enable=NO"]
        if self.tls:
            cert, key = self.tls
            conf += ["ssl_enable=YES", "rsa_cert_file=%s" % cert, "rsa_private_key_file=%s" % key,
                     "allow_anon_ssl=YES", "force_local_data_ssl=NO", "force_local_logins_ssl=NO",
                     "force_anon_data_ssl=NO", "force_anon_logins_ssl=NO", "require_ssl_reuse=NO",
                     "ssl_ciphers=HIGH"]
        if self.extra:
            conf += [self.extra]
        self.config_path = os.path.join(d, "vsftpd.conf")
        with open(self.config_path, "w") as f:
            f.write("\n".join(conf) + "\n")
        os.chmod(self.config_path, 0o600)  # vsftpd wants its config owned by root
        self.proc = spawn([self.BINARY, self.config_path], os.path.join(d, "stderr.log"))
        try:
            wait_banner(self.host, self.port, proc=self.proc)
        except Exception:
            err = open(os.path.join(d, "stderr.log"), errors="replace").read()
            self.stop()
            raise RuntimeError("vsftpd did not start: %s" % err)
        return self

    def url(self, path="/", user=True):
        auth = "%s:%s@" % (self.user, self.password) if user and self.local_user else ""
        return "ftp://%s%s:%d%s" % (auth, self.host, self.port, path)


class TierceFtpd(_Server):
    """tierce-ftpd --foreground with a private TOML config (docs/ftp.md "tierce-ftpd").

    users: (name, password, root-or-None (= the server root), write). tls: (cert, key) or None.
    extra_toml: text inserted before the first table (top-level keys; tables are fine too)."""

    def __init__(self, binary, root, *, users=(("alice", "secret", None, True),),
                 anonymous_root=None, anonymous_run_as=None, tls=None, tls_require=False, adts=True, workers=2,
                 max_sessions=64, pasv_ports="0", pasv_address=None, extra_toml="",
                 host="127.0.0.1", idle_timeout_s=None, data_timeout_s=None,
                 login_timeout_s=None, log_level="info", max_streams=None, block_kib=None,
                 zero_copy=None, start_timeout=20.0, session_owned=None):
        self.binary = binary
        # What the sessions must own when root (privilege separation): None = every writable
        # user's root; else just these paths (a tree shared with another server, e.g. vsftpd).
        self.session_owned = session_owned
        self.root = os.path.abspath(root)
        self.users = list(users)
        self.anonymous_root = anonymous_root
        # [anonymous] run_as: as root, no writable user may run as the anonymous account
        self.anonymous_run_as = anonymous_run_as
        self.tls, self.tls_require = tls, tls_require
        self.adts = adts
        self.workers, self.max_sessions = workers, max_sessions
        self.pasv_ports, self.pasv_address = pasv_ports, pasv_address
        self.extra_toml = extra_toml
        self.host = host
        self.timeouts = dict(idle_timeout_s=idle_timeout_s, data_timeout_s=data_timeout_s,
                             login_timeout_s=login_timeout_s)
        self.log_level = log_level
        self.adts_opts = dict(max_streams=max_streams, block_kib=block_kib, zero_copy=zero_copy)
        self.start_timeout = start_timeout
        self.port = None
        self.user, self.password = (self.users[0][0], self.users[0][1]) if self.users else (
            "anonymous", "guest@")

    @staticmethod
    def _q(s):
        return '"%s"' % str(s).replace("\\", "\\\\").replace('"', '\\"')

    @staticmethod
    def _v(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        return TierceFtpd._q(v)

    def _config(self):
        q = self._q
        lines = ["listen = %s" % q("%s:0" % self.host), "workers = %d" % self.workers,
                 "max_sessions = %d" % self.max_sessions, "pasv_ports = %s" % q(self.pasv_ports)]
        if self.pasv_address:
            lines.append("pasv_address = %s" % q(self.pasv_address))
        for k, v in self.timeouts.items():
            if v is not None:
                lines.append("%s = %d" % (k, v))
        lines += ["xferlog = %s" % q(self.xferlog_path), "log_level = %s" % q(self.log_level),
                  "ready_file = %s" % q(self.ready_file), 'banner = "Tierce FTP server ready"']
        if self.extra_toml:
            lines.append(self.extra_toml)
        if self.anonymous_root:
            lines += ["", "[anonymous]", "root = %s" % q(os.path.abspath(self.anonymous_root))]
            if self.anonymous_run_as:
                lines.append("run_as = %s" % q(self.anonymous_run_as))
        if self.tls:
            lines += ["", "[tls]", "cert = %s" % q(self.tls[0]), "key = %s" % q(self.tls[1]),
                      "require = %s" % self._v(bool(self.tls_require))]
        lines += ["", "[adts]", "enable = %s" % self._v(bool(self.adts))]
        for k, v in self.adts_opts.items():
            if v is not None:
                lines.append("%s = %s" % (k, self._v(v)))
        for name, password, root, write in self.users:
            lines += ["", "[[user]]", "name = %s" % q(name),
                      "password = %s" % q(hash_password(password)),
                      "root = %s" % q(os.path.abspath(root) if root else self.root),
                      "write = %s" % self._v(bool(write))]
        return "\n".join(lines) + "\n"

    def start(self):
        self.tmp = TempDir("tierce-ftpd-")
        d = self.tmp.path
        self.log_path = os.path.join(d, "ftpd.log")
        self.xferlog_path = os.path.join(d, "xferlog")
        self.ready_file = os.path.join(d, "ready")
        self.config_path = os.path.join(d, "ftpd.toml")
        os.makedirs(self.root, exist_ok=True)
        # Started as root, tierce-ftpd runs each session as its account after login (privilege
        # separation, docs/ftp.md): users here have no run_as, so that is unprivileged_user
        # (default nobody), which must own the writable trees. Files the test adds later as root
        # stay readable (0644) but not writable by the session.
        if os.geteuid() == 0:
            import pwd
            nobody = pwd.getpwnam("nobody")
            owned = self.session_owned
            if owned is None:
                owned = [os.path.abspath(root) if root else self.root
                         for _name, _pw, root, write in self.users if write]
            for path in owned:
                chown_tree(path, nobody.pw_uid, nobody.pw_gid)
        with open(self.config_path, "w") as f:
            f.write(self._config())
        self.proc = spawn([self.binary, "-c", self.config_path, "--foreground"], self.log_path)
        deadline = time.monotonic() + self.start_timeout
        pat = re.compile(r"listening on (\S+):(\d+)")
        while time.monotonic() < deadline:
            m = pat.search(self.log_text())
            if m:
                self.port = int(m.group(2))
                break
            if self.proc.poll() is not None:
                log = self.log_text()
                rc = self.proc.returncode
                self.stop()
                raise RuntimeError("tierce-ftpd exited with %s before listening:\n%s" % (rc, log))
            time.sleep(0.05)
        else:
            log = self.log_text()
            self.stop()
            raise TimeoutError("tierce-ftpd did not print 'listening on' within %.0fs:\n%s"
                               % (self.start_timeout, log))
        return self

    def url(self, path="/", user=None, password=None):
        user = user or self.user
        password = self.password if password is None else password
        return "ftp://%s:%s@%s:%d%s" % (user, password, self.host, self.port, path)

    def crash_report(self):
        """Lines of the log that look like a crash or a sanitizer report ("" = none)."""
        bad = re.compile(r"AddressSanitizer|UndefinedBehaviorSanitizer|: runtime error:|"
                         r"LeakSanitizer|ThreadSanitizer|Segmentation fault|SIGSEGV|SIGABRT|"
                         r"SIGBUS|terminate called|core dumped|stack smashing|double free|"
                         r"^Aborted|Assertion .* failed|assertion failed|killed by signal")
        return "\n".join(l for l in self.log_text().splitlines() if bad.search(l))


class Relay(_Server):
    """tierce-wanem: forwards = ["127.0.0.1:P=127.0.0.1:Q", "127.0.0.1:A-B=127.0.0.1:C-D", ...]."""

    def __init__(self, binary, forwards, delay_us=0, rate=None, window=None, start_timeout=15.0):
        self.binary = binary
        self.forwards = list(forwards)
        self.delay_us, self.rate, self.window = delay_us, rate, window
        self.start_timeout = start_timeout

    def start(self):
        self.tmp = TempDir("tierce-wanem-")
        d = self.tmp.path
        self.log_path = os.path.join(d, "wanem.log")
        ready = os.path.join(d, "ready")
        argv = [self.binary]
        for f in self.forwards:
            argv += ["--forward", f]
        argv += ["--delay-us", str(int(self.delay_us))]
        if self.rate:
            argv += ["--rate", str(int(self.rate))]
        if self.window:
            argv += ["--window", str(int(self.window))]
        argv += ["--ready-file", ready]
        self.proc = spawn(argv, self.log_path)
        deadline = time.monotonic() + self.start_timeout
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log_text()
                rc = self.proc.poll()
                self.stop()
                raise RuntimeError("tierce-wanem not ready (exit %s):\n%s" % (rc, log))
            time.sleep(0.05)
        return self


class Checks:
    """Collects check results; a test prints every failure and ends with exit code 1 if any."""

    def __init__(self, name):
        self.name = name
        self.failed = []
        self.passed = 0

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("ok   %s" % what, flush=True)
        else:
            self.failed.append(what)
            print("FAIL %s%s" % (what, ("\n     " + str(detail).replace("\n", "\n     "))
                                 if detail else ""), flush=True)
        return bool(cond)

    def equal(self, got, want, what):
        return self.check(got == want, what, "expected %r, got %r" % (want, got))

    def exit_code(self):
        print("%s: %d passed, %d failed" % (self.name, self.passed, len(self.failed)), flush=True)
        for f in self.failed:
            print("  failed: %s" % f)
        return 1 if self.failed else 0


def run(argv, timeout=120, **kw):
    """subprocess.run with a timeout, output captured; a timeout becomes returncode -9."""
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              start_new_session=True, **kw)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(argv, -9, e.stdout or b"", (e.stderr or b"") +
                                           b"\n[timed out after %ds]" % timeout)


class FtpControl:
    """A raw FTP control connection for protocol-level tests: every read has a timeout.

    cmd("NOOP") -> (250, "250 ...full reply text"); code 0 means the connection was closed."""

    def __init__(self, host, port, timeout=10.0, greet=True):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""
        self.greeting = self.reply() if greet else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None

    def _line(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("control connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.rstrip(b"\r").decode("utf-8", errors="replace")

    def reply(self):
        """One (possibly multi-line) reply; (0, "") if the server closed the connection."""
        try:
            first = self._line()
            lines = [first]
            if len(first) >= 4 and first[3] == "-":
                while True:
                    l = self._line()
                    lines.append(l)
                    if len(l) >= 4 and l[:3] == first[:3] and l[3] == " ":
                        break
            code = int(first[:3]) if first[:3].isdigit() else -1
            return code, "\n".join(lines)
        except (ConnectionError, OSError):
            return 0, ""

    def send(self, data: bytes):
        self.sock.sendall(data)

    def cmd(self, line):
        try:
            self.send((line if isinstance(line, bytes) else line.encode()) + b"\r\n")
        except OSError:
            return 0, ""
        return self.reply()

    def login(self, user, password):
        code, text = self.cmd("USER " + user)
        if code == 331:
            code, text = self.cmd("PASS " + password)
        return code, text

    def pasv(self):
        """PASV -> (host, port), or raises with the reply."""
        code, text = self.cmd("PASV")
        m = re.search(r"(\d+),(\d+),(\d+),(\d+),(\d+),(\d+)", text)
        if code != 227 or not m:
            raise RuntimeError("PASV failed: %s" % text)
        n = [int(x) for x in m.groups()]
        return "%d.%d.%d.%d" % tuple(n[:4]), n[4] * 256 + n[5]

    def epsv(self):
        code, text = self.cmd("EPSV")
        m = re.search(r"\(\|\|\|(\d+)\|\)", text)
        if code != 229 or not m:
            raise RuntimeError("EPSV failed: %s" % text)
        return int(m.group(1))

    def data_connect(self, host=None, timeout=10.0):
        """EPSV and connect to it; returns the data socket."""
        port = self.epsv()
        s = socket.create_connection((host or self.sock.getpeername()[0], port), timeout=timeout)
        s.settimeout(timeout)
        return s


def recv_all(sock, limit=None):
    """Read a data socket to EOF (or `limit` bytes)."""
    out = bytearray()
    while limit is None or len(out) < limit:
        chunk = sock.recv(1 << 20 if limit is None else min(1 << 20, limit - len(out)))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def run_body(ck, srv, body, *args):
    """body(*args) with an unexpected exception counted as a failure; then the server must still
    run and its log hold no crash or sanitizer report; on failure the log's tail is printed."""
    import traceback
    try:
        body(*args)
    except Exception:
        ck.check(False, "unexpected exception", traceback.format_exc())
    ck.check(srv.alive(), "server still running")
    if hasattr(srv, "crash_report"):
        rep = srv.crash_report()
        ck.check(not rep, "no crash or sanitizer report in the server log", rep)
    if ck.failed:
        print("---- server log (tail) ----\n" + srv.log_text()[-8000:])


def file_sha(path):
    """sha256 of a file, or None when it does not exist."""
    return sha256(path) if os.path.isfile(path) else None


def parse_xferlog(path):
    """wu-ftpd xferlog lines -> dicts: seconds, host, bytes, name, type, direction, access, user,
    status ('c' complete / 'i' incomplete). Missing file = []."""
    out = []
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        t = line.split()
        if len(t) < 18:
            continue
        # 5 date words, then seconds host bytes NAME... type action dir access user service
        # auth-method auth-user status: the name may hold spaces, so count from the end.
        out.append(dict(seconds=t[5], host=t[6], bytes=int(t[7]), name=" ".join(t[8:-9]),
                        type=t[-9], direction=t[-7], access=t[-6], user=t[-5], status=t[-1]))
    return out
