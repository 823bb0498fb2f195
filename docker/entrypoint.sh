#!/bin/bash
# tierce-entrypoint ROLE — PID 1 of the Tierce images (docker/README.md): app | proxy | db | binlogd.
# Starts the role's processes the way the packages' units would (memd first, ready, then httpd),
# logs to stderr (podman/docker logs), forwards SIGTERM, and exits when any of them exits, so that
# the engine's restart policy — not a half-dead container — handles a crash.
set -euo pipefail
role=${1:-}
say() { echo "tierce-entrypoint[$role]: $*" >&2; }
die() { say "$*"; exit 2; }

pids=()
stopping=0
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
}
trap 'stopping=1; say "stopping"; stop_all' TERM INT

# Waits for all children after one has exited: the first exit is the container's status.
supervise() {
  local rc=0
  wait -n "${pids[@]}" || rc=$?
  if [[ $stopping == 1 ]]; then
    wait || true
    say "stopped"
    exit 0
  fi
  say "a process exited (status $rc): stopping the others"
  if [[ -s /var/log/apache2/error.log ]]; then
    say "the end of /var/log/apache2/error.log (httpd's own log):"
    tail -n 15 /var/log/apache2/error.log >&2
  fi
  stop_all
  wait || true
  exit "$rc"
}

need_cluster_files() {
  [[ -r /etc/tierce/cluster.toml ]] || die "/etc/tierce/cluster.toml is missing: mount the cluster's topology (docker/cluster/cluster.toml)"
  [[ -r /etc/tierce/secret ]] || die "/etc/tierce/secret is missing: mount the cluster's secret (tools/tierce-containers secret; the images carry none)"
  [[ -n ${TIERCE_NODE:-} ]] || die "TIERCE_NODE is not set: this node's name in /etc/tierce/cluster.toml"
}

start_httpd() {
  # Debian's envvars reads variables it may leave unset.
  set +u
  # shellcheck disable=SC1091
  . /etc/apache2/envvars
  set -u
  mkdir -p "$APACHE_RUN_DIR" "$APACHE_LOCK_DIR" "$APACHE_LOG_DIR"
  rm -f "$APACHE_PID_FILE"
  apache2 -t >/dev/null 2>&1 || { apache2 -t || true; die "the Apache configuration is invalid (above)"; }
  apache2 -DFOREGROUND &
  pids+=($!)
  say "apache2 started (pid $!)"
}

case "$role" in
app)
  need_cluster_files
  for v in TIERCE_DB_HOST TIERCE_DB_PASSWORD; do
    [[ -n ${!v:-} ]] || die "$v is not set (the sample site's database)"
  done
  export TIERCE_DB_PORT=${TIERCE_DB_PORT:-3306} TIERCE_DB_USER=${TIERCE_DB_USER:-tierce} \
         TIERCE_DB_NAME=${TIERCE_DB_NAME:-rubis}
  listen=${TIERCE_MEMD_LISTEN:-tcp://$(hostname -i | awk '{print $1}'):7101}
  install -d -m 0755 -o tierce -g tierce /run/tierce
  # /dev/shm may be a volume shared with this node's binlogd container (compose.yaml): give it the
  # mode of a host's /dev/shm (a new volume is root's 0755), so that memd, once it is user tierce,
  # may still remove its segments there.
  chmod 1777 /dev/shm
  cat > /etc/tierce/memd.toml <<EOF
# Written by tierce-entrypoint: the home of app node $TIERCE_NODE (docs/memd.md).
[memd]
node = "$TIERCE_NODE"
listen = ["$listen"]
secret_file = "/etc/tierce/secret"
pid_file = "/run/tierce/memd.pid"
ready_file = "/run/tierce/memd.ready"
user = "tierce"
log_level = "${TIERCE_MEMD_LOG_LEVEL:-info}"

[coherence]
topology = "/etc/tierce/cluster.toml"
EOF
  tierce-memd --check -c /etc/tierce/memd.toml || die "tierce-memd refused its configuration (above)"
  rm -f /run/tierce/memd.ready
  tierce-memd --foreground -c /etc/tierce/memd.toml &
  pids+=($!)
  for _ in $(seq 300); do
    [[ -e /run/tierce/memd.ready ]] && break
    kill -0 "${pids[0]}" 2>/dev/null || { wait "${pids[0]}" || true; die "tierce-memd exited before it was ready (above)"; }
    sleep 0.1
  done
  [[ -e /run/tierce/memd.ready ]] || { stop_all; die "tierce-memd was not ready within 30 s"; }
  say "tierce-memd of $TIERCE_NODE is ready on $listen"
  start_httpd
  supervise
  ;;
proxy)
  need_cluster_files
  [[ -n ${TIERCE_APP_URLS:-} ]] || die "TIERCE_APP_URLS is not set: the app nodes, e.g. \"http://10.89.71.11:80 http://10.89.71.12:80\""
  export TIERCE_RCACHE_SIZE=${TIERCE_RCACHE_SIZE:-256M}
  install -d -m 0755 /run/tierce
  : > /run/tierce/balancer.conf
  i=0
  for u in $TIERCE_APP_URLS; do
    [[ $u =~ ^https?://[^[:space:]/]+/?$ ]] || die "TIERCE_APP_URLS: \"$u\" is not http://HOST:PORT"
    i=$((i + 1))
    echo "BalancerMember ${u%/} route=app$i retry=1" >> /run/tierce/balancer.conf
  done
  start_httpd
  supervise
  ;;
db)
  [[ -n ${TIERCE_DB_PASSWORD:-} ]] || die "TIERCE_DB_PASSWORD is not set (the app nodes' account)"
  name=${TIERCE_DB_NAME:-rubis} user=${TIERCE_DB_USER:-tierce}
  [[ $name =~ ^[A-Za-z0-9_]+$ && $user =~ ^[A-Za-z0-9_]+$ ]] || die "TIERCE_DB_NAME and TIERCE_DB_USER: letters, digits and _ only"
  read -r cats users items bids seed <<< "${TIERCE_DATA:-20 2000 10000 100000 1}"
  install -d -o mysql -g mysql /run/mysqld /var/lib/mysql
  fresh=0
  if [[ ! -d /var/lib/mysql/mysql ]]; then
    fresh=1
    say "initializing the data directory"
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql --auth-root-authentication-method=socket \
      --skip-test-db >/tmp/install.log 2>&1 || { cat /tmp/install.log >&2; die "mariadb-install-db failed"; }
  fi
  # The change log tierce-binlogd reads (the binlogd service; docs/OPERATIONS.md "tierce-binlogd"):
  # every row change, whole rows, column names and keys; kept a day (a binlogd stopped longer
  # invalidates everything once when it comes back).
  mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock --port=3306 \
    --bind-address=0.0.0.0 --skip-name-resolve --max-connections=1000 --innodb-buffer-pool-size=256M \
    --log-bin=/var/lib/mysql/binlog --server-id=1 --binlog-format=ROW --binlog-row-image=FULL \
    --binlog-row-metadata=FULL --binlog-expire-logs-seconds=86400 \
    --log-error=/dev/stderr &
  pids+=($!)
  for _ in $(seq 600); do
    mariadb -uroot -e 'SELECT 1' >/dev/null 2>&1 && break
    kill -0 "${pids[0]}" 2>/dev/null || { wait "${pids[0]}" || true; die "mariadbd exited at start (above)"; }
    sleep 0.1
  done
  mariadb -uroot -e 'SELECT 1' >/dev/null || { stop_all; die "MariaDB did not accept connections within 60 s"; }
  if [[ $fresh == 1 || ! -e /var/lib/mysql/.tierce-loaded ]]; then
    pw=${TIERCE_DB_PASSWORD//\'/\'\'}
    mariadb -uroot -e "CREATE DATABASE IF NOT EXISTS $name;
      CREATE USER IF NOT EXISTS '$user'@'%' IDENTIFIED BY '$pw';
      CREATE USER IF NOT EXISTS '$user'@'localhost' IDENTIFIED BY '$pw';
      GRANT ALL ON $name.* TO '$user'@'%'; GRANT ALL ON $name.* TO '$user'@'localhost';"
    say "loading the sample data ($cats categories, $users users, $items items, $bids bids, seed $seed)"
    tierce-datagen --host 127.0.0.1 --port 3306 --user "$user" --password "$TIERCE_DB_PASSWORD" \
      --database "$name" --categories "$cats" --users "$users" --items "$items" --bids "$bids" \
      --seed "$seed" --schema /usr/share/tierce/sample/schema.sql >&2 || { stop_all; die "tierce-datagen failed"; }
    touch /var/lib/mysql/.tierce-loaded
  fi
  # tierce-binlogd's account, at every start (a data volume from before it gets it; a new password
  # applies): created after the load, so the agent's first start does not read the load's rows.
  if [[ -n ${TIERCE_BINLOG_PASSWORD:-} ]]; then
    buser=${TIERCE_BINLOG_USER:-tierce_binlog}
    [[ $buser =~ ^[A-Za-z0-9_]+$ ]] || { stop_all; die "TIERCE_BINLOG_USER: letters, digits and _ only"; }
    bpw=${TIERCE_BINLOG_PASSWORD//\'/\'\'}
    mariadb -uroot -e "CREATE USER IF NOT EXISTS '$buser'@'%' IDENTIFIED BY '$bpw';
      ALTER USER '$buser'@'%' IDENTIFIED BY '$bpw';
      GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '$buser'@'%';" \
      || { stop_all; die "creating the binlog account $buser failed (above)"; }
    say "binlog account $buser: REPLICATION SLAVE, REPLICATION CLIENT"
  fi
  say "MariaDB is ready: database $name, account $user"
  touch /run/mysqld/tierce.ready
  supervise
  ;;
binlogd)
  need_cluster_files
  for v in TIERCE_DB_HOST TIERCE_BINLOG_PASSWORD; do
    [[ -n ${!v:-} ]] || die "$v is not set (the database whose binlog this agent reads)"
  done
  host=${TIERCE_DB_HOST:-} port=${TIERCE_DB_PORT:-3306} buser=${TIERCE_BINLOG_USER:-tierce_binlog}
  name=${TIERCE_DB_NAME:-rubis}
  # The writer counter of node $TIERCE_NODE numbers this agent's invalidations; the node's memd
  # creates it in its container's /dev/shm. Seeing it here proves that this container shares that
  # /dev/shm (compose.yaml: the same volume on both); without it the agent would number in a
  # counter of its own that no home reads.
  say "waiting for $TIERCE_NODE's writer counter in /dev/shm (its memd creates it)"
  seg=""
  for _ in $(seq 1200); do
    seg=$(compgen -G "/dev/shm/tierce.*.$TIERCE_NODE.writer" | head -n 1 || true)
    [[ -n $seg ]] && break
    sleep 0.1
  done
  [[ -n $seg ]] || die "no /dev/shm/tierce.*.$TIERCE_NODE.writer after 120 s: this container does not share $TIERCE_NODE's /dev/shm (mount the same volume at /dev/shm in both), or its memd does not run"
  install -d -m 0755 -o tierce -g tierce /run/tierce
  # The state (a volume): root:tierce 0770, as the unit's StateDirectory makes it.
  install -d /var/lib/tierce/binlogd
  chown root:tierce /var/lib/tierce/binlogd
  chmod 0770 /var/lib/tierce/binlogd
  (umask 077 && printf '%s\n' "$TIERCE_BINLOG_PASSWORD" > /etc/tierce/binlogd.password)
  cat > /etc/tierce/binlogd.toml <<EOF
# Written by tierce-entrypoint: tierce-binlogd beside app node $TIERCE_NODE (the package's
# /etc/tierce/binlogd.toml with this stack's values; every key: /usr/share/tierce/conf/binlogd.toml).
[binlogd]
topology = "/etc/tierce/cluster.toml"
node = "$TIERCE_NODE"
state_file = "/var/lib/tierce/binlogd/binlogd.gtid"
pid_file = "/run/tierce/binlogd.pid"
user = "tierce"
log_level = "${TIERCE_BINLOGD_LOG_LEVEL:-info}"
metrics_file = "/run/tierce/binlogd.prom"
databases = ["$name"]
auto_names = false
unknown_tables = "invalidate-all"

[mariadb]
host = "$host"
port = $port
user = "$buser"
password_file = "/etc/tierce/binlogd.password"
server_id = 4242

# The sample site's tables and the names its pages depend on (sample/php).
[[table]]
name = "items"
names = ["item:{id}", "category:{category_id}", "user:{seller_id}"]

[[table]]
name = "bids"
names = ["item:{item_id}", "user:{user_id}"]

[[table]]
name = "users"
names = ["user:{id}"]

[[table]]
name = "categories"
names = ["category:{id}", "categories"]
EOF
  tierce-binlogd --config /etc/tierce/binlogd.toml --check || die "tierce-binlogd refused its configuration (above)"
  tierce-binlogd --foreground --config /etc/tierce/binlogd.toml &
  pids+=($!)
  say "tierce-binlogd beside $TIERCE_NODE started (pid $!): the binlog of $host:$port as $buser, counter $seg"
  supervise
  ;;
*)
  echo "usage: tierce-entrypoint app|proxy|db|binlogd" >&2
  exit 2
  ;;
esac
