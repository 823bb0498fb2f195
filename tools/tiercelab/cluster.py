"""tierce-cluster logic: up / down / restart_node / status, and the fault commands signal_proc /
restart_proc / link, as plain functions (a `run` command or a test can call them in-process).
Errors are raised as ClusterError; the CLI prints them.

State: DIR/cluster.json (written after every process start, so `down` can clean up even when `up`
was killed), DIR/cluster.toml (topology), DIR/secret, DIR/mariadb/, DIR/www/ (the sample PHP),
DIR/nodes/NAME/{conf,logs,run}/.

With app_links = "relay" every ordered pair of app nodes (A, B) gets its own tierce-wanem relay
(DIR/run/wanem-A-B.{sock,log}): A reaches B's memd only through it, so app-to-app traffic can be
cut or slowed (`link`) while proxies still reach every memd directly. App node A then reads its
own topology, DIR/nodes/A/cluster.toml: the shared file with every other app node B's memd
replaced by the relay's tcp:// address (and transport "auto" in a shm cluster, so that A still
reaches its own memd over shm); proxies keep DIR/cluster.toml.

With netns (`up --netns`) every node and MariaDB run in a network namespace of their own with a
real address (tools/tiercelab/netns.py: veth pairs into a bridge in a switch namespace), as on
separate hosts: each node keeps its own copies of the secret and the topology
(DIR/nodes/NAME/etc/), its docroot (app nodes), run/ and logs/; nodes reach each other's memd over
tcp only (with --transport shm a node still reaches its own memd over shm: its topology copy says
transport "auto" and lists a shm:// URI for itself alone). The host reaches them through one veth
pair whose host end (`<tag>-h`, address .1) is the only interface added to the host's namespace.
The namespaces and that interface are in cluster.json (`netns`), so `down` removes them (and
kills anything still inside) even after the launcher crashed. `link A B cut|heal` then drops the
packets between A's and B's addresses with iptables rules inside their namespaces (a real cut);
`delay` needs the tierce-wanem relays (not in netns mode).
"""

import base64
import fcntl
import grp
import hashlib
import http.client
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

from . import netns, procs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DIR = "/tmp/tierce-cluster"
APACHE = "/usr/sbin/apache2"
MODULES = "/usr/lib/apache2/modules"
DB_USER, DB_PASSWORD, DB_NAME = "tierce", "tierce", "rubis"

DEFAULTS = {
    "cache": "tierce",          # tierce | none | mod_cache | mod_cache_memcached
    "ttl": 10,                  # mod_cache entry lifetime, seconds (both mod_cache modes)
    "memcached": None,          # mod_cache_memcached: HOST:PORT of the one memcached all proxies share
    "transport": "shm",         # tcp | shm (written to cluster.toml)
    "scheme": "dependency-lists",
    "app_nodes": 2,
    "proxy_nodes": 2,
    "categories": 20,
    "users": 2000,
    "items": 10000,
    "bids": 100000,
    "seed": 1,
    "build": os.path.join(REPO, "build"),
    "app_load": 0,              # busy-spinning processes per app node
    "app_workers": 48,          # prefork MaxRequestWorkers per app node
    "mod_cache_bytes": (4 << 30) - 4096,  # shmcb size: its maximum (< 4 GiB); only touched as used
    "timeout": 60.0,            # seconds to wait for the whole cluster to answer
    "app_links": "direct",      # direct | relay (a tierce-wanem relay per ordered app-node pair)
    "arena_size": "256M",       # RCacheSize of each proxy (--cache tierce)
    "coop": "off",              # RCacheCoop of the proxies: off | bcc | ccwr | mtacc | hybcc
    "coop_buckets": 65536,      # [coop] buckets of each proxy's memd (its part of the directory)
    "pool_bytes": "64M",        # mtacc/hybcc: memory each app node's memd donates ([pool] bytes)
    "coop_threshold": "16K",    # hybcc: RCacheCoopThreshold
    "coop_pool_slabs": 16,      # mtacc/hybcc: RCacheCoopPoolSlabs (slabs of 1 MiB per httpd child)
    "php": "explicit",          # explicit | auto | linearizable (the tierce PHP extension)
    "netns": False,             # every node (and MariaDB) in its own network namespace
    "arbiter": False,           # [arbiter]: the database drops lost app nodes (docs/coherence.md)
    "binlogd": True,            # --cache tierce: tierce-binlogd on app1 (docs/binlog.md)
    "node_keys": True,          # --cache tierce: a key per node, public keys in the topology
    "agent_socket": True,       # --cache tierce: app httpd children use the writer agent's socket
}
# The arbiter's table and user (--arbiter): a schema of its own beside the application's.
ARBITER_TABLE, ARBITER_USER = "tierce.fence", "tierce_fence"
BINLOG_USER = "tierce_binlog"
BINLOGD = os.path.join("agents", "binlogd", "tierce-binlogd")
# The sample's tables mapped to the names its pages depend on (conf/binlogd.toml's [[table]]s).
BINLOG_TABLES = (("items", ("item:{id}", "category:{category_id}", "user:{seller_id}")),
                 ("bids", ("item:{item_id}", "user:{user_id}")),
                 ("users", ("user:{id}",)),
                 ("categories", ("category:{id}", "categories")))
ARBITER_DROP_AFTER_MS = 3000  # 3 x the lease of the clusters written here
# netns mode: every node has its own address, so the ports are fixed.
NETNS_PORTS = {"httpd": 8000, "memd": 7000, "writer": 7050, "mariadb": 3306,
               "relay": 7400, "writer_relay": 7450}  # relays: + peer's index
IPTABLES = "/usr/sbin/iptables"
# The processes of a node that signal_proc / restart_proc act on. "writer" is an app node's writer
# agent: a second tierce-memd with only [writer] (docs/coherence.md "The writer agent").
PROCS = ("memd", "writer", "httpd", "binlogd")
SIGNALS = {"STOP": signal.SIGSTOP, "CONT": signal.SIGCONT, "KILL": signal.SIGKILL, "TERM": signal.SIGTERM}


class ClusterError(Exception):
    pass


class Interrupted(Exception):
    pass


def log(msg):
    print(f"tierce-cluster: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# state


def state_path(d):
    return os.path.join(d, "cluster.json")


def load_state(d):
    try:
        with open(state_path(d)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise ClusterError(f"{state_path(d)} is not valid JSON ({e}); remove it by hand")


def save_state(d, st):
    tmp = state_path(d) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(st, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, state_path(d))


def all_processes(st):
    """Every process record of the state, in start order."""
    out = []
    if st.get("mariadb", {}).get("process"):
        out.append(st["mariadb"]["process"])
    for r in st.get("relays", []):
        if r.get("process"):
            out.append(r["process"])
    for n in st.get("nodes", []):
        for key in ("memd", "writer", "httpd", "binlogd"):
            if n.get(key):
                out.append(n[key])
        out.extend(n.get("load", []))
    return out


# ---------------------------------------------------------------------------------------------
# helpers


def http_get(port, path, timeout=3.0, host="127.0.0.1"):
    """(status, headers dict lower-case, body bytes) of GET http://host:port/path."""
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        c.close()


def subst(template, values):
    def rep(m):
        k = m.group(1)
        if k not in values:
            raise ClusterError(f"template variable @{k}@ has no value")
        return str(values[k])
    return re.sub(r"@([A-Z_]+)@", rep, template)


def write_file(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def find_datagen(build):
    for p in ("sample/tierce-datagen", "sample/datagen/tierce-datagen"):
        full = os.path.join(build, p)
        if os.access(full, os.X_OK):
            return full
    raise ClusterError(f"tierce-datagen not found under {build}/sample: build it with "
                       f"cmake --build {build} --target tierce-datagen (or pass --build DIR)")


def toml_str(s):
    return json.dumps(str(s))  # a JSON string is a valid TOML basic string for our paths


class Failure(ClusterError):
    def __init__(self, what, logs):
        text = f"{what}"
        for path in logs:
            text += f"\n----- tail of {path} -----\n{procs.tail(path)}"
        super().__init__(text)


def wait_until(what, cond, deadline, watch=(), logs=()):
    """Polls cond() until true; fails at the deadline or as soon as a watched process dies."""
    while True:
        for rec in watch:
            if not procs.alive(rec):
                raise Failure(f"{rec['name']} (pid {rec['pid']}) exited while waiting for {what}",
                              logs or [rec["log"]])
        try:
            if cond():
                return
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            raise Failure(f"timed out waiting for {what}", logs or [r["log"] for r in watch])
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# MariaDB


def _make_dirs(st):
    """The database's directories (data, run, a private tmpdir), owned by the mysql user."""
    base = st["mariadb"]["dir"]
    datadir, run = os.path.join(base, "db"), os.path.join(base, "run")
    # A private tmpdir: bootstraps running at once in one /tmp collide on temporary table names.
    tmpdir = os.path.join(base, "tmp")
    for p in (datadir, run, tmpdir):
        os.makedirs(p)
    mysql = pwd.getpwnam("mysql")
    for p in (base, datadir, run, tmpdir):
        os.chown(p, mysql.pw_uid, mysql.pw_gid)
    return datadir, run, tmpdir


def _base_sql():
    """The application's database and user (the same in every cluster)."""
    return (f"CREATE DATABASE {DB_NAME}; "
            f"CREATE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}'; "
            f"CREATE USER '{DB_USER}'@'localhost' IDENTIFIED BY '{DB_PASSWORD}'; "
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1'; "
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'localhost';")


def _cluster_sql(st):
    """What depends on the cluster's options: the namespaces' subnet, the binlog agent's and the
    arbiter's users (their passwords are made per cluster)."""
    m = st["mariadb"]
    sql = ""
    if m.get("netns"):  # the app nodes connect from their own addresses on the cluster's subnet
        sql += (f" CREATE USER '{DB_USER}'@'{m['subnet']}' IDENTIFIED BY '{DB_PASSWORD}';"
                f" GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'{m['subnet']}';")
    if st["options"].get("binlogd"):
        hosts = ["127.0.0.1", "localhost"] + ([m["subnet"]] if m.get("netns") else [])
        for h in hosts:
            sql += (f" CREATE USER '{BINLOG_USER}'@'{h}' IDENTIFIED BY '{m['binlog_password']}';"
                    f" GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{BINLOG_USER}'@'{h}';")
    if st["options"].get("arbiter"):
        # The homes' user manages the arbiter's tables; the application only reads its rows (the
        # locking read of every write transaction: sample/php/lib.php, the PHP extension).
        schema = ARBITER_TABLE.split(".")[0]
        pw = m["arbiter_password"]
        hosts = ["127.0.0.1", "localhost"] + ([m["subnet"]] if m.get("netns") else [])
        sql += f" CREATE DATABASE {schema};"
        for h in hosts:
            sql += (f" CREATE USER '{ARBITER_USER}'@'{h}' IDENTIFIED BY '{pw}';"
                    f" GRANT SELECT, INSERT, UPDATE, CREATE ON {schema}.* TO '{ARBITER_USER}'@'{h}';"
                    f" GRANT SELECT ON {schema}.* TO '{DB_USER}'@'{h}';")
    return sql


def _root_sql(st, sql, what):
    m = st["mariadb"]
    r = subprocess.run(["mariadb", "--no-defaults", "-S", m["socket"], "-uroot", "-e", sql],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise ClusterError(f"{what} failed: {r.stderr.strip()}")


def _install_db(st):
    datadir, run, tmpdir = _make_dirs(st)
    install_log = os.path.join(run, "install.log")
    with open(install_log, "wb") as lf:
        r = subprocess.run(["mariadb-install-db", "--no-defaults", "--user=mysql", f"--datadir={datadir}",
                            f"--tmpdir={tmpdir}",
                            "--auth-root-authentication-method=socket", "--skip-test-db"],
                           stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise Failure(f"mariadb-install-db failed (exit {r.returncode})", [install_log])


def start_mariadb(d, st, deadline):
    """A new MariaDB (mariadb-install-db) on the cluster's port and socket, with the application's
    database and users and those the cluster's options need; no data."""
    _install_db(st)
    spawn_mariadb(d, st, deadline)
    _root_sql(st, _base_sql() + _cluster_sql(st), "creating the database and user")


# Bumped when what a template holds changes in a way its key does not see.
DB_TEMPLATE_FORMAT = 1


def _db_template_key(opts):
    """What a loaded database depends on: MariaDB's version, the schema, tierce-datagen (its bytes),
    the data set's options, the base SQL. Same key, same data directory."""
    h = hashlib.sha256()
    ver = subprocess.run(["mariadbd", "--version"], capture_output=True, text=True).stdout
    h.update(f"{DB_TEMPLATE_FORMAT}\0{ver}\0{_base_sql()}\0".encode())
    for k in ("categories", "users", "items", "bids", "seed"):
        h.update(f"{k}={opts[k]}\0".encode())
    for p in (os.path.join(REPO, "sample", "schema.sql"), find_datagen(opts["build"])):
        with open(p, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:20]


def _copy_datadir(src, dst):
    """cp -a: the mysql user's ownership and the modes kept (shutil's copies drop the owner)."""
    r = subprocess.run(["cp", "-a", "--", src, dst], capture_output=True, text=True)
    if r.returncode != 0:
        raise ClusterError(f"copying the database {src} -> {dst}: {r.stderr.strip()}")


def prepare_database(d, st, opts, deadline):
    """MariaDB up with the application's data loaded and the cluster's users.

    A loaded data directory is kept once per key (_db_template_key) under the build directory
    (BUILD/lab/db-templates/KEY, made by the first cluster that needs it: installed, loaded,
    shut down cleanly, its binary logs removed); later clusters start on a copy of it (~0.2 s
    instead of ~4 s for mariadb-install-db and the load). TIERCE_LAB_DB_TEMPLATES=off: every
    cluster installs and loads its own."""
    if os.environ.get("TIERCE_LAB_DB_TEMPLATES", "on").lower() in ("off", "0", "no"):
        start_mariadb(d, st, deadline)
        load_data(st, opts)
        return
    m = st["mariadb"]
    datadir = os.path.join(m["dir"], "db")
    root = os.path.join(opts["build"], "lab", "db-templates")
    os.makedirs(root, exist_ok=True)
    tdir = os.path.join(root, _db_template_key(opts))
    with open(os.path.join(root, ".lock"), "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)  # one cluster makes a template; the others wait for it
        if os.path.isdir(tdir):
            _make_dirs(st)
            os.rmdir(datadir)
            _copy_datadir(os.path.join(tdir, "db"), datadir)
            spawn_mariadb(d, st, deadline)
            if _cluster_sql(st):
                _root_sql(st, _cluster_sql(st), "creating the cluster's database users")
            log(f"database: a copy of {tdir} (TIERCE_LAB_DB_TEMPLATES=off loads each cluster's own)")
            return
        _install_db(st)
        spawn_mariadb(d, st, deadline)
        _root_sql(st, _base_sql(), "creating the database and user")
        load_data(st, opts)
        procs.stop([m["process"]], signal.SIGTERM, deadline=60)  # a clean shutdown: nothing to recover
        for f in os.listdir(datadir):  # the load's binary logs: each cluster starts its own
            if f.startswith("binlog."):
                os.unlink(os.path.join(datadir, f))
        tmp = tdir + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        _copy_datadir(datadir, os.path.join(tmp, "db"))
        os.rename(tmp, tdir)
        log(f"database template {tdir} made")
    spawn_mariadb(d, st, deadline)
    if _cluster_sql(st):
        _root_sql(st, _cluster_sql(st), "creating the cluster's database users")


def spawn_mariadb(d, st, deadline):
    """Starts mariadbd on the cluster's data directory, port and socket; waits until it accepts
    connections (also used by restart_db)."""
    m = st["mariadb"]
    base = m["dir"]
    datadir, run, tmpdir = os.path.join(base, "db"), os.path.join(base, "run"), os.path.join(base, "tmp")
    argv = ["mariadbd", "--no-defaults", "--user=mysql", f"--datadir={datadir}", f"--tmpdir={tmpdir}",
            f"--socket={m['socket']}",
            f"--pid-file={run}/mysqld.pid", f"--port={m['port']}", f"--bind-address={m['host']}",
            "--skip-name-resolve", "--innodb-buffer-pool-size=256M", "--max-connections=1000",
            f"--log-error={m['error_log']}",
            # The change log tierce-binlogd reads (docs/binlog.md): every row change, whole rows,
            # column names and keys. sync_binlog and innodb_flush_log_at_trx_commit keep their
            # defaults (0 and 1).
            f"--log-bin={datadir}/binlog", "--server-id=1", "--binlog-format=ROW",
            "--binlog-row-image=FULL", "--binlog-row-metadata=FULL"]
    m["process"] = procs.spawn("mariadb", argv, os.path.join(run, "mariadbd.out"), netns=m.get("netns"))
    m["process"]["error_log"] = m["error_log"]
    save_state(d, st)
    client = ["mariadb", "--no-defaults", "-S", m["socket"], "-uroot"]

    def ready():
        return os.path.exists(m["socket"]) and subprocess.run(
            client + ["-e", "SELECT 1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    wait_until("MariaDB to accept connections", ready, deadline, [m["process"]],
               [m["error_log"], m["process"]["log"]])


def db_sql(d, sql, timeout=30.0):
    """Runs SQL as the database's root (over its unix socket); returns its output. For fault
    tests: FLUSH BINARY LOGS, PURGE BINARY LOGS ..."""
    d, st = _up_state(d)
    m = st["mariadb"]
    argv = ["mariadb", "--no-defaults", "-S", m["socket"], "-uroot", "-e", sql]
    # (a unix socket: reachable from the host also when MariaDB runs in a namespace)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise ClusterError(f"sql: {r.stderr.strip()}")
    _note_fault(d, st, {"sql": sql})
    log(f"sql: {sql}")
    return r.stdout


def purge_binlogs(d):
    """FLUSH BINARY LOGS, then PURGE every binlog before the new one: a replica whose position is
    older finds it gone (the binlog agent's purged-position fault)."""
    db_sql(d, "FLUSH BINARY LOGS")
    out = db_sql(d, "SHOW MASTER STATUS").splitlines()
    if len(out) < 2:
        raise ClusterError("purge-binlogs: SHOW MASTER STATUS returned nothing (is log_bin on?)")
    current = out[1].split("\t")[0]
    db_sql(d, f"PURGE BINARY LOGS TO '{current}'")
    return current


def restart_db(d, sig="TERM", timeout=60.0):
    """Stops MariaDB (TERM: a clean shutdown; KILL: a crash, recovered at start) and starts it again
    on the same data directory, port and socket; waits until it accepts connections."""
    d, st = _up_state(d)
    m = st["mariadb"]
    sig = sig.upper()
    if sig not in ("TERM", "KILL"):
        raise ClusterError(f"restart-db takes TERM or KILL, not {sig}")
    rec = m.get("process")
    if rec and procs.alive(rec):
        procs.stop([rec], SIGNALS[sig], deadline=30 if sig == "TERM" else 5)
    spawn_mariadb(d, st, time.monotonic() + timeout)
    save_state(d, st)
    _note_fault(d, st, {"restart_db": sig})
    log(f"MariaDB restarted after SIG{sig} (pid {m['process']['pid']})")
    return st


def arbiter_rows(st):
    """{node: (state, epoch, changed_by, changed_at)} of the arbiter's table ({} when unreadable)."""
    m = st["mariadb"]
    r = subprocess.run(["mariadb", "--no-defaults", "-S", m["socket"], "-uroot", "-N", "-B", "-e",
                        f"SELECT node, state, epoch, changed_by, changed_at FROM {ARBITER_TABLE}"],
                       capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        return {}
    rows = {}
    for line in r.stdout.splitlines():
        f = line.split("\t")
        if len(f) == 5:
            rows[f[0]] = (f[1], int(f[2]), f[3], f[4])
    return rows


def load_data(st, opts):
    m = st["mariadb"]
    datagen = find_datagen(opts["build"])
    argv = [datagen, "--host", m["host"], "--port", str(m["port"]), "--user", DB_USER,
            "--password", DB_PASSWORD, "--database", DB_NAME, "--categories", str(opts["categories"]),
            "--users", str(opts["users"]), "--items", str(opts["items"]), "--bids", str(opts["bids"]),
            "--seed", str(opts["seed"]), "--schema", os.path.join(REPO, "sample", "schema.sql")]
    logp = os.path.join(m["dir"], "run", "datagen.log")
    with open(logp, "wb") as lf:
        r = subprocess.run(argv, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise Failure(f"tierce-datagen failed (exit {r.returncode})", [logp])
    log(procs.tail(logp, 1))


# ---------------------------------------------------------------------------------------------
# nodes


def node_topology(st, n):
    """The topology file node n reads: its own with app_links = relay (app nodes), else the shared."""
    return n.get("topology") or st["topology"]


def node_conf(st, n):
    """Writes the node's httpd.conf (and memd.toml with --cache tierce)."""
    opts = st["options"]
    tierce = opts["cache"] == "tierce"
    defines = []
    if tierce:
        defines.append("Define TIERCE")
    if opts["cache"] == "mod_cache" and n["role"] == "proxy":
        defines.append("Define MOD_CACHE")
    php = opts.get("php", "explicit")
    if php != "explicit" and n["role"] == "app":
        defines.append("Define TIERCE_PHP")
        write_php_ini(st, n, php)
    if opts["cache"] == "mod_cache_memcached" and n["role"] == "proxy":
        defines.append("Define MOD_CACHE_MEMCACHED")
    m = st["mariadb"]
    values = {
        "DEFINES": "\n".join(defines) or "# (no Define: plain configuration)",
        "NODE_DIR": n["dir"], "HOST": n.get("host", "127.0.0.1"), "PORT": n["port"], "MODULES": MODULES,
        "NODE": n["name"], "DOCROOT": n.get("docroot", st["docroot"]), "APP_WORKERS": opts["app_workers"],
        "DB_HOST": m["host"], "DB_PORT": m["port"], "DB_USER": DB_USER, "DB_PASSWORD": DB_PASSWORD,
        "DB_NAME": DB_NAME, "TOPOLOGY": node_topology(st, n), "SCHEME": opts["scheme"],
        "FENCE_TABLE": ARBITER_TABLE if opts.get("arbiter") else "",
        "MEMCACHED": opts["memcached"] or "127.0.0.1:0",  # used only inside <IfDefine MOD_CACHE_MEMCACHED>
        "APPVERSION_MODULE": os.path.join(opts["build"], "mod_appversion", "mod_appversion.so"),
        "AGENT_DIRECTIVE": (f"AppVersionAgent {n['agent_socket']}" if n.get("agent_socket")
                            else f"AppVersionNodeKey {n['node_key']}" if n.get("node_key")
                            else "# (no AppVersionAgent: the children hold the secret, APPVER0029)"),
        "RCACHE_MODULE": os.path.join(opts["build"], "mod_rcache", "mod_rcache.so"),
        "TTL": opts["ttl"], "MOD_CACHE_BYTES": opts["mod_cache_bytes"],
        "ARENA_SIZE": opts.get("arena_size", DEFAULTS["arena_size"]),
        "COOP": opts.get("coop", "off").upper() if opts.get("coop", "off") != "off" else "Off",
        "COOP_EXTRA": coop_directives(opts),
        "BALANCER_MEMBERS": "\n".join(
            f"    BalancerMember http://{a.get('host', '127.0.0.1')}:{a['port']} route={a['name']} retry=1"
            for a in st["nodes"] if a["role"] == "app"),
    }
    tmpl = "app.conf.in" if n["role"] == "app" else "proxy.conf.in"
    with open(os.path.join(REPO, "conf", tmpl)) as f:
        write_file(n["conf"], subst(f.read(), values))
    if tierce:
        lines = ["# memd of node %s, written by tools/tierce-cluster (docs/memd.md)" % n["name"],
                 "[memd]",
                 f"node = {toml_str(n['name'])}",
                 "listen = [" + ", ".join(toml_str(u) for u in n["memd_uris"]) + "]",
                 f"secret_file = {toml_str(n.get('secret_file', st['secret_file']))}",
                 *([f"node_key = {toml_str(n['node_key'])}"] if n.get("node_key") else []),
                 # its peers' public keys: a client that does not sign is a reader here (the
                 # proxies' httpd children; docs/SECURITY.md "Roles")
                 f"topology = {toml_str(node_topology(st, n))}",
                 f"pid_file = {toml_str(os.path.join(n['dir'], 'run', 'memd.pid'))}",
                 f"ready_file = {toml_str(n['memd_ready'])}",
                 'log = "stderr"', ""]
        if n["role"] == "app":
            lines += ["[coherence]", f"topology = {toml_str(node_topology(st, n))}", ""]
            if opts.get("coop", "off") in POOL_SCHEMES:
                lines += ["[pool]", f"bytes = {size_bytes(opts.get('pool_bytes', DEFAULTS['pool_bytes']))}",
                          "slab_bytes = 1048576", "lease_ms = 2000", ""]
        else:
            lines += ["[[region]]", 'name = "arena"', f"segment = {toml_str(n['segment_prefix'] + '.arena')}", ""]
            if opts.get("coop", "off") != "off":
                lines += ["[coop]", f"buckets = {int(opts.get('coop_buckets', DEFAULTS['coop_buckets']))}", ""]
        write_file(n["memd_conf"], "\n".join(lines))
        if n["role"] == "app" and n.get("writer_conf"):
            write_file(n["writer_conf"], "\n".join([
                "# writer agent of node %s, written by tools/tierce-cluster (docs/coherence.md "
                "\"The writer agent\"): a second memd that only exports the node's writer counter" % n["name"],
                "[memd]", f"node = {toml_str(n['name'])}",
                "listen = [" + ", ".join(toml_str(u) for u in n["writer_uris"]) + "]",
                f"secret_file = {toml_str(n.get('secret_file', st['secret_file']))}",
                *([f"node_key = {toml_str(n['node_key'])}"] if n.get("node_key") else []),
                f"pid_file = {toml_str(os.path.join(n['dir'], 'run', 'writer.pid'))}",
                f"ready_file = {toml_str(n['writer_ready'])}", 'log = "stderr"', "",
                "[writer]", f"topology = {toml_str(node_topology(st, n))}",
                # the agent socket: the node's httpd children (www-data) send through it and
                # hold no secret (docs/coherence.md "The agent socket")
                *([f"socket = {toml_str(n['agent_socket'])}", 'socket_group = "www-data"',
                   'socket_mode = "0660"'] if n.get("agent_socket") else []), ""]))


def write_php_ini(st, n, php):
    """php.ini of an app node that loads the tierce extension (PHPIniDir <node>/php)."""
    opts = st["options"]
    ext = os.path.join(opts["build"], "php_ext", "tierce.so")
    if not os.path.exists(ext):
        raise ClusterError(f"--php {php}: {ext} is not built (cmake --build {opts['build']} --target php_tierce)")
    lines = ["; written by tools/tierce-cluster: the tierce PHP extension (docs/php_extension.md)",
             f"extension={ext}",
             "tierce.auto=1",
             f"tierce.linearizable={1 if php == 'linearizable' else 0}",
             f"tierce.topology={node_topology(st, n)}",
             f"tierce.node={n['name']}",
             *([f"tierce.agent={n['agent_socket']}"] if n.get("agent_socket")
               else [f"tierce.node_key={n['node_key']}"] if n.get("node_key") else []),
             f"tierce.schema={os.path.join(REPO, 'sample', 'schema.sql')}",
             "display_errors=Off", "log_errors=On", ""]
    os.makedirs(os.path.join(n["dir"], "php"), exist_ok=True)
    write_file(os.path.join(n["dir"], "php", "php.ini"), "\n".join(lines))


POOL_SCHEMES = ("mtacc", "hybcc")


def size_bytes(v):
    """'64M' / '1G' / '4096' -> bytes (powers of 1024)."""
    t = str(v).strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    if mult != 1:
        t = t[:-1]
    if not t.isdigit():
        raise ClusterError(f"not a size: {v!r} (give e.g. 64M)")
    return int(t) * mult


def coop_directives(opts):
    """The proxies' RCacheCoop* lines beyond RCacheCoop itself."""
    coop = opts.get("coop", "off")
    if coop not in POOL_SCHEMES:
        return "# (no pool memory: RCacheCoop " + coop + ")"
    lines = [f"RCacheCoopPoolSlabs {int(opts.get('coop_pool_slabs', DEFAULTS['coop_pool_slabs']))}"]
    if coop == "hybcc":
        lines.append(f"RCacheCoopThreshold {opts.get('coop_threshold', DEFAULTS['coop_threshold'])}")
    return "\n    ".join(lines)


def write_topology(st):
    """DIR/cluster.toml. With --netns it is the admin's master copy (tcp only: nodes on other
    hosts cannot share memory); install_node_files derives each node's copy from it."""
    o = st["options"]
    ns = bool(st.get("netns"))
    out = ["# Written by tools/tierce-cluster (template: conf/cluster.toml).", "[cluster]",
           f"name = {toml_str(st['name'])}", f"secret_file = {toml_str(st['secret_file'])}",
           f"transport = {toml_str('tcp' if ns else o['transport'])}", "version_slots = 262144", "",
           "[coherence]  # one scheme per cluster; the fence (docs/coherence.md)",
           f"scheme = {toml_str(o['scheme'])}", "lease_ms = 1000", "clock_skew_ms = 50", ""]
    if o.get("arbiter"):
        m = st["mariadb"]
        out += ["[arbiter]  # the database drops lost app nodes (docs/coherence.md)",
                f"table = {toml_str(ARBITER_TABLE)}", f"host = {toml_str(m['host'])}", f"port = {m['port']}",
                f"user = {toml_str(ARBITER_USER)}", f"password_file = {toml_str(m['arbiter_password_file'])}",
                f"drop_after_ms = {ARBITER_DROP_AFTER_MS}", ""]
    for n in st["nodes"]:
        out += ["[[node]]", f"name = {toml_str(n['name'])}", f"role = {toml_str(n['role'])}",
                "memd = [" + ", ".join(toml_str(u) for u in n["memd_uris"]
                                       if not (ns and u.startswith("shm://"))) + "]"]
        if n.get("writer_uris"):
            out += ["writer = [" + ", ".join(toml_str(u) for u in n["writer_uris"]
                                             if not (ns and u.startswith("shm://"))) + "]"]
        out += [f"segment_prefix = {toml_str(n['segment_prefix'])}"]
        if n.get("public_key"):
            out += [f"public_key = {toml_str(n['public_key'])}"]
        out += [""]
    write_file(st["topology"], "\n".join(out))


def make_node_keys(st):
    """A node key per node (NODE_DIR/node.key, 0600, by tierce-fabric keygen): its memd and writer
    agent prove the node with it, and the topology carries every public key, so each client checks
    it reached the node it dialled (fabric/identity.h). --no-node-keys: the secret alone."""
    tool = os.path.join(st["options"]["build"], "tools", "tierce-fabric", "tierce-fabric")
    if not os.access(tool, os.X_OK):
        raise ClusterError(f"{tool} is not built (cmake --build {st['options']['build']} --target "
                           "tierce-fabric), or use --no-node-keys")
    for n in st["nodes"]:
        os.makedirs(n["dir"], exist_ok=True)
        path = os.path.join(n["dir"], "node.key")
        r = subprocess.run([tool, "keygen", path], capture_output=True, text=True)
        if r.returncode != 0:
            raise ClusterError(f"tierce-fabric keygen {path}: {r.stderr.strip()}")
        n["node_key"], n["public_key"] = path, r.stdout.strip()


def relay_between(st, a, b, kind="memd"):
    """The relay record carrying connections app node a opens to app node b's memd (kind "memd")
    or writer agent (kind "writer"), or None."""
    for r in st.get("relays", []):
        if r["from"] == a and r["to"] == b and r.get("kind", "memd") == kind:
            return r
    return None


def write_node_topology(st, n):
    """App node n's own topology with app_links = relay: the shared file, line for line, except the
    [cluster] transport ("auto" in a shm cluster: shm to its own memd, which alone keeps a shm://
    URI, tcp to the relays; a tcp cluster stays "tcp") and every other app node's memd list, which
    becomes the tcp:// address of the relay n -> that node. Derived from the shared file's text so
    that every other line (names, order, version_slots, secret, tables added later) is the same."""
    with open(st["topology"]) as f:
        shared = f.read().split("\n")
    transport = "auto" if st["options"]["transport"] == "shm" else st["options"]["transport"]
    out, table, node = [], None, None
    for line in shared:
        stripped = line.strip()
        if stripped.startswith("["):
            table = stripped.split("#")[0].strip()
            node = None
        elif table == "[cluster]" and re.match(r"transport\s*=", stripped):
            line = f"transport = {toml_str(transport)}"
        elif table == "[[node]]" and re.match(r"name\s*=", stripped):
            node = json.loads(stripped.split("=", 1)[1].split("#")[0].strip())
        elif table == "[[node]]" and re.match(r"(memd|writer)\s*=", stripped) and node != n["name"]:
            kind = stripped.split("=", 1)[0].strip()
            r = relay_between(st, n["name"], node, kind)
            if r is not None:
                line = f"{kind} = [{toml_str('tcp://127.0.0.1:%d' % r['port'])}]"
        out.append(line)
    text = "\n".join(out)
    text = text.replace("# Written by tools/tierce-cluster (template: conf/cluster.toml).",
                        f"# Written by tools/tierce-cluster for app node {n['name']} (--app-links relay): "
                        f"{st['topology']} with the other app nodes' memd reached through "
                        f"tierce-wanem relays.", 1)
    write_file(n["topology"], text)


def preflight(st):
    """Checks every generated configuration before anything starts."""
    problems = []
    for n in st["nodes"]:
        r = subprocess.run([APACHE, "-f", n["conf"], "-t"], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"{n['name']}: httpd configuration {n['conf']} is rejected:\n"
                            f"{(r.stderr or r.stdout).strip()}")
        if st["options"]["cache"] == "tierce":
            memd = os.path.join(st["options"]["build"], "agents", "memd", "tierce-memd")
            r = subprocess.run([memd, "--check", "-c", n["memd_conf"]], capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"{n['name']}: memd configuration {n['memd_conf']} is rejected:\n"
                                f"{(r.stderr or r.stdout).strip()}")
            if n.get("writer_conf"):
                r = subprocess.run([memd, "--check", "-c", n["writer_conf"]], capture_output=True, text=True)
                if r.returncode != 0:
                    problems.append(f"{n['name']}: writer agent configuration {n['writer_conf']} is "
                                    f"rejected:\n{(r.stderr or r.stdout).strip()}")
    if problems:
        raise ClusterError("\n".join(problems))


def start_memd(st, n, deadline):
    memd = os.path.join(st["options"]["build"], "agents", "memd", "tierce-memd")
    if not os.access(memd, os.X_OK):
        raise ClusterError(f"{memd} not found: build it (cmake --build {st['options']['build']})")
    try:
        os.unlink(n["memd_ready"])
    except FileNotFoundError:
        pass
    # root (opens the segments the httpd parent creates) with group www-data (the shm socket is
    # mode 0660: httpd children must be able to connect).
    rec = procs.spawn(f"{n['name']}/memd", [memd, "--foreground", "-c", n["memd_conf"]],
                      os.path.join(n["dir"], "logs", "memd.log"), group=grp.getgrnam("www-data").gr_gid,
                      netns=n.get("netns"))
    n["memd"] = rec
    return rec


def start_writer(st, n, deadline):
    """Starts app node n's writer agent (a second tierce-memd with only [writer]) and waits for its
    ready file."""
    memd = os.path.join(st["options"]["build"], "agents", "memd", "tierce-memd")
    try:
        os.unlink(n["writer_ready"])
    except FileNotFoundError:
        pass
    rec = procs.spawn(f"{n['name']}/writer", [memd, "--foreground", "-c", n["writer_conf"]],
                      os.path.join(n["dir"], "logs", "writer.log"), group=grp.getgrnam("www-data").gr_gid,
                      netns=n.get("netns"))
    n["writer"] = rec
    wait_until(f"{n['name']}/writer ready file", lambda: os.path.exists(n["writer_ready"]), deadline,
               [rec], [rec["log"]])
    return rec


def binlogd_conf(st, n):
    """Writes app node n's binlogd.toml: the sample's tables mapped to the names its pages use
    (conf/binlogd.toml), and with --php auto/linearizable the extension's automatic names too."""
    m = st["mariadb"]
    conf = os.path.join(n["dir"], "binlogd.toml")
    out = ["# Written by tools/tierce-cluster (template: conf/binlogd.toml).", "[binlogd]",
           f"topology = {toml_str(node_topology(st, n))}", f"node = {toml_str(n['name'])}",
           *([f"node_key = {toml_str(n['node_key'])}"] if n.get("node_key") else []),
           f"state_file = {toml_str(os.path.join(n['dir'], 'run', 'binlogd.gtid'))}",
           f"metrics_file = {toml_str(os.path.join(n['dir'], 'run', 'binlogd.prom'))}",
           "metrics_interval_ms = 1000", f"databases = [{toml_str(DB_NAME)}]",
           f"audit_file = {toml_str(os.path.join(n['dir'], 'run', 'binlogd.audit'))}",
           f"auto_names = {'true' if st['options'].get('php', 'explicit') != 'explicit' else 'false'}",
           "", "[mariadb]", f"host = {toml_str(m['host'])}", f"port = {m['port']}",
           f"user = {toml_str(BINLOG_USER)}", f"password_file = {toml_str(m['binlog_password_file'])}",
           "server_id = 4242", "heartbeat_ms = 250", ""]
    for table, names in BINLOG_TABLES:
        out += ["[[table]]", f"name = {toml_str(table)}",
                "names = [" + ", ".join(toml_str(x) for x in names) + "]", ""]
    write_file(conf, "\n".join(out))
    return conf


def start_binlogd(st, n, deadline):
    """Starts tierce-binlogd beside app node n (its writer counter numbers the agent's rounds) and
    waits until it reads the binlog (BINLOGD0133 in its log)."""
    if not n.get("binlogd_conf"):
        n["binlogd_conf"] = binlogd_conf(st, n)
    logp = os.path.join(n["dir"], "logs", "binlogd.log")
    start_size = os.path.getsize(logp) if os.path.exists(logp) else 0
    rec = procs.spawn(f"{n['name']}/binlogd",
                      [os.path.join(st["options"]["build"], BINLOGD), "--foreground", "--config",
                       n["binlogd_conf"]], logp, netns=n.get("netns"))
    n["binlogd"] = rec

    def reading():
        with open(logp, "rb") as f:
            f.seek(start_size)
            return b"BINLOGD0133" in f.read()
    wait_until(f"{n['name']}/binlogd to read the binlog", reading, deadline, [rec], [logp])
    return rec


def start_httpd(st, n):
    logs = os.path.join(n["dir"], "logs")
    os.makedirs(logs, exist_ok=True)
    os.makedirs(os.path.join(n["dir"], "run"), exist_ok=True)
    # A killed httpd leaves its pid file; its pid may linger as an unreaped zombie, which httpd
    # would take for a running instance ("already running").
    try:
        os.unlink(os.path.join(n["dir"], "run", "httpd.pid"))
    except FileNotFoundError:
        pass
    r = subprocess.run([APACHE, "-f", n["conf"], "-t"], capture_output=True, text=True)
    if r.returncode != 0:
        raise ClusterError(f"{n['name']}: httpd configuration {n['conf']} is rejected:\n"
                           f"{(r.stderr or r.stdout).strip()}")
    rec = procs.spawn(f"{n['name']}/httpd", [APACHE, "-f", n["conf"], "-DFOREGROUND"],
                      os.path.join(logs, "httpd.out"), netns=n.get("netns"))
    rec["error_log"] = os.path.join(logs, "error.log")
    n["httpd"] = rec
    return rec


def node_ready(st, n, deadline):
    watch = [n["httpd"]] + ([n["memd"]] if n.get("memd") else [])
    logs = [n["httpd"]["error_log"], n["httpd"]["log"]] + ([n["memd"]["log"]] if n.get("memd") else [])
    if n.get("memd"):
        wait_until(f"{n['name']}/memd ready file", lambda: os.path.exists(n["memd_ready"]), deadline, watch, logs)
    wait_until(f"{n['name']} to answer GET /index.php with 200",
               lambda: node_get(n, "/index.php")[0] == 200, deadline, watch, logs)


def node_get(n, path, timeout=3.0):
    """http_get of node n's httpd at its address (127.0.0.1, or its namespace's address)."""
    return http_get(n["port"], path, timeout, n.get("host", "127.0.0.1"))


def wanem_path(st):
    return os.path.join(st["options"]["build"], "tools", "tierce-wanem", "tierce-wanem")


def start_relay(st, r):
    """Starts the tierce-wanem relay of record r (delay 0, control socket) and waits until it
    listens. A port taken meanwhile (exit 1 "cannot bind") is replaced by a fresh one, and the
    from-node's topology rewritten, up to 5 times."""
    for attempt in range(5):
        for f in (r["ready"],):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass
        listen, target = r.get("listen_host", "127.0.0.1"), r.get("target_host", "127.0.0.1")
        argv = [wanem_path(st), "--forward", f"{listen}:{r['port']}={target}:{r['target_port']}",
                "--delay-us", "0", "--control", r["control"], "--ready-file", r["ready"]]
        # --netns: the relay runs on the from-node's host (its namespace and address).
        r["process"] = procs.spawn(r["name"], argv, r["log"], netns=r.get("netns"))
        deadline = time.monotonic() + 15
        while not os.path.exists(r["ready"]):
            if not procs.alive(r["process"]):
                break
            if time.monotonic() > deadline:
                raise Failure(f"timed out waiting for relay {r['name']}", [r["log"]])
            time.sleep(0.02)
        if os.path.exists(r["ready"]):
            return
        procs.reap(r["process"]["pid"])
        if r.get("netns") or "cannot bind 127.0.0.1" not in procs.tail(r["log"], 3) or attempt == 4:
            raise Failure(f"relay {r['name']} exited at start", [r["log"]])
        r["port"] = procs.free_ports(1)[0]
        log(f"relay {r['name']}: port taken, retrying on {r['port']}")
        write_node_topology(st, next(n for n in st["nodes"] if n["name"] == r["from"]))


def relay_command(r, command, timeout=5.0):
    """Sends one control command to relay r; returns its "ok ..." answer or raises ClusterError."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(r["control"])
        s.sendall(command.encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = s.recv(512)
            if not chunk:
                break
            answer += chunk
    except OSError as e:
        raise ClusterError(f"relay {r['name']} ({r['control']}): {command!r}: {e}")
    finally:
        s.close()
    text = answer.decode("utf-8", "replace").strip()
    if not text.startswith("ok"):
        raise ClusterError(f"relay {r['name']}: {command!r} answered {text!r}")
    return text


def start_load(n, count):
    recs = []
    for i in range(count):
        recs.append(procs.spawn(f"{n['name']}/load{i + 1}", ["/bin/sh", "-c", "while :; do :; done"],
                                os.path.join(n["dir"], "logs", "load.log")))
    n["load"] = recs


def shm_prefix(st):
    return "/dev/shm/tierce." + st["name"] + "."


def remove_shm(st):
    prefix = shm_prefix(st)
    removed = 0
    for f in os.listdir("/dev/shm"):
        p = os.path.join("/dev/shm", f)
        if p.startswith(prefix):
            try:
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.unlink(p)
                removed += 1
            except FileNotFoundError:
                pass
    return removed


# ---------------------------------------------------------------------------------------------
# netns mode: one network namespace per node (and MariaDB), as separate hosts


def check_netns_options(opts):
    ok, why = netns.available()
    if not ok:
        raise ClusterError(f"--netns: {why}")
    if opts["cache"] == "mod_cache_memcached":
        raise ClusterError("--netns: --cache mod_cache_memcached is not supported (the memcached would "
                           "have to be reachable from every namespace)")


def plan_netns(st):
    """Addresses, namespaces, fixed ports and per-node files of every node; returns the Net, not
    yet created (its names are in st["netns"] first)."""
    names = ["db"] + [n["name"] for n in st["nodes"]]
    net = netns.Net("tc", names, host_link=True, keep=True, create=False)
    st["netns"] = net.names()
    m = st["mariadb"]
    m.update(host=net.addr("db"), port=NETNS_PORTS["mariadb"], netns=net.ns("db"),
             subnet=f"{net.prefix}.%")
    shm = st["options"]["transport"] == "shm"
    for n in st["nodes"]:
        addr, etc = net.addr(n["name"]), os.path.join(n["dir"], "etc")
        n.update(host=addr, netns=net.ns(n["name"]), port=NETNS_PORTS["httpd"],
                 memd_port=NETNS_PORTS["memd"], url=f"http://{addr}:{NETNS_PORTS['httpd']}/",
                 memd_uris=[f"tcp://{addr}:{NETNS_PORTS['memd']}"],
                 topology=os.path.join(etc, "cluster.toml"), secret_file=os.path.join(etc, "secret"))
        if n.get("writer_uris") is not None:
            n.update(writer_port=NETNS_PORTS["writer"], writer_uris=[f"tcp://{addr}:{NETNS_PORTS['writer']}"])
        if shm:  # its own memd over shm too (a socket under its own run/); peers see tcp only
            sock = os.path.join(n["dir"], "run", "memd.sock")
            if len(sock) > 100:
                raise ClusterError(f"state directory path too long for a unix socket: {sock}")
            n["memd_uris"].append(f"shm://{sock}")
            if n.get("writer_uris") is not None:
                n["writer_uris"].append(f"shm://{os.path.join(n['dir'], 'run', 'writer.sock')}")
        if n["role"] == "app":
            n["docroot"] = os.path.join(n["dir"], "www")
    return net


def install_node_files(st, n):
    """What an admin copies to each host: the secret (mode 600), the topology (with the node's
    own secret path; with --transport shm "auto" and a shm:// URI for itself alone) and, on app
    nodes, the application."""
    os.makedirs(os.path.dirname(n["secret_file"]), exist_ok=True)
    shutil.copy2(st["secret_file"], n["secret_file"])
    os.chmod(n["secret_file"], 0o600)
    shm = st["options"]["transport"] == "shm"
    out, table, node = [], None, None
    with open(st["topology"]) as f:
        for line in f.read().split("\n"):
            stripped = line.strip()
            if stripped.startswith("["):
                table, node = stripped.split("#")[0].strip(), None
            elif table == "[cluster]" and re.match(r"secret_file\s*=", stripped):
                line = f"secret_file = {toml_str(n['secret_file'])}"
            elif table == "[cluster]" and re.match(r"transport\s*=", stripped) and shm:
                line = 'transport = "auto"'
            elif table == "[[node]]" and re.match(r"name\s*=", stripped):
                node = json.loads(stripped.split("=", 1)[1].split("#")[0].strip())
            elif table == "[[node]]" and re.match(r"memd\s*=", stripped) and shm and node == n["name"]:
                line = "memd = [" + ", ".join(toml_str(u) for u in n["memd_uris"]) + "]"
            elif table == "[[node]]" and re.match(r"writer\s*=", stripped) and shm and node == n["name"]:
                line = "writer = [" + ", ".join(toml_str(u) for u in n["writer_uris"]) + "]"
            elif (table == "[[node]]" and re.match(r"(memd|writer)\s*=", stripped)
                  and relay_between(st, n["name"], node, stripped.split("=", 1)[0].strip())):
                kind = stripped.split("=", 1)[0].strip()
                r = relay_between(st, n["name"], node, kind)  # --app-links relay: through the relay
                line = f"{kind} = [{toml_str('tcp://%s:%d' % (r['listen_host'], r['port']))}]"
            out.append(line)
    text = "\n".join(out).replace(
        "# Written by tools/tierce-cluster (template: conf/cluster.toml).",
        f"# Written by tools/tierce-cluster for node {n['name']} (--netns): its copy of {st['topology']}.", 1)
    write_file(n["topology"], text)
    if n.get("docroot"):
        shutil.copytree(st["docroot"], n["docroot"])


def remove_netns(st):
    """Deletes the cluster's namespaces and host interface (recorded in st), killing what still
    runs inside; idempotent. Returns the pids killed."""
    rec = st.get("netns")
    if not rec:
        return []
    return netns.remove(rec["namespaces"], rec.get("host_if"))


# ---------------------------------------------------------------------------------------------
# commands


def _interrupt(signum, frame):
    raise Interrupted(f"signal {signum}")


def up(d=DEFAULT_DIR, **kw):
    """Starts a cluster in state directory d; returns the state dict. On any failure (or Ctrl-C /
    TERM) stops what was started and raises ClusterError."""
    opts = dict(DEFAULTS)
    for k, v in kw.items():
        if v is not None:
            if k not in DEFAULTS:
                raise ClusterError(f"unknown option {k}")
            opts[k] = v
    if opts["cache"] not in ("none", "mod_cache", "mod_cache_memcached", "tierce"):
        raise ClusterError(f"--cache must be none, mod_cache, mod_cache_memcached or tierce, not {opts['cache']}")
    if opts["cache"] == "mod_cache_memcached":
        if not re.fullmatch(r"[A-Za-z0-9.-]+:[0-9]{1,5}", str(opts["memcached"] or "")):
            raise ClusterError("--cache mod_cache_memcached needs --memcached HOST:PORT (a memcached you "
                               f"started, e.g. memcached -l 127.0.0.1 -p PORT -I 1m), not {opts['memcached']!r}")
    elif opts["memcached"]:
        raise ClusterError("--memcached applies to --cache mod_cache_memcached only")
    if opts["coop"] not in ("off", "bcc", "ccwr", "mtacc", "hybcc"):
        raise ClusterError(f"--coop must be off, bcc, ccwr, mtacc or hybcc, not {opts['coop']}")
    if opts["coop"] != "off" and opts["cache"] != "tierce":
        raise ClusterError("--coop needs --cache tierce (cooperative caching is mod_rcache's)")
    if opts["cache"] != "tierce":
        opts["binlogd"] = False  # it invalidates through the homes: tierce only
    if opts["binlogd"] and not os.access(os.path.join(opts["build"], BINLOGD), os.X_OK):
        raise ClusterError(f"{os.path.join(opts['build'], BINLOGD)} not found: build it first, or "
                           "--no-binlogd")
    if opts["arbiter"] and opts["cache"] != "tierce":
        raise ClusterError("--arbiter needs --cache tierce (it is the homes' fence)")
    if opts["transport"] not in ("tcp", "shm"):
        raise ClusterError("--transport must be tcp or shm")
    if opts["scheme"] not in ("dependency-lists", "invalidate-all"):
        raise ClusterError("--scheme must be dependency-lists or invalidate-all")
    if opts["app_nodes"] < 1 or opts["proxy_nodes"] < 1:
        raise ClusterError("--app-nodes and --proxy-nodes must be >= 1")
    if opts["app_links"] not in ("direct", "relay"):
        raise ClusterError("--app-links must be direct or relay")
    if opts["app_links"] == "relay" and opts["cache"] != "tierce":
        raise ClusterError("--app-links relay needs --cache tierce (the relays carry app-to-app memd traffic)")
    opts["build"] = os.path.abspath(opts["build"])
    d = os.path.abspath(d)
    if opts["cache"] == "tierce":
        for mod in ("mod_rcache/mod_rcache.so", "mod_appversion/mod_appversion.so", "agents/memd/tierce-memd"):
            if not os.path.exists(os.path.join(opts["build"], mod)):
                raise ClusterError(f"--cache tierce needs {os.path.join(opts['build'], mod)}: build it first")
    if opts["app_links"] == "relay":
        wanem = os.path.join(opts["build"], "tools", "tierce-wanem", "tierce-wanem")
        if not os.access(wanem, os.X_OK):
            raise ClusterError(f"--app-links relay needs {wanem}: build it first")
    find_datagen(opts["build"])
    if opts["netns"]:
        check_netns_options(opts)

    old = load_state(d) if os.path.isdir(d) else None
    if old and any(procs.alive(r) for r in all_processes(old)):
        raise ClusterError(f"a cluster is already running in {d} (tierce-cluster down --dir {d})")
    if old:
        remove_shm(old)
        remove_netns(old)
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)  # mysql and www-data must traverse it
    for sub in ("mariadb", "nodes", "www", "run"):
        shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
    for f in ("cluster.json", "cluster.toml"):
        try:
            os.unlink(os.path.join(d, f))
        except FileNotFoundError:
            pass

    napp, nproxy = opts["app_nodes"], opts["proxy_nodes"]
    nrelays = 2 * napp * (napp - 1) if opts["app_links"] == "relay" else 0  # memd and writer links
    ports = procs.free_ports(1 + 2 * (napp + nproxy) + napp + nrelays)
    name = f"c{ports[0]}"
    st = {"name": name, "dir": d, "state": "starting", "options": opts, "started": time.time(),
          "topology": os.path.join(d, "cluster.toml"), "secret_file": os.path.join(d, "secret"),
          "docroot": os.path.join(d, "www"), "shm_prefix": "/tierce." + name + ".",
          "mariadb": {"dir": os.path.join(d, "mariadb"), "host": "127.0.0.1", "port": ports[0],
                      "user": DB_USER, "password": DB_PASSWORD, "database": DB_NAME,
                      "socket": os.path.join(d, "mariadb", "run", "mysqld.sock"),
                      "error_log": os.path.join(d, "mariadb", "run", "error.log"),
                      "arbiter_password": os.urandom(12).hex(),
                      "arbiter_password_file": os.path.join(d, "arbiter-password"),
                      "binlog_password": os.urandom(12).hex(),
                      "binlog_password_file": os.path.join(d, "binlogd-password")},
          "nodes": []}
    os.makedirs(os.path.join(d, "run"), exist_ok=True)
    i = 1
    for role, count in (("app", napp), ("proxy", nproxy)):
        for k in range(1, count + 1):
            nm = f"{role}{k}"
            nd = os.path.join(d, "nodes", nm)
            sock = os.path.join(d, "run", f"{nm}-memd.sock")
            if len(sock) > 100:
                raise ClusterError(f"state directory path too long for a unix socket: {sock}")
            n = {"name": nm, "role": role, "dir": nd, "port": ports[i], "memd_port": ports[i + 1],
                 "url": f"http://127.0.0.1:{ports[i]}/", "conf": os.path.join(nd, "conf", "httpd.conf"),
                 "memd_conf": os.path.join(nd, "memd.toml"), "memd_ready": os.path.join(nd, "run", "memd.ready"),
                 "memd_uris": [f"tcp://127.0.0.1:{ports[i + 1]}", f"shm://{sock}"],
                 "segment_prefix": f"/tierce.{name}.{nm}", "memd": None, "httpd": None, "load": []}
            st["nodes"].append(n)
            i += 2
    if opts["cache"] == "tierce":  # every app node's writer agent (PROCS "writer")
        for n in st["nodes"]:
            if n["role"] != "app":
                continue
            wsock = os.path.join(d, "run", f"{n['name']}-writer.sock")
            if opts.get("agent_socket", True):
                n["agent_socket"] = os.path.join(d, "run", f"{n['name']}-agent.sock")
            n.update(writer_port=ports[i], writer_conf=os.path.join(n["dir"], "writer.toml"),
                     writer_ready=os.path.join(n["dir"], "run", "writer.ready"),
                     writer_uris=[f"tcp://127.0.0.1:{ports[i]}", f"shm://{wsock}"], writer=None)
            i += 1
    net = plan_netns(st) if opts["netns"] else None
    st["relays"] = []
    if nrelays:
        apps = [n for n in st["nodes"] if n["role"] == "app"]
        for a in apps:
            if not a.get("topology"):  # (--netns: every node has its own copy already)
                a["topology"] = os.path.join(a["dir"], "cluster.toml")
            for bi, b in enumerate(apps):
                if a is b:
                    continue
                base = os.path.join(d, "run", f"wanem-{a['name']}-{b['name']}")
                if len(base + ".sock") > 100:
                    raise ClusterError(f"state directory path too long for a unix socket: {base}.sock")
                for kind, sfx, target, nport in (("memd", "", "memd_port", "relay"),
                                                 ("writer", "-writer", "writer_port", "writer_relay")):
                    st["relays"].append({"name": f"wanem {a['name']}->{b['name']}{sfx}", "from": a["name"],
                                         "to": b["name"], "kind": kind, "port": ports[i],
                                         "target_port": b[target], "control": base + sfx + ".sock",
                                         "ready": base + sfx + ".ready", "log": base + sfx + ".log",
                                         "process": None})
                    if a.get("netns"):  # on a's host: a's address, a port per peer, to b's real address
                        st["relays"][-1].update(listen_host=a["host"], target_host=b["host"],
                                                netns=a["netns"], port=NETNS_PORTS[nport] + bi)
                    i += 1

    old_int = signal.signal(signal.SIGINT, _interrupt)
    old_term = signal.signal(signal.SIGTERM, _interrupt)
    try:
        save_state(d, st)
        if net is not None:  # recorded first: `down` removes it even if this process dies now
            try:
                net.create()
            except netns.NetError as e:
                raise ClusterError(f"--netns: {e}") from None
            log(f"network namespaces {', '.join(st['netns']['namespaces'])}; host interface "
                f"{net.host_if} {net.host_addr()}/24")
        deadline = time.monotonic() + opts["timeout"]
        # secret, docroot, configuration
        with open(st["secret_file"], "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(base64.b64encode(os.urandom(32)) + b"\n")
        if opts["binlogd"]:
            with open(st["mariadb"]["binlog_password_file"], "w") as f:
                os.fchmod(f.fileno(), 0o600)
                f.write(st["mariadb"]["binlog_password"] + "\n")
        if opts["arbiter"]:
            with open(st["mariadb"]["arbiter_password_file"], "w") as f:
                os.fchmod(f.fileno(), 0o600)
                f.write(st["mariadb"]["arbiter_password"] + "\n")
        shutil.copytree(os.path.join(REPO, "sample", "php"), st["docroot"])
        for root, dirs, files in os.walk(st["docroot"]):
            os.chmod(root, 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        if opts["cache"] == "tierce" and opts.get("node_keys", True):
            make_node_keys(st)
        write_topology(st)
        for n in st["nodes"]:
            os.makedirs(os.path.join(n["dir"], "run"), exist_ok=True)
            os.makedirs(os.path.join(n["dir"], "logs"), exist_ok=True)
            if n.get("netns"):
                install_node_files(st, n)
            elif n.get("topology"):
                write_node_topology(st, n)
            node_conf(st, n)
        preflight(st)
        for r in st["relays"]:  # before any memd: the app nodes reach each other through them
            start_relay(st, r)
            save_state(d, st)
        if st["relays"]:
            log("app links through tierce-wanem relays: "
                + ", ".join(f"{r['from']}->{r['to']} :{r['port']}" for r in st["relays"]))

        log(f"{d}: MariaDB on {st['mariadb']['host']}:{st['mariadb']['port']}")
        prepare_database(d, st, opts, deadline)
        deadline = time.monotonic() + opts["timeout"]
        tierce = opts["cache"] == "tierce"
        apps = [n for n in st["nodes"] if n["role"] == "app"]
        proxies = [n for n in st["nodes"] if n["role"] == "proxy"]
        for group in (apps, proxies):
            if tierce:
                for n in group:
                    if n.get("writer_conf"):
                        start_writer(st, n, deadline)
                    start_memd(st, n, deadline)
                    save_state(d, st)
            for n in group:
                start_httpd(st, n)
                save_state(d, st)
            for n in group:
                node_ready(st, n, deadline)
        if opts["binlogd"]:
            start_binlogd(st, apps[0], deadline)
            save_state(d, st)
        for n in apps:
            if opts["app_load"]:
                start_load(n, opts["app_load"])
        save_state(d, st)
        for n in proxies:  # through every proxy, each app answers (balancer)
            for _ in apps:
                node_ready(st, n, deadline)
        if opts["arbiter"]:  # writes are refused until the homes admitted every app node
            wait_until("the homes to admit every app node in " + ARBITER_TABLE,
                       lambda: all(r.get(n["name"], ("",))[0] == "in" for n in apps for r in [arbiter_rows(st)]),
                       deadline, [n["memd"] for n in apps], [n["memd"]["log"] for n in apps])
        st["state"] = "up"
        save_state(d, st)
        log(f"up: {napp} app + {nproxy} proxy nodes, cache={opts['cache']}; "
            f"proxies: {' '.join(n['url'] for n in proxies)}")
        return st
    except BaseException as e:
        if isinstance(e, (Interrupted, KeyboardInterrupt)):
            log("interrupted: stopping what was started")
        else:
            log("start-up failed: stopping what was started")
        try:
            _stop_all(st)
            remove_netns(st)
            st["state"] = "down"
            save_state(d, st)
        except Exception as e2:  # still report the first failure
            log(f"while stopping: {e2}")
        if isinstance(e, (Interrupted, KeyboardInterrupt)):
            raise ClusterError("interrupted") from None
        raise
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def _stop_all(st):
    """Stops load, proxies, apps, memds, then MariaDB; removes the cluster's /dev/shm entries."""
    killed = []
    load = [r for n in st.get("nodes", []) for r in n.get("load", [])]
    killed += procs.stop(load, signal.SIGKILL, 2)
    # Every httpd at once, then every agent at once: each httpd parent reaps its children on a
    # backoff (16 ms, x4 each time), so a stop takes 1-5 s however quick its children are, and
    # stopping proxies, apps, memds, writers and relays one after the other added those up
    # (~10 s of each cluster test's teardown).
    killed += procs.stop([n.get("httpd") for n in st.get("nodes", [])], deadline=10)
    killed += procs.stop([n.get(k) for n in st.get("nodes", []) for k in ("memd", "writer", "binlogd")]
                         + [r.get("process") for r in st.get("relays", [])], deadline=5)
    if st.get("mariadb", {}).get("process"):
        killed += procs.stop([st["mariadb"]["process"]], deadline=30)
    removed = remove_shm(st)
    for r in st.get("relays", []):  # a relay killed by SIGKILL leaves its socket file
        for f in (r["control"], r["ready"]):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass
    return killed, removed


def down(d=DEFAULT_DIR):
    """Stops everything recorded in d/cluster.json; idempotent. Returns the list of processes
    that needed SIGKILL."""
    d = os.path.abspath(d)
    st = load_state(d)
    if st is None:
        log(f"nothing to stop: no {state_path(d)}")
        return []
    killed, removed = _stop_all(st)
    left = [r["name"] for r in all_processes(st) if procs.alive(r) or procs.leftover_members(r)]
    stray = remove_netns(st)
    if stray:
        log(f"killed {len(stray)} process(es) still inside the cluster's namespaces: {stray}")
    if st.get("netns"):
        there = [ns for ns in st["netns"]["namespaces"] if netns.exists(ns)]
        if st["netns"].get("host_if") and os.path.exists(f"/sys/class/net/{st['netns']['host_if']}"):
            there.append(st["netns"]["host_if"])
        if there:
            left.append("namespaces/interfaces " + ", ".join(there))
    st["state"] = "down"
    st["stopped"] = time.time()
    save_state(d, st)
    if left:
        raise ClusterError(f"still running after SIGKILL: {', '.join(left)}")
    log(f"down: {d} stopped" + (f" (SIGKILL needed: {', '.join(killed)})" if killed else "")
        + (f", {removed} /dev/shm entries removed" if removed else ""))
    return killed


def restart_node(d, name, sig="KILL", timeout=60.0):
    """Kills a node's httpd and memd (SIGKILL by default), starts both again with the same ports
    and configuration, waits until they answer; updates cluster.json."""
    d = os.path.abspath(d)
    st = load_state(d)
    if st is None or st.get("state") != "up":
        raise ClusterError(f"no cluster up in {d}")
    nodes = {n["name"]: n for n in st["nodes"]}
    if name not in nodes:
        raise ClusterError(f"no node {name} (nodes: {', '.join(nodes)})")
    n = nodes[name]
    signum = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM}.get(sig.upper())
    if signum is None:
        raise ClusterError("--signal must be KILL or TERM")
    procs.stop([n.get("httpd"), n.get("memd"), n.get("writer")], signum, deadline=10)
    deadline = time.monotonic() + timeout
    if st["options"]["cache"] == "tierce":
        if n.get("writer_conf"):
            start_writer(st, n, deadline)
        start_memd(st, n, deadline)
        save_state(d, st)
    start_httpd(st, n)
    save_state(d, st)
    node_ready(st, n, deadline)
    st["restarts"] = st.get("restarts", []) + [{"node": name, "signal": sig.upper(), "time": time.time()}]
    save_state(d, st)
    log(f"{name} restarted (httpd pid {n['httpd']['pid']}"
        + (f", memd pid {n['memd']['pid']}" if n.get("memd") else "") + ")")
    return st


def _up_state(d):
    d = os.path.abspath(d)
    st = load_state(d)
    if st is None or st.get("state") != "up":
        raise ClusterError(f"no cluster up in {d}")
    return d, st


def _node(st, name):
    nodes = {n["name"]: n for n in st["nodes"]}
    if name not in nodes:
        raise ClusterError(f"no node {name} (nodes: {', '.join(nodes)})")
    return nodes[name]


def _note_fault(d, st, what):
    st["faults"] = st.get("faults", []) + [dict(what, time=time.time())]
    save_state(d, st)


def _wait_states(pids_of, want, what, timeout):
    """Polls until every pid of pids_of() is in a state for which want(state) holds."""
    end = time.monotonic() + timeout
    while True:
        states = pids_of()
        if all(want(s) for _, s in states):
            return
        if time.monotonic() > end:
            raise ClusterError(f"{what}: after {timeout:g} s still " +
                               ", ".join(f"pid {p} state {s}" for p, s in states if not want(s)))
        time.sleep(0.02)


def signal_proc(d, name, proc, sig):
    """Sends STOP, CONT, KILL or TERM to one process of a node: memd, or httpd with all its
    children (the whole instance: STOP freezes the children too, KILL kills them); "all": every
    process of the node that runs (PROCS: httpd first, as a host loss would take them at once).
    Returns once the signal has taken effect: every process stopped (STOP), running again (CONT),
    gone (KILL), or gone within 15 s (TERM)."""
    if proc == "all":
        d, st = _up_state(d)
        n = _node(st, name)
        running = [p for p in sorted(PROCS, key=lambda p: p != "httpd")
                   if n.get(p) and procs.members(n[p])]
        if not running:
            raise ClusterError(f"{name}: no process of it is running")
        return [pid for p in running for pid in signal_proc(d, name, p, sig)]
    d, st = _up_state(d)
    n = _node(st, name)
    if proc not in PROCS:
        raise ClusterError(f"the process must be {', '.join(PROCS)} or all, not {proc}")
    sig = sig.upper()
    if sig not in SIGNALS:
        raise ClusterError(f"the signal must be one of {', '.join(SIGNALS)}, not {sig}")
    rec = n.get(proc)
    if not rec:
        raise ClusterError(f"{name} has no {proc} (--cache {st['options']['cache']})")
    pids = procs.signal_instance(rec, SIGNALS[sig])
    if not pids:
        raise ClusterError(f"{rec['name']} is not running (pid {rec['pid']})")
    pgid = rec.get("pgid") or rec["pid"]

    def states():
        mine = set(procs.members(rec))
        return [(p, s) for p, s in procs.group_members(pgid, with_state=True) if p in mine]
    if sig == "STOP":
        _wait_states(states, lambda s: s in ("T", "t"), f"{rec['name']} STOP", 5)
    elif sig == "CONT":
        _wait_states(states, lambda s: s not in ("T", "t"), f"{rec['name']} CONT", 5)
    else:
        limit = 5 if sig == "KILL" else 15
        end = time.monotonic() + limit
        while procs.members(rec) and time.monotonic() < end:
            time.sleep(0.02)
        if procs.members(rec):
            raise ClusterError(f"{rec['name']}: still running {limit} s after SIG{sig}: "
                               f"pids {procs.members(rec)}")
    _note_fault(d, st, {"node": name, "proc": proc, "signal": sig, "pids": len(pids)})
    log(f"{rec['name']}: SIG{sig} sent to {len(pids)} process(es)")
    return pids


def start_proc_ready(d, st, n, proc, deadline):
    """Starts one process of node n (writer, memd or httpd) with its ports and configuration,
    records it, and waits until it is ready: the writer agent's or memd's ready file; httpd
    answering GET /index.php with 200."""
    if proc == "writer":
        start_writer(st, n, deadline)  # waits for its ready file itself
        save_state(d, st)
    elif proc == "binlogd":
        start_binlogd(st, n, deadline)  # waits until it reads the binlog
        save_state(d, st)
    elif proc == "memd":
        start_memd(st, n, deadline)
        save_state(d, st)
        wait_until(f"{n['name']}/memd ready file", lambda: os.path.exists(n["memd_ready"]), deadline,
                   [n["memd"]], [n["memd"]["log"]])
    else:
        start_httpd(st, n)
        save_state(d, st)
        wait_until(f"{n['name']} to answer GET /index.php with 200",
                   lambda: node_get(n, "/index.php")[0] == 200, deadline, [n["httpd"]],
                   [n["httpd"]["error_log"], n["httpd"]["log"]])


def restart_proc(d, name, which, timeout=60.0):
    """Starts one process of a node again (memd, httpd, or both: memd first) with its ports and
    configuration, after it was killed; one still running is SIGKILLed first. Waits until it is
    ready: memd's ready file; httpd answering GET /index.php with 200."""
    d, st = _up_state(d)
    n = _node(st, name)
    wanted = [p for p in PROCS if p in which or "all" in which]
    if not wanted or any(w not in PROCS + ("all",) for w in which):
        raise ClusterError(f"restart-proc wants memd, writer, httpd or all, not {' '.join(which)}")
    if "memd" in wanted and st["options"]["cache"] != "tierce":
        raise ClusterError(f"{name} has no memd (--cache {st['options']['cache']})")
    if "binlogd" in wanted and not n.get("binlogd_conf"):
        if "all" in which:
            wanted.remove("binlogd")
        else:
            raise ClusterError(f"{name} runs no tierce-binlogd (app1 of a cluster up without --no-binlogd does)")
    if "writer" in wanted and not n.get("writer_conf"):
        if "all" in which:
            wanted.remove("writer")
        else:
            raise ClusterError(f"{name} has no writer agent (app nodes with --cache tierce have one)")
    deadline = time.monotonic() + timeout
    for proc in wanted:
        rec = n.get(proc)
        if rec and procs.members(rec):
            log(f"{rec['name']} still running: SIGKILL first")
            procs.signal_instance(rec, signal.SIGKILL)
            procs.stop([rec], signal.SIGKILL, deadline=5)
        start_proc_ready(d, st, n, proc, deadline)
    _note_fault(d, st, {"node": name, "restart": wanted})
    log(f"{name}: restarted " + ", ".join(f"{p} (pid {n[p]['pid']})" for p in wanted))
    return st


def link(d, a, b, action, ms=None, one_way=False, to=None):
    """Acts on the relays between app nodes a and b (--app-links relay): cut / heal both
    directions, or with one_way only what a sends to b (a->b relay: client->target; b->a relay:
    target->client); delay MS on both relays, both directions; redirect: the connections a opens
    to b (its memd and writer agent) go to node `to`'s memd (or writer agent) instead, as an
    on-path attacker would send them ("off": to b again)."""
    d, st = _up_state(d)
    if action == "redirect":
        return link_redirect(d, st, a, b, to)
    if st.get("netns") and action != "delay":  # a delay is the relays' in both modes
        return link_netns(d, st, a, b, action, ms, one_way)
    if not st.get("relays"):
        raise ClusterError("this cluster has no app-link relays (start it with --app-links relay)")
    ab, ba = relay_between(st, a, b), relay_between(st, b, a)
    if ab is None or ba is None:
        apps = sorted({r["from"] for r in st["relays"]})
        raise ClusterError(f"no relays between {a} and {b} (app nodes: {', '.join(apps)})")
    # Every link between the two: to each other's memd and to each other's writer agent.
    pairs = [(relay_between(st, a, b, k), relay_between(st, b, a, k)) for k in ("memd", "writer")]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    if action == "delay":
        if one_way:
            raise ClusterError("--one-way applies to cut and heal; delay acts on both directions")
        if ms is None or ms < 0 or ms > 60000:
            raise ClusterError("delay wants milliseconds in 0..60000")
        cmds = [(r, f"delay {int(round(ms * 1000))}") for x, y in pairs for r in (x, y)]
    elif action in ("cut", "heal"):
        if ms is not None:
            raise ClusterError(f"{action} takes no milliseconds")
        if one_way:
            cmds = [c for x, y in pairs for c in ((x, f"{action} to-target"), (y, f"{action} to-client"))]
        else:
            cmds = [(r, f"{action} both") for x, y in pairs for r in (x, y)]
    else:
        raise ClusterError(f"link action must be cut, heal or delay, not {action}")
    answers = [f"{r['name'][6:]}: {relay_command(r, c)}" for r, c in cmds]
    _note_fault(d, st, {"link": [a, b], "action": action, "ms": ms, "one_way": one_way})
    log(f"link {a} {b} {action}{'' if ms is None else ' %g ms' % ms}{' (one way)' if one_way else ''}: "
        + "; ".join(answers))
    return answers


def link_redirect(d, st, a, b, to):
    """link A B redirect --to NODE|off (see link)."""
    if st.get("netns"):
        raise ClusterError("link ... redirect works on the --app-links relays, not with --netns")
    if not to:
        raise ClusterError("link ... redirect needs --to NODE (or --to off)")
    pairs = [relay_between(st, a, b, k) for k in ("memd", "writer")]
    pairs = [r for r in pairs if r is not None]
    if not pairs:
        raise ClusterError(f"no relays from {a} to {b} (start the cluster with --app-links relay)")
    nodes = {n["name"]: n for n in st["nodes"]}
    if to != "off" and to not in nodes:
        raise ClusterError(f"redirect --to {to}: no such node (nodes: {', '.join(nodes)})")
    cmds = []
    for r in pairs:
        if to == "off":
            cmds.append((r, "redirect off"))
        else:
            n = nodes[to]
            port = n.get("writer_port", n["memd_port"]) if r.get("kind") == "writer" else n["memd_port"]
            cmds.append((r, f"redirect 127.0.0.1:{port}"))
    answers = [f"{r['name'][6:]}: {relay_command(r, c)}" for r, c in cmds]
    _note_fault(d, st, {"link": [a, b], "action": "redirect", "to": to})
    log(f"link {a} {b} redirect to {to}: " + "; ".join(answers))
    return answers


def _drop_rules(st, a, b, one_way):
    """The iptables rules (namespace, chain, match) that cut what a sends to b (and, unless
    one_way, what b sends to a): each packet is dropped where it leaves its sender and where it
    reaches its receiver, so a cut holds whichever side has a rule."""
    na, nb = _node(st, a), _node(st, b)
    rules = [(na["netns"], "OUTPUT", ["-d", nb["host"]]), (nb["netns"], "INPUT", ["-s", na["host"]])]
    if not one_way:
        rules += [(nb["netns"], "OUTPUT", ["-d", na["host"]]), (na["netns"], "INPUT", ["-s", nb["host"]])]
    return rules


def link_netns(d, st, a, b, action, ms, one_way):
    """link in netns mode: cut / heal drop (or stop dropping) every packet between the two nodes'
    addresses with iptables rules inside their namespaces: a silent network, as a pulled cable
    (TCP retransmits; after the heal the connections resume). Any two nodes, not only app nodes.
    (A delay goes through link()'s relay path, as without --netns: start with --app-links relay.)"""
    if action not in ("cut", "heal"):
        raise ClusterError(f"link action must be cut, heal or delay, not {action}")
    if ms is not None:
        raise ClusterError(f"{action} takes no milliseconds")
    if a == b:
        raise ClusterError("link wants two different nodes")
    if not os.access(IPTABLES, os.X_OK):
        raise ClusterError(f"link with --netns needs {IPTABLES} (tools/deps.sh installs iptables)")
    answers = []
    for ns, chain, match in _drop_rules(st, a, b, one_way):
        rule = [chain] + match + ["-m", "comment", "--comment", f"tierce-cluster {st['name']}", "-j", "DROP"]
        ipt = [procs.IP, "netns", "exec", ns, IPTABLES, "-w"]
        present = subprocess.run(ipt + ["-C"] + rule, capture_output=True).returncode == 0
        if action == "cut" and not present:
            argv = ipt + ["-I"] + rule
        elif action == "heal" and present:
            argv = ipt + ["-D"] + rule
        else:
            answers.append(f"{ns} {chain} {' '.join(match)}: already {'cut' if present else 'healed'}")
            continue
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise ClusterError(f"{' '.join(argv)}: {r.stderr.strip()}")
        answers.append(f"{ns} {chain} {' '.join(match)}: {'DROP' if action == 'cut' else 'removed'}")
    _note_fault(d, st, {"link": [a, b], "action": action, "ms": None, "one_way": one_way})
    log(f"link {a} {b} {action}{' (one way)' if one_way else ''}: " + "; ".join(answers))
    return answers


def membership(d, name, action):
    """node-out / node-in: sends "out NAME" / "in NAME" to every other app node's home
    (coherence.membership, through tierce-fabric). node-out refuses while a process of NAME runs:
    a node taken out must not be able to write (docs/coherence.md "Taking a lost node out")."""
    d, st = _up_state(d)
    n = _node(st, name)
    if n["role"] != "app":
        raise ClusterError(f"{name} is not an app node")
    if action == "out":
        alive = [p for p in PROCS if n.get(p) and procs.members(n[p])]
        if alive:
            raise ClusterError(f"{name} still runs {', '.join(alive)}: a node taken out must not be "
                               "able to write (stop it first, e.g. signal {name} httpd KILL)")
    tool = os.path.join(st["options"]["build"], "tools", "tierce-fabric", "tierce-fabric")
    answers = []
    for h in st["nodes"]:
        if h["role"] != "app" or h is n or not h.get("memd") or not procs.alive(h["memd"]):
            continue
        uri = next(u for u in h["memd_uris"] if u.startswith("tcp://"))
        argv = [tool, "--secret-file", h.get("secret_file", st["secret_file"]), "--timeout", "5000"]
        if h.get("node_key"):  # a members-only service: signed with that home's own node key
            argv += ["--node-key", h["node_key"], "--node", h["name"]]
        argv += ["call", uri, "coherence.membership", f"{action} {name}"]
        if h.get("netns"):
            argv = [procs.IP, "netns", "exec", h["netns"]] + argv
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        reply = (r.stdout or r.stderr).strip()
        if r.returncode != 0 or reply.startswith("error"):
            raise ClusterError(f"{h['name']}: {reply}")
        answers.append(f"{h['name']}: {reply}")
    _note_fault(d, st, {"node": name, "membership": action})
    log(f"node-{action} {name}: " + "; ".join(answers))
    return answers


def add_node(d, name, timeout=60.0):
    """Adds app node `name` to a running cluster (docs/coherence.md "Topology": every node must
    run from the same topology file, its digest travels in every message): writes the new shared
    topology (the node after the last app node), starts the new node's memd and httpd with it,
    then restarts every other app node's memd and httpd (TERM, then start; one node at a time,
    each ready before the next) and every proxy's httpd (its balancer gains the new node; its
    arena starts empty) with the new file. Until the last process runs the new file, nodes of
    the two files refuse each other's registrations, reads and invalidations (fail closed: misses,
    and updates that wait the fence bound). Returns the state."""
    d, st = _up_state(d)
    opts = st["options"]
    if any(n["name"] == name for n in st["nodes"]):
        raise ClusterError(f"a node {name} exists already")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,30}", name):
        raise ClusterError(f"not a node name: {name!r}")
    if opts["cache"] != "tierce":
        raise ClusterError("add-node needs --cache tierce")
    if st.get("netns") or st.get("relays"):
        raise ClusterError("add-node: not with --netns or --app-links relay (their per-node topology "
                           "files and relays are not rewritten)")
    t0 = time.monotonic()
    port, memd_port, writer_port = procs.free_ports(3)
    nd = os.path.join(d, "nodes", name)
    sock = os.path.join(d, "run", f"{name}-memd.sock")
    n = {"name": name, "role": "app", "dir": nd, "port": port, "memd_port": memd_port,
         "url": f"http://127.0.0.1:{port}/", "conf": os.path.join(nd, "conf", "httpd.conf"),
         "memd_conf": os.path.join(nd, "memd.toml"), "memd_ready": os.path.join(nd, "run", "memd.ready"),
         "memd_uris": [f"tcp://127.0.0.1:{memd_port}", f"shm://{sock}"],
         "segment_prefix": f"/tierce.{st['name']}.{name}", "memd": None, "httpd": None, "load": [],
         "writer_port": writer_port, "writer_conf": os.path.join(nd, "writer.toml"),
         "writer_ready": os.path.join(nd, "run", "writer.ready"), "writer": None,
         "writer_uris": [f"tcp://127.0.0.1:{writer_port}",
                         f"shm://{os.path.join(d, 'run', name + '-writer.sock')}"]}
    last_app = max(i for i, x in enumerate(st["nodes"]) if x["role"] == "app")
    st["nodes"].insert(last_app + 1, n)
    for sub in ("run", "logs"):
        os.makedirs(os.path.join(nd, sub), exist_ok=True)
    write_topology(st)
    for x in st["nodes"]:
        node_conf(st, x)  # the proxies' balancer lists the new node
    save_state(d, st)
    deadline = time.monotonic() + timeout
    start_writer(st, n, deadline)
    start_memd(st, n, deadline)
    save_state(d, st)
    start_httpd(st, n)
    save_state(d, st)
    node_ready(st, n, deadline)
    log(f"{name} started with the new topology ({time.monotonic() - t0:.1f} s)")
    others = [x for x in st["nodes"] if x["role"] == "app" and x is not n]
    proxies = [x for x in st["nodes"] if x["role"] == "proxy"]
    for x in others + proxies:
        deadline = time.monotonic() + timeout
        which = (("writer", "memd", "httpd") if x.get("writer_conf") else ("memd", "httpd")) \
            if x["role"] == "app" else ("httpd",)
        for proc in which:
            procs.stop([x.get(proc)], signal.SIGTERM, deadline=15)
            start_proc_ready(d, st, x, proc, deadline)
        log(f"{x['name']}: {' and '.join(which)} restarted with the new topology "
            f"({time.monotonic() - t0:.1f} s)")
    _note_fault(d, st, {"node": name, "added": True})
    log(f"{name} added: every node runs the new topology ({time.monotonic() - t0:.1f} s)")
    return st


def status(d=DEFAULT_DIR, out=sys.stdout):
    """Prints the cluster state; returns True when every recorded process is alive."""
    d = os.path.abspath(d)
    st = load_state(d)
    if st is None:
        print(f"no cluster in {d}", file=out)
        return False
    o = st["options"]
    m = st["mariadb"]
    print(f"cluster {st['name']} in {d}: {st.get('state')}  cache={o['cache']} transport={o['transport']} "
          f"scheme={o['scheme']} ttl={o['ttl']} app_load={o['app_load']}", file=out)
    print(f"database mysql://{m['user']}:{m['password']}@{m['host']}:{m['port']}/{m['database']} "
          f"(socket {m['socket']})", file=out)
    ok = True

    def line(rec, extra=""):
        nonlocal ok
        if not rec:
            return
        a = procs.alive(rec)
        ok = ok and a
        word = ("STOPPED" if procs.state(rec["pid"]) in ("T", "t") else "alive") if a else "DEAD"
        print(f"  {rec['name']:<16} pid {rec['pid']:<8} {word:<7} {extra} log {rec['log']}",
              file=out)
    if st.get("netns"):
        rec = st["netns"]
        there = [ns for ns in rec["namespaces"] if netns.exists(ns)]
        hif = rec.get("host_if")
        print(f"network namespaces ({len(there)} of {len(rec['namespaces'])} present): "
              + " ".join(rec["namespaces"]) + f"; host interface {hif} {rec.get('host_addr')}/24 "
              + ("present" if hif and os.path.exists(f"/sys/class/net/{hif}") else "ABSENT"), file=out)
        if st.get("state") == "up" and len(there) != len(rec["namespaces"]):
            ok = False
    line(m.get("process"), f"{m['host']}:{m['port']}" + (f" netns {m['netns']}" if m.get("netns") else ""))
    if o.get("arbiter") and m.get("process") and procs.alive(m["process"]):
        rows = arbiter_rows(st)
        print(f"  arbiter {ARBITER_TABLE}: " + (", ".join(
            f"{n} {r[0]} epoch {r[1]} (by {r[2]} at {r[3]})" for n, r in sorted(rows.items())) or "unreadable"),
            file=out)
    for r in st.get("relays", []):
        state = ""
        if r.get("process") and procs.alive(r["process"]):
            try:
                state = relay_command(r, "status", timeout=2).split(" connections=")[0][3:] + " "
            except ClusterError as e:
                state = f"(control: {e}) "
        line(r.get("process"), f":{r['port']} -> :{r['target_port']} {state}")
    for n in st["nodes"]:
        line(n.get("memd"), f"{' '.join(n['memd_uris'])}" + (f" netns {n['netns']}" if n.get("netns") else ""))
        if n.get("writer_uris"):
            line(n.get("writer"), " ".join(n["writer_uris"]))
        line(n.get("httpd"), f"{n['url']}")
        for r in n.get("load", []):
            line(r)
    return ok
