#!/usr/bin/env python3
"""tests/ftp/client/test_vs_vsftpd.py — tierce-ftp against a private Debian vsftpd (plain RFC 959
data connections, LIST listings, no MLSD/MFMT): get/put/ls/mkdir/rm, resume of truncated files
(sha256-identical), mirror of a ~200-file tree with subdirectories, an --only-newer second run
that moves nothing, --delete, -R, -P 4, and the exit codes of docs/ftp.md.

    test_vs_vsftpd.py --build BUILD_DIR
Exit 0 = all passed, 1 = a check failed, 77 = vsftpd not installed."""
import argparse
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from tiercelab import ftplab  # noqa: E402
from tiercelab.ftplab import Checks, TempDir, Vsftpd, make_tree, run, sha256  # noqa: E402


def tree_digest(root):
    """relative path -> sha256 for files, "dir" for directories."""
    out = {}
    for d, dns, fns in os.walk(root):
        for n in dns:
            out[os.path.relpath(os.path.join(d, n), root)] = "dir"
        for n in fns:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = sha256(p)
    return out


def tree_spec():
    files = {}
    for i in range(200):
        sub = "d%d/s%d/" % (i % 5, i % 3) if i % 4 else ""
        files["%sf%03d.bin" % (sub, i)] = (i * 7919) % 20000 + (i % 3)  # 0..20 KB
    files["big/large.bin"] = 3 << 20
    files["empty/"] = None
    files["zero.txt"] = b""
    return files


def mirror_files(out):
    m = re.search(rb"mirror: (\d+) files, (\d+) bytes", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    ftplab.which_or_skip(Vsftpd.BINARY)
    ftp = ftplab.find_binary(args.build, "tierce-ftp")
    c = Checks("ftp_client_vs_vsftpd")

    def tf(*argv, timeout=120):
        r = run([ftp, "--timeout", "20", *argv], timeout=timeout)
        return r

    with TempDir() as tmp:
        root = os.path.join(tmp, "srv")
        spec = tree_spec()
        make_tree(os.path.join(root, "tree"), {k: v for k, v in spec.items() if v is not None})
        for k, v in spec.items():
            if v is None:
                os.makedirs(os.path.join(root, "tree", k), exist_ok=True)
        make_tree(root, {"big.bin": 5 << 20 | 12345, "hello.txt": b"hello, world\n"})
        local = os.path.join(tmp, "local")
        os.makedirs(local)
        with Vsftpd(root, local_user=ftplab.TEST_USER, anonymous=False) as vs:
            base = vs.url("")  # ftp://user:pass@host:port

            # ---- get / put / ls / mkdir / rm ------------------------------------------------
            r = tf("get", base + "/big.bin", os.path.join(local, "big.bin"))
            c.equal(r.returncode, 0, "get big.bin exits 0 (%s)" % r.stderr.decode()[-300:])
            c.equal(sha256(os.path.join(local, "big.bin")), sha256(os.path.join(root, "big.bin")),
                    "get: sha256 identical")
            r = tf("get", base + "/hello.txt", "-")
            c.equal(r.stdout, b"hello, world\n", "get to stdout")

            r = tf("ls", base + "/")
            names = r.stdout.decode()
            c.check(r.returncode == 0 and "big.bin" in names and "tree" in names,
                    "ls lists the root", r.stdout.decode() + r.stderr.decode())
            c.check(re.search(r"^d .* tree$", names, re.M) is not None, "ls marks directories",
                    names)

            r = tf("mkdir", base + "/newdir")
            c.check(r.returncode == 0 and os.path.isdir(os.path.join(root, "newdir")),
                    "mkdir creates the directory", r.stderr)
            r = tf("put", os.path.join(local, "big.bin"), base + "/newdir/")
            c.check(r.returncode == 0, "put into a directory URL exits 0", r.stderr)
            c.equal(sha256(os.path.join(root, "newdir", "big.bin")),
                    sha256(os.path.join(root, "big.bin")), "put: sha256 identical")
            r = tf("rm", base + "/newdir")
            c.equal(r.returncode, 4, "rm on a directory without -r: exit 4")
            r = tf("rm", "-r", base + "/newdir")
            c.check(r.returncode == 0 and not os.path.exists(os.path.join(root, "newdir")),
                    "rm -r removes the tree", r.stderr)
            r = tf("put", os.path.join(local, "big.bin"), base + "/copy.bin")
            r = tf("rm", base + "/copy.bin")
            c.check(r.returncode == 0 and not os.path.exists(os.path.join(root, "copy.bin")),
                    "rm removes a file", r.stderr)

            # ---- resume ----------------------------------------------------------------------
            part = os.path.join(local, "part.bin")
            with open(os.path.join(root, "big.bin"), "rb") as f:
                data = f.read()
            with open(part, "wb") as f:
                f.write(data[:len(data) // 3])
            r = tf("get", "-c", base + "/big.bin", part)
            c.equal(r.returncode, 0, "get -c exits 0")
            c.equal(sha256(part), sha256(os.path.join(root, "big.bin")),
                    "get -c of a truncated file: sha256 identical")
            r = tf("get", "-c", base + "/big.bin", part)
            c.equal(r.returncode, 0, "get -c of a complete file: exit 0")
            remote_part = os.path.join(root, "rpart.bin")
            with open(remote_part, "wb") as f:
                f.write(data[:len(data) // 2 + 7])
            os.chown(remote_part, *ftplab.ensure_local_user())
            r = tf("put", "-c", os.path.join(local, "big.bin"), base + "/rpart.bin")
            c.equal(r.returncode, 0, "put -c exits 0 (%s)" % r.stderr.decode()[-200:])
            c.equal(sha256(remote_part), sha256(os.path.join(root, "big.bin")),
                    "put -c of a truncated remote file: sha256 identical")

            # ---- mirror ----------------------------------------------------------------------
            m1 = os.path.join(local, "m1")
            r = tf("mirror", base + "/tree", m1)
            c.equal(r.returncode, 0, "mirror exits 0 (%s)" % r.stderr.decode()[-300:])
            want = tree_digest(os.path.join(root, "tree"))
            c.check(tree_digest(m1) == want, "mirror: trees identical (%d entries)" % len(want))
            n = mirror_files(r.stdout)
            c.check(n is not None and n[0] == sum(1 for v in want.values() if v != "dir"),
                    "mirror summary counts every file", r.stdout)
            r = tf("mirror", "--only-newer", base + "/tree", m1)
            n = mirror_files(r.stdout)
            c.check(r.returncode == 0 and n == (0, 0), "second mirror --only-newer moves nothing",
                    r.stdout + r.stderr)
            # a changed remote file is fetched again
            with open(os.path.join(root, "tree", "f000.bin"), "ab") as f:
                f.write(b"more")
            r = tf("mirror", "--only-newer", base + "/tree", m1)
            c.check(mirror_files(r.stdout) is not None and mirror_files(r.stdout)[0] == 1,
                    "--only-newer fetches the one changed file", r.stdout)
            # extras vanish with --delete
            make_tree(m1, {"extra.bin": 10, "xdir/y/z.bin": 5})
            r = tf("mirror", "--only-newer", "--delete", base + "/tree", m1)
            c.check(r.returncode == 0 and not os.path.exists(os.path.join(m1, "extra.bin"))
                    and not os.path.exists(os.path.join(m1, "xdir")), "--delete removes extras",
                    r.stdout + r.stderr)
            c.check(tree_digest(m1) == tree_digest(os.path.join(root, "tree")),
                    "after --delete the trees are identical")

            # -P 4
            m2 = os.path.join(local, "m2")
            r = tf("mirror", "-P", "4", base + "/tree", m2)
            c.check(r.returncode == 0 and tree_digest(m2) == tree_digest(os.path.join(root, "tree")),
                    "mirror -P 4: trees identical", r.stdout + r.stderr)

            # -R reverse
            r = tf("mirror", "-R", base + "/rev", m2)
            c.check(r.returncode == 0 and tree_digest(os.path.join(root, "rev")) == tree_digest(m2),
                    "mirror -R: remote tree identical", r.stdout + r.stderr)
            r = tf("mirror", "-R", "--only-newer", base + "/rev", m2)
            c.check(r.returncode == 0 and mirror_files(r.stdout) == (0, 0),
                    "second mirror -R --only-newer moves nothing", r.stdout + r.stderr)
            make_tree(os.path.join(root, "rev"), {"stale.bin": 3})
            os.chown(os.path.join(root, "rev", "stale.bin"), *ftplab.ensure_local_user())
            r = tf("mirror", "-R", "--only-newer", "--delete", "-P", "2", base + "/rev", m2)
            c.check(r.returncode == 0 and not os.path.exists(os.path.join(root, "rev", "stale.bin")),
                    "mirror -R --delete removes remote extras", r.stdout + r.stderr)

            # ---- errors and exit codes -------------------------------------------------------
            r = tf("get", base + "/no-such-file", os.path.join(local, "x"))
            c.equal(r.returncode, 4, "get of a missing file: exit 4")
            r = tf("get", "http://x/y")
            c.equal(r.returncode, 1, "a non-ftp URL: exit 1")
            r = tf("frobnicate", base + "/")
            c.equal(r.returncode, 1, "an unknown command: exit 1")
            bad = "ftp://%s:wrong@%s:%d/" % (ftplab.TEST_USER, vs.host, vs.port)
            r = tf("ls", bad)
            c.equal(r.returncode, 3, "a wrong password: exit 3")
            port = ftplab.free_port()
            r = tf("ls", "ftp://127.0.0.1:%d/" % port)
            c.equal(r.returncode, 2, "connection refused: exit 2")
            c.check(b"cannot connect to 127.0.0.1:%d: Connection refused" % port in r.stderr,
                    "connection refused: clear message", r.stderr)
            r = tf("get", base + "/big.bin", "/nonexistent-dir/x")
            c.equal(r.returncode, 5, "an unwritable local path: exit 5")
            env = dict(os.environ, TIERCE_FTP_PASSWORD=vs.password)
            r = run([ftp, "ls", "ftp://%s@%s:%d/" % (ftplab.TEST_USER, vs.host, vs.port)], env=env)
            c.check(r.returncode == 0 and b"big.bin" in r.stdout,
                    "password from $TIERCE_FTP_PASSWORD", r.stderr)

        # ---- anonymous, read-only ------------------------------------------------------------
        aroot = os.path.join(tmp, "anon")
        make_tree(aroot, {"pub/readme.txt": b"anonymous\n"})
        with Vsftpd(aroot, write=False) as va:
            r = tf("get", va.url("/pub/readme.txt"), os.path.join(local, "readme.txt"))
            c.check(r.returncode == 0 and open(os.path.join(local, "readme.txt"), "rb").read()
                    == b"anonymous\n", "anonymous get", r.stderr)
            r = tf("put", os.path.join(local, "readme.txt"), va.url("/pub/"))
            c.equal(r.returncode, 4, "anonymous put on a read-only server: exit 4")

        # ---- FTPS (AUTH TLS, PROT P) -----------------------------------------------------------
        troot = os.path.join(tmp, "tls")
        make_tree(troot, {"s/a.bin": 300001, "b.bin": 17})
        cert, key = ftplab.make_cert(tmp)
        with Vsftpd(troot, local_user=ftplab.TEST_USER, anonymous=False, tls=(cert, key)) as vt:
            got = os.path.join(local, "tls-a.bin")
            r = tf("--tls-insecure", "get", vt.url("/s/a.bin"), got)
            c.check(r.returncode == 0 and sha256(got) == sha256(os.path.join(troot, "s/a.bin")),
                    "--tls get: sha256 identical", r.stderr)
            r = tf("--tls-insecure", "put", got, vt.url("/up.bin"))
            c.check(r.returncode == 0 and sha256(os.path.join(troot, "up.bin")) == sha256(got),
                    "--tls put: sha256 identical", r.stderr)
            r = tf("--tls-insecure", "mirror", vt.url("/s"), os.path.join(local, "tm"))
            c.check(r.returncode == 0 and tree_digest(os.path.join(local, "tm")) ==
                    tree_digest(os.path.join(troot, "s")), "--tls mirror", r.stdout + r.stderr)
            r = tf("--tls", "ls", vt.url("/"))
            c.check(r.returncode == 2 and b"certificate verify failed" in r.stderr,
                    "--tls refuses a self-signed certificate: exit 2", r.stderr)
    return c.exit_code()


if __name__ == "__main__":
    sys.exit(main())
