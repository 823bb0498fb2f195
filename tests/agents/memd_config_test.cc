// tests/agents/memd_config_test.cc — memd.toml parsing: a good file gives the expected Config,
// and every kind of bad file gives an error that names the file, the line and the key.
#define BOOST_TEST_MODULE memd_config
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>

#include "agents/memd/config.h"

using namespace tierce::memd;
namespace fs = std::filesystem;

namespace tierce::memd {
std::ostream& operator<<(std::ostream& o, LogTarget t) {
  return o << to_string(t);
}
}  // namespace tierce::memd
namespace tierce::base {
std::ostream& operator<<(std::ostream& o, LogLevel l) {
  return o << to_string(l);
}
}  // namespace tierce::base

namespace {

const char* kGood = R"(
# a comment
[memd]
node = "app1"
listen = ["tcp://127.0.0.1:7101", "shm:///run/tierce/app1-memd.sock"]
secret_file = "/etc/tierce/secret"
pid_file = "/run/tierce/memd.pid"
ready_file = "run/memd.ready"
log = "syslog"
log_level = "warn"
heartbeat_ms = 20
lease_ms = 300
max_connections = 64
max_connections_per_ip = 16
max_preauth_frame = 128
protection = "encrypt"
rescan_ms = 250

[[region]]
name = "versions"
segment = "/tierce.app1.versions"

[[region]]
name = "pool"
segment = "/tierce.app1.pool"
follow_owner = false
)";

const char* kMinimal = R"(
[memd]
listen = ["tcp://0.0.0.0:7101"]
secret_file = "/etc/tierce/secret"
)";

// Parses `text` as /etc/tierce/memd.toml and returns the error text ("" when it parsed).
std::string error_of(const std::string& text) {
  try {
    parse_config(text, "/etc/tierce/memd.toml");
  } catch (const ConfigError& e) {
    BOOST_TEST(!e.problems().empty());
    return e.what();
  }
  return "";
}

// `text` with `key = value` put under [memd].
std::string with_memd(const std::string& line) {
  return std::string(
             "[memd]\nlisten = [\"tcp://0.0.0.0:7101\"]\nsecret_file = \"/etc/tierce/secret\"\n") +
         line + "\n";
}

void expect_error(const std::string& text, std::initializer_list<std::string> needles) {
  std::string err = error_of(text);
  BOOST_TEST_INFO("config:\n" << text << "\nerror:\n" << err);
  BOOST_TEST(!err.empty());
  BOOST_TEST(err.find("/etc/tierce/memd.toml") != std::string::npos);  // names the file
  for (auto& n : needles) {
    BOOST_TEST_INFO("expected to find '" << n << "' in: " << err);
    BOOST_TEST(err.find(n) != std::string::npos);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(good_config_is_read_completely) {
  Config c = parse_config(kGood, "/etc/tierce/memd.toml");
  BOOST_TEST(c.node == "app1");
  BOOST_TEST(c.listen.size() == 2u);
  BOOST_TEST(c.listen[1] == "shm:///run/tierce/app1-memd.sock");
  BOOST_TEST(c.secret_file == "/etc/tierce/secret");
  BOOST_TEST(c.pid_file == "/run/tierce/memd.pid");
  BOOST_TEST(c.ready_file == "/etc/tierce/run/memd.ready");  // relative to the file's directory
  BOOST_TEST(c.log == LogTarget::Syslog);
  BOOST_TEST(c.log_level == tierce::fabric::LogLevel::Warn);
  BOOST_TEST(c.heartbeat.count() == 20);
  BOOST_TEST(c.lease.count() == 300);
  BOOST_TEST(c.max_connections == 64u);
  BOOST_TEST(c.max_connections_per_ip == 16u);
  BOOST_TEST(c.max_preauth_frame == 128u);
  BOOST_TEST(int(c.protection) == int(tierce::fabric::Protection::Encrypt));
  BOOST_TEST(c.rescan.count() == 250);
  BOOST_TEST_REQUIRE(c.regions.size() == 2u);
  BOOST_TEST(c.regions[0].name == "versions");
  BOOST_TEST(c.regions[0].segment == "/tierce.app1.versions");
  BOOST_TEST(c.regions[0].follow_owner);
  BOOST_TEST(c.regions[1].name == "pool");
  BOOST_TEST(!c.regions[1].follow_owner);
}

BOOST_AUTO_TEST_CASE(defaults) {
  Config c = parse_config(kMinimal, "/etc/tierce/memd.toml");
  BOOST_TEST(!c.node.empty());  // the host name
  BOOST_TEST(c.log == LogTarget::Auto);
  BOOST_TEST(c.log_level == tierce::fabric::LogLevel::Info);
  BOOST_TEST(c.heartbeat.count() == 50);
  BOOST_TEST(c.lease.count() == 500);
  BOOST_TEST(c.rescan.count() == 1000);
  BOOST_TEST(c.max_connections == 4096u);
  BOOST_TEST(c.max_connections_per_ip == 1024u);
  BOOST_TEST(c.max_preauth_frame == 256u);
  BOOST_TEST(int(c.protection) == int(tierce::fabric::Protection::Mac));
  BOOST_TEST(c.pid_file.empty());
  BOOST_TEST(c.ready_file.empty());
  BOOST_TEST(c.regions.empty());
}

BOOST_AUTO_TEST_CASE(load_config_reads_a_file_and_resolves_relative_paths) {
  char tmpl[] = "/tmp/memd-config-XXXXXX";
  BOOST_TEST_REQUIRE(mkdtemp(tmpl) != nullptr);
  fs::path dir(tmpl);
  {
    std::ofstream(dir / "memd.toml")
        << "[memd]\nlisten = [\"tcp://127.0.0.1:0\"]\nsecret_file = \"secret\"\n";
  }
  Config c = load_config((dir / "memd.toml").string());
  BOOST_TEST(c.source == (dir / "memd.toml").string());
  BOOST_TEST(c.secret_file == (dir / "secret").string());
  fs::remove_all(dir);
  try {
    load_config((dir / "missing.toml").string());
    BOOST_FAIL("a missing file must be an error");
  } catch (const ConfigError& e) {
    BOOST_TEST(std::string(e.what()).find("missing.toml") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("No such file") != std::string::npos);
  }
}

// The shared reader (base/config.h): a directory or an oversized file is refused with memd's hint.
BOOST_AUTO_TEST_CASE(load_config_refuses_a_directory_and_an_oversized_file) {
  char tmpl[] = "/tmp/memd-config-XXXXXX";
  BOOST_TEST_REQUIRE(mkdtemp(tmpl) != nullptr);
  fs::path dir(tmpl);
  auto error_of = [](const std::string& path) -> std::string {
    try {
      load_config(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  std::string e = error_of(dir.string());
  BOOST_TEST(e.find("not a regular file (a directory)") != std::string::npos, e);
  BOOST_TEST(e.find("pass an existing file with -c FILE") != std::string::npos, e);
  std::ofstream(dir / "big.toml") << std::string(tierce::base::kMaxConfigBytes + 10, '#');
  e = error_of((dir / "big.toml").string());
  BOOST_TEST(e.find("-byte limit of a configuration file") != std::string::npos, e);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(syntax_error_names_line) {
  expect_error("[memd]\nlisten = [\"tcp://x:1\"\nsecret_file = 3\n",
               {"not valid TOML", "memd.toml:"});
  expect_error("[memd]\nnode = app1\n", {"memd.toml:2:"});
}

BOOST_AUTO_TEST_CASE(missing_required_keys) {
  expect_error("", {"[memd] table is missing"});
  expect_error("[memd]\nsecret_file = \"/s\"\n", {"listen is missing", "listen = ["});
  expect_error("[memd]\nlisten = [\"tcp://0.0.0.0:1\"]\n",
               {"secret_file is missing", "secret_file = "});
}

BOOST_AUTO_TEST_CASE(unknown_keys_and_tables_are_errors) {
  expect_error(with_memd("listn = [\"tcp://0.0.0.0:1\"]"),
               {"listn", "unknown key", "did you mean 'listen'"});
  expect_error(with_memd("rescan = 100"), {"rescan", "did you mean 'rescan_ms'"});
  expect_error(with_memd("") + "[memdd]\nx = 1\n", {"[memdd]", "did you mean [memd]"});
  expect_error(with_memd("") + "[[region]]\nname = \"a\"\nsegment = \"/a\"\nfollow_ownr = true\n",
               {"follow_ownr", "did you mean 'follow_owner'", "[[region]] #1"});
  expect_error(std::string("verbose = true\n") + with_memd(""), {"'verbose'", "unknown key"});
}

BOOST_AUTO_TEST_CASE(wrong_types_name_the_key_and_an_example) {
  expect_error(with_memd("heartbeat_ms = \"50\""),
               {"[memd] heartbeat_ms", "expected an integer", "heartbeat_ms = 50"});
  expect_error(with_memd("lease_ms = 1.5"), {"[memd] lease_ms", "floating-point"});
  expect_error(with_memd("node = 7"), {"[memd] node", "expected a string"});
  expect_error("[memd]\nlisten = \"tcp://0.0.0.0:1\"\nsecret_file = \"/s\"\n",
               {"[memd] listen", "expected an array", "listen = [\""});
  expect_error("[memd]\nlisten = [7]\nsecret_file = \"/s\"\n",
               {"[memd] listen[0]", "expected a string"});
  expect_error(
      with_memd("") + "[[region]]\nname = \"a\"\nsegment = \"/a\"\nfollow_owner = \"yes\"\n",
      {"follow_owner", "expected true or false"});
  expect_error(with_memd("") + "[region]\nname = \"a\"\n", {"region", "[[region]]"});
  expect_error("memd = 3\n", {"memd", "[memd] table"});
}

BOOST_AUTO_TEST_CASE(bad_values_name_the_key) {
  expect_error(with_memd("heartbeat_ms = 0"), {"[memd] heartbeat_ms", "out of range"});
  expect_error(with_memd("rescan_ms = 1"),
               {"[memd] rescan_ms", "out of range", "rescan_ms = 1000"});
  expect_error(with_memd("max_connections = -4"), {"[memd] max_connections", "out of range"});
  expect_error(with_memd("max_connections_per_ip = -1"),
               {"[memd] max_connections_per_ip", "out of range"});
  expect_error(with_memd("max_preauth_frame = 32"), {"[memd] max_preauth_frame", "out of range"});
  expect_error(with_memd("max_preauth_frame = 1048576"),
               {"[memd] max_preauth_frame", "out of range"});
  expect_error(with_memd("protection = \"hmac\""),
               {"[memd] protection", "protection = \"mac\"", "\"encrypt\""});
  BOOST_TEST(int(parse_config(with_memd("protection = \"none\""), "/etc/tierce/memd.toml")
                     .protection) == int(tierce::fabric::Protection::None));
  expect_error(with_memd("heartbeat_ms = 100\nlease_ms = 100"),
               {"[memd] lease_ms", "longer than heartbeat_ms"});
  expect_error(with_memd("lease_ms = 40"), {"[memd] lease_ms", "longer than heartbeat_ms (50 ms)"});
  expect_error(with_memd("log = \"file\""), {"[memd] log", "log = \"stderr\""});
  expect_error(with_memd("log_level = \"verbose\""), {"[memd] log_level", "\"debug\""});
  expect_error(with_memd("node = \"app 1\""), {"[memd] node", "not a node name"});
  expect_error(with_memd("pid_file = \"\""), {"[memd] pid_file", "empty path"});
  expect_error("[memd]\nlisten = [\"udp://0.0.0.0:1\"]\nsecret_file = \"/s\"\n",
               {"[memd] listen[0]", "unknown scheme"});
  expect_error("[memd]\nlisten = [\"tcp://0.0.0.0\"]\nsecret_file = \"/s\"\n",
               {"[memd] listen[0]", "no port"});
  expect_error("[memd]\nlisten = [\"shm://relative.sock\"]\nsecret_file = \"/s\"\n",
               {"[memd] listen[0]", "absolute"});
  expect_error("[memd]\nlisten = []\nsecret_file = \"/s\"\n", {"[memd] listen", "at least one"});
  expect_error(
      "[memd]\nlisten = [\"tcp://0.0.0.0:1\", \"tcp://0.0.0.0:1\"]\nsecret_file = \"/s\"\n",
      {"[memd] listen[1]", "twice"});
  expect_error(
      "[memd]\nlisten = [\"shm:///" + std::string(120, 'x') + "\"]\nsecret_file = \"/s\"\n",
      {"[memd] listen[0]", "too long"});
}

BOOST_AUTO_TEST_CASE(bad_regions_name_the_key) {
  expect_error(with_memd("") + "[[region]]\nsegment = \"/a\"\n", {"[[region]] #1 name is missing"});
  expect_error(with_memd("") + "[[region]]\nname = \"a\"\n", {"segment is missing"});
  expect_error(with_memd("") + "[[region]]\nname = \"a\"\nsegment = \"a\"\n",
               {"segment", "starts with '/'", "segment = \"/tierce.app1.versions\""});
  expect_error(with_memd("") + "[[region]]\nname = \"a\"\nsegment = \"/a/b\"\n",
               {"segment", "no other '/'"});
  expect_error(with_memd("") + "[[region]]\nname = \"has space\"\nsegment = \"/a\"\n",
               {"[[region]] #1 name", "without spaces"});
  expect_error(with_memd("") + "[[region]]\nname = \"\"\nsegment = \"/a\"\n",
               {"[[region]] #1 name"});
  expect_error(with_memd("") +
                   "[[region]]\nname = \"a\"\nsegment = \"/a\"\n[[region]]\nname = \"a\"\nsegment "
                   "= \"/b\"\n",
               {"[[region]] #2 name", "defined twice"});
  expect_error(with_memd("") +
                   "[[region]]\nname = \"a\"\nsegment = \"/a\"\n[[region]]\nname = \"b\"\nsegment "
                   "= \"/a\"\n",
               {"[[region]] #2", "segment", "already exported"});
}

BOOST_AUTO_TEST_CASE(every_problem_is_reported_at_once) {
  try {
    parse_config("[memd]\nlistn = []\nheartbeat_ms = \"x\"\n[[region]]\nname = \"a\"\n",
                 "/etc/tierce/memd.toml");
    BOOST_FAIL("expected errors");
  } catch (const ConfigError& e) {
    std::string all = e.what();
    BOOST_TEST(e.problems().size() >= 5u);  // listn, heartbeat_ms, listen, secret_file, segment
    for (const char* k : {"listn", "heartbeat_ms", "listen is missing", "secret_file is missing",
                          "segment is missing"}) {
      BOOST_TEST_INFO(k << " in: " << all);
      BOOST_TEST(all.find(k) != std::string::npos);
    }
    // Every problem starts with the file, and those at a key carry its line.
    for (auto& p : e.problems()) BOOST_TEST(p.rfind("/etc/tierce/memd.toml:", 0) == 0);
    BOOST_TEST(all.find("memd.toml:2:") != std::string::npos);
    BOOST_TEST(all.find("memd.toml:3:") != std::string::npos);
  }
}

// [writer]: the app node's writer agent (docs/coherence.md "The writer agent").
BOOST_AUTO_TEST_CASE(writer_table_is_read_and_checked) {
  Config c = parse_config(with_memd("") + "[writer]\ntopology = \"/etc/tierce/cluster.toml\"\n",
                          "/etc/tierce/writer.toml");
  BOOST_TEST(c.writer.enabled);
  BOOST_TEST(c.writer.topology == "/etc/tierce/cluster.toml");
  BOOST_TEST(!parse_config(kMinimal, "/etc/tierce/memd.toml").writer.enabled);
  expect_error(with_memd("") + "[writer]\n", {"[writer] topology is required"});
  expect_error(with_memd("") + "[writer]\ntopology = \"/t.toml\"\nfoo = 1\n", {"foo"});
  // Never in the home's memd: the agent must outlive its crashes.
  expect_error(
      with_memd("") + "[coherence]\ntopology = \"/t.toml\"\n[writer]\ntopology = \"/t.toml\"\n",
      {"[writer] and [coherence] in one memd", "second memd"});
  expect_error(
      with_memd("") +
          "[[region]]\nname = \"writer\"\nsegment = \"/x\"\n[writer]\ntopology = \"/t.toml\"\n",
      {"[writer] exports region \"writer\" itself"});
}

BOOST_AUTO_TEST_CASE(writer_agent_socket_keys_are_read_and_checked) {
  const std::string w = with_memd("") + "[writer]\ntopology = \"/t.toml\"\n";
  Config c = parse_config(w + "socket = \"/run/tierce/app1-agent.sock\"\nsocket_group = "
                              "\"www-data\"\nsocket_mode = \"0660\"\nmax_clients = 64\n",
                          "/etc/tierce/writer.toml");
  BOOST_TEST(c.writer.socket == "/run/tierce/app1-agent.sock");
  BOOST_TEST(c.writer.socket_group == "www-data");
  BOOST_TEST(c.writer.socket_mode == 0660u);
  BOOST_TEST(c.writer.max_clients == 64u);
  BOOST_TEST(parse_config(w, "/etc/tierce/writer.toml").writer.socket.empty());
  // Relative to the file's directory, like every path.
  BOOST_TEST(parse_config(w + "socket = \"agent.sock\"\n", "/etc/tierce/writer.toml").writer.socket ==
             "/etc/tierce/agent.sock");
  expect_error(w + "socket = \"/a.sock\"\nsocket_mode = \"0666\"\n",
               {"socket_mode lets every local user send invalidations"});
  expect_error(w + "socket = \"/a.sock\"\nsocket_mode = \"9\"\n", {"expected an octal mode"});
  expect_error(w + "socket_group = \"www-data\"\n", {"socket_group without socket"});
  expect_error(w + "socket = \"/a.sock\"\nmax_clients = 0\n", {"max_clients"});
}
