// agents/lockd/config.cc — lockd.toml: reading, checking, combining with the command line.
//
// Every problem of a file is collected; each message is
//   FILE:LINE:COL: [lockd] KEY: what is wrong; what to write instead
#include "agents/lockd/config.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "base/config_checker.h"
#include "fabric/fabric.h"

namespace tierce::lockd {

namespace {

const std::vector<std::string_view> kKeys = {"topology",
                                             "node",
                                             "socket",
                                             "socket_mode",
                                             "state_dir",
                                             "pid_file",
                                             "log_level",
                                             "max_locks_per_client",
                                             "max_locks_per_uid",
                                             "max_clients_per_uid",
                                             "protection",
                                             "max_preauth_frame",
                                             "max_connections",
                                             "max_connections_per_ip",
                                             "spin_us",
                                             "metrics_file",
                                             "metrics_interval_ms",
                                             "node_key"};

std::string octal(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "0%03o", unsigned(m));
  return b;
}

// The socket_mode key: an integer (0o660) or an octal string ("0660"), 0..0777.
void parse_socket_mode(const base::CheckedTable& t, Layer& out) {
  auto m = t.file_mode("socket_mode");
  if (!m) return;
  out.values.socket_mode = mode_t(*m);
  out.given.insert("socket_mode");
}

std::optional<base::LogLevel> parse_log_level(const base::CheckedTable& t) {
  auto v = t.string("log_level", "\"info\"");
  if (!v) return std::nullopt;
  if (*v == "debug") return base::LogLevel::Debug;
  if (*v == "info") return base::LogLevel::Info;
  if (*v == "warn") return base::LogLevel::Warn;
  if (*v == "error") return base::LogLevel::Error;
  t.problem_at("log_level", "[lockd] log_level: \"" + *v +
                                "\" is not a level; write debug, info, warn or error");
  return std::nullopt;
}

std::optional<fabric::Protection> parse_protection(const base::CheckedTable& t) {
  auto v = t.string("protection", "\"mac\"");
  if (!v) return std::nullopt;
  try {
    return fabric::parse_protection(*v);
  } catch (const std::exception&) {
    t.problem_at("protection",
                 "[lockd] protection: \"" + *v +
                     "\" is not a protection; write protection = \"mac\" (frames "
                     "authenticated), \"encrypt\" (and encrypted) or \"none\" (measuring only)");
    return std::nullopt;
  }
}

// The [lockd] table's keys into `out`, each one marked given.
void parse_lockd_table(const base::CheckedTable& t, Layer& out) {
  Settings& s = out.values;
  t.only_known_keys(kKeys);
  auto take = [&](const char* key, auto v, auto& field) {
    if (v) {
      field = *v;
      out.given.insert(key);
    }
  };
  take("topology", t.path("topology", "\"/etc/tierce/cluster.toml\""), s.topology);
  take("node", t.string("node", "\"app1\""), s.node);
  take("socket", t.path("socket", "\"/run/tierce/lockd.sock\""), s.socket);
  take("state_dir", t.path("state_dir", "\"/var/lib/tierce/lockd-app1\""), s.state_dir);
  take("pid_file", t.path("pid_file", "\"/run/tierce/lockd.pid\""), s.pid_file);
  take("node_key", t.path("node_key", "\"/etc/tierce/app1.key\""), s.node_key);
  parse_socket_mode(t, out);
  take("log_level", parse_log_level(t), s.log_level);
  const int64_t q = int64_t(Settings::kMaxQuota);
  take("max_locks_per_client", t.integer("max_locks_per_client", 1, q, 4096),
       s.max_locks_per_client);
  take("max_locks_per_uid", t.integer("max_locks_per_uid", 1, q, 16384), s.max_locks_per_uid);
  take("max_clients_per_uid", t.integer("max_clients_per_uid", 1, q, 1024),
       s.max_clients_per_uid);
  take("protection", parse_protection(t), s.protection);
  take("max_preauth_frame", t.integer("max_preauth_frame", 64, 65536, 256), s.max_preauth_frame);
  take("max_connections", t.integer("max_connections", 1, 1'000'000, 4096), s.max_connections);
  take("max_connections_per_ip", t.integer("max_connections_per_ip", 0, 1'000'000, 1024),
       s.max_connections_per_ip);
  take("spin_us", t.integer("spin_us", 0, int64_t(Settings::kMaxSpinUs), 50), s.spin_us);
  take("metrics_file",
       t.path("metrics_file", "\"/var/lib/prometheus/node-exporter/tierce-lockd.prom\""),
       s.metrics_file);
  take("metrics_interval_ms",
       t.integer("metrics_interval_ms", int64_t(Settings::kMinMetricsIntervalMs),
                 int64_t(Settings::kMaxMetricsIntervalMs), 15000),
       s.metrics_interval_ms);
}

}  // namespace

const std::vector<std::string>& reloadable_keys() {
  static const std::vector<std::string> k = {"max_locks_per_client", "max_locks_per_uid",
                                             "max_clients_per_uid", "log_level",
                                             "metrics_file",         "metrics_interval_ms"};
  return k;
}

Layer parse_config(std::string_view text, const std::string& source_name) {
  toml::table root = base::parse_toml(text, source_name,
                                      "strings need double quotes; the settings go under [lockd]");
  base::CheckerWording wording;
  wording.strings_nonempty = true;
  wording.integer_note = " (no quotes)";
  base::ConfigChecker c(source_name, base::config_base_dir(source_name), wording);
  Layer out;
  for (auto& u : base::unknown_keys(root, {"lockd"}))
    c.problem(u.where, "unknown " + std::string(root.get(u.key)->is_table() ? "table [" : "key '") +
                           u.key + (root.get(u.key)->is_table() ? "]" : "'") +
                           (u.suggestion.empty() ? "" : "; did you mean [lockd]?") +
                           " (tierce-lockd reads only the [lockd] table; every key goes under it)");
  const toml::node* node = root.get("lockd");
  const toml::table* t = node ? node->as_table() : nullptr;
  if (node && !t)
    c.problem(node->source(),
              "lockd: expected a [lockd] table, got " + base::describe_toml_type(*node));
  if (!node) c.problem("the [lockd] table is missing; start the file with [lockd]");
  if (t) parse_lockd_table(c.table(*t, "[lockd]"), out);
  c.throw_if_any();
  return out;
}

Layer load_config_file(const std::string& path) {
  std::error_code ec;
  std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) abs = path;
  return parse_config(base::read_config_file(path), abs);
}

Settings combine(const Layer* file, const Layer& flags) {
  Settings s;
  for (const Layer* l : {file, &flags}) {
    if (!l) continue;
    const Settings& v = l->values;
    auto has = [&](const char* k) { return l->given.count(k) > 0; };
#define TIERCE_TAKE(k) \
  if (has(#k)) s.k = v.k;
    TIERCE_TAKE(topology)
    TIERCE_TAKE(node)
    TIERCE_TAKE(socket)
    TIERCE_TAKE(socket_mode)
    TIERCE_TAKE(state_dir)
    TIERCE_TAKE(pid_file)
    TIERCE_TAKE(node_key)
    TIERCE_TAKE(log_level)
    TIERCE_TAKE(max_locks_per_client)
    TIERCE_TAKE(max_locks_per_uid)
    TIERCE_TAKE(max_clients_per_uid)
    TIERCE_TAKE(protection)
    TIERCE_TAKE(max_preauth_frame)
    TIERCE_TAKE(max_connections)
    TIERCE_TAKE(max_connections_per_ip)
    TIERCE_TAKE(spin_us)
    TIERCE_TAKE(metrics_file)
    TIERCE_TAKE(metrics_interval_ms)
#undef TIERCE_TAKE
  }
  if (s.state_dir.empty() && !s.node.empty()) s.state_dir = "/var/lib/tierce/lockd-" + s.node;
  return s;
}

std::vector<std::pair<std::string, std::string>> differences(const Settings& a, const Settings& b) {
  std::vector<std::pair<std::string, std::string>> d;
  auto str = [](const auto& v) -> std::string {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::string>)
      return "\"" + v + "\"";
    else if constexpr (std::is_same_v<T, base::LogLevel>)
      return std::string(base::to_string(v));
    else if constexpr (std::is_same_v<T, fabric::Protection>)
      return std::string(fabric::to_string(v));
    else
      return std::to_string(v);
  };
#define TIERCE_DIFF(k) \
  if (a.k != b.k) d.emplace_back(#k, str(a.k) + " -> " + str(b.k));
  TIERCE_DIFF(max_locks_per_client)
  TIERCE_DIFF(max_locks_per_uid)
  TIERCE_DIFF(max_clients_per_uid)
  TIERCE_DIFF(log_level)
  TIERCE_DIFF(metrics_file)
  TIERCE_DIFF(metrics_interval_ms)
  TIERCE_DIFF(topology)
  TIERCE_DIFF(node)
  TIERCE_DIFF(socket)
  if (a.socket_mode != b.socket_mode)
    d.emplace_back("socket_mode", octal(a.socket_mode) + " -> " + octal(b.socket_mode));
  TIERCE_DIFF(state_dir)
  TIERCE_DIFF(pid_file)
  TIERCE_DIFF(node_key)
  TIERCE_DIFF(protection)
  TIERCE_DIFF(max_preauth_frame)
  TIERCE_DIFF(max_connections)
  TIERCE_DIFF(max_connections_per_ip)
  TIERCE_DIFF(spin_us)
#undef TIERCE_DIFF
  return d;
}

}  // namespace tierce::lockd
