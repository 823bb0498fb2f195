// tests/base/config_checker_test.cc — base/config_checker.h: typed reads with ranges, unknown keys
// with FILE:LINE:COL and a hint, paths against the file's directory, both wordings, and the
// problems thrown together (in file order when asked).
#define BOOST_TEST_MODULE base_config_checker
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "base/config.h"
#include "base/config_checker.h"

using namespace tierce::base;

namespace {

toml::table parse(const std::string& text) {
  return parse_toml(text, "f.toml");
}

CheckerWording terse() {
  CheckerWording w;
  w.style = CheckerWording::Style::Terse;
  return w;
}

}  // namespace

BOOST_AUTO_TEST_CASE(values_that_pass_are_returned) {
  toml::table root = parse("[a]\ns = \"x\"\nn = 7\nb = true\np = \"sub/../f\"\n");
  ConfigChecker c("f.toml", "/etc/tierce");
  CheckedTable a = c.table(*root.get("a")->as_table(), "[a]");
  BOOST_TEST(*a.string("s", "\"e\"") == "x");
  BOOST_TEST(*a.integer("n", 1, 10, 5) == 7);
  BOOST_TEST(*a.boolean("b") == true);
  BOOST_TEST(*a.path("p", "\"f\"") == "/etc/tierce/f");
  BOOST_TEST(!a.string("absent").has_value());
  BOOST_TEST(c.ok());
  BOOST_CHECK_NO_THROW(c.throw_if_any());
}

BOOST_AUTO_TEST_CASE(guided_wording_names_the_type_and_an_example) {
  toml::table root = parse("[a]\ns = 1\nn = \"7\"\nm = 70\nb = \"yes\"\np = \"\"\n");
  ConfigChecker c("f.toml", "/");
  CheckedTable a = c.table(*root.get("a")->as_table(), "[a]");
  BOOST_TEST(!a.string("s", "\"x\""));
  BOOST_TEST(!a.integer("n", 1, 10, 5));
  BOOST_TEST(!a.integer("m", 1, 10, 5));
  BOOST_TEST(!a.boolean("b"));
  BOOST_TEST(!a.path("p", "\"/f\""));
  std::vector<std::string> want = {
      "f.toml:2:5: [a] s: expected a string, got an integer; write e.g. s = \"x\"",
      "f.toml:3:5: [a] n: expected an integer, got a string; write e.g. n = 5 (no quotes, no unit)",
      "f.toml:4:5: [a] m: 70 is out of range 1..10; write e.g. m = 5",
      "f.toml:5:5: [a] b: expected true or false, got a string; write e.g. b = true (no quotes)",
      "f.toml:6:5: [a] p: empty path; remove the key or write e.g. p = \"/f\""};
  BOOST_TEST(c.problems() == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(guided_wording_can_refuse_empty_strings) {
  toml::table root = parse("[a]\ns = \"\"\nn = \"7\"\n");
  CheckerWording w;
  w.strings_nonempty = true;
  w.integer_note = " (no quotes)";
  ConfigChecker c("f.toml", "/", w);
  CheckedTable a = c.table(*root.get("a")->as_table(), "[a]");
  BOOST_TEST(!a.string("s", "\"x\""));
  BOOST_TEST(!a.integer("n", 1, 10, 5));
  BOOST_TEST(c.problems().at(0) ==
             "f.toml:2:5: [a] s: expected a non-empty string, got \"\"; write e.g. s = \"x\"");
  BOOST_TEST(c.problems().at(1) ==
             "f.toml:3:5: [a] n: expected an integer, got a string; write e.g. n = 5 (no quotes)");
}

BOOST_AUTO_TEST_CASE(terse_wording_prefixes_the_key) {
  toml::table root = parse("[tls]\ns = 1\nn = \"7\"\nm = 70\nb = 1\n");
  ConfigChecker c("f.toml", ".", terse());
  CheckedTable t = c.table(*root.get("tls")->as_table(), "tls.");
  BOOST_TEST(!t.string("s"));
  BOOST_TEST(!t.integer("n", 1, 10));
  BOOST_TEST(!t.integer("m", 1, 10));
  BOOST_TEST(!t.boolean("b"));
  std::vector<std::string> want = {"f.toml:2:5: tls.s: expected a string in double quotes",
                                   "f.toml:3:5: tls.n: expected an integer 1..10",
                                   "f.toml:4:5: tls.m: 70 is out of range; write 1..10",
                                   "f.toml:5:5: tls.b: expected true or false"};
  BOOST_TEST(c.problems() == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(unknown_keys_are_placed_and_get_a_hint) {
  toml::table root = parse("[a]\nlisten = 1\nlistn = 2\nzzz = 3\n");
  ConfigChecker guided("f.toml", "/");
  guided.table(*root.get("a")->as_table(), "[a]").only_known_keys({"listen"});
  std::vector<std::string> want = {
      "f.toml:3:1: [a] listn: unknown key; did you mean 'listen'? ([a] knows: listen)",
      "f.toml:4:1: [a] zzz: unknown key ([a] knows: listen)"};
  BOOST_TEST(guided.problems() == want, boost::test_tools::per_element());

  ConfigChecker t("f.toml", ".", terse());
  t.table(*root.get("a")->as_table(), "a.").only_known_keys({"listen"});
  BOOST_TEST(t.problems().at(0) ==
             "f.toml:3:1: a.listn: unknown key; did you mean 'listen'? (known here: listen)");
}

BOOST_AUTO_TEST_CASE(problems_are_thrown_together_in_file_order_when_asked) {
  toml::table root = parse("[a]\nx = 1\ny = 2\n");
  ConfigChecker c("f.toml", "/");
  CheckedTable a = c.table(*root.get("a")->as_table(), "[a]");
  c.problem("no line");
  a.problem_at("y", "second");
  a.problem_at("x", "first");
  try {
    c.throw_if_any(ConfigChecker::Order::FileOrder);
    BOOST_FAIL("no ConfigError");
  } catch (const ConfigError& e) {
    std::vector<std::string> want = {"f.toml:2:5: first", "f.toml:3:5: second", "f.toml: no line"};
    BOOST_TEST(e.problems() == want, boost::test_tools::per_element());
  }
  try {
    c.throw_if_any();
    BOOST_FAIL("no ConfigError");
  } catch (const ConfigError& e) {
    BOOST_TEST(e.problems().front() == "f.toml: no line");
  }
}

BOOST_AUTO_TEST_CASE(relative_paths_start_at_the_files_directory) {
  BOOST_TEST(config_base_dir("/etc/tierce/memd.toml") == "/etc/tierce");
  ConfigChecker c("f.toml", "/etc/tierce");
  BOOST_TEST(c.resolve("../x//y") == "/etc/x/y");
  BOOST_TEST(c.resolve("/abs") == "/abs");
}
