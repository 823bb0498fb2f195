// tools/tierce-check/report.cc — the text and JSON reports of a run (report.h).
#include "report.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tcheck {
namespace {

std::string json_escape(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const std::string& target_name(const Shared& sh, uint16_t t, bool read) {
  return (read ? sh.read_targets : sh.write_targets)[t].text;
}

std::string errline(const std::map<std::string, long long>& m) {
  std::string s;
  for (auto& [k, v] : m) s += (s.empty() ? "" : ", ") + k + " " + std::to_string(v);
  return s.empty() ? std::string("none") : s;
}

std::string ranges_text(const Window& w) {
  std::string r;
  for (const auto& [from, to] : w.ranges) r += (r.empty() ? "" : ",") + fmt("%g", from) + "-" + fmt("%g", to);
  return r + " s";
}

// --sql-writers: the writes straight to MariaDB, their bounded staleness and stale windows.
void print_sql(const Options& opt, const SqlAnalysis& q) {
  std::printf("  SQL writes      %lld ok of %lld to MariaDB %s, commit latency p50 %.2f ms p99 %.2f ms, %lld entity "
              "versions recorded\n",
              q.txns_ok, q.txns, opt.mariadb.text().c_str(), q.commit_p50, q.commit_p99, q.versions);
  std::printf("  SQL checked     %lld reads (an SQL write of the entity committed > %g ms before the read started)\n",
              q.checked, opt.sql_stale_bound_ms);
  std::printf("  SQL STALE READS %lld (older than an SQL write committed > %g ms before the read started)\n",
              q.stale_reads, opt.sql_stale_bound_ms);
  std::printf("  SQL stale window over %lld SQL entity versions: p50 %.1f ms p99 %.1f ms max %.1f ms; %lld non-zero "
              "(a read after the commit still showed an older version)\n",
              q.versions, q.p50, q.p99, q.max, q.nonzero);
}

void print_summary(const Options& opt, const Shared& sh, const Run& run, const Analysis& a) {
  const double elapsed = run.elapsed;
  std::printf("tierce-check: %s (cache=%s%s%s)\n", a.pass ? "PASS" : "FAIL", opt.cache.c_str(),
              opt.direct ? ", direct reads" : "", opt.strict ? ", strict" : "");
  std::printf("  time            %.2f s\n", elapsed);
  std::printf("  ops             %lld (reads %lld, writes %lld)\n", a.ops_done, run.reads_total, run.writes_total);
  std::printf("  reads           %lld ok, %.0f/s, latency p50 %.2f ms p99 %.2f ms\n", run.reads_ok,
              elapsed > 0 ? double(run.reads_ok) / elapsed : 0, a.rp50, a.rp99);
  std::printf("  writes          %lld ok, %.0f/s, latency p50 %.2f ms p99 %.2f ms, %zu entity versions recorded\n",
              run.writes_ok, elapsed > 0 ? double(run.writes_ok) / elapsed : 0, a.wp50, a.wp99, run.writes.size());
  std::printf("  checked reads   %lld (entity written before the read started)\n", a.checked);
  std::printf("  STALE READS     %lld\n", a.stale_reads);
  if (opt.sql_writers) print_sql(opt, a.sql);
  std::printf("  READ INVERSIONS %lld of %lld reads with an earlier-ended read of their entity (%s)\n", a.inversions,
              a.inv.checked, opt.strict ? "--strict: each fails the run" : "informational; --strict fails on them");
  std::printf("  errors          %lld (ratio %.4f, max %.4f); reads: %s; writes: %s\n", a.read_errors + a.write_errors,
              a.error_ratio, opt.max_error_ratio, errline(run.rerr).c_str(), errline(run.werr).c_str());
  for (size_t i = 0; i < run.samples.size() && i < 6; ++i) {
    const ErrorSample& s = run.samples[i];
    std::printf("    [%.2fs] %s %s via %s: %s\n", s.at_s, s.role.c_str(), s.kind.c_str(), s.target.c_str(),
                s.what.c_str());
  }
  if (run.xc_seen > 0)
    std::printf("  X-Cache header  on %lld reads, HIT on %lld (%.3f of the successful reads)\n", run.xc_seen,
                run.xc_hits, run.reads_ok ? double(run.xc_hits) / double(run.reads_ok) : 0.0);
  std::printf("  connections     %llu opened\n", (unsigned long long)run.connects);
  if (opt.rate)
    std::printf(
        "  open loop       %.1f ops/s scheduled; %lld started > %.0f ms late (max lag %.1f ms)%s\n",
        *opt.rate, sh.late.load(), double(kLateNs) / 1e6, double(sh.max_lag.load()) / 1e6,
        sh.late.load() ? ": the threads (or the machine) did not keep the rate" : "");
  for (auto& d : opt.during)
    std::printf("  during          '%s'@%g: %s\n", d.command.c_str(), d.at_s,
                d.started ? ("ran " + fmt("%.1f", d.start_s) + "-" + fmt("%.1f", d.end_s) + " s, exit " +
                             std::to_string(d.exit_status)).c_str()
                          : "did not run");
  for (size_t w = 0; w < opt.windows.size(); ++w) {
    const WindowStats& ws = a.windows[w];
    std::printf("  window %-8s %s: reads %lld (ok %lld, checked %lld, STALE %lld, inversions %lld); writes %lld "
                "(ok %lld), latency p50 %.1f ms p99 %.1f ms max %.1f ms; errors %lld (reads %lld, writes %lld)\n",
                opt.windows[w].name.c_str(), ranges_text(opt.windows[w]).c_str(), ws.reads, ws.reads_ok, ws.checked,
                ws.stale, ws.inversions, ws.writes, ws.writes_ok, ws.p50, ws.p99, ws.max,
                ws.read_errors + ws.write_errors, ws.read_errors, ws.write_errors);
  }
}

void print_proxies(const Options& opt, const ProxyReport& pr) {
  if (!pr.tierce_metrics) {
    std::printf("  proxy metrics   n/a (%s)\n", opt.direct ? "--direct" : "no /rcache-metrics on the proxies");
    return;
  }
  for (auto& p : pr.proxies) {
    if (!p.ok) {
      std::printf("  proxy %s: metrics n/a\n", p.url.c_str());
      continue;
    }
    std::printf("  proxy %s: hit ratio %.3f (hits %.0f, misses %.0f), version-check failures %.0f, "
                "invalidations %.0f, stores %.0f, version check p50 %.1f us p99 %.1f us (%.0f checks, mean %.1f us)\n",
                p.url.c_str(), p.hit_ratio(), p.hits, p.misses, p.vfail, p.inval, p.stores, p.p50 * 1e6, p.p99 * 1e6,
                p.checks, p.checks > 0 ? p.sum / p.checks * 1e6 : 0.0);
  }
  std::printf("  proxies total   hit ratio %.3f, version-check failures %.0f, invalidations %.0f\n",
              pr.total.hit_ratio(), pr.total.vfail, pr.total.inval);
}

void print_findings(const Shared& sh, const Run& run, const Analysis& a) {
  if (!a.stale.empty()) {
    std::printf("  first stale reads (of %zu stale markers):\n", a.stale.size());
    for (size_t k = 0; k < a.stale.size() && k < 10; ++k) {
      const ReadRec& r = run.reads[a.stale[k].read];
      const WriteRec& w = run.writes[a.stale[k].write];
      std::printf("    %s: seen %llu, expected >= %llu; read GET %s via %s started %.6f s ended %.6f s; "
                  "write %s to %s returned %.6f s (%.1f ms before the read)\n      headers: %s\n",
                  key_name(r.key).c_str(), (unsigned long long)r.seen, (unsigned long long)a.stale[k].expected,
                  r.path.c_str(), target_name(sh, r.target, true).c_str(), run.rel(r.t_start), run.rel(r.t_end),
                  w.what.c_str(), target_name(sh, w.target, false).c_str(), run.rel(w.t_ret),
                  double(r.t_start - w.t_ret) / 1e6, r.headers.empty() ? "(none of interest)" : r.headers.c_str());
    }
  }
  if (!a.sql.stale.empty()) {
    std::printf("  first SQL stale reads (of %zu stale markers):\n", a.sql.stale.size());
    for (size_t k = 0; k < a.sql.stale.size() && k < 10; ++k) {
      const ReadRec& r = run.reads[a.sql.stale[k].read];
      const WriteRec& w = run.writes[a.sql.stale[k].write];
      std::printf("    %s: seen %llu, expected >= %llu; read GET %s via %s started %.6f s ended %.6f s; "
                  "%s committed %.6f s (%.1f ms before the read)\n      headers: %s\n",
                  key_name(r.key).c_str(), (unsigned long long)r.seen, (unsigned long long)a.sql.stale[k].expected,
                  r.path.c_str(), target_name(sh, r.target, true).c_str(), run.rel(r.t_start), run.rel(r.t_end),
                  w.what.c_str(), run.rel(w.t_ret), double(r.t_start - w.t_ret) / 1e6,
                  r.headers.empty() ? "(none of interest)" : r.headers.c_str());
    }
  }
  if (!a.inv.found.empty()) {
    std::printf("  first read-read inversions (of %lld):\n", a.inversions);
    for (size_t k = 0; k < a.inv.found.size() && k < 5; ++k) {
      const ReadRec& r = run.reads[a.inv.found[k].later];
      const ReadRec& e = run.reads[a.inv.found[k].earlier];
      std::printf("    %s: seen %llu by GET %s via %s started %.6f s ended %.6f s; %llu seen by GET %s via %s "
                  "started %.6f s ended %.6f s (%.1f us before)\n",
                  key_name(r.key).c_str(), (unsigned long long)r.seen, r.path.c_str(),
                  target_name(sh, r.target, true).c_str(), run.rel(r.t_start), run.rel(r.t_end),
                  (unsigned long long)e.seen, e.path.c_str(), target_name(sh, e.target, true).c_str(),
                  run.rel(e.t_start), run.rel(e.t_end), double(r.t_start - e.t_end) / 1e3);
    }
  }
  if (!a.pass)
    for (auto& f : a.failures) std::printf("  FAILED: %s\n", f.c_str());
}

std::string json_errors(const std::map<std::string, long long>& m) {
  std::string s = "{";
  for (auto& [k, v] : m) s += (s.size() > 1 ? ", " : "") + json_escape(k) + ": " + std::to_string(v);
  return s + "}";
}

void json_sql(std::ostringstream& j, const Options& opt, const SqlAnalysis& q) {
  j << ",\n  \"sql_stale_reads\": " << q.stale_reads << ",\n  \"sql\": {\"writers\": " << opt.sql_writers
    << ", \"mariadb\": " << json_escape(opt.mariadb.text()) << ", \"stale_bound_ms\": " << opt.sql_stale_bound_ms
    << ", \"writes\": " << q.txns << ", \"writes_ok\": " << q.txns_ok << ", \"entity_versions\": " << q.versions
    << ", \"checked_reads\": " << q.checked << ", \"stale_reads\": " << q.stale_reads
    << ", \"commit_latency_ms\": {\"p50\": " << q.commit_p50 << ", \"p99\": " << q.commit_p99 << "}"
    << ", \"stale_window_ms\": {\"count\": " << q.versions << ", \"p50\": " << q.p50 << ", \"p99\": " << q.p99
    << ", \"max\": " << q.max << ", \"nonzero\": " << q.nonzero << "}}";
}

void json_summary(std::ostringstream& j, const Options& opt, const Shared& sh, const Run& run, const Analysis& a) {
  const double elapsed = run.elapsed;
  j << "{\n  \"pass\": " << (a.pass ? "true" : "false") << ",\n  \"cache\": " << json_escape(opt.cache)
    << ",\n  \"direct\": " << (opt.direct ? "true" : "false") << ",\n  \"elapsed_s\": " << elapsed
    << ",\n  \"ops\": " << a.ops_done << ",\n  \"reads\": " << run.reads_total << ",\n  \"reads_ok\": " << run.reads_ok
    << ",\n  \"writes\": " << run.writes_total << ",\n  \"writes_ok\": " << run.writes_ok
    << ",\n  \"reads_per_s\": " << (elapsed > 0 ? double(run.reads_ok) / elapsed : 0)
    << ",\n  \"writes_per_s\": " << (elapsed > 0 ? double(run.writes_ok) / elapsed : 0)
    << ",\n  \"read_latency_ms\": {\"p50\": " << a.rp50 << ", \"p99\": " << a.rp99 << "}"
    << ",\n  \"write_latency_ms\": {\"p50\": " << a.wp50 << ", \"p99\": " << a.wp99 << "}"
    << ",\n  \"xcache_header_reads\": " << run.xc_seen << ",\n  \"xcache_hits\": " << run.xc_hits
    << ",\n  \"checked_reads\": " << a.checked << ",\n  \"stale_reads\": " << a.stale_reads
    << ",\n  \"strict\": " << (opt.strict ? "true" : "false") << ",\n  \"read_inversions\": " << a.inversions
    << ",\n  \"inversion_checked_reads\": " << a.inv.checked
    << ",\n  \"errors\": " << (a.read_errors + a.write_errors) << ",\n  \"error_ratio\": " << a.error_ratio
    << ",\n  \"max_error_ratio\": " << opt.max_error_ratio;
  j << ",\n  \"read_errors\": " << json_errors(run.rerr) << ",\n  \"write_errors\": " << json_errors(run.werr);
  if (opt.sql_writers) json_sql(j, opt, a.sql);
  if (opt.rate)
    j << ",\n  \"rate\": {\"ops_per_s\": " << *opt.rate << ", \"late\": " << sh.late.load()
      << ", \"late_ms\": " << double(kLateNs) / 1e6 << ", \"max_lag_ms\": " << double(sh.max_lag.load()) / 1e6
      << "}";
}

void json_timeline(std::ostringstream& j, const Options& opt, const Analysis& a) {
  if (opt.timeline) {
    j << ",\n  \"timeline\": [";
    for (size_t i = 0; i < a.seconds.size(); ++i) {
      const SecondStats& ss = a.seconds[i];
      std::vector<double> tmp = ss.wlat;
      j << (i ? "," : "") << "\n    {\"t\": " << i << ", \"reads\": " << ss.reads << ", \"reads_ok\": " << ss.reads_ok
        << ", \"stale_reads\": " << ss.stale << ", \"writes\": " << ss.writes << ", \"writes_ok\": " << ss.writes_ok
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
    const WindowStats& ws = a.windows[w];
    j << (w ? "," : "") << "\n    {\"name\": " << json_escape(opt.windows[w].name) << ", \"ranges\": [";
    for (size_t r = 0; r < opt.windows[w].ranges.size(); ++r)
      j << (r ? ", " : "") << "[" << opt.windows[w].ranges[r].first << ", " << opt.windows[w].ranges[r].second << "]";
    j << "], \"reads\": " << ws.reads << ", \"reads_ok\": " << ws.reads_ok << ", \"checked_reads\": " << ws.checked
      << ", \"stale_reads\": " << ws.stale << ", \"read_inversions\": " << ws.inversions << ", \"writes\": " << ws.writes
      << ", \"writes_ok\": " << ws.writes_ok << ", \"write_latency_ms\": {\"p50\": " << ws.p50
      << ", \"p99\": " << ws.p99 << ", \"max\": " << ws.max << "}"
      << ", \"errors\": " << (ws.read_errors + ws.write_errors) << ", \"read_errors\": " << ws.read_errors
      << ", \"write_errors\": " << ws.write_errors << ", \"write_latencies_ms\": [";
    for (size_t k = 0; k < ws.wlat.size(); ++k) j << (k ? ", " : "") << ws.wlat[k];
    j << "]}";
  }
  j << "]";
}

void json_proxies(std::ostringstream& j, const ProxyReport& pr) {
  if (!pr.tierce_metrics) {
    j << ",\n  \"proxies\": null,\n  \"hit_ratio\": null";
    return;
  }
  j << ",\n  \"proxies\": [";
  for (size_t i = 0; i < pr.proxies.size(); ++i) {
    auto& p = pr.proxies[i];
    j << (i ? ", " : "") << "{\"url\": " << json_escape(p.url);
    if (p.ok)
      j << ", \"hit_ratio\": " << p.hit_ratio() << ", \"hits\": " << p.hits << ", \"misses\": " << p.misses
        << ", \"version_check_failures\": " << p.vfail << ", \"invalidations\": " << p.inval
        << ", \"stores\": " << p.stores << ", \"version_check_p50_us\": " << p.p50 * 1e6
        << ", \"version_check_p99_us\": " << p.p99 * 1e6 << ", \"version_checks\": " << p.checks;
    j << "}";
  }
  j << "],\n  \"hit_ratio\": " << pr.total.hit_ratio() << ",\n  \"version_check_failures\": " << pr.total.vfail
    << ",\n  \"invalidations\": " << pr.total.inval;
}

void json_findings(std::ostringstream& j, const Shared& sh, const Run& run, const Analysis& a) {
  j << ",\n  \"stale\": [";
  for (size_t k = 0; k < a.stale.size() && k < 10; ++k) {
    const ReadRec& r = run.reads[a.stale[k].read];
    const WriteRec& w = run.writes[a.stale[k].write];
    j << (k ? ",\n    " : "\n    ") << "{\"entity\": " << json_escape(key_name(r.key)) << ", \"seen\": " << r.seen
      << ", \"expected\": " << a.stale[k].expected << ", \"path\": " << json_escape(r.path)
      << ", \"via\": " << json_escape(target_name(sh, r.target, true)) << ", \"read_start_s\": " << run.rel(r.t_start)
      << ", \"read_end_s\": " << run.rel(r.t_end) << ", \"write\": " << json_escape(w.what)
      << ", \"write_return_s\": " << run.rel(w.t_ret) << ", \"headers\": " << json_escape(r.headers) << "}";
  }
  j << "],\n  \"sql_stale\": [";
  for (size_t k = 0; k < a.sql.stale.size() && k < 10; ++k) {
    const ReadRec& r = run.reads[a.sql.stale[k].read];
    const WriteRec& w = run.writes[a.sql.stale[k].write];
    j << (k ? ",\n    " : "\n    ") << "{\"entity\": " << json_escape(key_name(r.key)) << ", \"seen\": " << r.seen
      << ", \"expected\": " << a.sql.stale[k].expected << ", \"path\": " << json_escape(r.path)
      << ", \"via\": " << json_escape(target_name(sh, r.target, true)) << ", \"read_start_s\": " << run.rel(r.t_start)
      << ", \"read_end_s\": " << run.rel(r.t_end) << ", \"write\": " << json_escape(w.what)
      << ", \"commit_s\": " << run.rel(w.t_ret) << ", \"commit_sent_s\": " << run.rel(w.t_commit_sent)
      << ", \"headers\": " << json_escape(r.headers) << "}";
  }
  j << "],\n  \"inversions\": [";
  for (size_t k = 0; k < a.inv.found.size() && k < 5; ++k) {
    const ReadRec& r = run.reads[a.inv.found[k].later];
    const ReadRec& e = run.reads[a.inv.found[k].earlier];
    j << (k ? ",\n    " : "\n    ") << "{\"entity\": " << json_escape(key_name(r.key)) << ", \"seen\": " << r.seen
      << ", \"path\": " << json_escape(r.path) << ", \"via\": " << json_escape(target_name(sh, r.target, true))
      << ", \"read_start_s\": " << run.rel(r.t_start) << ", \"read_end_s\": " << run.rel(r.t_end)
      << ", \"earlier_seen\": " << e.seen << ", \"earlier_path\": " << json_escape(e.path)
      << ", \"earlier_via\": " << json_escape(target_name(sh, e.target, true))
      << ", \"earlier_start_s\": " << run.rel(e.t_start) << ", \"earlier_end_s\": " << run.rel(e.t_end)
      << ", \"gap_us\": " << double(r.t_start - e.t_end) / 1e3 << ", \"headers\": " << json_escape(r.headers)
      << ", \"earlier_headers\": " << json_escape(e.headers) << "}";
  }
  j << "],\n  \"failures\": [";
  for (size_t i = 0; i < a.failures.size(); ++i) j << (i ? ", " : "") << json_escape(a.failures[i]);
  j << "]\n}\n";
}

}  // namespace

double ProxyDelta::hit_ratio() const {
  double l = hits + misses + vfail + inval;
  return l > 0 ? hits / l : 0.0;
}

ProxyReport proxy_report(const std::vector<Url>& urls, const std::vector<std::optional<Metrics>>& before,
                         const std::vector<std::optional<Metrics>>& after, bool tierce_metrics) {
  ProxyReport pr;
  pr.tierce_metrics = tierce_metrics;
  ProxyDelta& tot = pr.total;
  tot.url = "all";
  for (size_t i = 0; i < urls.size(); ++i) {
    ProxyDelta p;
    p.url = urls[i].text;
    if (before[i] && after[i]) {
      auto d = [&](const char* k) {
        auto x = after[i]->find(k), y = before[i]->find(k);
        return (x == after[i]->end() ? 0 : x->second) - (y == before[i]->end() ? 0 : y->second);
      };
      auto g = [&](const char* k) {
        auto x = after[i]->find(k);
        return x == after[i]->end() ? 0.0 : x->second;
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
    pr.proxies.push_back(p);
  }
  return pr;
}

void print_report(const Options& opt, const Shared& sh, const Run& run, const Analysis& a, const ProxyReport& pr) {
  print_summary(opt, sh, run, a);
  print_proxies(opt, pr);
  print_findings(sh, run, a);
  std::fflush(stdout);
}

void write_json(const Options& opt, const Shared& sh, const Run& run, const Analysis& a, const ProxyReport& pr) {
  std::ostringstream j;
  json_summary(j, opt, sh, run, a);
  json_timeline(j, opt, a);
  json_proxies(j, pr);
  json_findings(j, sh, run, a);
  std::ofstream f(opt.json_path);
  f << j.str();
  if (!f) std::fprintf(stderr, "tierce-check: cannot write %s\n", opt.json_path.c_str());
}

}  // namespace tcheck
