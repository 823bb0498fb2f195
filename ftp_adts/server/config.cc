// ftp_adts/server/config.cc — reading ftpd.toml with toml++ and checking every key.
//
// Every problem of the file is collected (an operator fixes a file in one pass); each message is
//   FILE:LINE:COL: KEY: what is wrong; what to write instead
#include "ftp_adts/server/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>

#include "base/config_checker.h"

namespace tierce::ftpd {

namespace {

bool valid_ip(const std::string& h) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, h.c_str(), &a4) == 1 || inet_pton(AF_INET6, h.c_str(), &a6) == 1;
}

// "host:port" or "[v6]:port".
bool parse_listen(const std::string& s, std::string* host, uint16_t* port) {
  std::string h, p;
  if (!s.empty() && s[0] == '[') {
    auto close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') return false;
    h = s.substr(1, close - 1);
    p = s.substr(close + 2);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string::npos) return false;
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
  }
  if (!valid_ip(h) || p.empty() || p.size() > 5 ||
      !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  unsigned long n = std::stoul(p);
  if (n > 65535) return false;
  *host = h;
  *port = uint16_t(n);
  return true;
}

bool parse_range(const std::string& s, uint16_t* lo, uint16_t* hi) {
  auto num = [](const std::string& x, uint16_t* out) {
    if (x.empty() || x.size() > 5 ||
        !std::all_of(x.begin(), x.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    unsigned long n = std::stoul(x);
    if (n > 65535) return false;
    *out = uint16_t(n);
    return true;
  };
  auto dash = s.find('-');
  if (dash == std::string::npos) {
    if (!num(s, lo) || *lo != 0) return false;  // a single number only as "0" (any port)
    *hi = 0;
    return true;
  }
  if (!num(s.substr(0, dash), lo) || !num(s.substr(dash + 1), hi)) return false;
  return *lo >= 1024 && *lo <= *hi;
}

using base::CheckedTable;
using base::ConfigChecker;

void set(unsigned* out, const CheckedTable& t, const std::string& key, int64_t lo, int64_t hi) {
  if (auto v = t.integer(key, lo, hi)) *out = unsigned(*v);
}

// An existing directory, absolute. Relative paths are taken from the config file's directory.
std::optional<std::string> directory(const CheckedTable& t, const std::string& key,
                                     const std::string& base) {
  auto v = t.string(key);
  if (!v) return std::nullopt;
  std::string name = t.key_name(key);
  std::filesystem::path p(*v);
  if (v->empty()) {
    t.problem_at(key, name + ": empty; write the directory, e.g. \"/srv/ftp\"");
    return std::nullopt;
  }
  if (p.is_relative()) p = std::filesystem::path(base) / p;
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) {
    t.problem_at(key, name + ": " + p.string() + ": " + std::strerror(errno) +
                          "; create the directory first");
    return std::nullopt;
  }
  if (!S_ISDIR(st.st_mode)) {
    t.problem_at(key, name + ": " + p.string() + " is not a directory");
    return std::nullopt;
  }
  return p.lexically_normal().string();
}

std::string base_dir_of(const std::string& source) {
  std::filesystem::path p(source);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

// The top level's addresses, sessions and timeouts.
void parse_sessions(const CheckedTable& root, Config& cfg) {
  if (auto v = root.string("listen")) {
    if (!parse_listen(*v, &cfg.listen_host, &cfg.listen_port))
      root.problem_at("listen", "listen: \"" + *v +
                                    "\" is not HOST:PORT with a numeric address; write e.g. "
                                    "\"127.0.0.1:2121\" or \"[::1]:2121\" (port 0 = ephemeral)");
  }
  set(&cfg.workers, root, "workers", 1, 256);
  set(&cfg.max_sessions, root, "max_sessions", 1, 10000);
  set(&cfg.worker_sessions, root, "worker_sessions", 0, 1000000);
  if (auto v = root.string("pasv_ports")) {
    if (!parse_range(*v, &cfg.pasv_min, &cfg.pasv_max))
      root.problem_at("pasv_ports",
                      "pasv_ports: \"" + *v +
                          "\" is not a port range; write \"LOW-HIGH\" with 1024 <= LOW <= HIGH <= "
                          "65535, or \"0\" for any ephemeral port");
  }
  if (auto v = root.string("pasv_address")) {
    in_addr a;
    if (!v->empty() && inet_pton(AF_INET, v->c_str(), &a) != 1)
      root.problem_at("pasv_address", "pasv_address: \"" + *v +
                                          "\" is not an IPv4 address (227 replies carry IPv4 only)");
    else
      cfg.pasv_address = *v;
  }
  set(&cfg.idle_timeout_s, root, "idle_timeout_s", 1, 86400);
  set(&cfg.data_timeout_s, root, "data_timeout_s", 1, 86400);
  if (auto v = root.boolean("store_splice")) cfg.store_splice = *v;
  set(&cfg.login_timeout_s, root, "login_timeout_s", 1, 3600);
  set(&cfg.login_fail_delay_ms, root, "login_fail_delay_ms", 0, 60000);
  set(&cfg.max_login_failures, root, "max_login_failures", 1, 100);
  set(&cfg.max_sessions_per_ip, root, "max_sessions_per_ip", 0, 10000);
  if (auto v = root.string("unprivileged_user")) {
    if (v->empty())
      root.problem_at("unprivileged_user",
                      "unprivileged_user: empty; name a system account, e.g. \"nobody\" or \"ftp\"");
    else
      cfg.unprivileged_user = *v;
  }
}

// The top level's files, logging and banner.
void parse_outputs(const CheckedTable& root, Config& cfg, const std::string& base) {
  if (auto v = root.string("xferlog")) cfg.xferlog = *v;
  if (auto v = root.string("log_level")) {
    if (*v == "debug")
      cfg.log_level = fabric::LogLevel::Debug;
    else if (*v == "info")
      cfg.log_level = fabric::LogLevel::Info;
    else if (*v == "warn")
      cfg.log_level = fabric::LogLevel::Warn;
    else if (*v == "error")
      cfg.log_level = fabric::LogLevel::Error;
    else
      root.problem_at("log_level", "log_level: \"" + *v +
                                       "\" is not one of \"debug\", \"info\", \"warn\", \"error\"");
  }
  if (auto v = root.string("ready_file")) cfg.ready_file = *v;
  if (auto v = root.string("metrics_file")) {
    if (v->empty())
      root.problem_at("metrics_file",
                      "metrics_file: empty; leave the key out for none, or write e.g. "
                      "\"/var/lib/prometheus/node-exporter/tierce-ftpd.prom\"");
    else
      cfg.metrics_file = std::filesystem::path(*v).is_relative()
                             ? (std::filesystem::path(base) / *v).lexically_normal().string()
                             : *v;
  }
  set(&cfg.metrics_interval_ms, root, "metrics_interval_ms", 1000, 3600000);
  if (auto v = root.string("banner")) {
    if (v->find_first_of("\r\n") != std::string::npos)
      root.problem_at("banner", "banner: one line only (no newlines)");
    else
      cfg.banner = *v;
  }
}

void parse_anonymous(const CheckedTable& t, Config& cfg, const std::string& base) {
  t.only_known_keys({"root", "run_as"});
  if (auto v = t.string("run_as", "\"ftp\"")) cfg.anonymous_run_as = *v;
  if (!t.toml().contains("root"))
    t.problem("anonymous.root: missing; write root = \"/srv/ftp\" in [anonymous]");
  else if (auto d = directory(t, "root", base)) {
    cfg.anonymous = true;
    cfg.anonymous_root = *d;
  }
}

void parse_tls(const CheckedTable& t, Config& cfg, const std::string& base) {
  t.only_known_keys({"cert", "key", "require", "require_reuse"});
  auto cert = t.string("cert");
  auto key = t.string("key");
  if (!cert || cert->empty()) t.problem("tls.cert: missing; the PEM certificate");
  if (!key || key->empty()) t.problem("tls.key: missing; the PEM private key");
  for (auto* p : {&cert, &key}) {
    if (*p && !(*p)->empty() && std::filesystem::path(**p).is_relative())
      **p = (std::filesystem::path(base) / **p).string();
  }
  if (cert && key) {
    for (auto [k, p] : {std::pair{"cert", *cert}, std::pair{"key", *key}}) {
      if (!p.empty() && ::access(p.c_str(), R_OK) != 0)
        t.problem_at(k, std::string("tls.") + k + ": " + p + ": " + std::strerror(errno));
    }
    cfg.tls = true;
    cfg.tls_cert = *cert;
    cfg.tls_key = *key;
  }
  if (auto v = t.boolean("require")) cfg.tls_require = *v;
  if (auto v = t.boolean("require_reuse")) cfg.tls_require_reuse = *v;
}

void parse_adts(const CheckedTable& t, Config& cfg) {
  t.only_known_keys({"enable", "max_streams", "block_kib", "zero_copy"});
  if (auto v = t.boolean("enable")) cfg.adts_enable = *v;
  set(&cfg.adts_max_streams, t, "max_streams", 1, 64);
  set(&cfg.adts_block_kib, t, "block_kib", 4, 65536);
  if (auto v = t.boolean("zero_copy")) cfg.adts_zero_copy = *v;
}

// One [[user]] table; nullopt when it has no usable name (the rest is not checked then).
std::optional<UserConfig> parse_user(const CheckedTable& t, std::set<std::string>& seen,
                                     const std::string& base) {
  t.only_known_keys({"name", "password", "root", "write", "run_as", "max_upload_bytes",
                     "session_upload_bytes"});
  UserConfig u;
  auto name = t.string("name");
  if (!name || name->empty() ||
      !std::all_of(name->begin(), name->end(),
                   [](char ch) { return ch > 0x20 && ch != 0x7f && ch != ':'; })) {
    t.problem("user.name: missing or not a plain word (no spaces, no ':')");
    return std::nullopt;
  }
  u.name = *name;
  if (u.name == "anonymous" || u.name == "ftp")
    t.problem_at("name", "user.name: \"" + u.name + "\" is the anonymous login; use [anonymous]");
  if (!seen.insert(u.name).second)
    t.problem_at("name", "user.name: \"" + u.name + "\" appears twice");
  auto pw = t.string("password");
  if (!pw)
    t.problem("user.password: missing for user \"" + u.name +
              "\"; make one with tierce-ftpd --hash-password");
  else if (pw->size() < 4 || (*pw)[0] != '$' || pw->find('$', 1) == std::string::npos)
    t.problem_at("password", "user.password: user \"" + u.name +
                                 "\": not a crypt(3) hash (\"$y$...\" or \"$6$...\"); plain text "
                                 "is not accepted: make one with tierce-ftpd --hash-password");
  else
    u.password_hash = *pw;
  if (pw) ::explicit_bzero(pw->data(), pw->size());  // see scrub_strings
  if (!t.toml().contains("root"))
    t.problem("user.root: missing for user \"" + u.name + "\"");
  else if (auto d = directory(t, "root", base))
    u.root = *d;
  if (auto w = t.boolean("write")) u.write = *w;
  if (auto r = t.string("run_as")) {
    if (r->empty())
      t.problem_at("run_as", "user.run_as: user \"" + u.name +
                                 "\": empty; name a system account or omit it");
    else
      u.run_as = *r;
  }
  if (auto v = t.integer("max_upload_bytes", 0, INT64_MAX)) u.max_upload_bytes = *v;
  if (auto v = t.integer("session_upload_bytes", 0, INT64_MAX)) u.session_upload_bytes = *v;
  return u;
}

void parse_users(ConfigChecker& c, const toml::node& n, Config& cfg, const std::string& base) {
  const toml::array* arr = n.as_array();
  if (!arr || !arr->is_array_of_tables()) {
    c.problem(n.source(), "user: expected tables [[user]] (name, password, root, write)");
    return;
  }
  std::set<std::string> seen;
  for (const toml::node& un : *arr)
    if (auto u = parse_user(c.table(*un.as_table(), "user."), seen, base))
      cfg.users.push_back(std::move(*u));
}

// [limits] (issue 17: bounded resources per session).
void parse_limits(const CheckedTable& t, Config& cfg) {
  t.only_known_keys({"max_command_line", "control_buffer_kib", "max_upload_bytes",
                     "session_upload_bytes", "adts_peer_only"});
  if (auto v = t.integer("max_command_line", 512, 4096)) cfg.max_command_line = size_t(*v);
  if (auto v = t.integer("control_buffer_kib", 4, 65536))
    cfg.control_buffer_bytes = size_t(*v) << 10;
  if (auto v = t.integer("max_upload_bytes", 0, INT64_MAX)) cfg.max_upload_bytes = uint64_t(*v);
  if (auto v = t.integer("session_upload_bytes", 0, INT64_MAX))
    cfg.session_upload_bytes = uint64_t(*v);
  if (auto v = t.boolean("adts_peer_only")) cfg.adts_peer_only = *v;
}

// Runs `parse` on root's table `key` ([tls] read as "tls.KEY") when there is one.
template <class Parse>
void with_table(ConfigChecker& c, const toml::table& root, const std::string& key, Parse parse) {
  const toml::node* n = root.get(key);
  if (!n) return;
  if (const toml::table* t = n->as_table())
    parse(c.table(*t, key + "."));
  else
    c.problem(n->source(), key + ": expected a table [" + key + "]");
}

Config parse_checked(const toml::table& root, const std::string& source) {
  std::string base = base_dir_of(source);
  base::CheckerWording terse;
  terse.style = base::CheckerWording::Style::Terse;
  ConfigChecker c(source, base, terse);
  Config cfg;
  cfg.source = source;
  CheckedTable top = c.table(root, "");
  top.only_known_keys({"listen", "workers", "max_sessions", "worker_sessions", "pasv_ports",
                       "pasv_address", "idle_timeout_s", "data_timeout_s", "store_splice",
                       "login_timeout_s", "login_fail_delay_ms", "max_login_failures",
                       "max_sessions_per_ip", "unprivileged_user", "xferlog", "log_level",
                       "ready_file", "banner", "anonymous", "tls", "adts", "user", "limits",
                       "metrics_file", "metrics_interval_ms"});
  parse_sessions(top, cfg);
  parse_outputs(top, cfg, base);
  with_table(c, root, "anonymous", [&](const CheckedTable& t) { parse_anonymous(t, cfg, base); });
  with_table(c, root, "tls", [&](const CheckedTable& t) { parse_tls(t, cfg, base); });
  with_table(c, root, "adts", [&](const CheckedTable& t) { parse_adts(t, cfg); });
  if (const toml::node* n = root.get("user")) parse_users(c, *n, cfg, base);
  with_table(c, root, "limits", [&](const CheckedTable& t) { parse_limits(t, cfg); });
  if (cfg.users.empty() && !cfg.anonymous && c.ok())
    c.problem("user: no [[user]] and no [anonymous]: nobody could log in; add one of them");
  c.throw_if_any();
  return cfg;
}

}  // namespace

const UserConfig* Config::find_user(const std::string& name) const {
  for (const auto& u : users)
    if (u.name == name) return &u;
  return nullptr;
}

namespace {

// Overwrites every string value of the parsed document before it is freed: the password hashes
// must not stay in freed memory of the master, which every worker inherits by fork (privsep.h
// wipes the parsed user table in a session's process after its login).
void scrub_strings(toml::node& n) {
  if (auto* s = n.as_string()) {
    std::string& v = s->get();
    ::explicit_bzero(v.data(), v.size());
  } else if (auto* t = n.as_table()) {
    for (auto&& [k, v] : *t) scrub_strings(v);
  } else if (auto* a = n.as_array()) {
    for (auto& v : *a) scrub_strings(v);
  }
}

struct Scrub {
  toml::table& t;
  ~Scrub() { scrub_strings(t); }
};

}  // namespace

Config parse_config(const std::string& text, const std::string& source_name) {
  toml::table root;
  Scrub scrub{root};
  root = base::parse_toml(text, source_name,
                          "strings need double quotes; tables are [tls], [adts], [[user]]");
  return parse_checked(root, source_name);
}

Config load_config(const std::string& path) {
  std::error_code ec;
  std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) abs = path;
  // base::read_config_file reads with read(2) into one buffer of the file's size, no stream
  // buffer: the text holds the password hashes and is overwritten below, so that no copy is left
  // in freed memory (scrub_strings).
  std::string text = base::read_config_file(path);
  struct Wipe {
    std::string& s;
    ~Wipe() { ::explicit_bzero(s.data(), s.size()); }
  } wipe{text};
  return parse_config(text, abs);
}

}  // namespace tierce::ftpd
