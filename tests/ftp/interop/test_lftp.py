#!/usr/bin/env python3
"""ftp_interop_lftp — lftp (a real, demanding client) against tierce-ftpd.

Login, ls, cls, get, put, mkdir, rm, rmdir, mv, mirror both ways, `get -c` resume of a truncated
download (REST must be used and the result byte-identical), and the same over explicit FTPS
(AUTH TLS, PROT P). Every remote change is checked on the server's disk, every download by sha256.

    test_lftp.py --build BUILD_DIR        (--vsftpd: run the same checks against vsftpd, to check
                                           the test itself)
"""
import argparse
import filecmp
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from tiercelab import ftplab  # noqa: E402

LFTP_BASE = ("set cmd:fail-exit yes; set net:max-retries 1; set net:timeout 15; "
             "set net:reconnect-interval-base 1; set xfer:clobber yes; set cmd:interactive no; ")


def lftp(srv, script, tls=False, debug=False, timeout=120):
    base = LFTP_BASE + ("set ftp:ssl-force true; set ftp:ssl-protect-data true; "
                        "set ftp:ssl-protect-list true; set ssl:verify-certificate no; "
                        if tls else "set ftp:ssl-allow no; ")
    argv = ["lftp"] + (["-d"] if debug else []) + [
        "-u", "%s,%s" % (srv.user, srv.password), "-p", str(srv.port),
        "-e", base + script + "; quit", srv.host]
    r = ftplab.run(argv, timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def same_tree(a, b):
    """Lists of differences between two directory trees (names and file contents)."""
    diffs = []

    def walk(cmp, rel):
        diffs.extend(os.path.join(rel, n) for n in cmp.left_only + cmp.right_only + cmp.funny_files)
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
        diffs.extend(os.path.join(rel, n) for n in mismatch + errors)
        for n, sub in cmp.subdirs.items():
            walk(sub, os.path.join(rel, n))

    walk(filecmp.dircmp(a, b), "")
    return diffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--vsftpd", action="store_true")
    a = ap.parse_args()
    ftplab.which_or_skip("lftp", "openssl")
    ck = ftplab.Checks("ftp_interop_lftp")
    with ftplab.TempDir("tierce-interop-lftp-") as tmp:
        root = os.path.join(tmp, "root")
        local = os.path.join(tmp, "local")
        os.makedirs(local)
        ftplab.make_tree(root, {
            "hello.txt": b"hello tierce\n", "big.bin": 6 * 1024 * 1024 + 123,
            "tree/a.bin": 70000, "tree/b.txt": b"b\n", "tree/sub/c.bin": 300000,
            "tree/sub/deeper/d.bin": 1, "tree/empty.txt": b"", "todelete.txt": b"x",
            "rmme/": None, "old name.txt": b"spaces in names\n",
        })
        ftplab.make_tree(local, {"up.bin": 1234567, "rtree/x.bin": 50000, "rtree/y/z.bin": 4096,
                                 "rtree/y/w.txt": b"w\n"}, seed=7)
        cert, key = ftplab.make_cert(os.path.join(tmp, "cert"))
        if a.vsftpd:
            srv = ftplab.Vsftpd(root, local_user=ftplab.TEST_USER, anonymous=False,
                                tls=(cert, key))
        else:
            srv = ftplab.TierceFtpd(ftplab.find_binary(a.build, "tierce-ftpd"), root,
                                    users=(("alice", "s3cret pass", None, True),),
                                    tls=(cert, key))
        with srv:
            ftplab.run_body(ck, srv, body, ck, srv, root, local)
    return ck.exit_code()


def body(ck, srv, root, local):
    rc, out, err = lftp(srv, "ls")
    ck.check(rc == 0 and "hello.txt" in out and "tree" in out and "old name.txt" in out,
             "login + ls lists the root", "rc=%d out=%r err=%r" % (rc, out, err))
    rc, out, err = lftp(srv, "cls -1 tree")
    names = sorted(l.strip().rstrip("/").split("/")[-1] for l in out.splitlines() if l.strip())
    ck.equal(names, ["a.bin", "b.txt", "empty.txt", "sub"], "cls -1 tree")

    rc, out, err = lftp(srv, "login %s %s; ls" % (srv.user, "wrong-password"))
    ck.check(rc != 0, "a wrong password is refused", "rc=%d out=%r" % (rc, out))

    dl = os.path.join(local, "big.dl")
    rc, out, err = lftp(srv, "get big.bin -o %s" % dl)
    ck.check(rc == 0 and os.path.exists(dl) and
             ftplab.file_sha(dl) == ftplab.file_sha(os.path.join(root, "big.bin")),
             "get big.bin: sha256 equal", err)
    rc, out, err = lftp(srv, "get 'old name.txt' -o %s" % os.path.join(local, "sp.txt"))
    ck.check(rc == 0 and open(os.path.join(local, "sp.txt"), "rb").read()
             == b"spaces in names\n", "get of a name with spaces", err)
    rc, out, err = lftp(srv, "get tree/empty.txt -o %s" % os.path.join(local, "e.txt"))
    ck.check(rc == 0 and os.path.getsize(os.path.join(local, "e.txt")) == 0,
             "get of an empty file", err)

    rc, out, err = lftp(srv, "put %s -o up.bin" % os.path.join(local, "up.bin"))
    ck.check(rc == 0 and os.path.exists(os.path.join(root, "up.bin")) and
             ftplab.file_sha(os.path.join(root, "up.bin")) ==
             ftplab.file_sha(os.path.join(local, "up.bin")), "put up.bin: sha256 equal", err)

    rc, out, err = lftp(srv, "mkdir newdir; mkdir -p newdir/x/y")
    ck.check(rc == 0 and os.path.isdir(os.path.join(root, "newdir/x/y")), "mkdir, mkdir -p",
             err)
    rc, out, err = lftp(srv, "rm todelete.txt")
    ck.check(rc == 0 and not os.path.exists(os.path.join(root, "todelete.txt")), "rm", err)
    rc, out, err = lftp(srv, "rm no-such-file.txt")
    ck.check(rc != 0, "rm of a missing file fails", "rc=%d" % rc)
    rc, out, err = lftp(srv, "rmdir rmme")
    ck.check(rc == 0 and not os.path.exists(os.path.join(root, "rmme")), "rmdir", err)
    rc, out, err = lftp(srv, "rmdir tree")
    ck.check(rc != 0 and os.path.isdir(os.path.join(root, "tree")),
             "rmdir of a non-empty dir fails and leaves it", "rc=%d" % rc)
    rc, out, err = lftp(srv, "mv 'old name.txt' newdir/renamed.txt")
    ck.check(rc == 0 and not os.path.exists(os.path.join(root, "old name.txt")) and
             open(os.path.join(root, "newdir/renamed.txt"), "rb").read() ==
             b"spaces in names\n", "mv across directories", err)
    rc, out, err = lftp(srv, "rm -r newdir")
    ck.check(rc == 0 and not os.path.exists(os.path.join(root, "newdir")), "rm -r", err)

    mdir = os.path.join(local, "mirror-down")
    rc, out, err = lftp(srv, "mirror tree %s" % mdir)
    ck.check(rc == 0 and os.path.isdir(mdir) and
             not same_tree(os.path.join(root, "tree"), mdir),
             "mirror remote -> local: identical trees",
             "rc=%d err=%r diffs=%r" % (rc, err, os.path.isdir(mdir) and
                                       same_tree(os.path.join(root, "tree"), mdir)))
    rc, out, err = lftp(srv, "mirror -R %s rtree" % os.path.join(local, "rtree"))
    ck.check(rc == 0 and os.path.isdir(os.path.join(root, "rtree")) and
             not same_tree(os.path.join(local, "rtree"), os.path.join(root, "rtree")),
             "mirror -R local -> remote: identical trees", "rc=%d err=%r" % (rc, err))

    # Resume: a truncated copy of big.bin continues with REST (lftp -d shows it).
    part = os.path.join(local, "big.part")
    with open(os.path.join(root, "big.bin"), "rb") as f:
        head = f.read(2 * 1024 * 1024 + 17)
    with open(part, "wb") as f:
        f.write(head)
    rc, out, err = lftp(srv, "get -c big.bin -o %s" % part, debug=True)
    ck.check(rc == 0 and "REST %d" % len(head) in err and
             ftplab.file_sha(part) == ftplab.file_sha(os.path.join(root, "big.bin")),
             "get -c resumes with REST %d to a byte-identical file" % len(head),
             "rc=%d rest-sent=%s" % (rc, "REST %d" % len(head) in err))
    ck.check("\n<--- 350" in err, "REST answered 350")

    # FTPS: AUTH TLS then PROT P for listings and files.
    rc, out, err = lftp(srv, "ls; get hello.txt -o %s; put %s -o tls-up.bin" % (
        os.path.join(local, "tls.txt"), os.path.join(local, "up.bin")), tls=True,
        debug=True)
    ck.check(rc == 0 and "hello.txt" in out, "FTPS: ls", "rc=%d err=%s" % (rc, err[-2000:]))
    ck.check("AUTH TLS" in err and "<--- 234" in err, "FTPS: AUTH TLS answered 234")
    ck.check("PROT P" in err and "<--- 200" in err, "FTPS: PROT P accepted")
    ck.check(os.path.exists(os.path.join(local, "tls.txt")) and
             open(os.path.join(local, "tls.txt"), "rb").read() == b"hello tierce\n",
             "FTPS: get")
    ck.check(os.path.exists(os.path.join(root, "tls-up.bin")) and
             ftplab.file_sha(os.path.join(root, "tls-up.bin")) ==
             ftplab.file_sha(os.path.join(local, "up.bin")), "FTPS: put")
    rc, out, err = lftp(srv, "mirror tree %s" % os.path.join(local, "tls-mirror"), tls=True)
    ck.check(rc == 0 and not same_tree(os.path.join(root, "tree"),
                                       os.path.join(local, "tls-mirror")),
             "FTPS: mirror", err[-2000:])


if __name__ == "__main__":
    sys.exit(main())
