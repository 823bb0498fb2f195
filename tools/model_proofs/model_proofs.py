#!/usr/bin/env python3
"""The long spin verifications: run by hand, recorded, and checked current on every CI run.

The large positive model checks (the coherence fence's and the arbiter's crash, pause and fresh
configurations, the lock manager's restart and client-death suites: ~13 minutes of CPU) do not
fit the CI budget (issue 30, docs/testing.md). A verification's outcome depends only on its
inputs: the model directory (every *.pml and check.sh), the check's arguments and spin's version.
So each is run by hand and recorded in tests/model_proofs.txt with a digest of those inputs, and
CI checks that the record is current: a model changed since its last full verification fails
CI, with the command that verifies and records it again. The negative controls and the smaller
configurations still run in CI (label `model`); `-DTIERCE_MODELS_LONG=ON` registers the long ones
as ctest tests too (label `model_long`).

  model_proofs.py check  --list BUILD/model_proofs.list [--manifest FILE]
  model_proofs.py record --list BUILD/model_proofs.list [--manifest FILE] [-j N] [NAME ...]
  model_proofs.py --self-test

The list is written by CMake (tests/CMakeLists.txt): one line per long check, tab-separated:
its name, its model directory (relative to the source root), then check.sh's arguments.
`record` runs check.sh for each (or for the NAMEs), and replaces their lines in the manifest
only when the verification passed; it never writes a result it did not see.
"""
import argparse
import concurrent.futures
import datetime
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(ROOT, "tests", "model_proofs.txt")
HEADER = """\
# The long spin verifications, each run by hand and recorded by tools/model_proofs/model_proofs.py
# record (never edited by hand). CI's test model_proofs_current fails when a line's digest is not
# the one of today's inputs (the model directory's *.pml and check.sh, the arguments, spin -V).
# name<TAB>digest<TAB>recorded (UTC)<TAB>seconds<TAB>verifications<TAB>states stored (sum)
"""


def read_list(path):
    entries = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) < 2:
                raise SystemExit(f"model_proofs: {path}:{n}: expected NAME<TAB>DIR<TAB>ARGS...")
            # A check without arguments is written "NAME<TAB>DIR<TAB>" (CMake joins an empty list
            # after its tab): no empty argument for it.
            entries.append((parts[0], parts[1], [a for a in parts[2:] if a]))
    return entries


def spin_version(spin):
    try:
        out = subprocess.run([spin, "-V"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"model_proofs: cannot run '{spin} -V' ({e}): install spin "
                         "(apt-get install -y spin)")
    return out.strip()


def digest(root, model_dir, args, spin_v):
    """The inputs a verification's outcome depends on: every *.pml and check.sh of its model
    directory (names and bytes), its arguments, and spin's version."""
    h = hashlib.sha256()
    h.update(b"spin\0" + spin_v.encode() + b"\0args\0" + "\x1f".join(args).encode() + b"\0")
    d = os.path.join(root, model_dir)
    files = sorted(f for f in os.listdir(d) if f.endswith(".pml") or f == "check.sh")
    if not files:
        raise SystemExit(f"model_proofs: {d}: no model files")
    for name in files:
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        h.update(b"file\0" + name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()[:32]


def read_manifest(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            rows[parts[0]] = parts
    return rows


def write_manifest(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(HEADER)
        for name in sorted(rows):
            f.write("\t".join(rows[name]) + "\n")
    os.replace(tmp, path)


def check(args):
    entries = read_list(args.list)
    rows = read_manifest(args.manifest)
    spin_v = spin_version(args.spin)
    stale = []
    for name, model_dir, cargs in entries:
        want = digest(args.root, model_dir, cargs, spin_v)
        row = rows.get(name)
        if row is None:
            stale.append(f"{name}: never recorded")
        elif row[1] != want:
            stale.append(f"{name}: its inputs changed since its last full verification "
                         f"({row[2]}; digest {row[1]}, today's {want})")
        else:
            print(f"current  {name}: verified {row[2]}, {row[3]} s, {row[4]} verifications, "
                  f"{row[5]} states")
    listed = {e[0] for e in entries}
    for name in sorted(set(rows) - listed):
        stale.append(f"{name}: in {args.manifest} but no longer a long check (remove its line by "
                     "recording again, or delete it)")
    if stale:
        for s in stale:
            print(f"STALE    {s}")
        print(f"FAIL: {len(stale)} of the long spin verifications are not current. Verify and "
              f"record them (about 8 minutes on 2 cores, each line replaced only if it passes):\n"
              f"  python3 tools/model_proofs/model_proofs.py record --list {args.list} -j 2",
              file=sys.stderr)
        return 1
    print(f"PASS: the {len(entries)} long spin verifications are recorded for today's models")
    return 0


def run_one(root, name, model_dir, cargs, spin, workroot):
    work = os.path.join(workroot, name)
    os.makedirs(work)
    cmd = [os.path.join(root, model_dir, "check.sh"), "--workdir", work] + cargs
    env = dict(os.environ, SPIN=spin)
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    secs = time.monotonic() - t
    runs, states = 0, 0
    for dirpath, _, files in os.walk(work):
        for fn in files:
            if fn == "pan.out":
                with open(os.path.join(dirpath, fn), encoding="utf-8", errors="replace") as f:
                    m = re.search(r"^\s*(\d+) states, stored", f.read(), re.M)
                if m:
                    runs += 1
                    states += int(m.group(1))
    return p.returncode, secs, runs, states, p.stdout + p.stderr


def record(args):
    entries = read_list(args.list)
    if args.names:
        unknown = set(args.names) - {e[0] for e in entries}
        if unknown:
            raise SystemExit(f"model_proofs: not long checks: {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e[0] in args.names]
    spin_v = spin_version(args.spin)
    rows = read_manifest(args.manifest)
    if not args.names:  # a full record also drops the lines of checks that are no longer long
        listed = {e[0] for e in entries}
        rows = {k: v for k, v in rows.items() if k in listed}
    workroot = tempfile.mkdtemp(prefix="model-proofs.")
    failed = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futs = {pool.submit(run_one, args.root, n, d, a, args.spin, workroot): (n, d, a)
                    for n, d, a in entries}
            for fut in concurrent.futures.as_completed(futs):
                name, model_dir, cargs = futs[fut]
                rc, secs, runs, states, out = fut.result()
                if rc != 0 or runs == 0:
                    failed.append(name)
                    print(f"FAILED   {name} (exit {rc}, {runs} verifications): not recorded\n{out}")
                    continue
                when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
                rows[name] = [name, digest(args.root, model_dir, cargs, spin_v), when,
                              f"{secs:.0f}", str(runs), str(states)]
                print(f"recorded {name}: {secs:.0f} s, {runs} verifications, {states} states")
    finally:
        shutil.rmtree(workroot, ignore_errors=True)
    write_manifest(args.manifest, rows)
    if failed:
        print(f"FAIL: {len(failed)} verification(s) failed: {', '.join(sorted(failed))}",
              file=sys.stderr)
        return 1
    print(f"recorded {len(entries)} verification(s) in {args.manifest}")
    return 0


def self_test():
    """A changed model file, changed arguments or an unrecorded check make `check` fail; a
    failing verification is never recorded; a passing one is."""
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        mdir = os.path.join(tmp, "m")
        os.makedirs(mdir)
        with open(os.path.join(mdir, "a.pml"), "w") as f:
            f.write("init { skip }\n")
        # A stand-in check.sh: passes unless told to fail, writes a pan.out like pan's.
        with open(os.path.join(mdir, "check.sh"), "w") as f:
            f.write('#!/bin/sh\nwd=$2; shift 2\nmkdir -p "$wd/r"\n'
                    'echo "      42 states, stored" > "$wd/r/pan.out"\n'
                    '[ "$1" = fail ] && exit 1\nexit 0\n')
        os.chmod(os.path.join(mdir, "check.sh"), 0o755)
        lst = os.path.join(tmp, "list")
        with open(lst, "w") as f:
            f.write("good\tm\t--prop\tp1\nbad\tm\tfail\n")
        man = os.path.join(tmp, "manifest.txt")
        base = ["--root", tmp, "--list", lst, "--manifest", man, "--spin", "true"]

        def run(*a):
            p = subprocess.run([sys.executable, __file__, *a, *base], capture_output=True,
                               text=True)
            return p.returncode, p.stdout + p.stderr

        def expect(what, cond, out):
            nonlocal ok
            if not cond:
                ok = False
                print(f"self-test FAILED: {what}\n{out}")

        rc, out = run("check")
        expect("an empty manifest fails", rc == 1 and "never recorded" in out, out)
        rc, out = run("record")
        expect("a failing verification is not recorded", rc == 1 and "bad" not in
               read_manifest(man), out)
        expect("a passing one is", read_manifest(man).get("good", [None] * 6)[5] == "42", out)
        with open(lst, "w") as f:
            f.write("good\tm\t--prop\tp1\n")
        rc, out = run("check")
        expect("the recorded check is current", rc == 0 and "current  good" in out, out)
        with open(os.path.join(mdir, "a.pml"), "a") as f:
            f.write("/* changed */\n")
        rc, out = run("check")
        expect("a changed model file fails", rc == 1 and "inputs changed" in out, out)
        rc, out = run("record", "good")
        rc, out = run("check")
        expect("recorded again, it is current", rc == 0, out)
        with open(lst, "w") as f:
            f.write("good\tm\t--prop\tp2\n")
        rc, out = run("check")
        expect("changed arguments fail", rc == 1 and "inputs changed" in out, out)
    print("self-test passed" if ok else "self-test FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", nargs="?", choices=["check", "record"])
    ap.add_argument("names", nargs="*", help="record: only these checks")
    ap.add_argument("--list", help="the list CMake wrote (BUILD/model_proofs.list)")
    ap.add_argument("--manifest", default=MANIFEST)
    ap.add_argument("--root", default=ROOT, help="the source root")
    ap.add_argument("--spin", default=os.environ.get("SPIN", "spin"))
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.command or not args.list:
        ap.error("check or record, with --list")
    return check(args) if args.command == "check" else record(args)


if __name__ == "__main__":
    sys.exit(main())
