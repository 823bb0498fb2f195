// tierce-check — checks Tierce's strong coherence against a running cluster (tools/tierce-cluster).
//
// Writers POST bid.php / edit.php straight to the app tier and record, once each response has
// returned, (return time on CLOCK_MONOTONIC, entity, committed version) for every `KEY=VERSION`
// line. Readers record their start time, GET item/category/user pages through the proxies and
// parse the `<meta name="tierce-data" content="KEY=VERSION">` markers. After the run every read is
// checked against the writes that RETURNED BEFORE the read STARTED: a version smaller than the
// highest such write's is a STALE READ. Reads are also checked against each other: a read showing
// a version older than one some read of the same entity (through any proxy) showed and returned
// before this read started is a READ-READ INVERSION (inversions.h): reported always, a failure
// with --strict. Errors (refused, timeouts, 5xx, missing marker) are counted
// apart. --window NAME=FROM-TO reports the same per stretch of the run (e.g. while a fault lasts):
// the operations that STARTED in it, and the latency of its writes. Exit 0 when no read was stale
// and the error ratio is <= --max-error-ratio (and, with --strict, no read inverted), 1 otherwise,
// 2 on bad usage.
#include "check.h"
#include "inversions.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace tcheck {
namespace {

std::string json_escape(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

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

}  // namespace
}  // namespace tcheck

int main(int argc, char** argv) {
  using namespace tcheck;
  std::signal(SIGPIPE, SIG_IGN);
  Options opt = parse_args(argc, argv);
  if (!opt.cluster_path.empty()) load_cluster(opt);
  int items = opt.items.value_or(10000), users = opt.users.value_or(2000), cats = opt.categories.value_or(20);

  Shared sh;
  sh.opt = &opt;
  sh.record_ops = !opt.windows.empty() || opt.timeline;
  std::string err;
  for (const auto& s : opt.proxies) {
    Url u;
    if (!parse_url(s, u, err)) usage_error("--proxy: " + err);
    u.host_header = opt.site;
    if (!opt.direct) sh.read_targets.push_back(u);
  }
  for (const auto& s : opt.apps) {
    Url u;
    if (!parse_url(s, u, err)) usage_error("--app: " + err);
    sh.write_targets.push_back(u);
    if (opt.direct) sh.read_targets.push_back(u);
  }
  if (opt.write_ratio >= 1) opt.readers = 0;
  if (opt.write_ratio <= 0) opt.writers = 0;
  if (opt.readers > 0 && sh.read_targets.empty())
    usage_error(opt.direct ? "--direct needs at least one --app (or --cluster)" : "no --proxy given (or --cluster)");
  if (opt.writers > 0 && sh.write_targets.empty()) usage_error("no --app given (or --cluster): writers need one");
  if (opt.readers + opt.writers == 0) usage_error("no reader and no writer thread");

  // Hot sets: a seeded sample of the ids (1-based, as tierce-datagen loads them).
  std::mt19937_64 hrng(opt.seed);
  auto sample = [&](int n) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[size_t(i)] = i + 1;
    std::shuffle(ids.begin(), ids.end(), hrng);
    ids.resize(size_t(std::min(n, opt.hot)));
    return ids;
  };
  sh.hot_items = sample(items);
  sh.hot_users = sample(users);
  sh.hot_cats = sample(cats);

  if (opt.ops) {
    sh.w_budget = opt.writers ? (long long)std::llround(double(*opt.ops) * opt.write_ratio) : 0;
    sh.r_budget = opt.readers ? *opt.ops - sh.w_budget : 0;
    if (!opt.readers) sh.w_budget = *opt.ops;
  }

  // Proxy metrics before.
  bool tierce_metrics = false;
  std::vector<std::optional<Metrics>> before, after;
  std::vector<Url> proxy_urls;
  for (const auto& s : opt.proxies) {
    if (opt.direct) break;  // the proxies carry no traffic then
    Url u;
    parse_url(s, u, err);
    proxy_urls.push_back(u);
    before.push_back(fetch_metrics(u, opt.timeout));
    tierce_metrics = tierce_metrics || before.back().has_value();
  }

  if (!opt.quiet) {
    std::fprintf(stderr, "tierce-check: cache=%s %s; %d readers -> %zu %s, %d writers -> %zu app node(s); ",
                 opt.cache.c_str(), opt.direct ? "DIRECT reads" : "reads through the proxies", opt.readers,
                 sh.read_targets.size(), opt.direct ? "app node(s)" : "proxies", opt.writers, sh.write_targets.size());
    if (opt.ops) std::fprintf(stderr, "%lld ops (%lld reads, %lld writes)", *opt.ops, sh.r_budget, sh.w_budget);
    else std::fprintf(stderr, "%.0f s", *opt.duration);
    std::fprintf(stderr, "; hot sets %zu items, %zu users, %zu categories\n", sh.hot_items.size(), sh.hot_users.size(),
                 sh.hot_cats.size());
  }

  if (opt.rate) {
    double rr = opt.readers ? *opt.rate * (opt.writers ? 1 - opt.write_ratio : 1) : 0;
    double wr = opt.writers ? *opt.rate * (opt.readers ? opt.write_ratio : 1) : 0;
    sh.read_interval_ns = rr > 0 ? std::max<int64_t>(1, int64_t(1e9 / rr)) : 0;
    sh.write_interval_ns = wr > 0 ? std::max<int64_t>(1, int64_t(1e9 / wr)) : 0;
    if (!opt.quiet)
      std::fprintf(stderr, "tierce-check: open loop, %.1f reads/s and %.1f writes/s scheduled\n",
                   rr, wr);
  }
  sh.t0 = now_ns();
  if (opt.duration) sh.stop_at = sh.t0 + int64_t(*opt.duration * 1e9);
  sh.readers_left = opt.readers;
  sh.writers_left = opt.writers;
  std::vector<ThreadOut> outs(size_t(opt.readers + opt.writers));
  std::vector<std::thread> threads;
  for (int i = 0; i < opt.readers; ++i) threads.emplace_back(reader, std::ref(sh), i, std::ref(outs[size_t(i)]));
  for (int i = 0; i < opt.writers; ++i)
    threads.emplace_back(writer, std::ref(sh), i, std::ref(outs[size_t(opt.readers + i)]));
  std::vector<std::thread> during_threads;
  for (auto& d : opt.during) during_threads.emplace_back(run_during, std::ref(sh), std::ref(d));
  std::atomic<bool> workers_done{false};
  std::thread progress([&] {
    int64_t next = sh.t0 + 5'000'000'000;
    while (!workers_done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!opt.quiet && now_ns() >= next) {
        next += 5'000'000'000;
        std::fprintf(stderr, "tierce-check: [%.0fs] %lld reads, %lld writes, %lld errors\n", rel_s(sh, now_ns()),
                     sh.r_done.load(), sh.w_done.load(), sh.errors.load());
      }
    }
  });
  for (auto& t : threads) t.join();
  int64_t t_workers_end = now_ns();
  // A --during command still scheduled: do not start it now; one running: wait for it.
  sh.stop = true;
  for (auto& t : during_threads) t.join();
  workers_done = true;
  progress.join();
  double elapsed = double(t_workers_end - sh.t0) / 1e9;

  for (const auto& u : proxy_urls) after.push_back(fetch_metrics(u, opt.timeout));

  // ---- merge + analysis
  std::vector<ReadRec> reads;
  std::vector<WriteRec> writes;
  std::vector<double> rlat, wlat;
  long long reads_ok = 0, writes_ok = 0, reads_total = 0, writes_total = 0, xc_seen = 0, xc_hits = 0;
  std::map<std::string, long long> rerr, werr;
  std::vector<ErrorSample> samples;
  std::vector<OpRec> ops;
  uint64_t connects = 0;
  for (auto& o : outs) {
    ops.insert(ops.end(), o.ops.begin(), o.ops.end());
    for (auto& r : o.reads) reads.push_back(std::move(r));
    for (auto& w : o.writes) writes.push_back(std::move(w));
    rlat.insert(rlat.end(), o.read_lat_ms.begin(), o.read_lat_ms.end());
    wlat.insert(wlat.end(), o.write_lat_ms.begin(), o.write_lat_ms.end());
    reads_ok += o.reads_ok;
    writes_ok += o.writes_ok;
    reads_total += o.reads_total;
    writes_total += o.writes_total;
    xc_seen += o.xcache_seen;
    xc_hits += o.xcache_hits;
    for (auto& [k, v] : o.read_errors) rerr[k] += v;
    for (auto& [k, v] : o.write_errors) werr[k] += v;
    for (auto& s : o.error_samples) samples.push_back(s);
    connects += o.connects;
  }
  std::sort(samples.begin(), samples.end(), [](auto& a, auto& b) { return a.at_s < b.at_s; });

  // Per entity: writes sorted by return time with the running maximum of the version.
  struct Hist {
    std::vector<int64_t> t;
    std::vector<uint64_t> maxv;
    std::vector<size_t> idx;  // write record of the running maximum
  };
  std::unordered_map<uint64_t, std::vector<size_t>> by_key;
  for (size_t i = 0; i < writes.size(); ++i) by_key[writes[i].key].push_back(i);
  std::unordered_map<uint64_t, Hist> hist;
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
  struct Stale {
    size_t read, write;
    uint64_t expected;
  };
  std::vector<Stale> stale;
  long long checked = 0;  // reads with at least one earlier returned write of their entity
  for (size_t i = 0; i < reads.size(); ++i) {
    auto it = hist.find(reads[i].key);
    if (it == hist.end()) continue;
    const Hist& h = it->second;
    // writes with t_ret < t_start
    size_t n = size_t(std::lower_bound(h.t.begin(), h.t.end(), reads[i].t_start) - h.t.begin());
    if (n == 0) continue;
    ++checked;
    if (reads[i].seen < h.maxv[n - 1]) stale.push_back({i, h.idx[n - 1], h.maxv[n - 1]});
  }
  std::sort(stale.begin(), stale.end(), [&](auto& a, auto& b) { return reads[a.read].t_start < reads[b.read].t_start; });
  // Distinct stale page reads (a page has one marker today, but count pages not markers).
  long long stale_reads = 0;
  std::vector<std::pair<int64_t, uint16_t>> stale_pages;
  {
    auto& seen = stale_pages;
    for (auto& s : stale) seen.emplace_back(reads[s.read].t_start, reads[s.read].target);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    stale_reads = (long long)seen.size();
  }

  // Read-read inversions: a read older than a read of the same entity that ended before it started.
  InversionResult inv;
  {
    std::vector<InvRead> ir(reads.size());
    for (size_t i = 0; i < reads.size(); ++i) ir[i] = {reads[i].key, reads[i].seen, reads[i].t_start, reads[i].t_end};
    inv = find_inversions(ir);
  }
  const long long inversions = (long long)inv.found.size();

  // Per --window: what started in it.
  struct WindowStats {
    long long reads = 0, reads_ok = 0, checked = 0, stale = 0, writes = 0, writes_ok = 0, inversions = 0;
    long long read_errors = 0, write_errors = 0;
    std::vector<double> wlat;  // ms, successful writes
    double p50 = 0, p99 = 0, max = 0;
  };
  std::vector<WindowStats> wstats(opt.windows.size());
  for (size_t w = 0; w < opt.windows.size(); ++w) {
    const Window& win = opt.windows[w];
    WindowStats& ws = wstats[w];
    for (const OpRec& op : ops) {
      if (!win.contains(rel_s(sh, op.t_start))) continue;
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
    for (const auto& [t, target] : stale_pages) ws.stale += win.contains(rel_s(sh, t));
    for (const Inversion& x : inv.found) ws.inversions += win.contains(rel_s(sh, reads[x.later].t_start));
    std::sort(ws.wlat.begin(), ws.wlat.end());
    if (!ws.wlat.empty()) {
      std::vector<double> tmp = ws.wlat;
      ws.p50 = pct(tmp, 0.5);
      ws.p99 = pct(tmp, 0.99);
      ws.max = ws.wlat.back();
    }
  }
  if (!wstats.empty()) {
    for (size_t i = 0; i < reads.size(); ++i) {
      auto it = hist.find(reads[i].key);
      if (it == hist.end() || it->second.t.empty() || it->second.t.front() >= reads[i].t_start) continue;
      double t = rel_s(sh, reads[i].t_start);
      for (size_t w = 0; w < opt.windows.size(); ++w) wstats[w].checked += opt.windows[w].contains(t);
    }
  }

  // --timeline: the same per second of the run.
  struct SecondStats {
    long long reads = 0, reads_ok = 0, stale = 0, writes = 0, writes_ok = 0, errors = 0;
    std::vector<double> wlat;
  };
  std::vector<SecondStats> seconds;
  if (opt.timeline) {
    auto at = [&](int64_t t) -> SecondStats& {
      double x = std::max(0.0, rel_s(sh, t));
      size_t i = size_t(x);
      if (seconds.size() <= i) seconds.resize(i + 1);
      return seconds[i];
    };
    for (const OpRec& op : ops) {
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
    for (const auto& [t, target] : stale_pages) at(t).stale++;
  }

  long long read_errors = 0, write_errors = 0;
  for (auto& [k, v] : rerr) read_errors += v;
  for (auto& [k, v] : werr) write_errors += v;
  long long ops_done = reads_total + writes_total;
  double error_ratio = ops_done ? double(read_errors + write_errors) / double(ops_done) : 1.0;
  double rp50 = pct(rlat, 0.5), rp99 = pct(rlat, 0.99), wp50 = pct(wlat, 0.5), wp99 = pct(wlat, 0.99);

  std::vector<std::string> failures;
  if (stale_reads > 0) failures.push_back(std::to_string(stale_reads) + " stale read(s)");
  if (opt.strict && inversions > 0)
    failures.push_back(std::to_string(inversions) + " read-read inversion(s) (--strict)");
  if (error_ratio > opt.max_error_ratio)
    failures.push_back("error ratio " + fmt("%.4f", error_ratio) + " > --max-error-ratio " + fmt("%.4f", opt.max_error_ratio));
  if (ops_done == 0) failures.push_back("no operation was done");
  if (reads_total > 0 && reads_ok == 0) failures.push_back("no read succeeded");
  if (writes_total > 0 && writes_ok == 0) failures.push_back("no write succeeded");
  for (auto& d : opt.during) {
    if (!d.started) failures.push_back("--during '" + d.command + "'@" + fmt("%g", d.at_s) + " did not run (the run ended at " + fmt("%.1f", elapsed) + " s)");
    else if (d.exit_status != 0) failures.push_back("--during '" + d.command + "' exited " + std::to_string(d.exit_status));
  }
  bool pass = failures.empty();

  // ---- report
  auto target_name = [&](uint16_t t, bool read) {
    return (read ? sh.read_targets : sh.write_targets)[t].text;
  };
  std::printf("tierce-check: %s (cache=%s%s%s)\n", pass ? "PASS" : "FAIL", opt.cache.c_str(),
              opt.direct ? ", direct reads" : "", opt.strict ? ", strict" : "");
  std::printf("  time            %.2f s\n", elapsed);
  std::printf("  ops             %lld (reads %lld, writes %lld)\n", ops_done, reads_total, writes_total);
  std::printf("  reads           %lld ok, %.0f/s, latency p50 %.2f ms p99 %.2f ms\n", reads_ok,
              elapsed > 0 ? double(reads_ok) / elapsed : 0, rp50, rp99);
  std::printf("  writes          %lld ok, %.0f/s, latency p50 %.2f ms p99 %.2f ms, %zu entity versions recorded\n",
              writes_ok, elapsed > 0 ? double(writes_ok) / elapsed : 0, wp50, wp99, writes.size());
  std::printf("  checked reads   %lld (entity written before the read started)\n", checked);
  std::printf("  STALE READS     %lld\n", stale_reads);
  std::printf("  READ INVERSIONS %lld of %lld reads with an earlier-ended read of their entity (%s)\n", inversions,
              inv.checked, opt.strict ? "--strict: each fails the run" : "informational; --strict fails on them");
  auto errline = [](const std::map<std::string, long long>& m) {
    std::string s;
    for (auto& [k, v] : m) s += (s.empty() ? "" : ", ") + k + " " + std::to_string(v);
    return s.empty() ? std::string("none") : s;
  };
  std::printf("  errors          %lld (ratio %.4f, max %.4f); reads: %s; writes: %s\n", read_errors + write_errors,
              error_ratio, opt.max_error_ratio, errline(rerr).c_str(), errline(werr).c_str());
  for (auto& s : samples)
    if (&s - &samples[0] < 6)
      std::printf("    [%.2fs] %s %s via %s: %s\n", s.at_s, s.role.c_str(), s.kind.c_str(), s.target.c_str(), s.what.c_str());
  if (xc_seen > 0)
    std::printf("  X-Cache header  on %lld reads, HIT on %lld (%.3f of the successful reads)\n", xc_seen, xc_hits,
                reads_ok ? double(xc_hits) / double(reads_ok) : 0.0);
  std::printf("  connections     %llu opened\n", (unsigned long long)connects);
  if (opt.rate)
    std::printf(
        "  open loop       %.1f ops/s scheduled; %lld started > %.0f ms late (max lag %.1f ms)%s\n",
        *opt.rate, sh.late.load(), double(kLateNs) / 1e6, double(sh.max_lag.load()) / 1e6,
        sh.late.load() ? ": the threads (or the machine) did not keep the rate" : "");
  for (auto& d : opt.during)
    std::printf("  during          '%s'@%g: %s\n", d.command.c_str(), d.at_s,
                d.started ? ("ran " + fmt("%.1f", d.start_s) + "-" + fmt("%.1f", d.end_s) + " s, exit " + std::to_string(d.exit_status)).c_str()
                          : "did not run");
  auto ranges_text = [](const Window& w) {
    std::string r;
    for (const auto& [from, to] : w.ranges) r += (r.empty() ? "" : ",") + fmt("%g", from) + "-" + fmt("%g", to);
    return r + " s";
  };
  for (size_t w = 0; w < opt.windows.size(); ++w) {
    const WindowStats& ws = wstats[w];
    std::printf("  window %-8s %s: reads %lld (ok %lld, checked %lld, STALE %lld, inversions %lld); writes %lld "
                "(ok %lld), latency p50 %.1f ms p99 %.1f ms max %.1f ms; errors %lld (reads %lld, writes %lld)\n",
                opt.windows[w].name.c_str(), ranges_text(opt.windows[w]).c_str(), ws.reads, ws.reads_ok, ws.checked,
                ws.stale, ws.inversions, ws.writes, ws.writes_ok, ws.p50, ws.p99, ws.max, ws.read_errors + ws.write_errors,
                ws.read_errors, ws.write_errors);
  }

  // Proxy metrics (deltas over the run).
  struct PM {
    std::string url;
    bool ok = false;
    double hits = 0, misses = 0, vfail = 0, inval = 0, stores = 0, p50 = 0, p99 = 0, checks = 0, sum = 0;
  };
  std::vector<PM> pms;
  PM tot;
  tot.url = "all";
  for (size_t i = 0; i < proxy_urls.size(); ++i) {
    PM p;
    p.url = proxy_urls[i].text;
    if (before[i] && after[i]) {
      auto d = [&](const char* k) {
        auto a = after[i]->find(k), b = before[i]->find(k);
        return (a == after[i]->end() ? 0 : a->second) - (b == before[i]->end() ? 0 : b->second);
      };
      auto g = [&](const char* k) {
        auto a = after[i]->find(k);
        return a == after[i]->end() ? 0.0 : a->second;
      };
      p.ok = true;
      p.hits = d("tierce_rcache_hits_total");
      p.misses = d("tierce_rcache_misses_total");
      p.vfail = d("tierce_rcache_version_failures_total");
      p.inval = d("tierce_rcache_stale_rejects_total");
      p.stores = d("tierce_rcache_stores_total");
      p.checks = d("tierce_rcache_version_check_seconds_count");
      p.sum = d("tierce_rcache_version_check_seconds_sum");
      p.p50 = g("tierce_rcache_version_check_seconds{quantile=\"0.5\"}");
      p.p99 = g("tierce_rcache_version_check_seconds{quantile=\"0.99\"}");
      tot.ok = true;
      tot.hits += p.hits;
      tot.misses += p.misses;
      tot.vfail += p.vfail;
      tot.inval += p.inval;
      tot.stores += p.stores;
      tot.checks += p.checks;
      tot.sum += p.sum;
    }
    pms.push_back(p);
  }
  auto ratio = [](const PM& p) {
    double l = p.hits + p.misses + p.vfail + p.inval;
    return l > 0 ? p.hits / l : 0.0;
  };
  if (!tierce_metrics) {
    std::printf("  proxy metrics   n/a (%s)\n", opt.direct ? "--direct" : "no /rcache-metrics on the proxies");
  } else {
    for (auto& p : pms) {
      if (!p.ok) {
        std::printf("  proxy %s: metrics n/a\n", p.url.c_str());
        continue;
      }
      std::printf("  proxy %s: hit ratio %.3f (hits %.0f, misses %.0f), version-check failures %.0f, "
                  "invalidations %.0f, stores %.0f, version check p50 %.1f us p99 %.1f us (%.0f checks, mean %.1f us)\n",
                  p.url.c_str(), ratio(p), p.hits, p.misses, p.vfail, p.inval, p.stores, p.p50 * 1e6, p.p99 * 1e6,
                  p.checks, p.checks > 0 ? p.sum / p.checks * 1e6 : 0.0);
    }
    std::printf("  proxies total   hit ratio %.3f, version-check failures %.0f, invalidations %.0f\n", ratio(tot),
                tot.vfail, tot.inval);
  }

  if (!stale.empty()) {
    std::printf("  first stale reads (of %zu stale markers):\n", stale.size());
    for (size_t k = 0; k < stale.size() && k < 10; ++k) {
      const ReadRec& r = reads[stale[k].read];
      const WriteRec& w = writes[stale[k].write];
      std::printf("    %s: seen %llu, expected >= %llu; read GET %s via %s started %.6f s ended %.6f s; "
                  "write %s to %s returned %.6f s (%.1f ms before the read)\n      headers: %s\n",
                  key_name(r.key).c_str(), (unsigned long long)r.seen, (unsigned long long)stale[k].expected,
                  r.path.c_str(), target_name(r.target, true).c_str(), rel_s(sh, r.t_start), rel_s(sh, r.t_end),
                  w.what.c_str(), target_name(w.target, false).c_str(), rel_s(sh, w.t_ret),
                  double(r.t_start - w.t_ret) / 1e6, r.headers.empty() ? "(none of interest)" : r.headers.c_str());
    }
  }
  if (!inv.found.empty()) {
    std::printf("  first read-read inversions (of %lld):\n", inversions);
    for (size_t k = 0; k < inv.found.size() && k < 5; ++k) {
      const ReadRec& r = reads[inv.found[k].later];
      const ReadRec& e = reads[inv.found[k].earlier];
      std::printf("    %s: seen %llu by GET %s via %s started %.6f s ended %.6f s; %llu seen by GET %s via %s "
                  "started %.6f s ended %.6f s (%.1f us before)\n",
                  key_name(r.key).c_str(), (unsigned long long)r.seen, r.path.c_str(),
                  target_name(r.target, true).c_str(), rel_s(sh, r.t_start), rel_s(sh, r.t_end),
                  (unsigned long long)e.seen, e.path.c_str(), target_name(e.target, true).c_str(),
                  rel_s(sh, e.t_start), rel_s(sh, e.t_end), double(r.t_start - e.t_end) / 1e3);
    }
  }
  if (!pass)
    for (auto& f : failures) std::printf("  FAILED: %s\n", f.c_str());
  std::fflush(stdout);

  if (!opt.json_path.empty()) {
    std::ostringstream j;
    j << "{\n  \"pass\": " << (pass ? "true" : "false") << ",\n  \"cache\": " << json_escape(opt.cache)
      << ",\n  \"direct\": " << (opt.direct ? "true" : "false") << ",\n  \"elapsed_s\": " << elapsed
      << ",\n  \"ops\": " << ops_done << ",\n  \"reads\": " << reads_total << ",\n  \"reads_ok\": " << reads_ok
      << ",\n  \"writes\": " << writes_total << ",\n  \"writes_ok\": " << writes_ok
      << ",\n  \"reads_per_s\": " << (elapsed > 0 ? double(reads_ok) / elapsed : 0)
      << ",\n  \"writes_per_s\": " << (elapsed > 0 ? double(writes_ok) / elapsed : 0)
      << ",\n  \"read_latency_ms\": {\"p50\": " << rp50 << ", \"p99\": " << rp99 << "}"
      << ",\n  \"write_latency_ms\": {\"p50\": " << wp50 << ", \"p99\": " << wp99 << "}"
      << ",\n  \"xcache_header_reads\": " << xc_seen << ",\n  \"xcache_hits\": " << xc_hits
      << ",\n  \"checked_reads\": " << checked << ",\n  \"stale_reads\": " << stale_reads
      << ",\n  \"strict\": " << (opt.strict ? "true" : "false") << ",\n  \"read_inversions\": " << inversions
      << ",\n  \"inversion_checked_reads\": " << inv.checked
      << ",\n  \"errors\": " << (read_errors + write_errors) << ",\n  \"error_ratio\": " << error_ratio
      << ",\n  \"max_error_ratio\": " << opt.max_error_ratio;
    auto emap = [&](const std::map<std::string, long long>& m) {
      std::string s = "{";
      for (auto& [k, v] : m) s += (s.size() > 1 ? ", " : "") + json_escape(k) + ": " + std::to_string(v);
      return s + "}";
    };
    j << ",\n  \"read_errors\": " << emap(rerr) << ",\n  \"write_errors\": " << emap(werr);
    if (opt.rate)
      j << ",\n  \"rate\": {\"ops_per_s\": " << *opt.rate << ", \"late\": " << sh.late.load()
        << ", \"late_ms\": " << double(kLateNs) / 1e6
        << ", \"max_lag_ms\": " << double(sh.max_lag.load()) / 1e6 << "}";
    if (opt.timeline) {
      j << ",\n  \"timeline\": [";
      for (size_t i = 0; i < seconds.size(); ++i) {
        SecondStats& ss = seconds[i];
        std::vector<double> tmp = ss.wlat;
        j << (i ? "," : "") << "\n    {\"t\": " << i << ", \"reads\": " << ss.reads
          << ", \"reads_ok\": " << ss.reads_ok << ", \"stale_reads\": " << ss.stale
          << ", \"writes\": " << ss.writes << ", \"writes_ok\": " << ss.writes_ok
          << ", \"errors\": " << ss.errors << ", \"write_latency_ms\": {\"p50\": " << pct(tmp, 0.5)
          << ", \"p99\": " << pct(tmp, 0.99) << "}}";
      }
      j << "]";
    }
    j << ",\n  \"during\": [";
    for (size_t i = 0; i < opt.during.size(); ++i) {
      auto& d = opt.during[i];
      j << (i ? ", " : "") << "{\"command\": " << json_escape(d.command) << ", \"at_s\": " << d.at_s
        << ", \"ran\": " << (d.started ? "true" : "false") << ", \"exit\": " << d.exit_status
        << ", \"start_s\": " << d.start_s << ", \"end_s\": " << d.end_s << "}";
    }
    j << "]";
    j << ",\n  \"windows\": [";
    for (size_t w = 0; w < opt.windows.size(); ++w) {
      const WindowStats& ws = wstats[w];
      j << (w ? "," : "") << "\n    {\"name\": " << json_escape(opt.windows[w].name) << ", \"ranges\": [";
      for (size_t r = 0; r < opt.windows[w].ranges.size(); ++r)
        j << (r ? ", " : "") << "[" << opt.windows[w].ranges[r].first << ", " << opt.windows[w].ranges[r].second << "]";
      j << "], \"reads\": " << ws.reads << ", \"reads_ok\": " << ws.reads_ok << ", \"checked_reads\": " << ws.checked
        << ", \"stale_reads\": " << ws.stale << ", \"read_inversions\": " << ws.inversions
        << ", \"writes\": " << ws.writes << ", \"writes_ok\": " << ws.writes_ok
        << ", \"write_latency_ms\": {\"p50\": " << ws.p50 << ", \"p99\": " << ws.p99 << ", \"max\": " << ws.max << "}"
        << ", \"errors\": " << (ws.read_errors + ws.write_errors) << ", \"read_errors\": " << ws.read_errors
        << ", \"write_errors\": " << ws.write_errors << ", \"write_latencies_ms\": [";
      for (size_t k = 0; k < ws.wlat.size(); ++k) j << (k ? ", " : "") << ws.wlat[k];
      j << "]}";
    }
    j << "]";
    if (tierce_metrics) {
      j << ",\n  \"proxies\": [";
      for (size_t i = 0; i < pms.size(); ++i) {
        auto& p = pms[i];
        j << (i ? ", " : "") << "{\"url\": " << json_escape(p.url);
        if (p.ok)
          j << ", \"hit_ratio\": " << ratio(p) << ", \"hits\": " << p.hits << ", \"misses\": " << p.misses
            << ", \"version_check_failures\": " << p.vfail << ", \"invalidations\": " << p.inval
            << ", \"stores\": " << p.stores << ", \"version_check_p50_us\": " << p.p50 * 1e6
            << ", \"version_check_p99_us\": " << p.p99 * 1e6 << ", \"version_checks\": " << p.checks;
        j << "}";
      }
      j << "],\n  \"hit_ratio\": " << ratio(tot) << ",\n  \"version_check_failures\": " << tot.vfail
        << ",\n  \"invalidations\": " << tot.inval;
    } else {
      j << ",\n  \"proxies\": null,\n  \"hit_ratio\": null";
    }
    j << ",\n  \"stale\": [";
    for (size_t k = 0; k < stale.size() && k < 10; ++k) {
      const ReadRec& r = reads[stale[k].read];
      const WriteRec& w = writes[stale[k].write];
      j << (k ? ",\n    " : "\n    ") << "{\"entity\": " << json_escape(key_name(r.key)) << ", \"seen\": " << r.seen
        << ", \"expected\": " << stale[k].expected << ", \"path\": " << json_escape(r.path)
        << ", \"via\": " << json_escape(target_name(r.target, true)) << ", \"read_start_s\": " << rel_s(sh, r.t_start)
        << ", \"read_end_s\": " << rel_s(sh, r.t_end) << ", \"write\": " << json_escape(w.what)
        << ", \"write_return_s\": " << rel_s(sh, w.t_ret) << ", \"headers\": " << json_escape(r.headers) << "}";
    }
    j << "],\n  \"inversions\": [";
    for (size_t k = 0; k < inv.found.size() && k < 5; ++k) {
      const ReadRec& r = reads[inv.found[k].later];
      const ReadRec& e = reads[inv.found[k].earlier];
      j << (k ? ",\n    " : "\n    ") << "{\"entity\": " << json_escape(key_name(r.key)) << ", \"seen\": " << r.seen
        << ", \"path\": " << json_escape(r.path) << ", \"via\": " << json_escape(target_name(r.target, true))
        << ", \"read_start_s\": " << rel_s(sh, r.t_start) << ", \"read_end_s\": " << rel_s(sh, r.t_end)
        << ", \"earlier_seen\": " << e.seen << ", \"earlier_path\": " << json_escape(e.path)
        << ", \"earlier_via\": " << json_escape(target_name(e.target, true))
        << ", \"earlier_start_s\": " << rel_s(sh, e.t_start) << ", \"earlier_end_s\": " << rel_s(sh, e.t_end)
        << ", \"gap_us\": " << double(r.t_start - e.t_end) / 1e3 << ", \"headers\": " << json_escape(r.headers)
        << ", \"earlier_headers\": " << json_escape(e.headers) << "}";
    }
    j << "],\n  \"failures\": [";
    for (size_t i = 0; i < failures.size(); ++i) j << (i ? ", " : "") << json_escape(failures[i]);
    j << "]\n}\n";
    std::ofstream f(opt.json_path);
    f << j.str();
    if (!f) std::fprintf(stderr, "tierce-check: cannot write %s\n", opt.json_path.c_str());
  }
  return pass ? 0 : 1;
}
