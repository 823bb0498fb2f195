// tests/php/test_tracker.cc — RequestTracker (php_ext/tracker.h) alone: which names a request's
// statements add to its page dependencies and invalidations, per connection and transaction, and
// when linearizable mode marks names pending and releases them (a recording MarkSink stands in
// for the homes here; tests/php/test_php_embed.cc uses the real ones).
#define BOOST_TEST_MODULE php_tracker
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "php_ext/tracker.h"

using namespace tierce::php;
namespace sd = tierce::sqldeps;

namespace {

struct Recorder : MarkSink {
  struct Call {
    bool pend;
    std::vector<std::string> names;
    bool all;
    uint64_t token;
    uint32_t ms;  // pend: its timeout; release: give_up_ms (0 = the rule)
  };
  std::vector<Call> calls;
  bool fail = false;  // a pend does not reach every home (some homes may hold the mark)
  bool pend(const NameSet& n, uint64_t token, uint32_t, uint32_t timeout_ms, std::string& error,
            uint64_t& us) override {
    calls.push_back({true, n.names(), n.all(), token, timeout_ms});
    if (fail) {
      error = "app2 (sent, not acknowledged)";
      return false;
    }
    us = 7;
    return true;
  }
  bool release(const NameSet& n, uint64_t token, uint32_t give_up_ms, std::string&) override {
    calls.push_back({false, n.names(), n.all(), token, give_up_ms});
    return true;
  }
};

struct Fixture {
  sd::Schema schema = sd::Schema::parse_sql(
      "CREATE TABLE items (id INT PRIMARY KEY, name TEXT, category_id INT, price INT);");
  Counters counters;
  Recorder rec;
  std::vector<std::string> warnings;
  RequestTracker make(bool linearizable) {
    Settings s;
    s.auto_mode = true;
    s.linearizable = linearizable;
    RequestTracker t(s, counters, &rec, [this](const std::string& w) { warnings.push_back(w); });
    t.start_request();
    return t;
  }
  // Runs `sql` on `conn` as one observed call that succeeds.
  void run(RequestTracker& t, uint64_t conn, const std::string& sql, sd::Params p = {}) {
    sd::Compiled c = sd::compile(sql, schema);
    RequestTracker::Ticket k = t.before_statement(conn, c, p);
    t.after(k, true);
  }
};

bool has(const NameSet& s, const std::string& n) {
  for (const auto& x : s.names())
    if (x == n) return true;
  return false;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(reads_add_dependencies, Fixture) {
  RequestTracker t = make(false);
  run(t, 1, "SELECT name FROM items WHERE id = 4");
  run(t, 1, "SELECT name FROM items WHERE id = ?", sd::Params{{std::string("5")}, {}});
  BOOST_TEST(has(t.depends(), "row:items:4"));
  BOOST_TEST(has(t.depends(), "row:items:5"));
  BOOST_TEST(t.invalidates().empty());
}

BOOST_FIXTURE_TEST_CASE(autocommit_write_invalidates_at_once, Fixture) {
  RequestTracker t = make(false);
  run(t, 1, "UPDATE items SET price = 3 WHERE id = 9");
  BOOST_TEST(has(t.invalidates(), "row:items:9"));
  BOOST_TEST(rec.calls.empty());
}

BOOST_FIXTURE_TEST_CASE(transactions_are_per_connection, Fixture) {
  RequestTracker t = make(false);
  auto b = t.before_begin(1);
  t.after(b, true);
  run(t, 1, "UPDATE items SET price = 3 WHERE id = 1");
  run(t, 2, "UPDATE items SET price = 3 WHERE id = 2");  // connection 2: autocommit
  BOOST_TEST(!has(t.invalidates(), "row:items:1"));
  BOOST_TEST(has(t.invalidates(), "row:items:2"));
  BOOST_TEST(t.open_transactions() == 1u);
  auto c = t.before_commit(1);
  t.after(c, true);
  BOOST_TEST(has(t.invalidates(), "row:items:1"));
  BOOST_TEST(t.open_transactions() == 0u);
}

BOOST_FIXTURE_TEST_CASE(rollback_drops_and_rollback_to_savepoint_keeps, Fixture) {
  RequestTracker t = make(false);
  run(t, 1, "BEGIN");
  run(t, 1, "UPDATE items SET price = 3 WHERE id = 1");
  run(t, 1, "ROLLBACK");
  BOOST_TEST(t.invalidates().empty());
  run(t, 1, "START TRANSACTION");
  run(t, 1, "SAVEPOINT s1");
  run(t, 1, "UPDATE items SET price = 3 WHERE id = 2");
  run(t, 1, "ROLLBACK TO SAVEPOINT s1");
  run(t, 1, "COMMIT");
  BOOST_TEST(has(t.invalidates(), "row:items:2"));  // conservative: kept
}

BOOST_FIXTURE_TEST_CASE(autocommit_off_and_back_on_commits, Fixture) {
  RequestTracker t = make(false);
  auto a = t.before_autocommit(1, false);
  t.after(a, true);
  run(t, 1, "UPDATE items SET price = 3 WHERE id = 1");
  BOOST_TEST(t.invalidates().empty());
  auto b = t.before_autocommit(1, true);  // MySQL commits the open transaction
  t.after(b, true);
  BOOST_TEST(has(t.invalidates(), "row:items:1"));
  run(t, 1, "SET autocommit = 0");
  run(t, 1, "UPDATE items SET price = 3 WHERE id = 5");
  BOOST_TEST(!has(t.invalidates(), "row:items:5"));
  run(t, 1, "COMMIT");
  BOOST_TEST(has(t.invalidates(), "row:items:5"));
}

BOOST_FIXTURE_TEST_CASE(ddl_commits_implicitly_and_invalidates_all, Fixture) {
  RequestTracker t = make(false);
  run(t, 1, "BEGIN");
  run(t, 1, "UPDATE items SET price = 3 WHERE id = 1");
  run(t, 1, "ALTER TABLE items ADD COLUMN x INT");
  BOOST_TEST(t.invalidates().all());
  BOOST_TEST(t.open_transactions() == 0u);
}

BOOST_FIXTURE_TEST_CASE(open_transaction_at_request_end_is_invalidated, Fixture) {
  RequestTracker t = make(false);
  run(t, 1, "BEGIN");
  run(t, 1, "DELETE FROM items WHERE id = 8");
  t.end_request();
  BOOST_TEST(has(t.invalidates(), "row:items:8"));
}

BOOST_FIXTURE_TEST_CASE(linearizable_pends_before_and_releases_after, Fixture) {
  RequestTracker t = make(true);
  // autocommit: pend before the statement, release after it
  sd::Compiled c = sd::compile("UPDATE items SET price = 1 WHERE id = 3", schema);
  RequestTracker::Ticket k = t.before_statement(1, c, {});
  BOOST_REQUIRE(rec.calls.size() == 1u);
  BOOST_TEST(rec.calls[0].pend);
  BOOST_TEST(k.token == rec.calls[0].token);
  t.after(k, true);
  BOOST_REQUIRE(rec.calls.size() == 2u);
  BOOST_TEST(!rec.calls[1].pend);
  BOOST_TEST(rec.calls[1].token == rec.calls[0].token);
  BOOST_TEST(rec.calls[1].names == rec.calls[0].names);
  BOOST_TEST(t.invalidates().empty());  // the release was the final invalidation
  // a transaction: nothing until COMMIT; then one pend with every name, one release
  run(t, 1, "BEGIN");
  run(t, 1, "UPDATE items SET price = 1 WHERE id = 4");
  run(t, 1, "UPDATE items SET name = 'x' WHERE id = 5");
  BOOST_TEST(rec.calls.size() == 2u);
  auto cm = t.before_commit(1);
  BOOST_REQUIRE(rec.calls.size() == 3u);
  BOOST_TEST(rec.calls[2].pend);
  bool four = false, five = false;
  for (const auto& n : rec.calls[2].names) {
    four |= n == "row:items:4";
    five |= n == "row:items:5";
  }
  BOOST_TEST((four && five));
  t.after(cm, false);  // even a failed COMMIT releases (it may have committed)
  BOOST_TEST(rec.calls.size() == 4u);
  // a rolled-back transaction pends nothing
  run(t, 1, "BEGIN");
  run(t, 1, "UPDATE items SET price = 1 WHERE id = 6");
  run(t, 1, "ROLLBACK");
  BOOST_TEST(rec.calls.size() == 4u);
  BOOST_TEST(counters.pends == 2u);
  BOOST_TEST(counters.releases == 2u);
}

BOOST_FIXTURE_TEST_CASE(linearizable_pend_waits_the_pend_timeout_release_the_rule, Fixture) {
  RequestTracker t = make(true);
  run(t, 1, "UPDATE items SET price = 1 WHERE id = 3");
  BOOST_REQUIRE(rec.calls.size() == 2u);
  BOOST_TEST(rec.calls[0].ms == Settings{}.pend_timeout_ms);  // the Pend gives up after it
  BOOST_TEST(rec.calls[1].ms == 0u);  // the Release after a commit: every home or the bound
  BOOST_TEST(counters.writes_refused == 0u);
}

BOOST_FIXTURE_TEST_CASE(linearizable_autocommit_write_refused_when_a_pend_misses_a_home, Fixture) {
  // Before: the statement ran after a Pend that did not reach every home (invalidated after the
  // commit only), or after the whole fence bound. Now it does not run at all.
  RequestTracker t = make(true);
  rec.fail = true;
  sd::Compiled c = sd::compile("UPDATE items SET price = 1 WHERE id = 3", schema);
  RequestTracker::Ticket k = t.before_statement(1, c, {});
  BOOST_TEST(k.refused);
  BOOST_TEST(!k.rollback);  // autocommit: nothing open to roll back
  BOOST_TEST(k.refusal.find("PHPEXT0101") != std::string::npos, k.refusal);
  BOOST_TEST(k.refusal.find("app2") != std::string::npos, k.refusal);
  t.after(k, false);  // the glue skipped the call (an exception: not ok)
  // the marks the homes that acknowledged hold are released, without waiting for the bound
  BOOST_REQUIRE(rec.calls.size() == 2u);
  BOOST_TEST(!rec.calls[1].pend);
  BOOST_TEST(rec.calls[1].token == rec.calls[0].token);
  BOOST_TEST(rec.calls[1].ms == Settings{}.pend_timeout_ms);
  BOOST_TEST(t.invalidates().empty());  // nothing was committed: nothing to invalidate
  BOOST_TEST(t.open_transactions() == 0u);
  BOOST_TEST(counters.writes_refused == 1u);
  BOOST_TEST(counters.pends == 0u);
  t.end_request();
  BOOST_TEST(t.invalidates().empty());
}

BOOST_FIXTURE_TEST_CASE(linearizable_commit_refused_then_rolled_back, Fixture) {
  RequestTracker t = make(true);
  run(t, 1, "BEGIN");
  run(t, 1, "UPDATE items SET price = 1 WHERE id = 4");
  rec.fail = true;
  RequestTracker::Ticket cm = t.before_commit(1);
  BOOST_TEST(cm.refused);
  BOOST_TEST(cm.rollback);  // the transaction is open and holds its row locks
  // the connection is as before the COMMIT: its transaction still open with its writes
  BOOST_TEST(t.open_transactions() == 1u);
  // the glue rolls it back (an observed call) ...
  RequestTracker::Ticket rb = t.before_rollback(1);
  t.after(rb, true);
  BOOST_TEST(t.open_transactions() == 0u);
  // ... and the COMMIT's call ends with its exception: the marks are released
  t.after(cm, false);
  BOOST_REQUIRE(rec.calls.size() == 2u);
  BOOST_TEST(!rec.calls[1].pend);
  BOOST_TEST(rec.calls[1].ms > 0u);
  BOOST_TEST(t.invalidates().empty());
  // the homes are back: the next transaction commits as before
  rec.fail = false;
  run(t, 1, "BEGIN");
  run(t, 1, "UPDATE items SET price = 2 WHERE id = 5");
  run(t, 1, "COMMIT");
  BOOST_REQUIRE(rec.calls.size() == 4u);
  BOOST_TEST(rec.calls[3].ms == 0u);
  BOOST_TEST(counters.writes_refused == 1u);
  BOOST_TEST(counters.pends == 1u);
}

BOOST_FIXTURE_TEST_CASE(refused_commit_whose_rollback_fails_stays_pending, Fixture) {
  // A refused COMMIT whose rollback failed leaves the transaction open: a later COMMIT must pend
  // its writes again (else they would commit without any invalidation), the end of the request
  // invalidates them.
  RequestTracker t = make(true);
  run(t, 1, "BEGIN");
  run(t, 1, "UPDATE items SET price = 1 WHERE id = 4");
  rec.fail = true;
  RequestTracker::Ticket cm = t.before_commit(1);
  BOOST_REQUIRE(cm.refused);
  RequestTracker::Ticket rb = t.before_rollback(1);
  t.after(rb, false);
  t.after(cm, false);
  BOOST_TEST(t.open_transactions() == 1u);
  rec.fail = false;
  size_t before = rec.calls.size();
  run(t, 1, "COMMIT");
  BOOST_REQUIRE(rec.calls.size() == before + 2);
  BOOST_TEST(rec.calls[before].pend);
  const auto& names = rec.calls[before].names;
  BOOST_TEST((std::find(names.begin(), names.end(), "row:items:4") != names.end()));
}

BOOST_FIXTURE_TEST_CASE(refused_autocommit_on_leaves_autocommit_off, Fixture) {
  // autocommit(true) commits the open transaction: refused, the call did not run, so the
  // connection is still in autocommit-off mode (its next write is in a transaction).
  RequestTracker t = make(true);
  RequestTracker::Ticket off = t.before_autocommit(1, false);
  t.after(off, true);
  run(t, 1, "UPDATE items SET price = 1 WHERE id = 4");
  rec.fail = true;
  RequestTracker::Ticket on = t.before_autocommit(1, true);
  BOOST_TEST(on.refused);
  BOOST_TEST(on.rollback);
  t.after(on, false);
  RequestTracker::Ticket rb = t.before_rollback(1);
  t.after(rb, true);
  rec.fail = false;
  size_t before = rec.calls.size();
  run(t, 1, "UPDATE items SET price = 2 WHERE id = 5");
  BOOST_TEST(rec.calls.size() == before);  // not committed by itself: autocommit is still off
  BOOST_TEST(t.open_transactions() == 1u);
}

BOOST_FIXTURE_TEST_CASE(refused_multi_statement_runs_nothing, Fixture) {
  // One call, two commit points: the second one's Pend fails: the whole call is refused (nothing
  // of it runs), one token covers both Pends and is released once.
  struct FailSecond : Recorder {
    bool pend(const NameSet& n, uint64_t token, uint32_t ttl, uint32_t timeout_ms,
              std::string& error, uint64_t& us) override {
      fail = !calls.empty();
      return Recorder::pend(n, token, ttl, timeout_ms, error, us);
    }
  } rec2;
  Settings s;
  s.auto_mode = s.linearizable = true;
  RequestTracker u(s, counters, &rec2, nullptr);
  u.start_request();
  sd::Compiled c = sd::compile(
      "UPDATE items SET price = 1 WHERE id = 4; UPDATE items SET price = 1 WHERE id = 5", schema);
  RequestTracker::Ticket k = u.before_statement(1, c, {});
  BOOST_TEST(k.refused);
  BOOST_REQUIRE(rec2.calls.size() == 2u);
  BOOST_TEST(rec2.calls[0].token == rec2.calls[1].token);
  u.after(k, false);
  BOOST_REQUIRE(rec2.calls.size() == 3u);
  BOOST_TEST(!rec2.calls[2].pend);
  BOOST_TEST(rec2.calls[2].token == rec2.calls[0].token);
  BOOST_TEST(u.invalidates().empty());
}

BOOST_FIXTURE_TEST_CASE(explicit_mode_derives_nothing, Fixture) {
  Settings s;  // auto off
  RequestTracker t(s, counters, &rec, nullptr);
  t.start_request();
  run(t, 1, "SELECT name FROM items WHERE id = 4");
  run(t, 1, "UPDATE items SET price = 3 WHERE id = 9");
  BOOST_TEST(t.depends().empty());
  BOOST_TEST(t.invalidates().empty());
  t.add_depends("item:4");
  BOOST_TEST(t.depends().joined() == "item:4");
  BOOST_TEST(counters.statements == 2u);  // still counted
}

BOOST_FIXTURE_TEST_CASE(locked_rows_are_facts_until_the_transaction_ends, Fixture) {
  RequestTracker t = make(false);
  run(t, 1, "BEGIN");
  sd::Compiled lock = sd::compile("SELECT category_id, name FROM items WHERE id = 7 FOR UPDATE", schema);
  RequestTracker::Ticket k = t.before_statement(1, lock, {});
  t.after(k, true);
  BOOST_REQUIRE_EQUAL(k.locked.size(), 1u);
  t.record_fact(1, k.txn, k.locked[0], "category_id", "3");
  t.record_fact(1, k.txn, k.locked[0], "name", "lamp");
  t.record_fact(1, k.txn, k.locked[0], "price", "9");  // not a column of that read: ignored
  BOOST_TEST(t.facts(1) == 2u);
  // a keyed update uses them ...
  run(t, 1, "UPDATE items SET price = 1 WHERE id = 7");
  // ... and a SET of a fact column moves the fact
  run(t, 1, "UPDATE items SET category_id = 4 WHERE id = 7");
  run(t, 1, "UPDATE items SET price = 2 WHERE id = 7");
  run(t, 1, "COMMIT");
  BOOST_TEST(has(t.invalidates(), "val:items:category_id:3"));
  BOOST_TEST(has(t.invalidates(), "val:items:category_id:4"));
  BOOST_TEST(!has(t.invalidates(), "vals:items:category_id"));
  BOOST_TEST(t.facts(1) == 0u);  // the transaction ended
  // a fact recorded for an ended transaction is ignored; a failed write forgets every fact
  t.record_fact(1, k.txn, k.locked[0], "category_id", "3");
  BOOST_TEST(t.facts(1) == 0u);
  run(t, 1, "BEGIN");
  RequestTracker::Ticket k2 = t.before_statement(1, lock, {});
  t.after(k2, true);
  t.record_fact(1, k2.txn, k2.locked[0], "category_id", "3");
  BOOST_TEST(t.facts(1) == 1u);
  sd::Compiled upd = sd::compile("UPDATE items SET category_id = 5 WHERE id = 7", schema);
  RequestTracker::Ticket w = t.before_statement(1, upd, {});
  t.after(w, false);
  BOOST_TEST(t.facts(1) == 0u);
  // autocommit: no facts at all
  run(t, 2, "SELECT category_id FROM items WHERE id = 7 FOR UPDATE");
  BOOST_TEST(t.facts(2) == 0u);
}

BOOST_AUTO_TEST_CASE(a_dependency_name_is_one_word_without_commas) {
  BOOST_TEST(dependency_name_problem("item:42") == nullptr);
  BOOST_TEST(dependency_name_problem(std::string(256, 'a')) == nullptr);
  BOOST_TEST(std::string(dependency_name_problem("")) == "is empty");
  BOOST_TEST(std::string(dependency_name_problem(std::string(257, 'a'))) ==
             "is longer than 256 bytes");
  for (const std::string& bad : {std::string("item 42"), std::string("item,42"),
                                 std::string("item\t42"), std::string("item\x7f"),
                                 std::string("a\0b", 3)})
    BOOST_TEST(std::string(dependency_name_problem(bad)) ==
               "contains a blank, comma or control character");
  BOOST_TEST(dependency_name_problem("caf\xc3\xa9") == nullptr);  // bytes above 0x7f are kept
}
