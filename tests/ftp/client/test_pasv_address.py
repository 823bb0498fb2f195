#!/usr/bin/env python3
"""tests/ftp/client/test_pasv_address.py — issue 17: tierce-ftp does not trust the address of a
227 reply. A scripted server refuses EPSV and announces 10.255.255.1 in its PASV reply while its
data port listens on 127.0.0.1: the client connects to the control peer (127.0.0.1) instead, gets
the file, and says on stderr that the addresses differ.

    test_pasv_address.py --build BUILD_DIR"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from tiercelab import ftplab  # noqa: E402

PAYLOAD = b"data from the control peer\n"


def serve(listener, seen):
    """One session: just enough FTP for `tierce-ftp --adts off get`."""
    conn, _ = listener.accept()
    conn.settimeout(20)
    f = conn.makefile("rb")
    data_l = None

    def say(line):
        conn.sendall((line + "\r\n").encode())

    say("220 scripted")
    while True:
        line = f.readline()
        if not line:
            break
        cmd = line.decode().strip()
        seen.append(cmd)
        verb = cmd.split(" ")[0].upper()
        if verb == "USER":
            say("331 pass")
        elif verb == "PASS":
            say("230 ok")
        elif verb == "FEAT":
            conn.sendall(b"211-Features:\r\n SIZE\r\n211 End\r\n")
        elif verb in ("TYPE", "OPTS"):
            say("200 ok")
        elif verb == "PWD":
            say('257 "/"')
        elif verb == "SIZE":
            say("213 %d" % len(PAYLOAD))
        elif verb == "MDTM":
            say("550 no")
        elif verb == "EPSV":
            say("500 EPSV not understood")
        elif verb == "PASV":
            data_l = socket.socket()
            data_l.bind(("127.0.0.1", 0))
            data_l.listen(1)
            p = data_l.getsockname()[1]
            say("227 Entering Passive Mode (10,255,255,1,%d,%d)" % (p >> 8, p & 255))
        elif verb == "RETR":
            data_l.settimeout(20)
            try:
                d, _ = data_l.accept()
            except OSError:
                say("425 no data connection")
                continue
            say("150 here it comes")
            d.sendall(PAYLOAD)
            d.close()
            say("226 done")
        elif verb == "QUIT":
            say("221 bye")
            break
        else:
            say("502 not here")
    conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    ftp = ftplab.find_binary(args.build, "tierce-ftp")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(30)
    port = listener.getsockname()[1]
    seen = []
    t = threading.Thread(target=serve, args=(listener, seen), daemon=True)
    t.start()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "f.txt")
        r = subprocess.run([ftp, "--timeout", "10", "--adts", "off", "--quiet", "get",
                            "ftp://u:p@127.0.0.1:%d/f.txt" % port, out],
                           capture_output=True, timeout=60)
        t.join(30)
        err = r.stderr.decode(errors="replace")
        ok = True
        if r.returncode != 0:
            print("FAIL: tierce-ftp exit %d: %s (server saw %s)" % (r.returncode, err, seen))
            ok = False
        elif open(out, "rb").read() != PAYLOAD:
            print("FAIL: wrong file content")
            ok = False
        if "PASV reply names 10.255.255.1" not in err:
            print("FAIL: no warning about the PASV address on stderr: %r" % err)
            ok = False
        if not ok:
            return 1
    print("ok: PASV address 10.255.255.1 ignored, data from the control peer, warning logged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
