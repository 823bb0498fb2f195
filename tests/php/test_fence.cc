// tests/php/test_fence.cc — php_ext/fence.h alone: what a SQL text means for the fence, the
// check's SQL (quoting), what its answer says, the messages, and what the glue does before a write
// given the connection's server status and what it already checked.
#define BOOST_TEST_MODULE php_fence_unit
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include "php_ext/fence.h"
#include "sqldeps/deps.h"

using namespace tierce::php;
namespace sd = tierce::sqldeps;

namespace {

FenceText text(const std::string& sql) {
  static const sd::Schema schema;
  return fence_text(sd::compile(sql, schema));
}

constexpr unsigned kAutocommitIdle = kStatusAutocommit;               // no transaction
constexpr unsigned kInExplicit = kStatusAutocommit | kStatusInTrans;  // after BEGIN
constexpr unsigned kAutocommitOffIdle = 0;                            // autocommit(false)
constexpr unsigned kAutocommitOffInTxn = kStatusInTrans;

}  // namespace

BOOST_AUTO_TEST_CASE(reads_and_transaction_control_do_not_write) {
  for (const char* sql :
       {"SELECT * FROM items WHERE id = 1", "SELECT * FROM items FOR UPDATE",
        "SELECT state FROM t LOCK IN SHARE MODE", "SHOW TABLES", "SET @a = 1", "BEGIN", "COMMIT",
        "ROLLBACK", "SAVEPOINT a", "ROLLBACK TO SAVEPOINT a", "SET autocommit = 0"}) {
    FenceText t = text(sql);
    BOOST_TEST(!t.writes, sql);
    BOOST_TEST(!t.write_after_boundary, sql);
  }
  BOOST_TEST(text("BEGIN").ends_transaction);
  BOOST_TEST(text("COMMIT").ends_transaction);
  BOOST_TEST(text("SET autocommit = 1").ends_transaction);
  BOOST_TEST(!text("SAVEPOINT a").ends_transaction);
  BOOST_TEST(!text("SELECT 1").ends_transaction);
}

BOOST_AUTO_TEST_CASE(writes_and_self_committing_statements) {
  for (const char* sql : {"UPDATE items SET price = 1 WHERE id = 1",
                          "INSERT INTO bids (item_id, amount) VALUES (1, 2)",
                          "DELETE FROM items WHERE id = ?", "REPLACE INTO items VALUES (1, 'a')"}) {
    FenceText t = text(sql);
    BOOST_TEST(t.writes, sql);
    BOOST_TEST(!t.self_committing, sql);
    BOOST_TEST(!t.ends_transaction, sql);
    BOOST_TEST(t.statements == 1u);
  }
  // DDL, LOCK TABLES, CALL and statements the classifier cannot read commit (or may) by themselves
  for (const char* sql : {"CREATE TABLE x (a INT)", "ALTER TABLE items ADD c INT",
                          "DROP TABLE bids", "TRUNCATE items", "LOCK TABLES items WRITE",
                          "CALL p(1)", "FROBNICATE everything", "XA START 'x'"}) {
    FenceText t = text(sql);
    BOOST_TEST(t.writes, sql);
    BOOST_TEST(t.self_committing, sql);
    BOOST_TEST(t.ends_transaction, sql);
  }
  FenceText u = fence_text_unknown();
  BOOST_TEST((u.writes && u.self_committing && u.ends_transaction));
}

BOOST_AUTO_TEST_CASE(a_write_after_a_boundary_in_one_text) {
  FenceText a =
      text("UPDATE items SET price = 1 WHERE id = 1; UPDATE items SET price = 2 WHERE id = 2");
  BOOST_TEST(a.statements == 2u);
  BOOST_TEST(a.writes);
  BOOST_TEST(!a.write_after_boundary);
  BOOST_TEST(text("UPDATE items SET price = 1 WHERE id = 1; COMMIT").ends_transaction);
  BOOST_TEST(!text("UPDATE items SET price = 1 WHERE id = 1; COMMIT").write_after_boundary);
  for (const char* sql :
       {"UPDATE items SET price = 1 WHERE id = 1; COMMIT; UPDATE items SET price = 2 WHERE id = 2",
        "BEGIN; UPDATE items SET price = 1 WHERE id = 1",
        "CREATE TABLE x (a INT); INSERT INTO x VALUES (1)",
        "SET autocommit = 1; DELETE FROM items WHERE id = 3",
        "SELECT 1; ROLLBACK; INSERT INTO bids (item_id, amount) VALUES (1, 1)"})
    BOOST_TEST(text(sql).write_after_boundary, sql);
  // the first write decides whether a refusal can be left to the server
  BOOST_TEST(
      !text("UPDATE items SET price = 1 WHERE id = 1; CREATE TABLE y (a INT)").self_committing);
  BOOST_TEST(
      text("UPDATE items SET price = 1 WHERE id = 1; CREATE TABLE y (a INT)").ends_transaction);
}

BOOST_AUTO_TEST_CASE(the_check_sql_quotes_what_it_splices) {
  BOOST_TEST(fence_check_sql("tierce.fence", "app2") ==
             "SELECT state, epoch, changed_by, changed_at FROM `tierce`.`fence` WHERE node = "
             "'app2' LOCK IN SHARE MODE");
  BOOST_TEST(quote_table("db_1.order") == "`db_1`.`order`");  // a reserved word is fine
  BOOST_TEST(sql_literal("app-1.eu_west") == "'app-1.eu_west'");
  // anything else as hex: no quote, backslash or charset changes its meaning
  BOOST_TEST(sql_literal("a'b") == "X'612762'");
  BOOST_TEST(sql_literal("x\\' OR 1=1 -- ") == "X'785C27204F5220313D31202D2D20'");
  BOOST_TEST(sql_literal("") == "X''");
  BOOST_TEST(sql_literal(std::string("\xc3\xa9", 2)) == "X'C3A9'");
}

BOOST_AUTO_TEST_CASE(what_the_answer_says) {
  FenceVerdict in = fence_verdict({{"in", "3", "", "2025-01-01 00:00:00.000"}});
  BOOST_TEST(in.admitted());
  BOOST_TEST(fence_refusal(in, "app1", "tierce.fence") == "");
  FenceVerdict out = fence_verdict({{"out", "7", "app1", "2025-05-01 12:00:00.123"}});
  BOOST_TEST(!out.admitted());
  BOOST_TEST((out.state == FenceVerdict::State::Out));
  std::string m = fence_refusal(out, "app2", "tierce.fence");
  BOOST_TEST_MESSAGE(m);
  BOOST_TEST(m.rfind("PHPEXT0301 app node app2 is OUT of the fence (tierce.fence: epoch 7, by home "
                     "app1 at 2025-05-01 12:00:00.123)",
                     0) == 0,
             m);
  BOOST_TEST(m.find("refused until the homes re-admit it") != std::string::npos);
  BOOST_TEST((fence_verdict({{"OUT", "1"}}).state == FenceVerdict::State::Out));
  FenceVerdict missing = fence_verdict({});
  BOOST_TEST((missing.state == FenceVerdict::State::Missing));
  std::string mm = fence_refusal(missing, "app2", "tierce.fence");
  BOOST_TEST(mm.rfind("PHPEXT0302 app node app2 has no row in tierce.fence", 0) == 0, mm);
  FenceVerdict odd = fence_verdict({{"maybe", "1"}});
  BOOST_TEST((odd.state == FenceVerdict::State::Error));
  BOOST_TEST(fence_refusal(odd, "app2", "tierce.fence").rfind("PHPEXT0303", 0) == 0);
  FenceVerdict failed = fence_failed(1146, "Table 'tierce.fence' doesn't exist");
  std::string fm = fence_refusal(failed, "app2", "tierce.fence");
  BOOST_TEST(fm.rfind("PHPEXT0303 the fence check of app node app2 failed (1146: Table", 0) == 0,
             fm);
  BOOST_TEST(!fence_failed(0, "").error.empty());
  BOOST_TEST(fence_unfenceable(text("BEGIN; UPDATE items SET price = 1 WHERE id = 1"), "app2")
                 .rfind("PHPEXT0304", 0) == 0);
  BOOST_TEST(fence_commit_failed("app2", "2006: gone").rfind("PHPEXT0305", 0) == 0);
  BOOST_TEST(fence_outside_transaction("app2").rfind("PHPEXT0306", 0) == 0);
}

BOOST_AUTO_TEST_CASE(what_to_do_before_a_write) {
  FenceConn fresh, checked, refused;
  checked.checked = true;
  refused.refused = true;
  FenceText w = text("UPDATE items SET price = 1 WHERE id = 1");
  FenceText two = text("UPDATE items SET price = 1 WHERE id = 1; DELETE FROM bids WHERE id = 2");
  FenceText ddl = text("CREATE TABLE x (a INT)");
  FenceText after = text("COMMIT; UPDATE items SET price = 1 WHERE id = 1");
  // autocommit, no transaction: the check and the write become one transaction
  BOOST_TEST((fence_plan(kAutocommitIdle, fresh, w, false) == FenceStep::Wrap));
  BOOST_TEST((fence_plan(kAutocommitIdle, fresh, ddl, false) == FenceStep::Wrap));
  // ... which a call that leaves results pending cannot end: refused; PDO::exec can
  BOOST_TEST((fence_plan(kAutocommitIdle, fresh, two, false) == FenceStep::RefuseUnrun));
  BOOST_TEST((fence_plan(kAutocommitIdle, fresh, two, true) == FenceStep::Wrap));
  // "checked" and "refused" are about an open transaction: none is open
  BOOST_TEST((fence_plan(kAutocommitIdle, checked, w, false) == FenceStep::Wrap));
  BOOST_TEST((fence_plan(kAutocommitIdle, refused, w, false) == FenceStep::Wrap));
  // in a transaction: checked once, before its first write
  BOOST_TEST((fence_plan(kInExplicit, fresh, w, false) == FenceStep::CheckInTxn));
  BOOST_TEST((fence_plan(kInExplicit, fresh, two, false) == FenceStep::CheckInTxn));
  BOOST_TEST((fence_plan(kInExplicit, checked, w, false) == FenceStep::Pass));
  BOOST_TEST((fence_plan(kAutocommitOffIdle, fresh, w, false) == FenceStep::CheckInTxn));
  BOOST_TEST((fence_plan(kAutocommitOffIdle, checked, w, false) == FenceStep::CheckInTxn));
  BOOST_TEST((fence_plan(kAutocommitOffInTxn, checked, w, false) == FenceStep::Pass));
  // a refused transaction: the server refuses its writes; not what would end it first
  BOOST_TEST((fence_plan(kInExplicit, refused, w, false) == FenceStep::Refused));
  BOOST_TEST((fence_plan(kInExplicit, refused, ddl, false) == FenceStep::RefuseUnrun));
  // a write after a boundary in the same text: never (whatever the state)
  for (unsigned st : {kAutocommitIdle, kInExplicit, kAutocommitOffIdle, kAutocommitOffInTxn})
    for (const FenceConn* c : {&fresh, &checked, &refused})
      BOOST_TEST((fence_plan(st, *c, after, true) == FenceStep::RefuseUnrun));
}

BOOST_AUTO_TEST_CASE(a_refusal_code_is_its_log_id_number) {
  FenceVerdict out;
  out.state = FenceVerdict::State::Out;
  FenceVerdict missing;
  missing.state = FenceVerdict::State::Missing;
  FenceVerdict failed = fence_failed(1205, "Lock wait timeout exceeded");
  BOOST_TEST(fence_refusal_code(out) == 301);
  BOOST_TEST(fence_refusal_code(missing) == 302);
  BOOST_TEST(fence_refusal_code(failed) == 303);
  for (const FenceVerdict* v : {&out, &missing, &failed})
    BOOST_TEST(fence_refusal(*v, "app1", "tierce.fence").rfind(
                   "PHPEXT0" + std::to_string(fence_refusal_code(*v)) + " ", 0) == 0u);
}
