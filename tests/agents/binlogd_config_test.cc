// tests/agents/binlogd_config_test.cc — tierce-binlogd's configuration (agents/binlogd/config.h):
// a full binlogd.toml gives the expected Settings; a bad file reports every problem at once, each
// with FILE:LINE (unknown keys with a did-you-mean, wrong types, a missing [mariadb] or required
// key, a file that would invalidate everything on every write); the password file (mode 600, its
// first line); and GTID positions (agents/binlogd/source.h: parse, text, advance).
#define BOOST_TEST_MODULE binlogd_config
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "agents/binlogd/config.h"
#include "agents/binlogd/source.h"

using namespace tierce::binlogd;
using tierce::base::Code;
namespace fs = std::filesystem;

namespace tierce::base {
std::ostream& operator<<(std::ostream& o, LogLevel l) {
  return o << int(l);
}
}  // namespace tierce::base
namespace tierce::binlogd {
std::ostream& operator<<(std::ostream& o, UnknownTables u) {
  return o << (u == UnknownTables::Ignore ? "ignore" : "invalidate-all");
}
}  // namespace tierce::binlogd

namespace {

const std::string kFile = "/etc/tierce/binlogd.toml";

const char* kGood = R"([binlogd]
topology = "/etc/tierce/cluster.toml"
node = "app2"
state_file = "state/binlogd.gtid"
pid_file = "/run/tierce/binlogd.pid"
user = "tierce"
log_level = "debug"
metrics_file = "/var/lib/prometheus/node-exporter/tierce-binlogd.prom"
metrics_interval_ms = 2500
databases = ["rubis", "Shop"]
auto_names = true
unknown_tables = "ignore"
max_batch_transactions = 64
lag_alarm_ms = 250

[mariadb]
host = "db.example"
port = 3307
socket = "/run/mysqld/mysqld.sock"
user = "tierce_binlog"
password_file = "binlogd.password"
server_id = 4243
heartbeat_ms = 750

[[table]]
name = "items"
names = ["item:{id}", "category:{category_id}"]

[[table]]
name = "shop.orders"
names = ["order:{id}"]
)";

// The problems of `text` read as /etc/tierce/binlogd.toml (none when it parsed).
std::vector<std::string> problems(const std::string& text) {
  try {
    parse_config(text, kFile);
  } catch (const tierce::base::ConfigError& e) {
    BOOST_TEST(!e.problems().empty());
    return e.problems();
  }
  return {};
}

// The one problem that contains `what` (none, or several: a failed check and "").
std::string problem_with(const std::vector<std::string>& ps, const std::string& what) {
  std::string found;
  int n = 0;
  for (const auto& p : ps)
    if (p.find(what) != std::string::npos) {
      found = p;
      ++n;
    }
  BOOST_TEST(n == 1, "problems mentioning '" << what << "': " << n);
  return n == 1 ? found : "";
}

bool problem_with_none(const std::vector<std::string>& ps, const std::string& what) {
  return std::none_of(ps.begin(), ps.end(),
                      [&](const std::string& p) { return p.find(what) != std::string::npos; });
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

const char* kMinimalHead = R"([binlogd]
topology = "/etc/tierce/cluster.toml"
node = "app1"
state_file = "/var/lib/tierce/binlogd.gtid"
[mariadb]
user = "tierce_binlog"
password_file = "/etc/tierce/binlogd.password"
)";

// A private directory for files, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "binlogd_config_test.XXXXXX").string();
    BOOST_REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name, const std::string& text, mode_t mode) const {
    fs::path p = path / name;
    std::ofstream(p) << text;
    BOOST_REQUIRE(::chmod(p.c_str(), mode) == 0);
    return p.string();
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_full_file_gives_the_expected_settings) {
  Settings s = parse_config(kGood, kFile);
  BOOST_TEST(s.topology == "/etc/tierce/cluster.toml");
  BOOST_TEST(s.node == "app2");
  BOOST_TEST(s.state_file == "/etc/tierce/state/binlogd.gtid", "relative to the file's directory");
  BOOST_TEST(s.pid_file == "/run/tierce/binlogd.pid");
  BOOST_TEST(s.user == "tierce");
  BOOST_TEST(s.log_level == tierce::base::LogLevel::Debug);
  BOOST_TEST(s.metrics_file == "/var/lib/prometheus/node-exporter/tierce-binlogd.prom");
  BOOST_TEST(s.metrics_interval.count() == 2500);
  BOOST_TEST(s.max_batch_transactions == 64u);
  BOOST_TEST(s.lag_alarm.count() == 250);
  BOOST_TEST(s.mariadb.host == "db.example");
  BOOST_TEST(s.mariadb.port == 3307);
  BOOST_TEST(s.mariadb.socket == "/run/mysqld/mysqld.sock");
  BOOST_TEST(s.mariadb.user == "tierce_binlog");
  BOOST_TEST(s.mariadb.password.empty(), "read at start, not here");
  BOOST_TEST(s.password_file == "/etc/tierce/binlogd.password");
  BOOST_TEST(s.mariadb.server_id == 4243u);
  BOOST_TEST(s.mariadb.heartbeat.count() == 750);
  BOOST_TEST(s.mapping.databases == std::vector<std::string>({"rubis", "Shop"}),
             boost::test_tools::per_element());
  BOOST_TEST(s.mapping.auto_names);
  BOOST_TEST(s.mapping.unknown_tables == UnknownTables::Ignore);
  BOOST_REQUIRE_EQUAL(s.mapping.tables.size(), 2u);
  BOOST_TEST(s.mapping.tables[0].database == "");
  BOOST_TEST(s.mapping.tables[0].table == "items");
  BOOST_TEST(s.mapping.tables[0].templates ==
                 std::vector<std::string>({"item:{id}", "category:{category_id}"}),
             boost::test_tools::per_element());
  BOOST_TEST(s.mapping.tables[1].database == "shop");
  BOOST_TEST(s.mapping.tables[1].table == "orders");
  BOOST_TEST(s.mapping.tables[1].templates == std::vector<std::string>({"order:{id}"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(defaults_of_a_minimal_file) {
  Settings s = parse_config(std::string(kMinimalHead) + "[[table]]\nname = \"items\"\n"
                                                        "names = [\"item:{id}\"]\n",
                            kFile);
  BOOST_TEST(s.log_level == tierce::base::LogLevel::Info);
  BOOST_TEST(s.metrics_interval.count() == 5000);
  BOOST_TEST(s.max_batch_transactions == 256u);
  BOOST_TEST(s.lag_alarm.count() == 1000);
  BOOST_TEST(s.mariadb.host == "127.0.0.1");
  BOOST_TEST(s.mariadb.port == 3306);
  BOOST_TEST(s.mariadb.socket.empty());
  BOOST_TEST(s.mariadb.server_id == 4242u);
  BOOST_TEST(s.mariadb.heartbeat.count() == 500);
  BOOST_TEST(s.mapping.databases.empty());
  BOOST_TEST(!s.mapping.auto_names);
  BOOST_TEST(s.mapping.unknown_tables == UnknownTables::InvalidateAll);
  // The sample configuration shipped with the package parses.
  fs::path sample = fs::path(__FILE__).parent_path().parent_path().parent_path() / "conf" /
                    "binlogd.toml";
  BOOST_TEST_CONTEXT(sample) {
    BOOST_REQUIRE(fs::exists(sample));
    Settings c = load_config_file(sample.string());
    BOOST_TEST(c.mapping.tables.size() == 4u);
  }
}

BOOST_AUTO_TEST_CASE(every_problem_at_once_with_file_and_line) {
  const std::string bad = R"([binlogd]
topology = "/etc/tierce/cluster.toml"
nod = "app1"
state_file = 42
metrics_interval_ms = "5000"
auto_names = "yes"
databases = "rubis"
log_level = "loud"
max_batch_transactions = 0
unknown_tables = "drop"

[mariadbb]
user = "x"
)";
  auto ps = problems(bad);
  for (const auto& p : ps) BOOST_TEST_MESSAGE(p);
  const std::string f = kFile + ":";
  BOOST_TEST(starts_with(problem_with(ps, "nod: unknown key"), f + "3:"));
  BOOST_TEST(problem_with(ps, "nod: unknown key").find("did you mean 'node'") != std::string::npos);
  BOOST_TEST(starts_with(problem_with(ps, "state_file: expected"), f + "4:"));
  BOOST_TEST(starts_with(problem_with(ps, "metrics_interval_ms: expected an integer"), f + "5:"));
  BOOST_TEST(starts_with(problem_with(ps, "auto_names: expected true or false"), f + "6:"));
  BOOST_TEST(starts_with(problem_with(ps, "databases: expected an array"), f + "7:"));
  BOOST_TEST(starts_with(problem_with(ps, "\"loud\""), f + "8:"));
  BOOST_TEST(starts_with(problem_with(ps, "max_batch_transactions: 0 is out of range"), f + "9:"));
  BOOST_TEST(starts_with(problem_with(ps, "\"drop\""), f + "10:"));
  BOOST_TEST(starts_with(problem_with(ps, "'mariadbb'"), f + "12:"));
  BOOST_TEST(problem_with(ps, "'mariadbb'").find("did you mean 'mariadb'") != std::string::npos);
  // A missing key is said at its table's line; a missing table about the whole file.
  BOOST_TEST(starts_with(problem_with(ps, "node is missing"), f + "1:"));
  BOOST_TEST(problem_with(ps, "[mariadb] table is missing") ==
             kFile + ": the [mariadb] table is missing (host, port, user, password_file)");
  BOOST_TEST(starts_with(problem_with(ps, "neither auto_names = true nor any [[table]]"),
                         kFile + ": "));
  // A key present with a wrong value is not "missing" too; the keys of the missing [mariadb]
  // are not listed one by one.
  BOOST_TEST(problem_with_none(ps, "state_file is missing"));
  BOOST_TEST(problem_with_none(ps, "password_file is missing"));
  BOOST_TEST(ps.size() == 12u);
  // The message of the exception is every problem.
  try {
    parse_config(bad, kFile);
  } catch (const tierce::base::ConfigError& e) {
    for (const auto& p : ps) BOOST_TEST(std::string(e.what()).find(p) != std::string::npos, p);
  }
}

BOOST_AUTO_TEST_CASE(mariadb_and_table_problems) {
  const std::string bad = R"([binlogd]
topology = "/etc/tierce/cluster.toml"
node = "app1"
state_file = "/var/lib/tierce/binlogd.gtid"
[mariadb]
port = 70000
server_id = "1"
heartbeat_ms = true
pasword_file = "/etc/tierce/binlogd.password"
[[table]]
name = "items"
[[table]]
names = ["item:{id}"]
[[table]]
name = "bids"
names = ["item {item_id}"]
[[table]]
name = "users"
names = "user:{id}"
)";
  auto ps = problems(bad);
  for (const auto& p : ps) BOOST_TEST_MESSAGE(p);
  const std::string f = kFile + ":";
  BOOST_TEST(starts_with(problem_with(ps, "port: 70000 is out of range"), f + "6:"));
  BOOST_TEST(starts_with(problem_with(ps, "server_id: expected an integer"), f + "7:"));
  BOOST_TEST(starts_with(problem_with(ps, "heartbeat_ms: expected an integer"), f + "8:"));
  BOOST_TEST(problem_with(ps, "pasword_file: unknown key").find("did you mean 'password_file'") !=
             std::string::npos);
  BOOST_TEST(starts_with(problem_with(ps, "pasword_file: unknown key"), f + "9:"));
  BOOST_TEST(starts_with(problem_with(ps, "[mariadb] user is missing"), f + "5:"));
  BOOST_TEST(starts_with(problem_with(ps, "[mariadb] password_file is missing"), f + "5:"));
  BOOST_TEST(starts_with(problem_with(ps, "#1 names is missing"), f + "10:"));
  BOOST_TEST(starts_with(problem_with(ps, "#2 name is missing"), f + "12:"));
  // A bad template at its line, with its table and the template.
  BOOST_TEST(starts_with(problem_with(ps, "\"item {item_id}\""), f + "16:"));
  BOOST_TEST(problem_with(ps, "\"item {item_id}\"").find("bids") != std::string::npos);
  BOOST_TEST(starts_with(problem_with(ps, "#4 names: expected an array of non-empty strings"),
                         f + "19:"));
  BOOST_TEST(problem_with_none(ps, "#4 names is missing"));
  BOOST_TEST(ps.size() == 10u);
}

BOOST_AUTO_TEST_CASE(a_file_that_would_invalidate_everything_on_every_write) {
  // Neither auto_names nor any [[table]], unknown tables invalidating everything: refused.
  auto ps = problems(kMinimalHead);
  BOOST_REQUIRE_EQUAL(ps.size(), 1u);
  BOOST_TEST(starts_with(ps[0], kFile + ": neither auto_names = true nor any [[table]]"), ps[0]);
  // Each way out is accepted.
  std::string head = kMinimalHead;
  std::string with_auto = head;
  with_auto.insert(head.find("[mariadb]"), "auto_names = true\n");
  BOOST_TEST(problems(with_auto).empty());
  std::string ignoring = head;
  ignoring.insert(head.find("[mariadb]"), "unknown_tables = \"ignore\"\n");
  BOOST_TEST(problems(ignoring).empty());
  BOOST_TEST(problems(head + "[[table]]\nname = \"t\"\nnames = [\"t\"]\n").empty());
}

BOOST_AUTO_TEST_CASE(the_password_file) {
  TempDir d;
  std::string good = d.file("ok", "s3cret pass \r\nsecond line\n", 0600);
  auto r = read_password_file(good);
  BOOST_REQUIRE_MESSAGE(r.ok(), r.message());
  BOOST_TEST(*r == "s3cret pass", "the first line, without its trailing CR and spaces");
  std::string no_newline = d.file("nonl", "pw", 0400);
  BOOST_TEST(read_password_file(no_newline).ok());
  if (read_password_file(no_newline).ok()) BOOST_TEST(*read_password_file(no_newline) == "pw");
  for (mode_t mode : {0640, 0604, 0660, 0644, 0606}) {
    std::string f = d.file("open" + std::to_string(mode), "pw\n", mode);
    auto o = read_password_file(f);
    BOOST_TEST(!o.ok(), "mode " << std::oct << mode);
    if (o.ok()) continue;
    BOOST_TEST(o.status().msgid() == "BINLOGD0103");
    BOOST_TEST(o.status().code() == Code::PermissionDenied);
    BOOST_TEST(o.message().find("chmod 600") != std::string::npos, o.message());
  }
  auto missing = read_password_file((d.path / "absent").string());
  BOOST_TEST(!missing.ok());
  BOOST_TEST(missing.status().msgid() == "BINLOGD0103");
  BOOST_TEST(missing.message().find("absent") != std::string::npos, missing.message());
  auto empty = read_password_file(d.file("empty", "", 0600));
  BOOST_TEST(!empty.ok());
  BOOST_TEST(empty.status().msgid() == "BINLOGD0103");
}

BOOST_AUTO_TEST_CASE(gtid_positions) {
  auto p = GtidPosition::parse("0-1-42,1-2-7");
  BOOST_REQUIRE_MESSAGE(p.ok(), p.message());
  BOOST_TEST(p->text() == "0-1-42,1-2-7");
  BOOST_TEST(!p->empty());
  // Domains come out in order; spaces and newlines between entries are allowed.
  auto q = GtidPosition::parse("1-2-7, 0-1-42\n");
  BOOST_REQUIRE_MESSAGE(q.ok(), q.message());
  BOOST_TEST(q->text() == "0-1-42,1-2-7");
  BOOST_TEST((*p == *q));
  auto big = GtidPosition::parse("4294967295-4294967295-9999999999999999999");
  BOOST_REQUIRE_MESSAGE(big.ok(), big.message());
  BOOST_TEST(big->text() == "4294967295-4294967295-9999999999999999999");
  auto none = GtidPosition::parse("");
  BOOST_REQUIRE(none.ok());
  BOOST_TEST(none->empty());
  BOOST_TEST(none->text() == "");
  for (const char* bad : {"0-1", "a-b-c", "0-1-2x", "0-1-", "-1-2", "0--1-2", "0-1-2-3",
                          "0-1-42;1-2-7", "4294967296-1-1", "0-4294967296-1",
                          "0-1-99999999999999999999", "x"}) {
    auto b = GtidPosition::parse(bad);
    BOOST_TEST(!b.ok(), "accepted \"" << bad << "\"");
    if (!b.ok()) BOOST_TEST(b.status().msgid() == "BINLOGD0140");
  }
  // advance replaces a domain's entry and adds a new domain.
  GtidPosition g = *p;
  g.advance(0, 3, 43);
  BOOST_TEST(g.text() == "0-3-43,1-2-7");
  g.advance(5, 1, 1);
  BOOST_TEST(g.text() == "0-3-43,1-2-7,5-1-1");
  BOOST_TEST(!(g == *p));
  auto again = GtidPosition::parse(g.text());
  BOOST_REQUIRE(again.ok());
  BOOST_TEST((*again == g));
}
