#!/usr/bin/env python3
"""Fails when wanem_test has a test case that CMakeLists.txt does not register as wanem_<case>
(a case left out of the list would never run, and nothing would say so).
Usage: cases_registered.py WANEM_TEST CASE..."""
import subprocess
import sys


def main():
    binary, registered = sys.argv[1], set(sys.argv[2:])
    out = subprocess.run([binary, "--list_content"], capture_output=True, text=True)
    cases = {line.strip().rstrip("*") for line in (out.stdout + out.stderr).splitlines()
             if line.strip() and not line.startswith(" " * 4)}
    if not cases:
        print(f"cases_registered: {binary} --list_content listed nothing:\n{out.stdout}{out.stderr}")
        return 1
    missing, stale = sorted(cases - registered), sorted(registered - cases)
    for c in missing:
        print(f"cases_registered: test case {c} is not in tests/ftp/wanem/CMakeLists.txt: it never runs")
    for c in stale:
        print(f"cases_registered: {c} is registered but wanem_test has no such case")
    print(f"cases_registered: {len(cases)} cases, {len(registered)} registered")
    return 1 if missing or stale else 0


if __name__ == "__main__":
    sys.exit(main())
