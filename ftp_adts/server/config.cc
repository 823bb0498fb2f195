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

namespace tierce::ftpd {

namespace {

using base::join;

class Checker {
 public:
  explicit Checker(std::string file) : file_(std::move(file)) {}

  void problem(const toml::source_region& where, const std::string& msg) {
    if (where.begin.line > 0)
      problems_.push_back(file_ + ":" + std::to_string(where.begin.line) + ":" +
                          std::to_string(where.begin.column) + ": " + msg);
    else
      problems_.push_back(file_ + ": " + msg);
  }
  void problem(const std::string& msg) { problems_.push_back(file_ + ": " + msg); }
  const std::vector<std::string>& problems() const { return problems_; }

  // `prefix` names the table in messages: "" for the top level, "tls." for [tls].
  void only_known_keys(const toml::table& t, const std::string& prefix,
                       const std::vector<std::string>& allowed) {
    std::vector<std::string_view> known(allowed.begin(), allowed.end());
    for (auto& u : base::unknown_keys(t, known))
      problem(u.where, prefix + u.key + ": unknown key" +
                           (u.suggestion.empty() ? "" : "; did you mean '" + u.suggestion + "'?") +
                           " (known here: " + join(allowed, ", ") + ")");
  }

  std::optional<std::string> str(const toml::table& t, const std::string& prefix,
                                 const std::string& key) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (!n->is_string()) {
      problem(n->source(), prefix + key + ": expected a string in double quotes");
      return std::nullopt;
    }
    return n->as_string()->get();
  }
  std::optional<bool> boolean(const toml::table& t, const std::string& prefix,
                              const std::string& key) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (!n->is_boolean()) {
      problem(n->source(), prefix + key + ": expected true or false");
      return std::nullopt;
    }
    return n->as_boolean()->get();
  }
  std::optional<int64_t> integer(const toml::table& t, const std::string& prefix,
                                 const std::string& key, int64_t lo, int64_t hi) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (!n->is_integer()) {
      problem(n->source(), prefix + key + ": expected an integer " + std::to_string(lo) + ".." +
                               std::to_string(hi));
      return std::nullopt;
    }
    int64_t v = n->as_integer()->get();
    if (v < lo || v > hi) {
      problem(n->source(), prefix + key + ": " + std::to_string(v) + " is out of range; write " +
                               std::to_string(lo) + ".." + std::to_string(hi));
      return std::nullopt;
    }
    return v;
  }
  void set(unsigned* out, const toml::table& t, const std::string& prefix, const std::string& key,
           int64_t lo, int64_t hi) {
    if (auto v = integer(t, prefix, key, lo, hi)) *out = unsigned(*v);
  }

  // An existing directory, absolute. Relative paths are taken from the config file's directory.
  std::optional<std::string> directory(const toml::table& t, const std::string& prefix,
                                       const std::string& key, const std::string& base) {
    auto v = str(t, prefix, key);
    if (!v) return std::nullopt;
    const toml::node* n = t.get(key);
    std::filesystem::path p(*v);
    if (v->empty()) {
      problem(n->source(), prefix + key + ": empty; write the directory, e.g. \"/srv/ftp\"");
      return std::nullopt;
    }
    if (p.is_relative()) p = std::filesystem::path(base) / p;
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) {
      problem(n->source(), prefix + key + ": " + p.string() + ": " + std::strerror(errno) +
                               "; create the directory first");
      return std::nullopt;
    }
    if (!S_ISDIR(st.st_mode)) {
      problem(n->source(), prefix + key + ": " + p.string() + " is not a directory");
      return std::nullopt;
    }
    return p.lexically_normal().string();
  }

 private:
  std::string file_;
  std::vector<std::string> problems_;
};

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

std::string base_dir_of(const std::string& source) {
  std::filesystem::path p(source);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

Config parse_checked(const toml::table& root, const std::string& source) {
  Checker c(source);
  Config cfg;
  cfg.source = source;
  std::string base = base_dir_of(source);

  c.only_known_keys(root, "",
                    {"listen", "workers", "max_sessions", "worker_sessions", "pasv_ports",
                     "pasv_address", "idle_timeout_s", "data_timeout_s", "store_splice", "login_timeout_s",
                     "login_fail_delay_ms", "max_login_failures", "max_sessions_per_ip",
                     "unprivileged_user", "xferlog", "log_level",
                     "ready_file", "banner", "anonymous", "tls", "adts", "user", "limits",
                     "metrics_file", "metrics_interval_ms"});

  if (auto v = c.str(root, "", "listen")) {
    if (!parse_listen(*v, &cfg.listen_host, &cfg.listen_port))
      c.problem(root.get("listen")->source(),
                "listen: \"" + *v +
                    "\" is not HOST:PORT with a numeric address; write e.g. \"127.0.0.1:2121\" "
                    "or \"[::1]:2121\" (port 0 = ephemeral)");
  }
  c.set(&cfg.workers, root, "", "workers", 1, 256);
  c.set(&cfg.max_sessions, root, "", "max_sessions", 1, 10000);
  c.set(&cfg.worker_sessions, root, "", "worker_sessions", 0, 1000000);
  if (auto v = c.str(root, "", "pasv_ports")) {
    if (!parse_range(*v, &cfg.pasv_min, &cfg.pasv_max))
      c.problem(root.get("pasv_ports")->source(),
                "pasv_ports: \"" + *v +
                    "\" is not a port range; write \"LOW-HIGH\" with 1024 <= LOW <= HIGH <= 65535, "
                    "or \"0\" for any ephemeral port");
  }
  if (auto v = c.str(root, "", "pasv_address")) {
    in_addr a;
    if (!v->empty() && inet_pton(AF_INET, v->c_str(), &a) != 1)
      c.problem(root.get("pasv_address")->source(),
                "pasv_address: \"" + *v + "\" is not an IPv4 address (227 replies carry IPv4 only)");
    else
      cfg.pasv_address = *v;
  }
  c.set(&cfg.idle_timeout_s, root, "", "idle_timeout_s", 1, 86400);
  c.set(&cfg.data_timeout_s, root, "", "data_timeout_s", 1, 86400);
  if (auto v = c.boolean(root, "", "store_splice")) cfg.store_splice = *v;
  c.set(&cfg.login_timeout_s, root, "", "login_timeout_s", 1, 3600);
  c.set(&cfg.login_fail_delay_ms, root, "", "login_fail_delay_ms", 0, 60000);
  c.set(&cfg.max_login_failures, root, "", "max_login_failures", 1, 100);
  c.set(&cfg.max_sessions_per_ip, root, "", "max_sessions_per_ip", 0, 10000);
  if (auto v = c.str(root, "", "unprivileged_user")) {
    if (v->empty())
      c.problem(root.get("unprivileged_user")->source(),
                "unprivileged_user: empty; name a system account, e.g. \"nobody\" or \"ftp\"");
    else
      cfg.unprivileged_user = *v;
  }
  if (auto v = c.str(root, "", "xferlog")) cfg.xferlog = *v;
  if (auto v = c.str(root, "", "log_level")) {
    if (*v == "debug")
      cfg.log_level = fabric::LogLevel::Debug;
    else if (*v == "info")
      cfg.log_level = fabric::LogLevel::Info;
    else if (*v == "warn")
      cfg.log_level = fabric::LogLevel::Warn;
    else if (*v == "error")
      cfg.log_level = fabric::LogLevel::Error;
    else
      c.problem(root.get("log_level")->source(),
                "log_level: \"" + *v + "\" is not one of \"debug\", \"info\", \"warn\", \"error\"");
  }
  if (auto v = c.str(root, "", "ready_file")) cfg.ready_file = *v;
  if (auto v = c.str(root, "", "metrics_file")) {
    if (v->empty())
      c.problem(root.get("metrics_file")->source(),
                "metrics_file: empty; leave the key out for none, or write e.g. "
                "\"/var/lib/prometheus/node-exporter/tierce-ftpd.prom\"");
    else
      cfg.metrics_file = std::filesystem::path(*v).is_relative()
                             ? (std::filesystem::path(base) / *v).lexically_normal().string()
                             : *v;
  }
  c.set(&cfg.metrics_interval_ms, root, "", "metrics_interval_ms", 1000, 3600000);
  if (auto v = c.str(root, "", "banner")) {
    if (v->find_first_of("\r\n") != std::string::npos)
      c.problem(root.get("banner")->source(), "banner: one line only (no newlines)");
    else
      cfg.banner = *v;
  }

  if (const toml::node* n = root.get("anonymous")) {
    if (const toml::table* t = n->as_table()) {
      c.only_known_keys(*t, "anonymous.", {"root"});
      if (!t->contains("root"))
        c.problem(n->source(), "anonymous.root: missing; write root = \"/srv/ftp\" in [anonymous]");
      else if (auto d = c.directory(*t, "anonymous.", "root", base)) {
        cfg.anonymous = true;
        cfg.anonymous_root = *d;
      }
    } else {
      c.problem(n->source(), "anonymous: expected a table [anonymous]");
    }
  }

  if (const toml::node* n = root.get("tls")) {
    if (const toml::table* t = n->as_table()) {
      c.only_known_keys(*t, "tls.", {"cert", "key", "require", "require_reuse"});
      auto cert = c.str(*t, "tls.", "cert");
      auto key = c.str(*t, "tls.", "key");
      if (!cert || cert->empty()) c.problem(n->source(), "tls.cert: missing; the PEM certificate");
      if (!key || key->empty()) c.problem(n->source(), "tls.key: missing; the PEM private key");
      for (auto* p : {&cert, &key}) {
        if (*p && !(*p)->empty() && std::filesystem::path(**p).is_relative())
          **p = (std::filesystem::path(base) / **p).string();
      }
      if (cert && key) {
        for (auto [k, p] : {std::pair{"cert", *cert}, std::pair{"key", *key}}) {
          if (!p.empty() && ::access(p.c_str(), R_OK) != 0)
            c.problem(t->get(k)->source(),
                      std::string("tls.") + k + ": " + p + ": " + std::strerror(errno));
        }
        cfg.tls = true;
        cfg.tls_cert = *cert;
        cfg.tls_key = *key;
      }
      if (auto v = c.boolean(*t, "tls.", "require")) cfg.tls_require = *v;
      if (auto v = c.boolean(*t, "tls.", "require_reuse")) cfg.tls_require_reuse = *v;
    } else {
      c.problem(n->source(), "tls: expected a table [tls]");
    }
  }

  if (const toml::node* n = root.get("adts")) {
    if (const toml::table* t = n->as_table()) {
      c.only_known_keys(*t, "adts.", {"enable", "max_streams", "block_kib", "zero_copy"});
      if (auto v = c.boolean(*t, "adts.", "enable")) cfg.adts_enable = *v;
      c.set(&cfg.adts_max_streams, *t, "adts.", "max_streams", 1, 64);
      c.set(&cfg.adts_block_kib, *t, "adts.", "block_kib", 4, 65536);
      if (auto v = c.boolean(*t, "adts.", "zero_copy")) cfg.adts_zero_copy = *v;
    } else {
      c.problem(n->source(), "adts: expected a table [adts]");
    }
  }

  if (const toml::node* n = root.get("user")) {
    const toml::array* arr = n->as_array();
    if (!arr || !arr->is_array_of_tables()) {
      c.problem(n->source(), "user: expected tables [[user]] (name, password, root, write)");
    } else {
      std::set<std::string> seen;
      for (const toml::node& un : *arr) {
        const toml::table& t = *un.as_table();
        c.only_known_keys(t, "user.", {"name", "password", "root", "write", "run_as",
                                       "max_upload_bytes", "session_upload_bytes"});
        UserConfig u;
        auto name = c.str(t, "user.", "name");
        if (!name || name->empty() ||
            !std::all_of(name->begin(), name->end(),
                         [](char ch) { return ch > 0x20 && ch != 0x7f && ch != ':'; })) {
          c.problem(un.source(), "user.name: missing or not a plain word (no spaces, no ':')");
          continue;
        }
        u.name = *name;
        if (u.name == "anonymous" || u.name == "ftp")
          c.problem(t.get("name")->source(),
                    "user.name: \"" + u.name + "\" is the anonymous login; use [anonymous]");
        if (!seen.insert(u.name).second)
          c.problem(t.get("name")->source(), "user.name: \"" + u.name + "\" appears twice");
        auto pw = c.str(t, "user.", "password");
        if (!pw)
          c.problem(un.source(), "user.password: missing for user \"" + u.name +
                                     "\"; make one with tierce-ftpd --hash-password");
        else if (pw->size() < 4 || (*pw)[0] != '$' || pw->find('$', 1) == std::string::npos)
          c.problem(t.get("password")->source(),
                    "user.password: user \"" + u.name +
                        "\": not a crypt(3) hash (\"$y$...\" or \"$6$...\"); plain text is not "
                        "accepted: make one with tierce-ftpd --hash-password");
        else
          u.password_hash = *pw;
        if (pw) ::explicit_bzero(pw->data(), pw->size());  // see scrub_strings
        if (!t.contains("root"))
          c.problem(un.source(), "user.root: missing for user \"" + u.name + "\"");
        else if (auto d = c.directory(t, "user.", "root", base))
          u.root = *d;
        if (auto w = c.boolean(t, "user.", "write")) u.write = *w;
        if (auto r = c.str(t, "user.", "run_as")) {
          if (r->empty())
            c.problem(t.get("run_as")->source(), "user.run_as: user \"" + u.name +
                                                     "\": empty; name a system account or omit it");
          else
            u.run_as = *r;
        }
        if (auto v = c.integer(t, "user.", "max_upload_bytes", 0, INT64_MAX))
          u.max_upload_bytes = *v;
        if (auto v = c.integer(t, "user.", "session_upload_bytes", 0, INT64_MAX))
          u.session_upload_bytes = *v;
        cfg.users.push_back(std::move(u));
      }
    }
  }
  // ---- [limits] (issue 17: bounded resources per session) ----
  if (const toml::node* n = root.get("limits")) {
    if (const toml::table* t = n->as_table()) {
      c.only_known_keys(*t, "limits.",
                        {"max_command_line", "control_buffer_kib", "max_upload_bytes",
                         "session_upload_bytes", "adts_peer_only"});
      if (auto v = c.integer(*t, "limits.", "max_command_line", 512, 4096))
        cfg.max_command_line = size_t(*v);
      if (auto v = c.integer(*t, "limits.", "control_buffer_kib", 4, 65536))
        cfg.control_buffer_bytes = size_t(*v) << 10;
      if (auto v = c.integer(*t, "limits.", "max_upload_bytes", 0, INT64_MAX))
        cfg.max_upload_bytes = uint64_t(*v);
      if (auto v = c.integer(*t, "limits.", "session_upload_bytes", 0, INT64_MAX))
        cfg.session_upload_bytes = uint64_t(*v);
      if (auto v = c.boolean(*t, "limits.", "adts_peer_only")) cfg.adts_peer_only = *v;
    } else {
      c.problem(n->source(), "limits: expected a table [limits]");
    }
  }

  if (cfg.users.empty() && !cfg.anonymous && c.problems().empty())
    c.problem("user: no [[user]] and no [anonymous]: nobody could log in; add one of them");

  if (!c.problems().empty()) throw ConfigError(c.problems());
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
