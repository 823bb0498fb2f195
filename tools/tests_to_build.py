#!/usr/bin/env python3
"""Prints the build outputs (ninja targets, relative to the build directory) that the tests ctest
would run need and `all` does not build: the executables and files under the build directory that
their commands name. For a build configured with -DTIERCE_TESTS_ON_DEMAND=ON (tests/ is not in
`all`), CI's release phase builds `all` and then these, instead of every test of the tree.

usage: tests_to_build.py BUILD_DIR [ctest selection arguments, e.g. -E REGEX]

A test whose executable is not named on its command line (found by a script some other way) is
not covered: it fails in that phase with its file missing, never passes or skips by mistake."""
import json
import os
import subprocess
import sys


def ninja_outputs(build):
    out = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"], check=True,
                         capture_output=True, text=True).stdout
    return {line.rsplit(": ", 1)[0] for line in out.splitlines() if ": " in line}


def tests(build, select):
    out = subprocess.run(["ctest", "--show-only=json-v1", *select], cwd=build, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out).get("tests", [])


def needed(build, select):
    build = os.path.realpath(build)
    outputs = ninja_outputs(build)
    want = set()
    for t in tests(build, select):
        for arg in t.get("command", []):
            # An argument may be a path or an option with one (--checker=PATH).
            for part in (arg, arg.split("=", 1)[-1]):
                if not part.startswith(build + os.sep):
                    continue
                rel = os.path.relpath(part, build)
                if rel in outputs:
                    want.add(rel)
    return sorted(want)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for target in needed(sys.argv[1], sys.argv[2:]):
        print(target)
