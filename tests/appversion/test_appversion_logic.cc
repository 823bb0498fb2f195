// tests/appversion/test_appversion_logic.cc — mod_appversion's httpd-free helpers: directive
// arguments, the Tierce-Key header, which response headers are consulted and stripped, the
// registration decision, the tag, and the wait histogram.
#define BOOST_TEST_MODULE appversion_logic
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <cctype>

#include "coherence/key.h"
#include "coherence/protocol.h"
#include "mod_appversion/logic.h"

using namespace tierce::appversion;
namespace co = tierce::coherence;

BOOST_AUTO_TEST_SUITE(directives)

BOOST_AUTO_TEST_CASE(millis) {
  uint32_t v = 7;
  BOOST_TEST(parse_millis("2000", 1, 60000, v) == "");
  BOOST_TEST(v == 2000u);
  BOOST_TEST(parse_millis(" 1 ", 1, 60000, v) == "");
  BOOST_TEST(v == 1u);
  v = 7;
  BOOST_TEST(parse_millis("0", 1, 60000, v) != "");
  BOOST_TEST(parse_millis("60001", 1, 60000, v) != "");
  BOOST_TEST(parse_millis("2s", 1, 60000, v) != "");
  BOOST_TEST(parse_millis("-5", 1, 60000, v) != "");
  BOOST_TEST(parse_millis("", 1, 60000, v) != "");
  BOOST_TEST(parse_millis("99999999999999999999999", 1, 60000, v) != "");
  BOOST_TEST(v == 7u);  // untouched on error
  BOOST_TEST(parse_millis("abc", 1, 60000, v).find("milliseconds") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(scheme) {
  co::Scheme s = co::Scheme::InvalidateAll;
  BOOST_TEST(parse_scheme("dependency-lists", s) == "");
  BOOST_TEST((s == co::Scheme::DependencyLists));
  BOOST_TEST(parse_scheme("invalidate-all", s) == "");
  BOOST_TEST((s == co::Scheme::InvalidateAll));
  BOOST_TEST(parse_scheme("Invalidate-All", s) != "");
  BOOST_TEST(parse_scheme("all", s).find("dependency-lists") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(header_names) {
  std::vector<std::string> out;
  BOOST_TEST(parse_header_names("Tierce-Depends Surrogate-Key, Cache-Tags,xkey", out) == "");
  BOOST_TEST(out == (std::vector<std::string>{"Tierce-Depends", "Surrogate-Key", "Cache-Tags", "xkey"}));
  BOOST_TEST(parse_header_names("xkey XKEY  Xkey", out) == "");
  BOOST_TEST(out == (std::vector<std::string>{"xkey"}));
  std::vector<std::string> keep = out;
  BOOST_TEST(parse_header_names("", out) != "");
  BOOST_TEST(parse_header_names(" , ", out) != "");
  BOOST_TEST(parse_header_names("Bad:Name", out) != "");
  BOOST_TEST(parse_header_names("Tierce-Invalidate", out) != "");
  BOOST_TEST(parse_header_names("tierce-tag", out) != "");
  BOOST_TEST(parse_header_names("Tierce-Key", out) != "");
  BOOST_TEST(out == keep);  // untouched on error
}

BOOST_AUTO_TEST_CASE(node_names) {
  BOOST_TEST(check_node_name("app1") == "");
  BOOST_TEST(check_node_name("") != "");
  BOOST_TEST(check_node_name("app 1") != "");
  BOOST_TEST(check_node_name(std::string(65, 'a')) != "");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(requests)

BOOST_AUTO_TEST_CASE(key_header) {
  uint64_t k = co::hash64("example.com\n/item.php?id=1");
  std::string hex = co::to_hex(k);
  BOOST_TEST(hex.size() == 16u);
  BOOST_TEST(parse_key_header(hex).value() == k);
  BOOST_TEST(parse_key_header("  " + hex + " ").value() == k);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  BOOST_TEST(parse_key_header(upper).value() == k);
  BOOST_TEST(!parse_key_header(hex.substr(1)));
  BOOST_TEST(!parse_key_header(hex + "0"));
  BOOST_TEST(!parse_key_header("zzzzzzzzzzzzzzzz"));
  BOOST_TEST(!parse_key_header(""));
  BOOST_TEST(parse_key_header("0000000000000000").value() == 0u);
}

BOOST_AUTO_TEST_CASE(collect) {
  HeaderList h = {{"Content-Type", "text/html"},
                  {"tierce-depends", "item:1 item:2"},
                  {"Surrogate-Key", "user:3"},
                  {"TIERCE-DEPENDS", " category:7 "},
                  {"xkey", ""}};
  bool found = false;
  BOOST_TEST(collect_values(h, {"Tierce-Depends"}, &found) == "item:1 item:2, category:7");
  BOOST_TEST(found);
  BOOST_TEST(collect_values(h, {"Tierce-Depends", "Surrogate-Key"}, &found) ==
             "item:1 item:2, user:3, category:7");
  // Only the configured headers are consulted.
  BOOST_TEST(collect_values(h, {"Cache-Tags"}, &found) == "");
  BOOST_TEST(!found);
  // A present but empty header counts as present (the app declared "no dependencies").
  BOOST_TEST(collect_values(h, {"xkey"}, &found) == "");
  BOOST_TEST(found);
  auto deps = co::parse_dependencies(collect_values(h, {"Tierce-Depends", "Surrogate-Key"}));
  BOOST_TEST(deps.size() == 4u);
  BOOST_TEST(deps[0] == co::dependency_hash("item:1"));
  BOOST_TEST(deps[3] == co::dependency_hash("category:7"));
}

BOOST_AUTO_TEST_CASE(join) {
  BOOST_TEST(join_lists("", "") == "");
  BOOST_TEST(join_lists("a:1", "") == "a:1");
  BOOST_TEST(join_lists(" ", "b:2") == "b:2");
  BOOST_TEST(join_lists("a:1", "b:2 c:3") == "a:1, b:2 c:3");
}

BOOST_AUTO_TEST_CASE(strip) {
  auto s = headers_to_strip({"Tierce-Depends"});
  BOOST_TEST(s == (std::vector<std::string>{"Tierce-Depends", "Tierce-Invalidate", "Tierce-Tag"}));
  s = headers_to_strip({"tierce-depends", "Surrogate-Key", "xkey"});
  BOOST_TEST(s == (std::vector<std::string>{"Tierce-Depends", "Tierce-Invalidate", "Tierce-Tag",
                                            "Surrogate-Key", "xkey"}));
  // Tierce-Depends and Tierce-Invalidate are stripped even when not configured as dependency
  // headers.
  s = headers_to_strip({"Cache-Tags"});
  BOOST_TEST(s.size() == 4u);
  BOOST_TEST(s[0] == "Tierce-Depends");
  BOOST_TEST(s[1] == "Tierce-Invalidate");
}

BOOST_AUTO_TEST_CASE(decision) {
  PageFacts f;
  f.has_key = true;
  f.is_get = true;
  f.status = 200;
  f.seq_read = true;
  f.deps_found = true;
  f.deps_count = 2;
  BOOST_TEST((decide_registration(f) == Decision::Register));
  PageFacts g = f;
  g.has_key = false;
  BOOST_TEST((decide_registration(g) == Decision::NoKey));
  g = f;
  g.is_get = false;
  BOOST_TEST((decide_registration(g) == Decision::NotGet));
  g = f;
  g.status = 404;
  BOOST_TEST((decide_registration(g) == Decision::NotOk));
  g = f;
  g.status = 304;
  BOOST_TEST((decide_registration(g) == Decision::NotOk));
  g = f;
  g.seq_read = false;
  BOOST_TEST((decide_registration(g) == Decision::NoSeq));
  g = f;
  g.deps_found = false;
  BOOST_TEST((decide_registration(g) == Decision::NoDeps));
  g.scheme = co::Scheme::InvalidateAll;  // invalidate-all registers without dependencies
  BOOST_TEST((decide_registration(g) == Decision::Register));
  g = f;
  g.deps_valid = false;
  BOOST_TEST((decide_registration(g) == Decision::BadDeps));
  // Issue 13, path 7: an empty dependency header names nothing an update could invalidate.
  g = f;
  g.deps_count = 0;
  BOOST_TEST((decide_registration(g) == Decision::NoDeps));
  g.scheme = co::Scheme::InvalidateAll;
  BOOST_TEST((decide_registration(g) == Decision::Register));
  BOOST_TEST(!to_string(Decision::NoSeq).empty());
}

BOOST_AUTO_TEST_CASE(tag) {
  BOOST_TEST(format_tag("app1", 12345, 18446744073709551615ull) ==
             "app1 12345 18446744073709551615");
  BOOST_TEST(format_tag("app2", 0, 1) == "app2 0 1");
}

// Refusals come as an enum from the home; the counters are chosen from it, not from its text.
BOOST_AUTO_TEST_CASE(refusals) {
  BOOST_TEST((counter_of(co::Refusal::Race) == RefusalCounter::Race));
  BOOST_TEST((counter_of(co::Refusal::LogTooShort) == RefusalCounter::Log));
  BOOST_TEST((counter_of(co::Refusal::OtherIncarnation) == RefusalCounter::Log));
  BOOST_TEST((counter_of(co::Refusal::Pending) == RefusalCounter::Pending));
  BOOST_TEST((counter_of(co::Refusal::Fenced) == RefusalCounter::Other));
  BOOST_TEST((counter_of(co::Refusal::Unreachable) == RefusalCounter::Other));
}

// Issue 13, path 7: an update's first invalidation runs on its first output, which a script may
// send before it commits; a second one after the script ended covers that — unless the first
// output already held the end of the response.
BOOST_AUTO_TEST_CASE(second_invalidation) {
  BOOST_TEST(needs_second_invalidation(true, false));
  BOOST_TEST(!needs_second_invalidation(true, true));
  BOOST_TEST(!needs_second_invalidation(false, false));
}

// Issue 13, path 8: a PHP abort after output is what PHP logs at APLOG_ERR or worse, "PHP ...".
BOOST_AUTO_TEST_CASE(php_aborts) {
  BOOST_TEST(is_php_abort(3, "PHP Fatal error:  Uncaught Error: Call to undefined function f()"));
  BOOST_TEST(is_php_abort(2, "PHP Parse error:  syntax error"));
  BOOST_TEST(!is_php_abort(4, "PHP Warning:  Undefined variable $x"));
  BOOST_TEST(!is_php_abort(3, "APPVER0013 response processing failed"));
  BOOST_TEST(!is_php_abort(3, ""));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(counters)

BOOST_AUTO_TEST_CASE(buckets) {
  BOOST_TEST(wait_bucket(0) == 0u);
  BOOST_TEST(wait_bucket(1) == 1u);
  BOOST_TEST(wait_bucket(2) == 2u);
  BOOST_TEST(wait_bucket(3) == 2u);
  BOOST_TEST(wait_bucket(1024) == 11u);
  BOOST_TEST(wait_bucket(~0ull) == kWaitBuckets - 1);
  std::array<uint64_t, kWaitBuckets> c{};
  BOOST_TEST(wait_quantile(c, 0.5) == 0u);
  c[wait_bucket(100)] = 98;   // 64..127 µs
  c[wait_bucket(2000)] = 2;   // 1024..2047 µs
  BOOST_TEST(wait_quantile(c, 0.5) == 128u);
  BOOST_TEST(wait_quantile(c, 0.98) == 128u);
  BOOST_TEST(wait_quantile(c, 0.99) == 2048u);
}

BOOST_AUTO_TEST_CASE(text) {
  Counters c;
  c.registrations += 3;
  c.homes_fenced += 1;
  c.record_wait(100);
  c.record_wait(5000);
  std::string t = c.text();
  BOOST_TEST(t.find("registrations 3\n") != std::string::npos);
  BOOST_TEST(t.find("homes_fenced 1\n") != std::string::npos);
  BOOST_TEST(t.find("invalidation_wait_p50_us_le 128\n") != std::string::npos);
  BOOST_TEST(t.find("invalidation_wait_max_us 5000\n") != std::string::npos);
}

// The appversion-metrics handler's families: the same numbers, names Prometheus accepts
// (counters *_total), the waits in seconds.
BOOST_AUTO_TEST_CASE(metrics) {
  Counters c;
  c.registrations += 3;
  c.refused_log += 2;
  c.invalidations += 5;
  c.record_wait(100);
  c.record_wait(5000);
  tierce::base::Metrics m({{"node", "app1"}});
  c.metrics(m);
  std::string t = m.text();
  for (const char* want : {
           "# TYPE tierce_appversion_registrations_total counter\n"
           "tierce_appversion_registrations_total{node=\"app1\"} 3\n",
           "tierce_appversion_registrations_refused_total{node=\"app1\",reason=\"log\"} 2\n",
           "tierce_appversion_registrations_refused_total{node=\"app1\",reason=\"race\"} 0\n",
           "tierce_appversion_invalidations_total{node=\"app1\"} 5\n",
           "tierce_appversion_invalidation_waits_total{node=\"app1\"} 2\n",
           "tierce_appversion_invalidation_wait_p50_le_seconds{node=\"app1\"} 0.000128\n",
           "tierce_appversion_invalidation_wait_max_seconds{node=\"app1\"} 0.005\n"})
    BOOST_TEST(t.find(want) != std::string::npos, want << " not in:\n" << t);
  // One HELP/TYPE per family, even with four samples.
  size_t n = 0;
  for (size_t at = t.find("# TYPE tierce_appversion_registrations_refused_total");
       at != std::string::npos;
       at = t.find("# TYPE tierce_appversion_registrations_refused_total", at + 1))
    ++n;
  BOOST_TEST(n == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
