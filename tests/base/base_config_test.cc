// tests/base/base_config_test.cc — base/config.h: the bounded read of a configuration file, TOML
// errors that name FILE:LINE:COL, unknown keys, and the Reloader's apply-whole-or-keep rule.
#define BOOST_TEST_MODULE base_config
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/config.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace tierce::base;

namespace {

// The shared temporary directory (tests/test_util.h), with a file writer for these tests.
struct TempDir : tierce_test::TempDir {
  fs::path path = tierce_test::TempDir::path();
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

// The one problem of the ConfigError `f` throws ("" if it throws nothing).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    BOOST_TEST(e.problems().size() == 1u);
    return e.problems().empty() ? "" : e.problems()[0];
  }
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(reads_a_regular_file) {
  TempDir d;
  auto p = d.write("a.toml", "[x]\nk = 1\n");
  BOOST_TEST(read_config_file(p) == "[x]\nk = 1\n");
}

BOOST_AUTO_TEST_CASE(refuses_a_file_over_the_limit) {
  TempDir d;
  auto p = d.write("big.toml", std::string(kMaxConfigBytes + 1, '#'));
  std::string e = error_of([&] { read_config_file(p); });
  BOOST_TEST(has(e, p + ": cannot read the configuration file: "), e);
  BOOST_TEST(has(e, std::to_string(kMaxConfigBytes + 1) + " bytes is larger than the " +
                        std::to_string(kMaxConfigBytes) + "-byte limit"),
             e);
  // Exactly the limit is fine; a smaller limit is honoured.
  auto ok = d.write("max.toml", std::string(kMaxConfigBytes, '#'));
  BOOST_TEST(read_config_file(ok).size() == kMaxConfigBytes);
  BOOST_TEST(has(error_of([&] { read_config_file(ok, 100); }), "100-byte limit"));
}

BOOST_AUTO_TEST_CASE(refuses_what_is_not_a_regular_file) {
  TempDir d;
  std::string e = error_of([&] { read_config_file(d.path.string()); });
  BOOST_TEST(has(e, "not a regular file (a directory)"), e);
  auto fifo = (d.path / "fifo").string();
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  e = error_of([&] { read_config_file(fifo); });  // must not block waiting for a writer
  BOOST_TEST(has(e, "not a regular file (a FIFO)"), e);
  e = error_of([&] { read_config_file("/dev/zero"); });
  BOOST_TEST(has(e, "not a regular file (a character device)"), e);
  e = error_of([&] { read_config_file((d.path / "missing.toml").string()); });
  BOOST_TEST(has(e, "missing.toml: cannot read the configuration file: No such file"), e);
}

BOOST_AUTO_TEST_CASE(syntax_error_names_line_and_column) {
  std::string e = error_of([] { parse_toml("[a]\nk = 1\nbad = \"open\n", "f.toml", "a hint"); });
  BOOST_TEST(has(e, "f.toml:3:"), e);
  BOOST_TEST(has(e, ": not valid TOML: "), e);
  BOOST_TEST(has(e, "(a hint)"), e);
  // The column too: "f.toml:LINE:COL: ".
  auto rest = e.substr(std::string("f.toml:3:").size());
  BOOST_TEST(std::isdigit(static_cast<unsigned char>(rest[0])), e);
  auto t = parse_toml("[a]\nk = 1\n", "f.toml");
  BOOST_TEST(t["a"]["k"].value<int64_t>().value() == 1);
}

BOOST_AUTO_TEST_CASE(unknown_keys_with_suggestions) {
  auto t = parse_toml("listn = 1\nrescan = 2\nzzzzzz = 3\nlisten = 4\n", "f.toml");
  auto u = unknown_keys(t, {"listen", "rescan_ms", "node"});
  BOOST_REQUIRE(u.size() == 3u);
  std::map<std::string, UnknownKey> by;
  for (auto& k : u) by[k.key] = k;
  BOOST_TEST(by["listn"].suggestion == "listen");
  BOOST_TEST(by["rescan"].suggestion == "rescan_ms");
  BOOST_TEST(by["zzzzzz"].suggestion == "");
  BOOST_TEST(config_location("f.toml", by["zzzzzz"].where) == "f.toml:3:1");
  BOOST_TEST(edit_distance("kitten", "sitting") == 3u);
  BOOST_TEST(join(std::vector<std::string_view>{"a", "b"}, ", ") == "a, b");
}

BOOST_AUTO_TEST_CASE(reloader_applies_whole_or_keeps) {
  std::vector<std::string> lines;
  LogSink log = [&](LogLevel, std::string_view l) { lines.emplace_back(l); };
  Reloader r("/etc/x.toml", log, {"X0010", "X0011", "X0013"});
  int running = 1;
  bool ok = r.run<int>([] { return 2; },
                       [&](int& v) {
                         running = v;
                         return std::string("now 2");
                       });
  BOOST_TEST(ok);
  BOOST_TEST(running == 2);
  BOOST_TEST(r.counters().reloads == 1u);
  BOOST_TEST(lines.at(0) == "X0010 SIGHUP: reloading /etc/x.toml");
  BOOST_TEST(lines.at(1) == "X0013 reload done: now 2");
  lines.clear();
  ok = r.run<int>(
      []() -> int {
        throw ConfigError({"f:1:1: one", "f:2:1: two"});
      },
      [&](int& v) {
        running = v;
        return std::string();
      });
  BOOST_TEST(!ok);
  BOOST_TEST(running == 2);
  BOOST_TEST(r.counters().failed == 1u);
  BOOST_TEST(r.counters().reloads == 1u);
  BOOST_REQUIRE(lines.size() == 3u);
  BOOST_TEST(lines[1] ==
             "X0011 reload failed, the running configuration stays in effect: f:1:1: one");
  BOOST_TEST(lines[2] ==
             "X0011 reload failed, the running configuration stays in effect: f:2:1: two");
  ok = r.run<int>([]() -> int { throw std::runtime_error("cert unreadable"); },
                  [&](int&) { return std::string(); });
  BOOST_TEST(!ok);
  BOOST_TEST(r.counters().failed == 2u);
}
