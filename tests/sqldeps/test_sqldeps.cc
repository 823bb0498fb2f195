// tests/sqldeps/test_sqldeps.cc — the SQL dependency deriver (sqldeps/deps.h): the lexer's MySQL
// rules, Schema::parse_sql, statement classification, exact name sets for the sample
// application's real statements (sample/php), parameters (positional, named, unknown), a
// randomized soundness check (a write that changes a read's rows shares a name with it), a
// negative control (writes to other rows share none), and garbage input.
#define BOOST_TEST_MODULE sqldeps
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <map>

#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "sqldeps/deps.h"
#include "sqldeps/shape.h"
#include "sqldeps/lexer.h"
#include "sqldeps/schema.h"

using namespace tierce::sqldeps;
using Names = std::set<std::string>;

namespace {

const Schema& sample() {
  static const Schema s = [] {
    std::ifstream in(TIERCE_SAMPLE_SCHEMA);
    std::stringstream ss;
    ss << in.rdbuf();
    return Schema::parse_sql(ss.str());
  }();
  return s;
}

Params pos(std::vector<Value> v) {
  Params p;
  p.positional = std::move(v);
  return p;
}

Derived run(std::string_view sql, const Params& p = {}, const Schema& s = sample()) {
  Derived d;
  derive(compile(sql, s), p, d);
  return d;
}
Names depends(std::string_view sql, const Params& p = {}, const Schema& s = sample()) {
  Derived d = run(sql, p, s);
  BOOST_TEST_INFO("sql: " << sql);
  BOOST_CHECK(!d.uncacheable);
  BOOST_CHECK(d.invalidates.empty());
  return Names(d.depends.begin(), d.depends.end());
}
Names invalidates(std::string_view sql, const Params& p = {}, const Schema& s = sample()) {
  Derived d = run(sql, p, s);
  BOOST_TEST_INFO("sql: " << sql);
  BOOST_CHECK(!d.invalidate_all);
  BOOST_CHECK(d.depends.empty());
  return Names(d.invalidates.begin(), d.invalidates.end());
}
std::string show(const Names& n) {
  std::string s;
  for (auto& x : n) s += x + " ";
  return s;
}
#define CHECK_NAMES(got, ...)                                            \
  do {                                                                   \
    Names g_ = (got), w_ = Names{__VA_ARGS__};                           \
    BOOST_CHECK_MESSAGE(g_ == w_, "got: " << show(g_) << "\nwant: " << show(w_)); \
  } while (0)

Kind kind_of(std::string_view sql, size_t i = 0) {
  Compiled c = compile(sql, sample());
  BOOST_REQUIRE_MESSAGE(c.statements.size() > i, sql);
  return c.statements[i].kind;
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 256) return false;
  for (unsigned char c : n)
    if (c < 0x21 || c == 0x7f || c == ',') return false;
  return true;
}

}  // namespace

// ---- lexer ------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(lexer_comments_strings_and_params) {
  auto t = tokenize("SELECT 'a;b?' , \"c\"\"d\" -- ; x\n # ? y\n /* ? */ `it``ems` ? :nm --1");
  std::vector<std::string> texts;
  for (auto& k : t) texts.push_back(k.text);
  std::vector<std::string> want{"select", "a;b?", ",", "c\"d", "it`ems", "?", "nm", "-", "-", "1"};
  BOOST_CHECK_EQUAL_COLLECTIONS(texts.begin(), texts.end(), want.begin(), want.end());
  BOOST_CHECK(t[4].type == TokenType::QuotedName);
  BOOST_CHECK(t[5].type == TokenType::Param && t[5].param == 0);
  BOOST_CHECK(t[6].type == TokenType::NamedParam);
}

BOOST_AUTO_TEST_CASE(lexer_literals) {
  auto t = tokenize("X'0F' 0x1f b'01' N'n' _utf8mb4'u' 'a\\'b\\n' 1.5e3 .5 42 1abc @v @@session.x :=");
  BOOST_REQUIRE_EQUAL(t.size(), 13u);
  BOOST_CHECK(t[0].type == TokenType::Bits && t[1].type == TokenType::Bits && t[2].type == TokenType::Bits);
  BOOST_CHECK(t[3].is(TokenType::String, "n") && t[4].is(TokenType::String, "u"));
  BOOST_CHECK(t[5].is(TokenType::String, "a'b\n"));
  BOOST_CHECK(t[6].is(TokenType::Number, "1.5e3") && t[7].is(TokenType::Number, ".5"));
  BOOST_CHECK(t[8].is(TokenType::Number, "42") && t[9].is(TokenType::Word, "1abc"));
  BOOST_CHECK(t[10].is(TokenType::Variable, "@v") && t[11].is(TokenType::Variable, "@@session.x"));
  BOOST_CHECK(t[12].op(":="));
}

BOOST_AUTO_TEST_CASE(lexer_executable_comments_and_errors) {
  auto t = tokenize("/*!50001 DELETE FROM t*/ /*+ hint */ /*M!100100 x */");
  BOOST_REQUIRE_EQUAL(t.size(), 4u);
  BOOST_CHECK(t[0].word("delete") && t[2].word("t") && t[3].word("x"));
  auto u = tokenize("SELECT 'abc");
  BOOST_REQUIRE_EQUAL(u.size(), 2u);
  BOOST_CHECK(u[1].type == TokenType::Error);
  auto v = tokenize("SELECT 1 /* never closed");
  BOOST_CHECK(v.back().type == TokenType::Error);
}

// ---- schema -------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(schema_of_the_sample) {
  const Schema& s = sample();
  BOOST_CHECK_EQUAL(s.table_count(), 4u);
  const TableInfo* items = s.find("items");
  BOOST_REQUIRE(items);
  BOOST_CHECK_EQUAL(items->columns.size(), 10u);
  BOOST_CHECK(items->primary_key == std::vector<std::string>{"id"});
  BOOST_CHECK(items->type_of("category_id") == ColumnType::Integer);
  BOOST_CHECK(items->type_of("name") == ColumnType::Text);
  BOOST_CHECK(items->type_of("max_bid") == ColumnType::Other);
  BOOST_CHECK(items->type_of("end_date") == ColumnType::Opaque);
  BOOST_CHECK(s.find("bids") && s.find("bids")->primary_key == std::vector<std::string>{"id"});
  BOOST_CHECK(!s.find("rubis"));
}

BOOST_AUTO_TEST_CASE(schema_mysqldump_style) {
  Schema s = Schema::parse_sql(R"(
/*!40101 SET NAMES utf8mb4 */;
DROP TABLE IF EXISTS `Order Lines`;
CREATE TABLE `Order Lines` (
  `order_id` int(11) NOT NULL,
  `line` smallint NOT NULL,
  `sku` varchar(32) DEFAULT 'primary key' COMMENT 'x',
  UNIQUE KEY `u` (`sku`),
  CONSTRAINT `pk` PRIMARY KEY (`order_id`, `line` DESC)
) ENGINE=InnoDB;
CREATE TABLE kv (k VARCHAR(10) KEY, v TEXT);
CREATE TABLE nokey (a INT UNIQUE KEY, b INT);
/*!50001 CREATE ALGORITHM=UNDEFINED */
/*!50013 DEFINER=`root`@`localhost` SQL SECURITY DEFINER */
/*!50001 VIEW `v` AS select `o`.`sku` AS `sku` from (`Order Lines` `o` join `kv`) */;
INSERT INTO kv VALUES ('a', 'b');
)");
  const TableInfo* o = s.find("order lines");
  BOOST_REQUIRE(o);
  BOOST_CHECK((o->primary_key == std::vector<std::string>{"order_id", "line"}));
  BOOST_CHECK((s.find("kv")->primary_key == std::vector<std::string>{"k"}));
  BOOST_CHECK(s.find("nokey")->primary_key.empty());
  BOOST_REQUIRE(s.find_view("v"));
  BOOST_CHECK((*s.find_view("v") == std::vector<std::string>{"kv", "order lines"}));
  // Reading the view is reading its tables, whole.
  Names n = depends("SELECT sku FROM v WHERE sku = 'x'", {}, s);
  BOOST_CHECK_EQUAL(n.size(), 4u);
  BOOST_CHECK(n.count("table:kv") && n.count("col:kv:*"));
  for (auto& x : n) BOOST_CHECK_MESSAGE(x.find("val") == std::string::npos && valid_name(x), x);
  // Odd table names are hashed into valid names; composite keys join with '|'.
  std::string hashed_table;
  for (auto& x : n)
    if (x.rfind("table:~", 0) == 0) hashed_table = x.substr(6);
  BOOST_CHECK_EQUAL(hashed_table.size(), 17u);
  CHECK_NAMES(depends("SELECT sku FROM `Order Lines` WHERE order_id = 7 AND line = '02'", {}, s),
              "row:" + hashed_table + ":7|2", "rows:" + hashed_table);
}

BOOST_AUTO_TEST_CASE(schema_garbage_is_a_clear_error) {
  auto throws_with = [](std::string_view ddl, std::string_view what) {
    try {
      Schema::parse_sql(ddl);
      BOOST_ERROR("no exception for: " << ddl);
    } catch (const std::invalid_argument& e) {
      BOOST_CHECK_MESSAGE(std::string(e.what()).find(what) != std::string::npos, e.what());
    }
  };
  throws_with("CREATE TABLE t (a INT);\n\nCREATE TABLE u (a INT, 'x');", "schema line 3");
  throws_with("CREATE TABLE t (a INT,\n b VARCHAR(3) DEFAULT 'x)", "line 2: unterminated");
  throws_with("42 nonsense;", "line 1: expected a SQL statement");
  throws_with("CREATE TABLE t (a INT", "unbalanced");
  throws_with("CREATE VIEW v AS SELECT FROM (", "view v");
}

// ---- the sample application's statements (sample/php) ---------------------------------------------

BOOST_AUTO_TEST_CASE(sample_item_page) {
  // lib.php item_with_bids(): the item, its seller and category.
  CHECK_NAMES(depends(R"(SELECT i.id, i.name, i.description, i.initial_price, i.max_bid, i.nb_bids, i.end_date,
                    i.version, i.category_id, i.seller_id, u.nickname AS seller, c.name AS category
               FROM items i JOIN users u ON u.id = i.seller_id JOIN categories c ON c.id = i.category_id
              WHERE i.id = ?)", pos({"5"})),
              "row:items:5", "rows:items", "table:users", "col:users:id", "col:users:nickname",
              "table:categories", "col:categories:id", "col:categories:name");
  // Its last 10 bids.
  CHECK_NAMES(depends(R"(SELECT b.id, b.amount, b.created, b.user_id, u.nickname
               FROM bids b JOIN users u ON u.id = b.user_id
              WHERE b.item_id = ? ORDER BY b.id DESC LIMIT 10)", pos({"5"})), "col:users:id", "col:users:nickname", "table:users", "val:bids:item_id:5", "vals:bids:item_id");
}

BOOST_AUTO_TEST_CASE(sample_category_index_user_and_deps_pages) {
  CHECK_NAMES(depends("SELECT id, name, version FROM categories WHERE id = ?", pos({"3"})),
              "row:categories:3", "rows:categories");
  CHECK_NAMES(depends(R"(SELECT id, name, max_bid, nb_bids, end_date FROM items WHERE category_id = ?
          ORDER BY id LIMIT ? OFFSET ?)", pos({"3", "25", "0"})), "val:items:category_id:3", "vals:items:category_id");
  CHECK_NAMES(depends("SELECT id, name FROM categories ORDER BY id"), "table:categories",
              "col:categories:id", "col:categories:name");
  CHECK_NAMES(depends("SELECT id, nickname, rating, version FROM users WHERE id = ?", pos({"7"})),
              "row:users:7", "rows:users");
  CHECK_NAMES(depends("SELECT id, name, max_bid, nb_bids FROM items WHERE seller_id = ? ORDER BY id LIMIT 100",
                      pos({"7"})), "val:items:seller_id:7", "vals:items:seller_id");
  CHECK_NAMES(depends("SELECT id, item_id, amount, created FROM bids WHERE user_id = ? ORDER BY id DESC LIMIT 10",
                      pos({"7"})), "val:bids:user_id:7", "vals:bids:user_id");
  // deps.php: a range is no equality.
  CHECK_NAMES(depends("SELECT id, name, max_bid, nb_bids, version FROM items WHERE id BETWEEN ? AND ? ORDER BY id",
                      pos({"1", "4"})),
              "table:items", "col:items:id", "col:items:name", "col:items:max_bid",
              "col:items:nb_bids", "col:items:version");
  Compiled c = compile("SELECT id FROM items WHERE id BETWEEN ? AND ?", sample());
  BOOST_CHECK(c.statements[0].precision == Precision::TableLevel);
  BOOST_CHECK_MESSAGE(c.statements[0].reason.find("items") != std::string::npos, c.statements[0].reason);
}

BOOST_AUTO_TEST_CASE(sample_bid_and_edit_writes) {
  CHECK_NAMES(invalidates("INSERT INTO bids (item_id, user_id, amount, created) VALUES (?, ?, ?, NOW())",
                          pos({"5", "7", "12.50"})),
              "table:bids", "rows:bids", "val:bids:item_id:5", "val:bids:user_id:7",
              "vals:bids:amount", "vals:bids:created");
  CHECK_NAMES(invalidates(R"(UPDATE items SET max_bid = GREATEST(max_bid, ?), nb_bids = nb_bids + 1,
                               version = version + 1 WHERE id = ?)", pos({"12.50", "5"})), "col:items:*", "col:items:max_bid", "col:items:nb_bids", "col:items:version", "row:items:5", "vals:items:category_id", "vals:items:description", "vals:items:end_date", "vals:items:initial_price", "vals:items:max_bid", "vals:items:name", "vals:items:nb_bids", "vals:items:seller_id", "vals:items:version");
  CHECK_NAMES(invalidates("UPDATE categories SET version = version + 1 WHERE id = ?", pos({"3"})), "col:categories:*", "col:categories:version", "row:categories:3", "vals:categories:name", "vals:categories:version");
  CHECK_NAMES(invalidates(R"(UPDATE items SET name = ?, description = ?, category_id = ?, version = version + 1
                         WHERE id = ?)", pos({"n", "d", "4", "5"})), "col:items:*", "col:items:category_id", "col:items:description", "col:items:name", "col:items:version", "row:items:5", "val:items:category_id:4", "val:items:description:d", "val:items:name:n", "vals:items:category_id", "vals:items:description", "vals:items:end_date", "vals:items:initial_price", "vals:items:max_bid", "vals:items:name", "vals:items:nb_bids", "vals:items:seller_id", "vals:items:version");
  // The reads inside bid.php's transaction, FOR UPDATE included.
  CHECK_NAMES(depends("SELECT category_id, seller_id FROM items WHERE id = ? FOR UPDATE", pos({"5"})),
              "row:items:5", "rows:items");
  // What a bid invalidates reaches the item page (row) and the category page (max_bid), not the
  // index page or another item's page.
  Names bid = invalidates(R"(UPDATE items SET max_bid = GREATEST(max_bid, ?), nb_bids = nb_bids + 1,
                               version = version + 1 WHERE id = ?)", pos({"12.50", "5"}));
  BOOST_CHECK(bid.count("row:items:5") && bid.count("col:items:max_bid"));
  BOOST_CHECK(!bid.count("row:items:6") && !bid.count("col:categories:name"));
}

// ---- writes ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(writes_insert_update_delete_replace) {
  CHECK_NAMES(invalidates("INSERT INTO users (id, nickname, rating) VALUES (8, 'Bob', 0), (9, ?, -1)",
                          pos({"Al"})),
              "table:users", "row:users:8", "row:users:9", "val:users:nickname:bob",
              "val:users:nickname:al", "val:users:rating:0", "val:users:rating:-1",
              "vals:users:version");
  CHECK_NAMES(invalidates("INSERT INTO users SET id = 8, nickname = 'x', rating = 1, version = 1"),
              "table:users", "row:users:8", "val:users:nickname:x", "val:users:rating:1",
              "val:users:version:1");
  CHECK_NAMES(invalidates("INSERT INTO categories VALUES (1, 'Books', 1) ON DUPLICATE KEY UPDATE name = VALUES(name)"), "col:categories:*", "col:categories:name", "row:categories:1", "rows:categories", "table:categories", "val:categories:name:books", "val:categories:version:1", "vals:categories:id", "vals:categories:name", "vals:categories:version");
  CHECK_NAMES(invalidates("INSERT INTO categories (id, name) SELECT id + 100, name FROM categories"),
              "table:categories", "rows:categories", "vals:categories:id", "vals:categories:name",
              "vals:categories:version");
  CHECK_NAMES(invalidates("REPLACE INTO categories VALUES (1, 'Books', 1)"), "table:categories",
              "row:categories:1", "rows:categories", "col:categories:*", "vals:categories:id",
              "vals:categories:name", "vals:categories:version", "val:categories:name:books",
              "val:categories:version:1");
  CHECK_NAMES(invalidates("UPDATE users SET rating = rating + 1 WHERE nickname = ?", pos({"bob"})), "col:users:*", "col:users:rating", "rows:users", "vals:users:id", "vals:users:nickname", "vals:users:rating", "vals:users:version");
  CHECK_NAMES(invalidates("UPDATE users SET id = 10 WHERE id = 9"), "col:users:*", "col:users:id", "rows:users", "table:users", "vals:users:id", "vals:users:nickname", "vals:users:rating", "vals:users:version");
  CHECK_NAMES(invalidates("DELETE FROM categories WHERE id = 3"), "row:categories:3", "table:categories", "vals:categories:name", "vals:categories:version");
  CHECK_NAMES(invalidates("DELETE FROM categories WHERE name LIKE 'a%'"), "rows:categories",
              "table:categories", "vals:categories:id", "vals:categories:name",
              "vals:categories:version");
  CHECK_NAMES(invalidates("DELETE b FROM bids b JOIN items i ON i.id = b.item_id WHERE i.id = 5"),
              "rows:bids", "table:bids", "vals:bids:id", "vals:bids:item_id", "vals:bids:user_id",
              "vals:bids:amount", "vals:bids:created");
  CHECK_NAMES(invalidates("UPDATE items i JOIN categories c ON c.id = i.category_id SET i.name = c.name WHERE c.id = 1"), "col:items:*", "col:items:name", "rows:items", "vals:items:category_id", "vals:items:description", "vals:items:end_date", "vals:items:id", "vals:items:initial_price", "vals:items:max_bid", "vals:items:name", "vals:items:nb_bids", "vals:items:seller_id", "vals:items:version");
  // Without a schema: keyed by `id`, no values.
  Schema none;
  CHECK_NAMES(invalidates("INSERT INTO `rubis`.`Log` (id, msg) VALUES (1, 'x')", {}, none),
              "table:log", "row:log:1");
  CHECK_NAMES(invalidates("UPDATE log SET msg = 'y' WHERE id = 1", {}, none), "row:log:1",
              "col:log:*", "col:log:msg", "vals:log:msg");
}

BOOST_AUTO_TEST_CASE(conservative_statements) {
  for (std::string_view sql : {"TRUNCATE items", "DROP TABLE items", "ALTER TABLE items ADD x INT",
                               "CREATE TABLE z (a INT)", "RENAME TABLE a TO b",
                               "LOAD DATA INFILE 'x' INTO TABLE items", "LOCK TABLES items WRITE",
                               "GRANT ALL ON *.* TO x"}) {
    Derived d = run(sql);
    BOOST_CHECK_MESSAGE(d.invalidate_all && !d.uncacheable, sql);
    BOOST_CHECK(kind_of(sql) == Kind::Write);
    BOOST_CHECK(compile(sql, sample()).statements[0].precision == Precision::Conservative);
  }
  Compiled call = compile("CALL refresh(?)", sample());
  BOOST_CHECK(call.statements[0].kind == Kind::Write);
  BOOST_CHECK_EQUAL(call.statements[0].reason, "CALL: stored procedure");
  Derived d = run("CALL refresh(1)");
  BOOST_CHECK(d.invalidate_all && d.uncacheable);
  for (std::string_view sql : {"XA START 'x'", "FROBNICATE items", "SELECT (1", "SELECT * FROM",
                               "SELECT 'unterminated", "UPDATE items SET", "DELETE FROM (",
                               "BEGIN NOT ATOMIC SELECT 1"}) {
    Derived e = run(sql);
    BOOST_CHECK_MESSAGE(e.invalidate_all || e.uncacheable, sql);
  }
  BOOST_CHECK(run("SELECT (1").uncacheable);
  BOOST_CHECK(kind_of("SELECT * FROM") == Kind::Read);
}

BOOST_AUTO_TEST_CASE(transactions_and_neutral_statements) {
  struct Case {
    std::string_view sql;
    Kind kind;
  };
  for (auto [sql, kind] : std::vector<Case>{
           {"BEGIN", Kind::Begin},
           {"begin work", Kind::Begin},
           {"START TRANSACTION READ ONLY", Kind::Begin},
           {"START TRANSACTION WITH CONSISTENT SNAPSHOT, READ WRITE", Kind::Begin},
           {"COMMIT", Kind::Commit},
           {"COMMIT WORK AND NO CHAIN NO RELEASE", Kind::Commit},
           {"ROLLBACK", Kind::Rollback},
           {"ROLLBACK WORK", Kind::Rollback},
           {"ROLLBACK TO SAVEPOINT s1", Kind::RollbackToSavepoint},
           {"ROLLBACK WORK TO s1", Kind::RollbackToSavepoint},
           {"SAVEPOINT s1", Kind::Savepoint},
           {"RELEASE SAVEPOINT s1", Kind::Savepoint},
           {"SET NAMES utf8mb4", Kind::Neutral},
           {"SHOW TABLES", Kind::Neutral},
           {"USE rubis", Kind::Neutral},
           {"DO RELEASE_LOCK('x')", Kind::Neutral},
           {"EXPLAIN SELECT * FROM items", Kind::Neutral},
           {"DESCRIBE items", Kind::Neutral},
           {"DESC items", Kind::Neutral},
           {"HELP 'select'", Kind::Neutral},
           {"EXPLAIN ANALYZE DELETE FROM items", Kind::Write},
           {"XA COMMIT 'x'", Kind::Unknown},
       }) {
    BOOST_CHECK_MESSAGE(kind_of(sql) == kind, sql << ": " << to_string(kind_of(sql)));
  }
  auto ac = [](std::string_view sql) { return compile(sql, sample()).statements.at(0).autocommit; };
  BOOST_CHECK(ac("SET autocommit = 0") == std::optional<bool>(false));
  BOOST_CHECK(ac("SET @@session.autocommit=ON") == std::optional<bool>(true));
  BOOST_CHECK(ac("SET SESSION autocommit = 1, NAMES utf8") == std::optional<bool>(true));
  BOOST_CHECK(ac("SET NAMES utf8") == std::nullopt);
  // SET @v = (SELECT ...) reads.
  CHECK_NAMES(depends("SET @m = (SELECT MAX(max_bid) FROM items)"), "table:items",
              "col:items:max_bid");
}

// ---- comments, quoting, identifiers, multi-statements -----------------------------------------------

BOOST_AUTO_TEST_CASE(comments_hide_and_add_keywords) {
  Compiled one = compile("SELECT 1 -- ; DROP TABLE x", sample());
  BOOST_CHECK_EQUAL(one.statements.size(), 1u);
  BOOST_CHECK(one.statements[0].kind == Kind::Read);
  BOOST_CHECK(kind_of("/*!DELETE FROM categories*/") == Kind::Write);
  CHECK_NAMES(invalidates("/*!50001 DELETE FROM categories WHERE id = 2 */"), "row:categories:2", "table:categories", "vals:categories:name", "vals:categories:version");
  BOOST_CHECK(kind_of("/* DELETE FROM categories */ SELECT 1") == Kind::Read);
  BOOST_CHECK(kind_of("# DELETE\nSELECT 1") == Kind::Read);
  BOOST_CHECK(kind_of("SELECT /*+ MAX_EXECUTION_TIME(10) */ id FROM users") == Kind::Read);
  Compiled two = compile("SELECT 1 --1\n; DELETE FROM users", sample());
  BOOST_CHECK_EQUAL(two.statements.size(), 2u);
}

BOOST_AUTO_TEST_CASE(quoting_separators_and_params) {
  Compiled c = compile("SELECT id FROM users WHERE nickname = 'a;?' AND id = ?; SELECT ';'", sample());
  BOOST_CHECK_EQUAL(c.statements.size(), 2u);
  BOOST_CHECK_EQUAL(c.param_count, 1u);
  Derived d;
  derive(c, pos({"4"}), d);
  CHECK_NAMES(Names(d.depends.begin(), d.depends.end()), "row:users:4", "rows:users");
  CHECK_NAMES(depends("SELECT `id`, `nick``name` FROM `rubis`.`users` WHERE `ID` = '007'"),
              "row:users:7", "rows:users");
  Names odd = depends("SELECT `it``ems`.x FROM `it``ems` WHERE x = 1", {}, Schema{});
  BOOST_REQUIRE_EQUAL(odd.size(), 2u);
  BOOST_CHECK_EQUAL(odd.begin()->substr(0, 5), "col:~");  // col:~<16 hex>:x
  BOOST_CHECK_EQUAL(odd.begin()->size(), 4u + 17u + 2u);
  BOOST_CHECK_EQUAL(odd.rbegin()->substr(0, 7), "table:~");
}

BOOST_AUTO_TEST_CASE(named_and_unknown_params) {
  Params p;
  p.named = {{"item", "5"}, {"cat", "3"}};
  Compiled c = compile("SELECT name FROM items WHERE id = :item; SELECT id FROM items WHERE category_id = :cat AND seller_id = :seller",
                       sample());
  BOOST_CHECK((c.param_names == std::vector<std::string>{"item", "cat", "seller"}));
  Derived d;
  derive(c, p, d);
  CHECK_NAMES(Names(d.depends.begin(), d.depends.end()), "row:items:5", "rows:items", "val:items:category_id:3", "vals:items:category_id");
  // An unknown (NULL) key falls back to a column value, then to the table.
  CHECK_NAMES(depends("SELECT name FROM items WHERE id = ? AND seller_id = ?",
                      pos({std::nullopt, "7"})), "val:items:seller_id:7", "vals:items:seller_id");
  CHECK_NAMES(depends("SELECT name FROM items WHERE id = ?", pos({std::nullopt})), "table:items",
              "col:items:name", "col:items:id");
  CHECK_NAMES(depends("SELECT name FROM items WHERE id = ?", {}), "table:items", "col:items:name",
              "col:items:id");
  // An unknown key value on a write: every row.
  CHECK_NAMES(invalidates("UPDATE users SET rating = 1 WHERE id = ?", pos({std::nullopt})), "col:users:*", "col:users:rating", "rows:users", "vals:users:nickname", "vals:users:rating", "vals:users:version");
  // Values: canonical integers, case-folded text, hashed odd text, numeric-looking text unknown.
  CHECK_NAMES(depends("SELECT id FROM users WHERE id = ?", pos({"-0"})), "row:users:0", "rows:users");
  CHECK_NAMES(depends("SELECT id FROM users WHERE nickname = ?", pos({"Bob  "})), "val:users:nickname:bob", "vals:users:nickname");
  Names h = depends("SELECT id FROM users WHERE nickname = ?", pos({"a b,c"}));
  BOOST_CHECK_EQUAL(std::count_if(h.begin(), h.end(), [](auto& n) {
                      return n.rfind("val:users:nickname:~", 0) == 0 && n.size() == 20 + 16;
                    }), 1);
  CHECK_NAMES(depends("SELECT id FROM users WHERE nickname = ?", pos({"42"})), "table:users",
              "col:users:id", "col:users:nickname");
  CHECK_NAMES(depends("SELECT id FROM users WHERE id = 12345678901234567"), "table:users",
              "col:users:id");
  CHECK_NAMES(depends("SELECT id FROM users WHERE id IN (?) OR rating = 1", pos({"1"})),
              "table:users", "col:users:id", "col:users:rating");
  CHECK_NAMES(depends("SELECT id FROM users WHERE ? = id AND (rating > 1)", pos({"1"})),
              "row:users:1", "rows:users");
}

BOOST_AUTO_TEST_CASE(reads_subqueries_ctes_unions_stars) {
  CHECK_NAMES(depends("SELECT * FROM users WHERE id = 1 UNION ALL SELECT u.* FROM users u WHERE rating = 3"), "row:users:1", "rows:users", "val:users:rating:3", "vals:users:rating");
  CHECK_NAMES(depends("WITH top AS (SELECT item_id, COUNT(*) n FROM bids GROUP BY item_id) "
                      "SELECT i.name, top.n FROM top JOIN items i ON i.id = top.item_id ORDER BY top.n DESC"),
              "table:bids", "col:bids:item_id", "table:items", "col:items:name", "col:items:id");
  CHECK_NAMES(depends("SELECT name FROM items WHERE id IN (SELECT item_id FROM bids WHERE user_id = 7)"), "col:items:id", "col:items:name", "table:items", "val:bids:user_id:7", "vals:bids:user_id");
  CHECK_NAMES(depends("SELECT COUNT(*) FROM bids WHERE item_id = 5"), "val:bids:item_id:5", "vals:bids:item_id");
  CHECK_NAMES(depends("SELECT d.c FROM (SELECT category_id c FROM items WHERE seller_id = 2) AS d"), "val:items:seller_id:2", "vals:items:seller_id");
  CHECK_NAMES(depends("SELECT NOW(), 1 + 2, @x"), );
  CHECK_NAMES(depends("SELECT name INTO @n FROM categories WHERE id = 2 LOCK IN SHARE MODE"),
              "row:categories:2", "rows:categories");
  CHECK_NAMES(depends("SELECT price * 2 FROM t WHERE code = 'x'", {}, Schema{}), "table:t",
              "col:t:price", "col:t:code");
  CHECK_NAMES(depends("TABLE categories"), "table:categories", "col:categories:*");
  CHECK_NAMES(depends("(SELECT id FROM users WHERE id = 1) UNION (SELECT id FROM users WHERE id = 2) ORDER BY id"),
              "row:users:1", "row:users:2", "rows:users");
  CHECK_NAMES(depends("SELECT a.id FROM users a NATURAL JOIN users b WHERE a.id = 1"),
              "row:users:1", "rows:users", "table:users", "col:users:*");
}

BOOST_AUTO_TEST_CASE(multi_statements_accumulate) {
  Compiled c = compile("UPDATE users SET rating = ? WHERE id = ?; INSERT INTO categories (id, name) VALUES (?, ?);;",
                       sample());
  BOOST_CHECK_EQUAL(c.statements.size(), 2u);
  BOOST_CHECK_EQUAL(c.param_count, 4u);
  Derived d;
  derive(c, pos({"5", "1", "9", "Toys"}), d);
  CHECK_NAMES(Names(d.invalidates.begin(), d.invalidates.end()), "col:users:*", "col:users:rating", "row:categories:9", "row:users:1", "table:categories", "val:categories:name:toys", "val:users:rating:5", "vals:categories:version", "vals:users:nickname", "vals:users:rating", "vals:users:version");
  // Deduplicated within out, across calls too.
  derive(c, pos({"5", "1", "9", "Toys"}), d);
  BOOST_CHECK_EQUAL(d.invalidates.size(), 11u);
}

// ---- soundness ------------------------------------------------------------------------------------

namespace {

// A value of an integer column in one of the spellings a PHP app may use; `params` gets the
// parameter when the spelling is `?`.
std::string spell_int(std::mt19937_64& rng, int v, std::vector<Value>& params) {
  switch (rng() % 5) {
    case 0: return std::to_string(v);
    case 1: return "'" + std::to_string(v) + "'";
    case 2: return "'00" + std::to_string(v) + "'";
    case 3: params.push_back(std::to_string(v)); return "?";
    default: params.push_back("0" + std::to_string(v)); return "?";
  }
}
std::string spell_text(std::mt19937_64& rng, const std::string& v, std::vector<Value>& params) {
  std::string up = v;
  for (auto& c : up) c = char(std::toupper((unsigned char)c));
  switch (rng() % 4) {
    case 0: return "'" + v + "'";
    case 1: return "'" + up + "  '";
    case 2: params.push_back(v); return "?";
    default: params.push_back(up); return "?";
  }
}

struct Table {
  std::string name;
  std::vector<std::string> int_cols;   // besides id
  std::vector<std::string> text_cols;
};
const std::vector<Table>& tables() {
  static const std::vector<Table> t{
      {"categories", {"version"}, {"name"}},
      {"users", {"rating", "version"}, {"nickname"}},
      {"items", {"category_id", "seller_id", "nb_bids", "version"}, {"name", "description"}},
      {"bids", {"item_id", "user_id"}, {}},
  };
  return t;
}

}  // namespace

// A text and its shape (literals as parameters) derive the same names.
void check_shape(const std::string& sql) {
  auto sh = shape_of(sql);
  if (!sh) return;
  Derived a, b;
  derive(compile(sql, sample()), {}, a);
  derive(compile(sh->text, sample()), sh->values, b);
  Names ad(a.depends.begin(), a.depends.end()), bd(b.depends.begin(), b.depends.end());
  Names ai(a.invalidates.begin(), a.invalidates.end()), bi(b.invalidates.begin(), b.invalidates.end());
  BOOST_CHECK_MESSAGE(ad == bd && ai == bi && a.invalidate_all == b.invalidate_all &&
                          a.uncacheable == b.uncacheable,
                      "text: " << sql << "\nshape: " << sh->text << "\ndepends " << show(ad)
                               << " / " << show(bd) << "\ninvalidates " << show(ai) << " / "
                               << show(bi));
}

// For random (read, write) pairs on the sample schema where the write changes the read's result
// by construction (it touches a row the read returns, a column it returns, or moves a row in or
// out of its value set), the write invalidates a name the read depends on.
BOOST_AUTO_TEST_CASE(soundness_randomized) {
  std::mt19937_64 rng(20240611);
  int checked = 0;
  enum ReadKind { ByKey, ByValue, Whole };
  for (int it = 0; it < 4000; ++it) {
    const Table& t = tables()[rng() % tables().size()];
    std::vector<std::string> all = t.int_cols;
    all.insert(all.end(), t.text_cols.begin(), t.text_cols.end());
    const std::string& shown = all[rng() % all.size()];  // a column the read returns
    int id = int(rng() % 4), v = int(rng() % 3);
    std::string text = std::vector<std::string>{"alpha", "beta"}[rng() % 2];
    bool by_text = !t.text_cols.empty() && rng() % 2;
    std::string pin_col = by_text ? t.text_cols[0] : t.int_cols[rng() % t.int_cols.size()];
    std::vector<Value> rp, wp;
    auto pin_value = [&](std::vector<Value>& params) {
      return by_text ? spell_text(rng, text, params) : spell_int(rng, v, params);
    };
    // The read: by key, by a column value, or whole; `*` sometimes.
    ReadKind rk = ReadKind(rng() % 3);
    bool star = rng() % 4 == 0;
    std::string read = "SELECT " + std::string(star ? "*" : "id, " + shown) + " FROM " + t.name;
    if (rk == ByKey) read += " WHERE id = " + spell_int(rng, id, rp);
    if (rk == ByValue) read += " WHERE " + pin_col + " = " + pin_value(rp);
    if (rk != ByKey && rng() % 2) read += (rk == Whole ? " WHERE" : " AND") + std::string(" id > 0 ORDER BY id LIMIT 5");
    // A write that changes that result, picked among those that do for this kind of read.
    std::string write;
    for (;;) {
      wp.clear();
      int w = int(rng() % 9);
      std::string tn = t.name;
      if (w == 0) {  // the shown column of the row read by key, or of any row
        write = "UPDATE " + tn + " SET " + shown + " = " + shown + " + 1 WHERE id = " +
                spell_int(rng, rk == ByKey ? id : int(rng() % 4), wp);
      } else if (w == 1 && rk == ByValue) {  // move a row into the value set
        std::string a = pin_value(wp);  // parameters in text order: one spelling at a time
        std::string b = spell_int(rng, int(rng() % 4), wp);
        write = "UPDATE " + tn + " SET " + pin_col + " = " + a + " WHERE id = " + b;
      } else if (w == 2 && rk == ByValue) {  // or out of it
        write = "UPDATE " + tn + " SET " + pin_col + " = " + (by_text ? "'zeta'" : "77") +
                " WHERE id = " + spell_int(rng, int(rng() % 4), wp);
      } else if (w == 3) {  // a row of the value set / with that key
        std::string a = spell_int(rng, rk == ByKey ? id : 50, wp);
        std::string b = pin_value(wp);
        write = "INSERT INTO " + tn + " (id, " + pin_col + ") VALUES (" + a + ", " + b + ")";
      } else if (w == 4) {
        write = "DELETE FROM " + tn + " WHERE id = " + spell_int(rng, rk == ByKey ? id : int(rng() % 4), wp);
      } else if (w == 5 && rk == ByValue) {
        write = "DELETE FROM " + tn + " WHERE " + pin_col + " = " + pin_value(wp);
      } else if (w == 6 && rk == ByKey) {  // another row takes the read key
        write = "UPDATE " + tn + " SET id = " + spell_int(rng, id, wp) + " WHERE id = 99";
      } else if (w == 7) {  // the shown column of the rows of some value set
        write = "UPDATE " + tn + " SET " + shown + " = " + shown + " WHERE " + pin_col + " = " + pin_value(wp);
      } else if (w == 8) {
        std::string a = spell_int(rng, rk == ByKey ? id : 50, wp);
        std::string b = pin_value(wp);
        write = "REPLACE INTO " + tn + " (id, " + pin_col + ") VALUES (" + a + ", " + b + ")";
      } else {
        continue;
      }
      break;
    }
    if (rp.empty()) check_shape(read);
    if (wp.empty()) check_shape(write);
    Derived r, w;
    derive(compile(read, sample()), pos(rp), r);
    derive(compile(write, sample()), pos(wp), w);
    BOOST_REQUIRE_MESSAGE(!r.uncacheable && !w.invalidate_all, read << " / " << write);
    Names dep(r.depends.begin(), r.depends.end());
    bool shared = false;
    for (auto& n : w.invalidates) shared |= dep.count(n) != 0;
    BOOST_CHECK_MESSAGE(shared, "read: " << read << "\nwrite: " << write << "\ndepends: "
                                         << show(dep) << "\ninvalidates: "
                                         << show(Names(w.invalidates.begin(), w.invalidates.end())));
    for (auto& n : r.depends) BOOST_CHECK_MESSAGE(valid_name(n), n);
    for (auto& n : w.invalidates) BOOST_CHECK_MESSAGE(valid_name(n), n);
    ++checked;
  }
  BOOST_CHECK_EQUAL(checked, 4000);
}

// The negative control: writes to other rows, other values, other columns share no name.
BOOST_AUTO_TEST_CASE(precision_negative_control) {
  auto disjoint = [](std::string_view read, std::string_view write) {
    Derived r = run(read), w = run(write);
    Names dep(r.depends.begin(), r.depends.end());
    for (auto& n : w.invalidates)
      BOOST_CHECK_MESSAGE(!dep.count(n), read << " / " << write << " share " << n);
  };
  disjoint("SELECT name FROM items WHERE id = 5", "UPDATE items SET name = 'x' WHERE id = 6");
  disjoint("SELECT name FROM items WHERE category_id = 3",
           "INSERT INTO items (id, category_id, seller_id, name, description, initial_price, "
           "end_date) VALUES (77, 4, 1, 'n', 'd', 1, NOW())");
  disjoint("SELECT id, name FROM categories ORDER BY id",
           "UPDATE categories SET version = version + 1 WHERE id = 3");
  disjoint("SELECT nickname FROM users WHERE nickname = 'bob'",
           "INSERT INTO users (id, nickname) VALUES (5, 'alice')");
}

// ---- garbage ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(garbage_never_throws) {
  std::mt19937_64 rng(7);
  static const char* pieces[] = {"SELECT", " ", "(", ")", "'", "\"", "`", "/*", "*/", "/*!", "--",
                                 "#", "\n", ";", "?", ":a", "FROM", "items", "WHERE", "id", "=",
                                 "JOIN", "ON", "UNION", "WITH", "INSERT", "INTO", "VALUES",
                                 "UPDATE", "SET", "DELETE", ",", ".", "*", "\\", "\0", "\xff",
                                 "AND", "OR", "BETWEEN", "CASE", "END", "1", "x'", "@", "@@"};
  for (int it = 0; it < 20000; ++it) {
    std::string s;
    int n = int(rng() % 40);
    for (int k = 0; k < n; ++k) {
      if (rng() % 4 == 0) {
        s += char(rng());
      } else {
        const char* p = pieces[rng() % std::size(pieces)];
        s += *p ? std::string(p) : std::string(1, '\0');
      }
    }
    Compiled c;
    BOOST_REQUIRE_NO_THROW(c = compile(s, sample()));
    Params p;
    for (size_t k = 0; k < c.param_count; ++k)
      p.positional.push_back(rng() % 3 ? Value(std::to_string(rng() % 100)) : Value());
    Derived d;
    BOOST_REQUIRE_NO_THROW(derive(c, p, d));
    for (auto& name : d.depends) BOOST_REQUIRE_MESSAGE(valid_name(name), name);
    for (auto& name : d.invalidates) BOOST_REQUIRE_MESSAGE(valid_name(name), name);
  }
  // Deep nesting is refused, not a stack overflow.
  std::string deep = "SELECT " + std::string(100000, '(') + "1" + std::string(100000, ')');
  BOOST_CHECK(run(deep).uncacheable);
}

// Row facts (a locking read in the open transaction): a write keyed by a primary key names the
// values the row held instead of every value of every column.
namespace {
struct MapFacts : RowFacts {
  std::map<std::string, std::string> m;  // "T|K|C" -> value
  const std::string* value(std::string_view t, std::string_view k,
                           std::string_view c) const override {
    auto it = m.find(std::string(t) + "|" + std::string(k) + "|" + std::string(c));
    return it == m.end() ? nullptr : &it->second;
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(row_facts_make_keyed_writes_precise) {
  // The sample's bid.php: SELECT category_id, seller_id FROM items WHERE id = ? FOR UPDATE
  Compiled lock = compile("SELECT category_id, seller_id FROM items WHERE id = ? FOR UPDATE", sample());
  BOOST_REQUIRE_EQUAL(lock.statements.size(), 1u);
  BOOST_TEST(lock.statements[0].locking);
  BOOST_REQUIRE_EQUAL(lock.statements[0].fact_columns.size(), 2u);
  BOOST_TEST(lock.statements[0].fact_columns[0].first == "category_id");
  Derived ld;
  derive(lock, pos({"6"}), ld);
  BOOST_REQUIRE_EQUAL(ld.locked.size(), 1u);
  BOOST_TEST(ld.locked[0].table == "items");
  BOOST_TEST(ld.locked[0].key == "6");
  // Not facts: no lock, an alias, an expression, not keyed.
  for (const char* q : {"SELECT category_id FROM items WHERE id = 6",
                        "SELECT category_id AS c FROM items WHERE id = 6 FOR UPDATE",
                        "SELECT category_id + 1 FROM items WHERE id = 6 FOR UPDATE",
                        "SELECT category_id FROM items WHERE seller_id = 6 FOR UPDATE"}) {
    Compiled c = compile(q, sample());
    Derived d;
    derive(c, {}, d);
    BOOST_TEST(d.locked.empty(), q);
  }
  BOOST_TEST(compile("SELECT name FROM items WHERE id = 6 LOCK IN SHARE MODE", sample()).statements[0].locking);

  MapFacts f;
  f.m["items|6|category_id"] = "4";
  f.m["items|6|seller_id"] = "9";
  Derived w;
  derive(compile("UPDATE items SET max_bid = GREATEST(max_bid, ?), nb_bids = nb_bids + 1 WHERE id = ?",
                 sample()),
         pos({"10", "6"}), w, &f);
  Names inv(w.invalidates.begin(), w.invalidates.end());
  BOOST_TEST(inv.count("row:items:6"));
  BOOST_TEST(inv.count("val:items:category_id:4"));
  BOOST_TEST(inv.count("val:items:seller_id:9"));
  BOOST_TEST(!inv.count("vals:items:category_id"));
  BOOST_TEST(inv.count("vals:items:max_bid"));  // not known: every value
  BOOST_REQUIRE_EQUAL(w.written.size(), 1u);
  BOOST_TEST(w.written[0].key == "6");
  // the category page of category 3 and the seller page of user 2 are not invalidated ...
  for (const char* read : {"SELECT id, name, max_bid FROM items WHERE category_id = 3",
                           "SELECT id, name FROM items WHERE seller_id = 2"}) {
    Derived r = run(read);
    for (auto& n : r.depends) BOOST_TEST(!inv.count(n), read << " shares " << n);
  }
  // ... those of category 4 and seller 9 are
  for (const char* read : {"SELECT id, name, max_bid FROM items WHERE category_id = 4",
                           "SELECT id, name FROM items WHERE seller_id = 9"}) {
    Derived r = run(read);
    bool shared = false;
    for (auto& n : r.depends) shared |= inv.count(n) != 0;
    BOOST_TEST(shared, read);
  }
  // Without facts the same write reaches every value-pinned reader of items (sound, coarser).
  Derived nf = run("UPDATE items SET nb_bids = nb_bids + 1 WHERE id = 6");
  Names ninv(nf.invalidates.begin(), nf.invalidates.end());
  BOOST_TEST(ninv.count("vals:items:category_id"));
  // A SET of a pinned column names the old value (fact) and the new one.
  Derived mv;
  derive(compile("UPDATE items SET category_id = ? WHERE id = 6", sample()), pos({"5"}), mv, &f);
  Names minv(mv.invalidates.begin(), mv.invalidates.end());
  BOOST_TEST(minv.count("val:items:category_id:4"));
  BOOST_TEST(minv.count("val:items:category_id:5"));
  // A keyed DELETE names the row's values too.
  Derived del;
  derive(compile("DELETE FROM items WHERE id = 6", sample()), {}, del, &f);
  Names dinv(del.invalidates.begin(), del.invalidates.end());
  BOOST_TEST(dinv.count("val:items:category_id:4"));
  BOOST_TEST(dinv.count("table:items"));
  BOOST_REQUIRE_EQUAL(del.written.size(), 1u);
  BOOST_TEST(del.written[0].deleted);
}

BOOST_AUTO_TEST_CASE(shapes_take_literals_out) {
  auto sh = shape_of("SELECT name FROM items WHERE id = 42 AND `name` <> 'it''s;' -- c\n");
  BOOST_REQUIRE(sh.has_value());
  BOOST_TEST(sh->text == "select name from items where id = ? and `name` <> ?");
  BOOST_REQUIRE_EQUAL(sh->values.positional.size(), 2u);
  BOOST_TEST(*sh->values.positional[1] == "it's;");
  BOOST_TEST(shape_of("SELECT 1 FROM t WHERE a = -5")->text == "select ? from t where a = ?");
  BOOST_TEST(*shape_of("SELECT 1 FROM t WHERE a = -5")->values.positional[1] == "-5");
  BOOST_TEST(shape_of("SELECT a - 5 FROM t")->text == "select a - ? from t");  // binary minus
  // not shaped: statements whose literals steer the classification, parameters, several
  // statements, errors, no literal
  for (const char* q : {"SET autocommit = 0", "START TRANSACTION", "SELECT * FROM t WHERE id = ?",
                        "SELECT * FROM t WHERE id = :id", "SELECT 1; SELECT 2", "SELECT 'x",
                        "SELECT a FROM t", "CALL p(1)", "ALTER TABLE t ADD c INT DEFAULT 1"})
    BOOST_TEST(!shape_of(q).has_value(), q);
  BOOST_TEST(shape_of("SELECT 1;").has_value());  // a trailing ';' is fine
  // the sample's statements, with values inlined: same names as written
  for (const char* q :
       {"SELECT i.id, i.name, i.description, i.initial_price, i.max_bid, i.nb_bids, i.end_date, "
        "i.version, i.category_id, i.seller_id, u.nickname AS seller, c.name AS category FROM items i "
        "JOIN users u ON u.id = i.seller_id JOIN categories c ON c.id = i.category_id WHERE i.id = 17",
        "SELECT b.id, b.amount, b.created, b.user_id, u.nickname FROM bids b JOIN users u ON u.id = "
        "b.user_id WHERE b.item_id = 17 ORDER BY b.id DESC LIMIT 10",
        "SELECT id, name, max_bid, nb_bids, end_date FROM items WHERE category_id = 3 ORDER BY id LIMIT 50 OFFSET 0",
        "SELECT category_id, seller_id FROM items WHERE id = 17 FOR UPDATE",
        "INSERT INTO bids (item_id, user_id, amount, created) VALUES (17, 5, 12.5, NOW())",
        "UPDATE items SET max_bid = GREATEST(max_bid, 12.5), nb_bids = nb_bids + 1, version = version + 1 WHERE id = 17",
        "UPDATE categories SET version = version + 1 WHERE id = 3",
        "UPDATE items SET name = 'a b', description = 'x', category_id = 4, version = version + 1 WHERE id = 17",
        "DELETE FROM bids WHERE item_id = 17",
        "REPLACE INTO categories VALUES (1, 'Books', 1)"})
    check_shape(q);
}
