// tools/tierce-check/analysis.h — what tierce-check concludes from a run: the records of every
// thread merged (`Run`), then checked (`Analysis`): stale reads against the writes that returned
// before each read started (writes through PHP), the SQL writes' bounded staleness and stale
// windows (--sql-writers), read-read inversions, the same per --window and per second
// (--timeline), the error ratio, and the reasons the run fails. No I/O: report.cc prints it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "inversions.h"

namespace tcheck {

// The p-quantile of v (nearest rank; reorders v). 0 for an empty v.
double pct(std::vector<double>& v, double p);
// printf-formatted double.
std::string fmt(const char* f, double x);

// Every thread's records and counters, together.
struct Run {
  double elapsed = 0;  // s, from the start to the end of the last worker
  int64_t t0 = 0;      // the start (CLOCK_MONOTONIC ns): times in the report are relative to it
  std::vector<ReadRec> reads;
  std::vector<WriteRec> writes;
  std::vector<double> rlat, wlat;  // ms, successful operations (wlat: PHP writes)
  std::vector<double> sql_lat;     // ms, successful SQL writes (--sql-writers)
  long long sql_writes_ok = 0, sql_writes_total = 0;  // also in writes_ok / writes_total
  long long reads_ok = 0, writes_ok = 0, reads_total = 0, writes_total = 0, xc_seen = 0, xc_hits = 0;
  std::map<std::string, long long> rerr, werr;  // error kind -> count
  std::vector<ErrorSample> samples;             // by time
  std::vector<OpRec> ops;                       // with --window / --timeline
  uint64_t connects = 0;

  double rel(int64_t t) const { return double(t - t0) / 1e9; }
};
Run merge(std::vector<ThreadOut>& outs, int64_t t0, double elapsed);

// A read that saw a version older than a write that returned before it started.
struct Stale {
  size_t read, write;  // indexes in Run::reads / Run::writes
  uint64_t expected;
};

// --sql-writers: a read that started more than the bound after an SQL write of its entity
// committed, and shows an older version (and is not already a Stale read).
struct SqlStale {
  size_t read, write;  // indexes in Run::reads / Run::writes (the write: the newest such one)
  uint64_t expected;
};

// The bounded-staleness check of the SQL writes and their stale windows.
struct SqlAnalysis {
  long long txns = 0, txns_ok = 0;  // transactions
  long long versions = 0;           // entity versions written (Run::writes with sql)
  long long checked = 0;     // reads with an SQL write of their entity committed more than the bound before
  long long stale_reads = 0;  // distinct page reads with an SqlStale
  std::vector<SqlStale> stale;  // by read start
  // Per SQL entity version (Run::writes order): the start of the last read of the entity that
  // started after the commit and showed an older version, minus the commit time; 0 when none.
  std::vector<double> window_ms;
  long long nonzero = 0;
  double p50 = 0, p99 = 0, max = 0;  // of window_ms
  double commit_p50 = 0, commit_p99 = 0;  // ms, transaction latency
};

// The stale window (ns) of every write in `writes` with sql set, in their order: for write w of
// entity K committed at w.t_ret, max(r.t_start) - w.t_ret over the reads r of K with
// r.t_start > w.t_ret and r.seen < w.version; 0 when there is no such read.
std::vector<int64_t> sql_stale_windows(const std::vector<ReadRec>& reads, const std::vector<WriteRec>& writes);

// --window NAME: what started in it.
struct WindowStats {
  long long reads = 0, reads_ok = 0, checked = 0, stale = 0, writes = 0, writes_ok = 0, inversions = 0;
  long long read_errors = 0, write_errors = 0;
  std::vector<double> wlat;  // ms, successful writes, sorted
  double p50 = 0, p99 = 0, max = 0;
};

// --timeline: what started in one second of the run.
struct SecondStats {
  long long reads = 0, reads_ok = 0, stale = 0, writes = 0, writes_ok = 0, errors = 0;
  std::vector<double> wlat;
};

struct Analysis {
  std::vector<Stale> stale;  // by read start
  long long checked = 0;     // reads with at least one earlier returned write of their entity
  long long stale_reads = 0;  // distinct stale page reads
  std::vector<std::pair<int64_t, uint16_t>> stale_pages;  // (read start, target), distinct
  InversionResult inv;
  long long inversions = 0;
  SqlAnalysis sql;  // --sql-writers
  std::vector<WindowStats> windows;  // one per Options::windows
  std::vector<SecondStats> seconds;  // --timeline
  long long read_errors = 0, write_errors = 0, ops_done = 0;
  double error_ratio = 1.0;
  double rp50 = 0, rp99 = 0, wp50 = 0, wp99 = 0;  // ms
  std::vector<std::string> failures;  // empty: the run passes
  bool pass = false;
};
// Reorders run.rlat and run.wlat (quantiles).
Analysis analyse(const Options& opt, Run& run);

}  // namespace tcheck
