// tests/sqldeps/test_scanner.cc — the query scanner (sqldeps/scanner.h) on its own: what it records
// (table references, aliases, blocks, columns, WHERE pins, locking) from statements that exercise
// the lexer's rules on the way in (quoting, comments, backtick names, numbers, placeholders,
// several statements in one text), and the errors it stops at on malformed input.
#define BOOST_TEST_MODULE sqldeps_scanner
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <memory>
#include <string>
#include <vector>

#include "sqldeps/lexer.h"
#include "sqldeps/scanner.h"
#include "sqldeps/schema.h"

using namespace tierce::sqldeps;
using detail::PinRef;
using detail::RawValue;
using detail::Scanner;
using Source = detail::ValueRef::Source;

namespace {

const Schema& schema() {
  static const Schema s = Schema::parse_sql(
      "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(64), seller_id INT);"
      "CREATE TABLE users (id INT PRIMARY KEY, nick VARCHAR(64));"
      "CREATE TABLE `order` (id INT PRIMARY KEY, total INT);");
  return s;
}

// Scans statement `n` (0-based, split on ';') of `sql` as a query, and its WHERE pins.
struct Scan {
  std::vector<Token> tokens;
  std::vector<std::string> names;
  std::unique_ptr<Scanner> s;
  std::vector<PinRef> pins;

  explicit Scan(std::string_view sql, size_t n = 0, const Schema* sc = &schema())
      : tokens(tokenize(sql)) {
    size_t b = 0, e = 0;
    for (size_t k = 0, seen = 0; k <= tokens.size(); ++k) {
      if (k < tokens.size() && tokens[k].type != TokenType::Semicolon) continue;
      if (seen++ == n) {
        e = k;
        break;
      }
      b = k + 1;
    }
    s = std::make_unique<Scanner>(tokens, b, e, sc, &names);
    s->query();
    for (size_t blk = 0; s->ok && blk < s->blocks.size(); ++blk)
      if (s->blocks[blk].has_where)
        s->pins(s->blocks[blk].where_b, s->blocks[blk].where_e, int(blk), pins);
  }
  std::vector<std::string> tables() const {
    std::vector<std::string> out;
    for (auto& t : s->tables)
      out.push_back(t.derived ? "(" + t.alias + ")" : t.name + " " + t.alias);
    return out;
  }
  bool has_col(const std::string& qual, const std::string& name) const {
    for (auto& c : s->cols)
      if (c.qual == qual && c.name == name) return true;
    return false;
  }
};

#define CHECK_TABLES(scan, ...)                                                    \
  do {                                                                             \
    auto got_ = (scan).tables();                                                   \
    std::vector<std::string> want_{__VA_ARGS__};                                   \
    BOOST_CHECK_EQUAL_COLLECTIONS(got_.begin(), got_.end(), want_.begin(), want_.end()); \
  } while (0)

}  // namespace

BOOST_AUTO_TEST_CASE(tables_aliases_columns_and_key_pin) {
  Scan x("SELECT i.name, u.nick FROM items AS i JOIN users u ON u.id = i.seller_id WHERE i.id = 5");
  BOOST_REQUIRE(x.s->ok);
  BOOST_CHECK(x.s->done());
  CHECK_TABLES(x, "items i", "users u");
  BOOST_REQUIRE_EQUAL(x.s->blocks.size(), 1u);
  BOOST_CHECK(x.s->blocks[0].has_where && !x.s->blocks[0].star_all);
  BOOST_CHECK(x.has_col("i", "name") && x.has_col("u", "nick") && x.has_col("u", "id"));
  BOOST_CHECK(x.has_col("i", "seller_id") && x.has_col("i", "id"));
  BOOST_REQUIRE_EQUAL(x.pins.size(), 1u);
  BOOST_CHECK_EQUAL(x.pins[0].table, 0u);
  BOOST_CHECK_EQUAL(x.pins[0].column, "id");
  BOOST_CHECK(x.pins[0].value.source == Source::Literal);
  BOOST_CHECK_EQUAL(x.pins[0].value.text, "5");
}

BOOST_AUTO_TEST_CASE(quoted_strings_hide_keywords) {
  Scan x("SELECT 'FROM users' AS a, \"JOIN users\" FROM items WHERE name = 'o''k;'");
  BOOST_REQUIRE(x.s->ok);
  CHECK_TABLES(x, "items items");
  BOOST_REQUIRE_EQUAL(x.pins.size(), 1u);
  BOOST_CHECK_EQUAL(x.pins[0].column, "name");
  BOOST_CHECK_EQUAL(x.pins[0].value.text, "o'k;");  // decoded, and the ';' inside splits nothing
}

BOOST_AUTO_TEST_CASE(comments_drop_code_executable_comments_add_it) {
  Scan x("SELECT id /* FROM users */ FROM items -- JOIN users\n# JOIN users\nWHERE id = 1");
  BOOST_REQUIRE(x.s->ok);
  CHECK_TABLES(x, "items items");
  Scan y("SELECT items.id FROM items /*! JOIN users ON users.id = items.seller_id */");
  BOOST_REQUIRE(y.s->ok);
  CHECK_TABLES(y, "items items", "users users");
}

BOOST_AUTO_TEST_CASE(backtick_names) {
  Scan x("SELECT `order`.`total` FROM `order` WHERE `order`.`id` = 3");
  BOOST_REQUIRE(x.s->ok);
  CHECK_TABLES(x, "order order");  // reserved, but quoted: a name
  BOOST_CHECK(x.has_col("order", "total"));
  BOOST_REQUIRE_EQUAL(x.pins.size(), 1u);
  BOOST_CHECK_EQUAL(x.pins[0].column, "id");
  Scan y("SELECT * FROM `My Items` AS `The``Alias`");
  BOOST_REQUIRE(y.s->ok);
  CHECK_TABLES(y, "my items the`alias");  // lower-cased, `` undoubled
  BOOST_CHECK(y.s->blocks[0].star_all);
  Scan z("SELECT * FROM order");  // a bare reserved word is no table
  BOOST_CHECK(!z.s->ok);
}

BOOST_AUTO_TEST_CASE(numbers_as_pinned_values) {
  Scan x("SELECT * FROM items WHERE id = -7 AND seller_id = 007 AND name = 1.5e3");
  BOOST_REQUIRE(x.s->ok);
  BOOST_REQUIRE_EQUAL(x.pins.size(), 3u);
  BOOST_CHECK_EQUAL(x.pins[0].value.text, "-7");  // the sign joins the number
  BOOST_CHECK_EQUAL(x.pins[1].value.text, "007");  // as written: the column's type canonicalizes
  BOOST_CHECK_EQUAL(x.pins[2].value.text, "1.5e3");
  Scan y("SELECT * FROM items WHERE 42 = id AND seller_id IN (9)");
  BOOST_REQUIRE_EQUAL(y.pins.size(), 2u);
  BOOST_CHECK_EQUAL(y.pins[0].column, "id");
  BOOST_CHECK_EQUAL(y.pins[1].value.text, "9");
  Scan z("SELECT * FROM items WHERE id = 1 + 1 AND seller_id IN (1, 2)");  // no single value
  BOOST_CHECK(z.pins.empty());
}

BOOST_AUTO_TEST_CASE(placeholders_positional_and_named) {
  Scan x("SELECT * FROM items WHERE id = ? AND name = :nm AND seller_id = :nm");
  BOOST_REQUIRE(x.s->ok);
  BOOST_REQUIRE_EQUAL(x.pins.size(), 3u);
  BOOST_CHECK(x.pins[0].value.source == Source::Positional && x.pins[0].value.index == 0);
  BOOST_CHECK(x.pins[1].value.source == Source::Named && x.pins[1].value.index == 0);
  BOOST_CHECK(x.pins[2].value.source == Source::Named && x.pins[2].value.index == 0);
  BOOST_REQUIRE_EQUAL(x.names.size(), 1u);  // one name, used twice
  BOOST_CHECK_EQUAL(x.names[0], "nm");
  Scan y("SELECT ? FROM users; SELECT * FROM items WHERE id = ?", 1);
  BOOST_REQUIRE_EQUAL(y.pins.size(), 1u);
  BOOST_CHECK_EQUAL(y.pins[0].value.index, 1u);  // `?` are numbered over the whole text
}

BOOST_AUTO_TEST_CASE(multi_statement_input_scans_one_range) {
  const char* sql = "SELECT * FROM items WHERE id = 1; SELECT nick FROM users;";
  Scan first(sql, 0);
  BOOST_REQUIRE(first.s->ok);
  BOOST_CHECK(first.s->done());
  CHECK_TABLES(first, "items items");
  Scan second(sql, 1);
  BOOST_REQUIRE(second.s->ok);
  CHECK_TABLES(second, "users users");
  BOOST_CHECK(second.has_col("", "nick"));
}

BOOST_AUTO_TEST_CASE(ctes_derived_tables_and_subqueries) {
  Scan x("WITH c AS (SELECT id FROM users) SELECT * FROM c, (SELECT 1) AS d, items "
         "WHERE items.id IN (SELECT id FROM `order`)");
  BOOST_REQUIRE(x.s->ok);
  CHECK_TABLES(x, "users users", "(c)", "(d)", "items items", "order order");
  BOOST_CHECK_EQUAL(x.s->blocks.size(), 4u);
  auto t = detail::tables_of_query(x.tokens, 0, x.tokens.size());
  BOOST_REQUIRE(t.has_value());
  std::vector<std::string> want{"users", "items", "order"};
  BOOST_CHECK_EQUAL_COLLECTIONS(t->begin(), t->end(), want.begin(), want.end());
}

BOOST_AUTO_TEST_CASE(only_a_top_level_and_pins) {
  BOOST_CHECK(Scan("SELECT * FROM items WHERE id = 1 OR id = 2").pins.empty());
  Scan x("SELECT * FROM items WHERE seller_id BETWEEN 1 AND 9 AND (id = 4)");
  BOOST_REQUIRE_EQUAL(x.pins.size(), 1u);
  BOOST_CHECK_EQUAL(x.pins[0].column, "id");
  Scan y("SELECT * FROM items i, users u WHERE nick = 'a'");  // the Schema says whose nick
  BOOST_REQUIRE_EQUAL(y.pins.size(), 1u);
  BOOST_CHECK_EQUAL(y.pins[0].table, 1u);
  BOOST_CHECK(Scan("SELECT * FROM items i, users u WHERE id = 1").pins.empty());  // ambiguous
}

BOOST_AUTO_TEST_CASE(locking_reads) {
  BOOST_CHECK(Scan("SELECT id FROM items WHERE id = 1 FOR UPDATE").s->locking);
  BOOST_CHECK(Scan("SELECT id FROM items WHERE id = 1 LOCK IN SHARE MODE").s->locking);
  BOOST_CHECK(!Scan("SELECT id FROM items WHERE id = 1").s->locking);
}

BOOST_AUTO_TEST_CASE(malformed_input_is_an_error_not_a_crash) {
  struct Case {
    const char* sql;
    const char* error;
  };
  const Case cases[] = {
      {"SELECT * FROM", "expected a table at the end"},
      {"SELECT (1", "expected ')' at the end"},
      {"SELECT * FROM items AS", "expected an alias at the end"},
      {"SELECT * FROM items USE INDEX x", "expected '(' after an index hint near 'x'"},
      {"WITH AS (SELECT 1) SELECT 1", "expected a CTE name near 'as'"},
      {"DELETE FROM items", "expected SELECT near 'delete'"},
  };
  for (const auto& c : cases) {
    Scan x(c.sql);
    BOOST_TEST_INFO("sql: " << c.sql);
    BOOST_CHECK(!x.s->ok);
    BOOST_CHECK_EQUAL(x.s->error, c.error);
    BOOST_CHECK(x.s->done());  // a failure stops the scan
  }
  Scan bad("SELECT 'never closed");
  BOOST_CHECK(!bad.s->ok);
  BOOST_CHECK_EQUAL(bad.s->error.rfind("unreadable token", 0), 0u);
  std::string deep = "SELECT " + std::string(400, '(') + "1" + std::string(400, ')');
  Scan d(deep);
  BOOST_CHECK(!d.s->ok);
  BOOST_CHECK_EQUAL(d.s->error.rfind("nested too deep", 0), 0u);
  Scan first_error("SELECT * FROM items AS WHERE (");  // the first failure is the one kept
  BOOST_CHECK_EQUAL(first_error.s->error, "expected an alias near 'where'");
}

BOOST_AUTO_TEST_CASE(without_a_schema_no_column_is_known) {
  Scan x("SELECT * FROM items i, users u WHERE nick = 'a' AND u.id = 2", 0, nullptr);
  BOOST_REQUIRE(x.s->ok);
  BOOST_REQUIRE_EQUAL(x.pins.size(), 1u);  // only the qualified one
  BOOST_CHECK_EQUAL(x.pins[0].table, 1u);
  BOOST_CHECK(x.s->info_of(x.s->tables[0]) == nullptr);
}
