#!/usr/bin/env python3
"""tests/ftp/client/test_vs_tierce_ftpd.py — tierce-ftp against tierce-ftpd: the ADTS data path
(TPRT TCP persistent session with pipelined RETR/STOR, PTCP, and --adts off for plain EPSV),
MLSD listings with exact times (a second --only-newer mirror moves nothing, -R uses MFMT), -P 4,
and get/put resume over ADTS.

    test_vs_tierce_ftpd.py --build BUILD_DIR"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from tiercelab import ftplab  # noqa: E402
from tiercelab.ftplab import (Checks, TempDir, TierceFtpd, give_to_sessions, make_tree, run,  # noqa: E402
                    sha256)
from test_vs_vsftpd import mirror_files, tree_digest  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    ftp = ftplab.find_binary(args.build, "tierce-ftp")
    ftpd = ftplab.find_binary(args.build, "tierce-ftpd")
    c = Checks("ftp_client_vs_tierce_ftpd")

    def tf(*argv):
        return run([ftp, "--timeout", "20", *argv], timeout=180)

    with TempDir() as tmp:
        root = os.path.join(tmp, "srv")
        files = {"tree/d%d/s%d/f%03d.bin" % (i % 5, i % 2, i): (i * 7919) % 30000
                 for i in range(200)}
        files["tree/large.bin"] = 4 << 20
        files["big.bin"] = (6 << 20) + 77
        make_tree(root, files)
        want = tree_digest(os.path.join(root, "tree"))
        with TierceFtpd(ftpd, root) as s:
            for n, extra in enumerate((["--adts", "tcp"], ["--adts", "ptcp:4"], ["--adts", "off"],
                                       ["-P", "4"])):
                dst = os.path.join(tmp, "m%d" % n)
                r = tf("mirror", *extra, s.url("/tree"), dst)
                c.check(r.returncode == 0 and tree_digest(dst) == want,
                        "mirror %s: trees identical" % " ".join(extra), r.stdout + r.stderr)
                if extra[0] == "--adts" and extra[1] != "off":
                    c.check(b"[ADTS " in r.stdout, "mirror %s used ADTS" % " ".join(extra),
                            r.stdout)
            r = tf("mirror", "--only-newer", s.url("/tree"), os.path.join(tmp, "m0"))
            c.check(r.returncode == 0 and mirror_files(r.stdout) == (0, 0),
                    "second mirror --only-newer (MLSD times) moves nothing", r.stdout + r.stderr)

            r = tf("mirror", "-R", s.url("/rev"), os.path.join(tmp, "m0"))
            c.check(r.returncode == 0 and tree_digest(os.path.join(root, "rev")) == want,
                    "mirror -R over ADTS: remote tree identical", r.stdout + r.stderr)
            r = tf("mirror", "-R", "--only-newer", s.url("/rev"), os.path.join(tmp, "m0"))
            c.check(r.returncode == 0 and mirror_files(r.stdout) == (0, 0),
                    "second mirror -R --only-newer (MFMT) moves nothing", r.stdout + r.stderr)

            part = os.path.join(tmp, "part.bin")
            with open(os.path.join(root, "big.bin"), "rb") as f:
                data = f.read()
            with open(part, "wb") as f:
                f.write(data[:len(data) // 3])
            r = tf("get", "-c", s.url("/big.bin"), part)
            c.check(r.returncode == 0 and sha256(part) == sha256(os.path.join(root, "big.bin")),
                    "get -c over ADTS: sha256 identical", r.stderr)
            with open(os.path.join(root, "rpart.bin"), "wb") as f:
                f.write(data[:len(data) // 2])
            give_to_sessions(s, os.path.join(root, "rpart.bin"))
            r = tf("put", "-c", part, s.url("/rpart.bin"))
            c.check(r.returncode == 0 and sha256(os.path.join(root, "rpart.bin")) == sha256(part),
                    "put -c over ADTS (APPE): sha256 identical", r.stderr)
            r = tf("get", s.url("/missing.bin"), os.path.join(tmp, "x"))
            c.equal(r.returncode, 4, "get of a missing file over ADTS: exit 4")
            c.check(not os.path.exists(os.path.join(tmp, "x")),
                    "a refused get creates no local file")
            # docs/ftp.md: a refused get (55x) leaves an existing local file untouched, on every
            # data path; `get URL -` writes to a piped standard output.
            keep = os.path.join(tmp, "keep.txt")
            for mode in ("tcp", "ptcp:4", "off"):
                with open(keep, "wb") as f:
                    f.write(b"precious\n")
                for what, path in (("a missing file", "/missing.bin"), ("a directory", "/tree")):
                    r = tf("--adts", mode, "get", s.url(path), keep)
                    c.check(r.returncode == 4 and open(keep, "rb").read() == b"precious\n",
                            "--adts %s: a refused get of %s exits 4, local file untouched"
                            % (mode, what), (r.returncode, r.stderr[-300:]))
                    r = tf("--adts", mode, "-c", "get", s.url(path), keep)
                    c.check(r.returncode == 4 and open(keep, "rb").read() == b"precious\n",
                            "--adts %s: a refused get -c of %s exits 4, local file untouched"
                            % (mode, what), (r.returncode, r.stderr[-300:]))
                r = tf("--adts", mode, "get", s.url("/big.bin"), "-")  # stdout: a pipe
                c.check(r.returncode == 0 and r.stdout == data,
                        "--adts %s: get URL - into a pipe" % mode,
                        (r.returncode, len(r.stdout), r.stderr[-300:]))
            # standard output redirected to a file that already holds something: appended at
            # its position, not written over from byte 0
            outp = os.path.join(tmp, "stdout.bin")
            for mode in ("tcp", "off"):
                with open(outp, "wb") as f:
                    f.write(b"head\n")
                    f.flush()
                    rr = subprocess.run(
                        [ftp, "--timeout", "20", "-q", "--adts", mode, "get",
                         s.url("/big.bin"), "-"], stdout=f, stderr=subprocess.PIPE,
                        timeout=180)
                c.check(rr.returncode == 0 and open(outp, "rb").read() == b"head\n" + data,
                        "--adts %s: get URL - > a file writes at its position" % mode,
                        (rr.returncode, rr.stderr[-300:]))
            r = tf("ls", s.url("/"))
            c.check(r.returncode == 0 and re.search(rb"^- +%d " % len(data), r.stdout, re.M),
                    "ls over ADTS shows big.bin with its size", r.stdout + r.stderr)
            c.check(not s.crash_report(), "no crash in the server log", s.crash_report())
    return c.exit_code()


if __name__ == "__main__":
    sys.exit(main())
