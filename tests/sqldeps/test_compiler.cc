// tests/sqldeps/test_compiler.cc — the statement compiler (sqldeps/compiler.h) on its own, one
// statement at a time: the Statement it makes per kind (SELECT reader tables and pins, INSERT /
// REPLACE / UPDATE / DELETE write plans, DDL and CALL as invalidate-all, transactions, SET,
// EXPLAIN), and malformed input of each kind rejected with a reason rather than a crash.
#define BOOST_TEST_MODULE sqldeps_compiler
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "sqldeps/compiler.h"
#include "sqldeps/lexer.h"
#include "sqldeps/schema.h"

using namespace tierce::sqldeps;
using detail::StatementCompiler;
using detail::ValueRef;
using Source = ValueRef::Source;

namespace {

const Schema& schema() {
  static const Schema s = Schema::parse_sql(
      "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(64), seller_id INT);"
      "CREATE TABLE users (id INT PRIMARY KEY, nick VARCHAR(64));"
      "CREATE VIEW v AS SELECT * FROM items;");
  return s;
}

// Compiles the first statement of `sql` (up to a ';').
Statement one(std::string_view sql, std::vector<std::string>* names = nullptr) {
  std::vector<Token> t = tokenize(sql);
  size_t e = 0;
  while (e < t.size() && t[e].type != TokenType::Semicolon) ++e;
  BOOST_REQUIRE_MESSAGE(e > 0, "no statement in: " << sql);
  std::vector<std::string> local;
  return StatementCompiler(t, 0, e, schema(), names ? *names : local).run();
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

void check_conservative(const Statement& st, Kind kind, const std::string& reason) {
  BOOST_CHECK_EQUAL(to_string(st.kind), to_string(kind));
  BOOST_CHECK_EQUAL(to_string(st.precision), to_string(Precision::Conservative));
  BOOST_CHECK_EQUAL(st.reason, reason);
  BOOST_CHECK_EQUAL(st.invalidate_all, kind != Kind::Read);
  BOOST_CHECK_EQUAL(st.uncacheable, kind != Kind::Write);
}

}  // namespace

// ---- SELECT -------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(select_keyed_by_primary_key) {
  Statement st = one("SELECT name FROM items WHERE id = ?");
  BOOST_CHECK(st.kind == Kind::Read && st.precision == Precision::Exact);
  BOOST_REQUIRE_EQUAL(st.reads.size(), 1u);
  const auto& r = st.reads[0];
  BOOST_CHECK_EQUAL(r.row_prefix, "row:items:");
  BOOST_CHECK_EQUAL(r.rows, "rows:items");
  BOOST_CHECK_EQUAL(r.table, "table:items");
  BOOST_REQUIRE(r.keyed && r.key.size() == 1);
  BOOST_CHECK(r.key[0].source == Source::Positional && r.key[0].index == 0);
  BOOST_CHECK(r.key[0].type == ColumnType::Integer);
  BOOST_CHECK(has(r.columns, "col:items:name") && has(r.columns, "col:items:id"));
  BOOST_CHECK(!st.locking);
}

BOOST_AUTO_TEST_CASE(select_pinned_by_value_or_table_level) {
  Statement st = one("SELECT * FROM items WHERE seller_id = 0042");
  BOOST_CHECK(st.precision == Precision::Exact);
  BOOST_REQUIRE_EQUAL(st.reads.size(), 1u);
  BOOST_CHECK(!st.reads[0].keyed);
  BOOST_REQUIRE_EQUAL(st.reads[0].pins.size(), 1u);
  BOOST_CHECK_EQUAL(st.reads[0].pins[0].val_prefix, "val:items:seller_id:");
  BOOST_CHECK_EQUAL(st.reads[0].pins[0].vals, "vals:items:seller_id");
  BOOST_CHECK_EQUAL(st.reads[0].pins[0].value.literal, "42");  // canonical
  BOOST_CHECK(has(st.reads[0].columns, "col:items:*"));

  Statement all = one("SELECT nick FROM users");
  BOOST_CHECK(all.precision == Precision::TableLevel);
  BOOST_CHECK_EQUAL(all.reason, "not keyed by a primary key or a column value: users");
}

BOOST_AUTO_TEST_CASE(select_locking_row_facts) {
  Statement st = one("SELECT name, items.seller_id FROM items WHERE id = 1 FOR UPDATE");
  BOOST_CHECK(st.locking);
  BOOST_REQUIRE_EQUAL(st.fact_columns.size(), 2u);
  BOOST_CHECK_EQUAL(st.fact_columns[0].first, "name");
  BOOST_CHECK(st.fact_columns[0].second == ColumnType::Text);
  BOOST_CHECK_EQUAL(st.fact_columns[1].first, "seller_id");
  BOOST_CHECK(!one("SELECT COUNT(*) FROM items WHERE id = 1 FOR UPDATE").locking);
}

BOOST_AUTO_TEST_CASE(select_named_params_collected) {
  std::vector<std::string> names;
  Statement st = one("SELECT * FROM items WHERE id = :id AND seller_id = :s", &names);
  BOOST_REQUIRE_EQUAL(names.size(), 2u);
  BOOST_CHECK_EQUAL(names[0], "id");
  BOOST_CHECK_EQUAL(names[1], "s");
  BOOST_REQUIRE(st.reads.size() == 1 && st.reads[0].keyed);
  BOOST_CHECK(st.reads[0].key[0].source == Source::Named && st.reads[0].key[0].index == 0);
}

// ---- INSERT / REPLACE ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(insert_values_rows) {
  Statement st = one("INSERT INTO items (id, name, seller_id) VALUES (?, 'X ', 3), (4, ?, 1 + 1)");
  BOOST_CHECK(st.kind == Kind::Write && st.precision == Precision::Exact);
  const auto& w = st.write;
  BOOST_CHECK(w.fixed == std::vector<std::string>{"table:items"});
  BOOST_CHECK_EQUAL(w.row_prefix, "row:items:");
  BOOST_REQUIRE_EQUAL(w.keys.size(), 2u);
  BOOST_CHECK(w.keys[0][0].source == Source::Positional && w.keys[0][0].index == 0);
  BOOST_CHECK(w.keys[1][0].source == Source::Literal && w.keys[1][0].literal == "4");
  BOOST_REQUIRE_EQUAL(w.value_columns.size(), 2u);  // name, seller_id (not the one-column key)
  BOOST_CHECK_EQUAL(w.value_columns[0].first, "val:items:name:");
  BOOST_REQUIRE_EQUAL(w.values.size(), 2u);
  BOOST_CHECK_EQUAL(w.values[0][0].literal, "x");  // text: lower-cased, right-trimmed
  BOOST_CHECK(w.values[1][0].source == Source::Positional && w.values[1][0].index == 1);
  BOOST_CHECK(w.values[1][1].source == Source::Unknown);  // an expression
  BOOST_CHECK(w.table.empty());
}

BOOST_AUTO_TEST_CASE(insert_set_form_and_missing_key) {
  Statement st = one("INSERT INTO items SET id = 9, name = ?");
  BOOST_CHECK(st.precision == Precision::Exact);
  BOOST_REQUIRE(st.write.keys.size() == 1 && st.write.keys[0].size() == 1);
  BOOST_CHECK_EQUAL(st.write.keys[0][0].literal, "9");
  Statement nokey = one("INSERT INTO items (name) VALUES ('a')");
  BOOST_CHECK(nokey.precision == Precision::TableLevel);
  BOOST_CHECK_EQUAL(nokey.reason, "INSERT without its primary key");
  BOOST_REQUIRE_EQUAL(nokey.write.keys.size(), 1u);
  BOOST_CHECK(nokey.write.keys[0].empty());  // rows:T at derive time
}

BOOST_AUTO_TEST_CASE(insert_select_on_duplicate_replace_and_view) {
  Statement sel = one("INSERT INTO users (id, nick) SELECT id, name FROM items");
  BOOST_CHECK_EQUAL(sel.reason, "INSERT ... SELECT");
  BOOST_CHECK(has(sel.write.fixed, "rows:users") && has(sel.write.fixed, "vals:users:nick"));
  Statement dup = one("INSERT INTO items (id, name) VALUES (1, 'a') AS n ON DUPLICATE KEY UPDATE "
                      "name = n.name");
  BOOST_CHECK(dup.precision == Precision::TableLevel);
  BOOST_CHECK_EQUAL(dup.reason, "INSERT ... ON DUPLICATE KEY UPDATE");
  BOOST_CHECK(has(dup.write.fixed, "col:items:name"));
  Statement rep = one("REPLACE INTO users VALUES (1, 'a')");
  BOOST_CHECK_EQUAL(rep.reason, "REPLACE deletes the rows it conflicts with");
  BOOST_CHECK(has(rep.write.fixed, "col:users:*") && has(rep.write.fixed, "rows:users"));
  Statement view = one("INSERT INTO v (id) VALUES (1)");
  BOOST_CHECK_EQUAL(view.reason, "INSERT into a view");
  BOOST_CHECK(has(view.write.fixed, "table:items"));
}

// ---- UPDATE / DELETE ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(update_keyed_row) {
  Statement st = one("UPDATE items SET name = ?, seller_id = seller_id + 1 WHERE id = 7");
  BOOST_CHECK(st.kind == Kind::Write && st.precision == Precision::Exact);
  const auto& w = st.write;
  BOOST_CHECK_EQUAL(w.table, "items");
  BOOST_CHECK(!has(w.fixed, "rows:items") && !has(w.fixed, "vals:items:name"));
  BOOST_CHECK(has(w.fixed, "col:items:name") && has(w.fixed, "col:items:seller_id"));
  BOOST_REQUIRE(w.keys.size() == 1 && w.keys[0].size() == 1);
  BOOST_CHECK_EQUAL(w.keys[0][0].literal, "7");
  BOOST_REQUIRE_EQUAL(w.row_columns.size(), 2u);
  BOOST_REQUIRE_EQUAL(w.set_values.size(), 2u);
  BOOST_CHECK_EQUAL(w.row_columns[w.set_values[0].first].column, "name");
  BOOST_CHECK(w.set_values[0].second.source == Source::Positional);
  BOOST_CHECK(w.set_values[1].second.source == Source::Unknown);  // an expression
  BOOST_CHECK(!w.deletes);
}

BOOST_AUTO_TEST_CASE(update_not_keyed_key_column_and_multi_table) {
  Statement any = one("UPDATE LOW_PRIORITY items SET name = 'a' WHERE seller_id = 1 LIMIT 5");
  BOOST_CHECK_EQUAL(any.reason, "UPDATE not keyed by its primary key");
  BOOST_CHECK(has(any.write.fixed, "rows:items") && has(any.write.fixed, "vals:items:seller_id"));
  BOOST_CHECK(!has(any.write.fixed, "table:items"));
  Statement key = one("UPDATE items SET id = 2 WHERE id = 1");
  BOOST_CHECK_EQUAL(key.reason, "UPDATE of a key column");
  BOOST_CHECK(has(key.write.fixed, "table:items"));
  Statement multi = one("UPDATE items i JOIN users u ON u.id = i.seller_id SET u.nick = 'x' "
                        "WHERE i.id = 1");
  BOOST_CHECK_EQUAL(multi.reason, "multi-table UPDATE");
  BOOST_CHECK(has(multi.write.fixed, "col:users:nick"));
  BOOST_CHECK(!has(multi.write.fixed, "rows:items"));  // SET reaches users only
}

BOOST_AUTO_TEST_CASE(delete_keyed_unkeyed_and_multi_table) {
  Statement st = one("DELETE FROM items WHERE id = ?");
  BOOST_CHECK(st.precision == Precision::Exact);
  BOOST_CHECK(st.write.deletes);
  BOOST_CHECK(has(st.write.fixed, "table:items"));
  BOOST_CHECK_EQUAL(st.write.row_columns.size(), 2u);
  Statement any = one("DELETE FROM items WHERE name = 'a' ORDER BY id LIMIT 1");
  BOOST_CHECK_EQUAL(any.reason, "DELETE not keyed by its primary key");
  BOOST_CHECK(has(any.write.fixed, "vals:items:name"));
  Statement multi = one("DELETE u FROM users u JOIN items i ON i.seller_id = u.id");
  BOOST_CHECK_EQUAL(multi.reason, "multi-table DELETE");
  BOOST_CHECK(has(multi.write.fixed, "rows:users") && !has(multi.write.fixed, "rows:items"));
  Statement using_form = one("DELETE FROM i USING items i, users u WHERE u.id = i.seller_id");
  BOOST_CHECK_EQUAL(using_form.reason, "multi-table DELETE");
  BOOST_CHECK(has(using_form.write.fixed, "rows:items") &&
              !has(using_form.write.fixed, "rows:users"));
}

// ---- DDL and the rest ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(ddl_and_calls_invalidate_everything) {
  check_conservative(one("CREATE TABLE x (a INT)"), Kind::Write, "CREATE: may change any table");
  check_conservative(one("DROP TABLE items"), Kind::Write, "DROP: may change any table");
  check_conservative(one("TRUNCATE items"), Kind::Write, "TRUNCATE: may change any table");
  check_conservative(one("ALTER TABLE items ADD c INT"), Kind::Write,
                     "ALTER: may change any table");
  Statement call = one("CALL p(1)");
  BOOST_CHECK(call.kind == Kind::Write && call.invalidate_all && call.uncacheable);
  BOOST_CHECK_EQUAL(call.reason, "CALL: stored procedure");
  check_conservative(one("WITH c AS (SELECT 1) UPDATE items SET name = 'a'"), Kind::Write,
                     "WITH before a write: not analyzed");
  check_conservative(one("FROBNICATE items"), Kind::Unknown, "unknown statement frobnicate");
  check_conservative(one("(UPDATE items SET name = 'a')"), Kind::Unknown,
                     "a parenthesized statement that is no SELECT");
  check_conservative(one("BEGIN NOT ATOMIC SELECT 1"), Kind::Unknown, "BEGIN NOT ATOMIC block");
}

BOOST_AUTO_TEST_CASE(transactions_set_and_explain) {
  BOOST_CHECK(one("BEGIN").kind == Kind::Begin);
  BOOST_CHECK(one("START TRANSACTION READ ONLY").kind == Kind::Begin);
  BOOST_CHECK(one("COMMIT").kind == Kind::Commit);
  BOOST_CHECK(one("ROLLBACK").kind == Kind::Rollback);
  BOOST_CHECK(one("ROLLBACK TO SAVEPOINT s").kind == Kind::RollbackToSavepoint);
  BOOST_CHECK(one("SAVEPOINT s").kind == Kind::Savepoint);
  BOOST_CHECK(one("RELEASE SAVEPOINT s").kind == Kind::Savepoint);
  Statement ac = one("SET autocommit = 0");
  BOOST_CHECK(ac.kind == Kind::Neutral && ac.autocommit == false);
  BOOST_CHECK(one("SET @@session.autocommit := ON").autocommit == true);
  BOOST_CHECK(!one("SET NAMES utf8mb4").autocommit.has_value());
  Statement sv = one("SET @n = (SELECT name FROM items WHERE id = 3)");
  BOOST_CHECK(sv.kind == Kind::Read && sv.reads.size() == 1 && sv.reads[0].keyed);
  BOOST_CHECK(one("EXPLAIN SELECT * FROM items").kind == Kind::Neutral);
  BOOST_CHECK(one("EXPLAIN ANALYZE SELECT * FROM items").kind == Kind::Neutral);
  Statement ea = one("EXPLAIN ANALYZE FORMAT = TREE DELETE FROM items WHERE id = 1");
  BOOST_CHECK(ea.kind == Kind::Write && ea.write.deletes);  // it runs the statement
  BOOST_CHECK(one("SHOW TABLES").kind == Kind::Neutral);
}

// ---- malformed input ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(malformed_statements_rejected_with_a_reason) {
  check_conservative(one("SELECT * FROM"), Kind::Read,
                     "unreadable SELECT: expected a table at the end");
  check_conservative(one("SELECT 1 1 FROM items WHERE )"), Kind::Read,
                     "unreadable SELECT: unexpected token near ')'");
  check_conservative(one("INSERT INTO"), Kind::Write,
                     "unreadable insert: expected a table at the end");
  check_conservative(one("INSERT INTO items VALUES (1"), Kind::Write,
                     "unreadable insert: expected ')' at the end");
  check_conservative(one("INSERT INTO items DEFAULT"), Kind::Write,
                     "unreadable insert: expected VALUES, SET or SELECT near 'default'");
  check_conservative(one("UPDATE items SET"), Kind::Write,
                     "unreadable update: expected a column at the end");
  check_conservative(one("UPDATE items name = 1"), Kind::Write,  // `name`: an alias
                     "unreadable update: expected set near '='");
  check_conservative(one("DELETE items"), Kind::Write,
                     "unreadable delete: expected from at the end");
  check_conservative(one("SELECT 'abc"), Kind::Unknown,
                     "unterminated string, quoted name or comment");
  // Whatever is kept of a rejected write, derive() must not see half a plan.
  Statement half = one("INSERT INTO items (id) VALUES (1) ON DUPLICATE KEY");
  BOOST_CHECK(half.write.fixed.empty() && half.write.keys.empty());
}
