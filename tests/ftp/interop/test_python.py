#!/usr/bin/env python3
"""ftp_interop_python — Python's ftplib (another independent client) against tierce-ftpd.

FEAT, PWD/CWD/CDUP, MLSD facts (type, size, modify), MLST, NLST, SIZE, MDTM, RETR/STOR/APPE,
REST + RETR, RNFR/RNTO, MKD/RMD/DELE, the 5xx replies for missing files, then FTP_TLS with PROT P
for listings and files, and PROT C when TLS is not required. Started as root (privilege
separation), a logged-in PROT P session's worker holds no copy of the TLS private key while its
data connections still resume the control connection's session, and an idle pre-login worker
does hold it (the scan's control).

    test_python.py --build BUILD_DIR   (--vsftpd: the same checks against vsftpd; vsftpd has no
                                        MLSD, so those checks are left out there)
"""
import argparse
import ftplib
import io
import os
import ssl
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from tiercelab import ftplab  # noqa: E402


def expect_error(fn, *args):
    """The reply code of the error_perm/error_temp fn raises, or None if it succeeded."""
    try:
        fn(*args)
    except ftplib.all_errors as e:
        return str(e)[:3]
    return None


class ReusingFTP_TLS(ftplib.FTP_TLS):
    """FTP_TLS whose PROT P data connections resume the control connection's TLS session, as
    curl and lftp do: tierce-ftpd requires it by default ([tls] require_reuse, like vsftpd's
    require_ssl_reuse), and plain ftplib does not offer the session."""

    def ntransfercmd(self, cmd, rest=None):
        conn, size = ftplib.FTP.ntransfercmd(self, cmd, rest)
        if self._prot_p:
            conn = self.context.wrap_socket(conn, server_hostname=self.host,
                                            session=self.sock.session)
        return conn, size


class ForeignSessionFTP_TLS(ftplib.FTP_TLS):
    """FTP_TLS whose PROT P data connections resume *another* control connection's TLS session
    (`foreign`, a session of the same server): what a client racing for another user's data port
    with a ticket of its own session would send. tierce-ftpd must refuse it (issue 32)."""

    def __init__(self, foreign, **kw):
        super().__init__(**kw)
        self.foreign = foreign

    def ntransfercmd(self, cmd, rest=None):
        conn, size = ftplib.FTP.ntransfercmd(self, cmd, rest)
        if self._prot_p:
            conn = self.context.wrap_socket(conn, server_hostname=self.host, session=self.foreign)
        return conn, size


def key_needles(key):
    """The RSA private key's first prime as OpenSSL holds it in memory (a BIGNUM: 64-bit words,
    least significant first, i.e. little-endian bytes) and as DER/PEM decoding leaves it (big-
    endian): 48 bytes of each."""
    import re
    import subprocess
    text = subprocess.run(["openssl", "pkey", "-in", key, "-text", "-noout"], check=True,
                          capture_output=True, text=True).stdout
    m = re.search(r"prime1:\s*\n((?:\s+[0-9a-f:]+\n)+)", text)
    if not m:
        return None
    p = int(m.group(1).replace(":", "").replace(" ", "").replace("\n", ""), 16)
    n = (p.bit_length() + 7) // 8
    return {"little-endian": p.to_bytes(n, "little")[:48], "big-endian": p.to_bytes(n, "big")[:48]}


def memory_holds(pid, needles):
    """Which needles occur in the readable memory of pid (root reads /proc/PID/mem)."""
    import re
    found = set()
    with open("/proc/%d/maps" % pid) as f:
        maps = f.read().splitlines()
    with open("/proc/%d/mem" % pid, "rb", 0) as mem:
        for line in maps:
            mm = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)", line)
            if not mm or mm.group(3)[0] != "r" or "[vvar]" in line or "[vsyscall]" in line:
                continue
            lo, hi = int(mm.group(1), 16), int(mm.group(2), 16)
            if hi - lo > (1 << 32):
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except OSError:
                continue
            found |= {k for k, v in needles.items() if v in data}
    return found


def tls_key_body(ck, srv, cert, key):
    """[tls] require_reuse under privilege separation: after the login the worker holds no copy of
    the private key, and PROT P transfers still work (resumption needs no key)."""
    if os.geteuid() != 0:
        print("ftp_interop_python: TLS key scan skipped: privilege separation needs root")
        return
    if os.environ.get("TIERCE_TEST_ASAN") == "1":
        print("ftp_interop_python: TLS key scan skipped: AddressSanitizer keeps freed memory")
        return
    needles = key_needles(key)
    ck.check(needles is not None, "the test key is RSA (its prime1 is printed)")
    if not needles:
        return
    ctx = ssl.create_default_context(cafile=cert)
    ftp = ReusingFTP_TLS(context=ctx)
    ftp.connect(srv.host, srv.port, timeout=20)
    ftp.auth()
    ftp.prot_p()
    ck.check(ftp.login(srv.user, srv.password).startswith("230"), "TLS key: login over TLS")
    pid = int(ftp.sendcmd("STAT").split("Session pid ")[1].split()[0])
    ck.check(len(ftp.nlst()) > 0, "TLS key: a PROT P listing after the key was dropped (resumed)")
    held = memory_holds(pid, needles)
    ck.check(not held, "TLS key: the logged-in session's worker holds no copy of the private key",
             "found: %s" % sorted(held))
    import subprocess
    # Privilege separation's relay (the pre-login process, the session's sibling under its
    # monitor) dropped it too when it began relaying (docs/ftp.md "Privilege separation").
    with open("/proc/%d/stat" % pid) as f:
        monitor = int(f.read().rsplit(")", 1)[1].split()[1])
    siblings = [int(k) for k in subprocess.run(["pgrep", "-P", str(monitor)], capture_output=True,
                                               text=True).stdout.split() if int(k) != pid]
    ck.check(len(siblings) == 1, "TLS key: the session has one sibling, its relay", str(siblings))
    for k in siblings:
        held = memory_holds(k, needles)
        ck.check(not held, "TLS key: the relay of the logged-in session holds no copy of the "
                 "private key", "found: %s" % sorted(held))
    # The control: an idle worker (forked from the master, not logged in) holds it.
    kids = subprocess.run(["pgrep", "-P", str(srv.proc.pid)], capture_output=True,
                          text=True).stdout.split()
    idle = [int(k) for k in kids if int(k) != pid]

    def holds_key(k):
        # A worker of an earlier session may be exiting (a zombie has no memory) or gone.
        try:
            return "little-endian" in memory_holds(k, needles)
        except OSError:
            return False
    ck.check(any(holds_key(k) for k in idle),
             "TLS key: the scan finds the key in an idle pre-login worker (the scan works)",
             "workers %s" % kids)
    ftp.quit()


def retr(ftp, name, rest=None):
    buf = io.BytesIO()
    ftp.retrbinary("RETR " + name, buf.write, rest=rest)
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--vsftpd", action="store_true")
    a = ap.parse_args()
    ftplab.which_or_skip("openssl")
    ck = ftplab.Checks("ftp_interop_python")
    with ftplab.TempDir("tierce-interop-python-") as tmp:
        root = os.path.join(tmp, "root")
        ftplab.make_tree(root, {"a.bin": 2 * 1024 * 1024 + 5, "d/x.txt": b"x-content\n",
                                "d/e/": None, "b.txt": b"bee\n"})
        os.utime(os.path.join(root, "b.txt"), (1600000000, 1600000000))  # 2020-09-13 12:26:40
        a_data = open(os.path.join(root, "a.bin"), "rb").read()
        cert, key = ftplab.make_cert(os.path.join(tmp, "cert"))
        if a.vsftpd:
            srv = ftplab.Vsftpd(root, local_user=ftplab.TEST_USER, anonymous=False,
                                tls=(cert, key))
        else:
            srv = ftplab.TierceFtpd(ftplab.find_binary(a.build, "tierce-ftpd"), root,
                                    users=(("dave", "pw-dave", None, True),), tls=(cert, key))
        with srv:
            ftplab.run_body(ck, srv, body, a, ck, srv, root, cert, a_data)
            if not a.vsftpd:
                ftplab.run_body(ck, srv, tls_key_body, ck, srv, cert, key)
        if not a.vsftpd:  # [tls] require = true: docs/ftp.md says 530 / 521
            srv = ftplab.TierceFtpd(ftplab.find_binary(a.build, "tierce-ftpd"), root,
                                    users=(("dave", "pw-dave", None, True),), tls=(cert, key),
                                    tls_require=True)
            with srv:
                ftplab.run_body(ck, srv, require_tls_body, ck, srv, cert, a_data)
            srv = ftplab.TierceFtpd(ftplab.find_binary(a.build, "tierce-ftpd"), root,
                                    users=(("dave", "pw-dave", None, True),), workers=2,
                                    # 16 sessions from 127.0.0.1: above the per-address default
                                    extra_toml="max_sessions_per_ip = 0")
            with srv:
                ftplab.run_body(ck, srv, parallel_body, ck, srv, a_data)
    return ck.exit_code()


def body(a, ck, srv, root, cert, a_data):
    ftp = ftplib.FTP()
    ftp.connect(srv.host, srv.port, timeout=20)
    ck.check(ftp.getwelcome().startswith("220"), "220 greeting")
    ck.equal(expect_error(ftp.login, srv.user, "bad-password"), "530",
             "bad password: 530")
    ftp.close()
    ftp = ftplib.FTP()
    ftp.connect(srv.host, srv.port, timeout=20)
    ck.check(ftp.login(srv.user, srv.password).startswith("230"), "login: 230")
    feat = ftp.sendcmd("FEAT")
    ck.check(feat.startswith("211"), "FEAT answers 211", feat)
    for f in ("EPSV", "SIZE", "MDTM", "REST STREAM") + (
            () if a.vsftpd else ("UTF8", "MLST", "AUTH TLS", "TPRT")):
        ck.check(f in feat, "FEAT lists %s" % f, feat)
    ck.equal(ftp.pwd(), "/", "PWD is /")
    ftp.cwd("d")
    ck.equal(ftp.pwd(), "/d", "CWD d -> /d")
    ftp.sendcmd("CDUP")
    ck.equal(ftp.pwd(), "/", "CDUP -> /")
    ck.equal(expect_error(ftp.cwd, "no-such-dir"), "550", "CWD to a missing dir: 550")
    ck.equal(expect_error(ftp.cwd, "b.txt"), "550", "CWD to a file: 550")

    ck.equal(sorted(ftp.nlst()), ["a.bin", "b.txt", "d"], "NLST /")
    ck.equal(sorted(os.path.basename(n) for n in ftp.nlst("d")), ["e", "x.txt"], "NLST d")
    ftp.voidcmd("TYPE I")
    ck.equal(ftp.size("a.bin"), len(a_data), "SIZE a.bin")
    ck.equal(expect_error(ftp.size, "missing.bin"), "550", "SIZE of a missing file: 550")
    mdtm = ftp.sendcmd("MDTM b.txt")
    ck.equal(mdtm, "213 20200913122640", "MDTM b.txt")

    if not a.vsftpd:
        facts = {n: f for n, f in ftp.mlsd("/", facts=["type", "size", "modify"])}
        ck.check(facts.get("a.bin", {}).get("type") == "file" and
                 facts["a.bin"].get("size") == str(len(a_data)), "MLSD: a.bin file+size",
                 facts)
        ck.check(facts.get("d", {}).get("type") == "dir", "MLSD: d is a dir", facts)
        ck.check(facts.get("b.txt", {}).get("modify", "").startswith("20200913122640"),
                 "MLSD: modify fact of b.txt", facts.get("b.txt"))
        ck.check(all(n not in facts or facts[n].get("type") in ("cdir", "pdir")
                     for n in (".", "..")), "MLSD: . and .. only as cdir/pdir", facts)
        mlst = ftp.sendcmd("MLST d/x.txt")
        ck.check(mlst.startswith("250") and "size=10;" in mlst.lower() and
                 "type=file;" in mlst.lower(), "MLST d/x.txt", mlst)

    ck.check(retr(ftp, "a.bin") == a_data, "RETR a.bin (binary) byte-identical")
    ck.check(retr(ftp, "a.bin", rest=1000000) == a_data[1000000:],
             "REST 1000000 + RETR returns the tail")
    ck.equal(expect_error(retr, ftp, "missing.bin"), "550", "RETR of a missing file: 550")

    up = os.urandom(777777)
    ftp.storbinary("STOR up.bin", io.BytesIO(up))
    ck.check(open(os.path.join(root, "up.bin"), "rb").read() == up, "STOR up.bin")
    ftp.storbinary("APPE up.bin", io.BytesIO(b"tail"))
    ck.check(open(os.path.join(root, "up.bin"), "rb").read() == up + b"tail", "APPE")
    ftp.storbinary("STOR up.bin", io.BytesIO(b"short"))
    ck.check(open(os.path.join(root, "up.bin"), "rb").read() == b"short",
             "STOR over an existing file truncates it")
    ftp.storlines("STOR lines.txt", io.BytesIO(b"l1\nl2\n"))
    ck.check(open(os.path.join(root, "lines.txt"), "rb").read() in (b"l1\nl2\n", b"l1\r\nl2\r\n"),
             "STOR in TYPE A: the lines arrive (CRLF translated or kept as sent)",
             open(os.path.join(root, "lines.txt"), "rb").read())
    ftp.voidcmd("TYPE I")

    ftp.rename("up.bin", "d/moved.bin")
    ck.check(not os.path.exists(os.path.join(root, "up.bin")) and
             os.path.exists(os.path.join(root, "d/moved.bin")), "RNFR/RNTO into a subdir")
    ck.equal(expect_error(ftp.rename, "nope.bin", "x.bin")[:1], "5", "RNFR of a missing file")
    ck.equal(expect_error(ftp.sendcmd, "RNTO x.bin"), "503", "RNTO without RNFR: 503")
    ck.check(ftp.mkd("newd").endswith("/newd") or "newd" in ftp.mkd("newd2"), "MKD")
    ck.check(os.path.isdir(os.path.join(root, "newd")), "MKD made the directory")
    ck.check(expect_error(ftp.mkd, "newd") == "550", "MKD of an existing dir: 550")
    ftp.rmd("newd")
    ck.check(not os.path.exists(os.path.join(root, "newd")), "RMD")
    ck.equal(expect_error(ftp.rmd, "d"), "550", "RMD of a non-empty dir: 550")
    ftp.delete("d/moved.bin")
    ck.check(not os.path.exists(os.path.join(root, "d/moved.bin")), "DELE")
    ck.equal(expect_error(ftp.delete, "d/moved.bin"), "550", "DELE of a missing file: 550")
    ck.equal(expect_error(ftp.delete, "d"), "550", "DELE of a directory: 550")
    ck.check(ftp.sendcmd("NOOP").startswith("200"), "NOOP")
    ck.check(ftp.sendcmd("SYST").startswith("215"), "SYST")
    ck.check(ftp.sendcmd("OPTS UTF8 ON").startswith("2"), "OPTS UTF8 ON")
    uname = "ünïcode-файл.txt"
    ftp.encoding = "utf-8"
    ftp.storbinary("STOR " + uname, io.BytesIO(b"u"))
    ck.check(os.path.exists(os.path.join(root, uname)) and uname in ftp.nlst(),
             "UTF-8 file name round trip")
    ftp.quit()

    # FTPS: AUTH TLS, PROT P.
    ctx = ssl.create_default_context(cafile=cert)
    tls = ReusingFTP_TLS(context=ctx, timeout=20)
    tls.connect(srv.host, srv.port)
    tls.login(srv.user, srv.password)  # FTP_TLS.login sends AUTH TLS first
    ck.check(isinstance(tls.sock, ssl.SSLSocket), "FTP_TLS: control channel is TLS")
    tls.prot_p()
    ck.check(retr(tls, "a.bin") == a_data, "FTP_TLS PROT P: RETR byte-identical")
    tls.storbinary("STOR tls.bin", io.BytesIO(up))
    ck.check(open(os.path.join(root, "tls.bin"), "rb").read() == up, "FTP_TLS: STOR")
    ck.check("tls.bin" in tls.nlst(), "FTP_TLS: NLST")
    if not a.vsftpd:
        ck.check("tls.bin" in [n for n, _ in tls.mlsd()], "FTP_TLS: MLSD")
    if not a.vsftpd:
        # The data connection must resume this control connection's session: a second client
        # whose data connection resumes the first client's session is refused, and the
        # first client's own transfers go on.
        other = ForeignSessionFTP_TLS(tls.sock.session, context=ctx, timeout=20)
        other.connect(srv.host, srv.port)
        other.login(srv.user, srv.password)
        other.prot_p()
        # The server answers 426 and drops the data connection; the client may see that first
        # as a TLS error on the data connection.
        got = expect_error(retr, other, "b.txt")
        ck.check(got is not None, "PROT P data resuming another control connection's TLS "
                 "session is refused", "the transfer succeeded")
        other.close()
        ck.check(retr(tls, "b.txt") == b"bee\n", "FTP_TLS PROT P: own session still resumes")
        # Refused either way: this worker's own ticket keys cannot decrypt the other worker's
        # ticket (no reuse), and a ticket of this worker from another session carries another
        # binding.
        ck.check("refused ([tls] require_reuse)" in srv.log_text(),
                 "FTPD0405 says why the data connection was refused")
    tls.prot_c()
    ck.check(retr(tls, "b.txt") == b"bee\n", "FTP_TLS PROT C (clear data): RETR")
    tls.quit()


def require_tls_body(ck, srv, cert, a_data):
    ftp = ftplib.FTP()
    ftp.connect(srv.host, srv.port, timeout=20)
    ck.equal(expect_error(ftp.login, srv.user, srv.password), "530",
             "require=true: USER before AUTH TLS -> 530")
    ftp.close()
    tls = ReusingFTP_TLS(context=ssl.create_default_context(cafile=cert), timeout=20)
    tls.connect(srv.host, srv.port)
    ck.check(tls.login(srv.user, srv.password).startswith("230"), "require=true: TLS login")
    tls.voidcmd("PBSZ 0")  # RFC 4217: PBSZ before PROT (ftplib's prot_c() does not send it)
    tls.prot_c()
    ck.equal(expect_error(retr, tls, "b.txt"), "521", "require=true: PROT C data -> 521")
    tls.prot_p()
    ck.check(retr(tls, "a.bin") == a_data, "require=true: PROT P RETR works")
    tls.quit()


def parallel_body(ck, srv, a_data):
    """16 sessions at once (more than the 2 pre-forked workers), each downloading a.bin."""
    import threading
    results = []

    def one(i):
        try:
            f = ftplib.FTP()
            f.connect(srv.host, srv.port, timeout=30)
            f.login(srv.user, srv.password)
            f.voidcmd("TYPE I")
            results.append(retr(f, "a.bin") == a_data)
            f.quit()
        except Exception as e:  # a failure to report, not to crash the thread
            results.append("session %d: %r" % (i, e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    ck.check(results == [True] * 16, "16 parallel sessions all download a.bin intact",
             [r for r in results if r is not True])


if __name__ == "__main__":
    sys.exit(main())
