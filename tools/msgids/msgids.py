#!/usr/bin/env python3
"""The registry of Tierce's log and error message ids (PREFIX + four digits, e.g. LOCKD0031),
in the manner of httpd's APLOGNO: every id the product's C/C++ sources print is listed in
docs/msgids.txt with what it means, and the check (ctest `msgids`) holds the sources to it:

  1. every id printed is registered, and every registered id is printed somewhere;
  2. an id is written one way: PREFIX####, then a space (or the end of its string literal, the
     message going on in the next piece), never "PREFIX####:" or "PREFIX####-";
  3. one id, one condition: when the sites of an id print different texts, the registry says
     that this is one condition seen in several ways (`family`), or the check fails — a new
     message that reuses an old id by mistake is caught;
  4. known prefixes only (the component's own: the list below).

  msgids.py --root DIR            check (exit 1 with the problems)
  msgids.py --root DIR --next P   the next free number of prefix P (allocate from here)
  msgids.py --root DIR --add      append the unregistered ids to the registry (then describe them)
  msgids.py --self-test           proves each rule catches its violation
"""
import argparse
import collections
import os
import re
import sys
import tempfile

PREFIXES = {
    "ADT": "ftp/adts (the ADTS data transfer)",
    "APPVER": "mod_appversion",
    "BINLOGD": "tierce-binlogd (invalidation from the change log)",
    "COH": "coherence/ (homes, cache logic, pool, cooperative cache)",
    "DLM": "dlm/ (the lock engine)",
    "FAB": "fabric/",
    "FTPD": "tierce-ftpd",
    "LOCKD": "tierce-lockd",
    "MEMD": "tierce-memd",
    "PHPEXT": "php_ext (the tierce PHP extension)",
    "RCACHE": "mod_rcache",
}
SOURCE_EXT = (".cc", ".h", ".c", ".cpp")
SKIP_DIRS = {"tests", "benchmarks", ".git", "docs"}
REGISTRY = os.path.join("docs", "msgids.txt")
LIT = re.compile(r'"([A-Z]{2,8})([0-9]{4})((?:[^"\\]|\\.)*)"')


def sources(root):
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        top = rel.split(os.sep)[0]
        if top in SKIP_DIRS or top.startswith("build"):
            dirs[:] = []
            continue
        dirs.sort()
        for f in sorted(files):
            if f.endswith(SOURCE_EXT):
                yield os.path.join(d, f)


def lead(text):
    """The fixed words a site prints after its id: up to the first format directive, at most
    four words, lower case; '' when the literal holds the id only."""
    t = re.split(r"%|\\n", text.strip())[0]
    return " ".join(t.lower().split()[:4]).rstrip(":,;.( ")


def collect(root):
    """{id: [(file:line, text)]}, and problems of form (rule 2) and prefix (rule 4)."""
    uses = collections.defaultdict(list)
    problems = []
    for path in sources(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                for m in LIT.finditer(line):
                    prefix, num, text = m.groups()
                    where = "%s:%d" % (os.path.relpath(path, root), n)
                    mid = prefix + num
                    if prefix not in PREFIXES:
                        if prefix in ("TEST",):
                            continue
                        problems.append("%s: %s: unknown prefix %s (known: %s)"
                                        % (where, mid, prefix, ", ".join(sorted(PREFIXES))))
                        continue
                    if text and not text.startswith(" "):
                        problems.append("%s: %s is followed by %r: write 'ID text' (a space)"
                                        % (where, mid, text[:1]))
                    uses[mid].append((where, text))
    return uses, problems


def read_registry(root):
    """{id: (family, description)}, and problems (duplicates, malformed lines)."""
    reg, problems = {}, []
    path = os.path.join(root, REGISTRY)
    if not os.path.exists(path):
        return reg, ["%s is missing" % REGISTRY]
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            s = line.rstrip("\n")
            if not s.strip() or s.startswith("#"):
                continue
            m = re.match(r"^([A-Z]{2,8}[0-9]{4})\s+(family\s+)?(\S.*)$", s)
            if not m:
                problems.append("%s:%d: malformed (want: ID [family] description): %r" % (REGISTRY, n, s))
                continue
            mid, fam, desc = m.group(1), bool(m.group(2)), m.group(3)
            if mid in reg:
                problems.append("%s:%d: %s registered twice" % (REGISTRY, n, mid))
            reg[mid] = (fam, desc)
    return reg, problems


def check(root):
    uses, problems = collect(root)
    reg, rp = read_registry(root)
    problems += rp
    for mid in sorted(uses):
        if mid not in reg:
            problems.append("%s (%s) is not in %s: register it (msgids.py --add, then describe it)"
                            % (mid, uses[mid][0][0], REGISTRY))
            continue
        leads = sorted({lead(t) for _, t in uses[mid] if lead(t)})
        if len(leads) > 1 and not reg[mid][0]:
            problems.append("%s prints %d different messages (%s): one id, one condition — give "
                            "the new one its own id (msgids.py --next %s), or mark the registry "
                            "line 'family' if they are one condition seen in several ways"
                            % (mid, len(leads), "; ".join("%r" % l for l in leads[:4]),
                               re.match(r"[A-Z]+", mid).group(0)))
    for mid in sorted(set(reg) - set(uses)):
        problems.append("%s is registered but printed nowhere: remove it from %s" % (mid, REGISTRY))
    return problems, uses, reg


def next_free(uses, reg, prefix):
    taken = {int(m[len(prefix):]) for m in set(uses) | set(reg)
             if m.startswith(prefix) and m[len(prefix):].isdigit()}
    return "%s%04d" % (prefix, (max(taken) + 1) if taken else 1)


def add(root, uses, reg):
    path = os.path.join(root, REGISTRY)
    new = [m for m in sorted(uses) if m not in reg]
    with open(path, "a", encoding="utf-8") as f:
        for mid in new:
            text = next((t for _, t in uses[mid] if t.strip()), "").strip()
            f.write("%s %s\n" % (mid, text.replace("\\\"", "\"") or "(describe it)"))
    return new


def self_test():
    failures = []

    def run(files, registry, expect):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "docs"))
            for name, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, name)) or root, exist_ok=True)
                with open(os.path.join(root, name), "w") as f:
                    f.write(text)
            if registry is not None:
                with open(os.path.join(root, REGISTRY), "w") as f:
                    f.write(registry)
            problems, _, _ = check(root)
            joined = "\n".join(problems)
            if expect is None:
                if problems:
                    failures.append("clean tree reported: " + joined)
            elif expect not in joined:
                failures.append("expected %r in: %s" % (expect, joined or "(nothing)"))

    good = 'log("MEMD0001 serving on " + uri);\nthrow E("MEMD0002 cannot bind %s");\n'
    reg = "MEMD0001 memd serves\nMEMD0002 cannot bind\n"
    run({"agents/memd/a.cc": good}, reg, None)
    run({"agents/memd/a.cc": good}, "MEMD0001 memd serves\n", "MEMD0002 (agents/memd/a.cc:2) is not in")
    run({"agents/memd/a.cc": good}, reg + "MEMD0003 gone\n", "MEMD0003 is registered but printed nowhere")
    run({"agents/memd/a.cc": good}, reg + "MEMD0001 again\n", "MEMD0001 registered twice")
    run({"agents/memd/a.cc": 'log("MEMD0001: serving");\n'}, "MEMD0001 x\n", "is followed by ':'")
    run({"agents/memd/a.cc": 'log("XYZ0001 hello");\n'}, "", "unknown prefix XYZ")
    two = 'log("MEMD0001 serving on " + u);\nlog("MEMD0001 cannot open the pool");\n'
    run({"agents/memd/a.cc": two}, "MEMD0001 serving\n", "MEMD0001 prints 2 different messages")
    run({"agents/memd/a.cc": two}, "MEMD0001 family serving, or not\n", None)
    run({"agents/memd/a.cc": good}, None, "docs/msgids.txt is missing")
    run({"agents/memd/a.cc": good}, reg + "not an id line\n", "malformed")
    # Tests are not product: their ids are not held to the registry.
    run({"agents/memd/a.cc": good, "tests/x.cc": 'log("MEMD0999 test");\n'}, reg, None)
    if failures:
        print("msgids self-test FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("msgids self-test: every rule catches its violation (11 cases)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--next", metavar="PREFIX")
    ap.add_argument("--add", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    root = os.path.abspath(a.root)
    problems, uses, reg = check(root)
    if a.next:
        if a.next not in PREFIXES:
            sys.exit("unknown prefix %s (known: %s)" % (a.next, ", ".join(sorted(PREFIXES))))
        print(next_free(uses, reg, a.next))
        return 0
    if a.add:
        new = add(root, uses, reg)
        print("added %d id(s) to %s: describe them" % (len(new), REGISTRY))
        return 0
    if problems:
        print("msgids: %d problem(s):\n  %s" % (len(problems), "\n  ".join(problems)))
        return 1
    n_sites = sum(len(v) for v in uses.values())
    fams = sum(1 for v in reg.values() if v[0])
    print("msgids: %d ids at %d sites, all registered in %s, one condition each (%d families)"
          % (len(uses), n_sites, REGISTRY, fams))
    return 0


if __name__ == "__main__":
    sys.exit(main())
