#!/usr/bin/env python3
"""Prints the build outputs (ninja targets, relative to the build directory) that the tests ctest
would run need and `all` does not build: the executables and files under the build directory that
their commands name. For a build configured with -DTIERCE_TESTS_ON_DEMAND=ON (tests/ is not in
`all`), CI's release phase builds `all` and then these, instead of every test of the tree.

usage: tests_to_build.py BUILD_DIR [ctest selection arguments, e.g. -E REGEX]

A test whose executable is not named on its command line (found by a script some other way) is
not covered: it fails in that phase with its file missing, never passes or skips by mistake.

ctest's JSON leaves out the command of a test whose executable does not exist yet (which is the
point here), so the commands are read from the generated CTestTestfile.cmake files; the JSON
gives which tests the selection keeps."""
import json
import os
import re
import subprocess
import sys

ADD_TEST = re.compile(r"^add_test\(\[=\[(.+?)\]=\]\s+(.*)\)\s*$")
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def ninja_outputs(build):
    out = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"], check=True,
                         capture_output=True, text=True).stdout
    return {line.rsplit(": ", 1)[0] for line in out.splitlines() if ": " in line}


def tests(build, select):
    out = subprocess.run(["ctest", "--show-only=json-v1", *select], cwd=build, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out).get("tests", [])


def commands(build):
    """{test name: [command and arguments]} from every CTestTestfile.cmake under build."""
    out = {}
    for root, _, files in os.walk(build):
        if "CTestTestfile.cmake" not in files:
            continue
        with open(os.path.join(root, "CTestTestfile.cmake")) as f:
            for line in f:
                m = ADD_TEST.match(line.strip())
                if m:
                    out[m.group(1)] = QUOTED.findall(m.group(2))
    return out


def needed(build, select):
    build = os.path.realpath(build)
    outputs = ninja_outputs(build)
    argv = commands(build)
    want = set()
    for t in tests(build, select):
        for arg in t.get("command") or argv.get(t["name"], []):
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
