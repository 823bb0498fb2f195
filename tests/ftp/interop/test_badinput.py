#!/usr/bin/env python3
"""ftp_interop_badinput — tierce-ftpd under hostile and broken clients, over raw sockets.

  * commands before login (530), unknown commands (500/502), binary garbage (NUL, 0xFF, telnet
    IAC), a 100 KB line without a newline, NUL inside a path;
  * path confinement: a secret file and a directory beside the user's root, symlinks inside the
    root pointing out (absolute, relative, a symlinked directory, /etc); `..` chains, absolute
    paths, backslashes and %2e in CWD/RETR/STOR/APPE/LIST/NLST/MLSD/MKD/RMD/DELE/RNFR/RNTO/SIZE/
    MDTM. The secret's bytes must never arrive, and nothing outside the root may change;
  * PORT/EPRT bounce (a foreign address: a listener on 127.0.0.2 must never be connected to),
    PORT to a port < 1024, malformed PORT/EPRT/REST/TYPE/MODE/STRU/TPRT arguments (501);
  * anonymous STOR/APPE/DELE/MKD/RMD/RNFR refused (550);
  * control connection reset mid-transfer, data connection closed mid-RETR (426), PASV without a
    data connection (data timeout: 425/426, the session goes on), ADTS HELLOs with a bad magic or
    cookie (refused, session goes on), idle and login timeouts (421), max_sessions (421);
  * after all of it, a fresh session still logs in and downloads, the server process still runs,
    and its log holds no crash or sanitizer report.

    test_badinput.py --build BUILD_DIR
"""
import argparse
import os
import re
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from tiercelab import ftplab  # noqa: E402

SECRET = b"TOPSECRET-8c1f2b-never-served"
MARKER = "only-outside-marker.txt"
SIBLING = "sibling-dir-7d3e"


def snapshot(top, skip):
    """{relative path: content or 'dir' or 'link->target'} of everything under top but `skip`."""
    out = {}
    for d, dirs, files in os.walk(top):
        if os.path.abspath(d) == os.path.abspath(skip):
            dirs[:] = []
            continue
        dirs[:] = [x for x in dirs if os.path.join(d, x) != skip]
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, top)
            if os.path.islink(p):
                out[rel] = "link->" + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                with open(p, "rb") as f:
                    out[rel] = f.read()
    return out


class Session(ftplab.FtpControl):
    """A control connection that records every byte it received, to look for the secret."""
    seen = []

    def reply(self):
        code, text = super().reply()
        Session.seen.append(text.encode(errors="replace"))
        return code, text

    def transfer(self, line, send=None, timeout=10.0):
        """EPSV, connect, `line`; returns (first code, final code, data bytes). With send=bytes
        the bytes are written (STOR/APPE), else the data connection is read to EOF."""
        try:
            port = self.epsv()
        except RuntimeError as e:
            return -1, -1, str(e).encode()
        data = b""
        with socket.create_connection((self.sock.getpeername()[0], port), timeout=timeout) as d:
            d.settimeout(timeout)
            code, text = self.cmd(line)
            if code in (125, 150):
                try:
                    if send is not None:
                        d.sendall(send)
                        d.shutdown(socket.SHUT_WR)
                    else:
                        data = ftplab.recv_all(d)
                except OSError:
                    pass
                d.close()
                final, _ = self.reply()
            else:
                final = code
        Session.seen.append(data)
        return code, final, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    ck = ftplab.Checks("ftp_interop_badinput")
    ftpd = ftplab.find_binary(a.build, "tierce-ftpd")
    with ftplab.TempDir("tierce-interop-bad-") as tmp:
        root = os.path.join(tmp, "root")
        anon = os.path.join(tmp, "anon")
        ftplab.make_tree(tmp, {"secret.txt": SECRET, "outside/" + MARKER: SECRET,
                               SIBLING + "/x.txt": b"x"})
        ftplab.make_tree(root, {"pub.txt": b"public\n", "big.bin": 24 * 1024 * 1024,
                                "sub/inner.txt": b"inner\n", "victim.txt": b"victim\n"})
        ftplab.make_tree(anon, {"anon.txt": b"anon\n", "adir/f.txt": b"f\n"})
        os.symlink(os.path.join(tmp, "secret.txt"), os.path.join(root, "abs_link"))
        os.symlink("../secret.txt", os.path.join(root, "rel_link"))
        os.symlink("../../secret.txt", os.path.join(root, "sub", "rel_link2"))
        os.symlink("../outside", os.path.join(root, "dirlink"))
        os.symlink(os.path.join(tmp, "outside"), os.path.join(root, "absdirlink"))
        os.symlink("/etc", os.path.join(root, "etc_link"))
        os.symlink("../root", os.path.join(anon, "to_user_root"))
        before = snapshot(tmp, root)
        Session.seen = []
        srv = ftplab.TierceFtpd(ftpd, root, users=(("alice", "alice-pw", None, True),
                                                   ("reader", "reader-pw", None, False)),
                                anonymous_root=anon, data_timeout_s=3, idle_timeout_s=120,
                                workers=2,
                                # as root: anonymous apart from the writable alice (nobody)
                                anonymous_run_as="daemon")
        with srv:
            ftplab.run_body(ck, srv, body, ck, srv, tmp, root, anon, before)
        # Timeouts and the session limit, on a server of their own (short timeouts).
        srv2 = ftplab.TierceFtpd(ftpd, root, users=(("alice", "alice-pw", None, True),),
                                 idle_timeout_s=2, login_timeout_s=2, workers=1)
        with srv2:
            ftplab.run_body(ck, srv2, timeouts_body, ck, srv2)
        srv3 = ftplab.TierceFtpd(ftpd, root, users=(("alice", "alice-pw", None, True),),
                                 max_sessions=2, workers=1)
        with srv3:
            ftplab.run_body(ck, srv3, max_sessions_body, ck, srv3)
    return ck.exit_code()


def body(ck, srv, tmp, root, anon, before):
    H, P = srv.host, srv.port

    # --- before login -------------------------------------------------------------------------
    with Session(H, P) as s:
        ck.check(s.greeting[0] == 220, "greeting 220", s.greeting)
        for c in ("PWD", "CWD /", "LIST", "NLST", "MLSD", "RETR pub.txt", "STOR x.txt",
                  "APPE x.txt", "MKD x", "RMD sub", "DELE victim.txt", "RNFR victim.txt",
                  "SIZE pub.txt", "MDTM pub.txt", "PASV", "EPSV", "PORT 127,0,0,1,200,1",
                  "TPRT TCP", "REST 10", "CDUP", "STAT /"):
            code, text = s.cmd(c)
            ck.check(code == 530, "before login: %s -> 530" % c, text)
        code, text = s.cmd("PASS nouser")
        ck.check(code == 503, "PASS before USER -> 503", text)
        ck.check(s.cmd("NOOP")[0] == 200, "NOOP before login -> 200")
        code, text = s.login("alice", "wrong")
        ck.check(code == 530, "wrong password -> 530", text)
        code, text = s.login("nosuchuser", "x")
        ck.check(code == 530, "unknown user -> 530", text)
    ck.check(os.path.exists(os.path.join(root, "victim.txt")), "nothing deleted before login")

    # --- unknown commands and garbage ---------------------------------------------------------
    with Session(H, P) as s:
        ck.check(s.login("alice", "alice-pw")[0] == 230, "alice logs in")
        for c in (b"FOO", b"XYZZY arg", b"SITE EXEC /bin/sh -c id", b"QWERTYUIOPASDF",
                  b"\x00\x01\x02", b"\xff\xfe\xfd garbage", b"RE\x00TR pub.txt", b"\x80\x81\x82"):
            code, text = s.cmd(c)
            ck.check(code in (500, 501, 502, 504), "unknown/garbage %r -> 500/502" % c[:20], text)
        ck.check(s.cmd(b"noop")[0] == 200, "lower-case noop -> 200")
        s.send(b"\xff\xf4\xff\xf2NOOP\r\n")  # telnet IP + DM before a command
        code, text = s.reply()
        ck.check(code in (200, 500, 502), "telnet IAC IP/DM + NOOP answered", text)
        code, text = s.cmd("NOOP")
        ck.check(code == 200, "session still answers after garbage", text)
        code, _, data = s.transfer(b"RETR pub.txt\x00../../secret.txt")
        ck.check(SECRET not in data and code not in (125, 150) or data == b"public\n",
                 "NUL inside a RETR path does not reach outside", (code, data[:40]))
        code, text = s.cmd(b"CWD \x00")
        ck.check(code // 100 == 5, "CWD NUL -> 5xx", text)
        code, text = s.cmd("RETR " + "a/" * 3000 + "x")
        ck.check(code // 100 == 5, "6 KB path -> 5xx", text[:100])
        ck.check(s.cmd("NOOP")[0] == 200, "session alive after long path")

    # --- an overlong line: 500 then the session goes on, or the connection is closed -------------
    with Session(H, P) as s:
        ck.check(s.login("alice", "alice-pw")[0] == 230, "alice logs in (overlong)")
        try:
            s.send(b"A" * 100000)
            s.send(b"\r\nNOOP\r\n")
            sent = True
        except OSError:
            sent = False  # closed while we were sending: acceptable
        codes = []
        if sent:
            for _ in range(3):
                code, text = s.reply()
                codes.append(code)
                if code in (0, 200):
                    break
        ok = (not sent or codes == [0] or codes[:1] in ([500], [421]) and codes[-1] in (0, 200)
              and 200 not in codes[:-1])
        ck.check(ok, "100 KB line: 500 and NOOP 200, or the connection closed", codes)

    # --- path confinement ---------------------------------------------------------------------
    secret_abs = os.path.join(tmp, "secret.txt")
    escapes = ["../secret.txt", "../../secret.txt", "/../secret.txt", "/../../../secret.txt",
               secret_abs, "//" + secret_abs, "abs_link", "rel_link", "sub/rel_link2",
               "dirlink/" + MARKER, "absdirlink/" + MARKER, "etc_link/passwd", "/etc/passwd",
               "sub/../../secret.txt", "./../secret.txt", "..\\secret.txt", "%2e%2e/secret.txt",
               "sub/../../" + os.path.basename(tmp) + "/secret.txt", "../outside/" + MARKER,
               "~/../secret.txt", "dirlink/../secret.txt"]
    with Session(H, P) as s:
        ck.check(s.login("alice", "alice-pw")[0] == 230, "alice logs in (confinement)")
        s.cmd("TYPE I")
        for p in escapes:
            first, final, data = s.transfer("RETR " + p)
            ck.check(SECRET not in data and b"root:" not in data and first // 100 == 5,
                     "RETR %s refused" % p, (first, final, data[:60]))
            code, text = s.cmd("SIZE " + p)
            ck.check(code // 100 == 5, "SIZE %s refused" % p, text)
            code, text = s.cmd("MDTM " + p)
            ck.check(code // 100 == 5, "MDTM %s refused" % p, text)
        for d in ("..", "../..", "/..", "/../..", tmp, "dirlink", "absdirlink", "etc_link",
                  "/etc", "sub/../..", "..\\..", "../outside"):
            code, text = s.cmd("CWD " + d)
            pwd = s.cmd("PWD")[1]
            ck.check(code // 100 == 5 or '"/"' in pwd,
                     "CWD %s refused or stays at /" % d, (code, text, pwd))
            s.cmd("CWD /")
            for verb in ("LIST", "NLST", "MLSD"):
                first, final, data = s.transfer("%s %s" % (verb, d))
                # (not "secret.txt": LIST shows the targets of the links in the root)
                leaked = MARKER.encode() in data or SIBLING.encode() in data or \
                    b"passwd" in data
                ck.check(not leaked, "%s %s shows nothing outside the root" % (verb, d),
                         (first, final, data[:200]))
        # CWD .. from a subdirectory then .. again: must stop at /
        s.cmd("CWD /sub")
        s.cmd("CDUP")
        s.cmd("CDUP")
        s.cmd("CWD ..")
        ck.check('"/"' in s.cmd("PWD")[1], "CDUP/CWD .. chains stop at /")
        first, final, data = s.transfer("LIST")
        ck.check(SIBLING.encode() not in data and b"pub.txt" in data,
                 "LIST after CDUP chains shows the root", data[:200])
        s.cmd("CWD /")

        # Writes: `..` at the root may be refused or clamp to the root (chroot semantics, like
        # openat2 RESOLVE_IN_ROOT: "../x" is "/x", a link to "../secret.txt" is "/secret.txt");
        # either way nothing outside the root may change — checked after every command.
        def confined(what, code, text):
            now = snapshot(tmp, root)
            diff = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
            ck.check(code // 100 in (2, 3, 5) and not diff,
                     "%s: refused or confined to the root (%s)" % (what, code), (text, diff))

        payload = b"ESCAPED-WRITE\n"
        for p in ("../escape1.txt", "/../escape2.txt", "dirlink/escape3.txt",
                  "absdirlink/escape4.txt", "../outside/escape5.txt", secret_abs,
                  "abs_link", "rel_link", "sub/rel_link2", "..\\escape6.txt",
                  "dirlink/../escape7.txt", "etc_link/tierce-escape"):
            for verb in ("STOR", "APPE"):
                first, final, _ = s.transfer("%s %s" % (verb, p), send=payload)
                confined("%s %s" % (verb, p), first if first // 100 == 5 else final, "")
        for p in ("../newdir", "/../newdir2", "dirlink/newdir3", "absdirlink/newdir4", tmp + "/x",
                  "etc_link/tierce-newdir"):
            confined("MKD " + p, *s.cmd("MKD " + p))
        for p in ("dirlink/" + MARKER, "absdirlink/" + MARKER, secret_abs,
                  "../" + SIBLING + "/x.txt", "etc_link/hostname", "../secret.txt"):
            confined("DELE " + p, *s.cmd("DELE " + p))
        for p in ("..", "../" + SIBLING, "dirlink/..", "/..", "absdirlink/.."):
            confined("RMD " + p, *s.cmd("RMD " + p))
        for p in ("dirlink/" + MARKER, "absdirlink/" + MARKER, "etc_link/hostname",
                  "../" + SIBLING):
            code, text = s.cmd("RNFR " + p)
            if code == 350:
                code, text = s.cmd("RNTO stolen")
            confined("RNFR %s + RNTO stolen" % p, code, text)
            ck.check(not os.path.exists(os.path.join(root, "stolen")),
                     "RNFR %s did not move an outside file in" % p)
        for p in ("../moved.txt", "dirlink/moved.txt", "/../moved2.txt", tmp + "/moved.txt",
                  "absdirlink/moved.txt", "etc_link/moved.txt"):
            code, text = s.cmd("RNFR victim.txt")
            ck.check(code == 350, "RNFR victim.txt -> 350", text)
            confined("RNTO " + p, *s.cmd("RNTO " + p))
            for back in ("moved.txt", "moved2.txt"):  # clamped into the root: put it back
                if os.path.exists(os.path.join(root, back)):
                    os.rename(os.path.join(root, back), os.path.join(root, "victim.txt"))
        ck.check(os.path.exists(os.path.join(root, "victim.txt")), "victim.txt still in place")
        ck.check(not os.path.exists(os.path.join(root, "stolen.txt")), "nothing stolen into root")
        # A symlink inside the root that points inside the root is fine to follow (sanity: the
        # checks above are about escaping, not about refusing every link).
        os.symlink("pub.txt", os.path.join(root, "inner_link"))
        first, final, data = s.transfer("RETR inner_link")
        ck.check(data == b"public\n" or first // 100 == 5, "RETR of an inside link: content or "
                 "refusal, never anything else", (first, data[:40]))

    after = snapshot(tmp, root)
    changed = sorted(set(before) ^ set(after) | {k for k in before if before.get(k) != after.get(k)})
    ck.check(not changed, "nothing outside the root was created, changed or removed", changed)
    with open(os.path.join(tmp, "secret.txt"), "rb") as f:
        ck.check(f.read() == SECRET, "the secret file is unchanged")
    ck.check(not any(SECRET in b for b in Session.seen),
             "the secret's bytes never arrived in a reply or on a data connection")

    # --- PORT / EPRT ----------------------------------------------------------------------------
    with Session(H, P) as s:
        ck.check(s.login("alice", "alice-pw")[0] == 230, "alice logs in (PORT)")
        # Positive control: PORT to our own listener on 127.0.0.1 works.
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        lst.settimeout(10)
        lp = lst.getsockname()[1]
        code, text = s.cmd("PORT 127,0,0,1,%d,%d" % (lp >> 8, lp & 255))
        ck.check(code == 200, "PORT to the control peer's address -> 200", text)
        code, text = s.cmd("RETR pub.txt")
        got = b""
        if code in (125, 150):
            try:
                c, _ = lst.accept()
                c.settimeout(10)
                got = ftplab.recv_all(c)
                c.close()
            except OSError:
                pass
            s.reply()
        ck.check(got == b"public\n", "active RETR to 127.0.0.1 delivers the file", (code, got))
        lst.close()

        bounce = socket.socket()
        try:
            bounce.bind(("127.0.0.2", 0))
            bounce.listen(4)
            bp = bounce.getsockname()[1]
        except OSError:
            bounce.close()
            bounce, bp = None, 4000
        for c in ("PORT 127,0,0,2,%d,%d" % (bp >> 8, bp & 255), "EPRT |1|127.0.0.2|%d|" % bp,
                  "PORT 10,1,2,3,15,160", "EPRT |1|10.1.2.3|4000|"):
            code, text = s.cmd(c)
            ck.check(code // 100 == 5, "bounce %s refused (5xx)" % c, text)
            code, text = s.cmd("RETR pub.txt")
            if code in (125, 150):
                s.reply()
            ck.check(code not in (125, 150), "RETR after a refused %s does not start" % c, text)
        if bounce is not None:
            bounce.settimeout(3)
            try:
                c, peer = bounce.accept()
                c.close()
                connected = True
            except OSError:
                connected = False
            ck.check(not connected, "the server never connected to the foreign 127.0.0.2")
            bounce.close()
        for c in ("PORT 127,0,0,1,0,21", "PORT 127,0,0,1,0,25", "EPRT |1|127.0.0.1|22|",
                  "PORT 127,0,0,1,3,255"):
            code, text = s.cmd(c)
            ck.check(code // 100 == 5, "%s (port < 1024) refused" % c, text)
        for c in ("PORT", "PORT 1,2,3", "PORT 256,0,0,1,1,1", "PORT a,b,c,d,e,f",
                  "PORT 127,0,0,1,300,1", "PORT 127,0,0,1,4,-1", "PORT 127,0,0,1,4,1,9",
                  "EPRT", "EPRT garbage", "EPRT |1|notanip|5000|", "EPRT |1|127.0.0.1|99999|",
                  "EPRT |1|127.0.0.1|abc|", "EPRT ||||", "EPRT |1|127.0.0.1|5000",
                  "REST abc", "REST -5", "REST", "REST 99999999999999999999999999",
                  "TYPE", "TYPE Z", "TYPE I I I", "MODE Z", "STRU Z", "TPRT", "TPRT BOGUS",
                  "TPRT PTCP 0", "TPRT PTCP 17", "TPRT PTCP x", "TPRT PTCP -1"):
            code, text = s.cmd(c)
            ok = code in (501, 504) if c.startswith(("TYPE Z", "TYPE I", "MODE", "STRU",
                                                      "TPRT BOGUS")) \
                else code == 501
            ck.check(ok, "%s -> 501" % c, text)
        code, text = s.cmd("EPRT |9|127.0.0.1|5000|")
        ck.check(code == 522, "EPRT with an unknown protocol -> 522", text)
        ck.check(s.cmd("NOOP")[0] == 200, "session alive after the malformed arguments")

    # --- ADTS: bad HELLOs, active mode, malformed blocks ----------------------------------------
    with Session(H, P) as s:
        ck.check(s.login("alice", "alice-pw")[0] == 230, "alice logs in (ADTS)")
        code, text = s.cmd("TPRT TCP")
        ck.check(code == 200 and "cookie=" in text, "TPRT TCP -> 200 with a cookie", text)
        cookie = adts_cookie(text)
        try:
            port = s.epsv()
        except RuntimeError as e:
            port = None
            ck.check(False, "EPSV after TPRT", str(e))
        if port:
            for name, hello in (
                    ("bad magic", hello_frame(cookie, magic=0xDEADBEEF)),
                    ("bad cookie", hello_frame(cookie ^ 0x5A5A)),
                    ("bad version", hello_frame(cookie, version=99)),
                    ("bad index", hello_frame(cookie, index=3)),
                    ("bad stream count", hello_frame(cookie, streams=2)),
                    ("short hello", b"TADS"),
                    ("garbage", b"\xff" * 64)):
                ack = exchange_hello(H, port, hello, half_close=(name == "short hello"))
                refused = len(ack) < 8 or struct.unpack("<II", ack)[1] != 0
                ck.check(refused, "ADTS HELLO with %s refused" % name, ack)
            # positive control: the right HELLO is accepted after all the wrong ones
            d = socket.create_connection((H, port), timeout=10)
            d.settimeout(10)
            d.sendall(hello_frame(cookie))
            ack = ftplab.recv_all(d, 8)
            ck.check(len(ack) == 8 and struct.unpack("<II", ack) == (0x41444154, 0),
                     "the right HELLO after the bad ones -> TADA status 0", ack)
            code, text = s.cmd("PORT 127,0,0,1,200,1")
            ck.check(code == 501, "PORT during an ADTS session -> 501", text)
            code, text = s.cmd("RETR pub.txt")
            hdr = ftplab.recv_all(d, 32) if code in (125, 150) else b""
            ck.check(len(hdr) == 32 and struct.unpack("<IB3xQQQ", hdr)[1] == 1,
                     "RETR over the ADTS session starts with a BEGIN block", (code, hdr))
            d.close()
            s.sock.settimeout(30)
            s.reply()
        ck.check(s.cmd("NOOP")[0] == 200, "control session alive after bad HELLOs")
        ck.check(s.cmd("TPRT STREAM")[0] == 200, "TPRT STREAM -> 200")
        first, final, data = s.transfer("RETR pub.txt")
        ck.check(data == b"public\n" and final == 226, "plain RETR after TPRT STREAM",
                 (first, final, data))

    # docs/ftp.md: the data session ends with TPRT STREAM, EPSV/PASV, QUIT, a broken stream or
    # the data timeout -- not with a NOOP sent before the streams connect.
    with Session(H, P) as s:
        s.login("alice", "alice-pw")
        cookie = adts_cookie(s.cmd("TPRT TCP")[1])
        port = s.epsv()
        ck.check(s.cmd("NOOP")[0] == 200, "NOOP between EPSV and the stream connects -> 200")
        ack = exchange_hello(H, port, hello_frame(cookie))
        ck.check(len(ack) == 8 and struct.unpack("<II", ack)[1] == 0,
                 "a NOOP between EPSV and the stream connects leaves the ADTS listener open",
                 ack)

    def blk(t, tid, off, ln):
        return struct.pack("<IB3xQQQ", 0x4B4C4254, t, tid, off, ln)

    cases = [  # name, blocks sent after STOR's 150, expected final reply, max file size
        ("good", blk(1, 1, 0, 100) + blk(2, 1, 0, 100) + b"A" * 100 + blk(3, 1, 0, 0), 226),
        ("beyond", blk(1, 1, 0, 100) + blk(2, 1, 90, 50) + b"B" * 50 + blk(3, 1, 0, 0), 426),
        ("huge length", blk(1, 1, 0, 100) + blk(2, 1, 0, 1 << 62) + b"C" * 100, 426),
        ("wrapping offset", blk(1, 1, 0, 100) + blk(2, 1, (1 << 64) - 10, 20) + b"W" * 20, 426),
        ("overlap", blk(1, 1, 0, 100) + blk(2, 1, 0, 60) + b"D" * 60 + blk(2, 1, 50, 50) +
         b"E" * 50 + blk(3, 1, 0, 0), 426),
        ("DATA before BEGIN", blk(2, 1, 0, 10) + b"F" * 10, 426),
        ("unknown type", blk(1, 1, 0, 100) + blk(9, 1, 0, 0), 426),
        ("bad magic", blk(1, 1, 0, 100) + b"XXXX" + blk(2, 1, 0, 100)[4:], 426),
        ("END before all bytes", blk(1, 1, 0, 100) + blk(2, 1, 0, 40) + b"G" * 40 +
         blk(3, 1, 0, 0), 426),
        ("ABORT", blk(1, 1, 0, 100) + blk(2, 1, 0, 50) + b"I" * 50 + blk(4, 1, 0, 0), 426),
    ]
    for name, blocks, want in cases:
        fname = "adts-%s.bin" % name.replace(" ", "-")
        with Session(H, P) as s:
            s.login("alice", "alice-pw")
            s.cmd("TYPE I")
            code, text = s.cmd("TPRT TCP")
            cookie = adts_cookie(text)
            port = s.epsv()
            d = socket.create_connection((H, port), timeout=10)
            d.settimeout(10)
            d.sendall(hello_frame(cookie))
            ack = ftplab.recv_all(d, 8)
            code, text = s.cmd("STOR " + fname)
            try:
                d.sendall(blocks)
            except OSError:
                pass
            s.sock.settimeout(30)
            final, ftext = s.reply() if code in (125, 150) else (code, text)
            ck.check(final == want, "ADTS STOR, %s -> %d" % (name, want), (code, ftext))
            code, text = s.cmd("NOOP")
            ck.check(code == 200, "ADTS STOR, %s: the next command gets its own reply" % name,
                     text)
            d.close()
        path = os.path.join(root, fname)
        size = os.path.getsize(path) if os.path.exists(path) else 0
        ck.check(size <= 100, "ADTS STOR, %s: nothing written beyond the announced total" % name,
                 size)
        if name == "ABORT":
            # docs/ftp.md: on ABORT the receiver keeps the contiguous prefix it wrote (so REST can
            # resume) -- exactly a prefix of what was sent (50 x "I"), never garbage or holes.
            kept = open(path, "rb").read() if os.path.exists(path) else b""
            ck.check(len(kept) <= 50 and kept == b"I" * len(kept),
                     "ADTS ABORT: the receiver keeps exactly a prefix of what was sent "
                     "(docs/ftp.md)", (size, kept[:60]))
        if name == "good":
            ck.check(open(path, "rb").read() == b"A" * 100, "ADTS STOR good: content")

    # --- anonymous: read-only --------------------------------------------------------------------
    anon_before = snapshot(anon, os.path.join(anon, "nonexistent"))
    with Session(H, P) as s:
        code, text = s.login("anonymous", "guest@example.org")
        ck.check(code == 230, "anonymous login -> 230", text)
        first, final, data = s.transfer("RETR anon.txt")
        ck.check(data == b"anon\n", "anonymous RETR anon.txt", (first, final, data))
        for c in ("STOR new.txt", "APPE anon.txt", "STOR adir/new.txt"):
            first, final, _ = s.transfer(c, send=b"x")
            ck.check(first == 550, "anonymous %s -> 550" % c, first)
        for c in ("DELE anon.txt", "MKD newdir", "RMD adir", "RNFR anon.txt", "SITE CHMOD 777 anon.txt"):
            code, text = s.cmd(c)
            ck.check(code == 550 if not c.startswith("SITE") else code // 100 == 5,
                     "anonymous %s -> 550" % c, text)
        first, final, data = s.transfer("RETR to_user_root/pub.txt")
        ck.check(first // 100 == 5 and b"public" not in data,
                 "anonymous cannot follow a link into alice's root", (first, data[:40]))
        first, final, data = s.transfer("RETR ../root/pub.txt")
        ck.check(first // 100 == 5, "anonymous RETR ../root/pub.txt refused", first)
    ck.check(snapshot(anon, os.path.join(anon, "nonexistent")) == anon_before,
             "the anonymous root is unchanged")
    with Session(H, P) as s:
        code, text = s.login("reader", "reader-pw")
        ck.check(code == 230, "read-only user logs in", text)
        first, final, _ = s.transfer("STOR r.txt", send=b"x")
        ck.check(first == 550 and not os.path.exists(os.path.join(root, "r.txt")),
                 "write=false user: STOR -> 550", first)
        code, text = s.cmd("DELE pub.txt")
        ck.check(code == 550 and os.path.exists(os.path.join(root, "pub.txt")),
                 "write=false user: DELE -> 550", text)

    # --- broken connections mid-transfer -------------------------------------------------------
    with Session(H, P) as s:
        s.login("alice", "alice-pw")
        s.cmd("TYPE I")
        port = s.epsv()
        d = socket.create_connection((H, port), timeout=10)
        d.settimeout(10)
        code, text = s.cmd("RETR big.bin")
        ck.check(code in (125, 150), "RETR big.bin starts", text)
        ftplab.recv_all(d, 256 * 1024)
        # reset the control connection while the data flows
        s.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        time.sleep(0.2)
        d.close()
    with Session(H, P) as s:
        s.login("alice", "alice-pw")
        s.cmd("TYPE I")
        port = s.epsv()
        d = socket.create_connection((H, port), timeout=10)
        d.settimeout(10)
        code, text = s.cmd("RETR big.bin")
        ftplab.recv_all(d, 256 * 1024)
        d.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        d.close()
        code, text = s.reply()
        ck.check(code in (426, 451), "data connection reset mid-RETR -> 426", text)
        ck.check(s.cmd("NOOP")[0] == 200, "session goes on after the 426")
        # PASV, then never connect: the data timeout (3 s) ends the RETR with 425/426.
        s.pasv()
        code, text = s.cmd("RETR pub.txt")
        if code in (125, 150):
            s.sock.settimeout(30)
            code, text = s.reply()
        ck.check(code in (425, 426), "PASV without a data connection -> 425/426", text)
        ck.check(s.cmd("NOOP")[0] == 200, "session goes on after the data timeout")
        first, final, data = s.transfer("RETR pub.txt")
        ck.check(data == b"public\n", "next RETR works after the data timeout", (first, final))
    # STOR whose client disappears mid-upload: the server must not hang or crash
    with Session(H, P) as s:
        s.login("alice", "alice-pw")
        s.cmd("TYPE I")
        port = s.epsv()
        d = socket.create_connection((H, port), timeout=10)
        code, text = s.cmd("STOR half.bin")
        ck.check(code in (125, 150), "STOR half.bin starts", text)
        d.sendall(b"z" * 300000)
        d.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        d.close()
        s.close()

    # --- afterwards: a fresh session works ------------------------------------------------------
    with Session(H, P) as s:
        ck.check(s.greeting[0] == 220, "fresh session greeted after all the abuse", s.greeting)
        ck.check(s.login("alice", "alice-pw")[0] == 230, "fresh session logs in")
        s.cmd("TYPE I")
        first, final, data = s.transfer("RETR big.bin")
        ck.check(final == 226 and len(data) == os.path.getsize(os.path.join(root, "big.bin")),
                 "fresh session downloads big.bin completely", (first, final, len(data)))
        ck.check(s.cmd("QUIT")[0] == 221, "QUIT -> 221")


def adts_cookie(text):
    m = re.search(r"cookie=([0-9a-fA-F]+)", text)
    return int(m.group(1), 16) if m else 0


def hello_frame(cookie, magic=0x53444154, version=1, index=0, streams=1):
    """HELLO: 24 bytes; the fields of docs/ftp.md take 20, then 4 zero bytes (wire.cc)."""
    return struct.pack("<IHHHHQ4x", magic, version, index, streams, 0, cookie)


def exchange_hello(host, port, hello, half_close=False):
    try:
        with socket.create_connection((host, port), timeout=10) as d:
            d.settimeout(10)
            d.sendall(hello)
            if half_close:
                d.shutdown(socket.SHUT_WR)
            return ftplab.recv_all(d, 8)
    except OSError:
        return b""


def timeouts_body(ck, srv):
    H, P = srv.host, srv.port
    # idle timeout after login, login timeout before it
    with Session(H, P) as s:
        ck.check(s.login("alice", "alice-pw")[0] == 230, "login (idle test)")
        s.sock.settimeout(30)
        code, text = s.reply()
        ck.check(code == 421, "idle logged-in session -> 421", text)
        ck.check(s.reply()[0] == 0, "connection closed after the idle 421")
    with Session(H, P) as s:
        s.sock.settimeout(30)
        code, text = s.reply()
        ck.check(code == 421, "no login within login_timeout_s -> 421", text)


def max_sessions_body(ck, srv):
    H, P = srv.host, srv.port
    # max_sessions = 2: the third gets 421; after one leaves a new one is served
    a = Session(H, P, timeout=20)
    b = Session(H, P, timeout=20)
    try:
        ck.check(a.greeting[0] == 220 and b.greeting[0] == 220, "two sessions greeted")
        ck.check(a.cmd("NOOP")[0] == 200 and b.cmd("NOOP")[0] == 200, "two sessions answer")
        with Session(H, P, timeout=20) as c:
            ck.check(c.greeting[0] == 421, "third session (max_sessions=2) -> 421", c.greeting)
            ck.check(c.reply()[0] == 0, "third session closed after the 421")
        a.cmd("QUIT")
        a.close()
        greeting = None
        for _ in range(50):  # the server notices the end of `a` soon, but not at once
            with Session(H, P, timeout=20) as c:
                greeting = c.greeting
                if greeting[0] == 220:
                    break
            time.sleep(0.2)
        ck.check(greeting and greeting[0] == 220, "a session slot is free again after a QUIT",
                 greeting)
    finally:
        a.close()
        b.close()


if __name__ == "__main__":
    sys.exit(main())
