// tests/base/metrics_test.cc — base/metrics.h: Prometheus text that Prometheus's own linter
// (`promtool check metrics`, Debian package prometheus) accepts, families kept together, labels
// escaped, bad names refused; textfiles written atomically and removed at stop.
#define BOOST_TEST_MODULE base_metrics
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <sys/stat.h>
#include <unistd.h>
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <vector>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "base/metrics.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace tierce::base;
using tierce_test::read_file;
using tierce_test::TempDir;

namespace {

// promtool's verdict on `text`: "" when it passes, its complaints otherwise.
std::string promtool(const std::string& text) {
  BOOST_REQUIRE_MESSAGE(::access("/usr/bin/promtool", X_OK) == 0,
                        "promtool is missing: run tools/deps.sh (Debian package prometheus)");
  TempDir d;
  std::ofstream(d / "in.prom") << text;
  std::string cmd = "promtool check metrics < " + (d / "in.prom") + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  BOOST_REQUIRE(p);
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int rc = ::pclose(p);
  return rc == 0 ? "" : (out.empty() ? "exit " + std::to_string(rc) : out);
}

}  // namespace

BOOST_AUTO_TEST_CASE(families_are_written_once_and_kept_together) {
  Metrics m({{"node", "app1"}});
  m.counter("tierce_x_requests_total", "Requests.", 3, {{"kind", "read"}});
  m.gauge("tierce_x_entries", "Entries.", uint64_t(7));
  m.counter("tierce_x_requests_total", "Requests.", 4, {{"kind", "write"}});
  m.gauge("tierce_x_ratio", "A ratio.", 0.25);
  m.summary("tierce_x_seconds", "Latency.", {{0.5, 0.001}, {0.99, 0.004}}, 1.5, 1000);
  const std::string want =
      "# HELP tierce_x_requests_total Requests.\n"
      "# TYPE tierce_x_requests_total counter\n"
      "tierce_x_requests_total{node=\"app1\",kind=\"read\"} 3\n"
      "tierce_x_requests_total{node=\"app1\",kind=\"write\"} 4\n"
      "# HELP tierce_x_entries Entries.\n"
      "# TYPE tierce_x_entries gauge\n"
      "tierce_x_entries{node=\"app1\"} 7\n"
      "# HELP tierce_x_ratio A ratio.\n"
      "# TYPE tierce_x_ratio gauge\n"
      "tierce_x_ratio{node=\"app1\"} 0.25\n"
      "# HELP tierce_x_seconds Latency.\n"
      "# TYPE tierce_x_seconds summary\n"
      "tierce_x_seconds{node=\"app1\",quantile=\"0.5\"} 0.001\n"
      "tierce_x_seconds{node=\"app1\",quantile=\"0.99\"} 0.004\n"
      "tierce_x_seconds_sum{node=\"app1\"} 1.5\n"
      "tierce_x_seconds_count{node=\"app1\"} 1000\n";
  BOOST_TEST(m.text() == want);
  BOOST_TEST(promtool(m.text()) == "");
}

BOOST_AUTO_TEST_CASE(label_values_and_help_are_escaped) {
  Metrics m;
  m.gauge("tierce_x_owner_slabs", "Slabs of an \"owner\"\\ with\nnewline.", uint64_t(1),
          {{"owner", "a\"b\\c\nd"}});
  const std::string t = m.text();
  BOOST_TEST(t.find("{owner=\"a\\\"b\\\\c\\nd\"} 1\n") != std::string::npos, t);
  BOOST_TEST(t.find("with\\nnewline.") != std::string::npos, t);
  BOOST_TEST(promtool(t) == "");
  BOOST_TEST(escape_label_value("plain") == "plain");
}

BOOST_AUTO_TEST_CASE(names_prometheus_would_refuse_are_programming_errors) {
  Metrics m;
  BOOST_CHECK_THROW(m.gauge("9lives", "x", uint64_t(1)), std::logic_error);
  BOOST_CHECK_THROW(m.gauge("tierce-x", "x", uint64_t(1)), std::logic_error);
  BOOST_CHECK_THROW(m.counter("tierce_x_requests", "no _total", 1), std::logic_error);
  BOOST_CHECK_THROW(m.gauge("tierce_x", "x", uint64_t(1), {{"__reserved", "v"}}), std::logic_error);
  BOOST_CHECK_THROW(m.gauge("tierce_x", "x", uint64_t(1), {{"has:colon", "v"}}), std::logic_error);
  m.gauge("tierce_y", "y", uint64_t(1));
  BOOST_CHECK_THROW(m.counter("tierce_y", "same name, other type", 1), std::logic_error);
  BOOST_CHECK_THROW(Metrics({{"bad label", "v"}}), std::logic_error);
  BOOST_TEST(valid_metric_name("tierce:recorded_rule"));
  BOOST_TEST(!valid_label_name("tierce:x"));
  BOOST_TEST(!valid_metric_name(""));
  // And promtool agrees that what we refuse is wrong: a counter without _total is linted.
  BOOST_TEST(promtool("# HELP a_requests x\n# TYPE a_requests counter\na_requests 1\n") != "");
}

// A counter of seconds summed from nanoseconds (mod_rcache's coop lookup time): written as the
// shortest double, named *_seconds_total, and promtool takes it (it refuses "nanoseconds").
BOOST_AUTO_TEST_CASE(a_counter_of_seconds_is_a_double_in_the_base_unit) {
  Metrics m;
  m.counter_seconds("tierce_x_lookup_seconds_total", "x", 1500000123 / 1e9);
  BOOST_CHECK_THROW(m.counter_seconds("tierce_x_lookup_total", "x", 1.0), std::logic_error);
  BOOST_CHECK_THROW(m.counter_seconds("tierce_x_lookup_seconds", "x", 1.0), std::logic_error);
  const std::string t = m.text();
  BOOST_TEST(t.find("# TYPE tierce_x_lookup_seconds_total counter\n"
                    "tierce_x_lookup_seconds_total 1.500000123\n") != std::string::npos, t);
  BOOST_TEST(promtool(t) == "");
  BOOST_TEST(promtool("# HELP a_lookup_nanoseconds_total x\n# TYPE a_lookup_nanoseconds_total "
                      "counter\na_lookup_nanoseconds_total 1\n") != "");
}

BOOST_AUTO_TEST_CASE(special_values_are_spelled_as_the_format_wants) {
  Metrics m;
  m.gauge("tierce_x_nan", "x", std::nan(""));
  m.gauge("tierce_x_inf", "x", 1.0 / 0.0);
  m.gauge("tierce_x_big", "x", uint64_t(18446744073709551615ull));
  const std::string t = m.text();
  BOOST_TEST(t.find("tierce_x_nan NaN\n") != std::string::npos, t);
  BOOST_TEST(t.find("tierce_x_inf +Inf\n") != std::string::npos, t);
  BOOST_TEST(t.find("tierce_x_big 18446744073709551615\n") != std::string::npos, t);
  BOOST_TEST(promtool(t) == "");
}

BOOST_AUTO_TEST_CASE(a_textfile_is_replaced_whole_and_readable_by_others) {
  TempDir d;
  const std::string path = d / "x.prom";
  ::umask(077);
  write_textfile(path, "a 1\n");
  write_textfile(path, "a 2\n");
  ::umask(022);
  BOOST_TEST(read_file(path) == "a 2\n");
  struct stat st {};
  BOOST_REQUIRE(::stat(path.c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0644u);
  // No temporary file is left behind.
  int files = 0;
  for (auto& e : fs::directory_iterator(d.path())) files += e.is_regular_file();
  BOOST_TEST(files == 1);
  // A directory that does not exist: a system_error naming the path.
  try {
    write_textfile(d / "missing/x.prom", "a 1\n");
    BOOST_FAIL("no error");
  } catch (const std::system_error& e) {
    BOOST_TEST(std::string(e.what()).find("missing/x.prom") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(the_writer_refreshes_logs_a_failure_once_and_removes_the_file_at_stop) {
  TempDir d;
  const std::string path = d / "w.prom";
  std::atomic<int> n{0};
  std::vector<std::string> lines;
  std::mutex lm;
  {
    TextfileWriter w(
        path, std::chrono::milliseconds(20), [&] { return "tierce_n " + std::to_string(++n) + "\n"; },
        [&](LogLevel, std::string_view l) {
          std::lock_guard g(lm);
          lines.emplace_back(l);
        },
        "TEST0050");
    BOOST_TEST(read_file(path) == "tierce_n 1\n");  // written before the constructor returns
    for (int i = 0; i < 200 && n < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    BOOST_TEST(n >= 4);
    // The directory goes away: one warning, however many intervals fail.
    fs::rename(d.path(), d.path() + ".gone");
    int seen = n;
    for (int i = 0; i < 200 && n < seen + 4; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    BOOST_TEST(w.failures() >= 3u);
    fs::rename(d.path() + ".gone", d.path());
    uint64_t ok = w.writes();
    for (int i = 0; i < 200 && w.writes() == ok; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    BOOST_TEST(w.writes() > ok);
    w.stop();
    BOOST_TEST(!fs::exists(path));
  }
  std::lock_guard g(lm);
  BOOST_REQUIRE(lines.size() == 2u);
  BOOST_TEST(lines[0].find("TEST0050 cannot write the metrics textfile") == 0u, lines[0]);
  BOOST_TEST(lines[1].find("TEST0050 metrics textfile") == 0u, lines[1]);
}
