#!/usr/bin/env python3
"""ftp_interop_tierce_client — tierce-ftp against tierce-ftpd, with ADTS (--adts tcp,
--adts ptcp:4, auto) and without (--adts off).

For each mode: get, put, ls, mkdir, rm, rm -r, mirror both ways (sha256 of every file), the exit
codes of docs/ftp.md (4 for a missing remote file, 3 for a bad password), and the server log must
say the bytes moved over ADTS ("(adts)") exactly when ADTS was asked for. Then a mirror -P 4 of
~300 files, and a second mirror --only-newer that must transfer nothing (no new xferlog lines).

    test_tierce_client.py --build BUILD_DIR
"""
import argparse
import filecmp
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from tiercelab import ftplab  # noqa: E402

MODES = ("off", "tcp", "ptcp:4", "auto")


def diff_trees(a, b):
    """Paths that differ between two trees (missing on either side or different bytes)."""
    out = []

    def walk(c, rel):
        out.extend(os.path.join(rel, n) for n in c.left_only + c.right_only + c.funny_files)
        _, mism, errs = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        out.extend(os.path.join(rel, n) for n in mism + errs)
        for n, sub in c.subdirs.items():
            walk(sub, os.path.join(rel, n))

    if not os.path.isdir(a) or not os.path.isdir(b):
        return ["<missing tree: %s>" % (a if not os.path.isdir(a) else b)]
    walk(filecmp.dircmp(a, b), "")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    ck = ftplab.Checks("ftp_interop_tierce_client")
    ftpd = ftplab.find_binary(a.build, "tierce-ftpd")
    ftp = ftplab.find_binary(a.build, "tierce-ftp")
    with ftplab.TempDir("tierce-interop-client-") as tmp:
        root = os.path.join(tmp, "root")
        local = os.path.join(tmp, "local")
        os.makedirs(local)
        tree = {"big.bin": 20 * 1024 * 1024 + 11, "small.txt": b"small\n", "empty.bin": b"",
                "d/a.bin": 1500000, "d/b.txt": b"bbb\n", "d/e/f/g.bin": 3 * 1024 * 1024 + 1,
                "d/e/empty/": None, "name with spaces.bin": 4097}
        ftplab.make_tree(root, tree)
        many = {"many/%02d/f%03d.bin" % (i % 10, i): (i * 7919) % 200000 for i in range(300)}
        ftplab.make_tree(root, many, seed=5)
        ftplab.make_tree(local, {"up.bin": 9 * 1024 * 1024 + 3, "utree/x.bin": 1234567,
                                 "utree/y/z.bin": 65536, "utree/y/w.txt": b"w\n",
                                 "utree/empty.bin": b""}, seed=11)
        cert, key = ftplab.make_cert(os.path.join(tmp, "cert"))
        srv = ftplab.TierceFtpd(ftpd, root, users=(("tom", "tom pw:@/", None, True),
                                                   ("bob", "bob-pw", None, False)),
                                max_sessions=32, workers=4, tls=(cert, key))
        with srv:
            ftplab.run_body(ck, srv, body, ck, srv, root, local, ftp)
    return ck.exit_code()


def body(ck, srv, root, local, ftp):
    env = dict(os.environ, TIERCE_FTP_PASSWORD=srv.password)
    base = "ftp://%s@%s:%d" % (srv.user, srv.host, srv.port)

    def tftp(mode, *args, timeout=300):
        r = ftplab.run([ftp, "--timeout", "30", "-q", "--adts", mode] + list(args),
                       timeout=timeout, env=env)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")

    def adts_lines():
        return [l for l in srv.log_text().splitlines() if "FTPD0301" in l]

    for mode in MODES:
        tag = mode.replace(":", "")
        n_log = len(adts_lines())
        out = os.path.join(local, "big-%s.bin" % tag)
        rc, so, se = tftp(mode, "get", base + "/big.bin", out)
        ck.check(rc == 0 and ftplab.file_sha(out) == ftplab.sha256(os.path.join(root, "big.bin")),
                 "[%s] get big.bin: sha256 equal" % mode, "rc=%d %s" % (rc, se[-1000:]))
        new = adts_lines()[n_log:]
        if mode != "off":
            ck.check(new and all("(adts)" in l for l in new),
                     "[%s] the server moved the file over ADTS" % mode, new)
        else:
            ck.check(new and not any("(adts)" in l for l in new),
                     "[off] the server used a plain data connection", new)
        rc, so, se = tftp(mode, "get", base + "/name%20with%20spaces.bin",
                          os.path.join(local, "sp-%s" % tag))
        ck.check(rc == 0 and ftplab.file_sha(os.path.join(local, "sp-%s" % tag)) ==
                 ftplab.sha256(os.path.join(root, "name with spaces.bin")),
                 "[%s] get of a %%20-encoded name" % mode, se[-500:])
        rc, so, se = tftp(mode, "get", base + "/empty.bin", os.path.join(local, "e-%s" % tag))
        ck.check(rc == 0 and os.path.getsize(os.path.join(local, "e-%s" % tag)) == 0,
                 "[%s] get of an empty file" % mode, se[-500:])
        rc, so, se = tftp(mode, "get", base + "/no-such-file", os.path.join(local, "x"))
        ck.equal(rc, 4, "[%s] get of a missing file exits 4" % mode)

        rc, so, se = tftp(mode, "put", os.path.join(local, "up.bin"), base + "/up-%s.bin" % tag)
        ck.check(rc == 0 and ftplab.file_sha(os.path.join(root, "up-%s.bin" % tag)) ==
                 ftplab.sha256(os.path.join(local, "up.bin")), "[%s] put: sha256 equal" % mode,
                 "rc=%d %s" % (rc, se[-1000:]))
        rc, so, se = tftp(mode, "put", os.path.join(local, "utree/empty.bin"),
                          base + "/empty-%s.bin" % tag)
        ck.check(rc == 0 and os.path.isfile(os.path.join(root, "empty-%s.bin" % tag)) and
                 os.path.getsize(os.path.join(root, "empty-%s.bin" % tag)) == 0,
                 "[%s] put of an empty file" % mode, se[-500:])

        rc, so, se = tftp(mode, "ls", base + "/d/")
        # one line per entry: type size date time name
        entries = {l.split()[-1]: l.split()[0] for l in so.splitlines() if l.strip()}
        ck.check(rc == 0 and entries == {"a.bin": "-", "b.txt": "-", "e": "d"},
                 "[%s] ls /d/ lists its entries with their types" % mode,
                 "rc=%d out=%r" % (rc, so))
        rc, so, se = tftp(mode, "mkdir", base + "/newdir-%s" % tag)
        ck.check(rc == 0 and os.path.isdir(os.path.join(root, "newdir-%s" % tag)),
                 "[%s] mkdir" % mode, se[-500:])
        rc, so, se = tftp(mode, "rm", base + "/up-%s.bin" % tag)
        ck.check(rc == 0 and not os.path.exists(os.path.join(root, "up-%s.bin" % tag)),
                 "[%s] rm" % mode, se[-500:])

        mdir = os.path.join(local, "mirror-%s" % tag)
        rc, so, se = tftp(mode, "mirror", base + "/d", mdir)
        diffs = diff_trees(os.path.join(root, "d"), mdir)
        ck.check(rc == 0 and not diffs, "[%s] mirror remote -> local: identical" % mode,
                 "rc=%d diffs=%r %s" % (rc, diffs[:10], se[-800:]))
        # docs/ftp.md: "mirror URL LOCALDIR", -R reverses the direction, not the arguments
        rc, so, se = tftp(mode, "mirror", "-R", base + "/utree-%s" % tag,
                          os.path.join(local, "utree"))
        diffs = diff_trees(os.path.join(local, "utree"), os.path.join(root, "utree-%s" % tag))
        ck.check(rc == 0 and not diffs, "[%s] mirror -R local -> remote: identical" % mode,
                 "rc=%d diffs=%r %s" % (rc, diffs[:10], se[-800:]))
        rc, so, se = tftp(mode, "rm", "-r", base + "/utree-%s" % tag)
        ck.check(rc == 0 and not os.path.exists(os.path.join(root, "utree-%s" % tag)),
                 "[%s] rm -r" % mode, se[-500:])

    rc, so, se = ftplab.run([ftp, "--timeout", "30", "-q", "ls", "ftp://%s:wrong@%s:%d/" % (
        srv.user, srv.host, srv.port)], timeout=60).returncode, "", ""
    ck.equal(rc, 3, "a bad password exits 3")

    # mirror -P 4 of ~300 files, then --only-newer moves nothing
    for mode in ("ptcp:4", "off"):
        tag = mode.replace(":", "")
        mdir = os.path.join(local, "many-%s" % tag)
        rc, so, se = tftp(mode, "-P", "4", "mirror", base + "/many", mdir, timeout=600)
        diffs = diff_trees(os.path.join(root, "many"), mdir)
        ck.check(rc == 0 and not diffs, "[%s] mirror -P 4 of 300 files: identical" % mode,
                 "rc=%d diffs=%d %r %s" % (rc, len(diffs), diffs[:10], se[-800:]))
        n_x = len(ftplab.parse_xferlog(srv.xferlog_path))
        rc, so, se = tftp(mode, "-P", "4", "--only-newer", "mirror", base + "/many", mdir,
                          timeout=600)
        newx = ftplab.parse_xferlog(srv.xferlog_path)[n_x:]
        ck.check(rc == 0 and not newx, "[%s] second mirror --only-newer transfers nothing" % mode,
                 "rc=%d new transfers=%d %r" % (rc, len(newx), [x["name"] for x in newx[:5]]))
        # one file changes on the server: --only-newer fetches exactly it
        changed = os.path.join(root, "many/03/f013.bin")
        with open(changed, "ab") as f:
            f.write(b"more")
        n_x = len(ftplab.parse_xferlog(srv.xferlog_path))
        rc, so, se = tftp(mode, "-P", "4", "--only-newer", "mirror", base + "/many", mdir,
                          timeout=600)
        newx = [x["name"] for x in ftplab.parse_xferlog(srv.xferlog_path)[n_x:]]
        ck.check(rc == 0 and newx == ["/many/03/f013.bin"] and
                 not diff_trees(os.path.join(root, "many"), mdir),
                 "[%s] --only-newer fetches only the changed file" % mode, (rc, newx))

    # odds and ends of the command line (docs/ftp.md, tierce-ftp --help)
    r = ftplab.run([ftp, "--timeout", "30", "-q", "get", base + "/d/b.txt", "-"], timeout=60,
                   env=env)  # stdout is a pipe here, as in `tierce-ftp get URL - | tar x`
    ck.check(r.returncode == 0 and r.stdout == b"bbb\n", "get URL - writes the file to a piped "
             "stdout", (r.returncode, r.stdout[:40], r.stderr.decode(errors="replace")[-300:]))
    rc, so, se = tftp("auto", "put", os.path.join(local, "utree/y/w.txt"), base + "/d/")
    ck.check(rc == 0 and open(os.path.join(root, "d/w.txt"), "rb").read() == b"w\n",
             "put into a URL ending in / keeps the base name", se[-300:])
    os.unlink(os.path.join(root, "d/w.txt"))
    rc, so, se = tftp("auto", "get", base + "/d", os.path.join(local, "dir-as-file"))
    ck.check(rc == 4 and not os.path.exists(os.path.join(local, "dir-as-file")),
             "get of a directory exits 4 and creates nothing", (rc, se[-300:]))
    # exit codes of docs/ftp.md
    bob = "ftp://bob:bob-pw@%s:%d" % (srv.host, srv.port)
    for what, argv, want in (
            ("put of a missing local file", ["put", os.path.join(local, "nope"),
                                             base + "/nope"], 5),
            ("put by a write=false user", ["put", os.path.join(local, "up.bin"),
                                           bob + "/bob-up.bin"], 4),
            ("mkdir of an existing dir", ["mkdir", base + "/d"], 4),
            ("rm of a directory without -r", ["rm", base + "/d"], 4),
            ("ls of a missing path", ["ls", base + "/missing"], 4),
            ("no server listening", ["get", "ftp://127.0.0.1:1/x", os.path.join(local, "y")], 2),
            ("an unknown command", ["bogus"], 1)):
        rc, so, se = tftp("auto", *argv)
        ck.equal(rc, want, "%s exits %d" % (what, want))
    ck.check(not os.path.exists(os.path.join(root, "nope")) and
             not os.path.exists(os.path.join(root, "bob-up.bin")) and
             os.path.isfile(os.path.join(root, "d/a.bin")), "the refused commands changed nothing")

    precious = os.path.join(local, "precious.txt")
    with open(precious, "wb") as f:
        f.write(b"precious local data\n")
    rc, so, se = tftp("auto", "get", base + "/no-such-file", precious)
    ck.check(rc == 4 and open(precious, "rb").read() == b"precious local data\n",
             "a get that the server refuses (550) leaves an existing local file untouched",
             (rc, open(precious, "rb").read()[:40]))
    os.makedirs(os.path.join(root, "home/bob"), exist_ok=True)
    with open(os.path.join(root, "home/bob/b.txt"), "wb") as f:
        f.write(b"bob\n")
    netrc = os.path.join(local, "netrc")
    with open(netrc, "w") as f:
        f.write("machine %s login bob password bob-pw\n" % srv.host)
    os.chmod(netrc, 0o600)
    r = ftplab.run([ftp, "--timeout", "30", "-q", "get",
                    "ftp://bob@%s:%d/%%2Fhome/bob/b.txt" % (srv.host, srv.port),
                    os.path.join(local, "netrc-b.txt")], timeout=60,
                   env=dict(os.environ, NETRC=netrc, HOME=local))
    ck.check(r.returncode == 0 and open(os.path.join(local, "netrc-b.txt"), "rb").read() ==
             b"bob\n", "password from $NETRC, %2F absolute path",
             (r.returncode, r.stderr.decode(errors="replace")[-300:]))
    rdir = os.path.join(root, "rmirror")
    ftplab.make_tree(rdir, {"stale.bin": b"old", "keep/stale2.bin": b"old"})
    ftplab.give_to_sessions(srv, rdir)
    rc, so, se = tftp("tcp", "mirror", "-R", "--delete", base + "/rmirror",
                      os.path.join(local, "utree"))
    ck.check(rc == 0 and not diff_trees(os.path.join(local, "utree"), rdir),
             "mirror -R --delete makes the remote tree equal to the local one",
             (rc, diff_trees(os.path.join(local, "utree"), rdir), se[-300:]))

    # FTPS: --tls-insecure works with the self-signed certificate, --tls refuses it
    out = os.path.join(local, "tls-big.bin")
    rc, so, se = tftp("auto", "--tls-insecure", "get", base + "/big.bin", out)
    ck.check(rc == 0 and ftplab.file_sha(out) == ftplab.sha256(os.path.join(root, "big.bin")),
             "--tls-insecure get: sha256 equal", "rc=%d %s" % (rc, se[-800:]))
    rc, so, se = tftp("auto", "--tls-insecure", "put", os.path.join(local, "up.bin"),
                      base + "/tls-up.bin")
    ck.check(rc == 0 and ftplab.file_sha(os.path.join(root, "tls-up.bin")) ==
             ftplab.sha256(os.path.join(local, "up.bin")), "--tls-insecure put: sha256 equal",
             "rc=%d %s" % (rc, se[-800:]))
    rc, so, se = tftp("auto", "--tls-insecure", "mirror", base + "/d",
                      os.path.join(local, "tls-mirror"))
    ck.check(rc == 0 and not diff_trees(os.path.join(root, "d"),
                                        os.path.join(local, "tls-mirror")),
             "--tls-insecure mirror: identical", se[-800:])
    out = os.path.join(local, "tls-strict.bin")
    rc, so, se = tftp("auto", "--tls", "get", base + "/small.txt", out)
    ck.check(rc != 0 and not os.path.exists(out),
             "--tls refuses a self-signed certificate it cannot verify", (rc, se[-500:]))

    # --delete: a local extra file goes away
    mdir = os.path.join(local, "many-ptcp4")
    extra = os.path.join(mdir, "00", "extra.bin")
    with open(extra, "wb") as f:
        f.write(b"x")
    rc, so, se = tftp("tcp", "--delete", "--only-newer", "mirror", base + "/many", mdir)
    ck.check(rc == 0 and not os.path.exists(extra) and
             not diff_trees(os.path.join(root, "many"), mdir),
             "mirror --delete removes a local file not on the server", se[-500:])
    shutil.rmtree(os.path.join(local, "many-off"), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
