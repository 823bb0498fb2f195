#!/usr/bin/env python3
"""ftp_interop_resume — interrupted transfers resume to byte-identical files.

A 64 MiB random file. Every transfer goes through tierce-wanem (--rate paces it, so the client
can be SIGKILLed mid-way whatever the machine's speed): the relay listens on 127.0.0.2 on the same
port numbers as tierce-ftpd's control port and pasv_ports range on 127.0.0.1.

  get: curl killed mid-RETR, resumed by curl -C - (REST); tierce-ftp killed mid-get, resumed by
       tierce-ftp -c (REST), also with --adts ptcp:4; a raw REST + RETR of the tail;
  put: curl killed mid-STOR, resumed by curl -C - -T (SIZE + APPE); tierce-ftp killed mid-put,
       resumed by tierce-ftp -c; a raw REST + STOR and a raw APPE of the tail.
Each resumed file is compared by sha256, and each client's protocol dialogue must show the
resume (REST n / APPE), so a client or server that silently starts over fails.

    test_resume.py --build BUILD_DIR
"""
import argparse
import os
import signal
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from tiercelab import ftplab  # noqa: E402

SIZE = 64 * 1024 * 1024 + 4321
RATE = 12 * 1024 * 1024      # bytes/s per direction through the relay
KILL_AT = 10 * 1024 * 1024   # kill the client once this much has moved
NPASV = 8
RELAY_HOST = "127.0.0.2"


def interrupted(argv, progress, ck, what):
    """Start argv, SIGKILL its process group once progress() >= KILL_AT; returns the size
    reached. A client that finished or died before is a failed check."""
    p = ftplab.spawn(argv)
    try:
        reached = ftplab.wait_for(lambda: p.poll() is not None or progress() >= KILL_AT, 120)
        done = p.poll() is not None
        ck.check(not done and reached, "%s still running at %d MiB (then killed)" %
                 (what, KILL_AT >> 20), "exit=%s progress=%d" % (p.poll(), progress()))
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # a crash, not a polite stop
        except ProcessLookupError:
            pass
        p.wait(timeout=30)
    return progress()


def size_of(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    ftplab.which_or_skip("curl")
    ck = ftplab.Checks("ftp_interop_resume")
    ftpd = ftplab.find_binary(a.build, "tierce-ftpd")
    ftp = ftplab.find_binary(a.build, "tierce-ftp")
    wanem = ftplab.find_binary(a.build, "tierce-wanem")
    try:
        socket.socket().bind((RELAY_HOST, 0))
    except OSError:
        print("SKIP: %s is not a local address here" % RELAY_HOST)
        return ftplab.SKIP
    with ftplab.TempDir("tierce-interop-resume-") as tmp:
        root = os.path.join(tmp, "root")
        local = os.path.join(tmp, "local")
        os.makedirs(local)
        ftplab.make_tree(root, {"big.bin": SIZE})
        ftplab.make_tree(local, {"src.bin": SIZE}, seed=99)
        base = ftplab.free_port_block(NPASV)
        srv = ftplab.TierceFtpd(ftpd, root, users=(("rita", "rita-pw", None, True),),
                                pasv_ports="%d-%d" % (base, base + NPASV - 1),
                                pasv_address=RELAY_HOST, data_timeout_s=10)
        with srv:
            fw = ["%s:%d=127.0.0.1:%d" % (RELAY_HOST, srv.port, srv.port),
                  "%s:%d-%d=127.0.0.1:%d-%d" % (RELAY_HOST, base, base + NPASV - 1, base,
                                                base + NPASV - 1)]
            with ftplab.Relay(wanem, fw, delay_us=0, rate=RATE):
                ftplab.run_body(ck, srv, body, ck, srv, root, local, ftp)
    return ck.exit_code()


def body(ck, srv, root, local, ftp):
    url = "ftp://rita:rita-pw@%s:%d" % (RELAY_HOST, srv.port)
    big = os.path.join(root, "big.bin")
    big_sha = ftplab.sha256(big)
    src = os.path.join(local, "src.bin")
    src_sha = ftplab.sha256(src)
    curl = ["curl", "-sS", "--connect-timeout", "10", "--max-time", "300"]
    tftp = [ftp, "--timeout", "30", "-q"]

    # --- get: curl killed, curl -C - ------------------------------------------------------------
    part = os.path.join(local, "curl.part")
    got = interrupted(curl + ["-o", part, url + "/big.bin"], lambda: size_of(part), ck,
                      "curl RETR")
    ck.check(0 < got < SIZE, "curl left a partial download", got)
    got = size_of(part)
    r = ftplab.run(curl + ["-v", "-C", "-", "-o", part, url + "/big.bin"], timeout=300)
    err = r.stderr.decode(errors="replace")
    ck.check(r.returncode == 0 and "REST %d" % got in err, "curl -C - sends REST %d" % got,
             "rc=%d %s" % (r.returncode, err[-800:]))
    ck.equal(ftplab.file_sha(part), big_sha, "curl -C - resumed RETR is byte-identical")

    # --- get: tierce-ftp killed, tierce-ftp -c (stream mode and ADTS ptcp:4) ---------------------
    for mode in ("off", "ptcp:4", "tcp"):
        part = os.path.join(local, "tftp-%s.part" % mode.replace(":", ""))
        got = interrupted(tftp + ["--adts", mode, "get", url + "/big.bin", part],
                          lambda: size_of(part), ck, "tierce-ftp get --adts %s" % mode)
        ck.check(0 < size_of(part) < SIZE,
                 "tierce-ftp get --adts %s killed mid-way leaves its partial file" % mode,
                 size_of(part))
        got = size_of(part)
        r = ftplab.run(tftp + ["-v", "--adts", mode, "-c", "get", url + "/big.bin", part],
                       timeout=300)
        err = r.stderr.decode(errors="replace")
        ck.check(r.returncode == 0, "tierce-ftp -c get --adts %s exits 0" % mode,
                 "rc=%d %s" % (r.returncode, err[-1500:]))
        if got > 0:
            ck.check("REST %d" % got in err, "tierce-ftp -c get --adts %s sends REST %d" %
                     (mode, got), err[-1500:])
        ck.equal(ftplab.file_sha(part), big_sha,
                 "tierce-ftp -c get --adts %s: byte-identical" % mode)

    # --- put: curl killed, curl -C - -T ---------------------------------------------------------
    dst = os.path.join(root, "curl-up.bin")
    got = interrupted(curl + ["-T", src, url + "/curl-up.bin"], lambda: size_of(dst), ck,
                      "curl STOR")
    ck.check(ftplab.wait_for(lambda: any(x["name"] == "/curl-up.bin" for x in
                                         ftplab.parse_xferlog(srv.xferlog_path)), 30),
             "the server logged the broken STOR (its transfer ended)")
    got = size_of(dst)
    ck.check(0 < got < SIZE, "the server kept the partial upload", got)
    r = ftplab.run(curl + ["-v", "-C", "-", "-T", src, url + "/curl-up.bin"], timeout=300)
    err = r.stderr.decode(errors="replace")
    ck.check(r.returncode == 0 and "APPE" in err, "curl -C - -T resumes with APPE",
             "rc=%d %s" % (r.returncode, err[-800:]))
    ck.equal(ftplab.file_sha(dst), src_sha, "curl -C - -T: the upload is byte-identical")

    # --- put: tierce-ftp killed, tierce-ftp -c --------------------------------------------------
    for mode in ("off", "ptcp:4"):
        name = "tftp-up-%s.bin" % mode.replace(":", "")
        dst = os.path.join(root, name)
        interrupted(tftp + ["--adts", mode, "put", src, url + "/" + name], lambda: size_of(dst),
                    ck, "tierce-ftp put --adts %s" % mode)
        ck.check(ftplab.wait_for(lambda: any(x["name"] == "/" + name for x in
                                             ftplab.parse_xferlog(srv.xferlog_path)), 30),
                 "the server logged the broken STOR of %s" % name)
        got = size_of(dst)
        ck.check(0 < got < SIZE, "tierce-ftp put --adts %s: the server kept a partial file" %
                 mode, got)
        r = ftplab.run(tftp + ["-v", "--adts", mode, "-c", "put", src, url + "/" + name],
                       timeout=300)
        err = r.stderr.decode(errors="replace")
        ck.check(r.returncode == 0 and ("APPE" in err or "REST %d" % got in err),
                 "tierce-ftp -c put --adts %s resumes (APPE or REST)" % mode,
                 "rc=%d %s" % (r.returncode, err[-1500:]))
        ck.equal(ftplab.file_sha(dst), src_sha, "tierce-ftp -c put --adts %s: byte-identical"
                 % mode)

    # --- a 5 GiB sparse file: tierce-ftp -c past 4 GiB in every mode (direct, not relayed) -------
    huge = os.path.join(root, "huge5g.bin")
    with open(huge, "wb") as f:
        f.truncate(5 << 30)
        f.seek((5 << 30) - 16)
        f.write(b"END-OF-THE-FILE!")
    direct = "ftp://rita:rita-pw@%s:%d" % (srv.host, srv.port)
    for mode in ("off", "tcp", "ptcp:4"):
        p = os.path.join(local, "huge-%s.bin" % mode.replace(":", ""))
        with open(p, "wb") as f:
            f.truncate((5 << 30) - 100)
        r = ftplab.run(tftp + ["-v", "--adts", mode, "-c", "get", direct + "/huge5g.bin", p],
                       timeout=300)
        with open(p, "rb") as f:
            f.seek((5 << 30) - 16)
            end = f.read()
        ck.check(r.returncode == 0 and os.path.getsize(p) == 5 << 30 and
                 end == b"END-OF-THE-FILE!" and "REST %d" % ((5 << 30) - 100) in
                 r.stderr.decode(errors="replace"),
                 "tierce-ftp -c --adts %s resumes past 4 GiB" % mode,
                 (r.returncode, os.path.getsize(p), end, r.stderr.decode()[-500:]))
        os.unlink(p)
    os.unlink(huge)

    # --- raw REST + RETR, REST + STOR, APPE (direct, not through the relay) ---------------------
    with open(src, "rb") as f:
        data = f.read()
    off = 33333333
    with ftplab.FtpControl(srv.host, srv.port, timeout=30) as c:
        ck.check(c.login("rita", "rita-pw")[0] == 230, "raw login")
        c.cmd("TYPE I")
        d = c.data_connect(timeout=30)
        ck.equal(c.cmd("REST %d" % off)[0], 350, "REST %d -> 350" % off)
        code, text = c.cmd("RETR big.bin")
        tail = ftplab.recv_all(d) if code in (125, 150) else b""
        d.close()
        ck.check(code in (125, 150) and c.reply()[0] == 226, "REST + RETR -> 150, 226", text)
        with open(big, "rb") as f:
            f.seek(off)
            ck.check(tail == f.read(), "REST + RETR returns exactly the tail",
                     "got %d bytes" % len(tail))

        for verb in ("REST+STOR", "APPE"):
            name = "raw-%s.bin" % verb.replace("+", "-").lower()
            with open(os.path.join(root, name), "wb") as f:
                f.write(data[:off])
            ftplab.give_to_sessions(srv, os.path.join(root, name))
            d = c.data_connect(timeout=30)
            if verb == "APPE":
                code, text = c.cmd("APPE " + name)
            else:
                ck.equal(c.cmd("REST %d" % off)[0], 350, "REST before STOR -> 350")
                code, text = c.cmd("STOR " + name)
            if code in (125, 150):
                d.sendall(data[off:])
            d.close()
            final = c.reply()[0] if code in (125, 150) else code
            ck.check(final == 226, "%s of the tail -> 226" % verb, (code, text, final))
            ck.equal(ftplab.file_sha(os.path.join(root, name)), src_sha,
                     "%s: byte-identical" % verb)
        # 64-bit offsets: a 5 GiB sparse file, SIZE, then REST past 4 GiB
        huge = os.path.join(root, "huge.bin")
        with open(huge, "wb") as f:
            f.truncate(5 << 30)
            f.seek((5 << 30) - 16)
            f.write(b"END-OF-THE-FILE!")
        ck.equal(c.cmd("SIZE huge.bin"), (213, "213 %d" % (5 << 30)), "SIZE of a 5 GiB file")
        d = c.data_connect(timeout=30)
        c.cmd("REST %d" % ((5 << 30) - 16))
        code, text = c.cmd("RETR huge.bin")
        tail = ftplab.recv_all(d) if code in (125, 150) else b""
        d.close()
        final = c.reply()[0] if code in (125, 150) else code
        ck.check(tail == b"END-OF-THE-FILE!" and final == 226, "REST past 4 GiB + RETR",
                 (code, final, tail))
        os.unlink(huge)
        ck.equal(c.cmd("QUIT")[0], 221, "raw QUIT")


if __name__ == "__main__":
    sys.exit(main())
