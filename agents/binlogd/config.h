// agents/binlogd/config.h — tierce-binlogd's settings: one TOML file (conf/binlogd.toml is the
// commented sample; docs/binlog.md the reference).
//
//   [binlogd]
//   topology = "/etc/tierce/cluster.toml"  # the cluster's topology (homes, secret, digest)
//   node = "app1"                 # the app node it runs beside: its invalidations are numbered by
//                                 # that node's writer counter (/dev/shm), like its httpd's
//   node_key = "/etc/tierce/app1.key"  # the node's key: required when the topology has keys
//   state_file = "/var/lib/tierce/binlogd.gtid"  # the GTID position, written atomically
//   pid_file = "/run/tierce/binlogd.pid"
//   user = "tierce"               # drop to it after start (optional)
//   log_level = "info"
//   metrics_file = "/var/lib/prometheus/node-exporter/tierce-binlogd.prom"
//   metrics_interval_ms = 5000
//   databases = ["rubis"]         # whose rows are watched ([] = all but the server's own)
//   auto_names = false            # also the PHP extension's automatic names (sqldeps)
//   unknown_tables = "invalidate-all"  # or "ignore": tables with no [[table]] (auto_names off)
//   max_batch_transactions = 256  # transactions carried by one invalidation round at most
//   lag_alarm_ms = 1000           # a transaction older than this, not yet invalidated: logged
//   audit_file = ""               # tests: "ACKED_UNIX_NS GTID ROWS NAMES|*" per transaction
//                                 # (GTID "@POSITION": an invalidate-all covering up to there)
//   [mariadb]
//   host = "127.0.0.1"  port = 3306  socket = ""  user = "tierce_binlog"
//   password_file = "/etc/tierce/binlogd.password"  # mode 600; its first line
//   server_id = 4242              # unique among the server's replicas
//   heartbeat_ms = 500            # the server's heartbeat when idle; 4 missed = reconnect
//   [[table]]
//   name = "items"                # or "db.items"
//   names = ["item:{id}", "category:{category_id}", "user:{seller_id}"]
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "agents/binlogd/mapping.h"
#include "agents/binlogd/source.h"
#include "base/config.h"
#include "base/log.h"
#include "base/privileges.h"

namespace tierce::binlogd {

struct Settings {
  std::string topology, node, state_file, pid_file, metrics_file, user;
  // The node's key (tierce-fabric keygen): required in a keyed cluster, where the homes take
  // invalidations only from a node that signs (docs/SECURITY.md "Roles").
  std::string node_key;
  std::string audit_file;  // every invalidated transaction, one line (tests, benchmarks)
  base::LogLevel log_level = base::LogLevel::Info;
  std::chrono::milliseconds metrics_interval{5000};
  size_t max_batch_transactions = 256;
  std::chrono::milliseconds lag_alarm{1000};
  SourceSettings mariadb;
  std::string password_file;
  MappingSettings mapping;
};

// Reads and checks the file: every problem at once, each "FILE:LINE:COL: [table] KEY: ...".
// Throws base::ConfigError. The password file is named here and read at start
// (read_password_file).
Settings load_config_file(const std::string& path);
Settings parse_config(std::string_view text, const std::string& source_name);

// The password file's first line (BINLOGD0103 when unreadable or readable by others).
base::Result<std::string> read_password_file(const std::string& path);

}  // namespace tierce::binlogd
