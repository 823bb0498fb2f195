#!/usr/bin/env python3
"""smoke_check.py -- runs a benchmark's quick mode and checks that what it printed and wrote is sane.

A benchmark's smoke test is not a test of speed (benchmarks never assert on time), but it must
not pass on a benchmark that measured nothing: every number it reports must be there and
positive, and its table's target lines must be printed.

    smoke_check.py [--csv FILE:COL,COL...] [--json FILE:KEY,KEY...] [--nonempty FILE:KEY]
                   [--expect REGEX] ... -- COMMAND [ARG...]

  --csv FILE:COLS     FILE has at least one row; in every row each COL is a finite number > 0,
                      and an `error` column, if there is one, is empty
  --json FILE:KEYS    every value under a key named KEY anywhere in FILE (a number, or the numbers
                      of a list) is a finite number > 0, and there is at least one
  --nonempty FILE:KEY the top-level KEY of the JSON FILE is a non-empty list or object
  --expect REGEX      COMMAND's output (stdout and stderr) matches REGEX (multiline)

Exit 0 when COMMAND exited 0 and every check passed, 1 otherwise (each failure is printed).
"""
import argparse
import csv
import json
import math
import re
import subprocess
import sys


def positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def check_csv(spec, problems):
    path, _, cols = spec.partition(":")
    cols = [c for c in cols.split(",") if c]
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        problems.append(f"{path}: {e.strerror}")
        return
    if not rows:
        problems.append(f"{path}: no rows")
        return
    for c in cols:
        if c not in rows[0]:
            problems.append(f"{path}: no column {c!r} (columns: {', '.join(rows[0])})")
            return
    for i, row in enumerate(rows, 2):
        if row.get("error"):
            problems.append(f"{path}:{i}: error {row['error']!r}")
        for c in cols:
            try:
                v = float(row[c])
            except (TypeError, ValueError):
                problems.append(f"{path}:{i}: {c} = {row[c]!r} is not a number")
                continue
            if not positive(v):
                problems.append(f"{path}:{i}: {c} = {row[c]} (must be > 0)")
    print(f"smoke_check: {path}: {len(rows)} rows, {', '.join(cols) or 'no columns'} checked")


def load_json(path, problems):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        problems.append(f"{path}: {e}")
        return None


def values_under(node, key, where=""):
    """(place, value) of every value under a key named `key`, anywhere in node."""
    if isinstance(node, dict):
        for k, v in node.items():
            place = f"{where}/{k}"
            if k == key:
                for i, x in enumerate(v if isinstance(v, list) else [v]):
                    yield (place if not isinstance(v, list) else f"{place}[{i}]"), x
            else:
                yield from values_under(v, key, place)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from values_under(v, key, f"{where}[{i}]")


def check_json(spec, problems):
    path, _, keys = spec.partition(":")
    data = load_json(path, problems)
    if data is None:
        return
    for key in [k for k in keys.split(",") if k]:
        found = list(values_under(data, key))
        if not found:
            problems.append(f"{path}: no value under a key {key!r}")
        for place, v in found:
            if not positive(v):
                problems.append(f"{path}: {place} = {v!r} (must be a number > 0)")
        print(f"smoke_check: {path}: {len(found)} values of {key!r} checked")


def check_nonempty(spec, problems):
    path, _, key = spec.partition(":")
    data = load_json(path, problems)
    if data is None:
        return
    v = data.get(key) if isinstance(data, dict) else None
    if not isinstance(v, (list, dict)) or not v:
        problems.append(f"{path}: {key!r} is missing or empty")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", action="append", default=[])
    ap.add_argument("--json", action="append", default=[])
    ap.add_argument("--nonempty", action="append", default=[])
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("the benchmark's command is required after --")
    problems = []
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace")
    sys.stdout.write(r.stdout)
    if r.returncode == 77:
        return 77  # the benchmark skipped itself (a missing package or privilege), and said why
    if r.returncode != 0:
        problems.append(f"{cmd[0]} exited {r.returncode}")
    else:
        for rx in a.expect:
            if not re.search(rx, r.stdout, re.MULTILINE):
                problems.append(f"the output does not match {rx!r}")
        for spec in a.csv:
            check_csv(spec, problems)
        for spec in a.json:
            check_json(spec, problems)
        for spec in a.nonempty:
            check_nonempty(spec, problems)
    for p in problems:
        print(f"smoke_check: FAIL: {p}")
    if not problems:
        print("smoke_check: every number reported is there and positive")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
