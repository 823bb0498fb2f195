// agents/lockd/config.h — tierce-lockd's settings: the command line, the optional TOML file
// (--config FILE, a [lockd] table) and how they combine. docs/dlm.md "tierce-lockd" is the
// reference; conf/lockd.toml a commented sample.
//
//   [lockd]
//   topology = "/etc/tierce/cluster.toml"   # -t
//   node = "app1"                           # -n
//   socket = "/run/tierce/lockd.sock"       # -s
//   socket_mode = "0660"                    # --socket-mode (octal, in quotes, or 0o660)
//   state_dir = "/var/lib/tierce/lockd-app1"  # -d
//   pid_file = "/run/tierce/lockd.pid"      # -p
//   log_level = "info"                      # debug | info | warn | error (-v: debug)
//   max_locks_per_client = 4096             # reloadable (SIGHUP)
//   max_locks_per_uid = 16384               # reloadable
//   max_clients_per_uid = 1024              # reloadable
//   protection = "mac"                      # fabric tcp frames: mac | encrypt | none
//   max_preauth_frame = 256                 # fabric: bytes a frame may claim before AUTH
//   max_connections = 4096                  # fabric: connections served at once
//   max_connections_per_ip = 1024           # fabric tcp: per address; 0 = no limit
//   spin_us = 50                            # poll this long for the next frame before sleeping
//   metrics_file = "/var/lib/prometheus/node-exporter/tierce-lockd.prom"  # reloadable
//   metrics_interval_ms = 15000             # reloadable
//
// Precedence: a command-line flag, else the file, else the default. On SIGHUP the file is read
// again: the quotas, log_level and the metrics file apply at once; any other change is reported as needing a
// restart and the running value stays. Relative paths are taken from the file's directory.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/log.h"
#include "fabric/auth.h"

namespace tierce::lockd {

struct Settings {
  static constexpr size_t kMaxQuota = size_t(1) << 30;
  std::string topology, node, socket = "/run/tierce/lockd.sock", state_dir, pid_file;
  std::string node_key;  // this node's key file (fabric/identity.h); "" = none
  mode_t socket_mode = 0660;
  base::LogLevel log_level = base::LogLevel::Info;
  size_t max_locks_per_client = 4096, max_locks_per_uid = 16384, max_clients_per_uid = 1024;
  fabric::Protection protection = fabric::Protection::Mac;
  size_t max_preauth_frame = 256, max_connections = 4096, max_connections_per_ip = 1024;
  // After a frame (a client's request, a peer's message or reply), the thread that read it polls
  // for the next one this long before sleeping: a sleeping thread's wake-up costs more than a
  // round trip on a VM. Costs up to this much CPU per burst; 0 = never spin (many lockds or
  // other busy processes on few CPUs, where a spin takes the CPU the awaited peer needs).
  size_t spin_us = 50;
  static constexpr size_t kMaxSpinUs = 10000;
  // Prometheus text for node-exporter's textfile collector (base::TextfileWriter); "" = none.
  std::string metrics_file;
  size_t metrics_interval_ms = 15000;
  static constexpr size_t kMinMetricsIntervalMs = 1000, kMaxMetricsIntervalMs = 3600000;
};

// The keys (and setting names) a reload applies at once; every other one needs a restart.
const std::vector<std::string>& reloadable_keys();

// A setting from one source: the values and the names of the keys that source gave.
struct Layer {
  Settings values;
  std::set<std::string> given;  // file key names ("max_locks_per_uid"), flags mapped to them
};

// Reads and checks `path` (base::read_config_file + base::parse_toml): every problem at once,
// each "FILE:LINE:COL: [lockd] KEY: ...". Throws base::ConfigError.
Layer load_config_file(const std::string& path);
Layer parse_config(std::string_view text, const std::string& source_name);

// Defaults, overlaid by the file's keys, overlaid by the command line's.
Settings combine(const Layer* file, const Layer& flags);

// The keys whose values differ between `a` and `b`, in reloadable_keys() + the others' order, as
// "key old -> new".
std::vector<std::pair<std::string, std::string>> differences(const Settings& a, const Settings& b);

}  // namespace tierce::lockd
