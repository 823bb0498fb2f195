"""Every row change in the binlogs was invalidated (issue 31): reads the cluster's binlogs with
MariaDB's own decoder (mariadb-binlog --verbose: independent of tierce-binlogd's row decoder),
renders the sample's [[table]] templates (tiercelab.cluster.BINLOG_TABLES) with each row's before
and after values, and compares them with tierce-binlogd's audit file (nodes/app1/run/
binlogd.audit: "ACKED_NS GTID ROWS NAMES|*" per invalidated transaction; GTID "@POSITION" is an
invalidate-all covering every transaction up to POSITION). A transaction is covered when its line
names every expected name, or says "*", or a later "@POSITION" line reaches it. Transactions in
binlogs purged meanwhile cannot be read and are not counted.

  audit(d) -> {"transactions": N, "rows": R, "by_names": A, "by_invalidate_all": B,
               "missing": [(gtid, [names not invalidated])...]}
"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools"))
from tiercelab import cluster as tcluster  # noqa: E402

GTID = re.compile(r"\bGTID (\d+)-(\d+)-(\d+)\b")
STMT = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) `([^`]*)`\.`([^`]*)`")
VALUE = re.compile(r"^###   @(\d+)=(.*)$")


def column_names(d):
    """{table: [column names by ordinal]} of the sample's database."""
    out = tcluster.db_sql(d, "SELECT TABLE_NAME, ORDINAL_POSITION, COLUMN_NAME FROM "
                             f"information_schema.COLUMNS WHERE TABLE_SCHEMA='{tcluster.DB_NAME}' "
                             "ORDER BY TABLE_NAME, ORDINAL_POSITION")
    cols = {}
    for line in out.splitlines()[1:]:
        t, _, c = line.split("\t")
        cols.setdefault(t.lower(), []).append(c.lower())
    return cols


def value_of(raw):
    """A value as mariadb-binlog prints it: NULL, 'quoted' (with \\ escapes), or a number (an
    unsigned column's negative reading is followed by its unsigned value in parentheses)."""
    raw = raw.strip()
    if raw == "NULL":
        return None
    if raw.startswith("'"):
        body = raw[1:raw.rindex("'")] if raw.count("'") >= 2 else raw[1:]
        return re.sub(r"\\(.)", r"\1", body)
    m = re.match(r"^(-?\d+)\s+\((\d+)\)", raw)
    if m:
        return m.group(2)
    return raw.split(" ")[0]


def read_binlogs(d):
    """[(gtid, [(op, db, table, before {n: v}, after {n: v})])] in log order."""
    st = tcluster.load_state(d)
    files = sorted(f for f in glob.glob(os.path.join(st["mariadb"]["dir"], "db", "binlog.[0-9]*")))
    if not files:
        return []
    out = subprocess.run(["mariadb-binlog", "--no-defaults", "--verbose", "--base64-output=DECODE-ROWS",
                          *files], capture_output=True, text=True, check=True).stdout
    txs, cur, row, part = [], None, None, None
    for line in out.splitlines():
        g = GTID.search(line) if line.startswith("#") and not line.startswith("###") else None
        if g:
            cur = (f"{g.group(1)}-{g.group(2)}-{g.group(3)}", [])
            txs.append(cur)
            continue
        m = STMT.match(line)
        if m and cur is not None:
            op = {"INSERT INTO": "insert", "UPDATE": "update", "DELETE FROM": "delete"}[m.group(1)]
            row = [op, m.group(2), m.group(3), {}, {}]
            cur[1].append(row)
            part = 4 if op == "insert" else 3
            continue
        if line.startswith("### SET") and row is not None:
            part = 4
            continue
        if line.startswith("### WHERE") and row is not None:
            part = 3
            continue
        v = VALUE.match(line)
        if v and row is not None:
            row[part][int(v.group(1))] = value_of(v.group(2))
    return txs


def expected(row, cols):
    op, db, table, before, after = row
    rules = dict(tcluster.BINLOG_TABLES)
    if db.lower() != tcluster.DB_NAME or table.lower() not in rules:
        return None  # not watched, or no template: the agent invalidates all for those
    names = set()
    for image in (before, after):
        if not image:
            continue
        byname = {cols[table.lower()][n - 1]: val for n, val in image.items()}
        for t in rules[table.lower()]:
            parts = re.split(r"(\{[^}]*\})", t)
            vals = [byname.get(p[1:-1].lower()) if p.startswith("{") else p for p in parts]
            if any(x is None for x in vals):
                continue  # NULL: no name
            names.add("".join(vals))
    return names


def read_audit(d):
    path = os.path.join(d, "nodes", "app1", "run", "binlogd.audit")
    lines = {}
    covers = []  # (domain, seq) reached by an invalidate-all
    if not os.path.exists(path):
        return lines, covers
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) < 3:
                continue
            if p[1].startswith("@"):
                for g in p[1][1:].split(","):
                    if g:
                        dom, _, seq = g.split("-")
                        covers.append((int(dom), int(seq)))
                continue
            names = p[3:]
            prev = lines.get(p[1])
            lines[p[1]] = "*" if "*" in names or prev == "*" else set(names) | (prev or set())
    return lines, covers


def audit(d):
    cols = column_names(d)
    txs = read_binlogs(d)
    lines, covers = read_audit(d)
    res = {"transactions": 0, "rows": 0, "by_names": 0, "by_invalidate_all": 0, "missing": []}
    for gtid, rows in txs:
        want, watched = set(), False
        for r in rows:
            e = expected(r, cols)
            if r[1].lower() != tcluster.DB_NAME:
                continue
            watched = True
            res["rows"] += 1
            if e is not None:
                want |= e
        if not watched:
            continue
        res["transactions"] += 1
        got = lines.get(gtid)
        dom, _, seq = gtid.split("-")
        if got == "*" or any(c[0] == int(dom) and c[1] >= int(seq) for c in covers):
            res["by_invalidate_all"] += 1
        elif got is not None and want <= got:
            res["by_names"] += 1
        else:
            res["missing"].append((gtid, sorted(want - (got or set()))))
    return res


if __name__ == "__main__":
    r = audit(os.path.abspath(sys.argv[1]))
    print(f"{r['transactions']} transactions ({r['rows']} rows) in the binlogs: {r['by_names']} "
          f"invalidated by name, {r['by_invalidate_all']} by an invalidate-all, "
          f"{len(r['missing'])} missing")
    for g, names in r["missing"][:20]:
        print(f"  MISSING {g}: {' '.join(names) or '(no line)'}")
    sys.exit(1 if r["missing"] else 0)
