// agents/lockd/config.cc — lockd.toml: reading, checking, combining with the command line.
//
// Every problem of a file is collected; each message is
//   FILE:LINE:COL: [lockd] KEY: what is wrong; what to write instead
#include "agents/lockd/config.h"

#include <algorithm>
#include <filesystem>
#include <optional>

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
                                             "metrics_interval_ms"};

std::string octal(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "0%03o", unsigned(m));
  return b;
}

class Checker {
 public:
  Checker(std::string file, std::filesystem::path base) : file_(std::move(file)), base_(base) {}
  void problem(const toml::source_region& where, const std::string& msg) {
    problems_.push_back(base::config_location(file_, where) + ": " + msg);
  }
  void problem(const std::string& msg) { problems_.push_back(file_ + ": " + msg); }
  std::vector<std::string>& problems() { return problems_; }

  std::optional<std::string> string(const toml::table& t, std::string_view key,
                                    const std::string& eg) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (!n->is_string() || n->as_string()->get().empty()) {
      problem(n->source(), "[lockd] " + std::string(key) + ": expected a non-empty string, got " +
                               (n->is_string() ? "\"\"" : base::describe_toml_type(*n)) +
                               "; write e.g. " + std::string(key) + " = " + eg);
      return std::nullopt;
    }
    return n->as_string()->get();
  }
  std::optional<std::string> path(const toml::table& t, std::string_view key,
                                  const std::string& eg) {
    auto s = string(t, key, eg);
    if (!s) return s;
    std::filesystem::path p(*s);
    if (p.is_relative()) p = base_ / p;
    return p.lexically_normal().string();
  }
  std::optional<long> integer(const toml::table& t, std::string_view key, long lo, long hi,
                              long eg) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    std::string write = "; write e.g. " + std::string(key) + " = " + std::to_string(eg);
    if (!n->is_integer()) {
      problem(n->source(), "[lockd] " + std::string(key) + ": expected an integer, got " +
                               base::describe_toml_type(*n) + write + " (no quotes)");
      return std::nullopt;
    }
    int64_t v = n->as_integer()->get();
    if (v < lo || v > hi) {
      problem(n->source(), "[lockd] " + std::string(key) + ": " + std::to_string(v) +
                               " is out of range " + std::to_string(lo) + ".." +
                               std::to_string(hi) + write);
      return std::nullopt;
    }
    return long(v);
  }

 private:
  std::string file_;
  std::filesystem::path base_;
  std::vector<std::string> problems_;
};

std::filesystem::path dir_of(const std::string& source) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(source).parent_path();
  return dir.empty() ? std::filesystem::current_path(ec) : std::filesystem::absolute(dir, ec);
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
  Checker c(source_name, dir_of(source_name));
  Layer out;
  Settings& s = out.values;
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
  if (t) {
    for (auto& u : base::unknown_keys(*t, kKeys))
      c.problem(u.where,
                "[lockd] " + u.key + ": unknown key" +
                    (u.suggestion.empty() ? "" : "; did you mean '" + u.suggestion + "'?") +
                    " ([lockd] knows: " + base::join(kKeys, ", ") + ")");
    auto take = [&](const char* key, auto v, auto& field) {
      if (v) {
        field = *v;
        out.given.insert(key);
      }
    };
    take("topology", c.path(*t, "topology", "\"/etc/tierce/cluster.toml\""), s.topology);
    take("node", c.string(*t, "node", "\"app1\""), s.node);
    take("socket", c.path(*t, "socket", "\"/run/tierce/lockd.sock\""), s.socket);
    take("state_dir", c.path(*t, "state_dir", "\"/var/lib/tierce/lockd-app1\""), s.state_dir);
    take("pid_file", c.path(*t, "pid_file", "\"/run/tierce/lockd.pid\""), s.pid_file);
    if (const toml::node* n = t->get("socket_mode")) {
      std::optional<long> m;
      if (n->is_integer()) {
        m = long(n->as_integer()->get());
      } else if (n->is_string()) {
        const std::string& v = n->as_string()->get();
        char* end = nullptr;
        unsigned long x = std::strtoul(v.c_str(), &end, 8);
        if (!v.empty() && !*end) m = long(x);
      }
      if (!m || *m < 0 || *m > 0777)
        c.problem(n->source(),
                  "[lockd] socket_mode: expected an octal mode 0..0777; write e.g. "
                  "socket_mode = \"0660\" (or 0o660)");
      else
        take("socket_mode", std::optional<mode_t>(mode_t(*m)), s.socket_mode);
    }
    if (auto v = c.string(*t, "log_level", "\"info\"")) {
      if (*v == "debug")
        take("log_level", std::optional(base::LogLevel::Debug), s.log_level);
      else if (*v == "info")
        take("log_level", std::optional(base::LogLevel::Info), s.log_level);
      else if (*v == "warn")
        take("log_level", std::optional(base::LogLevel::Warn), s.log_level);
      else if (*v == "error")
        take("log_level", std::optional(base::LogLevel::Error), s.log_level);
      else
        c.problem(t->get("log_level")->source(), "[lockd] log_level: \"" + *v +
                                                     "\" is not a level; write debug, info, "
                                                     "warn or error");
    }
    const long q = long(Settings::kMaxQuota);
    take("max_locks_per_client", c.integer(*t, "max_locks_per_client", 1, q, 4096),
         s.max_locks_per_client);
    take("max_locks_per_uid", c.integer(*t, "max_locks_per_uid", 1, q, 16384), s.max_locks_per_uid);
    take("max_clients_per_uid", c.integer(*t, "max_clients_per_uid", 1, q, 1024),
         s.max_clients_per_uid);
    if (auto v = c.string(*t, "protection", "\"mac\"")) {
      try {
        take("protection", std::optional(fabric::parse_protection(*v)), s.protection);
      } catch (const std::exception&) {
        c.problem(t->get("protection")->source(),
                  "[lockd] protection: \"" + *v +
                      "\" is not a protection; write protection = \"mac\" (frames "
                      "authenticated), \"encrypt\" (and encrypted) or \"none\" (measuring only)");
      }
    }
    take("max_preauth_frame", c.integer(*t, "max_preauth_frame", 64, 65536, 256),
         s.max_preauth_frame);
    take("max_connections", c.integer(*t, "max_connections", 1, 1'000'000, 4096),
         s.max_connections);
    take("max_connections_per_ip", c.integer(*t, "max_connections_per_ip", 0, 1'000'000, 1024),
         s.max_connections_per_ip);
    take("spin_us", c.integer(*t, "spin_us", 0, long(Settings::kMaxSpinUs), 50), s.spin_us);
    take("metrics_file",
         c.path(*t, "metrics_file", "\"/var/lib/prometheus/node-exporter/tierce-lockd.prom\""),
         s.metrics_file);
    take("metrics_interval_ms",
         c.integer(*t, "metrics_interval_ms", long(Settings::kMinMetricsIntervalMs),
                   long(Settings::kMaxMetricsIntervalMs), 15000),
         s.metrics_interval_ms);
  }
  if (!c.problems().empty()) throw base::ConfigError(std::move(c.problems()));
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
  TIERCE_DIFF(protection)
  TIERCE_DIFF(max_preauth_frame)
  TIERCE_DIFF(max_connections)
  TIERCE_DIFF(max_connections_per_ip)
  TIERCE_DIFF(spin_us)
#undef TIERCE_DIFF
  return d;
}

}  // namespace tierce::lockd
