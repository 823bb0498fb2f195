// tests/coherence_check/test_analysis.cc — tierce-check's analysis of a finished run
// (tools/tierce-check/analysis.h) on hand-built histories: a read is stale only against a write
// that returned before it started; overlapping writes never make a read stale; windows count
// what started in them; the error ratio and --strict decide the verdict. --sql-writers: an SQL
// write's stale window is the last read after its commit still showing an older version (by
// version number, PHP and SQL writes interleaved); only a read more than the bound after the
// commit is an SQL stale read, and PHP writes keep the strict rule beside them.
#define BOOST_TEST_MODULE tierce_check_analysis
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <vector>

#include "tools/tierce-check/analysis.h"

using namespace tcheck;

namespace {

constexpr int64_t kMs = 1'000'000;  // ns

ThreadOut thread_with(std::vector<ReadRec> reads, std::vector<WriteRec> writes) {
  ThreadOut o;
  o.reads_ok = o.reads_total = (long long)reads.size();
  o.writes_ok = o.writes_total = (long long)writes.size();
  for (const ReadRec& r : reads) o.ops.push_back({r.t_start, r.t_end, false, true});
  for (const WriteRec& w : writes) o.ops.push_back({w.t_start, w.t_ret, true, true});
  o.reads = std::move(reads);
  o.writes = std::move(writes);
  return o;
}

ReadRec read_of(uint64_t key, uint64_t seen, int64_t start_ms, int64_t end_ms) {
  ReadRec r;
  r.key = key;
  r.seen = seen;
  r.t_start = start_ms * kMs;
  r.t_end = end_ms * kMs;
  return r;
}

WriteRec write_of(uint64_t key, uint64_t version, int64_t start_ms, int64_t ret_ms) {
  WriteRec w;
  w.key = key;
  w.version = version;
  w.t_start = start_ms * kMs;
  w.t_ret = ret_ms * kMs;
  w.what = "POST bid.php";
  return w;
}

Analysis analyse_threads(Options& opt, std::vector<ThreadOut> outs, Run* keep = nullptr) {
  Run run = merge(outs, 0, 1.0);
  Analysis a = analyse(opt, run);
  if (keep) *keep = run;
  return a;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_read_older_than_a_returned_write_is_stale) {
  Options opt;
  const uint64_t item = make_key(kItem, 7);
  // Version 2 returned at 10 ms; a read starting at 20 ms shows 1: stale. One starting at 5 ms
  // (before the write returned) may show 1.
  auto a = analyse_threads(opt, {thread_with({read_of(item, 1, 20, 21), read_of(item, 1, 5, 6)},
                                             {write_of(item, 2, 8, 10)})});
  BOOST_TEST(a.stale_reads == 1);
  BOOST_REQUIRE(a.stale.size() == 1u);
  BOOST_TEST(a.stale[0].expected == 2u);
  BOOST_TEST(a.checked == 1);  // the early read has no earlier returned write
  BOOST_TEST(!a.pass);
  BOOST_REQUIRE(!a.failures.empty());
  BOOST_TEST(a.failures[0] == "1 stale read(s)");
}

BOOST_AUTO_TEST_CASE(a_clean_history_passes) {
  Options opt;
  const uint64_t item = make_key(kItem, 7), user = make_key(kUser, 7);
  // Reads at or above the last returned version, per entity (the user's writes do not count for
  // the item), and a read overlapping a write that may show either version.
  auto a = analyse_threads(opt, {thread_with({read_of(item, 2, 20, 21), read_of(user, 1, 20, 21)},
                                             {write_of(item, 2, 8, 10), write_of(user, 1, 1, 2)}),
                                 thread_with({read_of(item, 2, 9, 12), read_of(item, 3, 30, 31)},
                                             {write_of(item, 3, 25, 40)})});
  BOOST_TEST(a.stale_reads == 0);
  BOOST_TEST(a.checked == 3);  // the read at 9 ms has no earlier returned write
  BOOST_TEST(a.inversions == 0);
  BOOST_TEST(a.error_ratio == 0.0);
  BOOST_TEST(a.pass);
  BOOST_TEST(a.failures.empty());
}

BOOST_AUTO_TEST_CASE(windows_count_what_started_in_them) {
  Options opt;
  Window early{"early", {{0.0, 0.015}}}, late{"late", {{0.015, 1.0}}};
  opt.windows = {early, late};
  const uint64_t item = make_key(kItem, 1);
  auto a = analyse_threads(opt, {thread_with({read_of(item, 1, 12, 13), read_of(item, 1, 20, 21)},
                                             {write_of(item, 2, 14, 16)})});
  BOOST_REQUIRE(a.windows.size() == 2u);
  BOOST_TEST(a.windows[0].reads == 1);
  BOOST_TEST(a.windows[0].writes == 1);
  BOOST_TEST(a.windows[0].stale == 0);
  BOOST_TEST(a.windows[1].reads == 1);
  BOOST_TEST(a.windows[1].writes == 0);
  BOOST_TEST(a.windows[1].stale == 1);
  BOOST_TEST(a.windows[1].checked == 1);
  BOOST_TEST(a.windows[0].p50 == 2.0);  // the write took 2 ms
}

BOOST_AUTO_TEST_CASE(errors_and_strict_inversions_decide_the_verdict) {
  const uint64_t item = make_key(kItem, 3);
  // No writes: read 2 ended at 11 ms, a read from 12 ms shows 1 — an inversion, not stale.
  ThreadOut t = thread_with({read_of(item, 2, 10, 11), read_of(item, 1, 12, 13)}, {});
  Options lenient;
  auto a = analyse_threads(lenient, {t});
  BOOST_TEST(a.stale_reads == 0);
  BOOST_TEST(a.inversions == 1);
  BOOST_TEST(a.pass);
  Options strict;
  strict.strict = true;
  auto s = analyse_threads(strict, {t});
  BOOST_TEST(!s.pass);
  BOOST_TEST(s.failures.at(0) == "1 read-read inversion(s) (--strict)");

  ThreadOut e = thread_with({read_of(item, 2, 10, 11)}, {});
  e.reads_total = 10;  // 9 failed reads
  e.read_errors["http_5xx"] = 9;
  auto r = analyse_threads(lenient, {e});
  BOOST_TEST(r.read_errors == 9);
  BOOST_TEST(r.error_ratio == 0.9);
  BOOST_TEST(!r.pass);
}

namespace {

WriteRec sql_write_of(uint64_t key, uint64_t version, int64_t start_ms, int64_t commit_ms) {
  WriteRec w = write_of(key, version, start_ms, commit_ms);
  w.sql = true;
  w.t_commit_sent = (commit_ms - 1) * kMs;
  w.what = "SQL edit";
  return w;
}

ThreadOut sql_thread_with(std::vector<WriteRec> writes) {
  ThreadOut o = thread_with({}, std::move(writes));
  o.sql_writes_ok = o.sql_writes_total = o.writes_ok;
  return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_stale_window_is_the_last_older_read_after_the_commit) {
  const uint64_t a = make_key(kItem, 1), b = make_key(kItem, 2), c = make_key(kUser, 3);
  std::vector<ReadRec> reads = {
      read_of(a, 2, 50, 51),    // before the commit: not counted
      read_of(a, 2, 150, 151),  // older, after the commit
      read_of(a, 2, 400, 401),  // older, the last one: window 300 ms
      read_of(a, 3, 500, 501),
      read_of(b, 5, 200, 201),  // b: every read after the commit is up to date: 0
      read_of(b, 6, 300, 301),
  };
  std::vector<WriteRec> writes = {sql_write_of(a, 3, 90, 100), write_of(a, 4, 600, 700),  // a PHP write: no window
                                  sql_write_of(b, 5, 90, 100), sql_write_of(c, 9, 90, 100)};  // c: never read: 0
  std::vector<int64_t> w = sql_stale_windows(reads, writes);
  BOOST_REQUIRE(w.size() == 3u);
  BOOST_TEST(w[0] == 300 * kMs);
  BOOST_TEST(w[1] == 0);
  BOOST_TEST(w[2] == 0);
}

BOOST_AUTO_TEST_CASE(interleaved_php_and_sql_writes_compare_by_version_number) {
  // item 3: SQL -> 2 committed at 100 ms, PHP -> 3 returned at 200 ms, SQL -> 4 committed at 300 ms.
  const uint64_t k = make_key(kItem, 3);
  std::vector<ReadRec> reads = {
      read_of(k, 1, 150, 151),  // older than 2
      read_of(k, 3, 250, 251),  // the PHP write's version: older than 4, but started before its commit
      read_of(k, 3, 350, 351),  // older than 4
      read_of(k, 2, 360, 361),  // older than 2? no (2 == 2); older than 4: yes (stale by PHP's rule too)
      read_of(k, 1, 370, 371),  // older than 2 and than 4
      read_of(k, 4, 380, 381),
  };
  std::vector<WriteRec> writes = {sql_write_of(k, 2, 90, 100), write_of(k, 3, 190, 200), sql_write_of(k, 4, 290, 300)};
  std::vector<int64_t> w = sql_stale_windows(reads, writes);
  BOOST_REQUIRE(w.size() == 2u);
  BOOST_TEST(w[0] == 270 * kMs);  // the read at 370 ms still showed 1 < 2
  BOOST_TEST(w[1] == 70 * kMs);   // the read at 370 ms showed 1 < 4
}

BOOST_AUTO_TEST_CASE(sql_writes_are_bounded_not_strict) {
  const uint64_t item = make_key(kItem, 1);
  Options opt;
  opt.sql_writers = 1;
  opt.sql_stale_bound_ms = 1000;
  // Committed at 100 ms; older pages until 400 ms (within the bound): passes, window 300 ms.
  auto ok = analyse_threads(opt, {thread_with({read_of(item, 1, 150, 151), read_of(item, 1, 400, 401),
                                               read_of(item, 2, 500, 501), read_of(item, 2, 1500, 1501)},
                                              {}),
                                  sql_thread_with({sql_write_of(item, 2, 90, 100)})});
  BOOST_TEST(ok.stale_reads == 0);
  BOOST_TEST(ok.checked == 0);  // no write through PHP: the strict rule checks nothing
  BOOST_TEST(ok.sql.stale_reads == 0);
  BOOST_TEST(ok.sql.checked == 1);  // the read at 1500 ms
  BOOST_TEST(ok.sql.versions == 1);
  BOOST_TEST(ok.sql.txns_ok == 1);
  BOOST_TEST(ok.sql.nonzero == 1);
  BOOST_TEST(ok.sql.p50 == 300.0);
  BOOST_TEST(ok.sql.max == 300.0);
  BOOST_TEST(ok.pass);
  // Still the old page 1100 ms after the commit: an SQL stale read, the run fails.
  auto bad = analyse_threads(opt, {thread_with({read_of(item, 1, 600, 601), read_of(item, 1, 1200, 1201)}, {}),
                                   sql_thread_with({sql_write_of(item, 2, 90, 100)})});
  BOOST_TEST(bad.stale_reads == 0);
  BOOST_TEST(bad.sql.stale_reads == 1);
  BOOST_REQUIRE(bad.sql.stale.size() == 1u);
  BOOST_TEST(bad.sql.stale[0].expected == 2u);
  BOOST_TEST(bad.sql.max == 1100.0);
  BOOST_TEST(!bad.pass);
  BOOST_TEST(bad.failures.at(0) == "1 SQL stale read(s) (started > 1000 ms after an SQL commit of their entity)");
}

BOOST_AUTO_TEST_CASE(php_writes_keep_the_strict_rule_beside_sql_writes) {
  const uint64_t item = make_key(kItem, 1);
  Options opt;
  opt.sql_writers = 1;
  opt.sql_stale_bound_ms = 1000;
  // SQL -> 2 at 100 ms, PHP -> 3 returned at 200 ms, SQL -> 4 at 1000 ms.
  auto a = analyse_threads(opt, {thread_with({read_of(item, 3, 1200, 1201),   // fine: 4 is within its bound
                                              read_of(item, 2, 1500, 1501),   // older than PHP's 3: stale
                                              read_of(item, 3, 2100, 2101)},  // older than 4, 1100 ms on
                                             {write_of(item, 3, 190, 200)}),
                                 sql_thread_with({sql_write_of(item, 2, 90, 100), sql_write_of(item, 4, 990, 1000)})});
  BOOST_TEST(a.checked == 3);
  BOOST_TEST(a.stale_reads == 1);  // the read at 1500 ms, counted once: not also as an SQL stale read
  BOOST_REQUIRE(a.stale.size() == 1u);
  BOOST_TEST(a.stale[0].expected == 3u);
  BOOST_TEST(a.sql.stale_reads == 1);  // the read at 2100 ms
  BOOST_REQUIRE(a.sql.stale.size() == 1u);
  BOOST_TEST(a.sql.stale[0].expected == 4u);
  BOOST_TEST(a.sql.checked == 3);
  BOOST_TEST(a.failures.size() == 2u);
  BOOST_TEST(!a.pass);
}
