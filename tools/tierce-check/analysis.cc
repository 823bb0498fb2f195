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

Histories histories(const std::vector<WriteRec>& writes) {
  std::unordered_map<uint64_t, std::vector<size_t>> by_key;
  for (size_t i = 0; i < writes.size(); ++i) by_key[writes[i].key].push_back(i);
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
  auto& seen = a.stale_pages;
  for (auto& s : a.stale) seen.emplace_back(reads[s.read].t_start, reads[s.read].target);
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  a.stale_reads = (long long)seen.size();
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
  if (opt.strict && a.inversions > 0)
    failures.push_back(std::to_string(a.inversions) + " read-read inversion(s) (--strict)");
  if (a.error_ratio > opt.max_error_ratio)
    failures.push_back("error ratio " + fmt("%.4f", a.error_ratio) + " > --max-error-ratio " +
                       fmt("%.4f", opt.max_error_ratio));
  if (a.ops_done == 0) failures.push_back("no operation was done");
  if (run.reads_total > 0 && run.reads_ok == 0) failures.push_back("no read succeeded");
  if (run.writes_total > 0 && run.writes_ok == 0) failures.push_back("no write succeeded");
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

Analysis analyse(const Options& opt, Run& run) {
  Analysis a;
  const Histories hist = histories(run.writes);
  find_stale(run, hist, a);
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
