#!/usr/bin/env python3
"""Holds every folder of the tree to its floor (docs/ARCHITECTURE.md, "Floors and folders").

A source file may include its own folder's headers and those of folders on LOWER floors, never a
folder on its own floor or above: `fabric/` knows nothing of locks, `ftp_adts/server` does not
borrow memd's code. Only project includes are checked: `#include "X/..."` where X is one of the
tree's top-level folders; system and third-party headers are left alone.

  check-layering.py [--root DIR]      exit 0: clean; 1: violations (each printed with file:line);
                                      2: a folder the table does not know (add it below)
  check-layering.py --self-test       checks the checker on a small tree with a known violation
"""
import argparse
import os
import re
import sys
import tempfile

# Floor of each folder: lowest first. A folder is the longest matching path prefix.
FLOORS = [
    ["base"],
    ["fabric", "sqldeps"],
    ["cluster"],
    ["coherence", "dlm", "ftp_adts/ftp", "ftp_adts/adts"],
    ["agents/memd", "agents/lockd", "agents/binlogd", "mod_rcache", "mod_appversion", "php_ext", "ftp_adts/server",
     "ftp_adts/client", "tools/tierce-check", "tools/tierce-fabric", "tools/tierce-lock",
     "tools/tierce-wanem", "sample"],
    ["tests", "benchmarks"],  # may include anything
]
FLOOR = {folder: i for i, names in enumerate(FLOORS) for folder in names}
TOP = {f.split("/")[0] for f in FLOOR}
SKIP_DIRS = {".git", "__pycache__", "node_modules"}
SOURCE = (".h", ".hpp", ".cc", ".cpp", ".c")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(path):
    """The table's folder holding `path` (a/b/c.h -> the longest prefix in FLOOR), or None."""
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        cand = "/".join(parts[:n])
        if cand in FLOOR:
            return cand
    return None


def check(root):
    violations, unknown = [], set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")]
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        if rel_dir == ".":
            continue
        for name in filenames:
            if not name.endswith(SOURCE):
                continue
            rel = f"{rel_dir}/{name}"
            me = folder_of(rel)
            if me is None:
                if rel.split("/")[0] in TOP:
                    unknown.add(rel_dir)
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1).split("/")[0] not in TOP:
                        continue
                    target = folder_of(m.group(1))
                    if target is None:
                        unknown.add(os.path.dirname(m.group(1)))
                        continue
                    if target == me or FLOOR[me] == len(FLOORS) - 1:
                        continue
                    if FLOOR[target] >= FLOOR[me]:
                        where = "a floor above" if FLOOR[target] > FLOOR[me] else "its own floor"
                        violations.append(f"{rel}:{lineno}: {me} (floor {FLOOR[me]}) includes "
                                          f"\"{m.group(1)}\" of {target}, on {where} "
                                          f"(floor {FLOOR[target]})")
    return violations, sorted(unknown)


def run(root, out=sys.stdout):
    violations, unknown = check(root)
    for v in violations:
        print(v, file=out)
    for u in unknown:
        print(f"{u}: a folder the floor table does not know: add it to FLOORS in "
              f"tools/check-layering/check-layering.py (and docs/ARCHITECTURE.md)", file=out)
    if violations:
        print(f"layering: {len(violations)} include(s) against the floors "
              f"(docs/ARCHITECTURE.md: a folder links only the floors below it)", file=out)
        return 1
    if unknown:
        return 2
    print(f"layering: clean ({len(FLOOR)} folders on {len(FLOORS)} floors)", file=out)
    return 0


def self_test():
    import io
    with tempfile.TemporaryDirectory() as d:
        def put(path, text):
            os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(d, path), "w") as f:
                f.write(text)
        put("base/fd.h", "#include <unistd.h>\n")
        put("fabric/socket.h", '#include "base/fd.h"\n#include "fabric/log.h"\n')
        put("agents/lockd/main.cc", '#include "fabric/socket.h"\n#include "ext/standard/x.h"\n')
        put("tests/t.cc", '#include "agents/lockd/main.cc"\n')
        buf = io.StringIO()
        ok_clean = run(d, buf) == 0
        put("agents/lockd/main.cc", '#include "agents/memd/daemon.h"\n')  # same floor
        put("base/log.h", '#include "fabric/socket.h"\n')                  # a floor above
        buf2 = io.StringIO()
        code = run(d, buf2)
        text = buf2.getvalue()
        ok_bad = (code == 1 and "agents/lockd/main.cc:1: agents/lockd" in text and
                  "its own floor" in text and "base/log.h:1: base" in text and "a floor above" in text)
        put("newfolder/x.h", "")
        put("agents/lockd/main.cc", '#include "base/fd.h"\n')
        put("base/log.h", "")
        put("fabric/new/y.h", "")  # inside fabric: fine
        put("agents/newd/main.cc", '#include "base/fd.h"\n')  # unknown agents/ folder
        buf3 = io.StringIO()
        ok_unknown = run(d, buf3) == 2 and "agents/newd" in buf3.getvalue()
    for name, ok, out in (("clean tree passes", ok_clean, buf.getvalue()),
                          ("violations are reported", ok_bad, buf2.getvalue()),
                          ("unknown folders are reported", ok_unknown, buf3.getvalue())):
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
        if not ok:
            print(out)
    return 0 if ok_clean and ok_bad and ok_unknown else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    return run(os.path.abspath(a.root))


if __name__ == "__main__":
    sys.exit(main())
