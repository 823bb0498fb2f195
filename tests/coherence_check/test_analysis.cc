// tests/coherence_check/test_analysis.cc — tierce-check's analysis of a finished run
// (tools/tierce-check/analysis.h) on hand-built histories: a read is stale only against a write
// that returned before it started; overlapping writes never make a read stale; windows count
// what started in them; the error ratio and --strict decide the verdict.
#define BOOST_TEST_MODULE tierce_check_analysis
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
