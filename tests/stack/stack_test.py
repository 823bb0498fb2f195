#!/usr/bin/python3
"""Stack test without the Tierce modules: tools/tierce-cluster up --cache none (1 app + 1 proxy,
small dataset) in a temporary directory; pages through the proxy (200, the tierce-data marker,
Tierce-Depends); an update on the app node (versions + 1, visible in item.php); bad inputs
(400/404/405); then down (always) and no process left.

  stack_test.py [--build DIR] [--keep]
Exit 0 passed, 1 failed (with the reason), 77 skipped (not root, or a prerequisite is missing).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(REPO, "tools", "tierce-cluster")


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def request(port, method, path, form=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        body = urllib.parse.urlencode(form) if form is not None else None
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def markers(body):
    return dict(re.findall(r'<meta name="tierce-data" content="([a-z]+:[0-9]+)=([0-9]+)">', body))


def page(port, path, key, dep_header="tierce-depends"):
    status, headers, body = request(port, "GET", path)
    check(status == 200, f"GET {path}: status {status}, body {body[:200]!r}")
    check("content-length" in headers, f"GET {path}: no Content-Length (mod_cache needs it)")
    check(int(headers["content-length"]) == len(body.encode()), f"GET {path}: Content-Length mismatch")
    check("warning" not in body.lower() and "fatal error" not in body.lower(), f"GET {path}: PHP message in body")
    check(headers.get(dep_header) == key, f"GET {path}: {dep_header} is {headers.get(dep_header)!r}, want {key!r}")
    return body


def pids_of(state):
    out = []
    if state["mariadb"].get("process"):
        out.append(state["mariadb"]["process"])
    for n in state["nodes"]:
        for k in ("memd", "httpd"):
            if n.get(k):
                out.append(n[k])
        out += n.get("load", [])
    return out


def left_processes(d):
    """Live (non-zombie) processes whose command line mentions the state directory."""
    left = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{p}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if d in cmd and state != "Z":
            left.append(f"{p}: {cmd.strip()}")
    return left


def run(build, d):
    r = subprocess.run([CLUSTER, "up", "--dir", d, "--cache", "none", "--app-nodes", "1", "--proxy-nodes", "1",
                        "--items", "500", "--bids", "3000", "--build", build], capture_output=True, text=True)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, f"tierce-cluster up failed (exit {r.returncode})")
    with open(os.path.join(d, "cluster.json")) as f:
        st = json.load(f)
    check(st["state"] == "up", f"cluster.json state {st['state']}")
    proxy = next(n for n in st["nodes"] if n["role"] == "proxy")["port"]
    app = next(n for n in st["nodes"] if n["role"] == "app")["port"]
    r = subprocess.run([CLUSTER, "status", "--dir", d], capture_output=True, text=True)
    check(r.returncode == 0, f"status says a process is dead:\n{r.stdout}")

    # Pages through the proxy.
    body = page(proxy, "/item.php?id=42", "item:42")
    m = markers(body)
    check(list(m) == ["item:42"], f"item.php markers {m}")
    v_item = int(m["item:42"])
    seller = int(re.search(r'<th>Seller</th><td><a href="user.php\?id=([0-9]+)"', body).group(1))
    page(proxy, "/surrogate.php?id=42", "item:42", "surrogate-key")
    # blob.php: item K padded to blob_size(K) bytes exactly (benchmarks/coop_cache relies on it)
    for k in (1, 42, 43, 199):
        body = page(proxy, f"/blob.php?id={k}", f"item:{k}")
        size = len(body.encode())
        want = 8192 + zlib.crc32(b"blob:%d" % k) % 57345
        check(size == want, f"blob.php?id={k}: {size} bytes, want {want}")
        check(list(markers(body)) == [f"item:{k}"], f"blob.php?id={k} markers {markers(body)}")
    check(markers(page(proxy, "/blob.php?id=42", "item:42")) == {"item:42": str(v_item)}, "blob.php marker")
    # blob.php?...&size=small: 2-8 KiB (the HYBCC small-page experiment)
    for k in (1, 2, 3):
        body = page(proxy, f"/blob.php?id={k}&size=small", f"item:{k}")
        want = 2048 + zlib.crc32(b"blob:%d" % k) % 6144
        check(len(body.encode()) == want, f"blob.php?id={k}&size=small: {len(body.encode())} bytes, want {want}")
    body = page(proxy, "/category.php?id=3&page=0", "category:3")
    check(list(markers(body)) == ["category:3"], "category.php marker")
    body = page(proxy, "/category.php?id=3", "category:3")
    body = page(proxy, "/user.php?id=7", "user:7")
    check(list(markers(body)) == ["user:7"], "user.php marker")
    v_user7 = int(markers(body)["user:7"])
    body = page(proxy, "/index.php", "categories")
    check(body.count('href="category.php?id=') == 20, "index.php lists 20 categories")
    page(proxy, "/", "categories")
    print("pages through the proxy: ok")

    # A bid, posted to the app node.
    v_seller = int(markers(page(proxy, f"/user.php?id={seller}", f"user:{seller}"))[f"user:{seller}"])
    item_cat = None
    for c in range(1, 21):
        if 'href="item.php?id=42"' in page(proxy, f"/category.php?id={c}&page=0", f"category:{c}") or \
                'href="item.php?id=42"' in page(proxy, f"/category.php?id={c}&page=1", f"category:{c}"):
            item_cat = c
            break
    check(item_cat is not None, "item 42 is in no category page")
    v_cat = int(markers(page(proxy, f"/category.php?id={item_cat}", f"category:{item_cat}"))[f"category:{item_cat}"])
    bidder = 7 if seller != 7 else 8
    status, headers, text = request(app, "POST", "/bid.php", {"item": "42", "user": str(bidder), "amount": "12345.67"})
    check(status == 200, f"POST bid.php: {status} {text!r}")
    got = dict(line.split("=") for line in text.split())
    want = {"item:42": v_item + 1, f"category:{item_cat}": v_cat + 1, f"user:{bidder}": None,
            f"user:{seller}": v_seller + 1}
    check(set(got) == set(want), f"bid.php versions {got}, want keys {list(want)}")
    for k, v in want.items():
        if v is not None:
            check(int(got[k]) == v, f"bid.php: {k}={got[k]}, want {v}")
    if bidder == 7:
        check(int(got["user:7"]) == v_user7 + 1, f"bid.php: user:7={got['user:7']}, want {v_user7 + 1}")
    check(set(headers.get("tierce-invalidate", "").split()) == set(want),
          f"Tierce-Invalidate is {headers.get('tierce-invalidate')!r}")
    body = page(proxy, "/item.php?id=42", "item:42")
    check(int(markers(body)["item:42"]) == v_item + 1, f"item.php after the bid: {markers(body)}")
    check("12345.67" in body, "item.php after the bid does not show the new bid")
    body = page(proxy, "/blob.php?id=42", "item:42")
    check(int(markers(body)["item:42"]) == v_item + 1 and "12345.67" in body, "blob.php after the bid")
    check(len(body.encode()) == 8192 + zlib.crc32(b"blob:42") % 57345, "blob.php size after the bid")

    # An edit that moves the item to another category.
    other = item_cat % 20 + 1
    status, headers, text = request(app, "POST", "/edit.php",
                                    {"item": "42", "name": "Edited item", "description": "new text",
                                     "category": str(other)})
    check(status == 200, f"POST edit.php: {status} {text!r}")
    got = dict(line.split("=") for line in text.split())
    check(int(got["item:42"]) == v_item + 2 and f"category:{item_cat}" in got and f"category:{other}" in got
          and f"user:{seller}" in got, f"edit.php versions {got}")
    body = page(proxy, "/item.php?id=42", "item:42")
    check(int(markers(body)["item:42"]) == v_item + 2 and "Edited item" in body, "item.php after the edit")
    print("updates: ok")

    # Bad inputs.
    bad = [("GET", "/item.php", None, 400), ("GET", "/item.php?id=abc", None, 400),
           ("GET", "/blob.php?id=abc", None, 400),
           ("GET", "/blob.php?id=1&size=huge", None, 400), ("GET", "/blob.php?id=9999999", None, 404),
           ("POST", "/blob.php?id=1", {"a": "b"}, 405),
           ("GET", "/item.php?id=9999999", None, 404), ("GET", "/category.php?id=999", None, 404),
           ("GET", "/category.php?id=1&page=x", None, 400), ("GET", "/user.php?id=-1", None, 400),
           ("GET", "/user.php?id=99999", None, 404), ("GET", "/bid.php?item=1&user=1&amount=1", None, 405),
           ("GET", "/edit.php", None, 405), ("POST", "/bid.php", {"item": "1", "user": "2"}, 400),
           ("POST", "/bid.php", {"item": "1", "user": "2", "amount": "abc"}, 400),
           ("POST", "/bid.php", {"item": "99999", "user": "2", "amount": "1"}, 404),
           ("POST", "/bid.php", {"item": "1", "user": "99999", "amount": "1"}, 404),
           ("POST", "/edit.php", {"item": "1", "name": "x"}, 400),
           ("POST", "/edit.php", {"item": "1", "name": "x", "description": "y", "category": "999"}, 404),
           ("POST", "/item.php?id=1", {"a": "b"}, 405)]
    for method, path, form, want_status in bad:
        for port in (app, proxy):
            status, _, text = request(port, method, path, form)
            check(status == want_status, f"{method} {path} {form}: {status}, want {want_status} ({text!r})")
            check("<b>" not in text and "Warning" not in text and "Notice" not in text,
                  f"{method} {path}: PHP message in {text!r}")
    print("bad inputs: ok")
    return st


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--keep", action="store_true", help="keep the state directory")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (private MariaDB and httpd as www-data)")
        return 77
    for exe in ("/usr/sbin/apache2", "/usr/sbin/mariadbd", "/usr/lib/apache2/modules/libphp8.2.so"):
        if not os.path.exists(exe):
            print(f"SKIP: {exe} missing (tools/deps.sh installs it)")
            return 77
    if not any(os.access(os.path.join(a.build, p), os.X_OK)
               for p in ("sample/tierce-datagen", "sample/datagen/tierce-datagen")):
        print(f"SKIP: tierce-datagen not built under {a.build}/sample")
        return 77
    d = tempfile.mkdtemp(prefix="tierce-stack.", dir="/tmp")
    st = None
    rc = 0
    try:
        st = run(os.path.abspath(a.build), d)
    except TestFailure as e:
        print(f"FAIL: {e}")
        rc = 1
    except Exception as e:  # noqa: BLE001 — report anything as a failure, still clean up
        print(f"FAIL: unexpected {type(e).__name__}: {e}")
        rc = 1
    finally:
        r = subprocess.run([CLUSTER, "down", "--dir", d], capture_output=True, text=True)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            print(f"FAIL: tierce-cluster down exited {r.returncode}")
            rc = 1
        left = left_processes(d)
        if left:
            print("FAIL: processes left after down:\n  " + "\n  ".join(left))
            rc = 1
        if rc != 0 or a.keep:
            print(f"state directory kept: {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    if rc == 0:
        print("PASS: stack without Tierce modules")
    return rc


if __name__ == "__main__":
    sys.exit(main())
