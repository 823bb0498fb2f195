// agents/binlogd/config.cc — binlogd.toml: reading and checking (config.h).
#include "agents/binlogd/config.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "base/config_checker.h"

namespace tierce::binlogd {
namespace {

const std::vector<std::string_view> kBinlogdKeys = {
    "topology",     "node",      "state_file",             "pid_file",
    "user",         "log_level", "metrics_file",           "metrics_interval_ms",
    "databases",    "auto_names", "unknown_tables",        "max_batch_transactions",
    "lag_alarm_ms", "audit_file", "node_key"};
const std::vector<std::string_view> kMariadbKeys = {"host",      "port",         "socket",
                                                    "user",      "password_file", "server_id",
                                                    "heartbeat_ms"};
const std::vector<std::string_view> kTableKeys = {"name", "names"};

std::optional<std::vector<std::string>> strings(const base::CheckedTable& t, std::string_view key,
                                                const std::string& example) {
  const toml::node* n = t.node(key);
  if (!n) return std::nullopt;
  const toml::array* a = n->as_array();
  std::vector<std::string> out;
  bool ok = a != nullptr;
  if (a)
    for (const auto& e : *a) {
      if (!e.is_string() || e.as_string()->get().empty()) {
        ok = false;
        break;
      }
      out.push_back(e.as_string()->get());
    }
  if (!ok) {
    t.problem_at(key, t.key_name(key) + ": expected an array of non-empty strings; write e.g. " +
                          std::string(key) + " = " + example);
    return std::nullopt;
  }
  return out;
}

void parse_binlogd(const base::CheckedTable& t, Settings& s) {
  t.only_known_keys(kBinlogdKeys);
  auto take = [](auto v, auto& field) {
    if (v) field = *v;
  };
  take(t.path("topology", "\"/etc/tierce/cluster.toml\""), s.topology);
  take(t.string("node", "\"app1\""), s.node);
  take(t.path("node_key", "\"/etc/tierce/app1.key\""), s.node_key);
  take(t.path("state_file", "\"/var/lib/tierce/binlogd.gtid\""), s.state_file);
  take(t.path("pid_file", "\"/run/tierce/binlogd.pid\""), s.pid_file);
  take(t.string("user", "\"tierce\""), s.user);
  if (auto v = t.string("log_level", "\"info\"")) {
    if (*v == "debug") s.log_level = base::LogLevel::Debug;
    else if (*v == "info") s.log_level = base::LogLevel::Info;
    else if (*v == "warn") s.log_level = base::LogLevel::Warn;
    else if (*v == "error") s.log_level = base::LogLevel::Error;
    else
      t.problem_at("log_level", "[binlogd] log_level: \"" + *v +
                                    "\" is not a level; write debug, info, warn or error");
  }
  take(t.path("metrics_file", "\"/var/lib/prometheus/node-exporter/tierce-binlogd.prom\""),
       s.metrics_file);
  if (auto v = t.integer("metrics_interval_ms", 1000, 3600000, 5000))
    s.metrics_interval = std::chrono::milliseconds(*v);
  take(strings(t, "databases", "[\"rubis\"]"), s.mapping.databases);
  take(t.boolean("auto_names"), s.mapping.auto_names);
  if (auto v = t.string("unknown_tables", "\"invalidate-all\"")) {
    if (*v == "invalidate-all") s.mapping.unknown_tables = UnknownTables::InvalidateAll;
    else if (*v == "ignore") s.mapping.unknown_tables = UnknownTables::Ignore;
    else
      t.problem_at("unknown_tables", "[binlogd] unknown_tables: \"" + *v +
                                         "\"; write \"invalidate-all\" (the default) or \"ignore\"");
  }
  if (auto v = t.integer("max_batch_transactions", 1, 100000, 256))
    s.max_batch_transactions = size_t(*v);
  take(t.path("audit_file", "\"/var/lib/tierce/binlogd.audit\""), s.audit_file);
  if (auto v = t.integer("lag_alarm_ms", 10, 3600000, 1000))
    s.lag_alarm = std::chrono::milliseconds(*v);
  // Required. A key present with a wrong value has its own problem already.
  if (!t.node("topology"))
    t.problem("[binlogd] topology is missing; write e.g. topology = \"/etc/tierce/cluster.toml\"");
  if (!t.node("node"))
    t.problem("[binlogd] node is missing; write e.g. node = \"app1\" (the app node it runs beside)");
  if (!t.node("state_file"))
    t.problem("[binlogd] state_file is missing; write e.g. state_file = "
              "\"/var/lib/tierce/binlogd.gtid\"");
}

void parse_mariadb(const base::CheckedTable& t, Settings& s) {
  t.only_known_keys(kMariadbKeys);
  SourceSettings& m = s.mariadb;
  if (auto v = t.string("host", "\"127.0.0.1\"")) m.host = *v;
  if (auto v = t.integer("port", 1, 65535, 3306)) m.port = int(*v);
  if (auto v = t.path("socket", "\"/run/mysqld/mysqld.sock\"")) m.socket = *v;
  if (auto v = t.string("user", "\"tierce_binlog\"")) m.user = *v;
  if (auto v = t.path("password_file", "\"/etc/tierce/binlogd.password\"")) s.password_file = *v;
  if (auto v = t.integer("server_id", 1, 4294967295, 4242)) m.server_id = uint32_t(*v);
  if (auto v = t.integer("heartbeat_ms", 100, 60000, 500)) m.heartbeat = std::chrono::milliseconds(*v);
  if (!t.node("user")) t.problem("[mariadb] user is missing; write e.g. user = \"tierce_binlog\"");
  if (!t.node("password_file"))
    t.problem("[mariadb] password_file is missing; write e.g. password_file = "
              "\"/etc/tierce/binlogd.password\"");
}

void parse_table(const base::CheckedTable& t, Settings& s) {
  t.only_known_keys(kTableKeys);
  TableRule r;
  auto name = t.string("name", "\"items\"");
  auto names = strings(t, "names", "[\"item:{id}\"]");
  if (!t.node("name")) t.problem(t.name() + " name is missing; write e.g. name = \"items\"");
  if (!t.node("names"))
    t.problem(t.name() + " names is missing; write e.g. names = [\"item:{id}\"]");
  if (!name || !names) return;
  size_t dot = name->find('.');
  if (dot != std::string::npos) {
    r.database = name->substr(0, dot);
    r.table = name->substr(dot + 1);
  } else {
    r.table = *name;
  }
  r.templates = *names;
  // The templates checked here, so that a bad one is reported at its line.
  MappingSettings one;
  one.tables.push_back(r);
  if (auto m = Mapping::make(std::move(one)); !m.ok()) {
    t.problem_at("names", m.message());
    return;
  }
  s.mapping.tables.push_back(std::move(r));
}

const toml::table* table_of(base::ConfigChecker& c, const toml::table& root, const char* key) {
  const toml::node* n = root.get(key);
  if (!n) return nullptr;
  if (!n->is_table()) {
    c.problem(n->source(), std::string(key) + ": expected a [" + key + "] table, got " +
                               base::describe_toml_type(*n));
    return nullptr;
  }
  return n->as_table();
}

}  // namespace

Settings parse_config(std::string_view text, const std::string& source_name) {
  toml::table root = base::parse_toml(text, source_name,
                                      "strings need double quotes; see conf/binlogd.toml");
  base::CheckerWording wording;
  wording.strings_nonempty = true;
  wording.integer_note = " (no quotes)";
  base::ConfigChecker c(source_name, base::config_base_dir(source_name), wording);
  Settings s;
  for (auto& u : base::unknown_keys(root, {"binlogd", "mariadb", "table"}))
    c.problem(u.where, "unknown key or table '" + u.key + "'" +
                           (u.suggestion.empty() ? "" : "; did you mean '" + u.suggestion + "'?") +
                           " (tierce-binlogd reads [binlogd], [mariadb] and [[table]])");
  if (const toml::table* t = table_of(c, root, "binlogd")) parse_binlogd(c.table(*t, "[binlogd]"), s);
  else c.problem("the [binlogd] table is missing; start the file with [binlogd]");
  if (const toml::table* t = table_of(c, root, "mariadb")) parse_mariadb(c.table(*t, "[mariadb]"), s);
  else c.problem("the [mariadb] table is missing (host, port, user, password_file)");
  const toml::node* tables = root.get("table");
  if (const toml::node* n = tables) {
    const toml::array* a = n->as_array();
    if (!a || !a->is_array_of_tables())
      c.problem(n->source(), "table: expected [[table]] entries (an array of tables)");
    else
      for (size_t i = 0; i < a->size(); ++i)
        parse_table(c.table(*a->get(i)->as_table(), "[[table]] #" + std::to_string(i + 1)), s);
  }
  auto m = Mapping::make(s.mapping);  // each [[table]] was checked: this cannot fail today
  if (!m) c.problem(m.message());
  if (!s.mapping.auto_names && !tables &&
      s.mapping.unknown_tables == UnknownTables::InvalidateAll)
    c.problem("neither auto_names = true nor any [[table]]: every row change would invalidate "
              "everything; describe the tables the pages depend on, or set auto_names = true");
  c.throw_if_any(base::ConfigChecker::Order::FileOrder);
  return s;
}

Settings load_config_file(const std::string& path) {
  std::error_code ec;
  std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) abs = path;
  return parse_config(base::read_config_file(path), abs);
}

base::Result<std::string> read_password_file(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    return base::Result<std::string>(base::Code::NotFound,
                                     "the password file " + path + " cannot be read: " +
                                         std::strerror(errno),
                                     "BINLOGD0103");
  if (st.st_mode & 077)
    return base::Result<std::string>(base::Code::PermissionDenied,
                                     "the password file " + path +
                                         " is readable by others than its owner; chmod 600 it",
                                     "BINLOGD0103");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  if (!in && line.empty())
    return base::Result<std::string>(base::Code::NotFound,
                                     "the password file " + path + " is empty", "BINLOGD0103");
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace tierce::binlogd
