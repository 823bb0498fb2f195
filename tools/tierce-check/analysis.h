// tools/tierce-check/analysis.h — what tierce-check concludes from a run: the records of every
// thread merged (`Run`), then checked (`Analysis`): stale reads against the writes that returned
// before each read started, read-read inversions, the same per --window and per second
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
  std::vector<double> rlat, wlat;  // ms, successful operations
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
