// tools/tierce-check/analysis.cc — the checks of a finished run (analysis.h).
#include "analysis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

namespace tcheck {

double pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t i = size_t(std::min<double>(double(v.size() - 1), std::floor(p * double(v.size() - 1) + 0.5)));
  std::nth_element(v.begin(), v.begin() + long(i), v.end());
  return v[i];
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

Run merge(std::vector<ThreadOut>& outs, int64_t t0, double elapsed) {
  Run run;
  run.t0 = t0;
  run.elapsed = elapsed;
  for (auto& o : outs) {
    run.ops.insert(run.ops.end(), o.ops.begin(), o.ops.end());
    for (auto& r : o.reads) run.reads.push_back(std::move(r));
    for (auto& w : o.writes) run.writes.push_back(std::move(w));
    run.rlat.insert(run.rlat.end(), o.read_lat_ms.begin(), o.read_lat_ms.end());
    run.wlat.insert(run.wlat.end(), o.write_lat_ms.begin(), o.write_lat_ms.end());
    run.sql_lat.insert(run.sql_lat.end(), o.sql_lat_ms.begin(), o.sql_lat_ms.end());
    run.sql_writes_ok += o.sql_writes_ok;
    run.sql_writes_total += o.sql_writes_total;
    run.reads_ok += o.reads_ok;
    run.writes_ok += o.writes_ok;
    run.reads_total += o.reads_total;
    run.writes_total += o.writes_total;
    run.xc_seen += o.xcache_seen;
    run.xc_hits += o.xcache_hits;
    for (auto& [k, v] : o.read_errors) run.rerr[k] += v;
    for (auto& [k, v] : o.write_errors) run.werr[k] += v;
    for (auto& s : o.error_samples) run.samples.push_back(s);
    run.connects += o.connects;
  }
  std::sort(run.samples.begin(), run.samples.end(), [](auto& a, auto& b) { return a.at_s < b.at_s; });
  return run;
}

namespace {

// Per entity: writes sorted by return time with the running maximum of the version.
struct Hist {
  std::vector<int64_t> t;
  std::vector<uint64_t> maxv;
  std::vector<size_t> idx;  // write record of the running maximum
};
using Histories = std::unordered_map<uint64_t, Hist>;

// The histories of the writes through PHP (sql = false) or of the SQL writes (sql = true).
Histories histories(const std::vector<WriteRec>& writes, bool sql) {
  std::unordered_map<uint64_t, std::vector<size_t>> by_key;
  for (size_t i = 0; i < writes.size(); ++i)
    if (writes[i].sql == sql) by_key[writes[i].key].push_back(i);
  Histories hist;
  for (auto& [k, v] : by_key) {
    std::sort(v.begin(), v.end(), [&](size_t a, size_t b) { return writes[a].t_ret < writes[b].t_ret; });
    Hist h;
    uint64_t m = 0;
    size_t mi = 0;
    for (size_t i : v) {
      if (writes[i].version > m) {
        m = writes[i].version;
        mi = i;
      }
      h.t.push_back(writes[i].t_ret);
      h.maxv.push_back(m);
      h.idx.push_back(mi);
    }
    hist.emplace(k, std::move(h));
  }
  return hist;
}

// Distinct page reads (read start, target) of the records' reads (indexes in `reads`), sorted.
template <class T>
std::vector<std::pair<int64_t, uint16_t>> distinct_pages(const std::vector<ReadRec>& reads, const std::vector<T>& v) {
  std::vector<std::pair<int64_t, uint16_t>> pages;
  for (const T& s : v) pages.emplace_back(reads[s.read].t_start, reads[s.read].target);
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  return pages;
}

void find_stale(const Run& run, const Histories& hist, Analysis& a) {
  const auto& reads = run.reads;
  for (size_t i = 0; i < reads.size(); ++i) {
    auto it = hist.find(reads[i].key);
    if (it == hist.end()) continue;
    const Hist& h = it->second;
    // writes with t_ret < t_start
    size_t n = size_t(std::lower_bound(h.t.begin(), h.t.end(), reads[i].t_start) - h.t.begin());
    if (n == 0) continue;
    ++a.checked;
    if (reads[i].seen < h.maxv[n - 1]) a.stale.push_back({i, h.idx[n - 1], h.maxv[n - 1]});
  }
  std::sort(a.stale.begin(), a.stale.end(),
            [&](auto& x, auto& y) { return reads[x.read].t_start < reads[y.read].t_start; });
  // Distinct stale page reads (a page has one marker today, but count pages not markers).
  a.stale_pages = distinct_pages(reads, a.stale);
  a.stale_reads = (long long)a.stale_pages.size();
}

// --sql-writers: reads older than an SQL write committed more than the bound before they started
// (a read already stale by the strict rule is counted there only).
void find_sql_stale(const Options& opt, const Run& run, Analysis& a) {
  const Histories hist = histories(run.writes, true);
  const int64_t bound = int64_t(std::llround(opt.sql_stale_bound_ms * 1e6));
  std::vector<bool> strict(run.reads.size(), false);
  for (const Stale& s : a.stale) strict[s.read] = true;
  SqlAnalysis& q = a.sql;
  for (size_t i = 0; i < run.reads.size(); ++i) {
    const ReadRec& r = run.reads[i];
    auto it = hist.find(r.key);
    if (it == hist.end()) continue;
    const Hist& h = it->second;
    // SQL writes committed more than `bound` before the read started: t_ret < t_start - bound
    size_t n = size_t(std::lower_bound(h.t.begin(), h.t.end(), r.t_start - bound) - h.t.begin());
    if (n == 0) continue;
    ++q.checked;
    if (r.seen < h.maxv[n - 1] && !strict[i]) q.stale.push_back({i, h.idx[n - 1], h.maxv[n - 1]});
  }
  std::sort(q.stale.begin(), q.stale.end(),
            [&](auto& x, auto& y) { return run.reads[x.read].t_start < run.reads[y.read].t_start; });
  q.stale_reads = (long long)distinct_pages(run.reads, q.stale).size();
}

void sql_windows(Run& run, Analysis& a) {
  SqlAnalysis& q = a.sql;
  q.txns = run.sql_writes_total;
  q.txns_ok = run.sql_writes_ok;
  for (int64_t w : sql_stale_windows(run.reads, run.writes)) {
    q.window_ms.push_back(double(w) / 1e6);
    q.nonzero += w > 0;
  }
  q.versions = (long long)q.window_ms.size();
  std::vector<double> tmp = q.window_ms;
  q.p50 = pct(tmp, 0.5);
  q.p99 = pct(tmp, 0.99);
  q.max = tmp.empty() ? 0 : *std::max_element(tmp.begin(), tmp.end());
  q.commit_p50 = pct(run.sql_lat, 0.5);
  q.commit_p99 = pct(run.sql_lat, 0.99);
}

// Read-read inversions: a read older than a read of the same entity that ended before it started.
void check_inversions(const Run& run, Analysis& a) {
  std::vector<InvRead> ir(run.reads.size());
  for (size_t i = 0; i < run.reads.size(); ++i)
    ir[i] = {run.reads[i].key, run.reads[i].seen, run.reads[i].t_start, run.reads[i].t_end};
  a.inv = tcheck::find_inversions(ir);
  a.inversions = (long long)a.inv.found.size();
}

// Per --window: what started in it.
void count_windows(const Options& opt, const Run& run, const Histories& hist, Analysis& a) {
  a.windows.resize(opt.windows.size());
  for (size_t w = 0; w < opt.windows.size(); ++w) {
    const Window& win = opt.windows[w];
    WindowStats& ws = a.windows[w];
    for (const OpRec& op : run.ops) {
      if (!win.contains(run.rel(op.t_start))) continue;
      if (op.write) {
        ++ws.writes;
        if (op.ok) {
          ++ws.writes_ok;
          ws.wlat.push_back(double(op.t_end - op.t_start) / 1e6);
        } else {
          ++ws.write_errors;
        }
      } else {
        ++ws.reads;
        if (op.ok) ++ws.reads_ok;
        else ++ws.read_errors;
      }
    }
    for (const auto& [t, target] : a.stale_pages) ws.stale += win.contains(run.rel(t));
    for (const Inversion& x : a.inv.found) ws.inversions += win.contains(run.rel(run.reads[x.later].t_start));
    std::sort(ws.wlat.begin(), ws.wlat.end());
    if (!ws.wlat.empty()) {
      std::vector<double> tmp = ws.wlat;
      ws.p50 = pct(tmp, 0.5);
      ws.p99 = pct(tmp, 0.99);
      ws.max = ws.wlat.back();
    }
  }
  if (a.windows.empty()) return;
  for (const ReadRec& r : run.reads) {
    auto it = hist.find(r.key);
    if (it == hist.end() || it->second.t.empty() || it->second.t.front() >= r.t_start) continue;
    double t = run.rel(r.t_start);
    for (size_t w = 0; w < opt.windows.size(); ++w) a.windows[w].checked += opt.windows[w].contains(t);
  }
}

// --timeline: the same per second of the run.
void count_seconds(const Run& run, Analysis& a) {
  auto at = [&](int64_t t) -> SecondStats& {
    double x = std::max(0.0, run.rel(t));
    size_t i = size_t(x);
    if (a.seconds.size() <= i) a.seconds.resize(i + 1);
    return a.seconds[i];
  };
  for (const OpRec& op : run.ops) {
    SecondStats& ss = at(op.t_start);
    (op.write ? ss.writes : ss.reads)++;
    if (!op.ok)
      ss.errors++;
    else if (op.write) {
      ss.writes_ok++;
      ss.wlat.push_back(double(op.t_end - op.t_start) / 1e6);
    } else {
      ss.reads_ok++;
    }
  }
  for (const auto& [t, target] : a.stale_pages) at(t).stale++;
}

void decide(const Options& opt, const Run& run, Analysis& a) {
  auto& failures = a.failures;
  if (a.stale_reads > 0) failures.push_back(std::to_string(a.stale_reads) + " stale read(s)");
  if (a.sql.stale_reads > 0)
    failures.push_back(std::to_string(a.sql.stale_reads) + " SQL stale read(s) (started > " +
                       fmt("%g", opt.sql_stale_bound_ms) + " ms after an SQL commit of their entity)");
  if (opt.strict && a.inversions > 0)
    failures.push_back(std::to_string(a.inversions) + " read-read inversion(s) (--strict)");
  if (a.error_ratio > opt.max_error_ratio)
    failures.push_back("error ratio " + fmt("%.4f", a.error_ratio) + " > --max-error-ratio " +
                       fmt("%.4f", opt.max_error_ratio));
  if (a.ops_done == 0) failures.push_back("no operation was done");
  if (run.reads_total > 0 && run.reads_ok == 0) failures.push_back("no read succeeded");
  if (run.writes_total > 0 && run.writes_ok == 0) failures.push_back("no write succeeded");
  else if (run.sql_writes_total > 0 && run.sql_writes_ok == 0) failures.push_back("no SQL write succeeded");
  for (auto& d : opt.during) {
    if (!d.started)
      failures.push_back("--during '" + d.command + "'@" + fmt("%g", d.at_s) + " did not run (the run ended at " +
                         fmt("%.1f", run.elapsed) + " s)");
    else if (d.exit_status != 0)
      failures.push_back("--during '" + d.command + "' exited " + std::to_string(d.exit_status));
  }
  a.pass = failures.empty();
}

}  // namespace

std::vector<int64_t> sql_stale_windows(const std::vector<ReadRec>& reads, const std::vector<WriteRec>& writes) {
  // Per entity: its reads by start, with the suffix minima of the version seen (non-decreasing,
  // so the last read showing less than v is found by one binary search).
  struct Index {
    std::vector<int64_t> start;
    std::vector<uint64_t> sufmin;
  };
  std::unordered_map<uint64_t, std::vector<size_t>> by_key;
  for (const WriteRec& w : writes)
    if (w.sql) by_key[w.key];
  for (size_t i = 0; i < reads.size(); ++i)
    if (auto it = by_key.find(reads[i].key); it != by_key.end()) it->second.push_back(i);
  std::unordered_map<uint64_t, Index> idx;
  for (auto& [k, v] : by_key) {
    std::sort(v.begin(), v.end(), [&](size_t x, size_t y) { return reads[x].t_start < reads[y].t_start; });
    Index& ix = idx[k];
    ix.sufmin.resize(v.size());
    for (size_t i : v) ix.start.push_back(reads[i].t_start);
    for (size_t j = v.size(); j-- > 0;)
      ix.sufmin[j] = j + 1 < v.size() ? std::min(reads[v[j]].seen, ix.sufmin[j + 1]) : reads[v[j]].seen;
  }
  std::vector<int64_t> out;
  for (const WriteRec& w : writes) {
    if (!w.sql) continue;
    const Index& ix = idx[w.key];
    // the reads that started after the commit: [lo, n); those showing less than w.version: the
    // last one is j - 1, j = the first index whose suffix minimum is >= w.version
    size_t lo = size_t(std::upper_bound(ix.start.begin(), ix.start.end(), w.t_ret) - ix.start.begin());
    size_t j = size_t(std::lower_bound(ix.sufmin.begin(), ix.sufmin.end(), w.version) - ix.sufmin.begin());
    out.push_back(j > lo ? ix.start[j - 1] - w.t_ret : 0);
  }
  return out;
}

Analysis analyse(const Options& opt, Run& run) {
  Analysis a;
  const Histories hist = histories(run.writes, false);
  find_stale(run, hist, a);
  find_sql_stale(opt, run, a);
  sql_windows(run, a);
  check_inversions(run, a);
  count_windows(opt, run, hist, a);
  if (opt.timeline) count_seconds(run, a);
  for (auto& [k, v] : run.rerr) a.read_errors += v;
  for (auto& [k, v] : run.werr) a.write_errors += v;
  a.ops_done = run.reads_total + run.writes_total;
  a.error_ratio = a.ops_done ? double(a.read_errors + a.write_errors) / double(a.ops_done) : 1.0;
  a.rp50 = pct(run.rlat, 0.5);
  a.rp99 = pct(run.rlat, 0.99);
  a.wp50 = pct(run.wlat, 0.5);
  a.wp99 = pct(run.wlat, 0.99);
  decide(opt, run, a);
  return a;
}

}  // namespace tcheck
