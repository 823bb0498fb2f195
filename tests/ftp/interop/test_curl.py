#!/usr/bin/env python3
"""ftp_interop_curl — curl against tierce-ftpd.

Listing (LIST and NLST), get, put (-T), --ftp-create-dirs, -C - resume both ways (REST on get,
SIZE + APPE on put), EPSV (default) and PASV (--disable-epsv), active mode with EPRT and PORT to
127.0.0.1, explicit FTPS (--ssl-reqd -k), quote commands (-Q) before and after a transfer, and the
errors curl must see (missing file 550 -> exit 78, bad login -> 67, failing quote -> 21).
curl -v shows the protocol, so each check also asserts that the intended command was used.

    test_curl.py --build BUILD_DIR   (--vsftpd: the same checks against vsftpd)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from tiercelab import ftplab  # noqa: E402


def curl(*args, timeout=120):
    r = ftplab.run(["curl", "-sS", "-v", "--connect-timeout", "10", "--max-time", str(timeout - 5)]
                   + list(args), timeout=timeout)
    return r.returncode, r.stdout, r.stderr.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--vsftpd", action="store_true")
    a = ap.parse_args()
    ftplab.which_or_skip("curl", "openssl")
    ck = ftplab.Checks("ftp_interop_curl")
    with ftplab.TempDir("tierce-interop-curl-") as tmp:
        root = os.path.join(tmp, "root")
        local = os.path.join(tmp, "local")
        os.makedirs(local)
        ftplab.make_tree(root, {"hello.txt": b"hello curl\n", "big.bin": 5 * 1024 * 1024 + 7,
                                "dir/one.bin": 1000, "dir/two.txt": b"2\n", "q1.txt": b"q",
                                "q2.txt": b"q"})
        ftplab.make_tree(local, {"up.bin": 3 * 1024 * 1024 + 1}, seed=3)
        cert, key = ftplab.make_cert(os.path.join(tmp, "cert"))
        if a.vsftpd:
            srv = ftplab.Vsftpd(root, local_user=ftplab.TEST_USER, anonymous=False,
                                tls=(cert, key))
        else:
            srv = ftplab.TierceFtpd(ftplab.find_binary(a.build, "tierce-ftpd"), root,
                                    users=(("carol", "curl-pw", None, True),), tls=(cert, key))
        with srv:
            ftplab.run_body(ck, srv, body, ck, srv, root, local, a, cert)
    return ck.exit_code()


def body(ck, srv, root, local, a, cert):
    base = "ftp://%s:%d" % (srv.host, srv.port)
    up = ["-u", "%s:%s" % (srv.user, srv.password)]
    big_sha = ftplab.file_sha(os.path.join(root, "big.bin"))
    up_sha = ftplab.file_sha(os.path.join(local, "up.bin"))

    rc, out, err = curl(*up, base + "/")
    ck.check(rc == 0 and b"hello.txt" in out and b"dir" in out, "LIST of /", err[-1500:])
    ck.check("EPSV" in err, "curl used EPSV by default")
    rc, out, err = curl(*up, "--list-only", base + "/dir/")
    ck.equal(sorted(out.decode().split()), ["one.bin", "two.txt"], "NLST of /dir/")

    dl = os.path.join(local, "big.dl")
    rc, out, err = curl(*up, "-o", dl, base + "/big.bin")
    ck.check(rc == 0 and ftplab.file_sha(dl) == big_sha, "get big.bin: sha256 equal",
             err[-1500:])
    rc, out, err = curl(*up, "-o", os.path.join(local, "x"), base + "/no-such.bin")
    ck.equal(rc, 78, "get of a missing file: curl exit 78 (RETR 550)")
    rc, out, err = curl("-u", "%s:wrong" % srv.user, base + "/")
    ck.equal(rc, 67, "bad password: curl exit 67 (login denied)")

    rc, out, err = curl(*up, "-T", os.path.join(local, "up.bin"), base + "/up.bin")
    ck.check(rc == 0 and os.path.exists(os.path.join(root, "up.bin")) and
             ftplab.file_sha(os.path.join(root, "up.bin")) == up_sha,
             "put -T: sha256 equal", err[-1500:])
    rc, out, err = curl(*up, "--ftp-create-dirs", "-T", os.path.join(local, "up.bin"),
                        base + "/new/deep/er/up.bin")
    p = os.path.join(root, "new/deep/er/up.bin")
    ck.check(rc == 0 and os.path.exists(p) and ftplab.file_sha(p) == up_sha,
             "--ftp-create-dirs makes the path and stores the file", err[-1500:])

    # -C - on get: a correct first part is completed with REST.
    part = os.path.join(local, "big.part")
    with open(os.path.join(root, "big.bin"), "rb") as f:
        head = f.read(1234567)
    with open(part, "wb") as f:
        f.write(head)
    rc, out, err = curl(*up, "-C", "-", "-o", part, base + "/big.bin")
    ck.check(rc == 0 and "REST %d" % len(head) in err and ftplab.file_sha(part) == big_sha,
             "get -C - resumes with REST to a byte-identical file",
             "rc=%d %s" % (rc, err[-1500:]))
    # -C - on put: curl asks SIZE, then APPEs the rest.
    with open(os.path.join(local, "up.bin"), "rb") as f:
        uphead = f.read(1000001)
    rp = os.path.join(root, "resumed.bin")
    with open(rp, "wb") as f:
        f.write(uphead)
    if a.vsftpd:
        os.chown(rp, *ftplab.ensure_local_user())
    ftplab.give_to_sessions(srv, rp)
    rc, out, err = curl(*up, "-C", "-", "-T", os.path.join(local, "up.bin"),
                        base + "/resumed.bin")
    ck.check(rc == 0 and "SIZE" in err and "APPE" in err and ftplab.file_sha(rp) == up_sha,
             "put -C - resumes with SIZE + APPE to a byte-identical file",
             "rc=%d %s" % (rc, err[-1500:]))

    rc, out, err = curl(*up, "--disable-epsv", "-o", dl, base + "/big.bin")
    ck.check(rc == 0 and "PASV" in err and "EPSV" not in err and
             ftplab.file_sha(dl) == big_sha, "PASV (--disable-epsv) get", err[-1500:])
    rc, out, err = curl(*up, "--disable-epsv", base + "/dir/")
    ck.check(rc == 0 and b"one.bin" in out, "PASV list")

    rc, out, err = curl(*up, "-P", "127.0.0.1", "-o", dl, base + "/big.bin")
    ck.check(rc == 0 and "EPRT |1|127.0.0.1|" in err and ftplab.file_sha(dl) == big_sha,
             "active EPRT get", "rc=%d %s" % (rc, err[-1500:]))
    rc, out, err = curl(*up, "-P", "127.0.0.1", "--disable-eprt", "-o", dl,
                        base + "/big.bin")
    ck.check(rc == 0 and "PORT 127,0,0,1," in err and ftplab.file_sha(dl) == big_sha,
             "active PORT get", "rc=%d %s" % (rc, err[-1500:]))
    rc, out, err = curl(*up, "-P", "127.0.0.1", "--disable-eprt", "-T",
                        os.path.join(local, "up.bin"), base + "/active-up.bin")
    ck.check(rc == 0 and ftplab.file_sha(os.path.join(root, "active-up.bin")) == up_sha,
             "active PORT put", "rc=%d %s" % (rc, err[-1500:]))
    rc, out, err = curl(*up, "-P", "127.0.0.1", base + "/dir/")
    ck.check(rc == 0 and b"two.txt" in out, "active EPRT list")

    rc, out, err = curl(*up, "--ssl-reqd", "-k", base + "/")
    ck.check(rc == 0 and b"hello.txt" in out and "< 234" in err and "> PROT P" in err,
             "FTPS explicit: list over AUTH (curl tries SSL, then TLS) 234 + PROT P", "rc=%d %s" % (rc, err[-1500:]))
    rc, out, err = curl(*up, "--ssl-reqd", "-k", "-o", dl, base + "/big.bin")
    ck.check(rc == 0 and ftplab.file_sha(dl) == big_sha, "FTPS get", err[-1500:])
    rc, out, err = curl(*up, "--ssl-reqd", "-k", "-T", os.path.join(local, "up.bin"),
                        base + "/tls-up.bin")
    ck.check(rc == 0 and ftplab.file_sha(os.path.join(root, "tls-up.bin")) == up_sha,
             "FTPS put", err[-1500:])
    rc, out, err = curl(*up, "--ssl-reqd", "--cacert", cert, base + "/hello.txt")
    ck.check(rc == 0 and out == b"hello curl\n", "FTPS with certificate verification",
             err[-1500:])

    rc, out, err = curl(*up, "-Q", "DELE q1.txt", base + "/hello.txt")
    ck.check(rc == 0 and not os.path.exists(os.path.join(root, "q1.txt")) and
             out == b"hello curl\n", "-Q DELE before a transfer", err[-1500:])
    rc, out, err = curl(*up, "-Q", "-RNFR q2.txt", "-Q", "-RNTO q3.txt", base + "/hello.txt")
    ck.check(rc == 0 and not os.path.exists(os.path.join(root, "q2.txt")) and
             os.path.exists(os.path.join(root, "q3.txt")), "-Q post-transfer RNFR/RNTO",
             err[-1500:])
    rc, out, err = curl(*up, "-Q", "MKD made-by-quote", base + "/")
    ck.check(rc == 0 and os.path.isdir(os.path.join(root, "made-by-quote")), "-Q MKD")
    rc, out, err = curl(*up, "-Q", "DELE does-not-exist", base + "/")
    ck.equal(rc, 21, "a failing quote command: curl exit 21")


if __name__ == "__main__":
    sys.exit(main())
