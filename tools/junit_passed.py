#!/usr/bin/env python3
"""Prints the names of the tests that ran and passed in a ctest JUnit report (--output-junit):
status "run" with no <failure> or <error> inside. Skipped tests (status "notrun") and failed
ones are left out, so a phase that reads this list runs them itself."""
import sys
import xml.etree.ElementTree as ET


def passed(path):
    out = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        if tc.get("status") != "run":
            continue
        if tc.find("failure") is not None or tc.find("error") is not None:
            continue
        out.append(tc.get("name"))
    return sorted(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: junit_passed.py REPORT.xml")
    for name in passed(sys.argv[1]):
        print(name)
