// agents/memd/config.h — memd's configuration: the TOML file format, its defaults and its checks.
//
// File format (docs/memd.md has the full reference; conf/memd.toml is a commented sample):
//
//   [memd]
//   node = "app1"                               # name peers see in HELLO (default: host name)
//   listen = ["tcp://0.0.0.0:7101", "shm:///run/tierce/app1-memd.sock"]   # required
//   secret_file = "/etc/tierce/secret"          # required; >= 16 bytes, not readable by others
//   topology = "/etc/tierce/cluster.toml"       # optional: its public keys make unsigned clients
//                                               # readers (default: [coherence]/[writer] topology)
//   node_key = "/etc/tierce/app1.key"           # optional: this node's key (tierce-fabric keygen);
//                                               # required when the topology gives nodes keys
//   pid_file = "/run/tierce/memd.pid"           # optional
//   ready_file = "/run/tierce/memd.ready"       # optional: bound URIs, one per line, once serving
//   user = "tierce"                             # optional: started as root, drop to this account
//                                               # once set up (docs/memd.md "Running as a user")
//   log = "syslog"                              # "stderr" | "syslog"; default: stderr with
//                                               # --foreground, syslog when daemonized
//   log_level = "info"                          # debug | info | warn | error
//   heartbeat_ms = 50                           # shm lease renewal period
//   lease_ms = 500                              # shm peers fail an op once the lease is this old
//   max_connections = 4096
//   max_connections_per_ip = 1024               # tcp; 0 = no per-address limit
//   max_preauth_frame = 256                     # bytes a frame may claim before AUTH succeeded
//   protection = "mac"                          # tcp frames: mac | encrypt (none: measuring)
//   rescan_ms = 1000                            # how often missing/changed segments are checked
//   spin_us = 50                                # responders poll this long before sleeping
//
//   [[region]]                                  # any number of these
//   name = "versions"                           # the directory name peers look up
//   segment = "/tierce.app1.versions"           # the POSIX shm object its owner creates
//   follow_owner = true                         # revoke when the segment's creator exits
//
//   [writer]                                    # optional: be the app node's writer agent
//   topology = "/etc/tierce/cluster.toml"       # (export its writer counter; a second memd
//                                               # process of the node, never with [coherence])
//   socket = "/run/tierce/app1-agent.sock"      # optional: the agent socket httpd children use
//   socket_group = "www-data"                   #   instead of the secret (docs/coherence.md
//   socket_mode = "0660"                        #   "The agent socket"); max_clients = 512
//
//   [pool]                                      # optional: donate memory to the cooperative
//   bytes = 268435456                           # cache pool (region "pool", segment
//   slab_bytes = 1048576                        # /tierce.<node>.pool), slabs leased to owners
//   lease_ms = 2000
//   max_slabs_per_owner = 0                     # 0 = no quota
//
//   [coop]                                      # optional: host this proxy's part of the
//   buckets = 65536                             # cooperative-cache directory (region
//                                               # "coop.dir", segment /tierce.<node>.coop)
//
// Every problem names the file, the line, the key and what to write instead. Unknown keys and
// tables are errors: a typo must never be silently ignored. Relative paths are resolved against
// the directory of the configuration file (memd changes to / when it daemonizes).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/config.h"
#include "fabric/auth.h"
#include "fabric/log.h"

namespace tierce::memd {

enum class LogTarget { Auto, Stderr, Syslog };  // Auto: stderr in the foreground, else syslog
std::string_view to_string(LogTarget t);

struct RegionConfig {
  std::string name;     // 1..128 printable bytes, no spaces (memd.list is space-separated)
  std::string segment;  // "/name": starts with '/', no other '/'
  bool follow_owner = true;
  bool operator==(const RegionConfig&) const = default;
};

// Defaults and bounds. Invariant checked at load: lease > heartbeat (else shm peers would see the
// lease lapse between two renewals of a healthy memd).
struct Limits {
  static constexpr long kDefaultHeartbeatMs = 50;
  static constexpr long kDefaultLeaseMs = 500;
  static constexpr long kDefaultRescanMs = 1000;
  static constexpr long kDefaultMaxConnections = 4096;
  static constexpr long kMaxHeartbeatMs = 60'000;
  static constexpr long kMaxLeaseMs = 3'600'000;
  static constexpr long kMinRescanMs = 10;  // below this memd would spin on shm_open
  static constexpr long kMaxRescanMs = 3'600'000;
  static constexpr long kMaxMaxConnections = 1'000'000;
  static constexpr long kDefaultMaxConnectionsPerIp = 1024;  // fabric ServerOptions default
  static constexpr long kDefaultPreauthFrame = 256;
  static constexpr long kMinPreauthFrame = 64;  // the AUTH payload (nonce + proof)
  static constexpr long kMaxPreauthFrame = 65536;
  static constexpr size_t kMaxNodeName = 64;
  static constexpr size_t kMaxRegionName = 128;  // fabric wire::kMaxRegionName
};
static_assert(Limits::kDefaultLeaseMs > Limits::kDefaultHeartbeatMs);

// [coherence]: this memd hosts its app node's home role (coherence::HomeService).
struct CoherenceConfig {
  bool enabled = false;
  std::string topology;  // absolute path of the cluster topology file
  size_t max_keys = 1u << 20;
  size_t log_entries = 1u << 16;
  size_t ack_slots = 4096;
  size_t pending_marks = 1u << 16;  // pending marks held at once (coherence::HomeLimits)
  bool operator==(const CoherenceConfig&) const = default;
};

// [writer]: this memd is its app node's writer agent (agents/memd/writer_role.h): it exports the
// node's writer counter and lifts its skip marks. Meant for a second memd process of the node,
// so that the homes keep reading the counter while the node's home memd is down.
struct WriterConfig {
  bool enabled = false;
  std::string topology;  // absolute path of the cluster topology file
  // The agent socket (agents/memd/agent_socket.h): where the node's httpd children send their
  // reads, registrations and invalidations instead of holding the cluster secret. Empty: none
  // (mod_appversion and the PHP extension then need the secret themselves).
  std::string socket;
  unsigned socket_mode = 0660;
  std::string socket_group;  // chgrp of the socket (the httpd children's group, e.g. www-data)
  size_t max_clients = 512;
  bool operator==(const WriterConfig&) const = default;
};

// [pool]: this memd donates memory to the cooperative cache pool (agents/memd/pool_role.h).
struct PoolConfig {
  static constexpr long kDefaultSlabBytes = 1L << 20;
  static constexpr long kMinSlabBytes = 64L * 1024;  // coherence::SlabPoolLimits::kMinSlabBytes
  static constexpr long kMaxSlabBytes = 1L << 30;
  static constexpr long kMaxBytes = 1L << 40;  // 1 TiB: more is a typo, not a donation
  static constexpr long kDefaultLeaseMs = 2000;
  static constexpr long kMinLeaseMs = 20;  // reclaim runs every lease/4
  static constexpr long kMaxLeaseMs = 3'600'000;
  bool enabled = false;
  size_t bytes = 0;  // a multiple of slab_bytes, at least one slab
  size_t slab_bytes = kDefaultSlabBytes;
  std::chrono::milliseconds lease{kDefaultLeaseMs};
  uint32_t max_slabs_per_owner = 0;  // 0 = no quota
  bool operator==(const PoolConfig&) const = default;
};
// The POSIX shm name of a node's pool segment.
std::string pool_segment_name(const std::string& node);

// [coop]: this memd hosts its node's part of the cooperative-cache directory
// (agents/memd/coop_role.h, coherence/coop_directory.h).
struct CoopConfig {
  static constexpr long kMaxBuckets = long(1) << 26;  // coherence::kDirMaxBuckets
  bool enabled = false;
  uint64_t buckets = 0;  // a power of two in 1..kMaxBuckets
  bool operator==(const CoopConfig&) const = default;
};
// The POSIX shm name of a node's directory segment.
std::string coop_segment_name(const std::string& node);

struct Config {
  std::string source;  // absolute path of the file it was read from ("" for text)
  std::string node;
  std::vector<std::string> listen;
  std::string secret_file;
  // This node's key (fabric/identity.h): the server signs every handshake with it, so clients of
  // a keyed cluster can check they reached this node. "" = none. Read at start (a restart applies
  // a new one); node_key holds it once loaded (main).
  std::string node_key_file;
  fabric::NodeKey node_key;
  // The cluster topology whose nodes' public keys this server knows (ROLES, docs/SECURITY.md): a
  // client that does not sign is then a reader (fabric::PeerInfo::member). "" = the [coherence]
  // or [writer] topology when given, else none (every client a member, as before keys).
  std::string topology;
  std::string pid_file;    // "" = none
  std::string ready_file;  // "" = none
  std::string user;        // "" = keep the starting user; else drop to it after setup
  // Prometheus text for node-exporter's textfile collector (base::TextfileWriter); "" = none.
  std::string metrics_file;
  std::chrono::milliseconds metrics_interval{15000};
  LogTarget log = LogTarget::Auto;
  fabric::LogLevel log_level = fabric::LogLevel::Info;
  std::chrono::milliseconds heartbeat{Limits::kDefaultHeartbeatMs};
  std::chrono::milliseconds lease{Limits::kDefaultLeaseMs};
  std::chrono::milliseconds rescan{Limits::kDefaultRescanMs};
  size_t max_connections = Limits::kDefaultMaxConnections;
  size_t max_connections_per_ip = Limits::kDefaultMaxConnectionsPerIp;
  size_t max_preauth_frame = Limits::kDefaultPreauthFrame;
  fabric::Protection protection = fabric::Protection::Mac;
  std::chrono::microseconds spin{50};  // fabric ServerOptions::spin (tcp/shm responders)
  std::vector<RegionConfig> regions;
  CoherenceConfig coherence;
  WriterConfig writer;
  PoolConfig pool;
  CoopConfig coop;
};

// All the problems found in one file, one per line in what() (base/config.h: the file is read
// with base::read_config_file, 1 MiB at most, and parsed with base::parse_toml).
using ConfigError = base::ConfigError;

// Reads and checks a configuration file. Throws ConfigError listing every problem.
Config load_config(const std::string& path);
// Same, from text; `source_name` names it in messages and anchors relative paths (its directory,
// or the current directory when it has none).
Config parse_config(std::string_view text, const std::string& source_name);

}  // namespace tierce::memd
