// agents/memd/config.cc — reading memd.toml with toml++ and checking every key.
//
// The checker collects every problem of a file instead of stopping at the first, so an operator
// fixes a file in one pass. Each message has the shape
//   FILE:LINE:COL: [memd] KEY: what is wrong; what to write instead
#include "agents/memd/config.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "base/config.h"
#include "base/config_checker.h"
#include "fabric/errors.h"
#include "fabric/fabric.h"

namespace tierce::memd {

std::string_view to_string(LogTarget t) {
  switch (t) {
    case LogTarget::Auto:
      return "auto";
    case LogTarget::Stderr:
      return "stderr";
    case LogTarget::Syslog:
      return "syslog";
  }
  return "?";
}

namespace {

using base::CheckedTable;
using base::ConfigChecker;
using base::describe_toml_type;
using base::edit_distance;

std::string quote(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

// A name printable in logs and in memd.list (space-separated): visible ASCII or UTF-8, no spaces.
bool printable_token(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u != 0x7f;
  });
}

const std::vector<std::string_view> kMemdKeys = {
    "node",      "listen",       "secret_file", "pid_file",        "ready_file", "log",
    "log_level", "heartbeat_ms", "lease_ms",    "max_connections", "rescan_ms", "spin_us",
    "max_connections_per_ip", "max_preauth_frame", "protection", "user", "metrics_file",
    "metrics_interval_ms", "node_key", "topology"};
const std::vector<std::string_view> kRegionKeys = {"name", "segment", "follow_owner"};

std::string default_node_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) return "tierce";
  std::string h(host);
  if (auto dot = h.find('.'); dot != std::string::npos) h.resize(dot);
  if (h.size() > Limits::kMaxNodeName) h.resize(Limits::kMaxNodeName);
  return h;
}

// [memd] node: this node's name, or the host's.
void parse_node(const CheckedTable& m, Config& cfg) {
  if (auto v = m.string("node", "\"app1\"")) {
    bool ok = !v->empty() && v->size() <= Limits::kMaxNodeName &&
              std::all_of(v->begin(), v->end(), [](char ch) {
                return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                       ch == '.';
              });
    if (!ok)
      m.problem_at("node", m.name() + " node: " + quote(*v) + " is not a node name: use 1.." +
                               std::to_string(Limits::kMaxNodeName) +
                               " letters, digits, '-', '_' or '.'; write e.g. node = \"app1\"");
    else
      cfg.node = *v;
  }
  if (cfg.node.empty()) cfg.node = default_node_name();
}

// [memd] listen: at least one fabric address, each once.
void parse_listen(ConfigChecker& c, const CheckedTable& m, Config& cfg) {
  const std::string& W = m.name();
  const std::string listen_eg =
      "listen = [\"tcp://0.0.0.0:7101\", \"shm:///run/tierce/memd.sock\"]";
  const toml::node* n = m.node("listen");
  if (!n) {
    c.problem(W + " listen is missing; memd needs at least one address; write e.g. " + listen_eg);
    return;
  }
  const toml::array* arr = n->as_array();
  if (!arr) {
    c.problem(n->source(), W + " listen: expected an array of addresses, got " +
                               describe_toml_type(*n) + "; write e.g. " + listen_eg);
    return;
  }
  if (arr->empty()) {
    c.problem(n->source(),
              W + " listen: empty; memd needs at least one address; write e.g. " + listen_eg);
    return;
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    std::string key = W + " listen[" + std::to_string(i) + "]";
    if (!e.is_string()) {
      c.problem(e.source(), key + ": expected a string address, got " + describe_toml_type(e) +
                                "; write e.g. " + listen_eg);
      continue;
    }
    std::string uri = e.as_string()->get();
    try {
      fabric::Address a = fabric::parse_address(uri);
      if (a.transport == fabric::Transport::Shm && a.path.size() >= 108)
        throw fabric::FabricError(fabric::Errc::Config,
                                  "socket path of " + std::to_string(a.path.size()) +
                                      " bytes is too long for a Unix socket (max 107)");
    } catch (const fabric::FabricError& err) {
      c.problem(e.source(), key + ": " + err.what());
      continue;
    }
    if (!seen.insert(uri).second) {
      c.problem(e.source(), key + ": " + quote(uri) + " is listed twice; remove one");
      continue;
    }
    cfg.listen.push_back(uri);
  }
}

// [memd] secret_file, pid_file, ready_file, metrics_file (+ interval) and user.
void parse_files(ConfigChecker& c, const CheckedTable& m, Config& cfg) {
  const std::string& W = m.name();
  if (auto v = m.path("secret_file", "\"/etc/tierce/secret\""))
    cfg.secret_file = *v;
  else if (!m.node("secret_file"))
    c.problem(W +
              " secret_file is missing; peers authenticate with a shared secret: write e.g. "
              "secret_file = \"/etc/tierce/secret\" (at least 16 bytes, e.g. head -c 32 "
              "/dev/urandom | base64 > secret; chmod 600 secret)");
  if (auto v = m.path("node_key", "\"/etc/tierce/app1.key\"")) cfg.node_key_file = *v;
  if (auto v = m.path("topology", "\"/etc/tierce/cluster.toml\"")) cfg.topology = *v;
  if (auto v = m.path("pid_file", "\"/run/tierce/memd.pid\"")) cfg.pid_file = *v;
  if (auto v = m.path("ready_file", "\"/run/tierce/memd.ready\"")) cfg.ready_file = *v;
  if (auto v = m.path("metrics_file", "\"/var/lib/prometheus/node-exporter/tierce-memd.prom\""))
    cfg.metrics_file = *v;
  if (auto v = m.integer("metrics_interval_ms", 1000, 3600000, 15000))
    cfg.metrics_interval = std::chrono::milliseconds(*v);
  if (auto v = m.string("user", "\"tierce\"")) {
    // Whether the account exists is checked by main (base::lookup_account), at start and --check.
    if (v->empty())
      m.problem_at("user", W + " user: empty; name the account memd drops to after its setup "
                               "(e.g. user = \"tierce\"), or leave the key out to keep running "
                               "as the starting user");
    else
      cfg.user = *v;
  }
}

// [memd] log and log_level.
void parse_logging(const CheckedTable& m, Config& cfg) {
  const std::string& W = m.name();
  if (auto v = m.string("log", "\"syslog\"")) {
    if (*v == "stderr")
      cfg.log = LogTarget::Stderr;
    else if (*v == "syslog")
      cfg.log = LogTarget::Syslog;
    else
      m.problem_at("log", W + " log: " + quote(*v) +
                              " is not a log target; write log = \"stderr\" or log = \"syslog\" "
                              "(or leave it out: stderr with --foreground, else syslog)");
  }
  if (auto v = m.string("log_level", "\"info\"")) {
    if (*v == "debug")
      cfg.log_level = fabric::LogLevel::Debug;
    else if (*v == "info")
      cfg.log_level = fabric::LogLevel::Info;
    else if (*v == "warn" || *v == "warning")
      cfg.log_level = fabric::LogLevel::Warn;
    else if (*v == "error")
      cfg.log_level = fabric::LogLevel::Error;
    else
      m.problem_at("log_level", W + " log_level: " + quote(*v) +
                                    " is not a level; write one of log_level = \"debug\", "
                                    "\"info\", \"warn\", \"error\"");
  }
}

// [memd] the fabric's timing and limits: heartbeat, lease, spin, connections, protection, rescan.
void parse_fabric_limits(const CheckedTable& m, Config& cfg) {
  const std::string& W = m.name();
  auto hb = m.integer("heartbeat_ms", 1, Limits::kMaxHeartbeatMs, Limits::kDefaultHeartbeatMs);
  auto lease = m.integer("lease_ms", 2, Limits::kMaxLeaseMs, Limits::kDefaultLeaseMs);
  if (hb) cfg.heartbeat = std::chrono::milliseconds(*hb);
  if (lease) cfg.lease = std::chrono::milliseconds(*lease);
  if ((hb || lease) && cfg.lease <= cfg.heartbeat)
    m.problem_at(lease ? "lease_ms" : "heartbeat_ms",
                 W + " lease_ms: the lease (" + std::to_string(cfg.lease.count()) +
                     " ms) must be longer than heartbeat_ms (" +
                     std::to_string(cfg.heartbeat.count()) +
                     " ms), or shm peers see it lapse between renewals; write e.g. lease_ms = " +
                     std::to_string(cfg.heartbeat.count() * 10));
  if (auto v = m.integer("spin_us", 0, 10000, 50)) cfg.spin = std::chrono::microseconds(*v);
  if (auto v = m.integer("max_connections", 1, Limits::kMaxMaxConnections,
                         Limits::kDefaultMaxConnections))
    cfg.max_connections = size_t(*v);
  if (auto v = m.integer("max_connections_per_ip", 0, Limits::kMaxMaxConnections,
                         Limits::kDefaultMaxConnectionsPerIp))
    cfg.max_connections_per_ip = size_t(*v);
  if (auto v = m.integer("max_preauth_frame", Limits::kMinPreauthFrame, Limits::kMaxPreauthFrame,
                         Limits::kDefaultPreauthFrame))
    cfg.max_preauth_frame = size_t(*v);
  if (auto v = m.string("protection", "\"mac\"")) {
    try {
      cfg.protection = fabric::parse_protection(*v);
    } catch (const fabric::FabricError&) {
      m.problem_at("protection",
                   W + " protection: " + quote(*v) +
                       " is not a protection; write protection = \"mac\" (frames authenticated, "
                       "the default) or \"encrypt\" (authenticated and encrypted); \"none\" is "
                       "for measurements only");
    }
  }
  if (auto v = m.integer("rescan_ms", Limits::kMinRescanMs, Limits::kMaxRescanMs,
                         Limits::kDefaultRescanMs))
    cfg.rescan = std::chrono::milliseconds(*v);
}

void parse_memd_table(ConfigChecker& c, const CheckedTable& m, Config& cfg) {
  m.only_known_keys(kMemdKeys);
  parse_node(m, cfg);
  parse_listen(c, m, cfg);
  parse_files(c, m, cfg);
  parse_logging(m, cfg);
  parse_fabric_limits(m, cfg);
}

// One [[region]] table; nullopt (its problems noted) when it cannot be exported. `names` and
// `segments` hold those of the regions before it.
std::optional<RegionConfig> parse_region(ConfigChecker& c, CheckedTable t, const toml::node& e,
                                         std::set<std::string>& names,
                                         std::set<std::string>& segments) {
  t.only_known_keys(kRegionKeys);
  RegionConfig r;
  bool ok = true;
  if (auto v = t.string("name", "\"versions\"")) {
    if (v->empty() || v->size() > Limits::kMaxRegionName || !printable_token(*v)) {
      t.problem_at("name", t.name() + " name: " + quote(*v) + " is not a region name: use 1.." +
                               std::to_string(Limits::kMaxRegionName) +
                               " printable characters without spaces; write e.g. name = "
                               "\"versions\"");
      ok = false;
    } else if (!names.insert(*v).second) {
      t.problem_at("name", t.name() + " name: region " + quote(*v) +
                               " is defined twice; give each [[region]] its own name");
      ok = false;
    } else {
      r.name = *v;
      t.rename(t.name() + " (" + quote(*v) + ")");  // later messages name the region
    }
  } else {
    if (!t.node("name"))
      c.problem(e.source(), t.name() + " name is missing; write e.g. name = \"versions\"");
    ok = false;
  }
  if (auto v = t.string("segment", "\"/tierce.app1.versions\"")) {
    bool valid = v->size() >= 2 && (*v)[0] == '/' && v->find('/', 1) == std::string::npos &&
                 v->size() <= 200;
    if (!valid) {
      t.problem_at("segment",
                   t.name() + " segment: " + quote(*v) +
                       " is not a POSIX shared-memory name: it starts with '/', has no other '/' "
                       "and at most 200 bytes; write e.g. segment = \"/tierce.app1.versions\"");
      ok = false;
    } else if (!segments.insert(*v).second) {
      t.problem_at("segment", t.name() + " segment: " + quote(*v) +
                                  " is already exported by another [[region]]; export each "
                                  "segment once");
      ok = false;
    } else {
      r.segment = *v;
    }
  } else {
    if (!t.node("segment"))
      c.problem(e.source(),
                t.name() + " segment is missing; write e.g. segment = \"/tierce.app1.versions\"");
    ok = false;
  }
  if (auto v = t.boolean("follow_owner")) r.follow_owner = *v;
  if (!ok) return std::nullopt;
  return r;
}

void parse_regions(ConfigChecker& c, const toml::node& n, Config& cfg) {
  const toml::array* arr = n.as_array();
  if (!arr) {
    c.problem(n.source(), "region: expected a list of [[region]] tables (double brackets), got " +
                              describe_toml_type(n) + "; write [[region]] instead of [region]");
    return;
  }
  std::set<std::string> names, segments;
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& e = *arr->get(i);
    std::string W = "[[region]] #" + std::to_string(i + 1);
    const toml::table* t = e.as_table();
    if (!t) {
      c.problem(e.source(),
                W + ": expected a table, got " + describe_toml_type(e) +
                    "; write [[region]] followed by name = ... and segment = ... lines");
      continue;
    }
    if (auto r = parse_region(c, c.table(*t, W), e, names, segments))
      cfg.regions.push_back(std::move(*r));
  }
}

// The topology file a role ([coherence], [writer]) needs: its path, or nullopt (a problem noted).
std::optional<std::string> required_topology(const CheckedTable& t) {
  auto topo = t.path("topology", "\"/etc/tierce/cluster.toml\"");
  if (!topo && !t.node("topology"))
    t.problem(t.name() + " topology is required: the cluster topology file, e.g. "
                         "topology = \"/etc/tierce/cluster.toml\"");
  return topo;
}

// [coherence] topology = "cluster.toml": this memd is its app node's home (versions, acks,
// dependency index). The topology itself is read (and checked) when memd starts.
void parse_coherence_table(const CheckedTable& t, Config& cfg) {
  t.only_known_keys({"topology", "max_keys", "log_entries", "ack_slots", "pending_marks"});
  auto topo = required_topology(t);
  if (!topo) return;
  cfg.coherence.enabled = true;
  cfg.coherence.topology = *topo;
  if (auto v = t.integer("max_keys", 16, 1L << 30, 1L << 20)) cfg.coherence.max_keys = size_t(*v);
  if (auto v = t.integer("log_entries", 1, 1L << 26, 1L << 16))
    cfg.coherence.log_entries = size_t(*v);
  if (auto v = t.integer("ack_slots", 16, 1L << 20, 4096)) cfg.coherence.ack_slots = size_t(*v);
  if (auto v = t.integer("pending_marks", 1, 1L << 24, 1L << 16))
    cfg.coherence.pending_marks = size_t(*v);
}

// [writer] topology = "cluster.toml": this memd is its app node's writer agent (writer_role.h).
void parse_writer_table(const CheckedTable& t, Config& cfg) {
  const std::string& W = t.name();
  t.only_known_keys({"topology", "socket", "socket_mode", "socket_group", "max_clients"});
  auto topo = required_topology(t);
  if (!topo) return;
  cfg.writer.enabled = true;
  cfg.writer.topology = *topo;
  if (auto v = t.path("socket", "\"/run/tierce/app1-agent.sock\"")) cfg.writer.socket = *v;
  if (auto v = t.file_mode("socket_mode")) cfg.writer.socket_mode = *v;
  if (auto v = t.string("socket_group", "\"www-data\"")) cfg.writer.socket_group = *v;
  if (auto v = t.integer("max_clients", 1, 65536, 512)) cfg.writer.max_clients = size_t(*v);
  if (cfg.writer.socket.empty())
    for (const char* k : {"socket_mode", "socket_group", "max_clients"})
      if (t.node(k)) t.problem_at(k, W + " " + k + " without socket: give the socket's path too");
  if (!cfg.writer.socket.empty() && (cfg.writer.socket_mode & 0006))
    t.problem_at("socket_mode", W + " socket_mode lets every local user send invalidations: "
                                    "use 0660 with socket_group (the httpd children's group)");
  if (cfg.coherence.enabled)
    t.problem(W + " and [coherence] in one memd: the writer agent is meant to outlive the home "
                  "memd's crashes and restarts; run it as a second memd with its own file "
                  "(conf/writer.toml) and its own listen addresses");
  for (auto& r : cfg.regions)
    if (r.name == "writer")
      t.problem(W + " exports region \"writer\" itself: remove the [[region]] of "
                                "that name");
}

// A role ([pool], [coop]) creates and exports its own segment: a [[region]] may neither take the
// region's name nor export that segment.
void refuse_region_clash(const CheckedTable& t, const Config& cfg, const std::string& role,
                         const std::string& region, const std::string& segment) {
  const std::string& W = t.name();
  for (auto& r : cfg.regions) {
    if (r.name == region)
      t.problem(W + ": a [[region]] is already named \"" + region + "\", the region the " +
                                role + " role exports; rename that [[region]] or remove " + W);
    if (r.segment == segment)
      t.problem(W + ": [[region]] \"" + r.name + "\" exports segment " + r.segment +
                                ", which the " + role + " role creates itself; remove that [[region]]");
  }
}

// [pool] bytes = N: donate N bytes (slabs of slab_bytes) to the cooperative cache pool, exported
// as region "pool". Integers only (TOML allows 268_435_456); sizes must divide evenly.
void parse_pool_table(const CheckedTable& t, Config& cfg) {
  const std::string& W = t.name();
  t.only_known_keys({"bytes", "slab_bytes", "lease_ms", "max_slabs_per_owner"});
  PoolConfig& p = cfg.pool;
  bool ok = true;
  if (auto v = t.integer("slab_bytes", PoolConfig::kMinSlabBytes, PoolConfig::kMaxSlabBytes,
                         PoolConfig::kDefaultSlabBytes)) {
    if (*v & (*v - 1)) {
      long up = 1;
      while (up < *v) up <<= 1;
      t.problem_at("slab_bytes", W + " slab_bytes: " + std::to_string(*v) +
                    " is not a power of two; write e.g. slab_bytes = " + std::to_string(up));
      ok = false;
    } else {
      p.slab_bytes = size_t(*v);
    }
  } else if (t.node("slab_bytes")) {
    ok = false;
  }
  auto bytes = t.integer("bytes", PoolConfig::kMinSlabBytes, PoolConfig::kMaxBytes,
                         256L << 20);
  if (!bytes && !t.node("bytes"))
    t.problem(W + " bytes is required: how much memory this node donates, a multiple "
                              "of slab_bytes; write e.g. bytes = 268435456 (256 MiB)");
  if (bytes && ok) {
    if (size_t(*bytes) % p.slab_bytes != 0) {
      size_t down = size_t(*bytes) / p.slab_bytes * p.slab_bytes;
      t.problem_at("bytes", W + " bytes: " + std::to_string(*bytes) + " is not a multiple of slab_bytes (" +
                    std::to_string(p.slab_bytes) + "); write e.g. bytes = " +
                    std::to_string(down ? down : p.slab_bytes));
    } else {
      p.bytes = size_t(*bytes);
    }
  }
  if (auto v = t.integer("lease_ms", PoolConfig::kMinLeaseMs, PoolConfig::kMaxLeaseMs,
                         PoolConfig::kDefaultLeaseMs))
    p.lease = std::chrono::milliseconds(*v);
  if (auto v = t.integer("max_slabs_per_owner", 0, 1L << 31, 0))
    p.max_slabs_per_owner = uint32_t(*v);
  p.enabled = p.bytes > 0;
  if (!p.enabled) return;
  refuse_region_clash(t, cfg, "pool", "pool", pool_segment_name(cfg.node));
}

// [coop] buckets = N: host this node's part of the cooperative-cache directory (N buckets of 640
// bytes, 4 keys each), exported as region "coop.dir".
void parse_coop_table(const CheckedTable& t, Config& cfg) {
  const std::string& W = t.name();
  t.only_known_keys({"buckets"});
  auto v = t.integer("buckets", 1, CoopConfig::kMaxBuckets, 65536);
  if (!v) {
    if (!t.node("buckets"))
      t.problem(W + " buckets is required: the directory's bucket count (4 keys per "
                                "bucket), a power of two; write e.g. buckets = 65536");
    return;
  }
  if (*v & (*v - 1)) {
    long up = 1;
    while (up < *v) up <<= 1;
    t.problem_at("buckets", W + " buckets: " + std::to_string(*v) +
                  " is not a power of two; write e.g. buckets = " + std::to_string(up));
    return;
  }
  cfg.coop.enabled = true;
  cfg.coop.buckets = uint64_t(*v);
  refuse_region_clash(t, cfg, "coop", "coop.dir", coop_segment_name(cfg.node));
}

// Runs `parse` on root's table `key` when there is one; anything else there is a problem.
template <class Parse>
void with_table(ConfigChecker& c, const toml::table& root, const std::string& key, Parse parse) {
  const toml::node* n = root.get(key);
  if (!n) return;
  if (const toml::table* t = n->as_table())
    parse(c.table(*t, "[" + key + "]"));
  else
    c.problem(n->source(), key + ": expected a [" + key + "] table, got " + describe_toml_type(*n));
}

Config parse_checked(const toml::table& root, const std::string& source_name,
                     const std::filesystem::path& base) {
  ConfigChecker c(source_name, base);
  Config cfg;
  for (auto&& [k, v] : root) {
    if (k.str() == "memd" || k.str() == "region" || k.str() == "coherence" || k.str() == "pool" ||
        k.str() == "coop" || k.str() == "writer")
      continue;
    std::string hint;
    if (edit_distance(k.str(), "memd") <= 2) hint = "; did you mean [memd]?";
    if (edit_distance(k.str(), "region") <= 2) hint = "; did you mean [[region]]?";
    c.problem(
        k.source(),
        "unknown " + std::string(v.is_table() ? "table [" : "key '") + std::string(k.str()) +
            (v.is_table() ? "]" : "'") + hint +
            " (memd knows [memd], [[region]], [coherence], [writer], [pool] and [coop]; every key "
            "belongs under one of them)");
  }
  if (!root.get("memd"))
    c.problem(
        "the [memd] table is missing; start the file with [memd] and at least listen = [...] "
        "and secret_file = \"...\"");
  with_table(c, root, "memd", [&](const CheckedTable& t) { parse_memd_table(c, t, cfg); });
  if (const toml::node* r = root.get("region")) parse_regions(c, *r, cfg);
  with_table(c, root, "coherence", [&](const CheckedTable& t) { parse_coherence_table(t, cfg); });
  with_table(c, root, "writer", [&](const CheckedTable& t) { parse_writer_table(t, cfg); });
  with_table(c, root, "pool", [&](const CheckedTable& t) { parse_pool_table(t, cfg); });
  with_table(c, root, "coop", [&](const CheckedTable& t) { parse_coop_table(t, cfg); });
  c.throw_if_any(ConfigChecker::Order::FileOrder);
  return cfg;
}

}  // namespace

std::string pool_segment_name(const std::string& node) {
  return "/tierce." + node + ".pool";
}

std::string coop_segment_name(const std::string& node) {
  return "/tierce." + node + ".coop";
}

Config parse_config(std::string_view text, const std::string& source_name) {
  toml::table root = base::parse_toml(
      text, source_name, "strings need double quotes; tables are [memd] and [[region]]");
  return parse_checked(root, source_name, base::config_base_dir(source_name));
}

Config load_config(const std::string& path) {
  std::error_code ec;
  std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) abs = path;
  std::string text;
  try {
    text = base::read_config_file(path);
  } catch (const ConfigError& e) {
    throw ConfigError({e.problems().at(0) +
                       "; pass an existing file with -c FILE (a sample is conf/memd.toml)"});
  }
  Config cfg = parse_config(text, abs);
  cfg.source = abs;
  return cfg;
}

}  // namespace tierce::memd
